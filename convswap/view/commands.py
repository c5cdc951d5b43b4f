"""`convswap view LOGDIR`: the logs as a static site to read, or served on loopback."""

from __future__ import annotations

import argparse
import signal
import sys
import tempfile
from pathlib import Path

from convswap.analysis.commands import ALLOW_UNREGISTERED_HELP
from convswap.core import ConvswapError
from convswap.long_lived import long_lived
from convswap.plan_folders import PLAN_DIR_HELP, plan_folder

DEFAULT_SITE = "site"


def register(subparsers: argparse._SubParsersAction) -> None:
    view = subparsers.add_parser(
        "view",
        help="read the logs in a browser: what the model said beside the image, prompt and keys",
        description="Write a self-contained static site (open its index.html from disk) showing every run under "
        "LOGDIR with its accuracy per convention and the audit verdicts, each record with its image, prompt, "
        "options and keys, raw output and first-token readout, a pixel answer's drawn image beside its source with "
        "its parse outlined, its colour mask on demand and its outcome, the records of a trial under every "
        "convention side by side, and filters. With --serve, serve the site on 127.0.0.1 on a free port until interrupted.",
    )
    view.add_argument("logdir", type=Path, metavar="LOGDIR", help="folder of run logs (searched recursively)")
    view.add_argument("--out", type=Path, metavar="SITE",
                      help=f"site folder to write (default ./{DEFAULT_SITE}; with --serve, a temporary folder); a site "
                      "written before is replaced once the new one is whole")  # fmt: skip
    view.add_argument("--serve", action="store_true", help="serve the site on 127.0.0.1 and print its address")
    view.add_argument("--tables", type=Path, metavar="DIR",
                      help="the folder `convswap tables --out` wrote, linked from the index (default: LOGDIR/tables, if it exists; the index names the folder it looked in)")  # fmt: skip
    view.add_argument("--vocabulary", type=Path, action="append", default=[], metavar="FILE",
                      help="a calibrated vocabulary for the audit's held-out check, as `convswap audit` takes it")  # fmt: skip
    view.add_argument("--plan-dir", type=Path, help=f"{PLAN_DIR_HELP}; the audit reads its declared conventions")
    view.add_argument("--allow-unregistered", action="store_true",
                      help=f"{ALLOW_UNREGISTERED_HELP}; without it the site shows the audit's refusal, as "
                      "`convswap audit` gives it")  # fmt: skip
    view.set_defaults(handler=view_command)


def view_command(args: argparse.Namespace) -> int:
    from convswap.conventions.declarations import conventions_of
    from convswap.protocols import load_protocols
    from convswap.runs.provenance import ProvenanceCheck
    from convswap.view.images import Thumbnails
    from convswap.view.runs import read_logs
    from convswap.view.serve import site_server
    from convswap.view.site import build_site, staged_site

    tables = args.tables if args.tables is not None else args.logdir / "tables"
    plan_dir = plan_folder(args.plan_dir)
    if not args.logdir.is_dir():
        raise ConvswapError(f"log folder {args.logdir} does not exist")
    with tempfile.TemporaryDirectory(prefix="convswap-view-") as temporary:
        site = args.out if args.out is not None else Path(temporary if args.serve else ".") / DEFAULT_SITE
        # The images render in workers while the audit runs; they are written into the site with its pages.
        with staged_site(site) as stage, Thumbnails(stage / "images", kept=site / "images") as thumbnails:
            check = ProvenanceCheck(plan_dir)  # handed every line as the audit's reading reads it: read once
            view = read_logs(args.logdir, args.vocabulary, conventions_of(plan_dir), load_protocols(plan_dir), check,
                             on_read=thumbnails.render_ahead)  # fmt: skip
            provenance = check.result
            if provenance.unregistered and not args.allow_unregistered:
                view.refusal = provenance.refusal()
            for line in [*provenance.torn, *view.missing]:
                print(line, file=sys.stderr)
            if view.refusal is not None:
                print(f"the site shows no audit verdict: {view.refusal}", file=sys.stderr)
            if view.refused:
                print(f"{len(view.refused)} record(s) refused, listed on the index page; the first: {view.refused[0]}",
                      file=sys.stderr)  # fmt: skip
            with long_lived():
                built = build_site(view, args.logdir, stage, tables, tables_given=args.tables is not None,
                                   thumbnails=thumbnails, kept=site)  # fmt: skip
        if built.unavailable:
            print(
                f"warning: {len(built.unavailable)} of {built.images} images could not be re-rendered, so their "
                f"trial pages show none (first: {built.unavailable[0]})",
                file=sys.stderr,
            )
        if built.undrawn:
            print(
                f"warning: {len(built.undrawn)} drawn answer(s) cannot be shown on their trial pages (first: "
                f"{built.undrawn[0]})",
                file=sys.stderr,
            )
        records = sum(len(run.records) for run in view.runs)
        index = site / "index.html"
        print(f"{records} records in {len(view.runs)} runs: {index.resolve().as_uri()}", flush=True)
        if args.serve:
            # A terminated server unwinds like an interrupted one, so the temporary site is removed either way.
            signal.signal(signal.SIGTERM, _exit_on_sigterm)
            with site_server(site) as server:
                host, port = server.server_address[:2]
                host = host.decode() if isinstance(host, bytes) else host
                print(f"serving {site} at http://{host}:{port}/ (Ctrl-C stops)", flush=True)
                server.serve_forever()
    return 0


def _exit_on_sigterm(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)
