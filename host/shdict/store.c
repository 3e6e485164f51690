/*
** The shared dictionary store of store.h. A store is one contiguous mmap'd
** region of the size asked for: a header, the hash buckets, then an arena
** of blocks managed by tlsf.c. Every link inside the region is a 32-bit
** offset from its start, never a pointer, and the region is mapped
** MAP_SHARED with a process-shared mutex, so a store made before the fork
** (--shdict, ch_shdict_create) serves every worker process of --processes.
** One made by a script in a worker process is that process's alone.
**
** Locking: one pthread mutex per store, kept in the region. It is held only
** by the functions here, which neither yield nor call out (values are
** copied out first and pushed by the caller after the unlock), so a holder
** always finishes promptly: a worker that finds the mutex taken blocks its
** thread (all its coroutines) for as long as one operation takes, a few
** hundred ns for everything but flush_all, flush_expired and keys, which
** walk the entries (O(n)). No coroutine can hold it across a switch, so
** waiting on it never deadlocks.
**
** A process can still die holding it (SIGKILL, a crash): the mutex is
** robust, so the next locker gets EOWNERDEAD instead of waiting forever.
** It then checks the whole store (as ch_shdict_check does) and empties it
** if the dead holder left it half-changed; either way it logs what
** happened.
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

#include "log.h"
#include "shdict/store.h"
#include "shdict/tlsf.h"

/* -- Region layout --------------------------------------------------------- */

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
  uint8_t type;        /* CH_SHDICT_* */
  uint8_t pad[5];
  char data[];
};
_Static_assert(sizeof(struct ent) == 40, "entry header is 40 bytes");

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
  uint8_t type;          /* CH_SHDICT_STR or CH_SHDICT_NUM */
  uint8_t pad[3];
  char data[];
};

/* The process's stores by name. They live until the process ends.
** spec/process_spec.lua reads the store pointer, the second field. */
struct ch_shdict {
  struct ch_shdict *next;
  struct store *s;
  int fixed;           /* made by --shdict: new() with any size finds it */
  char name[];
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

/* hash_key, find and lock are inlined into every operation: each runs
** once per operation, and their calls were most of what moving the store
** out of lib_shdict.c added per call (docs/benchmarks.md). */
static inline uint32_t hash_key(uint64_t seed, const char *k, size_t n)
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

/* The entry for key k (hash h), or 0; O(chain). */
static inline uint32_t find(struct store *s, const char *k, size_t kn, uint32_t h)
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
  if (e->type == CH_SHDICT_LIST) {
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

/* -- Stores and their lock ------------------------------------------------- */

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
  ** (see recover()); adaptive so a contended lock spins briefly before
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

/* What is wrong with s, or NULL. Call with the lock held. Offsets are
** bounds-checked before use, so a store a dead holder left half-changed
** is reported, never followed out of the region. */
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

/* The lock's slow path: pthread_mutex_lock returned r, not 0. A holder
** that died (EOWNERDEAD: its process was killed mid-operation) may have
** left the store half-changed: it is checked, O(n), and emptied if
** broken, then the lock is marked usable again. Kept out of line so the
** fast path inlined into every operation stays a call and a test. */
static __attribute__((noinline, cold)) void recover(struct store *s, int r)
{
  if (r != EOWNERDEAD) {   /* EINVAL, ENOTRECOVERABLE: the store is unusable */
    ch_log(CH_LOG_ERR, "shared dict '%s': lock: %s", s->name, strerror(r));
    abort();
  }
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

/* Takes s's lock. */
static inline void lock(struct store *s)
{
  int r = pthread_mutex_lock(&s->lock);
  if (r != 0) recover(s, r);
}

#define LOCK(s) lock(s)
#define UNLOCK(s) pthread_mutex_unlock(&(s)->lock)

/* -- Copying out ------------------------------------------------------------ */

/* A per-thread buffer for values and keys copied out under the lock. It
** only grows while locked (realloc never calls out) and is trimmed after
** the push, so an error in the push leaks nothing. */
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

void ch_shdict_trim(void)
{
  if (scratch.cap > 65536) {
    free(scratch.p);
    scratch.p = NULL;
    scratch.cap = 0;
  }
}

/* Copies type/bytes into o; 0 if a buffer could not be had. Locked. */
static int copy_out(struct ch_shdict_out *o, int type, const char *data, size_t n)
{
  o->type = type;
  if (type == CH_SHDICT_NUM) memcpy(&o->num, data, 8);
  else if (type == CH_SHDICT_BOOL) o->b = data[0];
  else {
    char *dst = n <= sizeof o->buf ? o->buf : scratch_get(n);
    if (!dst) return 0;
    memcpy(dst, data, n);
    o->p = dst;
    o->n = n;
  }
  return 1;
}

/* -- The registry ---------------------------------------------------------- */

static struct ch_shdict *dicts;
static pthread_mutex_t dicts_lock = PTHREAD_MUTEX_INITIALIZER;

static struct ch_shdict *dict_find(const char *name)
{
  for (struct ch_shdict *d = dicts; d; d = d->next)
    if (strcmp(d->name, name) == 0) return d;
  return NULL;
}

/* Finds or makes dict name. Call with dicts_lock held. NULL with *err
** when it exists with another size (unless made by --shdict) or cannot
** be mapped. */
static struct ch_shdict *dict_open(const char *name, uint32_t bytes, int fixed, int *made,
                                   const char **err)
{
  struct ch_shdict *d = dict_find(name);
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
  if (!(size >= CH_SHDICT_MIN_SIZE && size <= CH_SHDICT_MAX_SIZE))
    return "size must be between 8k and 4095m bytes";
  const char *err = NULL;
  int made = 0;
  pthread_mutex_lock(&dicts_lock);
  dict_open(name, (uint32_t)size, 1, &made, &err);
  pthread_mutex_unlock(&dicts_lock);
  return err;
}

struct ch_shdict *ch_shdict_open(const char *name, uint32_t bytes, int *made, const char **err)
{
  pthread_mutex_lock(&dicts_lock);
  struct ch_shdict *d = dict_open(name, bytes, 0, made, err);
  pthread_mutex_unlock(&dicts_lock);
  return d;
}

struct ch_shdict *ch_shdict_find(const char *name)
{
  pthread_mutex_lock(&dicts_lock);
  struct ch_shdict *d = dict_find(name);
  pthread_mutex_unlock(&dicts_lock);
  return d;
}

const char *ch_shdict_name(const struct ch_shdict *d) { return d->name; }
uint32_t ch_shdict_capacity(const struct ch_shdict *d) { return d->s->size; }

uint32_t ch_shdict_free_space(struct ch_shdict *d)
{
  struct store *s = d->s;
  LOCK(s);
  uint32_t n = s->heap.free_bytes;
  UNLOCK(s);
  return n;
}

const char *ch_shdict_check(struct ch_shdict *d)
{
  struct store *s = d->s;
  LOCK(s);
  const char *bad = check_store(s);
  UNLOCK(s);
  return bad;
}

/* -- Get, set and friends --------------------------------------------------- */

int ch_shdict_get(struct ch_shdict *d, const char *k, size_t kn, int stale,
                  struct ch_shdict_out *o)
{
  struct store *s = d->s;
  uint32_t h = hash_key(s->seed, k, kn);
  struct clk c = { 0 };
  int rc = CH_SHDICT_OK;
  LOCK(s);
  uint32_t off = find(s, k, kn, h);
  if (!off) {
    rc = CH_SHDICT_NOT_FOUND;
    goto done;
  }
  struct ent *e = E(s, off);
  int old = expired(e, &c);
  if (old && !stale) rc = CH_SHDICT_NOT_FOUND;
  else if (e->type == CH_SHDICT_LIST) rc = CH_SHDICT_IS_LIST;
  else if (!copy_out(o, e->type, e->data, e->vlen)) rc = CH_SHDICT_NO_BUFFER;
  else {
    o->flags = e->flags;
    o->stale = old;
    if (!old) touch(s, off);   /* an expired entry drifts to the tail */
  }
done:
  UNLOCK(s);
  return rc;
}

int ch_shdict_set(struct ch_shdict *d, const char *k, size_t kn, const struct ch_shdict_val *v,
                  double ttl, uint32_t flags, int mode, int *forcible)
{
  struct store *s = d->s;
  uint32_t h = hash_key(s->seed, k, kn);
  struct clk c = { 0 };
  int rc = CH_SHDICT_OK;
  uint64_t need = sizeof(struct ent) + (uint64_t)v->n + kn;
  LOCK(s);
  uint32_t off = find(s, k, kn, h);
  int live = off && !expired(E(s, off), &c);
  if ((mode & CH_SHDICT_REPLACE) && !live) rc = CH_SHDICT_NOT_FOUND;
  else if ((mode & CH_SHDICT_ADD) && live) rc = CH_SHDICT_EXISTS;
  else if (v->type == CH_SHDICT_NIL) {
    if (off) remove_entry(s, off);
  } else if (off && E(s, off)->type != CH_SHDICT_LIST && ch_tlsf_shrink(&s->heap, s, off, need)) {
    /* Rewrite in place, in a block fitted to the new size: the usual case
    ** for counters and flags. */
    struct ent *e = E(s, off);
    e->type = (uint8_t)v->type;
    e->vlen = (uint32_t)v->n;
    e->flags = flags;
    e->expires = expiry(ttl, &c);
    memcpy(e->data, v->p, v->n);
    memcpy(e->data + v->n, k, kn);
    touch(s, off);
  } else {
    /* A failed store has dropped the old value, as in OpenResty. */
    if (off) remove_entry(s, off);
    off = need <= UINT32_MAX ? alloc_room(s, need, mode & CH_SHDICT_SAFE, 0, &c, forcible) : 0;
    if (!off) rc = CH_SHDICT_NO_MEMORY;
    else {
      struct ent *e = E(s, off);
      e->hash = h;
      e->klen = (uint16_t)kn;
      e->type = (uint8_t)v->type;
      e->vlen = (uint32_t)v->n;
      e->flags = flags;
      e->expires = expiry(ttl, &c);
      memcpy(e->data, v->p, v->n);
      memcpy(e->data + v->n, k, kn);
      link_entry(s, off);
    }
  }
  UNLOCK(s);
  return rc;
}

int ch_shdict_incr(struct ch_shdict *d, const char *k, size_t kn, double delta,
                   const double *init, double init_ttl, double *num, int *forcible)
{
  struct store *s = d->s;
  uint32_t h = hash_key(s->seed, k, kn);
  struct clk c = { 0 };
  int rc = CH_SHDICT_OK;
  uint64_t need = sizeof(struct ent) + 8 + kn;
  double sum = 0;
  LOCK(s);
  uint32_t off = find(s, k, kn, h);
  if (off && !expired(E(s, off), &c)) {
    struct ent *e = E(s, off);
    if (e->type != CH_SHDICT_NUM) rc = CH_SHDICT_NOT_NUMBER;
    else {
      memcpy(&sum, e->data, 8);
      sum += delta;
      memcpy(e->data, &sum, 8);
      touch(s, off);
    }
  } else if (!init) {
    rc = CH_SHDICT_NOT_FOUND;
  } else {
    sum = *init + delta;
    /* An expired entry's block is reused when it holds the number. */
    if (!off || E(s, off)->type == CH_SHDICT_LIST || !ch_tlsf_shrink(&s->heap, s, off, need)) {
      if (off) remove_entry(s, off);
      off = alloc_room(s, need, 0, 0, &c, forcible);
      if (off) {
        E(s, off)->hash = h;
        E(s, off)->klen = (uint16_t)kn;
        link_entry(s, off);
      }
    } else {
      touch(s, off);
    }
    if (!off) rc = CH_SHDICT_NO_MEMORY;
    else {
      struct ent *e = E(s, off);
      e->type = CH_SHDICT_NUM;
      e->vlen = 8;
      e->flags = 0;
      e->expires = expiry(init_ttl, &c);
      memcpy(e->data, &sum, 8);
      memmove(e->data + 8, k, kn);
    }
  }
  UNLOCK(s);
  *num = sum;
  return rc;
}

int ch_shdict_expire(struct ch_shdict *d, const char *k, size_t kn, double ttl)
{
  struct store *s = d->s;
  uint32_t h = hash_key(s->seed, k, kn);
  struct clk c = { 0 };
  LOCK(s);
  uint32_t off = find(s, k, kn, h);
  int ok = off && !expired(E(s, off), &c);
  if (ok) E(s, off)->expires = expiry(ttl, &c);
  UNLOCK(s);
  return ok ? CH_SHDICT_OK : CH_SHDICT_NOT_FOUND;
}

int ch_shdict_ttl(struct ch_shdict *d, const char *k, size_t kn, uint64_t *ms)
{
  struct store *s = d->s;
  uint32_t h = hash_key(s->seed, k, kn);
  struct clk c = { 0 };
  uint64_t left = 0;
  LOCK(s);
  uint32_t off = find(s, k, kn, h);
  int ok = off && !expired(E(s, off), &c);
  if (ok && E(s, off)->expires) left = E(s, off)->expires - now_ms(&c);
  UNLOCK(s);
  *ms = left;
  return ok ? CH_SHDICT_OK : CH_SHDICT_NOT_FOUND;
}

/* -- Lists ------------------------------------------------------------------ */

int ch_shdict_push(struct ch_shdict *d, const char *k, size_t kn, int left,
                   const struct ch_shdict_val *v, uint32_t *len)
{
  struct store *s = d->s;
  uint32_t h = hash_key(s->seed, k, kn);
  struct clk c = { 0 };
  int rc = CH_SHDICT_OK, forcible = 0, created = 0;
  LOCK(s);
  uint32_t off = find(s, k, kn, h);
  if (off && expired(E(s, off), &c)) {
    remove_entry(s, off);
    off = 0;
  }
  if (off && E(s, off)->type != CH_SHDICT_LIST) {
    rc = CH_SHDICT_NOT_LIST;
    goto done;
  }
  if (!off) {
    off = alloc_room(s, sizeof(struct ent) + sizeof(struct list) + kn, 0, 0, &c, &forcible);
    if (!off) {
      rc = CH_SHDICT_NO_MEMORY;
      goto done;
    }
    struct ent *e = E(s, off);
    e->hash = h;
    e->klen = (uint16_t)kn;
    e->type = CH_SHDICT_LIST;
    e->vlen = sizeof(struct list);
    e->flags = 0;
    e->expires = 0;
    memset(e->data, 0, sizeof(struct list));
    memcpy(e->data + sizeof(struct list), k, kn);
    link_entry(s, off);
    created = 1;
  } else {
    touch(s, off);
  }
  uint64_t need = sizeof(struct lnode) + (uint64_t)v->n;
  uint32_t noff = need <= UINT32_MAX ? alloc_room(s, need, 0, off, &c, &forcible) : 0;
  if (!noff) {
    if (created) remove_entry(s, off);
    rc = CH_SHDICT_NO_MEMORY;
    goto done;
  }
  struct list *l = list_of(E(s, off));
  struct lnode *n = at(s, noff);
  n->len = (uint32_t)v->n;
  n->type = (uint8_t)v->type;
  memcpy(n->data, v->p, v->n);
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
  *len = ++l->len;
done:
  UNLOCK(s);
  return rc;
}

int ch_shdict_pop(struct ch_shdict *d, const char *k, size_t kn, int left,
                  struct ch_shdict_out *o)
{
  struct store *s = d->s;
  uint32_t h = hash_key(s->seed, k, kn);
  struct clk c = { 0 };
  int rc = CH_SHDICT_OK;
  LOCK(s);
  uint32_t off = find(s, k, kn, h);
  if (!off || expired(E(s, off), &c)) {
    rc = CH_SHDICT_NOT_FOUND;
    goto done;
  }
  struct ent *e = E(s, off);
  if (e->type != CH_SHDICT_LIST) {
    rc = CH_SHDICT_NOT_LIST;
    goto done;
  }
  struct list *l = list_of(e);
  uint32_t noff = left ? l->first : l->last;
  struct lnode *n = at(s, noff);
  if (!copy_out(o, n->type, n->data, n->len)) {
    rc = CH_SHDICT_NO_BUFFER;
    goto done;
  }
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
  return rc;
}

int ch_shdict_llen(struct ch_shdict *d, const char *k, size_t kn, uint32_t *len)
{
  struct store *s = d->s;
  uint32_t h = hash_key(s->seed, k, kn);
  struct clk c = { 0 };
  int rc = CH_SHDICT_OK;
  *len = 0;
  LOCK(s);
  uint32_t off = find(s, k, kn, h);
  if (off && !expired(E(s, off), &c)) {
    if (E(s, off)->type != CH_SHDICT_LIST) rc = CH_SHDICT_NOT_LIST;
    else {
      *len = list_of(E(s, off))->len;
      touch(s, off);
    }
  }
  UNLOCK(s);
  return rc;
}

/* -- The whole store --------------------------------------------------------- */

void ch_shdict_flush_all(struct ch_shdict *d)
{
  struct store *s = d->s;
  LOCK(s);
  for (uint32_t off = s->lru_head; off; off = E(s, off)->older) E(s, off)->expires = 1;
  UNLOCK(s);
}

size_t ch_shdict_flush_expired(struct ch_shdict *d, size_t max)
{
  struct store *s = d->s;
  struct clk c = { 0 };
  size_t freed = 0;
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
  return freed;
}

/* Two walks under the lock: one to size the buffer, one to fill it. */
const char *ch_shdict_keys(struct ch_shdict *d, size_t max, size_t *count)
{
  struct store *s = d->s;
  struct clk c = { 0 };
  size_t bytes = 0, n = 0;
  LOCK(s);
  for (uint32_t off = s->lru_tail; off && (max == 0 || n < max); off = E(s, off)->newer) {
    struct ent *e = E(s, off);
    if (expired(e, &c)) continue;
    bytes += 2 + e->klen;
    n++;
  }
  char *buf = scratch_get(bytes ? bytes : 1), *p = buf;
  if (buf) {
    size_t i = 0;
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
  *count = n;
  return buf;
}
