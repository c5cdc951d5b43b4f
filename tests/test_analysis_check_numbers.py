"""check-numbers: what counts as a decimal number, matching against outputs, the command and reproduce.sh."""

from __future__ import annotations

import dataclasses
import io
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from analysis_factory import locate_trial, planted, write_jsonl
from analysis_logs import write_logs
from plan_support import as_registered

from convswap.analysis.check_numbers import manuscript_numbers, missing_numbers
from convswap.analysis.generate import generate
from convswap.analysis.pinning import check_manuscript
from convswap.cli import main
from convswap.core import ConvswapError

REPO = Path(__file__).resolve().parents[1]


def numbers_in(tmp_path: Path, text: str, suffix: str = ".md") -> list[tuple[str, int | None]]:
    path = tmp_path / f"paper{suffix}"
    path.write_text(text, encoding="utf-8")
    return [(number.digits, number.exponent) for number in manuscript_numbers(path)]


def test_decimals_in_prose_and_math_are_found(tmp_path):
    text = "It scores $68.5%$ against 20.0% and a drop of $-48.5$ points, readership 0.30x, [−56.5, −40.0].\n"
    assert numbers_in(tmp_path, text) == [
        ("68.5", None),
        ("20.0", None),
        ("48.5", None),
        ("0.30", None),
        ("56.5", None),
        ("40.0", None),
    ]


@pytest.mark.parametrize(
    "text, expected",
    [
        ("$p = 8.7 \\times 10^{-33}$", ("8.7", -33)),
        ("p = 8.7×10^-33", ("8.7", -33)),
        ("p = 8.7e-33", ("8.7", -33)),
        ("( $p = 7 \\times 1 0^{- 4}$ )", ("7", -4)),
        ("$1.2 \\cdot 10^{5}$", ("1.2", 5)),
    ],
)
def test_scientific_notation_is_one_number(tmp_path, text, expected):
    assert numbers_in(tmp_path, text) == [expected]


@pytest.mark.parametrize(
    "text",
    [
        "Qwen2.5-VL-7B and LLaVA-1.5-7B",
        "arXiv:2502.13923",
        "as shown in §3.1 and Section 4.2, Table 2.1 and Figure 1.2",
        "a 0.5em gap of 2.5pt",
        "version 1.2.3",
        "n = 200 images in 2026, K = 9",
        "3.1 Calibrating the response vocabulary",
    ],
)
def test_identifiers_references_units_and_integers_are_not_checked(tmp_path, text):
    assert numbers_in(tmp_path, text) == []


def test_latex_comments_preamble_and_options_are_skipped(tmp_path):
    text = (
        "\\documentclass{article}\n"
        "\\usepackage[margin=1.5in]{geometry}\n"
        "\\begin{document}\n"
        "\\includegraphics[width=0.8\\linewidth]{fig.pdf}\n"
        "It scores $68.5\\%$. % 99.9 is a comment\n"
        "\\end{document}\n"
    )
    path = tmp_path / "paper.tex"
    path.write_text(text, encoding="utf-8")
    found = manuscript_numbers(path)
    assert [(number.digits, number.line) for number in found] == [("68.5", 5)]


def test_spec_style_percent_in_latex_math_is_read(tmp_path):
    assert numbers_in(tmp_path, "\\begin{document}\nscores $68.5%$ of the time\n", ".tex") == [("68.5", None)]


def write_outputs(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "table.md").write_text("| pixels | 20.0 | -48.5*** | 8.7e-33 | 0.30x |\n| p | 7.0e-04 | 0.065 |\n")
    (folder / "table.csv").write_text("acc,p\n68.5,1.0\n")
    return folder


def test_present_numbers_pass_and_missing_ones_are_listed_with_file_and_line(tmp_path):
    out = write_outputs(tmp_path / "out")
    paper = tmp_path / "paper.md"
    paper.write_text(
        "Names score 68.5% and pixels 20.0%, a drop of 48.5 points ($p = 8.7 \\times 10^{-33}$).\n"
        "Readership 0.30x; the anti-transpose has $p = 7 \\times 10^{-4}$ and the identify cost p = 0.065.\n"
        "Under the 4x4 grid names score 26.0% (p = 1.0) and pixels 7.5%.\n"
    )
    missing, checked = missing_numbers(paper, out)
    assert checked == 10
    assert [(number.text, number.line) for number in missing] == [("26.0", 3), ("7.5", 3)]


def test_a_scientific_number_needs_the_same_exponent_and_mantissa(tmp_path):
    out = write_outputs(tmp_path / "out")
    paper = tmp_path / "paper.md"
    paper.write_text("$p = 8.7 \\times 10^{-32}$ and $p = 8.6 \\times 10^{-33}$ and 0.07 and $6.5 \\times 10^{-2}$\n")
    assert [number.text for number in missing_numbers(paper, out)[0]] == [
        "8.7 \\times 10^{-32}",
        "8.6 \\times 10^{-33}",
        "0.07",
    ]


def test_an_unreadable_output_file_is_named(tmp_path):
    out = write_outputs(tmp_path / "out")
    (out / "notes.txt").write_bytes(b"\xff\xfe 68.5")
    paper = tmp_path / "paper.md"
    paper.write_text("It scores 68.5%.\n")
    with pytest.raises(ConvswapError, match=r"cannot read output file .*notes\.txt"):
        missing_numbers(paper, out)


def test_check_numbers_command_exit_status(tmp_path, capsys):
    out = write_outputs(tmp_path / "out")
    good = tmp_path / "good.tex"
    good.write_text("\\begin{document}\nIt scores $68.5%$ against $20.0%$.\n\\end{document}\n")
    assert main(["check-numbers", str(good), str(out)]) == 0
    assert "all 2 decimal numbers" in capsys.readouterr().out
    bad = tmp_path / "bad.txt"
    bad.write_text("first line\nit scores 68.4% here\n")
    assert main(["check-numbers", str(bad), str(out)]) == 1
    captured = capsys.readouterr()
    assert f"{bad}:2: 68.4 does not appear in {out}" in captured.out
    assert "1 of 1 decimal numbers are missing" in captured.err
    assert main(["check-numbers", str(bad), str(tmp_path / "nowhere")]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert main(["check-numbers", str(tmp_path / "absent.tex"), str(out)]) == 2
    assert "cannot read manuscript" in capsys.readouterr().err


def run_reproduce(*args: str) -> subprocess.CompletedProcess:
    environment = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    return subprocess.run(
        ["bash", str(REPO / "scripts" / "reproduce.sh"), *args],
        capture_output=True,
        text=True,
        env=environment,
        cwd=REPO,
        timeout=300,
    )


@pytest.mark.slow
def test_reproduce_regenerates_the_tables_and_checks_the_manuscript(tmp_path):
    trials = [locate_trial(i) for i in range(8)]
    logdir = tmp_path / "logs"
    # Registered records: the audit and the tables the script runs read no other (issue 11).
    records = planted(trials, "cell_name", lambda i: i < 7, experiment="coco_locate_identify")
    write_jsonl(logdir / "coco.jsonl", as_registered(records, REPO / "convswap" / "analysis_plan"))
    out = tmp_path / "out"
    paper = tmp_path / "paper.md"
    # The tables now write numbers.json, so each number must also be pinned to its cell: the paragraph names the
    # experiment (COCO) and the sentence the row (cell names).
    paper.write_text(f"On COCO photographs cell names score {100 * 7 / 8:.1f}% against chance {100 / 9:.1f}%.\n")
    done = run_reproduce(str(logdir), str(paper), str(out))
    assert done.returncode == 0, done.stderr
    assert (out / "table2_coco.csv").is_file()
    assert "8 records audited; every check that ran passed" in done.stdout
    assert "all 2 numbers and macros (2 numbers, 0 macros)" in done.stdout
    paper.write_text("On COCO photographs cell names score 68.5%.\n")
    failed = run_reproduce(str(logdir), str(paper), str(out))
    assert failed.returncode == 1
    assert f"{paper}:1: 68.5: ERROR no table cell shows this number" in failed.stdout


@pytest.mark.slow
def test_reproduce_stops_at_a_failed_audit_before_writing_tables(tmp_path):
    trials = [locate_trial(i) for i in range(8)]
    records = as_registered(
        planted(trials, "cell_name", lambda i: i < 7, experiment="coco_locate_identify"),
        REPO / "convswap" / "analysis_plan",
    )
    records[0] = dataclasses.replace(records[0], correct={"target": not records[0].correct["target"]})
    logdir = tmp_path / "logs"
    write_jsonl(logdir / "coco.jsonl", records)
    result = run_reproduce(str(logdir), "", str(tmp_path / "out"))
    assert result.returncode == 1
    assert "FAILED: relabel" in result.stdout
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_reproduce_refuses_wrong_usage_and_a_missing_log_folder(tmp_path):
    assert run_reproduce().returncode == 2
    missing = run_reproduce(str(tmp_path / "none"), "", str(tmp_path / "out"))
    assert missing.returncode == 2
    assert "log folder" in missing.stderr


def run_script(script: Path, environment: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", str(script), *args], capture_output=True, text=True, env=environment, cwd=REPO, timeout=300
    )


def test_reproduce_finds_convswap_beside_the_python_without_the_venv_on_path(tmp_path):
    # PATH without the virtual environment: convswap is found beside $PYTHON and runs (it names the missing folder).
    environment = dict(os.environ, PATH="/usr/bin:/bin", PYTHON=sys.executable)
    found = run_script(REPO / "scripts" / "reproduce.sh", environment, str(tmp_path / "none"))
    assert found.returncode == 2
    assert f"log folder {tmp_path / 'none'} does not exist" in found.stderr


def test_reproduce_says_how_to_activate_when_convswap_is_nowhere(tmp_path):
    # A checkout without .venv, no $PYTHON and no convswap on PATH or beside python3.
    script = tmp_path / "checkout" / "scripts" / "reproduce.sh"
    script.parent.mkdir(parents=True)
    shutil.copy(REPO / "scripts" / "reproduce.sh", script)
    environment = {key: value for key, value in os.environ.items() if key != "PYTHON"}
    environment["PATH"] = "/usr/bin:/bin"
    missing = run_script(script, environment, str(tmp_path / "logs"))
    assert missing.returncode == 2
    assert "the convswap command was not found" in missing.stderr
    assert f"activate the virtual environment first (. {tmp_path / 'checkout'}/.venv/bin/activate)" in missing.stderr
    assert not (tmp_path / "out").exists()


def build_tables(root: Path) -> None:
    plan_dir = REPO / "convswap" / "analysis_plan"
    # Numbers are checked against tables alone: no figure is drawn.
    generate(write_logs(root / "logs"), root / "out", plan_dir=plan_dir, messages=io.StringIO(), figures=False)


@pytest.fixture(scope="module")
def tables(built_once):
    """The tables of the planted logs (tests/analysis_logs.py): Table 2 has pixels at 25.0 against cell names at
    75.0 (Δ -50.0***, p 4.9e-04, n 24) and normalized at 62.5 (Δ -12.5); Table 8 has synthetic pixels at 41.7."""
    return built_once("pinned", build_tables) / "out"


PAPER = r"""\documentclass{article}
\begin{document}
%s

\begin{table}
\caption{COCO photographs, locate.}
English cell name & 75.0 & --- \\
absolute pixels & 25.0 & $- 50. 0^{***}$ \\
\end{table}
\end{document}
"""


def findings_of(tmp_path: Path, out: Path, prose: str) -> list:
    paper = tmp_path / "paper.tex"
    paper.write_text(PAPER % prose, encoding="utf-8")
    return check_manuscript(paper, out)


def cells_of(findings: list, text: str) -> tuple[str, ...]:
    return next(f.cells for f in findings if f.text == text)


def test_numbers_are_pinned_to_the_cells_their_sentence_names(tmp_path, tables):
    prose = (
        "On COCO photographs, absolute pixels score 25.0% against 75.0% for English cell names in locate, a drop of "
        "50 points ($p = 4.9 \\times 1 0^{- 4}$, $n = 24$). Normalized coordinates differ by $-12.5$ points."
    )
    findings = findings_of(tmp_path, tables, prose)
    assert [f.problem for f in findings] == [None] * 9  # six in the prose, three in the table rows
    assert any("locate Δ" in cell for cell in cells_of(findings, "50"))  # an integer for -50.0***
    cells = {f.text: f.cells for f in findings}
    assert cells["25.0"] == ("table2_coco [model sim:a, condition visible, convention pixels] locate acc",)
    assert cells["-12.5"] == ("table2_coco [model sim:a, condition visible, convention normalized] locate Δ",)
    # read from PDF-spaced text; the pixel difference of the model pair in Table 4 has the same labels and value
    assert "table2_coco [model sim:a, condition visible, convention pixels] locate Δ" in cells["-50.0"]
    assert cells["4.9 \\times 1 0^{-4}"] == (
        "table2_coco [model sim:a, condition visible, convention pixels] locate p",
    )


@pytest.mark.parametrize(
    ("sentence", "number", "problem"),
    [
        # a value no cell shows
        ("On COCO photographs normalized coordinates score 61.5%.", "61.5", "no table cell shows this number"),
        # changed to a value that is a cell of another table (synthetic pixels), whose row label is named here
        ("On COCO photographs absolute pixels score 41.7%.", "41.7", "equals only cells whose row or experiment"),
        # changed to the value of another row of the same table (pixels' 25.0, quoted for cell names)
        ("On COCO photographs English cell names score 25.0%.", "25.0", "equals only cells whose row or experiment"),
        # a wrong sign and a dropped one
        ("On COCO photographs absolute pixels differ by $+50.0$ points.", "+50.0", "wrong sign"),
        ("On COCO photographs normalized coordinates differ by 12.5 points.", "12.5", "sign dropped"),
        # wrong integers: points and n
        ("On COCO photographs absolute pixels lose 51 points.", "51", "no table cell shows this integer"),
        (
            "On COCO photographs absolute pixels were scored on $n = 23$ trials.",
            "23",
            "no table cell shows this integer",
        ),
    ],
)
def test_each_kind_of_planted_error_is_reported(tmp_path, tables, sentence, number, problem):
    findings = findings_of(tmp_path, tables, sentence)
    wrong = [f for f in findings if f.problem]
    assert [f.text for f in wrong] == [number]
    assert wrong[0].problem.startswith(problem)
    assert wrong[0].line == 3


def test_a_changed_value_equal_to_another_tables_cell_is_caught_when_that_tables_labels_match_too(tmp_path, tables):
    # 41.7 is synthetic pixels' accuracy: same convention, same column, only the experiment differs.
    wrong = [f for f in findings_of(tmp_path, tables, "On COCO photographs, pixels reach 41.7%.") if f.problem]
    assert "table8_synthetic_spatial" in wrong[0].problem
    right = findings_of(tmp_path, tables, "On the synthetic arrays, pixels reach 41.7% visible.")
    assert [f.problem for f in right if f.text == "41.7"] == [None]


def test_macros_that_vanished_or_changed_are_errors(tmp_path, tables):
    defined = "\\newcommand{\\csTableTwoCocoSimAVisiblePixelsLocateAcc}{24.0}"
    prose = (
        f"{defined}\nOn COCO photographs pixels score \\csTableTwoCocoSimAVisiblePixelsLocateAcc, "
        "and \\csTableTwoCocoSimAVisibleBogusLocateAcc."
    )
    problems = {f.text: f.problem for f in findings_of(tmp_path, tables, prose) if f.problem}
    assert problems == {
        "\\csTableTwoCocoSimAVisiblePixelsLocateAcc": "value changed: paper.tex has 24.0, tables 25.0",
        "\\csTableTwoCocoSimAVisibleBogusLocateAcc": "macro no longer exists in the tables",
    }
    (tmp_path / "numbers.tex").write_text((tables / "numbers.tex").read_text())
    fresh = "\\input{numbers}\nOn COCO photographs pixels score \\csTableTwoCocoSimAVisiblePixelsLocateAcc."
    assert [f.problem for f in findings_of(tmp_path, tables, fresh) if f.problem] == []


def test_numbers_tex_defines_each_cell_as_latex(tables):
    tex = (tables / "numbers.tex").read_text()
    assert "\\newcommand{\\csTableTwoCocoSimAVisiblePixelsLocateAcc}{25.0}" in tex
    assert "\\newcommand{\\csTableTwoCocoSimAVisiblePixelsLocateDelta}{\\ensuremath{-50.0^{***}}}" in tex
    assert "\\newcommand{\\csTableTwoCocoSimAVisiblePixelsLocateP}{\\ensuremath{4.9 \\times 10^{-4}}}" in tex
    numbers = json.loads((tables / "numbers.json").read_text())["numbers"]
    entry = numbers["csTableTwoCocoSimAVisiblePixelsLocateDelta"]
    assert entry["value"] == pytest.approx(-50.0, abs=1e-12) and entry["column"] == "locate Δ"
    assert numbers["csTableTwoCocoSimAVisibleNormalizedLocateAcc"]["value"] == 100 * 15 / 24  # full precision


def test_check_numbers_command_lists_each_number_with_its_cell(tmp_path, tables, capsys):
    paper = tmp_path / "paper.tex"
    paper.write_text(PAPER % "On COCO photographs absolute pixels score 25.0% and cell names 24.5%.")
    assert main(["check-numbers", str(paper), str(tables)]) == 1
    captured = capsys.readouterr()
    assert f"{paper}:3: 25.0: ok -> table2_coco [model sim:a, condition visible, convention pixels] locate acc" in (
        captured.out
    )
    assert f"{paper}:3: 24.5: ERROR no table cell shows this number" in captured.out
    assert "1 of 5 numbers and macros (5 numbers, 0 macros)" in captured.err  # two in the prose, three in the rows


def test_check_numbers_counts_and_lists_every_macro_with_its_cell(tmp_path, tables, capsys):
    cell = "table2_coco [model sim:a, condition visible, convention pixels] locate acc"
    paper = tmp_path / "paper.tex"
    paper.write_text("On COCO photographs pixels score \\csTableTwoCocoSimAVisiblePixelsLocateAcc.\n")
    assert main(["check-numbers", str(paper), str(tables)]) == 0
    captured = capsys.readouterr()
    assert f"{paper}:1: \\csTableTwoCocoSimAVisiblePixelsLocateAcc: ok -> {cell}" in captured.out
    assert f"all 1 numbers and macros (0 numbers, 1 macros) in {paper} are pinned" in captured.out

    paper.write_text(
        "On COCO photographs pixels score \\csTableTwoCocoSimAVisiblePixelsLocateAcc.\n"
        "On COCO photographs normalized coordinates score 61.5% and \\csTableTwoCocoSimAVisibleBogusLocateAcc.\n"
    )
    assert main(["check-numbers", str(paper), str(tables)]) == 1
    captured = capsys.readouterr()
    listed = sorted(line for line in captured.out.splitlines() if line.startswith(f"{paper}:"))
    assert listed == [
        f"{paper}:1: \\csTableTwoCocoSimAVisiblePixelsLocateAcc: ok -> {cell}",
        f"{paper}:2: 61.5: ERROR no table cell shows this number",
        f"{paper}:2: \\csTableTwoCocoSimAVisibleBogusLocateAcc: ERROR macro no longer exists in the tables",
    ]
    assert f"2 of 3 numbers and macros (1 numbers, 2 macros) in {paper} do not match" in captured.err
