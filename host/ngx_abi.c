/*
** The few nginx C functions Debian's OpenResty libraries call through the
** FFI (lua-nginx-string's resty.string declares them with ffi.cdef and
** calls ffi.C.ngx_hex_dump, ffi.C.ngx_atoi), with nginx's signatures and
** semantics (src/core/ngx_string.c), so those libraries run unmodified.
** cohost links with -rdynamic, so ffi.C finds them in the executable.
** They keep nginx's names, not ch_*: the name is the interface. The
** digests, random bytes and ciphers of resty.sha*, md5, random and aes are
** OpenSSL's own symbols (libcrypto is linked), found the same way.
*/
#include <stddef.h>
#include <stdint.h>

/* nginx's ngx_int_t and its NGX_ERROR. */
typedef intptr_t ngx_int_t;
#define NGX_ERROR (-1)

unsigned char *ngx_hex_dump(unsigned char *dst, const unsigned char *src, size_t len);
ngx_int_t ngx_atoi(const unsigned char *line, size_t n);

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
