/* Fatal errors: the one exit for kernel failures the runtime cannot recover
** from (epoll_create failing, a missing libc symbol). */
#ifndef CH_PANIC_H
#define CH_PANIC_H

/* Prints "cohost: panic: <message>" to stderr and aborts. */
void ch_panic(const char *fmt, ...) __attribute__((noreturn, format(printf, 1, 2)));

#endif
