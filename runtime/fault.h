/* Stack-overflow reporting: a SIGSEGV/SIGBUS handler on an alternate signal
** stack that names the coroutine whose guard was hit. */
#ifndef CH_FAULT_H
#define CH_FAULT_H

/* Installs the handler once per process (chaining to any handler that was
** there) and an alternate signal stack for the calling thread, which a
** fault on an overflowed stack needs. Returns 0 or -errno. */
int ch_fault_init(void);

/* Removes the calling thread's alternate stack if ch_fault_init made it;
** called when the thread's scheduler is freed. */
void ch_fault_fini(void);

#endif
