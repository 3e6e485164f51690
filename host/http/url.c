/* Request targets. See url.h. */
#include <string.h>

#include "http/url.h"

static int hexval(int ch)
{
  if (ch >= '0' && ch <= '9') return ch - '0';
  if (ch >= 'a' && ch <= 'f') return ch - 'a' + 10;
  if (ch >= 'A' && ch <= 'F') return ch - 'A' + 10;
  return -1;
}

/* Percent-decodes s[0..n) into out (n bytes fit); plus: '+' is a space.
** Returns the length, or -1 for a bad escape or a NUL. */
static int unescape(const char *s, size_t n, char *out, int plus)
{
  size_t o = 0;
  for (size_t i = 0; i < n; i++) {
    char ch = s[i];
    if (ch == '%') {
      if (i + 2 >= n) return -1;
      int hi = hexval((unsigned char)s[i + 1]), lo = hexval((unsigned char)s[i + 2]);
      if (hi < 0 || lo < 0) return -1;
      ch = (char)(hi * 16 + lo);
      if (ch == 0) return -1;
      i += 2;
    } else if (plus && ch == '+') {
      ch = ' ';
    }
    out[o++] = ch;
  }
  return (int)o;
}

/* Removes dot segments (RFC 3986 5.2.4) from the absolute path p[0..n) in
** place. Returns the new length, or -1 if it climbs above the root. */
static int remove_dots(char *p, int n)
{
  int o = 0, i = 0;
  while (i < n) {
    /* p[i] is '/' here: the start of a segment. */
    int j = i + 1;
    while (j < n && p[j] != '/') j++;
    int seg = j - i - 1;
    if (seg == 1 && p[i + 1] == '.') {
      if (j == n) p[o++] = '/';
    } else if (seg == 2 && p[i + 1] == '.' && p[i + 2] == '.') {
      if (o == 0) return -1;
      while (o > 0 && p[o - 1] != '/') o--;   /* drop the last segment */
      if (o > 0) o--;
      if (j == n) p[o++] = '/';
    } else {
      memmove(p + o, p + i, (size_t)(j - i));
      o += j - i;
    }
    i = j;
  }
  if (o == 0) p[o++] = '/';
  return o;
}

int ch_http_url_path(const char *t, size_t n, char *out, const char **q, size_t *qlen,
                     int *same)
{
  /* Most targets are a plain path: no escape, no query, no dot segment.
  ** One scan says so, and they need neither a copy nor a decode. */
  if (n > 0 && t[0] == '/') {
    size_t i = 1;
    while (i < n && t[i] != '%' && t[i] != '?' && !(t[i] == '.' && t[i - 1] == '/')) i++;
    if (i == n) {
      *q = NULL;
      *qlen = 0;
      *same = 1;
      return (int)n;
    }
  }
  const char *path = t, *qm = memchr(t, '?', n);
  size_t plen = qm ? (size_t)(qm - t) : n;
  *q = qm ? qm + 1 : NULL;
  *qlen = qm ? n - (size_t)(qm - t) - 1 : 0;
  *same = 0;
  if (plen > 0 && t[0] != '/') {
    if (plen == 1 && t[0] == '*') {   /* OPTIONS *: no query either */
      out[0] = '*';
      *q = NULL;
      *qlen = 0;
      *same = n == 1;
      return 1;
    }
    /* absolute-form: http://host[:port]/path */
    const char *ss = plen > 3 ? memchr(t, ':', plen) : NULL;
    if (!ss || ss + 2 >= t + plen || ss[1] != '/' || ss[2] != '/') return -1;
    const char *slash = memchr(ss + 3, '/', (size_t)(t + plen - ss - 3));
    if (!slash) { path = "/"; plen = 1; }
    else { path = slash; plen = (size_t)(t + plen - slash); }
  }
  if (plen == 0) return -1;
  int m = unescape(path, plen, out, 0);
  if (m >= 0) m = remove_dots(out, m);
  if (m < 0) return -1;
  *same = path == t && !qm && (size_t)m == n && memcmp(out, t, n) == 0;
  return m;
}

void ch_http_url_query(const char *q, size_t n, char *scratch,
                       void (*pair)(void *ud, const char *k, size_t kl, const char *v, size_t vl),
                       void *ud)
{
  size_t i = 0;
  while (i < n) {
    size_t j = i;
    while (j < n && q[j] != '&') j++;
    if (j > i) {
      const char *eq = memchr(q + i, '=', j - i);
      size_t kl = eq ? (size_t)(eq - q - i) : j - i;
      size_t vl = eq ? j - i - kl - 1 : 0;
      char *kd = scratch, *vd = scratch + kl;
      int a = unescape(q + i, kl, kd, 1);
      if (a < 0) { memcpy(kd, q + i, kl); a = (int)kl; }   /* keep raw */
      int b = eq ? unescape(eq + 1, vl, vd, 1) : 0;
      if (b < 0) { memcpy(vd, eq + 1, vl); b = (int)vl; }
      pair(ud, kd, (size_t)a, vd, (size_t)b);
    }
    i = j + 1;
  }
}
