#!/usr/bin/env bash
# Run the test suite in ./.venv (set it up first with `bash scripts/quickstart.sh --setup-only`).
# GPU tests skip on CPU machines. pytest's "no tests collected" (exit 5) is a failure here.
#
# Three pytest-xdist workers by default (ADVISOR_TEST_WORKERS=N to change, 0 for one process):
# the suite waits on subprocesses, servers and sockets much of the time; with two workers a
# 2-core machine's cores were busy 63 % of the run (user + sys time over twice the wall time),
# and a third fills the gaps. Each test file runs whole on one worker (--dist loadfile): a
# module's server or Ray head is started once, and its tests keep their order. Files are handed out in the order
# tests/conftest.py collects them, its longest modules first (--no-loadscope-reorder: xdist's
# own order, most tests first, started those few-test, minutes-long files last).
set -uo pipefail
cd "$(dirname "$0")/.."
workers="${ADVISOR_TEST_WORKERS:-3}"
parallel=()
if [ "$workers" != "0" ]; then
  parallel=(-n "$workers" --dist loadfile --no-loadscope-reorder)
fi
# Byte-compile the checkout once (well under a second): where PYTHONDONTWRITEBYTECODE is set, as
# on our CI machines, no .pyc is ever written, and each of the suite's ~300 CLI, trial and
# server processes compiled the project modules it imports again (~0.2 s for the answer engine).
.venv/bin/python -m compileall -q advisor api knowledge objectives search_spaces tests \
  >/dev/null 2>&1 || true
.venv/bin/python -m pytest -q --durations=25 "${parallel[@]}" "$@"
code=$?
if [ "$code" -eq 5 ]; then
  echo "error: pytest collected no tests" >&2
  exit 1
fi
exit "$code"
