/* Test mode: `cohost --test` and busted's re-exec under --lua=cohost. */
#ifndef CH_TESTMODE_H
#define CH_TESTMODE_H

/* The chunk main.c runs instead of a script in test mode: busted under
** lua/cohost/testing.lua, with arg[1..] as busted's arguments. */
#define CH_TESTMODE_CHUNK "require('cohost.testing').run(arg)"

/* 1 if the file at path is busted's command-line script (what busted
** --lua=cohost runs us with: `cohost /usr/bin/busted --ignore-lua ...`),
** else 0. Reads at most its first 4 KiB. */
int ch_testmode_is_busted(const char *path);

#endif
