#!/usr/bin/env bash
# Create .venv and install the project on a fresh machine (Python 3.11, pip, gcc).
# torch==2.13.0 goes in first: a CPU build of exactly that version is on disk; any other
# torch pulls gigabytes of CUDA packages. Idempotent: a stamp file skips work already done.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3.11}
command -v "$PY" >/dev/null 2>&1 || PY=python3
VENV=${VENV:-.venv}
STAMP="$VENV/.bootstrap-$(sha1sum pyproject.toml | cut -c1-12)"
if [ -f "$STAMP" ]; then exit 0; fi
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
"$VENV/bin/python" -m pip install --quiet --upgrade pip
"$VENV/bin/python" -m pip install --quiet "torch==2.13.0"
"$VENV/bin/python" -m pip install --quiet -e ".[dev]"
touch "$STAMP"
echo "bootstrap: $VENV ready"
