#!/usr/bin/env bash
# Rewrite .ci/constraints.txt from ./.venv: its leading comment kept, then every installed package
# at its installed version (pip freeze), less the project itself and PyTorch (TORCH_SPEC picks
# its CPU build). Run it after an unconstrained setup has passed the suite.
set -euo pipefail
cd "$(dirname "$0")/.."
out=.ci/constraints.txt
header=$(sed -n '/^#/!q;p' "$out" 2>/dev/null || true)
frozen=$(.venv/bin/python -m pip freeze --exclude-editable --disable-pip-version-check |
  grep -v -i -E '^torch(==| @)')
{ [ -n "$header" ] && printf '%s\n' "$header"; printf '%s\n' "$frozen"; } > "$out.tmp"
mv "$out.tmp" "$out"
echo "wrote $out: $(grep -c -v '^#' "$out") packages"
