#!/usr/bin/env bash
# Installs what `make test` needs beyond Go and make, from Debian's packages,
# when it is missing: redis-server and redis-cli (the tests start their own
# servers, clusters and sentinels on free loopback ports; this only provides
# the binaries), and a C compiler (go test -race needs cgo).
set -euo pipefail
need=()
command -v redis-server >/dev/null 2>&1 || need+=(redis-server)
command -v redis-cli >/dev/null 2>&1 || need+=(redis-tools)
command -v cc >/dev/null 2>&1 || need+=(gcc libc6-dev)
[ ${#need[@]} -eq 0 ] && exit 0

SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
echo "installing ${need[*]}"
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
# The redis-server package may start a system instance on 6379; the tests
# do not use it.
$SUDO service redis-server stop >/dev/null 2>&1 || true
