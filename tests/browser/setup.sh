#!/usr/bin/env bash
# Installs Debian's Chromium and ChromeDriver (packages chromium, chromium-driver) for
# proxy/tests/dashboard.rs when they are missing. .ci/run runs it; outside CI the test runs it
# itself. Nothing is started or left running here: the test starts its own chromedriver.
set -euo pipefail
. "$(dirname "$0")/../lib/apt.sh"
apt_install_missing "chromium chromedriver" chromium chromium-driver
chromedriver --version
