#!/usr/bin/env bash
# The decoder's accelerator figures in one run (at most 10 minutes on one GPU), printed as one
# JSON line at the end; see benchmarks/device_check.py for what is measured.
#   bash benchmarks/device_check.sh [--dry_run] [--budget_s=540]
# PYTHON chooses the interpreter (default python3: on the device machine, the one with JAX).
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1
exec "${PYTHON:-python3}" benchmarks/device_check.py "$@"
