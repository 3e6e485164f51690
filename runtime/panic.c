/* Fatal errors. The only place runtime code writes to stderr. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "panic.h"

void ch_panic(const char *fmt, ...)
{
  va_list ap;
  fputs("cohost: panic: ", stderr);
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputc('\n', stderr);
  abort();
}
