"""`convswap plan`: register, amend, verify and list the pre-registered experiments."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from convswap.core import ConvswapError
from convswap.plan_folders import PLAN_DIR_HELP, plan_folder

if TYPE_CHECKING:
    from convswap.plans.ledger import Entry, Ledger


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "plan",
        help="register, amend, verify and list the pre-registered experiments",
        description="The analysis plan is one TOML file per experiment; the ledger records, with timestamps and a "
        "hash chain, when each file was registered and every amendment since. A run refuses a plan file that is "
        "unregistered or that changed without an amendment.",
    )
    actions = parser.add_subparsers(dest="plan_command", metavar="ACTION", required=True)

    def action(name: str, help_text: str, handler) -> argparse.ArgumentParser:
        sub = actions.add_parser(name, help=help_text, description=help_text)
        sub.add_argument("--plan-dir", type=Path, help=PLAN_DIR_HELP)
        sub.set_defaults(handler=handler)
        return sub

    register_parser = action("register", "validate plan files and register them in the ledger", run_register)
    register_parser.add_argument("files", nargs="+", type=Path, metavar="FILE", help="plan file(s) to register")
    amend_parser = action("amend", "record a change to a registered plan file, with its reason", run_amend)
    amend_parser.add_argument("file", type=Path, metavar="FILE", help="the changed plan file")
    amend_parser.add_argument("--reason", required=True, help="why the file changed (stored in the ledger)")
    action("verify", "check the ledger's chain and that no plan file changed without an amendment", run_verify)
    action("show", "list the experiments with their version, hypotheses and ledger status", run_show)
    init_help = "start a plan folder of your own: the spec's plans and their ledger, or an empty ledger"
    init_parser = actions.add_parser("init", help=init_help, description=init_help)
    init_parser.add_argument("dir", type=Path, metavar="DIR", help="the new folder (must not exist, or be empty)")
    init_parser.add_argument("--empty", action="store_true", help="no plans, an empty ledger")
    init_parser.set_defaults(handler=run_init)
    power_help = (
        "what each paired McNemar hypothesis of a plan can detect with 80%% power at its n and alpha, and the n its "
        "declared effect needs, before any data"
    )
    power_parser = action("power", power_help, run_power)
    power_parser.description = (
        f"{power_help.replace('%%', '%')}: the exact test's power summed exactly over the discordant trials, given the share of trials "
        "the two conventions score differently -- the hypothesis's declared `discordance`, or the one a pilot's "
        "records show. Power is the chance that the test is significant in the registered direction."
    )
    power_parser.add_argument("plan", metavar="PLAN", help="an experiment of the plan folder, or its plan file")
    power_parser.add_argument("--pilot", type=Path, metavar="LOGDIR",
                              help="a pilot run's logs: the discordance is read from its paired trials instead of "
                                   "the declared one")  # fmt: skip
    analyses_help = "list the analyses a plan may name in registered_analyses and post_hoc"
    actions.add_parser("analyses", help=analyses_help, description=analyses_help).set_defaults(handler=run_analyses)


def _ledger(args: argparse.Namespace) -> Ledger:
    from convswap.plans.ledger import Ledger

    return Ledger(plan_folder(args.plan_dir))


def run_register(args: argparse.Namespace) -> int:
    ledger = _ledger(args)
    for file in args.files:
        entry = ledger.register(file)
        print(f"registered {entry.file} (ledger line {entry.line}, entry {entry.entry_hash[:12]})")
        _print_design(entry)
    return 0


def run_amend(args: argparse.Namespace) -> int:
    from convswap.plans.ledger import family_change

    ledger = _ledger(args)
    before = ledger.latest(args.file)
    entry = ledger.amend(args.file, args.reason)
    print(f"amended {entry.file} (ledger line {entry.line}, entry {entry.entry_hash[:12]})")
    change = family_change(before, entry)
    if change is not None:
        print(f"  {change}")
    _print_design(entry)
    return 0


def _print_design(entry: Entry) -> None:
    """The family and the power the entry keeps, as `plan power` would print them before any data."""
    if entry.family is not None:
        print(
            f"  confirmatory family: {', '.join(entry.family['hypotheses'])}, adjusted by {entry.family['multiplicity']}"
        )
    for sizing in entry.sizings():
        print(f"  {sizing.sentence()}")


def run_power(args: argparse.Namespace) -> int:
    from convswap.plans.plan import find_experiment, load_plan
    from convswap.plans.power import sizing

    named = Path(args.plan)
    path = named if named.suffix == ".toml" else find_experiment(plan_folder(args.plan_dir), args.plan)
    if not path.is_file():
        raise ConvswapError(f"no plan file {path}")
    plan = load_plan(path)
    paired = [hypothesis for hypothesis in plan.hypotheses if hypothesis.test == "mcnemar_exact"]
    if not paired:
        raise ConvswapError(f"{path}: no hypothesis is tested by mcnemar_exact, so there is no paired test to size")
    records = None
    if args.pilot is not None:
        from convswap.analysis.pilot import discordance, pilot_records

        records = pilot_records(args.pilot, plan)
    for hypothesis in paired:
        rate = None
        if records is not None:
            found = discordance(records, hypothesis)
            print(f"{hypothesis.id}: pilot: {found.sentence()}")
            rate = found.rate
        elif hypothesis.discordance is None:
            print(f"{hypothesis.id}: no discordance declared; declare one in the plan or give --pilot LOGDIR")
            continue
        print(sizing(plan, hypothesis, rate).sentence())
    others = [hypothesis.id for hypothesis in plan.hypotheses if hypothesis.test != "mcnemar_exact"]
    if others:
        print(f"not sized (no paired McNemar test): {', '.join(others)}")
    return 0


def run_init(args: argparse.Namespace) -> int:
    from convswap.plan_folders import PLAN_DIR_ENV
    from convswap.plans.ledger import init_plan_folder

    copied = init_plan_folder(args.dir, args.empty)
    what = f"the spec's {len(copied)} registered plans and their ledger" if copied else "an empty ledger"
    print(f"{args.dir}: new plan folder with {what}")
    print(
        f"next: write {args.dir}/<experiment>.toml (`convswap plan analyses` lists the analyses it may name), then\n"
        f"  convswap plan register {args.dir}/<experiment>.toml --plan-dir {args.dir}\n"
        f"every command reads this folder with --plan-dir {args.dir}, or with export {PLAN_DIR_ENV}={args.dir}"
    )
    return 0


def run_analyses(args: argparse.Namespace) -> int:
    from convswap.plans.analyses import ANALYSES

    width = max(map(len, ANALYSES))
    for name, description in ANALYSES.items():
        print(f"{name.ljust(width)}  {description}")
    return 0


def run_verify(args: argparse.Namespace) -> int:
    from convswap.plans.plan import plan_files

    ledger = _ledger(args)
    if not ledger.plan_dir.is_dir():
        raise ConvswapError(f"plan folder {ledger.plan_dir} does not exist")
    if not plan_files(ledger.plan_dir):
        raise ConvswapError(f"{ledger.plan_dir} holds no plan file (*.toml): nothing to verify")
    problems = ledger.verify()
    for problem in problems:
        print(problem, file=sys.stderr)
    if problems:
        print(f"{len(problems)} problem(s) in {ledger.plan_dir}", file=sys.stderr)
        return 1
    print(f"{ledger.path}: chain intact, every plan file registered and unchanged")
    return 0


def run_show(args: argparse.Namespace) -> int:
    from convswap.plans.plan import load_plan, plan_files

    ledger = _ledger(args)
    rows = [("experiment", "version", "hypotheses", "status", "entry", "title")]
    for path in plan_files(ledger.plan_dir):
        state, entry = ledger.status(path)
        try:
            plan = load_plan(path)
        except ConvswapError as error:
            rows.append((path.stem, "-", "-", f"{state}, invalid", _entry(entry), str(error)))
            continue
        rows.append((plan.id, str(plan.version), str(len(plan.hypotheses)), state, _entry(entry), plan.title))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    for row in rows:
        print("  ".join(cell.ljust(width) for cell, width in zip(row[:-1], widths, strict=True)) + "  " + row[-1])
    return 0


def _entry(entry) -> str:
    return "-" if entry is None else f"line {entry.line} {entry.entry_hash[:12]}"
