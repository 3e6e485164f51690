/*
** Socket addresses: IP literals, unix paths, listen specs, name lookups
** and their text forms, for cosockets, listeners and HTTP alike.
*/
#ifndef CH_ADDR_H
#define CH_ADDR_H

#include <netdb.h>
#include <netinet/in.h>
#include <stddef.h>
#include <sys/socket.h>
#include <sys/un.h>

union ch_addr {
  struct sockaddr sa;
  struct sockaddr_in in;
  struct sockaddr_in6 in6;
  struct sockaddr_un un;
  struct sockaddr_storage ss;
};

/* Room for any text ch_addr_format makes: "[v6]:port" or "unix:path". */
#define CH_ADDR_TEXT 128

/* Fills a for an IP literal: "1.2.3.4", "::1" or "[::1]". Returns the
** address length, or 0 if host is not a literal. */
socklen_t ch_addr_ip(const char *host, int port, union ch_addr *a);

/* Fills a for a unix socket path. 0 if empty or too long. */
socklen_t ch_addr_unix(const char *path, union ch_addr *a);

/* Parses a listen spec: "host:port", "[v6]:port", "*:port", "port" or
** "unix:/path". Returns 1 with *host (in buf) and *port, 2 for unix with
** *host the path, 0 if malformed. */
int ch_addr_parse_listen(const char *spec, char *buf, size_t bufsz, const char **host, int *port);

/* Writes "ip:port", "[ip]:port" (IPv6) or "unix:path" into out (size n,
** at least CH_ADDR_TEXT); "" for another family. Returns the length. */
int ch_addr_format(const union ch_addr *a, char *out, size_t n);

/* The IP (into ip, INET6_ADDRSTRLEN bytes) and port of an IP address;
** returns 0, or -1 for a unix (or other) address. */
int ch_addr_ip_port(const union ch_addr *a, char *ip, int *port);

/* The port of an IP address, 0 for others. */
int ch_addr_port(const union ch_addr *a);

/* Yields (getaddrinfo's hook runs it on the thread pool). Looks host up
** for socktype (SOCK_STREAM, SOCK_DGRAM; passive for a listener).
** Returns 0 with *res (free with freeaddrinfo), or getaddrinfo's error
** code. */
int ch_addr_resolve(const char *host, int port, int socktype, int passive, struct addrinfo **res);

/* nginx's resolver wording for a failed lookup: "3: Host not found" for
** a name that does not exist, "2: Server failure" or "2: <reason>". */
const char *ch_addr_resolve_error(int code);

#endif
