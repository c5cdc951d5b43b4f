"""The README's walkthroughs, run as a new user runs them: the blocks extracted from README.md, run literally.

A walkthrough is the text between `<!-- walkthrough -->` and `<!-- end walkthrough -->`.  Its `bash` blocks are
run by bash, in README order, in one fresh folder where the Set-up's `convswap demo`, run as written, has written
`runs/demo` and the coco-mini photographs sit at `coco-mini/`; a block whose first line is `# PATH`
is written to PATH.  The environment a block leaves (an `export`) is the next block's.  Every command must succeed; then what the prose
promises is checked against references computed here from the raw records: the planted values of the observers,
the prompts of the declared conventions, the viewer's accuracy per task.
"""

from __future__ import annotations

import csv
import html
import json
import math
import os
import re
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import COCO_MINI
from scipy.stats import binomtest
from statsmodels.stats.proportion import proportion_confint

from convswap.cli import main

pytestmark = pytest.mark.slow

README = Path(__file__).resolve().parents[1] / "README.md"
EXAMPLE_ITEMS = Path(__file__).resolve().parents[1] / "examples" / "items"
START, END = "<!-- walkthrough -->", "<!-- end walkthrough -->"
FENCE = re.compile(r"^```(\w*)\n(.*?)^```$", flags=re.S | re.M)
OWN = "grid4_thousandths"
OWN_LOG = Path("runs/own") / OWN / "sim-observer.toml" / "visible.jsonl"
BENCHMARK_LOG = Path("runs/benchmark") / "coco_items" / "sim-benchmark_observer.toml" / "visible.jsonl"


@dataclass(frozen=True)
class Block:
    line: int  # where it starts in README.md
    language: str
    text: str

    @property
    def path(self) -> str | None:
        """The file a block writes: its first line, `# PATH`; None for commands."""
        first = self.text.partition("\n")[0]
        return first.removeprefix("# ") if first.startswith("# ") and self.language != "bash" else None


def walkthrough_blocks() -> list[Block]:
    text = README.read_text(encoding="utf-8")
    blocks = []
    for start in (match.end() for match in re.finditer(re.escape(START), text)):
        end = text.index(END, start)
        for match in FENCE.finditer(text, start, end):
            block = Block(text.count("\n", 0, match.start()) + 1, match[1], match[2])
            assert block.language == "bash" or block.path, f"README.md:{block.line}: neither commands nor a file"
            blocks.append(block)
    return blocks


def setup_demo_command() -> str:
    """The Set-up's first command after its install: what a new user runs first, in a folder with no `runs`."""
    setup = README.read_text(encoding="utf-8").partition("## Set-up")[2]
    install_and_demo = FENCE.search(setup)[2].splitlines()[0]
    return install_and_demo.rpartition(" && ")[2]


@dataclass
class Ran:
    block: Block
    stdout: str
    stderr: str
    written: set[str]  # of the log folders the walkthroughs write, those that existed after the block


@pytest.fixture(scope="module")
def walked(tmp_path_factory):
    """A fresh folder after the Set-up's `convswap demo`, run as written there, with every walkthrough block run in
    it in README order."""
    root = tmp_path_factory.mktemp("readme")
    # A link, as datasets are usually kept: the items file's images are reached through it.
    (root / "coco-mini").symlink_to(COCO_MINI, target_is_directory=True)
    env = {name: value for name, value in os.environ.items() if not name.startswith("CONVSWAP_")}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"
    demo = subprocess.run(["bash", "-c", setup_demo_command()], cwd=root, env=env, capture_output=True, text=True)
    assert demo.returncode == 0, demo.stderr[-3000:]
    state = root.parent / f"{root.name}.env"
    ran = []
    for block in walkthrough_blocks():
        if block.path is not None:
            (root / block.path).write_text(block.text.partition("\n")[2], encoding="utf-8")
            ran.append(Ran(block, "", "", set()))
            continue
        # Every command's status counts (-e, pipefail); the failing one is named; the environment is carried on.
        script = (
            "set -eE -o pipefail\n"
            """trap 'echo "walkthrough: exit $? from: $BASH_COMMAND" >&2' ERR\n"""
            f"{block.text}"
            f"env -0 > {state}\n"
        )
        done = subprocess.run(["bash", "-c", script], cwd=root, env=env, capture_output=True, text=True)
        assert done.returncode == 0, f"README.md:{block.line}:\n{block.text}\n{done.stderr[-3000:]}"
        env = dict(entry.split("=", 1) for entry in state.read_text().split("\0") if "=" in entry)
        written = {folder for folder in ("runs/own", "runs/benchmark") if (root / folder).exists()}
        ran.append(Ran(block, done.stdout, done.stderr, written))
    return {"root": root, "ran": ran}


def command_block(walked, words: str) -> Ran:
    (found,) = [ran for ran in walked["ran"] if ran.block.language == "bash" and words in ran.block.text]
    return found


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def table(walked, folder: str, name: str, experiment: str) -> list[dict[str, str]]:
    with (walked["root"] / folder / f"{name}.csv").open(newline="") as handle:
        return [row for row in csv.DictReader(handle) if row["experiment"] == experiment]


def key_of(record: dict) -> int:
    return record["keys"].get("target", record["keys"].get("coord"))


def of(records: list[dict], task: str, convention: str) -> list[dict]:
    return [r for r in records if r["task"] == task and r["convention"] == convention]


CELLS_4X4 = tuple(
    f"{row} {column}"
    for row in ("top", "upper-middle", "lower-middle", "bottom")
    for column in ("left", "center-left", "center-right", "right")
)


# --- the walkthroughs as text ---------------------------------------------------------------------------------


def test_the_walkthroughs_write_distinct_files_and_plan_folders():
    blocks = walkthrough_blocks()
    paths = [block.path for block in blocks if block.path]
    assert len(paths) == len(set(paths)) >= 5
    commands = [line for block in blocks if block.language == "bash" for line in block.text.splitlines()]
    plan_folders = [line.split()[3] for line in commands if line.startswith("convswap plan init ")]
    # A protocol build's --out is a plan folder it appends to, not a folder of its own.
    outs = [line.split("--out ")[1].split()[0] for line in commands
            if line.startswith("convswap") and "--out " in line and not line.startswith("convswap protocol build ")]  # fmt: skip
    assert len(plan_folders) == len(set(plan_folders)) == 3
    assert len(outs) == len(set(outs))


def test_the_benchmark_walkthrough_writes_the_shipped_example_files():
    files = {block.path: block.text.partition("\n")[2] for block in walkthrough_blocks() if block.path}
    for name in ("coco_items.toml", "conventions.toml"):
        assert files[f"benchmark_plans/{name}"] == (EXAMPLE_ITEMS / name).read_text(encoding="utf-8")


# --- Register your own experiment -----------------------------------------------------------------------------


def test_the_dry_run_writes_nothing_and_the_run_writes_every_unit(walked):
    dry = command_block(walked, f"run {OWN} --model sim:observer.toml --coco coco-mini --dry-run")
    assert "runs/own" not in dry.written
    assert "trials: 32 (locate 16, identify 16)" in dry.stdout
    records = read_jsonl(walked["root"] / OWN_LOG)
    assert len(records) == 2 * 4 * 16  # two tasks, four conventions, sixteen admitted photographs
    assert {len(r["slots"]) for r in records if r["task"] == "identify"} == {5}
    assert {len(r["slots"]) for r in records if r["task"] == "locate"} == {16}


def test_plan_power_reads_the_pilots_discordance_from_the_walkthroughs_records(walked):
    sized = command_block(walked, f"plan power {OWN} --pilot runs/own")
    records = [r for r in read_jsonl(walked["root"] / OWN_LOG) if r["task"] == "locate"]
    names = {r["trial_id"]: r["correct"]["target"] for r in of(records, "locate", "cell_name")}
    percent = {r["trial_id"]: r["correct"]["target"] for r in of(records, "locate", "percent")}
    discordant = sum(names[trial] != percent[trial] for trial in names)
    assert (f"names_over_percent: pilot: {discordant} of {len(names)} paired trials discordant "
            f"({100 * discordant / len(names):.1f}%), over 1 model and condition group") in sized.stdout  # fmt: skip
    assert f"names_over_percent: at n = 16 and alpha 0.05, with {100 * discordant / len(names):.1f}% of trials" in (
        sized.stdout
    )


def test_the_logged_images_are_found_from_any_folder(walked):
    for record in read_jsonl(walked["root"] / OWN_LOG):
        path = Path(record["trial"]["image"]["params"]["path"])
        assert path.is_absolute() and path.is_file()


def test_the_declared_convention_describes_each_cell_in_thousandths(walked):
    records = read_jsonl(walked["root"] / OWN_LOG)
    for record in of(records, "locate", "thousandths"):
        trial = record["trial"]
        width, height = trial["width"], trial["height"]
        row, column = divmod(CELLS_4X4.index(trial["target"]), 4)
        x, y = math.floor((column + 0.5) * width / 4), math.floor((row + 0.5) * height / 4)
        expected = f"({math.floor(1000 * x / width + 0.5)}, {math.floor(1000 * y / height + 0.5)})"
        at_key = re.search(rf"(?:: |, ){key_of(record)}=(\(\d+, \d+\))", record["prompt"])[1]
        assert at_key == expected
        assert record["prompt"].startswith("Positions are given as (x, y) in thousandths of the image width and "
                                           "height, where (0, 0) is the top-left corner. In this image, the ")  # fmt: skip
    for record in of(records, "identify", "thousandths_mispaired"):
        # The question glosses the asked-about position with another cell's name, never its own.
        gloss = re.search(r"at position \(\d+, \d+\) \[([^\]]+)\]\?", record["prompt"])[1]
        assert gloss in CELLS_4X4 and gloss != record["trial"]["cell"]


def test_accuracy_holds_the_planted_values(walked):
    records = read_jsonl(walked["root"] / OWN_LOG)
    rows = {(r["task"], r["convention"]): r for r in table(walked, "tables/own", "experiment_accuracy", OWN)}
    assert set(rows) == {(task, convention) for task in ("locate", "identify") for convention in
                         ("cell_name", "percent", "thousandths", "thousandths_mispaired")}  # fmt: skip
    for task in ("locate", "identify"):
        for convention in ("cell_name", "thousandths", "thousandths_mispaired"):
            assert (rows[task, convention]["correct"], rows[task, convention]["n"]) == ("16", "16")
    for task, planted in (("locate", 1 / 16), ("identify", 0.5 + 0.5 / 5)):
        row = rows[task, "percent"]
        correct = sum(r["answer_slot"] == key_of(r) for r in of(records, task, "percent"))
        assert int(row["correct"]) == correct
        low, high = proportion_confint(correct, 16, alpha=0.05, method="beta")
        assert low <= planted <= high
        assert row["K"] == ("16" if task == "locate" else "5")


def test_each_convention_is_contrasted_with_the_control_under_the_gate(walked):
    records = read_jsonl(walked["root"] / OWN_LOG)
    rows = {(r["task"], r["convention"]): r for r in table(walked, "tables/own", "experiment_contrasts", OWN)}
    locate = rows["locate", "percent"]
    names = {r["trial_id"]: r["answer_slot"] == key_of(r) for r in of(records, "locate", "cell_name")}
    percent = {r["trial_id"]: r["answer_slot"] == key_of(r) for r in of(records, "locate", "percent")}
    b = sum(percent[t] and not names[t] for t in names)
    c = sum(names[t] and not percent[t] for t in names)
    assert (locate["control"], locate["b"], locate["c"]) == ("cell_name", str(b), str(c))
    assert float(locate["p"]) == pytest.approx(binomtest(b, b + c, 0.5).pvalue, rel=0.05)
    assert (locate["gate"], locate["counted"]) == ("passes", "yes")
    assert rows["locate", "thousandths"]["Δ"] == "+0.0"
    # The hypothesis (cell names over percentages) states the same difference with the same sign, b and c.
    (hypothesis,) = table(walked, "tables/own", "hypotheses", OWN)
    assert hypothesis["estimate"] == f"{locate['Δ']} points (b {b}, c {c})" and locate["Δ"].startswith("-")


def test_readership_hypothesis_parse_failures_and_breakdowns(walked):
    (row,) = [
        r for r in table(walked, "tables/own", "table3_readership", OWN) if r["convention"] == "thousandths_mispaired"
    ]
    assert (row["task"], row["K"], row["follows coord"], row["readership"]) == ("locate", "16", "100.0", "16.00x")
    (row,) = table(walked, "tables/own", "hypotheses", OWN)
    assert (row["hypothesis"], row["task"], row["status"], row["outcome"]) == (
        "names_over_percent", "locate", "registered", "supported")  # fmt: skip
    failures = table(walked, "tables/own", "experiment_parse_failures", OWN)
    assert len(failures) == 8 and {row["unscored"] for row in failures} == {"0"}
    agreement = table(walked, "tables/own", "instrument_agreement", OWN)
    assert agreement and {row["task"] for row in agreement} == {"identify"}  # locate's 16 labels: generation only
    breakdowns = table(walked, "tables/own", "experiment_breakdowns", OWN)
    # No category has the five photographs a category bin needs among sixteen.
    assert {row["factor"] for row in breakdowns} == {"object size", "distance to cell border", "side of the image"}


def test_the_audit_passes_what_it_could_check_and_names_what_it_could_not(walked):
    audit = command_block(walked, "convswap audit runs/own")
    rows = dict(re.findall(r"^([a-z-]+) +\d+ +\d+  (pass|FAIL|not run|too few)", audit.stdout, flags=re.M))
    assert {rows[name] for name in ("prompt-target", "relabel", "index-space", "derangement")} == {"pass"}
    # Sixteen photographs per convention: under the pairing break's twenty; no color record to hold out.
    assert (rows["pairing-break"], rows["held-out"]) == ("too few", "not run")
    assert "every check that ran passed; did not run: pairing-break (too few), held-out (not run)" in audit.stdout


def test_tables_of_the_whole_runs_folder_name_each_plan_folder_s_stranger_once(walked, tmp_path, monkeypatch, capsys):
    """The prose's promise: `runs` also holds the demo's records, which myplans has no plan for."""
    monkeypatch.chdir(walked["root"])
    monkeypatch.setenv("CONVSWAP_PLAN_DIR", "myplans")
    out = tmp_path / "tables"
    assert main(["tables", "runs", "--out", str(out)]) == 2 and not out.exists()
    (line,) = [line for line in capsys.readouterr().err.splitlines() if not line.startswith("plan folder: ")]
    strangers = [
        r for path in (walked["root"] / "runs").rglob("*.jsonl") for r in read_jsonl(path) if r["experiment"] != OWN
    ]
    assert {r["experiment"] for r in strangers} >= {"color_ladder", "coco_items"}
    for experiment in {r["experiment"] for r in strangers}:
        assert line.count(f"experiment {experiment} has no plan file in myplans") == 1
    assert line.startswith(
        f"convswap tables: error: {len(strangers)} record(s) not of the plan registered in myplans: "
    )


def test_the_viewer_shows_accuracy_per_task_and_the_tables_it_was_given(walked):
    records = read_jsonl(walked["root"] / OWN_LOG)
    index = (walked["root"] / "site" / "own" / "index.html").read_text(encoding="utf-8")
    rows = re.findall(
        r'<tr class="run"><td><a [^>]*>([^<]+)</a></td><td>[^<]*</td><td>(\w+)</td><td>(\w+)</td><td>(\w+)</td>'
        r"<td>(\d+)</td><td>(\d+)</td><td>(\d+)</td><td>[^<]*</td><td>([^<]*)</td>",
        index,
    )
    expected = []
    for task, k in (("identify", 5), ("locate", 16)):
        for readout in sorted({r["readout"] for r in records if r["task"] == task}):
            group = [r for r in records if r["task"] == task and r["readout"] == readout]
            correct = sum(r["answer_slot"] == key_of(r) for r in group if r["answer_slot"] is not None)
            scored = sum(r["answer_slot"] is not None for r in group)
            shown = f"{100 * correct / scored:.1f}% ({correct}/{scored})"
            expected.append((OWN, "visible", task, readout, str(k), str(len(group)), str(scored), shown))
    assert rows == expected
    assert f"From <code>{html.escape('tables/own')}</code>." in index
    assert 'href="tables/experiment_accuracy.html"' in index


# --- Building a protocol for your own benchmark ---------------------------------------------------------------


def report_rows(out: str) -> list[list[str]]:
    """The report's rows of attempts, each a list of its cells."""
    return [[cell.strip() for cell in line.strip("|").split("|")] for line in out.splitlines()
            if line.startswith("| ") and not line.startswith("| items |")]  # fmt: skip


def test_the_protocol_build_walkthrough_reuses_then_revises_a_build_and_lists_it(walked):
    root = walked["root"]
    items = read_jsonl(root / "protocol_plans" / "coco_mini_items.jsonl")
    (k,) = {str(len(item["referents"])) for item in items}
    n = str(len(items))
    items_file = "protocol_plans/coco_mini_items.jsonl"
    reuse = command_block(walked, "--planner sim:perfect")
    (row,) = report_rows(reuse.stdout)
    assert row[:7] == [items_file, "choice", n, k, "initial", "reuse", "label_code"] and row[-2:] == ["passed", "5/5"]
    assert "verdict: pass (initial)" in reuse.stdout
    built = command_block(walked, "--planner sim:builder-strict")
    initial, revision = report_rows(built.stdout)[:2]
    assert initial[4:7] == ["initial", "build", "yellow_strip"] and initial[-2:] == ["passed", "0/5"]
    assert revision[4:7] == ["revision", "build", "yellow_strip"] and revision[-2:] == ["passed", "5/5"]
    reasons = re.findall(r"^  initial: smoke: item (\S+): protocol_noncompliance: no mark", built.stdout, flags=re.M)
    assert len(reasons) == 5 and set(reasons) <= {item["id"] for item in items}
    assert "verdict: pass (revision)" in built.stdout
    declared = (root / "protocol_plans" / "protocols.toml").read_text(encoding="utf-8")
    comments = [line for line in declared.splitlines() if line.startswith(f"# {items_file}: ")]
    assert [c.split(": ")[1].split(" on ")[0] for c in comments] == [
        "route reuse, smoke pass (initial)", "route build, smoke pass (revision)"]  # fmt: skip
    table = tomllib.loads(declared)
    assert list(table) == ["yellow_strip"] and table["yellow_strip"]["layout"] == "strip"
    listing = built.stdout[built.stdout.index("yellow_strip  tasks: choice") :]
    assert "  choice: Answer the question: " in listing and "Draw one solid yellow square (#FFFF00)" in listing


# --- Swap the conventions of your own benchmark ---------------------------------------------------------------


def test_the_benchmark_runs_every_item_under_every_convention_with_its_keys(walked):
    root = walked["root"]
    items = {item["id"]: item for item in read_jsonl(root / "benchmark_plans" / "coco_mini_items.jsonl")}
    records = read_jsonl(root / BENCHMARK_LOG)
    conventions = ("cell_words", "pixel_centers", "percent_centers", "pixel_centers_mispaired")
    assert len(items) == 12
    assert sorted((r["convention"], r["trial_id"]) for r in records) == sorted(
        (c, item) for c in conventions for item in items
    )
    field = {"cell_words": "cell", "pixel_centers": "pixels", "percent_centers": "percent"}
    for record in records:
        item = items[record["trial_id"]]
        assert (root / "benchmark_plans" / item["image"]).is_file()
        assert record["task"] == "choice" and len(record["slots"]) == 9
        if record["convention"] in field:
            assert record["slots"][record["keys"]["target"] - 1] == item["target"]
            options = ", ".join(
                f"{slot}={item['referents'][referent][field[record['convention']]]}"
                for slot, referent in enumerate(record["slots"], start=1)
            )
            question = item["question"].replace("{options}", options)
            assert record["prompt"] == f"{question} Answer with a single integer 1 to 9 and nothing else."
        else:  # mispaired: the pixels are the target's, the name beside another slot's pixels is
            assert record["slots"][record["keys"]["coord"] - 1] == item["target"]
            assert record["glosses"][record["keys"]["name"] - 1] == item["target"]
            assert record["keys"]["coord"] != record["keys"]["name"]
            assert all(g != s for g, s in zip(record["glosses"], record["slots"], strict=True))
        assert record["parse_status"] == "ok"


def test_the_benchmark_dry_run_writes_nothing_and_its_tables_count_every_record(walked):
    dry = command_block(walked, "--plan-dir benchmark_plans --dry-run")
    assert "runs/benchmark" not in dry.written
    assert "trials: 12 (choice 12)" in dry.stdout
    records = read_jsonl(walked["root"] / BENCHMARK_LOG)
    rows = table(walked, "tables/benchmark", "experiment_accuracy", "coco_items")
    assert sum(int(row["n"]) for row in rows) == sum(r["answer_slot"] is not None for r in records)
    for row in rows:
        group = [r for r in of(records, "choice", row["convention"]) if r["readout"] == row["readout"]]
        assert int(row["correct"]) == sum(r["answer_slot"] == key_of(r) for r in group)
