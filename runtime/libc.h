/*
** The real libc functions behind every hook, resolved once with
** dlsym(RTLD_NEXT): what the runtime itself calls, so that its own I/O
** (io.c, the loop's eventfd, the fd classification) never goes through
** its hooks. hook.c defines read, write, ... in the program; calling
** read() from runtime code would re-enter the hook.
*/
#ifndef CH_LIBC_H
#define CH_LIBC_H

#include <netdb.h>
#include <poll.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

struct ch_libc {
  ssize_t (*read)(int, void *, size_t);
  ssize_t (*write)(int, const void *, size_t);
  ssize_t (*readv)(int, const struct iovec *, int);
  ssize_t (*writev)(int, const struct iovec *, int);
  ssize_t (*recv)(int, void *, size_t, int);
  ssize_t (*send)(int, const void *, size_t, int);
  ssize_t (*recvfrom)(int, void *, size_t, int, struct sockaddr *, socklen_t *);
  ssize_t (*sendto)(int, const void *, size_t, int, const struct sockaddr *, socklen_t);
  ssize_t (*recvmsg)(int, struct msghdr *, int);
  ssize_t (*sendmsg)(int, const struct msghdr *, int);
  int (*accept)(int, struct sockaddr *, socklen_t *);
  int (*accept4)(int, struct sockaddr *, socklen_t *, int);
  int (*connect)(int, const struct sockaddr *, socklen_t);
  int (*close)(int);
  int (*shutdown)(int, int);
  int (*poll)(struct pollfd *, nfds_t, int);
  int (*select)(int, fd_set *, fd_set *, fd_set *, struct timeval *);
  unsigned (*sleep)(unsigned);
  int (*usleep)(useconds_t);
  int (*nanosleep)(const struct timespec *, struct timespec *);
  int (*clock_nanosleep)(clockid_t, int, const struct timespec *, struct timespec *);
  int (*fcntl)(int, int, ...);
  int (*fcntl64)(int, int, ...);
  int (*ioctl)(int, unsigned long, ...);
  int (*setsockopt)(int, int, int, const void *, socklen_t);
  int (*getaddrinfo)(const char *, const char *, const struct addrinfo *, struct addrinfo **);
  int (*socket)(int, int, int);
  int (*socketpair)(int, int, int, int[2]);
  int (*pipe)(int[2]);
  int (*pipe2)(int[2], int);
  int (*dup)(int);
  int (*dup2)(int, int);
  int (*dup3)(int, int, int);
};

/* The table; every pointer is set once ch_libc_init has run (a
** constructor runs it at load time, before main). Read-only after. */
extern struct ch_libc ch_libc;

/* Resolves every entry (once per process; later calls return at once).
** Panics when one is missing: a hook without its libc function cannot
** keep libc's promises. */
void ch_libc_init(void);

#endif
