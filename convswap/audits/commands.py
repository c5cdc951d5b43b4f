"""`convswap audit LOGDIR` and `convswap audit-model --model SPEC`."""

from __future__ import annotations

import argparse
from pathlib import Path

from convswap.analysis.commands import ALLOW_UNREGISTERED_HELP, checked_provenance
from convswap.core import ConvswapError
from convswap.defaults import DEFAULT_COLOR_WORDS
from convswap.plan_folders import PLAN_DIR_HELP, plan_folder
from convswap.readout.base import DEFAULT_MAX_NEW_TOKENS, check_max_new_tokens
from convswap.readout.options import add_model_arguments, model_options
from convswap.readout.registry import backend_entry, load_backend


def register(subparsers: argparse._SubParsersAction) -> None:
    audit = subparsers.add_parser(
        "audit",
        help="run the scorer-integrity checks over every record of a log folder",
        description="Run the scorer-integrity checks of spec section 8 over every record under LOGDIR: "
        "prompt-target, relabel, pairing-break, ties, alphabet, truncation, derangement, index space and held-out. "
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
    audit.add_argument("--plan-dir", type=Path, metavar="DIR", help=PLAN_DIR_HELP)
    audit.add_argument("--allow-unregistered", action="store_true", help=ALLOW_UNREGISTERED_HELP)
    audit.set_defaults(handler=run_audit)

    model = subparsers.add_parser(
        "audit-model",
        help="before a model is scored: which readouts of which alphabets can be trusted",
        description="Probe a model with known-answer prompts in every answer alphabet (integer labels 1-6, 1-9 and "
        "1-16; color words) and judge each readout. First token: the surface of every variant, shared first "
        "tokens, candidate mass and the top first tokens of each probe. Generate: greedy generation at the run's "
        "token budget, parsed, with truncation counted. A served or API model's first token is read through its "
        "server's logprobs (an API model's are always asked for here): exact where the server gives each "
        "candidate's, else bounded from its top k, with the mass rule's verdicts counted. Prints one verdict per "
        "alphabet and readout (usable, or refused with the reason). A model that answers in pixels (openai-image:, "
        "gemini-image:, ...) is asked one guidance prompt of each shipped visual protocol on a --coco photograph "
        "instead (or as well, when it answers in both), and each drawn answer's outcome is printed. Exits 0 when "
        "every alphabet has at least one usable readout and every protocol tried was followed (a correct or "
        "incorrect answer), else 1.",
    )
    add_model_arguments(model)
    model.add_argument(
        "--vocabulary",
        type=Path,
        metavar="FILE",
        help="the model's calibrated color vocabulary, whose words form the color alphabet "
        f"(default: {', '.join(DEFAULT_COLOR_WORDS)})",
    )
    model.add_argument(
        "--max-new-tokens",
        type=int,
        default=DEFAULT_MAX_NEW_TOKENS,
        metavar="N",
        help=f"generation budget to check, as `convswap run` generates (default {DEFAULT_MAX_NEW_TOKENS}; "
        "openai: and gemini: models never send less than their own max_output_tokens, room to reason first)",
    )
    model.add_argument(
        "--coco",
        type=Path,
        metavar="DIR",
        help="a COCO folder (annotations/instances_val2017.json beside val2017/, e.g. coco-mini) whose first "
        "admitted photograph an image model is asked one guidance prompt of each shipped visual protocol on "
        "(needed for a model that answers in pixels only)",
    )
    model.set_defaults(handler=run_audit_model)


def run_audit(args: argparse.Namespace) -> int:
    from convswap.audits.log_audit import audit_log_folder
    from convswap.audits.report import format_folder_problems, format_report
    from convswap.conventions.declarations import conventions_of
    from convswap.protocols import load_protocols

    plan_dir = plan_folder(args.plan_dir)
    provenance = checked_provenance(args.logdir, plan_dir, args.allow_unregistered)
    folder, results = audit_log_folder(
        args.logdir,
        args.vocabulary,
        seed=args.seed,
        conventions=conventions_of(plan_dir),
        protocols=load_protocols(plan_dir),
    )
    print(format_report(results))
    print(format_folder_problems(folder), end="")
    failed = [result.name for result in results if not result.passed]
    if provenance.torn:
        failed.append(f"{len(provenance.torn)} torn last line(s)")
    if folder.refused:
        failed.append(f"{len(folder.refused)} refused record(s)")
    unreadable = folder.readable()[1]
    if unreadable:
        failed.append(f"{len(unreadable)} record(s) with a part that does not load")
    if folder.missing:
        failed.append(f"{len(folder.missing)} run(s) missing expected units")
    unrun = [f"{result.name} ({result.verdict})" for result in results if result.verdict in ("not run", "too few")]
    if failed:
        outcome = f"FAILED: {', '.join(failed)}"
    else:
        outcome = f"every check that ran passed; did not run: {', '.join(unrun)}" if unrun else "every check passed"
    print(f"\n{len(folder.records)} records audited; {outcome}")
    return 1 if failed else 0


def run_audit_model(args: argparse.Namespace) -> int:
    check_max_new_tokens(args.max_new_tokens)
    from convswap.audits.model_audit import audit_model, default_alphabets, effective_budget
    from convswap.audits.model_report import format_model_audit
    from convswap.calibration.vocabulary import load_vocabulary

    if args.vocabulary is not None:
        alphabets = default_alphabets(load_vocabulary(args.vocabulary).words, f"vocabulary {args.vocabulary}")
    else:
        alphabets = default_alphabets()
    interfaces = backend_entry(args.model).interfaces
    if interfaces == {"image"} and args.coco is None:
        raise ConvswapError(f"{args.model} answers in pixels: audit-model needs --coco DIR (a COCO folder such as "
                            "coco-mini) to ask it one guidance prompt of each visual protocol")  # fmt: skip
    options = model_options(args)
    if backend_entry(args.model).api_logprobs:  # an API model is asked for its logprobs to see whether it gives them
        options["logprobs"] = True
    backend = load_backend(args.model, **options)
    untried = " (give --coco DIR to ask it each visual protocol too)" if "image" in interfaces and not args.coco else ""
    print(f"{args.model} answers in {' and '.join(sorted(interfaces))}{untried}")
    failed = []
    if "text" in interfaces:
        audits = audit_model(backend, alphabets, args.max_new_tokens)
        print(format_model_audit(backend.info(), effective_budget(backend, args.max_new_tokens), audits))
        unusable = [audit.alphabet.name for audit in audits if not audit.usable]
        print(
            "\n" + (f"NO USABLE READOUT: {', '.join(unusable)}" if unusable else "every alphabet has a usable readout")
        )
        failed += unusable
    if "image" in interfaces and args.coco is not None:
        from convswap.audits.pixel_model_audit import format_pixel_audit, pixel_audit

        tries = pixel_audit(backend, args.coco)
        print("\n" + format_pixel_audit(tries))
        unfollowed = [t.protocol for t in tries if t.outcome is not None and not t.scorable]
        print("\n" + (f"NOT FOLLOWED: {', '.join(unfollowed)}" if unfollowed else "every protocol tried was followed"))
        failed += unfollowed
    return 1 if failed else 0
