#!/usr/bin/env bash
# Installs tinyproxy (an HTTP CONNECT proxy) and dante-server (a SOCKS5 server) for the egress
# tests (tests/tests/egress.rs) when they are missing. .ci/run runs it; outside CI the tests run
# it themselves. Each test starts its own proxy on a free loopback port with a config of its
# own, so nothing here is started or left running.
set -euo pipefail
if ! command -v tinyproxy >/dev/null 2>&1 || ! command -v danted >/dev/null 2>&1; then
    sudo=""
    if [ "$(id -u)" -ne 0 ]; then sudo="sudo -n"; fi
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq tinyproxy dante-server >/dev/null
fi
tinyproxy -v
danted -v | head -n 1
