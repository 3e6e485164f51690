/*
** UTF-8 validation. See utf8.h.
**
** In C rather than Lua because of where it runs: inside a decoder that
** LuaJIT compiles as one trace. A loop in Lua would be an inner loop
** there, which splits the decoder's trace at every string; an FFI call
** is compiled to a plain call and keeps it whole.
*/
#include <stdint.h>
#include <string.h>

#include "utf8.h"

int ch_utf8_valid(const unsigned char *s, size_t n)
{
  size_t i = 0;
  while (i < n) {
    /* ASCII eight bytes at a time (memcpy: no alignment assumed). */
    while (i + 8 <= n) {
      uint64_t w;
      memcpy(&w, s + i, 8);
      if (w & 0x8080808080808080ull) break;
      i += 8;
    }
    if (i >= n) break;
    unsigned c = s[i];
    if (c < 0x80) {
      i++;
    } else if (c < 0xC2) {            /* a continuation byte, or overlong */
      return 0;
    } else if (c < 0xE0) {
      if (n - i < 2 || (s[i + 1] & 0xC0) != 0x80) return 0;
      i += 2;
    } else if (c < 0xF0) {
      if (n - i < 3) return 0;
      unsigned c1 = s[i + 1];
      if ((c1 & 0xC0) != 0x80 || (s[i + 2] & 0xC0) != 0x80) return 0;
      if ((c == 0xE0 && c1 < 0xA0) || (c == 0xED && c1 >= 0xA0)) return 0;  /* overlong, surrogate */
      i += 3;
    } else if (c < 0xF5) {
      if (n - i < 4) return 0;
      unsigned c1 = s[i + 1];
      if ((c1 & 0xC0) != 0x80 || (s[i + 2] & 0xC0) != 0x80 || (s[i + 3] & 0xC0) != 0x80) return 0;
      if ((c == 0xF0 && c1 < 0x90) || (c == 0xF4 && c1 >= 0x90)) return 0;  /* overlong, past U+10FFFF */
      i += 4;
    } else {
      return 0;
    }
  }
  return 1;
}
