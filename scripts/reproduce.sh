#!/usr/bin/env bash
# Audit the raw per-trial logs, regenerate every table and figure from them, then check that every decimal
# number in the manuscript appears in the outputs.
#
# usage: scripts/reproduce.sh LOGDIR [MANUSCRIPT] [OUTDIR]
#   LOGDIR      folder of JSONL records and vocabulary files (searched recursively)
#   MANUSCRIPT  .tex, .md or .txt whose numbers must all appear in the outputs (check skipped when absent)
#   OUTDIR      where the tables and figures go (default: out/reproduce)
# Exit status: 0 when every audit passed, everything was regenerated and every number was found; non-zero otherwise.
set -euo pipefail

if [[ $# -lt 1 || $# -gt 3 ]]; then
  echo "usage: $0 LOGDIR [MANUSCRIPT] [OUTDIR]" >&2
  exit 2
fi
logdir=$1
manuscript=${2:-}
outdir=${3:-out/reproduce}

convswap audit "$logdir"
convswap tables "$logdir" --out "$outdir"
if [[ -n $manuscript ]]; then
  convswap check-numbers "$manuscript" "$outdir"
else
  echo "no manuscript given: tables regenerated in $outdir, check-numbers not run" >&2
fi
