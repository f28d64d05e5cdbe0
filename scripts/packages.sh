#!/usr/bin/env bash
# Installs the Debian packages of the servers the given make target runs, when their binaries
# are missing: PostgreSQL for every target (a private cluster from its binaries, scripts/devdb.sh),
# and for `make test` also redis-server (the shared rate-limit tests) and chromium (the
# console's browser test). So `make run` and `make test` set up a fresh Debian machine alone.
# apt-get needs root, as these machines run; without it the missing package is named.
set -euo pipefail
need() { # need PACKAGE CHECK...: install PACKAGE unless the check finds it
  local pkg=$1
  shift
  if "$@" >/dev/null 2>&1; then
    return
  fi
  if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
    echo "scripts/packages.sh: the Debian package $pkg is missing; install it (apt-get install $pkg) and run again" >&2
    exit 1
  fi
  echo "installing the Debian package $pkg (missing)" >&2
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$pkg" >/dev/null
}
if [ -z "${DATABASE_URL:-}" ]; then # DATABASE_URL set: that database is used, no cluster is started
  need postgresql bash -c 'ls /usr/lib/postgresql/*/bin/initdb'
fi
if [ "${1:-}" = test ]; then
  need redis-server command -v redis-server
  need chromium command -v chromium
fi
