"""`convswap audit LOGDIR` and `convswap audit-model --model SPEC`."""

from __future__ import annotations

import argparse
from pathlib import Path

from convswap.audits.log_audit import audit_folder
from convswap.audits.report import format_report


def register(subparsers: argparse._SubParsersAction) -> None:
    audit = subparsers.add_parser(
        "audit",
        help="run the scorer-integrity checks over every record of a log folder",
        description="Run the scorer-integrity checks of spec section 8 over every record under LOGDIR: "
        "prompt-target, relabel, pairing-break, alphabet, truncation, derangement, index space and held-out. "
        "Prints one row per check and each failure's raw output beside its stored score; exits 1 on any failure.",
    )
    audit.add_argument("logdir", type=Path, help="folder of JSONL run logs and vocabulary files (searched recursively)")
    audit.add_argument(
        "--vocabulary",
        type=Path,
        action="append",
        default=[],
        metavar="FILE",
        help="a calibrated vocabulary the runs used, besides the vocabulary*.json files under LOGDIR (repeatable); "
        "held-out color records are verified against their model's vocabulary",
    )
    audit.add_argument("--seed", type=int, default=0, help="seed of the pairing-break shuffle (default 0)")
    audit.set_defaults(handler=run_audit)


def run_audit(args: argparse.Namespace) -> int:
    records, results = audit_folder(args.logdir, args.vocabulary, seed=args.seed)
    print(format_report(results))
    failed = [result.name for result in results if not result.passed]
    print(f"\n{len(records)} records audited; " + (f"FAILED: {', '.join(failed)}" if failed else "every check passed"))
    return 1 if failed else 0
