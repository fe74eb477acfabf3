#!/usr/bin/env bash
# Installs redis-server and redis-cli from Debian's packages when missing.
# The tests start their own servers on free loopback ports; this only
# provides the binaries.
set -euo pipefail
if command -v redis-server >/dev/null 2>&1 && command -v redis-cli >/dev/null 2>&1; then
  exit 0
fi
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends redis-server redis-tools >/dev/null
# The package may start a system instance on 6379; the tests do not use it.
$SUDO service redis-server stop >/dev/null 2>&1 || true
command -v redis-server
