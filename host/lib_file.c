/*
** cohost.core.file: regular files for Lua, without stalling the worker
** where it matters. The host has no asynchronous file I/O: write(2) and
** read(2) go straight to the page cache (fast, and what nginx does for
** its logs), while fsync(2) and fdatasync(2), which wait for the disk,
** run on the runtime's thread pool through ch_pool_call, so only the
** calling coroutine parks. lua/cohost/file.lua is the documented face.
**
** Failures return nil, message, errno as Lua's io library does: methods
** give strerror's message, path functions prefix the path ("p: No such
** file or directory"). Misuse (bad arguments, a closed file) raises.
*/
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>

#include <lauxlib.h>

#include "log.h"
#include "worker.h"
#include "vm/task.h"
#include "lib.h"

#define FILE_MT    "cohost.file"
#define IOV_BATCH  64           /* iovecs per writev(2); IOV_MAX is 1024 */

struct lfile {
  int fd;                       /* -1 once closed */
  int syncing;                  /* an fsync on the pool still uses fd */
  int close_pending;            /* close() came during the sync: the
                                ** syncing coroutine closes fd after it */
};

/* -- Helpers -------------------------------------------------------------- */

static int fail(lua_State *L, int err)
{
  lua_pushnil(L);
  lua_pushstring(L, strerror(err));
  lua_pushinteger(L, err);
  return 3;
}

static int fail_path(lua_State *L, const char *path, int err)
{
  lua_pushnil(L);
  lua_pushfstring(L, "%s: %s", path, strerror(err));
  lua_pushinteger(L, err);
  return 3;
}

static struct lfile *check_file(lua_State *L)
{
  return luaL_checkudata(L, 1, FILE_MT);
}

/* An open file's fd; raises on a closed one (misuse, as with io). */
static int open_fd(lua_State *L)
{
  struct lfile *f = check_file(L);
  if (f->fd < 0 || f->close_pending) luaL_error(L, "attempt to use a closed file");
  return f->fd;
}

/* open(2) flags for an fopen-style mode: "r", "w", "a", each with an
** optional "+", and "x" (fail if it exists, C11's "wx"). -1 if invalid. */
static int parse_flags(const char *m)
{
  int flags;
  switch (*m++) {
  case 'r': flags = O_RDONLY; break;
  case 'w': flags = O_WRONLY | O_CREAT | O_TRUNC; break;
  case 'a': flags = O_WRONLY | O_CREAT | O_APPEND; break;
  default: return -1;
  }
  for (; *m; m++) {
    if (*m == '+') flags = (flags & ~(O_RDONLY | O_WRONLY)) | O_RDWR;
    else if (*m == 'x' && (flags & O_CREAT)) flags |= O_EXCL;
    else if (*m != 'b') return -1;
  }
  return flags | O_CLOEXEC;
}

/* A permission mode: a number (420 for 0644) or an octal string "644". */
static mode_t check_mode(lua_State *L, int idx, mode_t dflt)
{
  if (lua_isnoneornil(L, idx)) return dflt;
  if (lua_type(L, idx) == LUA_TSTRING) {
    const char *s = lua_tostring(L, idx);
    char *end;
    long v = strtol(s, &end, 8);
    if (*s == '\0' || *end != '\0' || v < 0 || v > 07777) luaL_argerror(L, idx, "bad mode");
    return (mode_t)v;
  }
  lua_Integer v = luaL_checkinteger(L, idx);
  if (v < 0 || v > 07777) luaL_argerror(L, idx, "bad mode");
  return (mode_t)v;
}

/* Pushes a table for a stat result: size, mode (permission bits), type
** ("file", "directory", "link", "other"), mtime and atime (seconds with
** fractions), ino, nlink. */
static void push_stat(lua_State *L, const struct stat *st)
{
  lua_createtable(L, 0, 7);
  lua_pushnumber(L, (lua_Number)st->st_size);
  lua_setfield(L, -2, "size");
  lua_pushinteger(L, (lua_Integer)(st->st_mode & 07777));
  lua_setfield(L, -2, "mode");
  const char *type = S_ISREG(st->st_mode) ? "file" : S_ISDIR(st->st_mode) ? "directory"
                   : S_ISLNK(st->st_mode) ? "link" : "other";
  lua_pushstring(L, type);
  lua_setfield(L, -2, "type");
  lua_pushnumber(L, (lua_Number)st->st_mtim.tv_sec + (lua_Number)st->st_mtim.tv_nsec / 1e9);
  lua_setfield(L, -2, "mtime");
  lua_pushnumber(L, (lua_Number)st->st_atim.tv_sec + (lua_Number)st->st_atim.tv_nsec / 1e9);
  lua_setfield(L, -2, "atime");
  lua_pushnumber(L, (lua_Number)st->st_ino);
  lua_setfield(L, -2, "ino");
  lua_pushnumber(L, (lua_Number)st->st_nlink);
  lua_setfield(L, -2, "nlink");
}

/* -- Off-worker calls ----------------------------------------------------- */

struct sync_job {
  int fd;
  int data_only;                /* fdatasync rather than fsync */
  int err;                      /* errno of the call, or 0 */
};

/* Runs on a pool thread (or inline, see run_off_worker). */
static void sync_run(void *arg)
{
  struct sync_job *j = arg;
  int r = j->data_only ? fdatasync(j->fd) : fsync(j->fd);
  j->err = r < 0 ? errno : 0;
}

/* Yields. Runs fn(arg) on the thread pool when this coroutine may park
** here; inline otherwise (outside a coroutine, or where the VM forbids a
** park: an FFI callback, a finalizer), which blocks the worker like libc.
** A cancelled thread still gets its sync (the pool's park cannot be
** cancelled, and a final flush on shutdown is what a cancelled timer
** callback does): cancellation shows at its next wait. */
static void run_off_worker(void (*fn)(void *), void *arg)
{
  struct ch_coro *c = ch_current();
  if (c && ch_task_may_park(c) && ch_pool_call(fn, arg) == 0) return;
  fn(arg);
}

/* Yields. fsync or fdatasync on the pool. The fd must outlive the job, so
** a close() meanwhile is deferred to us (close_pending). */
static int do_sync(lua_State *L, int data_only)
{
  struct lfile *f = check_file(L);
  int fd = open_fd(L);
  /* On the heap: a pool thread writes it while this coroutine is parked
  ** (in COPY stack mode its stack is elsewhere then). */
  struct sync_job *j = malloc(sizeof *j);
  if (!j) return fail(L, ENOMEM);
  *j = (struct sync_job){ fd, data_only, 0 };
  f->syncing++;
  run_off_worker(sync_run, j);
  f->syncing--;
  if (f->close_pending && f->syncing == 0) {
    close(f->fd);
    f->fd = -1;
  }
  int err = j->err;
  free(j);
  if (err) return fail(L, err);
  lua_pushboolean(L, 1);
  return 1;
}

/* Yields. f:fsync() -> true or nil, err, errno. */
static int f_fsync(lua_State *L)
{
  return do_sync(L, 0);
}

/* Yields. f:fdatasync() -> true or nil, err, errno: data and the size,
** without other metadata (mtime), which is what an append-only log needs. */
static int f_fdatasync(lua_State *L)
{
  return do_sync(L, 1);
}

/* -- File methods --------------------------------------------------------- */

/* write(2) all of p[0, n), retrying short writes. 0 or errno. */
static int write_all(int fd, const char *p, size_t n)
{
  while (n > 0) {
    ssize_t w = write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    p += w;
    n -= (size_t)w;
  }
  return 0;
}

/* writev(2) all of iov[0, cnt), retrying short writes. 0 or errno. */
static int writev_all(int fd, struct iovec *iov, int cnt)
{
  while (cnt > 0) {
    ssize_t w = writev(fd, iov, cnt);
    if (w < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    size_t left = (size_t)w;
    while (cnt > 0 && left >= iov->iov_len) {
      left -= iov->iov_len;
      iov++;
      cnt--;
    }
    if (cnt > 0) {
      iov->iov_base = (char *)iov->iov_base + left;
      iov->iov_len -= left;
    }
  }
  return 0;
}

/* f:write(data) -> bytes or nil, err, errno. data is a string or an array
** of strings (numbers are converted), written in order with writev(2), IOV_BATCH
** pieces a call. Goes to the page cache: it does not wait for the disk.
** On failure some bytes may have been written. */
static int f_write(lua_State *L)
{
  int fd = open_fd(L);
  if (lua_type(L, 2) != LUA_TTABLE) {
    size_t n;
    const char *p = luaL_checklstring(L, 2, &n);
    int e = write_all(fd, p, n);
    if (e) return fail(L, e);
    lua_pushnumber(L, (lua_Number)n);
    return 1;
  }
  int n = (int)lua_objlen(L, 2);
  struct iovec iov[IOV_BATCH];
  lua_Number total = 0;
  for (int i = 1; i <= n; ) {
    int cnt = 0;
    /* The strings stay referenced by the table while we write. */
    for (; i <= n && cnt < IOV_BATCH; i++) {
      lua_rawgeti(L, 2, i);
      size_t len;
      const char *p = lua_tolstring(L, -1, &len);
      if (!p) return luaL_argerror(L, 2, "array of strings expected");
      if (lua_type(L, -1) == LUA_TNUMBER) {
        /* A converted number lives only on the stack: write it apart. */
        int e = writev_all(fd, iov, cnt);
        if (!e) e = write_all(fd, p, len);
        lua_pop(L, 1);
        if (e) return fail(L, e);
        total += (lua_Number)len;
        cnt = 0;
        continue;
      }
      lua_pop(L, 1);
      iov[cnt].iov_base = (void *)p;
      iov[cnt].iov_len = len;
      total += (lua_Number)len;
      cnt++;
    }
    int e = writev_all(fd, iov, cnt);
    if (e) return fail(L, e);
  }
  lua_pushnumber(L, total);
  return 1;
}

/* f:read([n]) -> data or nil, err, errno: up to n bytes ("" at end of
** file), or without n everything to the end. Reads the page cache; a
** cold read waits for the disk on the worker. */
static int f_read(lua_State *L)
{
  int fd = open_fd(L);
  luaL_Buffer b;
  if (!lua_isnoneornil(L, 2)) {
    lua_Integer want = luaL_checkinteger(L, 2);
    if (want < 0) return luaL_argerror(L, 2, "negative count");
    char *buf = malloc(want > 0 ? (size_t)want : 1);
    if (!buf) return fail(L, ENOMEM);
    size_t got = 0;
    while (got < (size_t)want) {
      ssize_t r = read(fd, buf + got, (size_t)want - got);
      if (r < 0) {
        if (errno == EINTR) continue;
        int e = errno;
        free(buf);
        return fail(L, e);
      }
      if (r == 0) break;
      got += (size_t)r;
    }
    lua_pushlstring(L, buf, got);
    free(buf);
    return 1;
  }
  luaL_buffinit(L, &b);
  for (;;) {
    char *p = luaL_prepbuffer(&b);
    ssize_t r = read(fd, p, LUAL_BUFFERSIZE);
    if (r < 0) {
      if (errno == EINTR) continue;
      int e = errno;
      luaL_pushresult(&b);
      lua_pop(L, 1);
      return fail(L, e);
    }
    if (r == 0) break;
    luaL_addsize(&b, (size_t)r);
  }
  luaL_pushresult(&b);
  return 1;
}

/* f:seek([whence [, offset]]) -> position or nil, err, errno, as Lua's
** file:seek: whence "set", "cur" (default) or "end". */
static int f_seek(lua_State *L)
{
  static const char *const names[] = { "set", "cur", "end", NULL };
  static const int modes[] = { SEEK_SET, SEEK_CUR, SEEK_END };
  int fd = open_fd(L);
  int op = luaL_checkoption(L, 2, "cur", names);
  lua_Number off = luaL_optnumber(L, 3, 0);
  off_t r = lseek(fd, (off_t)off, modes[op]);
  if (r < 0) return fail(L, errno);
  lua_pushnumber(L, (lua_Number)r);
  return 1;
}

/* f:truncate(len) -> true or nil, err, errno. The file position does not
** move (ftruncate(2)). */
static int f_truncate(lua_State *L)
{
  int fd = open_fd(L);
  lua_Number len = luaL_checknumber(L, 2);
  if (len < 0) return luaL_argerror(L, 2, "negative length");
  if (ftruncate(fd, (off_t)len) < 0) return fail(L, errno);
  lua_pushboolean(L, 1);
  return 1;
}

/* f:stat() -> table (see push_stat) or nil, err, errno. */
static int f_stat(lua_State *L)
{
  int fd = open_fd(L);
  struct stat st;
  if (fstat(fd, &st) < 0) return fail(L, errno);
  push_stat(L, &st);
  return 1;
}

/* f:fileno() -> the descriptor, for logs and tests. */
static int f_fileno(lua_State *L)
{
  lua_pushinteger(L, open_fd(L));
  return 1;
}

/* f:close() -> true or nil, err, errno. A second close raises, as io's
** does. During another coroutine's fsync on the same file, the close
** happens when that sync returns (its fd is in use on a pool thread). */
static int f_close(lua_State *L)
{
  struct lfile *f = check_file(L);
  open_fd(L);
  if (f->syncing) {
    f->close_pending = 1;
    lua_pushboolean(L, 1);
    return 1;
  }
  int fd = f->fd;
  f->fd = -1;
  if (close(fd) < 0 && errno != EINTR) return fail(L, errno);
  lua_pushboolean(L, 1);
  return 1;
}

/* A dropped file closes its fd. A syncing one cannot be collected: its
** coroutine holds it on the Lua stack. */
static int f_gc(lua_State *L)
{
  struct lfile *f = check_file(L);
  if (f->fd >= 0 && !f->syncing) {
    close(f->fd);
    f->fd = -1;
  }
  return 0;
}

static int f_tostring(lua_State *L)
{
  struct lfile *f = check_file(L);
  if (f->fd < 0 || f->close_pending) lua_pushliteral(L, "file (closed)");
  else lua_pushfstring(L, "file (fd %d)", f->fd);
  return 1;
}

/* -- Path functions ------------------------------------------------------- */

/* open(path [, flags [, mode]]) -> file or nil, err, errno. flags is
** fopen-style ("r" default, "w", "a", "r+", "w+", "a+", "x" to insist on
** creating); mode (default 0644, before the umask) applies on creation. */
static int l_open(lua_State *L)
{
  const char *path = luaL_checkstring(L, 1);
  const char *m = luaL_optstring(L, 2, "r");
  int flags = parse_flags(m);
  if (flags < 0) return luaL_argerror(L, 2, lua_pushfstring(L, "invalid mode '%s'", m));
  mode_t mode = check_mode(L, 3, 0644);
  struct lfile *f = lua_newuserdata(L, sizeof *f);
  f->fd = -1;
  f->syncing = 0;
  f->close_pending = 0;
  luaL_getmetatable(L, FILE_MT);
  lua_setmetatable(L, -2);
  int fd;
  do fd = open(path, flags, mode); while (fd < 0 && errno == EINTR);
  if (fd < 0) return fail_path(L, path, errno);
  f->fd = fd;
  return 1;
}

/* rename(old, new) -> true or nil, err, errno; atomic within a file system. */
static int l_rename(lua_State *L)
{
  const char *from = luaL_checkstring(L, 1);
  const char *to = luaL_checkstring(L, 2);
  if (rename(from, to) < 0) return fail_path(L, from, errno);
  lua_pushboolean(L, 1);
  return 1;
}

/* unlink(path) -> true or nil, err, errno. */
static int l_unlink(lua_State *L)
{
  const char *path = luaL_checkstring(L, 1);
  if (unlink(path) < 0) return fail_path(L, path, errno);
  lua_pushboolean(L, 1);
  return 1;
}

/* mkdir(path [, mode]) -> true or nil, err, errno (mode default 0755);
** EEXIST is an error here: the Lua face's mkdir_p tolerates it. */
static int l_mkdir(lua_State *L)
{
  const char *path = luaL_checkstring(L, 1);
  mode_t mode = check_mode(L, 2, 0755);
  if (mkdir(path, mode) < 0) return fail_path(L, path, errno);
  lua_pushboolean(L, 1);
  return 1;
}

/* rmdir(path) -> true or nil, err, errno (the directory must be empty). */
static int l_rmdir(lua_State *L)
{
  const char *path = luaL_checkstring(L, 1);
  if (rmdir(path) < 0) return fail_path(L, path, errno);
  lua_pushboolean(L, 1);
  return 1;
}

/* stat(path) -> table (see push_stat) or nil, err, errno. Follows links. */
static int l_stat(lua_State *L)
{
  const char *path = luaL_checkstring(L, 1);
  struct stat st;
  if (stat(path, &st) < 0) return fail_path(L, path, errno);
  push_stat(L, &st);
  return 1;
}

/* -- Module --------------------------------------------------------------- */

static const luaL_Reg file_methods[] = {
  { "write", f_write },
  { "read", f_read },
  { "seek", f_seek },
  { "truncate", f_truncate },
  { "fsync", f_fsync },
  { "fdatasync", f_fdatasync },
  { "stat", f_stat },
  { "fileno", f_fileno },
  { "close", f_close },
  { "__gc", f_gc },
  { "__tostring", f_tostring },
  { NULL, NULL }
};

static const luaL_Reg file_funcs[] = {
  { "open", l_open },
  { "rename", l_rename },
  { "unlink", l_unlink },
  { "mkdir", l_mkdir },
  { "rmdir", l_rmdir },
  { "stat", l_stat },
  { NULL, NULL }
};

int luaopen_cohost_core_file(lua_State *L)
{
  luaL_newmetatable(L, FILE_MT);
  luaL_register(L, NULL, file_methods);
  lua_pushvalue(L, -1);
  lua_setfield(L, -2, "__index");
  lua_pop(L, 1);
  lua_newtable(L);
  luaL_register(L, NULL, file_funcs);
  return 1;
}
