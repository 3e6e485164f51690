/*
** Test mode's one C fact: recognising busted's own script. busted's
** --lua=LUA option re-executes `LUA /path/to/busted --ignore-lua ARGS`;
** run as a plain script it would return to a host that goes on serving
** whatever listener a spec left open. Recognised, it runs the way
** `cohost --test ARGS` does (lua/cohost/testing.lua).
*/
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

#include "testmode.h"

int ch_testmode_is_busted(const char *path)
{
  /* "-" is stdin: read once elsewhere, never busted's script. */
  if (!strcmp(path, "-")) return 0;
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;   /* loadfile reports it */
  char head[4096];
  ssize_t n = read(fd, head, sizeof head - 1);
  close(fd);
  if (n <= 0) return 0;
  head[n] = '\0';
  /* Debian's and LuaRocks' busted scripts: a shebang, then
  ** require 'busted.runner'({ standalone = false }). */
  return head[0] == '#' && head[1] == '!' && strstr(head, "busted.runner") != NULL;
}
