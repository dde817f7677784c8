#!/usr/bin/env bash
# Run the test suite in ./.venv (set it up first with `bash scripts/quickstart.sh --setup-only`).
# GPU tests skip on CPU machines. pytest's "no tests collected" (exit 5) is a failure here.
set -uo pipefail
cd "$(dirname "$0")/.."
.venv/bin/python -m pytest -q "$@"
code=$?
if [ "$code" -eq 5 ]; then
  echo "error: pytest collected no tests" >&2
  exit 1
fi
exit "$code"
