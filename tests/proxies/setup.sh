#!/usr/bin/env bash
# Installs tinyproxy (an HTTP CONNECT proxy) and dante-server (a SOCKS5 server) for the egress
# tests (tests/tests/egress.rs) when they are missing. .ci/run runs it; outside CI the tests run
# it themselves. Each test starts its own proxy on a free loopback port with a config of its
# own, so nothing here is started or left running.
set -euo pipefail
. "$(dirname "$0")/../lib/apt.sh"
apt_install_missing "tinyproxy danted" tinyproxy dante-server
tinyproxy -v
danted -v | head -n 1
