"""check-numbers: what counts as a decimal number, matching against outputs, the command and reproduce.sh."""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from analysis_factory import locate_trial, planted, write_jsonl

from convswap.analysis.check_numbers import manuscript_numbers, missing_numbers
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


def test_reproduce_regenerates_the_tables_and_checks_the_manuscript(tmp_path):
    trials = [locate_trial(i) for i in range(8)]
    logdir = tmp_path / "logs"
    write_jsonl(logdir / "coco.jsonl", planted(trials, "cell_name", lambda i: i < 7, experiment="coco_locate_identify"))
    out = tmp_path / "out"
    paper = tmp_path / "paper.md"
    paper.write_text(f"Cell names score {100 * 7 / 8:.1f}% against chance {100 / 9:.1f}%.\n")
    done = run_reproduce(str(logdir), str(paper), str(out))
    assert done.returncode == 0, done.stderr
    assert (out / "table2_coco.csv").is_file()
    assert "every check passed" in done.stdout
    assert "all 2 decimal numbers" in done.stdout
    paper.write_text("Cell names score 68.5%.\n")
    failed = run_reproduce(str(logdir), str(paper), str(out))
    assert failed.returncode == 1
    assert f"{paper}:1: 68.5 does not appear" in failed.stdout


def test_reproduce_stops_at_a_failed_audit_before_writing_tables(tmp_path):
    trials = [locate_trial(i) for i in range(8)]
    records = planted(trials, "cell_name", lambda i: i < 7, experiment="coco_locate_identify")
    records[0] = dataclasses.replace(records[0], correct={"target": not records[0].correct["target"]})
    logdir = tmp_path / "logs"
    write_jsonl(logdir / "coco.jsonl", records)
    result = run_reproduce(str(logdir), "", str(tmp_path / "out"))
    assert result.returncode == 1
    assert "FAILED: relabel" in result.stdout
    assert not (tmp_path / "out").exists()


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
