#!/usr/bin/env bash
# Installs redis-server (Debian's 7.x package) for proxy/tests/replicas.rs when it is missing.
# .ci/run runs it; outside CI the tests run it themselves. Each test starts its own server on a
# free loopback port, so nothing here is started or left running.
set -euo pipefail
if ! command -v redis-server >/dev/null 2>&1; then
    sudo=""
    if [ "$(id -u)" -ne 0 ]; then sudo="sudo -n"; fi
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq redis-server >/dev/null
fi
redis-server --version
