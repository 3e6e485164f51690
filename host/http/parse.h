/*
** HTTP/1.1 request parsing: a strict scan of the request head (line
** endings, obs-fold, NUL and control bytes, header syntax, Content-Length
** and Transfer-Encoding rules), with Node.js's http-parser underneath for
** the request line and chunked bodies. No I/O, no Lua, no allocation: the
** server feeds bytes it has read, and libFuzzer feeds anything.
*/
#ifndef CH_HTTP_PARSE_H
#define CH_HTTP_PARSE_H

#include <stddef.h>
#include <stdint.h>

#include <http_parser.h>

#define CH_HTTP_MAX_HEADERS 100   /* more is a 431, as nginx's 100 in
                                  ** large_client_header_buffers terms */

/* A byte range of the buffer the head was parsed from. */
struct ch_http_span {
  uint32_t off, len;
};

struct ch_http_limits {
  uint32_t max_line;              /* request line bytes, CRLF excluded: 414 */
  uint32_t max_header;            /* header block bytes after it: 431 */
};

typedef void (*ch_http_body_fn)(void *ud, const char *p, size_t n);

/* One request being parsed. Zero it (ch_http_head_init) per request. */
struct ch_http_head {
  http_parser p;                  /* request line and chunked framing */
  uint32_t scan;                  /* bytes of the buffer scanned so far */
  uint32_t line_start;            /* offset of the line being scanned */
  uint32_t start;                 /* offset of the request line (leading
                                  ** empty lines are skipped, RFC 9112 2.2) */
  uint32_t line_end;              /* offset just past the request line's
                                  ** CRLF; 0 until it is complete */
  uint32_t head_len;              /* bytes through the blank line; 0 until
                                  ** the head is complete */
  struct ch_http_span method;
  struct ch_http_span target;
  int nheaders;
  struct ch_http_span name[CH_HTTP_MAX_HEADERS];
  struct ch_http_span value[CH_HTTP_MAX_HEADERS];   /* OWS trimmed */
  int64_t content_length;         /* -1 when absent */
  uint64_t body_left;             /* Content-Length bytes still to come */
  uint8_t version_minor;          /* 0 or 1 (major is always 1) */
  uint8_t chunked;                /* Transfer-Encoding: chunked */
  uint8_t keepalive;              /* http_should_keep_alive at head end */
  uint8_t expect_continue;        /* Expect: 100-continue */
  uint8_t body_done;              /* the whole message has been parsed */
  uint8_t ck_state;               /* chunked decoder state (parse.c) */
  uint32_t ck_line;               /* bytes of the current chunk line */
  uint64_t ck_left;               /* chunk: size being read, then bytes left */
  uint64_t ck_total;              /* chunk data bytes so far */
  uint64_t body_limit;            /* chunked: a declared chunk past this many
                                  ** body bytes is -413 at once; set by the
                                  ** caller (UINT64_MAX: none) */
  const char *base;               /* the buffer, during the head's parse */
};

void ch_http_head_init(struct ch_http_head *h);

/* Parses the head at buf[0..len), the same buffer start each call with
** more bytes appended; scanning resumes where it stopped. Returns the
** head's length (> 0) once complete, 0 if more bytes are needed, or
** -status when the head is malformed: -400, -414 (request line too long),
** -431 (header block too long or too many headers), -501 (a transfer
** coding other than chunked), -505 (an HTTP version other than 1.0/1.1). */
int ch_http_head_parse(struct ch_http_head *h, const char *buf, size_t len,
                       const struct ch_http_limits *lim);

/* 1 (the default): a request line http-parser surely accepts (a method it
** knows, an origin-form target of plain bytes) skips it. 0: every line
** goes through http-parser; the fuzz harness parses each head both ways
** and checks they agree. */
extern int ch_http_line_fast;

/* Decodes body bytes buf[0..len), which follow the head or the bytes the
** last call consumed, calling sink for each piece of body. Stops at the
** end of the message (h->body_done). Returns the bytes consumed, -400 for
** a malformed chunked body, or -413 for a chunk declared past
** h->body_limit. */
long ch_http_body_parse(struct ch_http_head *h, const char *buf, size_t len,
                        ch_http_body_fn sink, void *ud);

/* Whether a header name (its span in buf) equals lname (lower case). */
int ch_http_name_is(const char *buf, struct ch_http_span s, const char *lname);

#endif
