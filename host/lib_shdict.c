/*
** cohost.core.shdict: shared dictionaries (ngx.shared.DICT's API), one
** fixed-size store per name, shared by every worker thread.
**
** A store is one contiguous mmap'd region of the size asked for: a header,
** the hash buckets, then an arena of blocks managed by the TLSF allocator
** of shdict/tlsf.c (two-level segregated fit: O(1) allocation and free
** with coalescing).
** Every link inside the region is a 32-bit offset from its start, never a
** pointer, and the region is mapped MAP_SHARED with a process-shared mutex,
** so a store made before the fork (--shdict, ch_shdict_create) serves every
** worker process of --processes. One made by a script in a worker process
** is that process's alone.
**
** Locking: one pthread mutex per store, kept in the region. It is held only
** by C code that neither yields nor calls a Lua API function that can raise
** (results are copied out first and pushed after the unlock), so a holder
** always finishes promptly: a worker that finds the mutex taken blocks its
** thread (all its coroutines) for as long as one operation takes, a few
** hundred ns for everything but flush_all, flush_expired and get_keys,
** which walk the entries (O(n)). No coroutine can hold it across a switch,
** so waiting on it never deadlocks.
**
** A process can still die holding it (SIGKILL, a crash): the mutex is
** robust, so the next locker gets EOWNERDEAD instead of waiting forever.
** It then checks the whole store (as check() does) and empties it if the
** dead holder left it half-changed; either way it logs what happened.
*/
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include <lauxlib.h>

#include "log.h"
#include "worker.h"
#include "vm/task.h"
#include "lib.h"
#include "panic.h"
#include "shdict/tlsf.h"

#define SHDICT_MT "cohost.shdict"

/* -- Region layout --------------------------------------------------------- */

#define SHDICT_MIN_SIZE 8192u         /* leaves ~5.5 KiB for entries */
#define SHDICT_MAX_SIZE 0xfffff000u   /* offsets are 32-bit */

/* The region's header. spec/process_spec.lua mirrors its fields up to
** count, to damage a store on purpose. */
struct store {
  pthread_mutex_t lock;     /* guards everything below and the arena;
                            ** robust and process-shared */
  char name[64];            /* for logs, cut to fit; read-only */
  uint64_t seed;            /* hash seed; read-only */
  uint32_t size;            /* capacity in bytes, as created; read-only */
  uint32_t nbuckets;        /* a power of two; read-only */
  uint32_t buckets;         /* offset of the bucket array; read-only */
  uint32_t lru_head;        /* most recently used entry, 0 if none */
  uint32_t lru_tail;        /* least recently used entry */
  uint32_t count;           /* entries */
  struct ch_tlsf heap;      /* the arena's allocator, offsets from the
                            ** region's start */
};

/* An entry is the payload of one used block: this header, the value
** (8-aligned, so numbers and list heads are aligned), then the key. Its
** cost in the arena is 48 + value + key bytes, rounded up to 8. */
struct ent {
  uint32_t hnext;      /* next entry in this bucket, 0 ends */
  uint32_t newer;      /* LRU neighbour toward the head, 0 at the head */
  uint32_t older;      /* toward the tail, 0 at the tail */
  uint32_t hash;
  uint64_t expires;    /* CLOCK_MONOTONIC ms; 0: never */
  uint32_t vlen;       /* value bytes */
  uint32_t flags;      /* user flags */
  uint16_t klen;       /* key bytes, 1..65535 */
  uint8_t type;        /* T_* */
  uint8_t pad[5];
  char data[];
};
_Static_assert(sizeof(struct ent) == 40, "entry header is 40 bytes");

/* Value types, numbered as Lua's (and OpenResty's). */
enum { T_NIL = 0, T_BOOL = 1, T_NUM = 3, T_STR = 4, T_LIST = 5 };

/* A list value: the entry's value is this head; each element is a block
** of its own, costing 24 + its bytes, rounded up to 8. */
struct list {
  uint32_t first, last;  /* element offsets, 0 when empty */
  uint32_t len;
  uint32_t pad;
};

struct lnode {
  uint32_t prev, next;   /* neighbours toward first and last */
  uint32_t len;          /* bytes of data */
  uint8_t type;          /* T_STR or T_NUM */
  uint8_t pad[3];
  char data[];
};

static inline void *at(struct store *s, uint32_t off) { return (char *)s + off; }
static inline struct ent *E(struct store *s, uint32_t off) { return at(s, off); }
static inline uint32_t *bucket(struct store *s, uint32_t h)
{
  return (uint32_t *)at(s, s->buckets) + (h & (s->nbuckets - 1));
}
static inline struct list *list_of(struct ent *e) { return (struct list *)e->data; }
static inline char *key_of(struct ent *e) { return e->data + e->vlen; }
static inline uint32_t alloc(struct store *s, uint64_t need) { return ch_tlsf_alloc(&s->heap, s, need); }
static inline void release(struct store *s, uint32_t off) { ch_tlsf_free(&s->heap, s, off); }

/* -- Entries -------------------------------------------------------------- */

/* The time, read at most once per operation. */
struct clk {
  uint64_t now;   /* CLOCK_MONOTONIC ms, 0 until read */
};

static uint64_t now_ms(struct clk *c)
{
  if (!c->now) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    c->now = (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
  }
  return c->now;
}

static int expired(struct ent *e, struct clk *c)
{
  return e->expires && e->expires <= now_ms(c);
}

/* The expiry time for a TTL of ttl seconds (0: never). A positive TTL
** below 1 ms counts as 1 ms rather than as "never". */
static uint64_t expiry(double ttl, struct clk *c)
{
  if (ttl <= 0) return 0;
  double ms = ceil(ttl * 1000);
  if (ms > 1e15) ms = 1e15;   /* ~31,000 years */
  return now_ms(c) + (uint64_t)ms;
}

static uint32_t hash_key(uint64_t seed, const char *k, size_t n)
{
  uint64_t h = seed ^ ((uint64_t)n * 0x9e3779b97f4a7c15ull);
  while (n >= 8) {
    uint64_t w;
    memcpy(&w, k, 8);
    h = (h ^ w) * 0xbf58476d1ce4e5b9ull;
    h ^= h >> 31;
    k += 8;
    n -= 8;
  }
  if (n) {
    uint64_t w = 0;
    memcpy(&w, k, n);
    h = (h ^ w) * 0xbf58476d1ce4e5b9ull;
  }
  h ^= h >> 32;
  h *= 0x94d049bb133111ebull;
  h ^= h >> 29;
  return (uint32_t)h;
}

static uint32_t find(struct store *s, const char *k, size_t kn, uint32_t h)
{
  for (uint32_t off = *bucket(s, h); off; ) {
    struct ent *e = E(s, off);
    if (e->hash == h && e->klen == kn && memcmp(key_of(e), k, kn) == 0) return off;
    off = e->hnext;
  }
  return 0;
}

static void lru_unlink(struct store *s, uint32_t off)
{
  struct ent *e = E(s, off);
  if (e->newer) E(s, e->newer)->older = e->older;
  else s->lru_head = e->older;
  if (e->older) E(s, e->older)->newer = e->newer;
  else s->lru_tail = e->newer;
}

static void lru_push(struct store *s, uint32_t off)
{
  struct ent *e = E(s, off);
  e->newer = 0;
  e->older = s->lru_head;
  if (s->lru_head) E(s, s->lru_head)->newer = off;
  else s->lru_tail = off;
  s->lru_head = off;
}

static void touch(struct store *s, uint32_t off)
{
  if (s->lru_head == off) return;
  lru_unlink(s, off);
  lru_push(s, off);
}

/* Links a filled-in entry into its bucket and at the LRU head. */
static void link_entry(struct store *s, uint32_t off)
{
  struct ent *e = E(s, off);
  uint32_t *b = bucket(s, e->hash);
  e->hnext = *b;
  *b = off;
  lru_push(s, off);
  s->count++;
}

static void remove_entry(struct store *s, uint32_t off)
{
  struct ent *e = E(s, off);
  uint32_t *p = bucket(s, e->hash);
  while (*p != off) p = &E(s, *p)->hnext;
  *p = e->hnext;
  lru_unlink(s, off);
  if (e->type == T_LIST) {
    for (uint32_t n = list_of(e)->first; n; ) {
      uint32_t next = ((struct lnode *)at(s, n))->next;
      release(s, n);
      n = next;
    }
  }
  release(s, off);
  s->count--;
}

/* Least recently used entries looked at for expired ones before any
** unexpired entry is evicted. Bounded so that a full store of long-lived
** entries does not pay a long walk on every store. */
#define EXPIRED_SCAN 32

/* Allocates need payload bytes, making room when the arena is full: first
** by freeing expired entries among the EXPIRED_SCAN least recently used,
** then, unless safe, by evicting from the LRU tail (expired or not) until
** the block fits. keep, an entry being added to (at the LRU head), is never
** evicted. Sets *forcible when an unexpired entry was evicted. Returns the
** payload offset or 0 ("no memory"). */
static uint32_t alloc_room(struct store *s, uint64_t need, int safe, uint32_t keep,
                           struct clk *c, int *forcible)
{
  uint32_t r = alloc(s, need);
  if (r || !ch_tlsf_fits(&s->heap, need)) return r;
  uint32_t off = s->lru_tail;
  for (int i = 0; off && i < EXPIRED_SCAN; i++) {
    uint32_t newer = E(s, off)->newer;
    if (off != keep && expired(E(s, off), c)) {
      remove_entry(s, off);
      if ((r = alloc(s, need))) return r;
    }
    off = newer;
  }
  if (safe) return 0;
  while ((off = s->lru_tail) && off != keep) {
    if (!expired(E(s, off), c)) *forcible = 1;
    remove_entry(s, off);
    if ((r = alloc(s, need))) return r;
  }
  return 0;
}

/* -- Stores and the registry ---------------------------------------------- */

/* The process's stores by name. They live until the process ends. */
struct dict {
  struct dict *next;
  struct store *s;
  int fixed;           /* made by --shdict: new() with any size finds it */
  char name[];
};

static struct dict *dicts;
static pthread_mutex_t dicts_lock = PTHREAD_MUTEX_INITIALIZER;

static struct dict *dict_find(const char *name)
{
  for (struct dict *d = dicts; d; d = d->next)
    if (strcmp(d->name, name) == 0) return d;
  return NULL;
}

/* Lays out an empty store in s (size and seed set): no entries, the whole
** arena one free block. fresh: the region is the kernel's zero pages, so
** the bucket array is left untouched (and uncommitted); else it is
** cleared, O(buckets). */
static void store_format(struct store *s, int fresh)
{
  uint32_t size = s->size;
  /* One bucket per 128 bytes (3% of the store), so chains stay short even
  ** when entries are small. */
  uint32_t nb = 16;
  while (nb * 2 <= size / 128) nb *= 2;
  s->nbuckets = nb;
  s->buckets = (uint32_t)((sizeof *s + 7) & ~7ul);
  s->lru_head = s->lru_tail = s->count = 0;
  if (!fresh) memset(at(s, s->buckets), 0, (size_t)nb * 4);
  ch_tlsf_init(&s->heap, s, s->buckets + nb * 4, size);
}

/* Maps and initialises a store of size bytes; NULL if the kernel refuses.
** Pages are touched only as entries use them (MAP_NORESERVE; the bucket
** array and free lists start out as the kernel's zero pages). */
static struct store *store_new(const char *name, uint32_t size)
{
  size_t page = (size_t)sysconf(_SC_PAGESIZE);
  size_t len = ((size_t)size + page - 1) & ~(page - 1);
  void *p = mmap(NULL, len, PROT_READ | PROT_WRITE,
                 MAP_SHARED | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) return NULL;
  struct store *s = p;

  /* Process-shared so a forked worker can use the same region; robust so
  ** a worker killed while it holds the lock does not wedge the others
  ** (see lock()); adaptive so a contended lock spins briefly before
  ** sleeping, as holds are short. */
  pthread_mutexattr_t a;
  pthread_mutexattr_init(&a);
  pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
  pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST);
  pthread_mutexattr_settype(&a, PTHREAD_MUTEX_ADAPTIVE_NP);
  if (pthread_mutex_init(&s->lock, &a) != 0) {
    pthread_mutexattr_destroy(&a);
    munmap(p, len);
    return NULL;
  }
  pthread_mutexattr_destroy(&a);

  if (getrandom(&s->seed, sizeof s->seed, GRND_NONBLOCK) != sizeof s->seed)
    s->seed = (uint64_t)(uintptr_t)p ^ (uint64_t)time(NULL) * 0x9e3779b97f4a7c15ull;
  s->size = size;
  snprintf(s->name, sizeof s->name, "%s", name);
  store_format(s, 1);
  return s;
}

/* -- Lua: arguments -------------------------------------------------------- */

/* This worker's dict metatable, for a check cheaper than luaL_checkudata
** (which interns the name and reads the registry on every call); one
** lua_State per worker thread, and LuaJIT never moves objects. */
static __thread const void *dict_mt;

static struct store *check_dict(lua_State *L)
{
  struct dict **u = lua_touserdata(L, 1);
  if (u && lua_getmetatable(L, 1)) {
    int ok = lua_topointer(L, -1) == dict_mt;
    lua_pop(L, 1);
    if (ok) return (*u)->s;
  }
  return (*(struct dict **)luaL_checkudata(L, 1, SHDICT_MT))->s;
}

struct key {
  const char *p;
  size_t n;
  uint32_t h;
};

/* Pushes nil, msg (or false, msg): a soft failure, as OpenResty returns. */
static int fail(lua_State *L, int falsy, const char *msg)
{
  if (falsy) lua_pushboolean(L, 0);
  else lua_pushnil(L);
  lua_pushstring(L, msg);
  return 2;
}

/* Reads the key at i. A nil, empty or over-long key is a soft failure
** (OpenResty's "nil key", "empty key", "key too long"): returns the error
** string. Keys that are neither strings nor numbers raise. */
static const char *check_key(lua_State *L, int i, struct store *s, struct key *k)
{
  int t = lua_type(L, i);
  if (t == LUA_TNIL || t == LUA_TNONE) return "nil key";
  if (t != LUA_TSTRING && t != LUA_TNUMBER) luaL_typerror(L, i, "string");
  k->p = lua_tolstring(L, i, &k->n);
  if (k->n == 0) return "empty key";
  if (k->n > 65535) return "key too long";
  k->h = hash_key(s->seed, k->p, k->n);
  return NULL;
}

/* An optional TTL in seconds at i: 0 when absent; negative raises. */
static double opt_ttl(lua_State *L, int i, const char *what)
{
  if (lua_isnoneornil(L, i)) return 0;
  double t = luaL_checknumber(L, i);
  if (!(t >= 0)) luaL_argerror(L, i, what);
  return t;
}

struct val {
  int type;          /* T_* */
  const char *p;     /* bytes to store */
  size_t n;
  double num;        /* T_NUM */
  char b;            /* T_BOOL: 0 or 1 */
};

/* Reads the value at i; 0 if its type cannot be stored. */
static int check_val(lua_State *L, int i, struct val *v)
{
  switch (lua_type(L, i)) {
  case LUA_TNIL: case LUA_TNONE:
    v->type = T_NIL; v->p = NULL; v->n = 0;
    return 1;
  case LUA_TBOOLEAN:
    v->type = T_BOOL; v->b = (char)lua_toboolean(L, i); v->p = &v->b; v->n = 1;
    return 1;
  case LUA_TNUMBER:
    v->type = T_NUM; v->num = lua_tonumber(L, i); v->p = (const char *)&v->num; v->n = 8;
    return 1;
  case LUA_TSTRING:
    v->type = T_STR; v->p = lua_tolstring(L, i, &v->n);
    return 1;
  default:
    return 0;
  }
}

/* A per-thread buffer for values and keys copied out under the lock. It
** only grows while locked (realloc cannot raise) and is trimmed after the
** push, so a Lua error in the push leaks nothing. */
static __thread struct {
  char *p;
  size_t cap;
} scratch;

static char *scratch_get(size_t n)
{
  if (n > scratch.cap) {
    char *p = realloc(scratch.p, n);
    if (!p) return NULL;
    scratch.p = p;
    scratch.cap = n;
  }
  return scratch.p;
}

static void scratch_trim(void)
{
  if (scratch.cap > 65536) {
    free(scratch.p);
    scratch.p = NULL;
    scratch.cap = 0;
  }
}

static const char *check_store(struct store *s);

/* Takes s's lock. A holder that died (EOWNERDEAD: its process was killed
** mid-operation) may have left the store half-changed: it is checked,
** O(n), and emptied if broken, then the lock is marked usable again. */
static void lock(struct store *s)
{
  int r = pthread_mutex_lock(&s->lock);
  if (r == 0) return;
  if (r != EOWNERDEAD) ch_panic("shared dict '%s': lock: %s", s->name, strerror(r));
  const char *bad = check_store(s);
  if (bad) store_format(s, 0);
  pthread_mutex_consistent(&s->lock);
  if (bad)
    ch_log(CH_LOG_ERR, "shared dict '%s': a process died holding its lock and left it "
           "damaged (%s): every entry was dropped", s->name, bad);
  else
    ch_log(CH_LOG_WARN, "shared dict '%s': a process died holding its lock; the store "
           "checked intact", s->name);
}

#define LOCK(s) lock(s)
#define UNLOCK(s) pthread_mutex_unlock(&(s)->lock)

/* A value copied out of the store, to push once unlocked. */
struct out {
  int type;
  double num;
  const char *p;     /* T_STR: bytes, in buf or scratch */
  size_t n;
  int b;
  char buf[64];      /* small strings: no scratch */
};

/* Copies type/bytes into o; 0 if a buffer could not be had. Locked. */
static int copy_out(struct out *o, int type, const char *data, size_t n)
{
  o->type = type;
  if (type == T_NUM) memcpy(&o->num, data, 8);
  else if (type == T_BOOL) o->b = data[0];
  else {
    char *dst = n <= sizeof o->buf ? o->buf : scratch_get(n);
    if (!dst) return 0;
    memcpy(dst, data, n);
    o->p = dst;
    o->n = n;
  }
  return 1;
}

static void push_out(lua_State *L, struct out *o)
{
  if (o->type == T_NUM) lua_pushnumber(L, o->num);
  else if (o->type == T_BOOL) lua_pushboolean(L, o->b);
  else {
    lua_pushlstring(L, o->p, o->n);
    scratch_trim();
  }
}

/* -- Lua: get, set and friends --------------------------------------------- */

/* get(key) -> value, flags (flags only when non-zero), or nil; nil, err.
** get_stale(key) -> value, flags or nil, stale: expired entries that are
** still in the store come back with stale true. */
static int get_common(lua_State *L, int stale)
{
  struct store *s = check_dict(L);
  struct key k;
  const char *err = check_key(L, 2, s, &k);
  if (err) return fail(L, 0, err);
  struct out o;
  uint32_t flags;
  int old;
  struct clk c = { 0 };
  LOCK(s);
  uint32_t off = find(s, k.p, k.n, k.h);
  if (!off) goto none;
  struct ent *e = E(s, off);
  old = expired(e, &c);
  if (old && !stale) goto none;
  if (e->type == T_LIST) {
    UNLOCK(s);
    return fail(L, 0, "value is a list");
  }
  if (!copy_out(&o, e->type, e->data, e->vlen)) {
    UNLOCK(s);
    return luaL_error(L, "no memory");
  }
  flags = e->flags;
  if (!old) touch(s, off);   /* an expired entry drifts to the tail */
  UNLOCK(s);
  push_out(L, &o);
  if (!stale && !flags) return 1;
  if (flags) lua_pushnumber(L, flags);
  else lua_pushnil(L);
  if (!stale) return 2;
  lua_pushboolean(L, old);
  return 3;
none:
  UNLOCK(s);
  lua_pushnil(L);
  return 1;
}

static int l_get(lua_State *L) { return get_common(L, 0); }
static int l_get_stale(lua_State *L) { return get_common(L, 1); }

enum { OP_SET = 0, OP_ADD = 1, OP_REPLACE = 2, OP_SAFE = 4 };

/* set/add/replace and their safe_ forms: (key, value [, ttl [, flags]])
** -> true, nil, forcible, or false, err, forcible. A nil value deletes. */
static int store_op(lua_State *L, int op)
{
  struct store *s = check_dict(L);
  double ttl = opt_ttl(L, 4, "bad \"exptime\" argument");
  lua_Number fl = luaL_optnumber(L, 5, 0);
  luaL_argcheck(L, fl >= 0 && fl <= UINT32_MAX && fl == floor(fl), 5, "flags must be an integer in 0..2^32-1");
  uint32_t flags = (uint32_t)fl;
  struct key k;
  struct val v;
  const char *err = check_key(L, 2, s, &k);
  if (err) return fail(L, 0, err);
  if (!check_val(L, 3, &v)) return fail(L, 0, "bad value type");
  if (v.type == T_NIL && (op & (OP_ADD | OP_REPLACE)))
    return fail(L, 1, "attempt to add or replace nil values");

  struct clk c = { 0 };
  int forcible = 0;
  uint64_t need = sizeof(struct ent) + (uint64_t)v.n + k.n;
  LOCK(s);
  uint32_t off = find(s, k.p, k.n, k.h);
  int live = off && !expired(E(s, off), &c);
  if ((op & OP_REPLACE) && !live) err = "not found";
  else if ((op & OP_ADD) && live) err = "exists";
  else if (v.type == T_NIL) {
    if (off) remove_entry(s, off);
  } else if (off && E(s, off)->type != T_LIST && ch_tlsf_shrink(&s->heap, s, off, need)) {
    /* Rewrite in place, in a block fitted to the new size: the usual case
    ** for counters and flags. */
    struct ent *e = E(s, off);
    e->type = (uint8_t)v.type;
    e->vlen = (uint32_t)v.n;
    e->flags = flags;
    e->expires = expiry(ttl, &c);
    memcpy(e->data, v.p, v.n);
    memcpy(e->data + v.n, k.p, k.n);
    touch(s, off);
  } else {
    /* A failed store has dropped the old value, as in OpenResty. */
    if (off) remove_entry(s, off);
    off = need <= UINT32_MAX ? alloc_room(s, need, op & OP_SAFE, 0, &c, &forcible) : 0;
    if (!off) err = "no memory";
    else {
      struct ent *e = E(s, off);
      e->hash = k.h;
      e->klen = (uint16_t)k.n;
      e->type = (uint8_t)v.type;
      e->vlen = (uint32_t)v.n;
      e->flags = flags;
      e->expires = expiry(ttl, &c);
      memcpy(e->data, v.p, v.n);
      memcpy(e->data + v.n, k.p, k.n);
      link_entry(s, off);
    }
  }
  UNLOCK(s);
  lua_pushboolean(L, err == NULL);
  if (err) lua_pushstring(L, err);
  else lua_pushnil(L);
  lua_pushboolean(L, forcible);
  return 3;
}

static int l_set(lua_State *L) { return store_op(L, OP_SET); }
static int l_safe_set(lua_State *L) { return store_op(L, OP_SET | OP_SAFE); }
static int l_add(lua_State *L) { return store_op(L, OP_ADD); }
static int l_safe_add(lua_State *L) { return store_op(L, OP_ADD | OP_SAFE); }
static int l_replace(lua_State *L) { return store_op(L, OP_REPLACE); }

/* delete(key) -> true: set(key, nil). */
static int l_delete(lua_State *L)
{
  lua_settop(L, 2);
  lua_pushnil(L);
  return store_op(L, OP_SET);
}

/* incr(key, value [, init [, init_ttl]]) -> new value (plus nil, forcible
** when init is given), or nil, err ("not found", "not a number", "no
** memory"). Without init a missing key is "not found"; with it the key is
** created as init + value, expiring after init_ttl. */
static int l_incr(lua_State *L)
{
  struct store *s = check_dict(L);
  struct key k;
  double delta = luaL_checknumber(L, 3);
  int has_init = !lua_isnoneornil(L, 4);
  double init = has_init ? luaL_checknumber(L, 4) : 0;
  double ttl = opt_ttl(L, 5, "bad \"init_ttl\" argument");
  if (!lua_isnoneornil(L, 5) && !has_init) luaL_argerror(L, 5, "must provide \"init\" when providing \"init_ttl\"");
  const char *err = check_key(L, 2, s, &k);
  if (err) return fail(L, 0, err);

  struct clk c = { 0 };
  int forcible = 0;
  double num = 0;
  uint64_t need = sizeof(struct ent) + 8 + k.n;
  LOCK(s);
  uint32_t off = find(s, k.p, k.n, k.h);
  if (off && !expired(E(s, off), &c)) {
    struct ent *e = E(s, off);
    if (e->type != T_NUM) err = "not a number";
    else {
      memcpy(&num, e->data, 8);
      num += delta;
      memcpy(e->data, &num, 8);
      touch(s, off);
    }
  } else if (!has_init) {
    err = "not found";
  } else {
    num = init + delta;
    /* An expired entry's block is reused when it holds the number. */
    if (!off || E(s, off)->type == T_LIST || !ch_tlsf_shrink(&s->heap, s, off, need)) {
      if (off) remove_entry(s, off);
      off = alloc_room(s, need, 0, 0, &c, &forcible);
      if (off) {
        E(s, off)->hash = k.h;
        E(s, off)->klen = (uint16_t)k.n;
        link_entry(s, off);
      }
    } else {
      touch(s, off);
    }
    if (!off) err = "no memory";
    else {
      struct ent *e = E(s, off);
      e->type = T_NUM;
      e->vlen = 8;
      e->flags = 0;
      e->expires = expiry(ttl, &c);
      memcpy(e->data, &num, 8);
      memmove(e->data + 8, k.p, k.n);
    }
  }
  UNLOCK(s);
  if (err) return fail(L, 0, err);
  lua_pushnumber(L, num);
  if (!has_init) return 1;
  lua_pushnil(L);
  lua_pushboolean(L, forcible);
  return 3;
}

/* expire(key, ttl) -> true, or nil, "not found". ttl 0: never expires. */
static int l_expire(lua_State *L)
{
  struct store *s = check_dict(L);
  struct key k;
  luaL_checknumber(L, 3);
  double ttl = opt_ttl(L, 3, "bad \"exptime\" argument");
  const char *err = check_key(L, 2, s, &k);
  if (err) return fail(L, 0, err);
  struct clk c = { 0 };
  LOCK(s);
  uint32_t off = find(s, k.p, k.n, k.h);
  int ok = off && !expired(E(s, off), &c);
  if (ok) E(s, off)->expires = expiry(ttl, &c);
  UNLOCK(s);
  if (!ok) return fail(L, 0, "not found");
  lua_pushboolean(L, 1);
  return 1;
}

/* ttl(key) -> seconds left (0: never expires), or nil, "not found". */
static int l_ttl(lua_State *L)
{
  struct store *s = check_dict(L);
  struct key k;
  const char *err = check_key(L, 2, s, &k);
  if (err) return fail(L, 0, err);
  struct clk c = { 0 };
  uint64_t left = 0;
  LOCK(s);
  uint32_t off = find(s, k.p, k.n, k.h);
  int ok = off && !expired(E(s, off), &c);
  if (ok && E(s, off)->expires) left = E(s, off)->expires - now_ms(&c);
  UNLOCK(s);
  if (!ok) return fail(L, 0, "not found");
  lua_pushnumber(L, (lua_Number)left / 1000);
  return 1;
}

/* -- Lua: lists ------------------------------------------------------------ */

/* lpush/rpush(key, value) -> new length, or nil, err ("value not a list",
** "bad value type", "no memory"). Values are strings or numbers. */
static int push_common(lua_State *L, int left)
{
  struct store *s = check_dict(L);
  struct key k;
  struct val v;
  const char *err = check_key(L, 2, s, &k);
  if (err) return fail(L, 0, err);
  if (!check_val(L, 3, &v) || (v.type != T_STR && v.type != T_NUM)) return fail(L, 0, "bad value type");
  struct clk c = { 0 };
  int forcible = 0, created = 0;
  uint32_t len = 0;
  LOCK(s);
  uint32_t off = find(s, k.p, k.n, k.h);
  if (off && expired(E(s, off), &c)) {
    remove_entry(s, off);
    off = 0;
  }
  if (off && E(s, off)->type != T_LIST) {
    err = "value not a list";
    goto done;
  }
  if (!off) {
    off = alloc_room(s, sizeof(struct ent) + sizeof(struct list) + k.n, 0, 0, &c, &forcible);
    if (!off) {
      err = "no memory";
      goto done;
    }
    struct ent *e = E(s, off);
    e->hash = k.h;
    e->klen = (uint16_t)k.n;
    e->type = T_LIST;
    e->vlen = sizeof(struct list);
    e->flags = 0;
    e->expires = 0;
    memset(e->data, 0, sizeof(struct list));
    memcpy(e->data + sizeof(struct list), k.p, k.n);
    link_entry(s, off);
    created = 1;
  } else {
    touch(s, off);
  }
  uint64_t need = sizeof(struct lnode) + (uint64_t)v.n;
  uint32_t noff = need <= UINT32_MAX ? alloc_room(s, need, 0, off, &c, &forcible) : 0;
  if (!noff) {
    if (created) remove_entry(s, off);
    err = "no memory";
    goto done;
  }
  struct list *l = list_of(E(s, off));
  struct lnode *n = at(s, noff);
  n->len = (uint32_t)v.n;
  n->type = (uint8_t)v.type;
  memcpy(n->data, v.p, v.n);
  if (left) {
    n->prev = 0;
    n->next = l->first;
    if (l->first) ((struct lnode *)at(s, l->first))->prev = noff;
    else l->last = noff;
    l->first = noff;
  } else {
    n->next = 0;
    n->prev = l->last;
    if (l->last) ((struct lnode *)at(s, l->last))->next = noff;
    else l->first = noff;
    l->last = noff;
  }
  len = ++l->len;
done:
  UNLOCK(s);
  if (err) return fail(L, 0, err);
  lua_pushnumber(L, len);
  return 1;
}

static int l_lpush(lua_State *L) { return push_common(L, 1); }
static int l_rpush(lua_State *L) { return push_common(L, 0); }

/* lpop/rpop(key) -> value, or nil when the list is empty or missing, or
** nil, "value not a list". The key goes when its last element does. */
static int pop_common(lua_State *L, int left)
{
  struct store *s = check_dict(L);
  struct key k;
  const char *err = check_key(L, 2, s, &k);
  if (err) return fail(L, 0, err);
  struct clk c = { 0 };
  struct out o;
  int got = 0;
  LOCK(s);
  uint32_t off = find(s, k.p, k.n, k.h);
  if (!off || expired(E(s, off), &c)) goto done;
  struct ent *e = E(s, off);
  if (e->type != T_LIST) {
    err = "value not a list";
    goto done;
  }
  struct list *l = list_of(e);
  uint32_t noff = left ? l->first : l->last;
  struct lnode *n = at(s, noff);
  if (!copy_out(&o, n->type, n->data, n->len)) {
    UNLOCK(s);
    return luaL_error(L, "no memory");
  }
  got = 1;
  if (left) {
    l->first = n->next;
    if (n->next) ((struct lnode *)at(s, n->next))->prev = 0;
    else l->last = 0;
  } else {
    l->last = n->prev;
    if (n->prev) ((struct lnode *)at(s, n->prev))->next = 0;
    else l->first = 0;
  }
  release(s, noff);
  if (--l->len == 0) remove_entry(s, off);
  else touch(s, off);
done:
  UNLOCK(s);
  if (err) return fail(L, 0, err);
  if (got) push_out(L, &o);
  else lua_pushnil(L);
  return 1;
}

static int l_lpop(lua_State *L) { return pop_common(L, 1); }
static int l_rpop(lua_State *L) { return pop_common(L, 0); }

/* llen(key) -> length (0 when missing), or nil, "value not a list". */
static int l_llen(lua_State *L)
{
  struct store *s = check_dict(L);
  struct key k;
  const char *err = check_key(L, 2, s, &k);
  if (err) return fail(L, 0, err);
  struct clk c = { 0 };
  uint32_t len = 0;
  LOCK(s);
  uint32_t off = find(s, k.p, k.n, k.h);
  if (off && !expired(E(s, off), &c)) {
    if (E(s, off)->type != T_LIST) err = "value not a list";
    else {
      len = list_of(E(s, off))->len;
      touch(s, off);
    }
  }
  UNLOCK(s);
  if (err) return fail(L, 0, err);
  lua_pushnumber(L, len);
  return 1;
}

/* -- Lua: the whole store --------------------------------------------------- */

/* flush_all(): marks every entry expired (get_stale still sees them); the
** memory comes back through flush_expired or when a store needs room. O(n). */
static int l_flush_all(lua_State *L)
{
  struct store *s = check_dict(L);
  LOCK(s);
  for (uint32_t off = s->lru_head; off; off = E(s, off)->older) E(s, off)->expires = 1;
  UNLOCK(s);
  return 0;
}

/* flush_expired([max]) -> how many expired entries were freed, at most max
** (0 or absent: all). Walks from the LRU tail; O(n). */
static int l_flush_expired(lua_State *L)
{
  struct store *s = check_dict(L);
  lua_Integer max = luaL_optinteger(L, 2, 0);
  luaL_argcheck(L, max >= 0, 2, "must not be negative");
  struct clk c = { 0 };
  lua_Integer freed = 0;
  LOCK(s);
  for (uint32_t off = s->lru_tail; off && (max == 0 || freed < max); ) {
    uint32_t newer = E(s, off)->newer;
    if (expired(E(s, off), &c)) {
      remove_entry(s, off);
      freed++;
    }
    off = newer;
  }
  UNLOCK(s);
  lua_pushnumber(L, (lua_Number)freed);
  return 1;
}

/* get_keys([max]) -> array of unexpired keys, least recently used first, at
** most max (default 1024; 0: all). The keys are copied out under the lock
** (2 bytes of length each, then the bytes) and pushed afterwards. O(n). */
static int l_get_keys(lua_State *L)
{
  struct store *s = check_dict(L);
  lua_Integer max = luaL_optinteger(L, 2, 1024);
  luaL_argcheck(L, max >= 0, 2, "must not be negative");
  struct clk c = { 0 };
  size_t bytes = 0;
  lua_Integer n = 0;
  LOCK(s);
  for (uint32_t off = s->lru_tail; off && (max == 0 || n < max); off = E(s, off)->newer) {
    struct ent *e = E(s, off);
    if (expired(e, &c)) continue;
    bytes += 2 + e->klen;
    n++;
  }
  char *buf = scratch_get(bytes ? bytes : 1), *p = buf;
  if (buf) {
    lua_Integer i = 0;
    for (uint32_t off = s->lru_tail; off && i < n; off = E(s, off)->newer) {
      struct ent *e = E(s, off);
      if (expired(e, &c)) continue;
      memcpy(p, &e->klen, 2);
      memcpy(p + 2, key_of(e), e->klen);
      p += 2 + e->klen;
      i++;
    }
  }
  UNLOCK(s);
  if (!buf) return luaL_error(L, "no memory");
  lua_createtable(L, (int)n, 0);
  p = buf;
  for (lua_Integer i = 1; i <= n; i++) {
    uint16_t kl;
    memcpy(&kl, p, 2);
    lua_pushlstring(L, p + 2, kl);
    lua_rawseti(L, -2, (int)i);
    p += 2 + kl;
  }
  scratch_trim();
  return 1;
}

/* capacity() -> the size the store was made with, in bytes. */
static int l_capacity(lua_State *L)
{
  lua_pushnumber(L, check_dict(L)->size);
  return 1;
}

/* free_space() -> bytes in free blocks. An entry needs 48 + value + key
** bytes rounded up to 8, which may not be contiguous. */
static int l_free_space(lua_State *L)
{
  struct store *s = check_dict(L);
  LOCK(s);
  uint32_t n = s->heap.free_bytes;
  UNLOCK(s);
  lua_pushnumber(L, n);
  return 1;
}

static int l_tostring(lua_State *L)
{
  struct dict **u = luaL_checkudata(L, 1, SHDICT_MT);
  lua_pushfstring(L, "cohost.shared: %s", (*u)->name);
  return 1;
}

/* -- Lua: the module -------------------------------------------------------- */

static void push_dict(lua_State *L, struct dict *d)
{
  struct dict **u = lua_newuserdata(L, sizeof *u);
  *u = d;
  luaL_getmetatable(L, SHDICT_MT);
  lua_setmetatable(L, -2);
}

/* Finds or makes dict name. Call with dicts_lock held. NULL with *err
** when it exists with another size (unless made by --shdict) or cannot
** be mapped. */
static struct dict *dict_open(const char *name, uint32_t bytes, int fixed, int *made,
                              const char **err)
{
  struct dict *d = dict_find(name);
  if (d) {
    if (d->s->size != bytes && !d->fixed && !fixed) *err = "exists with another size";
    if (fixed && !*err) *err = "given twice";
    return *err ? NULL : d;
  }
  size_t nlen = strlen(name);
  d = malloc(sizeof *d + nlen + 1);
  struct store *s = d ? store_new(name, bytes) : NULL;
  if (!s) {
    free(d);
    *err = "cannot map its memory";
    return NULL;
  }
  d->s = s;
  d->fixed = fixed;
  memcpy(d->name, name, nlen + 1);
  d->next = dicts;
  dicts = d;
  *made = 1;
  return d;
}

const char *ch_shdict_create(const char *name, long size)
{
  if (!name[0]) return "bad name";
  if (!(size >= SHDICT_MIN_SIZE && size <= SHDICT_MAX_SIZE))
    return "size must be between 8k and 4095m bytes";
  const char *err = NULL;
  int made = 0;
  pthread_mutex_lock(&dicts_lock);
  dict_open(name, (uint32_t)size, 1, &made, &err);
  pthread_mutex_unlock(&dicts_lock);
  return err;
}

/* open(name, bytes) -> dict: the store called name, made with bytes of
** capacity on first use (one --shdict made is returned whatever bytes
** says); or nil, err if it exists with another size, or if the size is
** out of range or cannot be mapped (the Lua face raises). */
static int l_open(lua_State *L)
{
  size_t nlen;
  const char *name = luaL_checklstring(L, 1, &nlen);
  lua_Number size = luaL_checknumber(L, 2);
  luaL_argcheck(L, nlen > 0 && strlen(name) == nlen, 1, "bad name");
  if (!(size >= SHDICT_MIN_SIZE && size <= SHDICT_MAX_SIZE)) {
    lua_pushnil(L);
    lua_pushfstring(L, "shared dict '%s': size must be between 8k and 4095m bytes", name);
    return 2;
  }
  const char *err = NULL;
  int made = 0;
  pthread_mutex_lock(&dicts_lock);
  struct dict *d = dict_open(name, (uint32_t)size, 0, &made, &err);
  pthread_mutex_unlock(&dicts_lock);
  /* In a worker process a script's own dict is not seen by the others:
  ** say so once, where it is made. */
  if (made && ch_opts.processes)
    ch_log(CH_LOG_WARN, "shared dict '%s' is this worker process's own: pass --shdict %s:SIZE "
           "to share it between processes", name, name);
  if (err) {
    lua_pushnil(L);
    lua_pushfstring(L, "shared dict '%s': %s", name, err);
    return 2;
  }
  push_dict(L, d);
  return 1;
}

/* find(name) -> dict, or nil if no worker has made it. */
static int l_find(lua_State *L)
{
  const char *name = luaL_checkstring(L, 1);
  pthread_mutex_lock(&dicts_lock);
  struct dict *d = dict_find(name);
  pthread_mutex_unlock(&dicts_lock);
  if (d) push_dict(L, d);
  else lua_pushnil(L);
  return 1;
}

/* check(dict) -> true, or false, what: walks the arena, the free lists, the
** LRU list and the buckets and checks their invariants. For the specs;
** O(n) under the lock. */
static int l_check(lua_State *L)
{
  struct store *s = check_dict(L);
  LOCK(s);
  const char *bad = check_store(s);
  UNLOCK(s);
  if (bad) return fail(L, 1, bad);
  lua_pushboolean(L, 1);
  return 1;
}

/* What is wrong with s, or NULL: check()'s walk. Call with the lock held.
** Offsets are bounds-checked before use, so a store a dead holder left
** half-changed is reported, never followed out of the region. */
static const char *check_store(struct store *s)
{
  const char *bad = ch_tlsf_check(&s->heap, s);
  if (bad) return bad;
  uint32_t off, prev = 0, n = 0;
  for (off = s->lru_head; off; off = E(s, off)->older) {
    if (!ch_tlsf_holds(&s->heap, off, sizeof(struct ent))) return "LRU link";
    if (E(s, off)->newer != prev || ++n > s->count) return "LRU list";
    prev = off;
  }
  if (prev != s->lru_tail || n != s->count) return "LRU list ends";
  n = 0;
  for (uint32_t i = 0; i < s->nbuckets; i++)
    for (off = ((uint32_t *)at(s, s->buckets))[i]; off; off = E(s, off)->hnext)
      if (!ch_tlsf_holds(&s->heap, off, sizeof(struct ent)) || (E(s, off)->hash & (s->nbuckets - 1)) != i ||
          ++n > s->count) return "bucket chain";
  if (n != s->count) return "entries missing from the buckets";
  return NULL;
}

static const luaL_Reg dict_methods[] = {
  { "get", l_get },
  { "get_stale", l_get_stale },
  { "set", l_set },
  { "safe_set", l_safe_set },
  { "add", l_add },
  { "safe_add", l_safe_add },
  { "replace", l_replace },
  { "delete", l_delete },
  { "incr", l_incr },
  { "expire", l_expire },
  { "ttl", l_ttl },
  { "lpush", l_lpush },
  { "rpush", l_rpush },
  { "lpop", l_lpop },
  { "rpop", l_rpop },
  { "llen", l_llen },
  { "flush_all", l_flush_all },
  { "flush_expired", l_flush_expired },
  { "get_keys", l_get_keys },
  { "capacity", l_capacity },
  { "free_space", l_free_space },
  { NULL, NULL }
};

static const luaL_Reg shdict_funcs[] = {
  { "open", l_open },
  { "find", l_find },
  { "check", l_check },
  { NULL, NULL }
};

int luaopen_cohost_core_shdict(lua_State *L)
{
  luaL_newmetatable(L, SHDICT_MT);
  dict_mt = lua_topointer(L, -1);
  lua_newtable(L);
  luaL_register(L, NULL, dict_methods);
  lua_setfield(L, -2, "__index");
  lua_pushcfunction(L, l_tostring);
  lua_setfield(L, -2, "__tostring");
  lua_pop(L, 1);
  lua_newtable(L);
  luaL_register(L, NULL, shdict_funcs);
  return 1;
}
