"""How fast `convswap view` renders a 32,000-record log, and how fast its pages load in headless Chromium.

The log is made by real runs of the simulated observers (`sim:` presets) over
the color ladder, the readership test and the synthetic spatial task, until it
holds at least --records records; it is kept in --logs and reused by later runs
(a run already on disk is skipped by the runner's own resume).
The site is then built from scratch (every thumbnail rendered, the record cache
empty), built again into the same folder (thumbnails kept, the logs found in the
record cache), built into a fresh folder from the cached logs (as a second site of
one study is), and its index, its largest run page and one trial page are opened in
Chromium.  Targets: a build from scratch under 8 s, the
index loaded under 2 s.  CPU seconds and the load average are printed beside the
wall time: on a machine shared with other work the wall time holds its waits too.

    python benchmarks/view_speed.py --logs /tmp/view-logs
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import shutil
import tempfile
import time
from pathlib import Path

from bytecode import compile_convswap
from playwright.sync_api import sync_playwright
from targets import Check, report

from convswap.cli import main as convswap
from convswap.readout.sim_presets import PRESETS
from convswap.runs.context import RunRequest
from convswap.runs.runner import run_experiment

EXPERIMENTS = ("color_ladder", "color_readership", "synthetic_spatial")
BUILD_TARGET_S = 8.0
INDEX_TARGET_S = 2.0


def record_count(logs: Path) -> int:
    return sum(path.read_bytes().count(b"\n") for path in logs.rglob("*.jsonl"))


def make_log(logs: Path, wanted: int) -> int:
    # Every observer is shown the stimuli drawn from the first one's calibrated vocabulary: some presets'
    # own vocabularies are too small for the ladder's cue crossover.
    vocabulary = None
    for preset in PRESETS:
        for experiment in EXPERIMENTS:
            if record_count(logs) >= wanted:
                return record_count(logs)
            request = RunRequest(
                experiment, f"sim:{preset}", out=logs, vocabulary=vocabulary, vocabulary_from_other_model=True
            )
            result = run_experiment(request, progress=False)
            vocabulary = vocabulary or result.vocabulary
    return record_count(logs)


def build_seconds(logs: Path, site: Path) -> tuple[float, float]:
    """Wall-clock and CPU seconds of one `convswap view --out` (CPU time shows what a busy machine adds)."""
    started, cpu = time.perf_counter(), time.process_time()
    with contextlib.redirect_stdout(io.StringIO()):
        status = convswap(["view", str(logs), "--out", str(site)])
    elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu
    if status != 0:
        raise SystemExit(f"convswap view exited {status}")
    return elapsed, cpu


def page_seconds(page, url: str, ready: str) -> float:
    """Seconds from navigation to the page's content drawn (`ready` present) in the browser."""
    started = time.perf_counter()
    page.goto(url)
    page.wait_for_selector(ready)
    return time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--logs", type=Path, required=True, help="log folder, made here when it holds too few records")
    parser.add_argument("--records", type=int, default=32_000, help="records the log must hold (default 32000)")
    args = parser.parse_args()
    print(compile_convswap())
    args.logs.mkdir(parents=True, exist_ok=True)
    records = make_log(args.logs, args.records)
    if records < args.records:
        raise SystemExit(f"the sim runs made only {records} records; ask for fewer")
    with tempfile.TemporaryDirectory() as temporary:
        site = Path(temporary) / "site"
        os.environ["CONVSWAP_RECORD_CACHE"] = str(Path(temporary) / "record-cache")
        fresh = build_seconds(args.logs, site)
        again = build_seconds(args.logs, site)
        cached = build_seconds(args.logs, Path(temporary) / "second-site")
        record_lists = [path for path in site.glob("data/run-*.js") if path.stem.count("-") == 1]  # not the parts
        largest = max(record_lists, key=lambda path: path.stat().st_size)
        run = largest.stem.split("-")[1]
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=shutil.which("chromium"), args=["--no-sandbox"])
            page = browser.new_page()
            index = page_seconds(page, (site / "index.html").as_uri(), "#audit")
            run_page = page_seconds(page, f"{site.as_uri()}/run.html?run={run}", "#records tbody tr")
            shown = int(page.inner_text("#total"))
            page.click("a.trial-link")
            started = time.perf_counter()
            page.wait_for_selector(".card")
            trial = time.perf_counter() - started
            browser.close()
    print(f"log: {records} records in {args.logs}")
    builds = (
        ("build from scratch", fresh),
        ("build again, thumbnails kept", again),
        ("build into a fresh folder, the logs read before", cached),
    )
    for name, (wall, cpu) in builds:
        print(f"{name}: {wall:.1f} s wall, {cpu:.1f} s CPU")
    print(f"load average over the last minute: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    print(f"largest run page ({shown} records) drawn: {run_page:.2f} s; a trial page from it: {trial:.2f} s")
    return report(
        [
            Check("build from scratch (wall)", fresh[0], BUILD_TARGET_S, "s"),
            Check("index page loaded", index, INDEX_TARGET_S, "s"),
        ]
    )


if __name__ == "__main__":
    raise SystemExit(main())
