#!/usr/bin/env bash
# TechEmpower's database for scripts/bench/techempower/: a PostgreSQL 15
# cluster of its own (initdb in DIR, fsync off, loopback only) holding
# TechEmpower's hello_world database: table world (id 1..10,000,
# randomnumber 1..10,000) and table fortune (TechEmpower's 12 rows), owned
# by the role benchmarkdbuser, password benchmarkdbpass.
#
#   db.sh start DIR PORT [MAX_CONNECTIONS]   creates and starts the cluster;
#                                            prints the postmaster's pid
#   db.sh stop DIR                           stops it (immediate: the data
#                                            is thrown away with DIR)
#
# pgmoon (the peer's driver) does SCRAM only with luaossl, which Debian's
# nginx lacks, so the role's password is stored as md5 and TCP connections
# authenticate with md5 (pg_hba.conf); the Unix socket in DIR, which only
# this script uses, trusts. As root, initdb and postgres run as the
# postgres user (they refuse root) and DIR is handed to it.
set -u -o pipefail

PGBIN=${PGBIN:-/usr/lib/postgresql/15/bin}

as_pg() {
  if [ "$(id -u)" = 0 ]; then setpriv --reuid=postgres --regid=postgres --init-groups "$@"; else "$@"; fi
}

die() { echo "db.sh: $*" >&2; exit 1; }

start() {
  local dir=$1 port=$2 maxconn=${3:-100}
  mkdir -p "$dir" || die "cannot make $dir"
  [ "$(id -u)" = 0 ] && chown postgres: "$dir"
  as_pg "$PGBIN/initdb" -D "$dir/data" -U postgres --auth-local=trust --auth-host=md5 \
    --no-sync -E UTF8 --locale=C.UTF-8 > "$dir/initdb.log" 2>&1 || die "initdb failed: $dir/initdb.log"
  # pg_ctl -w waits until the server accepts connections.
  as_pg "$PGBIN/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 30 \
    -o "-p $port -k $dir -c listen_addresses=127.0.0.1 -c fsync=off -c synchronous_commit=off -c max_connections=$maxconn -c password_encryption=md5" \
    start > /dev/null || die "postgres did not start: $dir/server.log"
  as_pg psql -q -v ON_ERROR_STOP=1 -h "$dir" -p "$port" -U postgres -d postgres > "$dir/load.log" 2>&1 <<'SQL' || die "loading failed: $dir/load.log"
CREATE ROLE benchmarkdbuser LOGIN PASSWORD 'benchmarkdbpass';
CREATE DATABASE hello_world OWNER benchmarkdbuser;
\connect hello_world benchmarkdbuser
CREATE TABLE world (
  id integer NOT NULL PRIMARY KEY,
  randomnumber integer NOT NULL DEFAULT 0
);
INSERT INTO world (id, randomnumber)
  SELECT x, least(floor(random() * 10000 + 1), 10000) FROM generate_series(1, 10000) AS x;
CREATE TABLE fortune (
  id integer NOT NULL PRIMARY KEY,
  message varchar(2048) NOT NULL
);
INSERT INTO fortune (id, message) VALUES
  (1, 'fortune: No such file or directory'),
  (2, 'A computer scientist is someone who fixes things that aren''t broken.'),
  (3, 'After enough decimal places, nobody gives a damn.'),
  (4, 'A bad random number generator: 1, 1, 1, 1, 1, 4.33e+67, 1, 1, 1'),
  (5, 'A computer program does what you tell it to do, not what you want it to do.'),
  (6, 'Emacs is a nice operating system, but I prefer UNIX. — Tom Christaensen'),
  (7, 'Any program that runs right is obsolete.'),
  (8, 'A list is only as strong as its weakest link. — Donald Knuth'),
  (9, 'Feature: A bug with seniority.'),
  (10, 'Computers make very fast, very accurate mistakes.'),
  (11, '<script>alert("This should not be displayed in a browser alert box.");</script>'),
  (12, 'フレームワークのベンチマーク');
VACUUM ANALYZE world;
VACUUM ANALYZE fortune;
SQL
  head -1 "$dir/data/postmaster.pid"
}

stop() {
  local dir=$1
  [ -f "$dir/data/postmaster.pid" ] || return 0
  as_pg "$PGBIN/pg_ctl" -D "$dir/data" -m immediate -w -t 10 stop > /dev/null 2>&1 || true
}

case ${1:-} in
  start) [ $# -ge 3 ] || die "usage: db.sh start DIR PORT [MAX_CONNECTIONS]"; start "$2" "$3" "${4:-100}" ;;
  stop) [ $# -ge 2 ] || die "usage: db.sh stop DIR"; stop "$2" ;;
  *) die "usage: db.sh start DIR PORT [MAX_CONNECTIONS] | db.sh stop DIR" ;;
esac
