/* Socket addresses. See addr.h. */
#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "net/addr.h"

socklen_t ch_addr_ip(const char *host, int port, union ch_addr *a)
{
  char buf[INET6_ADDRSTRLEN + 1];
  size_t n = strlen(host);
  memset(a, 0, sizeof *a);
  if (inet_pton(AF_INET, host, &a->in.sin_addr) == 1) {
    a->in.sin_family = AF_INET;
    a->in.sin_port = htons((uint16_t)port);
    return sizeof a->in;
  }
  if (n >= 2 && host[0] == '[' && host[n - 1] == ']' && n - 2 < sizeof buf) {
    memcpy(buf, host + 1, n - 2);
    buf[n - 2] = '\0';
    host = buf;
  }
  if (inet_pton(AF_INET6, host, &a->in6.sin6_addr) == 1) {
    a->in6.sin6_family = AF_INET6;
    a->in6.sin6_port = htons((uint16_t)port);
    return sizeof a->in6;
  }
  return 0;
}

socklen_t ch_addr_unix(const char *path, union ch_addr *a)
{
  size_t n = strlen(path);
  memset(a, 0, sizeof *a);
  if (n == 0 || n >= sizeof a->un.sun_path) return 0;
  a->un.sun_family = AF_UNIX;
  memcpy(a->un.sun_path, path, n + 1);
  return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n + 1);
}

int ch_addr_parse_listen(const char *spec, char *buf, size_t bufsz, const char **host, int *port)
{
  if (strncasecmp(spec, "unix:", 5) == 0) {
    *host = spec + 5;
    return 2;
  }
  const char *colon = strrchr(spec, ':'), *ps;
  size_t hlen;
  if (spec[0] == '[') {
    const char *end = strchr(spec, ']');
    if (!end || end[1] != ':') return 0;
    hlen = (size_t)(end - spec - 1);
    spec++;
    ps = end + 2;
  } else if (colon) {
    hlen = (size_t)(colon - spec);
    ps = colon + 1;
  } else {
    hlen = 0;
    ps = spec;
  }
  if (hlen >= bufsz) return 0;
  memcpy(buf, spec, hlen);
  buf[hlen] = '\0';
  char *endp;
  long p = strtol(ps, &endp, 10);
  if (*ps == '\0' || *endp != '\0' || p < 0 || p > 65535) return 0;
  *host = buf;
  *port = (int)p;
  return 1;
}

int ch_addr_format(const union ch_addr *a, char *out, size_t n)
{
  char ip[INET6_ADDRSTRLEN];
  int r;
  switch (a->sa.sa_family) {
  case AF_INET:
    inet_ntop(AF_INET, &a->in.sin_addr, ip, sizeof ip);
    r = snprintf(out, n, "%s:%d", ip, (int)ntohs(a->in.sin_port));
    break;
  case AF_INET6:
    inet_ntop(AF_INET6, &a->in6.sin6_addr, ip, sizeof ip);
    r = snprintf(out, n, "[%s]:%d", ip, (int)ntohs(a->in6.sin6_port));
    break;
  case AF_UNIX:
    r = snprintf(out, n, "unix:%s", a->un.sun_path);
    break;
  default:
    out[0] = '\0';
    return 0;
  }
  return r < 0 ? 0 : (size_t)r >= n ? (int)n - 1 : r;
}

int ch_addr_ip_port(const union ch_addr *a, char *ip, int *port)
{
  switch (a->sa.sa_family) {
  case AF_INET:
    inet_ntop(AF_INET, &a->in.sin_addr, ip, INET6_ADDRSTRLEN);
    *port = ntohs(a->in.sin_port);
    return 0;
  case AF_INET6:
    inet_ntop(AF_INET6, &a->in6.sin6_addr, ip, INET6_ADDRSTRLEN);
    *port = ntohs(a->in6.sin6_port);
    return 0;
  default:
    return -1;
  }
}

int ch_addr_port(const union ch_addr *a)
{
  if (a->sa.sa_family == AF_INET) return ntohs(a->in.sin_port);
  if (a->sa.sa_family == AF_INET6) return ntohs(a->in6.sin6_port);
  return 0;
}

int ch_addr_resolve(const char *host, int port, int socktype, int passive, struct addrinfo **res)
{
  struct addrinfo hints;
  char serv[8];
  memset(&hints, 0, sizeof hints);
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = socktype;
  hints.ai_flags = passive ? AI_PASSIVE : 0;
  snprintf(serv, sizeof serv, "%d", port);
  *res = NULL;
  int r = getaddrinfo(host, serv, &hints, res);
  if (r == 0 && !*res) r = EAI_NONAME;
  return r;
}

const char *ch_addr_resolve_error(int code)
{
  static __thread char buf[96];
  if (code == EAI_NONAME || code == EAI_NODATA) return "3: Host not found";
  if (code == EAI_AGAIN) return "2: Server failure";
  snprintf(buf, sizeof buf, "2: %s", gai_strerror(code));
  return buf;
}
