/*
** The few nginx C functions Debian's OpenResty libraries call through the
** FFI (lua-nginx-string's resty.string declares them with ffi.cdef and
** calls ffi.C.ngx_hex_dump, ffi.C.ngx_atoi), with nginx's signatures and
** semantics (src/core/ngx_string.c), so those libraries run unmodified.
** lua-resty-core's ngx/base64.lua calls ngx_encode_base64url and
** ngx_decode_base64url the same way. cohost links with -rdynamic, so
** ffi.C finds them in the executable.
** They keep nginx's names, not ch_*: the name is the interface. The
** digests, random bytes and ciphers of resty.sha*, md5, random and aes are
** OpenSSL's own symbols (libcrypto is linked), found the same way.
*/
#include <stddef.h>
#include <stdint.h>

/* nginx's ngx_int_t, ngx_str_t and return codes. */
typedef intptr_t ngx_int_t;
typedef struct {
  size_t len;
  unsigned char *data;
} ngx_str_t;
#define NGX_OK 0
#define NGX_ERROR (-1)

unsigned char *ngx_hex_dump(unsigned char *dst, const unsigned char *src, size_t len);
ngx_int_t ngx_atoi(const unsigned char *line, size_t n);
void ngx_encode_base64url(ngx_str_t *dst, ngx_str_t *src);
ngx_int_t ngx_decode_base64url(ngx_str_t *dst, ngx_str_t *src);

/* Writes len bytes of src as 2 * len lower-case hex digits at dst (no
** terminator); returns the end of what it wrote. */
unsigned char *ngx_hex_dump(unsigned char *dst, const unsigned char *src, size_t len)
{
  static const char hex[] = "0123456789abcdef";
  while (len--) {
    *dst++ = (unsigned char)hex[*src >> 4];
    *dst++ = (unsigned char)hex[*src++ & 0xf];
  }
  return dst;
}

/* The non-negative decimal number in line[0..n), or NGX_ERROR for an
** empty string, a non-digit (signs and spaces included) or a value past
** INTPTR_MAX. */
ngx_int_t ngx_atoi(const unsigned char *line, size_t n)
{
  if (n == 0) return NGX_ERROR;
  ngx_int_t value = 0, cutoff = INTPTR_MAX / 10, cutlim = INTPTR_MAX % 10;
  for (; n--; line++) {
    if (*line < '0' || *line > '9') return NGX_ERROR;
    if (value >= cutoff && (value > cutoff || *line - '0' > cutlim)) return NGX_ERROR;
    value = value * 10 + (*line - '0');
  }
  return value;
}

/* -- base64url (RFC 4648 section 5), as nginx's: no padding written ----- */

static const char url64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

/* Writes src as base64url at dst->data (room for 4 * ceil(len / 3) bytes)
** and sets dst->len. */
void ngx_encode_base64url(ngx_str_t *dst, ngx_str_t *src)
{
  const unsigned char *s = src->data;
  unsigned char *d = dst->data;
  size_t len = src->len;
  for (; len > 2; s += 3, len -= 3) {
    *d++ = (unsigned char)url64[s[0] >> 2];
    *d++ = (unsigned char)url64[((s[0] & 3) << 4) | (s[1] >> 4)];
    *d++ = (unsigned char)url64[((s[1] & 0x0f) << 2) | (s[2] >> 6)];
    *d++ = (unsigned char)url64[s[2] & 0x3f];
  }
  if (len) {
    *d++ = (unsigned char)url64[s[0] >> 2];
    if (len == 1) {
      *d++ = (unsigned char)url64[(s[0] & 3) << 4];
    } else {
      *d++ = (unsigned char)url64[((s[0] & 3) << 4) | (s[1] >> 4)];
      *d++ = (unsigned char)url64[(s[1] & 0x0f) << 2];
    }
  }
  dst->len = (size_t)(d - dst->data);
}

/* The value of base64url digit c, or -1. */
static int url64_value(unsigned char c)
{
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '-') return 62;
  if (c == '_') return 63;
  return -1;
}

/* Decodes src up to its first '=' into dst->data (room for 3 *
** ceil(len / 4) bytes) and sets dst->len; NGX_ERROR for a byte outside the
** alphabet before that or a length that leaves one digit over (len % 4 ==
** 1), as nginx's ngx_decode_base64_internal. */
ngx_int_t ngx_decode_base64url(ngx_str_t *dst, ngx_str_t *src)
{
  size_t len;
  for (len = 0; len < src->len && src->data[len] != '='; len++)
    if (url64_value(src->data[len]) < 0) return NGX_ERROR;
  if (len % 4 == 1) return NGX_ERROR;
  const unsigned char *s = src->data;
  unsigned char *d = dst->data;
  for (; len > 3; s += 4, len -= 4) {
    int a = url64_value(s[0]), b = url64_value(s[1]), c = url64_value(s[2]), e = url64_value(s[3]);
    *d++ = (unsigned char)(a << 2 | b >> 4);
    *d++ = (unsigned char)(b << 4 | c >> 2);
    *d++ = (unsigned char)(c << 6 | e);
  }
  if (len > 1) *d++ = (unsigned char)(url64_value(s[0]) << 2 | url64_value(s[1]) >> 4);
  if (len > 2) *d++ = (unsigned char)(url64_value(s[1]) << 4 | url64_value(s[2]) >> 2);
  dst->len = (size_t)(d - dst->data);
  return NGX_OK;
}
