#!/usr/bin/env bash
# Starts (or reuses) a private PostgreSQL cluster from the system binaries and prints its
# DATABASE_URL. Used by `make` and by tests when DATABASE_URL is not set.
#   scripts/devdb.sh url    start if needed, print the URL
#   scripts/devdb.sh stop   stop the cluster
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
base=${KYAPI_DEVDB_DIR:-$repo/.devdb}
# Each checkout gets its own port, so two clones (a developer's and CI's) never collide.
port=${KYAPI_DEVDB_PORT:-$((55432 + $(printf '%s' "$repo" | cksum | cut -d' ' -f1) % 2000))}
data=$base/data
bin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
[ -n "$bin" ] || { echo "devdb: no PostgreSQL server binaries under /usr/lib/postgresql/*/bin (apt-get install postgresql)" >&2; exit 1; }

# initdb and postgres refuse to run as root; run them as the postgres user then.
as_pg() { if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }

case "${1:-url}" in
stop)
  [ -f "$data/postmaster.pid" ] && as_pg "$bin/pg_ctl" -D "$data" -m fast -w stop >&2
  exit 0 ;;
url) ;;
*) echo "usage: $0 [url|stop]" >&2; exit 2 ;;
esac

# (The braces keep the 2>/dev/null to this line: on exec itself it would silence the script.)
{ exec 9>"$base.lock"; } 2>/dev/null || { mkdir -p "$(dirname "$base")"; exec 9>"$base.lock"; }
flock -w 300 9 || { echo "devdb: timed out waiting for $base.lock" >&2; exit 1; }
if [ ! -f "$data/PG_VERSION" ]; then
  mkdir -p "$data"
  [ "$(id -u)" = 0 ] && chown -R postgres:postgres "$base"
  as_pg "$bin/initdb" -D "$data" -U postgres --auth=trust -E UTF8 --locale=C.UTF-8 >"$base/initdb.log" 2>&1 \
    || { cat "$base/initdb.log" >&2; exit 1; }
  cat >>"$data/postgresql.conf" <<CONF
listen_addresses = '127.0.0.1'
unix_socket_directories = '$base'
max_connections = 300
shared_buffers = 256MB
# make bench reports where PostgreSQL's time goes during the metered run.
shared_preload_libraries = 'pg_stat_statements'
CONF
fi
if ! as_pg "$bin/pg_ctl" -D "$data" status >/dev/null 2>&1; then
  # The port is in the kernel's ephemeral range, so an outgoing connection can hold it for a
  # while: then the next port is tried, up to 20.
  for try in $(seq 0 19); do
    log_lines=$({ cat "$base/postgres.log" 2>/dev/null || true; } | wc -l)
    as_pg "$bin/pg_ctl" -D "$data" -l "$base/postgres.log" -o "-p $((port + try))" -w -t 60 start >/dev/null 2>&1 9>&- && break
    if [ "$try" = 19 ] || ! tail -n +"$((log_lines + 1))" "$base/postgres.log" | grep -q "Address already in use"; then
      echo "devdb: PostgreSQL did not start; the end of $base/postgres.log:" >&2
      tail -n 30 "$base/postgres.log" >&2
      exit 1
    fi
  done
fi
# A running cluster keeps the port it was started with.
port=$(sed -n 4p "$data/postmaster.pid")
url="postgres://postgres@127.0.0.1:$port/kyapi?sslmode=disable"
if ! "$bin/psql" -h 127.0.0.1 -p "$port" -U postgres -d postgres -tAc "SELECT 1 FROM pg_database WHERE datname='kyapi'" | grep -q 1; then
  "$bin/psql" -h 127.0.0.1 -p "$port" -U postgres -d postgres -qc "CREATE DATABASE kyapi" >&2
fi
echo "$url"
