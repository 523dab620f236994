#!/usr/bin/env bash
# Sets up the environment and runs the test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash launch/setup.sh
exec .venv/bin/python -m pytest -q -n 2 tests "$@"
