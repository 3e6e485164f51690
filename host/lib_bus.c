/*
** cohost.core.bus: the transport of cohost.broadcast between workers.
** Each worker that has subscribers binds one Unix datagram socket in the
** abstract namespace, named after its cohost instance (the master's pid
** under --processes, else the process's own) and its worker id, which is
** distinct across worker processes. A publisher sends each other worker
** one datagram with MSG_DONTWAIT, so it never waits: a worker with no
** socket (no subscribers) refuses it, and one whose queue is full (the
** kernel holds net.unix.max_dgram_qlen datagrams, 512 by default, per
** socket) drops it, counted. The receiver is a task parked in the hooked
** recv(2) on the socket, which epoll wakes when a datagram arrives: no
** polling, and a worker's subscribers are woken in Lua (broadcast.lua).
** Abstract names need no files and vanish with the process.
** instance() names the same group for cohost.broadcast's Redis backend
** (lua/cohost/broadcast/redis.lua), which tells its own node's messages
** apart by it.
*/
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <lauxlib.h>

#include "worker.h"
#include "lib.h"

/* The largest datagram: a channel name and a message. Unix datagrams may
** be larger (up to the socket's send buffer), 64 KiB keeps every worker's
** receive buffer small. */
#define BUS_MAX 65536

/* The pid of this cohost instance: the master under --processes (the
** parent of every worker process), else this process. */
static long group(void)
{
  return ch_opts.processes ? (long)getppid() : (long)getpid();
}

/* Builds the address of worker id into *a; returns its length. */
static socklen_t bus_addr(struct sockaddr_un *a, int id)
{
  long group_pid = group();
  memset(a, 0, sizeof *a);
  a->sun_family = AF_UNIX;
  /* sun_path[0] = 0: the abstract namespace; the name is not terminated. */
  int n = snprintf(a->sun_path + 1, sizeof a->sun_path - 1, "cohost-bus/%ld/%d", group_pid, id);
  return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
}

/* open() -> fd, or nil, err ("address in use" while the worker this one
** replaces on a reload still holds the name). The fd is blocking: the
** hooked recv parks the receiving task on it. */
static int l_open(lua_State *L)
{
  struct ch_worker *w = ch_worker_self;
  if (!w) return luaL_error(L, "cohost.broadcast: not on a worker");
  int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return ch_lib_fail_errno(L, errno);
  struct sockaddr_un a;
  socklen_t len = bus_addr(&a, w->id);
  if (bind(fd, (struct sockaddr *)&a, len) < 0) {
    int e = errno;
    close(fd);
    return e == EADDRINUSE ? ch_lib_fail(L, "address in use") : ch_lib_fail_errno(L, e);
  }
  lua_pushinteger(L, fd);
  return 1;
}

/* This thread's unbound socket for sending: one per worker, for its life. */
static __thread int send_fd = -1;

/* send(worker_id, data) -> true, or nil, err: "absent" (no subscriber
** socket there), "full" (its queue is full: dropped), or the errno's word.
** Never waits. */
static int l_send(lua_State *L)
{
  int id = (int)luaL_checkinteger(L, 1);
  size_t n;
  const char *data = luaL_checklstring(L, 2, &n);
  if (n > BUS_MAX) return ch_lib_fail(L, "message too large");
  if (send_fd < 0) {
    send_fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (send_fd < 0) return ch_lib_fail_errno(L, errno);
    int sz = 4 * BUS_MAX;   /* room for a few messages in flight */
    setsockopt(send_fd, SOL_SOCKET, SO_SNDBUF, &sz, sizeof sz);
  }
  struct sockaddr_un a;
  socklen_t len = bus_addr(&a, id);
  if (sendto(send_fd, data, n, MSG_DONTWAIT | MSG_NOSIGNAL, (struct sockaddr *)&a, len) >= 0) {
    lua_pushboolean(L, 1);
    return 1;
  }
  if (errno == ECONNREFUSED || errno == ENOENT) return ch_lib_fail(L, "absent");
  if (errno == EAGAIN || errno == EWOULDBLOCK) return ch_lib_fail(L, "full");
  return ch_lib_fail_errno(L, errno);
}

/* Yields. recv(fd) -> the next datagram, or nil, err (the socket was
** closed under it). The buffer is the thread's, on the heap: a coroutine's
** stack is small, and the data is copied into Lua before anything else
** runs on this thread. */
static __thread char *rbuf;

static int l_recv(lua_State *L)
{
  int fd = (int)luaL_checkinteger(L, 1);
  if (!rbuf && !(rbuf = malloc(BUS_MAX))) return luaL_error(L, "not enough memory");
  for (;;) {
    ssize_t r = recv(fd, rbuf, BUS_MAX, 0);
    if (r >= 0) {
      lua_pushlstring(L, rbuf, (size_t)r);
      return 1;
    }
    if (errno != EINTR) return ch_lib_fail_errno(L, errno);
  }
}

static int l_close(lua_State *L)
{
  close((int)luaL_checkinteger(L, 1));
  return 0;
}

/* Reads the first line of a small file into buf (at most size - 1 bytes,
** without its newline); "" if it cannot be read. */
static void first_line(const char *path, char *buf, size_t size)
{
  buf[0] = 0;
  FILE *f = fopen(path, "re");
  if (!f) return;
  if (fgets(buf, (int)size, f)) buf[strcspn(buf, "\n")] = 0;
  fclose(f);
}

/* instance() -> "host boot_id pid start": a name of this cohost instance
** that every worker thread and process of it shares and no other instance
** has, here or on another machine. The pid is group()'s, the start its
** start time in clock ticks since boot (field 22 of /proc/PID/stat), so a
** reused pid is another name; the boot id tells two boots apart, the host
** name two machines, and containers on one kernel unless they share the
** host's name (and then also a pid and its start tick). */
static int l_instance(lua_State *L)
{
  long pid = group();
  char host[256], boot[64], path[64], stat[1024];
  if (gethostname(host, sizeof host) < 0) host[0] = 0;
  host[sizeof host - 1] = 0;
  first_line("/proc/sys/kernel/random/boot_id", boot, sizeof boot);
  snprintf(path, sizeof path, "/proc/%ld/stat", pid);
  first_line(path, stat, sizeof stat);
  /* The command name, field 2, may hold spaces and parentheses: count
  ** from its closing one. Each step finds the space before field n. */
  unsigned long long start = 0;
  char *p = strrchr(stat, ')');
  for (int n = 3; p && n <= 22; n++) p = strchr(p + 1, ' ');
  if (p) start = strtoull(p + 1, NULL, 10);
  char out[512];
  snprintf(out, sizeof out, "%s %s %ld %llu", host, boot, pid, start);
  lua_pushstring(L, out);
  return 1;
}

static const luaL_Reg bus_funcs[] = {
  { "open", l_open },
  { "send", l_send },
  { "recv", l_recv },
  { "close", l_close },
  { "instance", l_instance },
  { NULL, NULL }
};

int luaopen_cohost_core_bus(lua_State *L)
{
  lua_newtable(L);
  luaL_register(L, NULL, bus_funcs);
  lua_pushinteger(L, BUS_MAX);
  lua_setfield(L, -2, "max");
  return 1;
}
