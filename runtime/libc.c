/*
** The real libc functions, resolved once. A hook can run before our
** constructor (another library's constructor calling read): the hooks
** then call ch_libc_init themselves, which pthread_once makes safe.
*/
#include <dlfcn.h>
#include <pthread.h>

#include "libc.h"
#include "panic.h"

struct ch_libc ch_libc;

static pthread_once_t once = PTHREAD_ONCE_INIT;

static void *resolve(const char *name)
{
  void *p = dlsym(RTLD_NEXT, name);
  if (!p) ch_panic("hook: dlsym(RTLD_NEXT, \"%s\") found nothing", name);
  return p;
}

#define RESOLVE(name) (*(void **)&ch_libc.name = resolve(#name))

static void resolve_all(void)
{
  RESOLVE(read); RESOLVE(write); RESOLVE(readv); RESOLVE(writev);
  RESOLVE(recv); RESOLVE(send); RESOLVE(recvfrom); RESOLVE(sendto);
  RESOLVE(recvmsg); RESOLVE(sendmsg); RESOLVE(accept); RESOLVE(accept4);
  RESOLVE(connect); RESOLVE(close); RESOLVE(shutdown); RESOLVE(poll);
  RESOLVE(select); RESOLVE(sleep); RESOLVE(usleep); RESOLVE(nanosleep);
  RESOLVE(clock_nanosleep); RESOLVE(fcntl); RESOLVE(fcntl64); RESOLVE(ioctl);
  RESOLVE(setsockopt); RESOLVE(getaddrinfo); RESOLVE(socket);
  RESOLVE(socketpair); RESOLVE(pipe); RESOLVE(pipe2); RESOLVE(dup);
  RESOLVE(dup2); RESOLVE(dup3);
}

void ch_libc_init(void)
{
  pthread_once(&once, resolve_all);
}

__attribute__((constructor)) static void libc_ctor(void)
{
  ch_libc_init();
}
