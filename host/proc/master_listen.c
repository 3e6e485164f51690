/*
** Listening sockets a --processes master keeps for its worker processes.
** See master_listen.h.
**
** The channel is each worker's SOCK_SEQPACKET socketpair with the master:
** a request is one message, its reply one message (with the fd as
** SCM_RIGHTS for a unix socket). The master is one thread that answers at
** once, so a worker's ask is a plain blocking round trip; a mutex keeps
** the threads of a worker process from crossing their replies.
*/
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <netinet/in.h>

#include "log.h"
#include "net/listen.h"
#include "net/listener.h"
#include "proc/master_listen.h"

enum { KIND_UNIX = 'u', KIND_PORT = 'p', KIND_CLAIM = 'c', KIND_TCP = 't' };

struct request {
  uint8_t type;                 /* CH_MASTER_MSG_LISTEN */
  uint8_t kind;                 /* KIND_* */
  int32_t nth;
  int32_t worker;               /* KIND_TCP: the worker's id; else 0 */
  int32_t backlog;
  uint32_t alen;
  struct sockaddr_storage addr;
  char key[512];                /* the listen() address string */
};
_Static_assert(sizeof(struct request) <= CH_MASTER_MSG_MAX, "listen request too large");

struct reply {
  int32_t err;                  /* 0 or an errno */
  int32_t port;                 /* KIND_PORT: the port */
};

/* A reply as a message, with room for one passed fd. */
struct reply_msg {
  struct reply rp;
  struct iovec iov;
  union {
    struct cmsghdr h;
    char buf[CMSG_SPACE(sizeof(int))];
  } ctl;
  struct msghdr mh;
};

/* Points m's header at its reply, and at its fd room when with_fd. */
static void reply_msg_init(struct reply_msg *m, int with_fd)
{
  memset(m, 0, sizeof *m);
  m->iov.iov_base = &m->rp;
  m->iov.iov_len = sizeof m->rp;
  m->mh.msg_iov = &m->iov;
  m->mh.msg_iovlen = 1;
  if (with_fd) {
    m->mh.msg_control = m->ctl.buf;
    m->mh.msg_controllen = sizeof m->ctl.buf;
  }
}

/* -- Worker side ---------------------------------------------------------- */

static int channel = -1;
static pthread_mutex_t ask_lock = PTHREAD_MUTEX_INITIALIZER;

/* Sends rq and waits for the reply; *fd gets a passed descriptor or -1.
** Raw system calls: the hooks would park the coroutine while the mutex is
** held. Returns the reply's port (>= 0) or -errno; -ENOSYS when there is
** no master to ask (none, or gone). */
static int ask(const struct request *rq, int *fd)
{
  *fd = -1;
  if (channel < 0) return -ENOSYS;
  struct reply_msg m;
  reply_msg_init(&m, 1);
  pthread_mutex_lock(&ask_lock);
  long r = syscall(SYS_sendto, channel, rq, sizeof *rq, MSG_NOSIGNAL, NULL, 0);
  if (r == (long)sizeof *rq)
    while ((r = syscall(SYS_recvmsg, channel, &m.mh, MSG_CMSG_CLOEXEC)) < 0 && errno == EINTR) {}
  pthread_mutex_unlock(&ask_lock);
  if (r != (long)sizeof m.rp) return -ENOSYS;
  struct cmsghdr *c = CMSG_FIRSTHDR(&m.mh);
  if (c && c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS)
    memcpy(fd, CMSG_DATA(c), sizeof *fd);
  if (m.rp.err) {
    if (*fd >= 0) close(*fd);
    *fd = -1;
    return -m.rp.err;
  }
  return m.rp.port;
}

/* Fills rq; worker is the asking worker's id for KIND_TCP, else 0. */
static int make_request(struct request *rq, int kind, const char *key, int nth, int worker,
                        const void *a, socklen_t alen, int backlog)
{
  size_t klen = strlen(key);
  if (klen >= sizeof rq->key || alen > sizeof rq->addr) return -ENAMETOOLONG;
  memset(rq, 0, sizeof *rq);
  rq->type = CH_MASTER_MSG_LISTEN;
  rq->kind = (uint8_t)kind;
  rq->nth = nth;
  rq->worker = worker;
  rq->backlog = backlog;
  rq->alen = alen;
  memcpy(&rq->addr, a, alen);
  memcpy(rq->key, key, klen);
  return 0;
}

static int open_tcp(const char *key, int nth, int worker, const struct sockaddr *a,
                    socklen_t alen, int backlog)
{
  struct request rq;
  int fd, r = make_request(&rq, KIND_TCP, key, nth, worker, a, alen, backlog);
  if (r < 0) return r;
  r = ask(&rq, &fd);
  if (r < 0) return r;
  return fd >= 0 ? fd : -EPROTO;
}

static int open_unix(const char *key, int nth, const struct sockaddr_un *a, socklen_t alen,
                     int backlog)
{
  struct request rq;
  int fd, r = make_request(&rq, KIND_UNIX, key, nth, 0, a, alen, backlog);
  if (r < 0) return r;
  r = ask(&rq, &fd);
  if (r < 0) return r;
  return fd >= 0 ? fd : -EPROTO;
}

static int reserve_port(const char *key, int nth, const struct sockaddr *a, socklen_t alen)
{
  struct request rq;
  int fd, r = make_request(&rq, KIND_PORT, key, nth, 0, a, alen, 0);
  if (r < 0) return r;
  r = ask(&rq, &fd);
  if (fd >= 0) close(fd);
  return r == 0 ? -EPROTO : r;
}

static int claim_port(const char *key, int nth, const struct sockaddr *a, socklen_t alen)
{
  struct request rq;
  int fd, r = make_request(&rq, KIND_CLAIM, key, nth, 0, a, alen, 0);
  if (r < 0) return r;
  r = ask(&rq, &fd);
  if (fd >= 0) close(fd);
  return r > 0 ? 0 : r;
}

/* What this worker process's listeners ask the master for. */
static const struct ch_listen_ops ops = { claim_port, reserve_port, open_tcp, open_unix };

void ch_mlisten_set_channel(int fd)
{
  channel = fd;
  ch_listener_set_ops(&ops);
}

/* -- Master side ---------------------------------------------------------- */

struct entry {
  struct entry *next;
  int kind;
  int nth;
  int worker;                   /* KIND_TCP: the worker id it is for */
  int fd;                       /* the unix or TCP listener, the port's
                                ** holder; -1 for a claim */
  int port;                     /* KIND_PORT */
  int backlog;                  /* KIND_TCP: as last listened with */
  unsigned gen;                 /* the newest generation that asked */
  unsigned first_gen;           /* the generation that made it */
  struct sockaddr_un path;      /* KIND_UNIX: to unlink */
  char key[];
};

static struct entry *entries;

static struct entry *find(int kind, const char *key, int nth, int worker)
{
  for (struct entry *e = entries; e; e = e->next)
    if (e->kind == kind && e->nth == nth && e->worker == worker && strcmp(e->key, key) == 0)
      return e;
  return NULL;
}

/* Binds port 0 of a (SO_REUSEPORT, not listening: it takes no
** connections) and returns the fd, with the port in *port; or -errno. */
static int reserve(const struct sockaddr_storage *ss, socklen_t alen, int *port)
{
  int one = 1;
  int fd = socket(ss->ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -errno;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one);
  if (ss->ss_family == AF_INET6) setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one);
  struct sockaddr_storage got;
  socklen_t len = sizeof got;
  if (bind(fd, (const struct sockaddr *)ss, alen) < 0 ||
      getsockname(fd, (struct sockaddr *)&got, &len) < 0) {
    int e = errno;
    close(fd);
    return -e;
  }
  *port = ntohs(got.ss_family == AF_INET ? ((struct sockaddr_in *)&got)->sin_port
                                         : ((struct sockaddr_in6 *)&got)->sin6_port);
  return fd;
}

/* Finds or makes the entry rq asks for. Returns it, or NULL with *err. */
static struct entry *lookup(const struct request *rq, unsigned gen, int *err)
{
  int worker = rq->kind == KIND_TCP ? rq->worker : 0;
  struct entry *e = find(rq->kind, rq->key, rq->nth, worker);
  if (e) {
    if (gen > e->gen) e->gen = gen;
    /* A new script may ask for another backlog: listen() again sets it. */
    if (e->kind == KIND_TCP && rq->backlog != e->backlog && listen(e->fd, rq->backlog) == 0)
      e->backlog = rq->backlog;
    return e;
  }
  size_t klen = strlen(rq->key);
  if (!(e = calloc(1, sizeof *e + klen + 1))) {
    *err = ENOMEM;
    return NULL;
  }
  int fd = -1, r;   /* r: the fd, or 0 for a claim; or -errno */
  if (rq->kind == KIND_UNIX) {
    memcpy(&e->path, &rq->addr, sizeof e->path);
    r = fd = ch_listen_unix(&e->path, (socklen_t)rq->alen, rq->backlog);
  } else if (rq->kind == KIND_TCP) {
    /* The worker claimed the port (or got port 0 reserved) first. */
    r = fd = ch_listen_tcp((const struct sockaddr *)&rq->addr, (socklen_t)rq->alen, rq->backlog);
  } else if (rq->kind == KIND_CLAIM) {
    /* The first ask for a fixed port, in any generation: nobody may
    ** listen there yet. Later asks (the other processes, restarts,
    ** reloads) find the entry and join with SO_REUSEPORT. A claim keeps
    ** no socket. */
    r = ch_listen_probe((const struct sockaddr *)&rq->addr, (socklen_t)rq->alen);
  } else {
    r = fd = reserve(&rq->addr, (socklen_t)rq->alen, &e->port);
  }
  if (r < 0) {
    *err = -r;
    free(e);
    return NULL;
  }
  e->kind = rq->kind;
  e->nth = rq->nth;
  e->worker = worker;
  e->fd = fd;
  e->backlog = rq->backlog;
  e->gen = e->first_gen = gen;
  memcpy(e->key, rq->key, klen + 1);
  e->next = entries;
  entries = e;
  return e;
}

void ch_mlisten_answer(int fd, const void *msg, size_t got, unsigned gen)
{
  struct request rq;
  struct entry *e = NULL;
  int err = 0;
  memset(&rq, 0, sizeof rq);
  memcpy(&rq, msg, got < sizeof rq ? got : sizeof rq);
  rq.key[sizeof rq.key - 1] = 0;
  if (got != sizeof rq ||
      (rq.kind != KIND_UNIX && rq.kind != KIND_PORT && rq.kind != KIND_CLAIM && rq.kind != KIND_TCP) ||
      rq.alen > sizeof rq.addr)
    err = EPROTO;
  else
    e = lookup(&rq, gen, &err);
  struct reply_msg m;
  reply_msg_init(&m, e && (e->kind == KIND_UNIX || e->kind == KIND_TCP));
  m.rp.err = err;
  if (e) m.rp.port = e->port;
  if (m.mh.msg_control) {
    struct cmsghdr *c = CMSG_FIRSTHDR(&m.mh);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(c), &e->fd, sizeof e->fd);
  }
  /* A worker that went away meanwhile: EPIPE, nothing to do. */
  if (sendmsg(fd, &m.mh, MSG_NOSIGNAL | MSG_DONTWAIT) < 0 && errno != EPIPE)
    ch_log(CH_LOG_WARN, "master: cannot answer a worker's listen request: %s", strerror(errno));
  if (err)
    ch_log(CH_LOG_ERR, "master: cannot listen on %s for the worker processes: %s", rq.key,
           strerror(err));
}

static void drop(struct entry *e)
{
  if (e->fd >= 0) close(e->fd);
  if (e->kind == KIND_UNIX) unlink(e->path.sun_path);
  free(e);
}

void ch_mlisten_retire(unsigned gen)
{
  for (struct entry **p = &entries; *p;) {
    struct entry *e = *p;
    if (e->gen < gen) {
      *p = e->next;
      if (e->kind != KIND_TCP)   /* one line an address, not one a worker */
        ch_log(CH_LOG_INFO, "master: the new workers do not listen on %s: closed", e->key);
      drop(e);
    } else {
      p = &e->next;
    }
  }
}

void ch_mlisten_abort(unsigned gen)
{
  for (struct entry **p = &entries; *p;) {
    struct entry *e = *p;
    if (e->first_gen == gen) {
      *p = e->next;
      drop(e);
    } else {
      p = &e->next;
    }
  }
}

void ch_mlisten_drop_workers(int lo, int hi)
{
  for (struct entry **p = &entries; *p;) {
    struct entry *e = *p;
    if (e->kind == KIND_TCP && e->worker >= lo && e->worker < hi) {
      *p = e->next;
      drop(e);
    } else {
      p = &e->next;
    }
  }
}

void ch_mlisten_forget(void)
{
  while (entries) {
    struct entry *e = entries;
    entries = e->next;
    if (e->fd >= 0) close(e->fd);
    free(e);
  }
}

void ch_mlisten_close_all(void)
{
  while (entries) {
    struct entry *e = entries;
    entries = e->next;
    drop(e);
  }
}
