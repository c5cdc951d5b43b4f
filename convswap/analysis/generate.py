"""Regenerate every table and figure from a log folder.

A builder whose inputs are missing is skipped with a message; one that meets a
problem in the records (two copies of a trial that disagree, a crossover pair
that does not swap) fails with the problem named, and the others still run.
Either way any file it wrote on an earlier run is removed, so that no stale
number survives in the output folder for `check-numbers` to find.  Without
figures, a figure page is kept only where its inputs are those it was drawn from.

Tables are written first into a folder beside the output folder and moved in
only once the whole set is written, and each figure page replaces its old files
only once whole: a write that fails (a full disk) stops the command with one
line and leaves the output folder as it was.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from tqdm import tqdm

from convswap.analysis.builders import Registered, RegisteredFigure, RegisteredTables, registered
from convswap.analysis.building import Builds, PageDrawer
from convswap.analysis.context import Context, MissingInput
from convswap.analysis.loading import LogFolder, load_vocabularies, read_log_folder
from convswap.analysis.numbers import write_numbers
from convswap.analysis.registration import Registry
from convswap.analysis.report import Table
from convswap.analysis.stats import MIN_RESAMPLES
from convswap.calibration.vocabulary import Vocabulary
from convswap.core import ConvswapError
from convswap.fileio import WriteError, atomic_write_text, staged_folder
from convswap.long_lived import long_lived


@dataclass
class Summary:
    written: list[Path] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)
    failed: list[tuple[str, str]] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)  # record lines left out of every table, each with why
    missing: list[str] = field(default_factory=list)  # runs whose logs lack expected units


SHOWN = 5  # refused records printed; index.md lists them all


def generate(
    logdir: str | Path,
    out_dir: str | Path,
    *,
    plan_dir: str | Path | None,
    seed: int = 0,
    resamples: int = MIN_RESAMPLES,
    messages: TextIO | None = None,
    unregistered: frozenset[str] = frozenset(),
    figures: bool = True,
    folder: LogFolder | None = None,
    vocabularies: list[Vocabulary] | None = None,
    drawer: PageDrawer | None = None,
) -> Summary:
    """Every table and figure from the records under `logdir`; `unregistered` names the experiments whose records
    include some not of their registered plan, so that every row of theirs says so.  Without `figures` no figure
    is drawn, and a figure left from other records is removed.  `folder` is `logdir` as `read_log_folder` read it,
    and `vocabularies` its vocabularies as `load_vocabularies` loaded them, where the caller has read them already;
    `drawer`, a worker for the figures' pages the caller started before."""
    messages = messages or sys.stderr
    if folder is None:
        folder = read_log_folder(logdir)
    if vocabularies is None:
        vocabularies = load_vocabularies(logdir)
    # From here on the records read are only read: the collector passes over them (loading the vocabularies alone
    # took it half a second of walks over 30,000 records).
    with long_lived():
        return _generate(
            folder, vocabularies, logdir, Path(out_dir), plan_dir, seed, resamples, messages, unregistered, figures,
            drawer,
        )  # fmt: skip


def _generate(
    folder: LogFolder,
    vocabularies: list[Vocabulary],
    logdir: str | Path,
    out: Path,
    plan_dir: str | Path | None,
    seed: int,
    resamples: int,
    messages: TextIO,
    unregistered: frozenset[str],
    figures: bool,
    drawer: PageDrawer | None,
) -> Summary:
    records, unreadable = folder.readable()
    if not records and not vocabularies:
        refused = [*folder.refused, *unreadable]
        if refused:
            raise ConvswapError(f"no record under {logdir} can be read: {len(refused)} refused, the first {refused[0]}")
        raise ConvswapError(f"no records (*.jsonl) and no vocabulary files under {logdir}")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise ConvswapError(f"cannot create output folder {out}: {error.strerror}") from error
    context = Context(records, Registry(plan_dir, unregistered), vocabularies, seed, resamples)
    summary = Summary(refused=[*folder.refused, *unreadable], missing=folder.missing)
    for line in summary.refused[:SHOWN]:
        print(f"refused: {line}", file=messages)
    if len(summary.refused) > SHOWN:
        print(f"refused: {len(summary.refused) - SHOWN} more record(s), listed in {out / 'index.md'}", file=messages)
    for line in summary.missing:
        print(f"missing: {line}", file=messages)
    with staged_folder(out, "the tables") as stage:
        stale = _write_all(context, out, stage, summary, messages, figures, drawer)
        atomic_write_text(stage / "index.md", _index(summary, logdir, plan_dir, seed, resamples))
    for builder in stale:
        builder.remove(out)
    return summary


def _write_all(
    context: Context,
    out: Path,
    stage: Path,
    summary: Summary,
    messages: TextIO,
    figures: bool,
    drawer: PageDrawer | None,
) -> list[Registered]:
    """Every builder's tables into `stage`, then the numbers of every table written, then the figures into `out`
    (a page replaced only when its inputs changed, and then only once whole); the builders skipped or failed this
    time, whose earlier outputs are to go.  The numbers come before the figures because they need the tables alone
    (a figure has none), and the figures' pages may still be drawing in the page worker meanwhile."""
    tables: list[Table] = []
    stale: list[Registered] = []
    builders = registered()
    with Builds(builders, context, out, stage, figures, drawer) as builds:
        # disable=None: a bar on a terminal only, so piped reports stay clean.
        bar = tqdm(total=len(builders), desc="tables", unit="builder", leave=False, disable=None)

        def write_each(kind: type[RegisteredTables] | type[RegisteredFigure]) -> None:
            for index, builder in enumerate(builders):
                if isinstance(builder, kind):
                    bar.set_postfix_str(", ".join(builder.names), refresh=False)
                    tables.extend(_write_one(builds, index, builder, out, summary, messages, stale))
                    bar.update()

        write_each(RegisteredTables)
        summary.written.extend(out / path.name for path in write_numbers(tables, stage))
        write_each(RegisteredFigure)
        bar.close()
    return stale


def _write_one(
    builds: Builds,
    index: int,
    builder: Registered,
    out: Path,
    summary: Summary,
    messages: TextIO,
    stale: list[Registered],
) -> list[Table]:
    """One builder's outputs, noted in `summary`; its tables, or none where it was skipped or failed (and then it
    joins `stale`)."""
    names = ", ".join(builder.names)
    try:
        written, built = builds.write(index, builder)
    except WriteError:
        raise
    except MissingInput as missing:
        summary.skipped.append((names, str(missing)))
        tqdm.write(f"skipped {names}: {missing}", file=messages)
        stale.append(builder)
        return []
    except ConvswapError as problem:
        summary.failed.append((names, str(problem)))
        tqdm.write(f"failed {names}: {problem}", file=messages)
        stale.append(builder)
        return []
    # A figure's pages are written into `out` itself; the tables into `stage`, to be moved there.
    summary.written.extend(written if isinstance(builder, RegisteredFigure) else (out / p.name for p in written))
    return built


def _index(summary: Summary, logdir: str | Path, plan_dir: str | Path | None, seed: int, resamples: int) -> str:
    lines = [
        "# Generated tables and figures",
        "",
        f"From the records under `{logdir}`; registration from "
        + (f"`{plan_dir}`." if plan_dir is not None else "the spec's own words (no plan folder)."),
        f"Bootstrap: seed {seed}, {resamples} resamples.",
        "",
        "## Written",
        *(f"- {path.name}" for path in summary.written),
    ]
    if summary.skipped:
        lines += ["", "## Skipped (inputs missing)", *(f"- {names}: {why}" for names, why in summary.skipped)]
    if summary.failed:
        lines += ["", "## Failed (problems in the records)", *(f"- {names}: {why}" for names, why in summary.failed)]
    if summary.missing:
        lines += ["", "## Missing units (every table above is of the records present)",
                  *(f"- {line}" for line in summary.missing)]  # fmt: skip
    if summary.refused:
        lines += ["", "## Refused records (in no table)", *(f"- {line}" for line in summary.refused)]
    return "\n".join(lines) + "\n"
