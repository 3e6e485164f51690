/*
** The HTTP/2 writers' batch: what nghttp2 has to send, gathered into one
** buffer so that a burst of frames (ten responses' HEADERS and DATA, the
** WINDOW_UPDATEs) leaves in one write, one TLS record and one syscall.
** Shared by the server's connections (h2.c) and the client's (h2_client.c).
*/
#ifndef CH_HTTP_H2_BATCH_H
#define CH_HTTP_H2_BATCH_H

#include <stddef.h>
#include <sys/types.h>

#include <nghttp2/nghttp2.h>

#define CH_H2_BATCH_SIZE 32768   /* the usual buffer; a large HEADERS grows it */

struct ch_h2_batch {
  char *buf;     /* NULL while idle: an idle connection holds no buffer */
  size_t cap;
  size_t len;
};

/* Appends what s has to send to b until b is half full or s has nothing
** more. Returns the bytes b holds (0: nothing to send), or < 0: an
** nghttp2 error code (nghttp2_strerror), or NGHTTP2_ERR_NOMEM. */
ssize_t ch_h2_batch_fill(struct ch_h2_batch *b, nghttp2_session *s);

/* Frees b's buffer (b is then idle; a later fill allocates again). */
void ch_h2_batch_release(struct ch_h2_batch *b);

#endif
