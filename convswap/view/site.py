"""Writing the viewer's static site: an index page built here, the run and trial pages drawn from data files.

Layout of a site folder::

    index.html             every run, its accuracy per convention, the audit, the tables and figures
    run.html?run=N         one run's records, filtered and paged (reads data/run-N.js)
    trial.html?run=N&part=P&trial=ID#CONDITION/CONVENTION
                           one trial under every convention side by side (reads data/run-N-P.js)
    data/, images/, tables/, view.js, style.css

A site is built in a folder beside its site folder, which it replaces once whole (`staged_site`): an interrupted
build leaves the older site as it was, never its pages mixed with new ones.

Data files are scripts that hand their JSON to `convswapLoaded`, because a page
opened from file:// may load a script but not fetch a file.  A run's record list
is one file; the full records are split into parts of TRIALS_PER_PART trials, so
no page loads more than it shows.  Everything that comes from a log reaches the
page as data and is put in the DOM as text; the index escapes it here.
"""

from __future__ import annotations

import contextlib
import functools
import json
import shutil
from collections.abc import Iterator
from concurrent.futures import as_completed
from dataclasses import asdict, dataclass
from html import escape
from importlib import resources
from pathlib import Path
from typing import Any

import orjson
from tqdm import tqdm

from convswap.analysis.builders import FIGURE_SUFFIXES, TABLE_SUFFIXES
from convswap.analysis.stats import Accuracy
from convswap.audits.checks import CheckResult
from convswap.audits.pixel_checks import kept_images
from convswap.audits.report import verdict_text
from convswap.core import ConvswapError, Trial
from convswap.fileio import atomic_write_bytes, atomic_write_text, staged_folder
from convswap.long_lived import collector_paused
from convswap.view.drawings import Drawings
from convswap.view.images import ImageCheck, Thumbnails
from convswap.view.runs import LOW_MASS, LogView, Run, record_detail, record_row, run_title
from convswap.workers import PARALLEL_RECORDS, forked_pool, usable_cpus

TRIALS_PER_PART = 50
SITE_MARKER = ".convswap-view"
STATIC_FILES = ("run.html", "trial.html", "view.js", "style.css")


@contextlib.contextmanager
def staged_site(out: Path) -> Iterator[Path]:
    """A fresh folder to build the site of the site folder `out` in, which replaces the site `out` holds once the
    block is done; `out` may be absent, or a site this command wrote, and nothing else."""
    if out.exists() and not out.is_dir():
        raise ConvswapError(f"site folder {out} is a file")
    if out.is_dir() and any(out.iterdir()) and not (out / SITE_MARKER).is_file():
        raise ConvswapError(f"site folder {out} is not empty and was not written by convswap view; choose another")
    try:
        out.absolute().parent.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise ConvswapError(f"cannot create site folder {out}: {error.strerror}") from error
    with staged_folder(out, "the site") as stage:
        (stage / SITE_MARKER).touch()
        for folder in ("data", "tables"):
            (stage / folder).mkdir()
        yield stage


@dataclass(frozen=True)
class BuiltSite:
    images: int  # distinct images the records show
    unavailable: tuple[str, ...]  # why each image that could not be re-rendered was not
    undrawn: tuple[str, ...]  # each pixel answer whose image came back but whose drawing cannot be shown, and why


def build_site(
    view: LogView,
    logdir: Path,
    out: Path,
    tables: Path,
    tables_given: bool = True,
    thumbnails: Thumbnails | None = None,
    kept: Path | None = None,
) -> BuiltSite:
    """Write the whole site for `view` into the empty folder `out` (`staged_site`'s), linking what `convswap tables`
    wrote in `tables` (which must exist when given; the default folder may be absent, and the index then says
    where it looked).  `thumbnails`: the site's images, some perhaps rendering ahead already
    (`Thumbnails.render_ahead`); `kept`: the site this one replaces, whose images and drawings are taken where
    they still apply."""
    if tables_given and not tables.is_dir():
        raise ConvswapError(f"tables folder {tables} does not exist")
    static = resources.files("convswap.view") / "static"
    for name in STATIC_FILES:
        (out / name).write_bytes((static / name).read_bytes())
    if thumbnails is None:
        thumbnails = Thumbnails(out / "images", kept / "images" if kept is not None else None)
    drawings = Drawings(out / "drawings", kept_images(logdir), view.protocols,
                        kept / "drawings" if kept is not None else None)  # fmt: skip
    undrawn = []
    with collector_paused():
        # Every image is had here, so that the manifest and the index count each, whichever process writes its pages.
        for run in view.runs:
            for record in run.records:
                thumbnails.check(record)
                missing = drawings.missing(record)
                if missing is not None:
                    undrawn.append(f"{record.experiment} {record.model} {record.condition} {record.convention} "
                                   f"{record.trial_id}: {missing}")  # fmt: skip
        thumbnails.close()
        write_runs(view, thumbnails, out / "data", drawings)
    thumbnails.save_manifest()
    table_files = copy_tables(tables, out / "tables") if tables.is_dir() else []
    shown = thumbnails.shown()
    unavailable = tuple(check.note for check in shown if check.verdict == "unavailable")
    images = len(shown)
    atomic_write_text(out / "index.html", index_page(view, logdir, Tables(tables, table_files), images, unavailable))
    return BuiltSite(images, unavailable, tuple(undrawn))


def write_data(path: Path, data: Any) -> None:
    try:
        text = orjson.dumps(data)
    except orjson.JSONEncodeError:
        # What the fast encoder refuses, a log may still hold (an integer past 64 bits, a lone surrogate written
        # as an escape): the standard encoder writes it, with every character outside ASCII escaped.
        text = json.dumps(data, separators=(",", ":")).encode()
    # "<" escaped so that no text from a log can close a script element, wherever the data ends up.
    atomic_write_bytes(path, b"convswapLoaded(" + text.replace(b"<", b"\\u003c") + b");\n")


def write_runs(view: LogView, thumbnails: Thumbnails, data: Path, drawings: Drawings) -> None:
    """Every run's data files, by worker processes where the records are many enough to pay for them, the
    largest runs first so that the workers finish together."""
    records = sum(len(run.records) for run in view.runs)
    pool = forked_pool(usable_cpus()) if records >= PARALLEL_RECORDS and len(view.runs) > 1 else None
    # disable=None: a bar on a terminal only, so piped output stays clean.
    with tqdm(total=len(view.runs), desc="site pages", unit="run", leave=False, disable=None) as bar:
        if pool is None:
            for run in view.runs:
                write_run(run, view, thumbnails, data, drawings)
                bar.update()
            return
        _FORKED[:] = [(view, thumbnails, data, drawings)]  # before the first submit forks the workers
        try:
            with pool:
                largest_first = sorted(range(len(view.runs)), key=lambda index: -len(view.runs[index].records))
                for written in as_completed([pool.submit(_write_forked, index) for index in largest_first]):
                    written.result()
                    bar.update()
        finally:
            _FORKED.clear()


# What a forked worker writes pages from: set before the workers are forked, so that each starts with it.
_FORKED: list[tuple[LogView, Thumbnails, Path, Drawings]] = []


def _write_forked(index: int) -> None:
    ((view, thumbnails, data, drawings),) = _FORKED
    write_run(view.runs[index], view, thumbnails, data, drawings)


def write_run(run: Run, view: LogView, thumbnails: Thumbnails, data: Path, drawings: Drawings | None = None) -> None:
    rows: list[dict[str, Any]] = []
    parts: list[dict[str, Any]] = []
    part_of_trial: dict[str, int] = {}
    for record in run.records:
        failures = view.failures_of(record)
        if record.trial_id not in part_of_trial:
            part_of_trial[record.trial_id] = len(part_of_trial) // TRIALS_PER_PART
            if part_of_trial[record.trial_id] == len(parts):
                parts.append({})
            parts[-1][record.trial_id] = {"trial": trial_header(record.trial), "images": [], "records": []}
        part = part_of_trial[record.trial_id]
        row = record_row(record, failures)
        rows.append({**row, "part": part})
        shown = parts[part][record.trial_id]
        image = image_data(thumbnails.check(record))
        if image not in shown["images"]:
            shown["images"].append(image)
        detail = record_detail(record, failures, row)
        drawn = drawings.files(record) if drawings is not None else None
        if drawn is not None:
            detail["drawing"] = asdict(drawn)
        shown["records"].append(detail)
    summary = {
        "run": run.number,
        "title": run_title(run),
        "experiment": run.experiment,
        "model": run.model,
        "low_mass": LOW_MASS,
        "conditions": run.conditions,
        "rows": rows,
    }
    write_data(data / f"run-{run.number}.js", summary)
    for number, trials in enumerate(parts):
        write_data(data / f"run-{run.number}-{number}.js", {**summary_header(run), "part": number, "trials": trials})


@functools.cache
def image_data(check: ImageCheck) -> dict[str, Any]:
    # Every convention's record of a trial shows one image: its check is converted once, not per record.
    return asdict(check)


def summary_header(run: Run) -> dict[str, Any]:
    return {"run": run.number, "title": run_title(run), "low_mass": LOW_MASS}


def trial_header(trial: Trial) -> dict[str, Any]:
    return {
        "id": trial.trial_id,
        "task": trial.task,
        "target": trial.target,
        "subject": trial.subject,
        "cell": trial.cell,
        "grid": trial.grid,
        "referents": list(trial.referents),
        "held_out": trial.held_out,
        "image": trial.image.to_json(),
    }


def copy_tables(tables: Path, into: Path) -> list[tuple[str, str]]:
    """The tables and figures of `convswap tables`, copied in; markdown tables get a page. (name, link) pairs."""
    links = []
    for path in sorted(p for p in tables.iterdir() if p.suffix in TABLE_SUFFIXES + FIGURE_SUFFIXES and p.is_file()):
        shutil.copyfile(path, into / path.name)
        links.append((path.name, f"tables/{path.name}"))
        if path.suffix == ".md":
            page = into / f"{path.stem}.html"
            atomic_write_text(page, page_shell(path.stem, f"<pre>{escape(path.read_text(encoding='utf-8'))}</pre>"))
            links[-1] = (path.name, f"tables/{page.name}")
    return links


def page_shell(title: str, body: str, css: str = "../style.css") -> str:
    return (
        f'<!doctype html>\n<html lang="en"><head><meta charset="utf-8"><title>{escape(title)}</title>'
        f'<link rel="stylesheet" href="{css}"></head>\n<body>\n{body}\n</body></html>\n'
    )


def percent(value: Accuracy) -> str:
    return "–" if value.rate is None else f"{100 * value.rate:.1f}% ({value.correct}/{value.scored})"


def unscored_text(value: Accuracy) -> str:
    return ", ".join(f"{status} {count}" for status, count in value.unscored.items()) or "0"


@dataclass(frozen=True)
class Tables:
    folder: Path  # where the index looked for what `convswap tables` wrote
    files: list[tuple[str, str]]  # (name, link) of each table and figure copied in


def index_page(view: LogView, logdir: Path, tables: Tables, images: int, unavailable: tuple[str, ...]) -> str:
    records = sum(len(run.records) for run in view.runs)
    body = [f"<h1>convswap view</h1>\n<p class=\"where\">{escape(str(logdir))}: {len(view.runs)} runs, "
            f"{records} records</p>"]  # fmt: skip
    if unavailable:
        body.append(
            f'<p class="warning" id="missing-images">{len(unavailable)} of {images} images could not be re-rendered, '
            f"so their trial pages show none (first: {escape(unavailable[0])}).</p>"
        )
    body.append(runs_table(view.runs))
    body.append(audit_refusal(view.refusal) if view.refusal is not None else audit_table(view.audit))
    body.append(problems_section(view.refused, view.missing))
    body.append(tables_section(tables))
    return page_shell("convswap view", "\n".join(body), css="style.css")


def runs_table(runs: list[Run]) -> str:
    header = "<tr><th>experiment</th><th>model</th><th>condition</th><th>task</th><th>readout</th><th>K</th>" \
             "<th>records</th><th>scored</th><th>unscored</th><th>accuracy</th><th>accuracy per convention</th></tr>"  # fmt: skip
    rows = []
    for run in runs:
        for summary in run.summaries:
            conventions = "".join(
                f'<li><span class="convention">{escape(name)}</span> {percent(value)}</li>'
                for name, value in summary.per_convention
            )
            link = (
                f"run.html?run={run.number}&amp;condition={escape(summary.condition)}&amp;task={escape(summary.task)}"
            )
            rows.append(
                f'<tr class="run"><td><a href="{link}">{escape(run.experiment)}</a></td><td>{escape(run.model)}</td>'
                f"<td>{escape(summary.condition)}</td><td>{escape(summary.task)}</td><td>{escape(summary.readout)}</td>"
                f"<td>{summary.k}</td><td>{summary.records}</td><td>{summary.accuracy.scored}</td>"
                f"<td>{escape(unscored_text(summary.accuracy))}</td><td>{percent(summary.accuracy)}</td>"
                f'<td><ul class="per-convention">{conventions}</ul></td></tr>'
            )
    note = "<p>Accuracy per task and readout, each against its own K (chance 1/K); never pooled across them.</p>"
    return f'<h2>Runs</h2>\n{note}\n<table id="runs">\n{header}\n' + "\n".join(rows) + "\n</table>"


def audit_table(results: list[CheckResult]) -> str:
    rows = []
    for result in results:
        rows.append(
            f'<tr class="check {result.verdict.lower().replace(" ", "-")}"><td>{escape(result.name)}</td>'
            f"<td>{escape(result.description)}{notes_list(result.notes)}</td><td>{result.checked}</td>"
            f'<td>{len(result.failures)}</td><td class="verdict">{escape(verdict_text(result))}</td></tr>'
        )
    header = "<tr><th>check</th><th>what it verifies</th><th>checked</th><th>failures</th><th>verdict</th></tr>"
    note = "<p>From <code>convswap audit</code>; a failing record is marked on its run's list and its trial page.</p>"
    return f'<h2>Audit</h2>\n{note}\n<table id="audit">\n{header}\n' + "\n".join(rows) + "\n</table>"


def audit_refusal(refusal: str) -> str:
    """What `convswap audit` answers for records not of the registered plan: a refusal, and so no verdict here."""
    return (
        '<h2>Audit</h2>\n<p class="refused" id="audit-refused"><code>convswap audit</code> refuses these records '
        f"and checks nothing: {escape(refusal)}</p>"
    )


def problems_section(refused: list[str], missing: list[str]) -> str:
    """The record lines the reader refused (shown nowhere else) and the runs missing expected units; empty if none."""
    parts = []
    if missing:
        items = "".join(f"<li>{escape(line)}</li>" for line in missing)
        parts.append(f'<h2>Missing units</h2>\n<ul id="missing">{items}</ul>')
    if refused:
        items = "".join(f"<li>{escape(line)}</li>" for line in refused)
        parts.append(f'<h2>Refused records ({len(refused)}), shown nowhere</h2>\n<ul id="refused">{items}</ul>')
    return "\n".join(parts)


def notes_list(notes: list[str]) -> str:
    """A check's notes, folded: on a large log they run to a line per group."""
    if not notes:
        return ""
    items = "".join(f"<li>{escape(note)}</li>" for note in notes)
    return f"<details><summary>{len(notes)} notes</summary><ul>{items}</ul></details>"


def tables_section(tables: Tables) -> str:
    where = escape(str(tables.folder))
    if not tables.files:
        return (
            f'<h2>Tables and figures</h2>\n<p id="no-tables">No tables found in <code>{where}</code> (run '
            "<code>convswap tables LOGDIR --out DIR</code>, then <code>convswap view LOGDIR --tables DIR</code>).</p>"
        )
    items = []
    for name, link in tables.files:
        preview = f'<br><img src="{escape(link)}" alt="{escape(name)}">' if name.endswith(".png") else ""
        items.append(f'<li><a href="{escape(link)}">{escape(name)}</a>{preview}</li>')
    return (
        f'<h2>Tables and figures</h2>\n<p id="tables-from">From <code>{where}</code>.</p>\n<ul id="tables">'
        + "".join(items)
        + "</ul>"
    )
