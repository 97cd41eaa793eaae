#!/usr/bin/env bash
# Creates the virtualenv with the official OpenAI, Anthropic and Google Gen AI Python SDKs that
# tests/tests/sdks.rs runs against the gateway. Usage: tests/sdk/setup.sh [VENV_DIR]
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
venv="${1:-$here/../../target/sdk-venv}"
python="${PYTHON:-python3}"
if ! "$venv/bin/python" -c 'import openai, anthropic, google.genai' 2>/dev/null; then
    "$python" -m venv "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check -r "$here/requirements.txt"
fi
"$venv/bin/python" -c 'import openai, anthropic, google.genai as g; print("sdk venv:", openai.__version__, anthropic.__version__, g.__version__)'
