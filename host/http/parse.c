/*
** HTTP/1.1 request parsing. The head is scanned here first, strictly,
** because every request-smuggling trick lives in what lenient parsers
** forgive: bare LF or CR, obs-fold, whitespace before the colon, NUL,
** Content-Length twice or beside Transfer-Encoding, codings other than
** chunked. What passes then goes through http-parser (Debian's
** libhttp-parser, the parser Node.js shipped for years), which parses the
** request line. Chunked bodies are decoded here, strictly (see chunked()).
** A rejected head is never half-used: the caller answers the status and
** closes.
*/
#include <string.h>
#include <strings.h>

#include "http/parse.h"

/* RFC 9110 tchar: the bytes a header name may hold. */
static const uint8_t tchar[256] = {
  ['!'] = 1, ['#'] = 1, ['$'] = 1, ['%'] = 1, ['&'] = 1, ['\''] = 1, ['*'] = 1,
  ['+'] = 1, ['-'] = 1, ['.'] = 1, ['^'] = 1, ['_'] = 1, ['`'] = 1, ['|'] = 1,
  ['~'] = 1,
  ['0'] = 1, ['1'] = 1, ['2'] = 1, ['3'] = 1, ['4'] = 1, ['5'] = 1, ['6'] = 1,
  ['7'] = 1, ['8'] = 1, ['9'] = 1,
  ['A'] = 1, ['B'] = 1, ['C'] = 1, ['D'] = 1, ['E'] = 1, ['F'] = 1, ['G'] = 1,
  ['H'] = 1, ['I'] = 1, ['J'] = 1, ['K'] = 1, ['L'] = 1, ['M'] = 1, ['N'] = 1,
  ['O'] = 1, ['P'] = 1, ['Q'] = 1, ['R'] = 1, ['S'] = 1, ['T'] = 1, ['U'] = 1,
  ['V'] = 1, ['W'] = 1, ['X'] = 1, ['Y'] = 1, ['Z'] = 1,
  ['a'] = 1, ['b'] = 1, ['c'] = 1, ['d'] = 1, ['e'] = 1, ['f'] = 1, ['g'] = 1,
  ['h'] = 1, ['i'] = 1, ['j'] = 1, ['k'] = 1, ['l'] = 1, ['m'] = 1, ['n'] = 1,
  ['o'] = 1, ['p'] = 1, ['q'] = 1, ['r'] = 1, ['s'] = 1, ['t'] = 1, ['u'] = 1,
  ['v'] = 1, ['w'] = 1, ['x'] = 1, ['y'] = 1, ['z'] = 1,
};

/* The bytes the head scan stops at: LF, CR and the controls it refuses
** (every byte below 0x20 but tab, and DEL). Anything else is skipped, by
** next_stop, or by a table lookup per byte, a quarter of what the three
** tests per byte cost (docs/benchmarks.md). */
static const uint8_t stop[256] = {
  [0x00] = 1, [0x01] = 1, [0x02] = 1, [0x03] = 1, [0x04] = 1, [0x05] = 1, [0x06] = 1,
  [0x07] = 1, [0x08] = 1, [0x0a] = 1, [0x0b] = 1, [0x0c] = 1, [0x0d] = 1, [0x0e] = 1,
  [0x0f] = 1, [0x10] = 1, [0x11] = 1, [0x12] = 1, [0x13] = 1, [0x14] = 1, [0x15] = 1,
  [0x16] = 1, [0x17] = 1, [0x18] = 1, [0x19] = 1, [0x1a] = 1, [0x1b] = 1, [0x1c] = 1,
  [0x1d] = 1, [0x1e] = 1, [0x1f] = 1, [0x7f] = 1,
};

/* The first stop byte of buf[pos, n), or n: sixteen bytes a step where
** sixteen remain (GCC's vector extensions: SSE2 on x86-64, NEON on
** AArch64), then the table. A head is mostly plain bytes between stops
** tens of bytes apart, and a byte a step was a fifth of a hello request's
** instructions. The lanes' mask is read as two words, lowest address in
** the low byte (both targets are little-endian). */
typedef uint8_t ch_u8x16 __attribute__((vector_size(16)));

static inline uint32_t next_stop(const char *buf, uint32_t pos, uint32_t n)
{
  while (n - pos >= 16) {
    ch_u8x16 v;
    memcpy(&v, buf + pos, 16);
    ch_u8x16 m = (ch_u8x16)((v < 0x20) & (v != '\t')) | (ch_u8x16)(v == 0x7f);
    uint64_t lo, hi;
    memcpy(&lo, &m, 8);
    memcpy(&hi, (const char *)&m + 8, 8);
    if (lo) return pos + (uint32_t)__builtin_ctzll(lo) / 8;
    if (hi) return pos + 8 + (uint32_t)__builtin_ctzll(hi) / 8;
    pos += 16;
  }
  while (pos < n && !stop[(unsigned char)buf[pos]]) pos++;
  return pos;
}

/* Target bytes of the request-line fast path (line_fast): 0x21-0x7e but
** '#'. http-parser's URL states take every one of them in a path or a
** query (its normal_url_char, plus '?' which starts or continues the
** query); '#' (a fragment) and bytes past 0x7e go the slow way. */
static const uint8_t fast_target[256] = {
  ['!'] = 1, ['"'] = 1, ['$'] = 1, ['%'] = 1, ['&'] = 1, ['\''] = 1, ['('] = 1,
  [')'] = 1, ['*'] = 1, ['+'] = 1, [','] = 1, ['-'] = 1, ['.'] = 1, ['/'] = 1,
  ['0'] = 1, ['1'] = 1, ['2'] = 1, ['3'] = 1, ['4'] = 1, ['5'] = 1, ['6'] = 1,
  ['7'] = 1, ['8'] = 1, ['9'] = 1, [':'] = 1, [';'] = 1, ['<'] = 1, ['='] = 1,
  ['>'] = 1, ['?'] = 1, ['@'] = 1,
  ['A'] = 1, ['B'] = 1, ['C'] = 1, ['D'] = 1, ['E'] = 1, ['F'] = 1, ['G'] = 1,
  ['H'] = 1, ['I'] = 1, ['J'] = 1, ['K'] = 1, ['L'] = 1, ['M'] = 1, ['N'] = 1,
  ['O'] = 1, ['P'] = 1, ['Q'] = 1, ['R'] = 1, ['S'] = 1, ['T'] = 1, ['U'] = 1,
  ['V'] = 1, ['W'] = 1, ['X'] = 1, ['Y'] = 1, ['Z'] = 1,
  ['['] = 1, ['\\'] = 1, [']'] = 1, ['^'] = 1, ['_'] = 1, ['`'] = 1,
  ['a'] = 1, ['b'] = 1, ['c'] = 1, ['d'] = 1, ['e'] = 1, ['f'] = 1, ['g'] = 1,
  ['h'] = 1, ['i'] = 1, ['j'] = 1, ['k'] = 1, ['l'] = 1, ['m'] = 1, ['n'] = 1,
  ['o'] = 1, ['p'] = 1, ['q'] = 1, ['r'] = 1, ['s'] = 1, ['t'] = 1, ['u'] = 1,
  ['v'] = 1, ['w'] = 1, ['x'] = 1, ['y'] = 1, ['z'] = 1,
  ['{'] = 1, ['|'] = 1, ['}'] = 1, ['~'] = 1,
};

int ch_http_line_fast = 1;

void ch_http_head_init(struct ch_http_head *h)
{
  /* Only the scalar part: the header arrays are written before read. */
  memset(h, 0, offsetof(struct ch_http_head, name));
  h->content_length = -1;
  h->body_left = 0;
  h->version_minor = 0;
  h->chunked = h->keepalive = h->expect_continue = h->body_done = 0;
  h->ck_state = 0;
  h->ck_line = 0;
  h->ck_left = h->ck_total = 0;
  h->body_limit = UINT64_MAX;
}

int ch_http_name_is(const char *buf, struct ch_http_span s, const char *lname)
{
  size_t n = strlen(lname);
  if (s.len != n) return 0;
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)buf[s.off + i];
    if (c >= 'A' && c <= 'Z') c = (unsigned char)(c + 32);
    if (c != (unsigned char)lname[i]) return 0;
  }
  return 1;
}

/* -- http-parser callbacks ------------------------------------------------ */

static int on_url(http_parser *p, const char *at, size_t len)
{
  struct ch_http_head *h = p->data;
  /* The head is parsed in one call over one buffer, so the target comes
  ** in one piece. */
  h->target.off = (uint32_t)(at - h->base);
  h->target.len = (uint32_t)len;
  return 0;
}

static int on_headers_complete(http_parser *p)
{
  http_parser_pause(p, 1);   /* a request line only: stop at once */
  return 0;
}

static const http_parser_settings line_settings = {
  .on_url = on_url,
  .on_headers_complete = on_headers_complete,
};

/* -- Header semantics ------------------------------------------------------ */

static int is_ows(char c) { return c == ' ' || c == '\t'; }

/* Whether the comma-separated list v[0..n) holds token (lower case),
** case-insensitively. */
static int token_in(const char *v, size_t n, const char *token)
{
  size_t tl = strlen(token), i = 0;
  while (i < n) {
    while (i < n && (is_ows(v[i]) || v[i] == ',')) i++;
    size_t s0 = i;
    while (i < n && v[i] != ',' && !is_ows(v[i])) i++;
    if (i - s0 == tl && strncasecmp(v + s0, token, tl) == 0) return 1;
  }
  return 0;
}

/* Checks one Transfer-Encoding list into *chunked_last; returns 0, -400 for
** a malformed list or chunked not last, -501 for an unknown coding. */
static int coding_list(const char *v, size_t n, int *seen_chunked, int *unknown)
{
  size_t i = 0;
  for (;;) {
    while (i < n && is_ows(v[i])) i++;
    size_t s = i;
    while (i < n && v[i] != ',' && !is_ows(v[i])) i++;
    size_t e = i;
    while (i < n && is_ows(v[i])) i++;
    if (e == s) return -400;                /* empty element */
    if (*seen_chunked) return -400;         /* chunked must be last, once */
    if (e - s == 7 && strncasecmp(v + s, "chunked", 7) == 0) *seen_chunked = 1;
    else *unknown = 1;
    if (i == n) return 0;
    if (v[i] != ',') return -400;
    i++;
  }
}

/* Content-Length, Transfer-Encoding, Host and Expect, after the scan. */
static int semantics(struct ch_http_head *h, const char *buf)
{
  int ncl = 0, nhost = 0, nte = 0, chunked = 0, unknown = 0, conn_close = 0, conn_ka = 0;
  for (int i = 0; i < h->nheaders; i++) {
    struct ch_http_span nm = h->name[i], vl = h->value[i];
    const char *v = buf + vl.off;
    switch (nm.len) {
    case 14:
      if (!ch_http_name_is(buf, nm, "content-length")) break;
      /* Twice is a 400 even with equal values: proxies disagree on it. */
      if (++ncl > 1 || vl.len == 0 || vl.len > 18) return -400;
      {
        int64_t n = 0;
        for (uint32_t k = 0; k < vl.len; k++) {
          if (v[k] < '0' || v[k] > '9') return -400;
          n = n * 10 + (v[k] - '0');
        }
        h->content_length = n;
      }
      break;
    case 17:
      if (!ch_http_name_is(buf, nm, "transfer-encoding")) break;
      nte++;
      {
        int r = coding_list(v, vl.len, &chunked, &unknown);
        if (r < 0) return r;
      }
      break;
    case 4:
      if (ch_http_name_is(buf, nm, "host") && ++nhost > 1) return -400;
      break;
    case 10:
      if (ch_http_name_is(buf, nm, "connection")) {
        if (token_in(v, vl.len, "close")) conn_close = 1;
        if (token_in(v, vl.len, "keep-alive")) conn_ka = 1;
      }
      break;
    case 6:
      if (ch_http_name_is(buf, nm, "expect")) {
        /* Other expectations are ignored, as nginx does. */
        if (vl.len == 12 && strncasecmp(v, "100-continue", 12) == 0) h->expect_continue = 1;
      }
      break;
    }
  }
  if (nte) {
    if (ncl) return -400;                 /* smuggling: never guess which wins */
    if (h->version_minor == 0) return -400;   /* HTTP/1.0 has no chunked */
    if (unknown) return -501;
    if (!chunked) return -400;
    h->chunked = 1;
  }
  if (h->version_minor == 1 && nhost == 0) return -400;   /* RFC 9112 3.2 */
  /* RFC 9112 9.3: HTTP/1.1 persists unless "close"; 1.0 only on request. */
  h->keepalive = (uint8_t)(!conn_close && (h->version_minor == 1 || conn_ka));
  if (h->content_length > 0) h->body_left = (uint64_t)h->content_length;
  else if (!h->chunked) h->body_done = 1;
  return 0;
}

/* -- The head ------------------------------------------------------------- */

/* One complete header line buf[s..e) (CRLF excluded). */
static int header_line(struct ch_http_head *h, const char *buf, uint32_t s, uint32_t e)
{
  if (is_ows(buf[s])) return -400;          /* obs-fold, or space first */
  uint32_t i = s;
  while (i < e && tchar[(unsigned char)buf[i]]) i++;
  if (i == s || i == e || buf[i] != ':') return -400;   /* no name, or bytes
                                            ** (whitespace) before the colon */
  if (h->nheaders == CH_HTTP_MAX_HEADERS) return -431;
  uint32_t vs = i + 1, ve = e;
  while (vs < ve && is_ows(buf[vs])) vs++;
  while (ve > vs && is_ows(buf[ve - 1])) ve--;
  h->name[h->nheaders] = (struct ch_http_span){ s, i - s };
  h->value[h->nheaders] = (struct ch_http_span){ vs, ve - vs };
  h->nheaders++;
  return 0;
}

/* "HTTP/1.x" at the request line's end, before http-parser sees it, so the
** status for a wrong version is 505 and not a generic 400. A higher minor
** version than ours, HTTP/1.2 to 1.9, is taken as HTTP/1.1 (RFC 9110 2.5:
** a recipient SHOULD treat it as the highest minor version it supports;
** nginx does so); only another major version is a 505. */
static int version(struct ch_http_head *h, const char *buf, uint32_t s, uint32_t e)
{
  const char *sp = NULL;
  for (uint32_t i = e; i > s; i--)
    if (buf[i - 1] == ' ') { sp = buf + i; break; }
  if (!sp || (size_t)(buf + e - sp) != 8 || memcmp(sp, "HTTP/", 5) != 0 ||
      sp[6] != '.' || sp[5] < '0' || sp[5] > '9' || sp[7] < '0' || sp[7] > '9')
    return -400;
  if (sp[5] != '1') return -505;
  h->version_minor = sp[7] == '0' ? 0 : 1;
  uint32_t m = s;
  while (m < e && tchar[(unsigned char)buf[m]]) m++;
  /* One space each side of the target, exactly (RFC 9112 3: lenient
  ** whitespace here is a smuggling vector). */
  const char *t0 = buf + m + 1, *t1 = sp - 1;   /* the target: [t0, t1) */
  if (m == s || buf[m] != ' ' || t1 <= t0 || *t0 == ' ' || memchr(t0, ' ', (size_t)(t1 - t0)))
    return -400;
  h->method = (struct ch_http_span){ s, m - s };
  return 0;
}

/* Whether the request line, already checked by version() (a token, one
** space, a target with no space or control byte, one space, HTTP/1.0 or
** HTTP/1.1), is one http-parser surely accepts with this target: then it
** is not run (its cost per request: docs/benchmarks.md). That holds for a method it
** knows, exactly, and an origin-form target ('/' first) of fast_target
** bytes, shorter than its header limit (HTTP_MAX_HEADER_SIZE, 80 KiB).
** Every other line goes through http-parser. */
static int line_fast(struct ch_http_head *h, const char *buf)
{
  const char *m = buf + h->method.off;
  uint32_t ml = h->method.len, ts = h->method.off + ml + 1;
  uint32_t te = h->line_end - 11;   /* " HTTP/1.x\r\n" follows the target */
  if (h->line_end - h->start > 8192 || buf[ts] != '/') return 0;
  int known;
  switch (ml) {   /* constant-size memcmp: compiled to a compare or two */
  case 3: known = !memcmp(m, "GET", 3) || !memcmp(m, "PUT", 3); break;
  case 4: known = !memcmp(m, "HEAD", 4) || !memcmp(m, "POST", 4); break;
  case 5: known = !memcmp(m, "PATCH", 5); break;
  case 6: known = !memcmp(m, "DELETE", 6); break;
  case 7: known = !memcmp(m, "OPTIONS", 7); break;
  default: known = 0;
  }
  if (!known) return 0;
  for (uint32_t i = ts; i < te; i++)
    if (!fast_target[(unsigned char)buf[i]]) return 0;
  h->target = (struct ch_http_span){ ts, te - ts };
  return 1;
}

int ch_http_head_parse(struct ch_http_head *h, const char *buf, size_t len,
                       const struct ch_http_limits *lim)
{
  if (h->head_len) return (int)h->head_len;
  uint32_t pos = h->scan, n = (uint32_t)len;
  for (; pos < n; pos++) {
    if ((pos = next_stop(buf, pos, n)) == n) break;
    unsigned char c = (unsigned char)buf[pos];
    if (c == '\n') {
      if (pos == 0 || buf[pos - 1] != '\r') return -400;   /* bare LF */
      uint32_t s = h->line_start, e = pos - 1;
      h->line_start = pos + 1;
      if (!h->line_end) {
        if (e == s) {                        /* an empty line before the request */
          h->start = pos + 1;
          if (h->start > lim->max_line) return -400;
          continue;
        }
        if (e - s > lim->max_line) return -414;
        int r = version(h, buf, s, e);
        if (r < 0) return r;
        h->line_end = pos + 1;
      } else if (e == s) {                   /* the blank line: done */
        h->head_len = pos + 1;
        break;
      } else {
        int r = header_line(h, buf, s, e);
        if (r < 0) return r;
      }
    } else if (c == '\r') {
      if (pos + 1 == n) break;               /* its LF is in the next read */
      if (buf[pos + 1] != '\n') return -400;   /* bare CR */
    } else {
      return -400;                           /* NUL and other controls */
    }
  }
  h->scan = pos;
  if (!h->head_len) {
    if (!h->line_end) {
      if (pos - h->start > lim->max_line + 1) return -414;
    } else if (pos - h->line_end > lim->max_header) {
      return -431;
    }
    return 0;
  }
  if (h->head_len - h->line_end > lim->max_header) return -431;
  int r = semantics(h, buf);
  if (r < 0) return r;
  if (ch_http_line_fast && line_fast(h, buf)) return (int)h->head_len;
  /* http-parser over the request line alone, then an empty header block:
  ** the header lines were checked above, more strictly than it would, and
  ** it must not disagree on them (tabs in OWS, for one). */
  http_parser_init(&h->p, HTTP_REQUEST);
  h->p.data = h;
  h->base = buf;
  h->target.len = 0;
  size_t want = h->line_end - h->start;
  size_t got = http_parser_execute(&h->p, &line_settings, buf + h->start, want);
  if (HTTP_PARSER_ERRNO(&h->p) == HPE_OK && got == want)
    http_parser_execute(&h->p, &line_settings, "\r\n", 2);
  if (HTTP_PARSER_ERRNO(&h->p) != HPE_PAUSED || h->target.len == 0) {
    h->head_len = 0;
    return -400;
  }
  /* The minor digit on the wire, which version() may have lowered. */
  if (h->p.http_major != 1 || h->p.http_minor != (unsigned short)(buf[h->line_end - 3] - '0')) {
    h->head_len = 0;
    return -400;
  }
  return (int)h->head_len;
}

/* -- The body ------------------------------------------------------------- */

/* Chunked decoding (RFC 9112 7.1), by hand and strictly: http-parser
** forgives bare LF and CR in chunk lines, NUL in extensions, any two bytes
** after chunk data and obs-fold in trailers, and each of those is a way
** to make two parsers see different messages. */
enum {
  CK_SIZE = 0,        /* hex digits of the size; at least one */
  CK_SIZE_BWS,        /* whitespace after the size: only ';' may follow */
  CK_EXT,             /* extension bytes up to CR */
  CK_SIZE_LF,         /* CR seen after the size line */
  CK_DATA,            /* chunk data */
  CK_DATA_CR,         /* CRLF after the data */
  CK_DATA_LF,
  CK_TRAILER,         /* start of a trailer line (or the final CRLF) */
  CK_TRAILER_NAME,
  CK_TRAILER_VALUE,
  CK_TRAILER_LF,      /* CR seen at a trailer line's end */
  CK_END_LF,          /* CR of the final empty line seen */
};

#define CK_MAX_LINE   4096   /* bytes of size line (extensions) per chunk */

static long chunked(struct ch_http_head *h, const char *buf, size_t len,
                    ch_http_body_fn sink, void *ud)
{
  size_t i = 0;
  while (i < len) {
    unsigned char c = (unsigned char)buf[i];
    switch (h->ck_state) {
    case CK_SIZE: {
      int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
            : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
      if (d >= 0) {
        if (h->ck_left >> 52) return -400;   /* past 2^56: no body is that big */
        if (++h->ck_line > CK_MAX_LINE) return -400;
        h->ck_left = h->ck_left * 16 + (uint64_t)d;
        break;
      }
      if (h->ck_line == 0) return -400;              /* no digits */
      if (h->body_limit != UINT64_MAX && h->ck_left > h->body_limit - h->ck_total)
        return -413;                                 /* declared too big: say so now */
      /* The byte that ends the digits (";" or BWS) is part of the line's
      ** CK_MAX_LINE too: uncounted, a line one byte longer passed. */
      if (c != '\r' && ++h->ck_line > CK_MAX_LINE) return -400;
      if (c == '\r') h->ck_state = CK_SIZE_LF;
      else if (c == ';') h->ck_state = CK_EXT;
      else if (is_ows((char)c)) h->ck_state = CK_SIZE_BWS;
      else return -400;
      break;
    }
    case CK_SIZE_BWS:
      if (c == ';') h->ck_state = CK_EXT;
      else if (!is_ows((char)c)) return -400;        /* "5 x": no ';' */
      if (++h->ck_line > CK_MAX_LINE) return -400;
      break;
    case CK_EXT:
      if (c == '\r') { h->ck_state = CK_SIZE_LF; break; }   /* the CR is not counted */
      if ((c < 0x20 && c != '\t') || c == 0x7f) return -400;   /* LF, NUL, ... */
      if (++h->ck_line > CK_MAX_LINE) return -400;
      break;
    case CK_SIZE_LF:
      if (c != '\n') return -400;
      h->ck_line = 0;
      if (h->ck_left == 0) {
        h->ck_state = CK_TRAILER;
      } else {
        h->ck_state = CK_DATA;
      }
      break;
    case CK_DATA: {
      size_t n = len - i < h->ck_left ? len - i : (size_t)h->ck_left;
      sink(ud, buf + i, n);
      h->ck_left -= n;
      h->ck_total += n;
      i += n;
      if (h->ck_left == 0) h->ck_state = CK_DATA_CR;
      continue;
    }
    case CK_DATA_CR:
      if (c != '\r') return -400;
      h->ck_state = CK_DATA_LF;
      break;
    case CK_DATA_LF:
      if (c != '\n') return -400;
      h->ck_state = CK_SIZE;
      h->ck_line = 0;
      break;
    case CK_TRAILER:
      if (c == '\r') { h->ck_state = CK_END_LF; break; }
      if (!tchar[c]) return -400;                    /* obs-fold, space first, bare LF */
      h->ck_state = CK_TRAILER_NAME;
      goto count;
    case CK_TRAILER_NAME:
      if (c == ':') h->ck_state = CK_TRAILER_VALUE;
      else if (!tchar[c]) return -400;               /* space before the colon */
      goto count;
    case CK_TRAILER_VALUE:
      if (c == '\r') h->ck_state = CK_TRAILER_LF;
      else if ((c < 0x20 && c != '\t') || c == 0x7f) return -400;
      goto count;
    case CK_TRAILER_LF:
      if (c != '\n') return -400;
      h->ck_state = CK_TRAILER;
      goto count;
    case CK_END_LF:
      if (c != '\n') return -400;
      h->body_done = 1;
      return (long)(i + 1);
    }
    i++;
    continue;
  count:
    if (++h->ck_line > CK_MAX_LINE * 2) return -400;   /* trailer section size */
    i++;
  }
  return (long)i;
}

long ch_http_body_parse(struct ch_http_head *h, const char *buf, size_t len,
                        ch_http_body_fn sink, void *ud)
{
  if (h->body_done || len == 0) return 0;
  if (!h->chunked) {
    size_t n = len < h->body_left ? len : (size_t)h->body_left;
    sink(ud, buf, n);
    h->body_left -= n;
    if (h->body_left == 0) h->body_done = 1;
    return (long)n;
  }
  return chunked(h, buf, len, sink, ud);
}
