#!/usr/bin/env bash
# Installs redis-server (Debian's 7.x package) for proxy/tests/replicas.rs when it is missing.
# .ci/run runs it; outside CI the tests run it themselves. Each test starts its own server on a
# free loopback port, so nothing here is started or left running.
set -euo pipefail
. "$(dirname "$0")/../lib/apt.sh"
apt_install_missing "redis-server" redis-server
redis-server --version
