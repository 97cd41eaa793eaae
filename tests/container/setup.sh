#!/usr/bin/env bash
# Installs podman and runc for scripts/container-smoke (the image FROM scratch, run for real)
# when they are missing. .ci/run runs it, then the smoke test.
set -euo pipefail
if ! command -v podman >/dev/null 2>&1 || ! command -v runc >/dev/null 2>&1; then
    sudo=""
    if [ "$(id -u)" -ne 0 ]; then sudo="sudo -n"; fi
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq podman runc >/dev/null
fi
podman --version
runc --version | head -n 1
