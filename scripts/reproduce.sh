#!/usr/bin/env bash
# Audit the raw per-trial logs, regenerate every table and figure from them, then check that every decimal
# number in the manuscript appears in the outputs.
#
# usage: scripts/reproduce.sh LOGDIR [MANUSCRIPT] [OUTDIR]
#   LOGDIR      folder of JSONL records and vocabulary files (searched recursively)
#   MANUSCRIPT  .tex, .md or .txt whose numbers must all appear in the outputs (check skipped when absent)
#   OUTDIR      where the tables and figures go (default: out/reproduce)
# Exit status: 0 when every audit passed, everything was regenerated and every number was found; non-zero otherwise.
#
# The `convswap` command is taken from PATH when the virtual environment is active; otherwise from beside the
# Python interpreter that would run it ($PYTHON, the checkout's .venv, then python3 on PATH).
set -euo pipefail

checkout=$(cd "$(dirname "$0")/.." && pwd)

find_convswap() {
  if command -v convswap; then
    return 0
  fi
  local python
  for python in "${PYTHON:-}" "$checkout/.venv/bin/python" python3; do
    if [[ -n $python ]] && command -v "$python" >/dev/null; then
      local beside
      beside="$(dirname "$(command -v "$python")")/convswap"
      if [[ -x $beside ]]; then
        echo "$beside"
        return 0
      fi
    fi
  done
  return 1
}

if [[ $# -lt 1 || $# -gt 3 ]]; then
  echo "usage: $0 LOGDIR [MANUSCRIPT] [OUTDIR]" >&2
  exit 2
fi
logdir=$1
manuscript=${2:-}
outdir=${3:-out/reproduce}

if ! convswap=$(find_convswap); then
  echo "$0: the convswap command was not found on PATH nor beside \$PYTHON, $checkout/.venv/bin/python or python3;" \
    "activate the virtual environment first (. $checkout/.venv/bin/activate) or install it (pip install -e $checkout)" >&2
  exit 2
fi

"$convswap" audit "$logdir"
"$convswap" tables "$logdir" --out "$outdir"
if [[ -n $manuscript ]]; then
  "$convswap" check-numbers "$manuscript" "$outdir"
else
  echo "no manuscript given: tables regenerated in $outdir, check-numbers not run" >&2
fi
