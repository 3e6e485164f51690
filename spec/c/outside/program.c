/*
** A C program from outside the tree, built by spec/install_spec.lua
** against the runtime as a user gets it: the installed cohost.h and
** libcohost.a with pkg-config's flags, or runtime/include/ and
** build/libcohost.a. It includes <poll.h> beside "cohost.h", which an
** internal runtime/poll.h on the include path used to hide.
**
** One coroutine waits on a pipe with the hooked poll(2) while another
** sleeps, then writes: the poll parks only its coroutine, so the writer
** runs. Prints "read: hello" and exits 0; a poll that blocked the thread
** would time out, and the program says so and exits 1.
*/
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cohost.h"

static int fds[2];
static char got[16];

static void reader(void *arg)
{
  (void)arg;
  struct pollfd p = { .fd = fds[0], .events = POLLIN, .revents = 0 };
  if (poll(&p, 1, 10000) != 1 || !(p.revents & POLLIN)) return;
  ssize_t n = read(fds[0], got, sizeof got - 1);
  if (n > 0) got[n] = '\0';
}

static void writer(void *arg)
{
  (void)arg;
  if (ch_sleep_ms(20) == 0 && write(fds[1], "hello", 5) != 5) perror("write");
}

int main(void)
{
  if (pipe(fds) < 0) {
    perror("pipe");
    return 1;
  }
  if (ch_spawn(reader, NULL) < 0 || ch_spawn(writer, NULL) < 0) {
    fprintf(stderr, "ch_spawn failed\n");
    return 1;
  }
  int r = ch_run();
  if (r < 0 || strcmp(got, "hello") != 0) {
    fprintf(stderr, "the reader got \"%s\" (ch_run: %d)\n", got, r);
    return 1;
  }
  printf("read: %s\n", got);
  return 0;
}
