/*
** The libc hooks (hook.c): read, write, accept, connect, poll, sleep, ...
** defined in the program so that the dynamic linker binds every call to
** them first. They are a shim over io.c that keeps libc's promises
** (errno, partial I/O, the user's O_NONBLOCK, SO_RCVTIMEO/SO_SNDTIMEO).
*/
#ifndef CH_HOOK_H
#define CH_HOOK_H

/* Resolves the real libc functions (ch_libc_init). Called by a
** constructor and by every new scheduler: the scheduler's reference is
** also what makes a static link of any runtime use pull the hooks in. */
void ch_hook_init(void);

#endif
