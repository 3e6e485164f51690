#!/usr/bin/env bash
# Installs the Debian packages cohost needs. Idempotent: quiet and quick when
# everything is already there. Usage: scripts/deps.sh [build|test|bench|all]
# (default test). Needs root or sudo for apt-get; never installs
# libluajit-5.1-dev, which conflicts with libluajit2-5.1-dev and would remove
# nginx's Lua module that the benchmarks run as a peer.
set -euo pipefail

what=${1:-test}

build=(gcc make libc6-dev pkg-config libluajit2-5.1-dev lua-cjson libhttp-parser-dev libssl-dev
       liburing-dev libnghttp2-dev libpq-dev libjemalloc-dev)
test=(clang valgrind libcmocka-dev libhiredis-dev redis-server libssl-dev lua-busted lua-socket
      procps python3 python3-websockets curl libpcre2-dev memcached
      lua-nginx-redis lua-nginx-memcached lua-nginx-websocket lua-nginx-dns
      lua-nginx-string lua-resty-lrucache lua-nginx-cookie lua-nginx-redis-connector
      lua-resty-core redis-sentinel lua-messagepack
      lua-sql-postgres lua-sql-sqlite3 lua-filesystem postgresql chromium
      wrk slowhttptest gnuplot-nox haproxy systemd nghttp2-client python3-h2 nginx
      python3-grpcio protobuf-compiler protobuf-compiler-grpc libprotobuf-dev python3-protobuf)
bench=(g++ libboost-context-dev valgrind wrk nginx libnginx-mod-http-lua
       tarantool util-linux libgrpc++-dev)

case "$what" in
  build) want=("${build[@]}") ;;
  test)  want=("${build[@]}" "${test[@]}") ;;
  bench) want=("${build[@]}" "${test[@]}" "${bench[@]}") ;;
  all)   want=("${build[@]}" "${test[@]}" "${bench[@]}") ;;
  *) echo "usage: $0 [build|test|bench|all]" >&2; exit 2 ;;
esac

missing=()
native=$(dpkg --print-architecture)
for p in "${want[@]}"; do
  # dpkg-query prints "install ok installed" only for a fully installed
  # package, one line per architecture: make test-aarch64 adds arm64
  # copies of some (libcmocka-dev:arm64), which must not count as the
  # native one.
  dpkg-query -W -f='${Architecture} ${Status}\n' "$p" 2>/dev/null |
    grep -qxE "($native|all) install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

SUDO=
[ "$(id -u)" -eq 0 ] || SUDO=sudo
echo "deps.sh: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
# Refresh the package lists once if they are missing or older than a day.
if [ -z "$(find /var/lib/apt/lists -maxdepth 1 -name '*Packages*' -mtime -1 2>/dev/null | head -1)" ]; then
  $SUDO apt-get -o DPkg::Lock::Timeout=600 update -qq >&2
fi
# Services installed here (redis, nginx, tarantool) must not start on their
# default ports: tests and benchmarks start their own on free loopback ports.
policy=/usr/sbin/policy-rc.d
if [ ! -e "$policy" ]; then
  printf '#!/bin/sh\nexit 101\n' | $SUDO tee "$policy" >/dev/null
  $SUDO chmod +x "$policy"
  trap '$SUDO rm -f "$policy"' EXIT
fi
$SUDO apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends "${missing[@]}" >&2
