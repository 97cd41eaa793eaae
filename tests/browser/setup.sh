#!/usr/bin/env bash
# Installs Debian's Chromium and ChromeDriver (packages chromium, chromium-driver) for
# proxy/tests/dashboard.rs when they are missing. .ci/run runs it; outside CI the test runs it
# itself. Nothing is started or left running here: the test starts its own chromedriver.
set -euo pipefail
if ! command -v chromium >/dev/null 2>&1 || ! command -v chromedriver >/dev/null 2>&1; then
    sudo=""
    if [ "$(id -u)" -ne 0 ]; then sudo="sudo -n"; fi
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq chromium chromium-driver >/dev/null
fi
chromedriver --version
