/*
** Shared dictionary stores: the process's registry of named stores, each
** a fixed-size region shared by every worker thread (and, when made before
** the fork, every worker process), and the operations of ngx.shared.DICT
** on them, returning C results and error codes. No Lua: lib_shdict.c
** turns these into Lua values.
**
** Every operation takes the store's lock and releases it before it
** returns; it never yields, never calls back and never raises, so a
** holder always finishes promptly. Values come out copied (see struct
** ch_shdict_out), for the caller to push after the unlock.
*/
#ifndef CH_SHDICT_STORE_H
#define CH_SHDICT_STORE_H

#include <stddef.h>
#include <stdint.h>

#define CH_SHDICT_MIN_SIZE 8192u         /* leaves ~5.5 KiB for entries */
#define CH_SHDICT_MAX_SIZE 0xfffff000u   /* offsets are 32-bit */
#define CH_SHDICT_KEY_MAX 65535          /* key bytes; keys are 1..this */

/* Value types, numbered as Lua's (and OpenResty's). */
enum { CH_SHDICT_NIL = 0, CH_SHDICT_BOOL = 1, CH_SHDICT_NUM = 3, CH_SHDICT_STR = 4,
       CH_SHDICT_LIST = 5 };

/* What an operation returns: 0, or why it failed. lib_shdict.c gives the
** soft failures OpenResty's strings, quoted here. */
enum {
  CH_SHDICT_OK = 0,
  CH_SHDICT_NOT_FOUND,    /* "not found"; get and pop: nothing there */
  CH_SHDICT_EXISTS,       /* "exists" */
  CH_SHDICT_NO_MEMORY,    /* "no memory": the store has no room */
  CH_SHDICT_NOT_NUMBER,   /* "not a number" */
  CH_SHDICT_NOT_LIST,     /* "value not a list" */
  CH_SHDICT_IS_LIST,      /* "value is a list" */
  CH_SHDICT_NO_BUFFER     /* the heap refused the copy-out buffer (the
                          ** binding raises "no memory") */
};

/* How ch_shdict_set treats an existing key. */
enum { CH_SHDICT_SET = 0, CH_SHDICT_ADD = 1, CH_SHDICT_REPLACE = 2,
       CH_SHDICT_SAFE = 4 /* or'ed in: never evict unexpired entries */ };

/* One store and its name; opaque. Lives until the process ends. */
struct ch_shdict;

/* A value going in. */
struct ch_shdict_val {
  int type;          /* CH_SHDICT_*: NIL, BOOL, NUM or STR */
  const char *p;     /* its bytes: a string's, a double's 8, a boolean's
                     ** 1 (0 or 1); the caller's */
  size_t n;
};

/* A value copied out under the lock. A string's bytes are in buf when
** they fit, else in this thread's scratch buffer, valid until the next
** operation on this thread; call ch_shdict_trim() once they are pushed. */
struct ch_shdict_out {
  int type;          /* CH_SHDICT_BOOL, NUM or STR */
  double num;        /* NUM */
  int b;             /* BOOL */
  const char *p;     /* STR: bytes, in buf or the scratch buffer */
  size_t n;
  uint32_t flags;    /* get: the user flags */
  int stale;         /* get: the entry had expired */
  char buf[64];      /* small strings: no scratch */
};

/* -- The registry ---------------------------------------------------------- */

/* Makes shared dict name of size bytes for --shdict, before any worker
** exists: a worker process forked afterwards maps the same store, and
** cohost.shared.new(name, any size) in a script returns it. NULL, or why
** it failed. */
const char *ch_shdict_create(const char *name, long size);

/* Finds or makes store name (non-empty) with bytes of capacity, in range.
** Sets *made when it made it. NULL with *err ("exists with another size",
** "cannot map its memory") when it exists with another size, unless
** ch_shdict_create made it, or cannot be mapped. */
struct ch_shdict *ch_shdict_open(const char *name, uint32_t bytes, int *made, const char **err);

/* The store called name, or NULL if none was made in this process. */
struct ch_shdict *ch_shdict_find(const char *name);

const char *ch_shdict_name(const struct ch_shdict *d);       /* as given */
uint32_t ch_shdict_capacity(const struct ch_shdict *d);      /* bytes, as made */

/* Bytes in free blocks. An entry needs 48 + value + key bytes rounded up
** to 8, which may not be contiguous. */
uint32_t ch_shdict_free_space(struct ch_shdict *d);

/* What is wrong with the store, or NULL: walks the arena, the free lists,
** the LRU list and the buckets and checks their invariants. O(n). */
const char *ch_shdict_check(struct ch_shdict *d);

/* Gives back a large scratch buffer once a value or the keys copied into
** it have been pushed. */
void ch_shdict_trim(void);

/* -- Operations -------------------------------------------------------------
** Keys are k[0..kn), kn in 1..CH_SHDICT_KEY_MAX. TTLs are seconds, 0 for
** never: a positive one below 1 ms counts as 1 ms. *forcible is set when
** an unexpired entry was evicted to make room. */

/* Copies key's value into *o, or NOT_FOUND. stale: an expired entry still
** in the store is returned too, with o->stale set. IS_LIST, NO_BUFFER. */
int ch_shdict_get(struct ch_shdict *d, const char *k, size_t kn, int stale,
                  struct ch_shdict_out *o);

/* Stores v under key (mode: CH_SHDICT_SET, ADD or REPLACE, maybe | SAFE);
** a NIL value deletes. NOT_FOUND (replace), EXISTS (add), NO_MEMORY; a
** failed store has dropped the old value, as in OpenResty. */
int ch_shdict_set(struct ch_shdict *d, const char *k, size_t kn, const struct ch_shdict_val *v,
                  double ttl, uint32_t flags, int mode, int *forcible);

/* Adds delta to key's number, leaving the sum in *num. A missing key is
** NOT_FOUND, unless init is given: then it is made as *init + delta,
** expiring after init_ttl. NOT_NUMBER, NO_MEMORY. */
int ch_shdict_incr(struct ch_shdict *d, const char *k, size_t kn, double delta,
                   const double *init, double init_ttl, double *num, int *forcible);

/* Sets key's TTL, or NOT_FOUND. */
int ch_shdict_expire(struct ch_shdict *d, const char *k, size_t kn, double ttl);

/* Milliseconds key has left in *ms (0: never expires), or NOT_FOUND. */
int ch_shdict_ttl(struct ch_shdict *d, const char *k, size_t kn, uint64_t *ms);

/* Pushes v (NUM or STR) on the left or right end of key's list, making the
** list if missing; its new length in *len. NOT_LIST, NO_MEMORY. */
int ch_shdict_push(struct ch_shdict *d, const char *k, size_t kn, int left,
                   const struct ch_shdict_val *v, uint32_t *len);

/* Pops the left or right end of key's list into *o; the key goes with its
** last element. NOT_FOUND (missing or empty), NOT_LIST, NO_BUFFER. */
int ch_shdict_pop(struct ch_shdict *d, const char *k, size_t kn, int left,
                  struct ch_shdict_out *o);

/* The length of key's list in *len (0 when missing), or NOT_LIST. */
int ch_shdict_llen(struct ch_shdict *d, const char *k, size_t kn, uint32_t *len);

/* Marks every entry expired (get_stale still sees them); the memory comes
** back through ch_shdict_flush_expired or when a store needs room. O(n). */
void ch_shdict_flush_all(struct ch_shdict *d);

/* Frees expired entries, at most max (0: all), from the LRU tail; how many.
** O(n). */
size_t ch_shdict_flush_expired(struct ch_shdict *d, size_t max);

/* Copies the unexpired keys, least recently used first, at most max (0:
** all), into the scratch buffer, each as 2 bytes of length (host order)
** then its bytes; sets *count to how many. NULL if the buffer could not be
** had. O(n). */
const char *ch_shdict_keys(struct ch_shdict *d, size_t max, size_t *count);

#endif
