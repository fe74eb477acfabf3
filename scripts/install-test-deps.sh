#!/usr/bin/env bash
# Installs what `make test` needs beyond Go and make, from Debian's packages,
# when it is missing: redis-server and redis-cli (the tests start their own
# servers, clusters and sentinels on free loopback ports; this only provides
# the binaries), and a C compiler (go test -race needs cgo). Then checks
# that the redis-server found is new enough for the Lua scripts.
set -euo pipefail

# The Lua scripts write with SET ... PXAT, which Redis added in 6.2; an
# older server fails every check with a syntax error.
MIN_REDIS=6.2

need=()
command -v redis-server >/dev/null 2>&1 || need+=(redis-server)
command -v redis-cli >/dev/null 2>&1 || need+=(redis-tools)
command -v cc >/dev/null 2>&1 || need+=(gcc libc6-dev)

if [ ${#need[@]} -gt 0 ]; then
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1; then
      SUDO="sudo"
    else
      echo "install-test-deps: missing ${need[*]}, and this is not root and there is no sudo." >&2
      echo "  Install them yourself (as root: apt-get install ${need[*]}), or run make test as root." >&2
      exit 1
    fi
  fi
  if ! command -v apt-get >/dev/null 2>&1; then
    echo "install-test-deps: missing ${need[*]} and there is no apt-get (the script knows Debian and Ubuntu only)." >&2
    echo "  Install redis-server >= $MIN_REDIS, redis-cli and a C compiler with your package manager." >&2
    exit 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  echo "install-test-deps: installing ${need[*]} with apt-get (once; about a minute)"
  echo "install-test-deps: apt-get update"
  $SUDO apt-get update -q | sed -u 's/^/  apt: /'
  echo "install-test-deps: apt-get install ${need[*]}"
  $SUDO apt-get install -y -q --no-install-recommends "${need[@]}" | grep --line-buffered -E '^(Setting up|Unpacking|Get:|E:)' | sed -u 's/^/  apt: /' || true
  # The redis-server package may start a system instance on 6379; the tests
  # do not use it.
  $SUDO service redis-server stop >/dev/null 2>&1 || true
  for bin in redis-server redis-cli cc; do
    command -v "$bin" >/dev/null 2>&1 || { echo "install-test-deps: $bin is still missing after apt-get install; see the apt output above." >&2; exit 1; }
  done
fi

# redis-server --version prints "Redis server v=7.0.15 sha=... ".
have=$(redis-server --version | sed -n 's/.*v=\([0-9][0-9.]*\).*/\1/p')
if [ -z "$have" ]; then
  echo "install-test-deps: could not read the version of $(command -v redis-server): $(redis-server --version)" >&2
  exit 1
fi
if [ "$(printf '%s\n%s\n' "$MIN_REDIS" "$have" | sort -V | head -n 1)" != "$MIN_REDIS" ]; then
  echo "install-test-deps: $(command -v redis-server) is Redis $have; the tests need Redis >= $MIN_REDIS." >&2
  echo "  Debian 12 and Ubuntu 24.04 ship a new enough redis-server (apt-get install redis-server);" >&2
  echo "  Ubuntu 22.04 and older ship 6.0: install Redis >= $MIN_REDIS from its maintainers' packages and put it first on PATH." >&2
  exit 1
fi
