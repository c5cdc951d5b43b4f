"""How often one run request passes each of its checks, and where its checks are made.

Each request is given to `convswap run` in-process on the simulated observer (after a calibration), traced with
`sys.setprofile` from the moment `run_experiment` is entered:

    registry lookups   calls of `convswap.readout.registry.split_spec`, which every lookup of a spec's backend
                       entry goes through
    vocabulary loads   calls of `load_vocabulary`, and how many files they read
    interface checks   calls of `check_interfaces`
    plan loads         calls of `load_plan`, and how many files they read; ledger reads (`current_entry_hash`)
    after the lock     the run's own checks (functions named check_* and the other refusing ones, in the runs',
                       plans', registry's and vocabulary's modules) called once the log folder's lock is taken,
                       that is after the first file was written
    stays              until the first unit is read (`Reader.read`): the modules of the convswap functions entered,
                       each function at its first call (a loop over trials or fields counts once); a stay is a
                       stretch of calls in one module, a return a stay in a module already left; the same in the
                       run's own modules alone (the plans and the runs)

    python benchmarks/run_resolution.py

A registry lookup, an interface check, or a load of one vocabulary or plan file made more than once is a target
missed (exit status 1).
"""

from __future__ import annotations

import contextlib
import io
import sys
import tempfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from types import CodeType

from targets import Check, report

from convswap.cli import main

REPO_ROOT = Path(__file__).resolve().parents[1]
COCO_MINI = REPO_ROOT.parent / "shared" / "assets" / "coco" / "coco-mini"
MODEL = "sim:qwen3vl-like"
COUNTED = ("split_spec", "check_interfaces", "current_entry_hash")
FILES_READ = {"load_vocabulary": "path", "load_plan": "path"}  # function -> its argument naming the file
FIRST_UNIT = ("read", "reading")  # Reader.read: (function, module name's last part)
# The run's own modules (the plans, the runs, and before them experiments/), as against those it calls on.
OWN = ("convswap.experiments.", "convswap.plans.", "convswap.runs.", "convswap.plan_folders")
# The modules whose refusals are the run's own (the stimuli's and parsers' checks of each trial are not counted).
CHECKED_IN = (*OWN, "convswap.readout.registry", "convswap.calibration.vocabulary")
# Refusing functions not named check_*.
CHECKS = (
    "registered_plan",
    "live_batches",
    "load_vocabulary",
    "split_spec",
    "exclusion",
    "vocabulary_from_other_model",
)


@dataclass
class Trace:
    calls: Counter[str] = field(default_factory=Counter)
    files: dict[str, Counter[str]] = field(default_factory=lambda: {name: Counter() for name in FILES_READ})
    after_lock: Counter[str] = field(default_factory=Counter)
    stays: list[str] = field(default_factory=list)
    own_stays: list[str] = field(default_factory=list)
    entered: set[CodeType] = field(default_factory=set)
    started: bool = False
    locked: bool = False
    before_first_unit: bool = True

    def profile(self, frame, event: str, arg) -> None:
        module = frame.f_globals.get("__name__", "")
        if event != "call" or not module.startswith("convswap."):
            return
        name = frame.f_code.co_name
        self.started = self.started or name == "run_experiment"
        if not self.started:
            return
        self.calls[name] += name in COUNTED
        if name in FILES_READ:
            self.files[name][str(frame.f_locals.get(FILES_READ[name]))] += 1
        self.locked = self.locked or (name == "locked" and module.endswith(".folder_lock"))
        if self.locked and module.startswith(CHECKED_IN) and (name.startswith(("check_", "_check_")) or name in CHECKS):
            self.after_lock[name] += 1
        self.before_first_unit = self.before_first_unit and (name, module.rpartition(".")[2]) != FIRST_UNIT
        if self.before_first_unit and frame.f_code not in self.entered:
            self.entered.add(frame.f_code)
            for stays, counted in ((self.stays, True), (self.own_stays, module.startswith(OWN))):
                if counted and (not stays or stays[-1] != module):
                    stays.append(module)


def traced(arguments: list[str]) -> Trace:
    trace = Trace()
    printed = io.StringIO()
    sys.setprofile(trace.profile)
    try:
        with contextlib.redirect_stdout(printed), contextlib.redirect_stderr(io.StringIO()):
            status = main(arguments)
    finally:
        sys.setprofile(None)
    if status != 0:
        sys.exit(f"convswap {' '.join(arguments)} exited {status}: {printed.getvalue()[-2000:]}")
    return trace


def stays(modules: list[str]) -> str:
    distinct = len(set(modules))
    return f"{len(modules)} stays in {distinct} modules, {len(modules) - distinct} returns"


def main_() -> int:
    checks = []
    with tempfile.TemporaryDirectory(prefix="convswap-run-resolution-") as temporary:
        out = Path(temporary) / "runs"
        vocabulary = out / "calibration" / "sim-qwen3vl-like" / "vocabulary.json"
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            assert main(["run", "calibration", "--model", MODEL, "--out", str(out), "--no-progress"]) == 0
        requests = {
            "color_ladder, vocabulary kept under OUT": ["run", "color_ladder"],
            "color_ladder --vocabulary FILE": ["run", "color_ladder", "--vocabulary", str(vocabulary)],
            "coco_locate_identify --coco DIR": ["run", "coco_locate_identify", "--coco", str(COCO_MINI)],
        }
        for what, arguments in requests.items():
            trace = traced([*arguments, "--model", MODEL, "--out", str(out), "--limit", "2", "--no-progress"])
            vocabularies, plans = trace.files["load_vocabulary"], trace.files["load_plan"]
            print(f"{what}:\n  {trace.calls['split_spec']} registry lookups, {trace.calls['check_interfaces']} "
                  f"interface checks, {sum(vocabularies.values())} vocabulary loads of {len(vocabularies)} file(s), "
                  f"{sum(plans.values())} plan loads of {len(plans)} file(s), {trace.calls['current_entry_hash']} "
                  f"ledger reads\n  checks after the lock: {sum(trace.after_lock.values())} "
                  f"({', '.join(f'{name} {n}' for name, n in trace.after_lock.items()) or 'none'})\n"
                  f"  before the first unit: {stays(trace.stays)}; in the run's own modules {stays(trace.own_stays)}")  # fmt: skip
            checks += [
                Check(f"{what}: registry lookups", trace.calls["split_spec"], 2, ""),
                Check(f"{what}: interface checks", trace.calls["check_interfaces"], 2, ""),
                Check(f"{what}: loads of one vocabulary file", max(vocabularies.values(), default=0), 2, ""),
                Check(f"{what}: loads of one plan file", max(plans.values(), default=0), 2, ""),
            ]
    return report(checks)


if __name__ == "__main__":
    sys.exit(main_())
