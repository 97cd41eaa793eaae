#!/usr/bin/env bash
# Installs podman and runc for scripts/container-smoke (the image FROM scratch, run for real)
# when they are missing. .ci/run runs it, then the smoke test.
set -euo pipefail
. "$(dirname "$0")/../lib/apt.sh"
apt_install_missing "podman runc" podman runc
podman --version
runc --version | head -n 1
