"""Damaged arguments, vocabularies and plan folders: one line naming the file, field and value, a non-zero exit."""

from __future__ import annotations

import json

import pytest
from runner_support import SIM, SPATIAL, copy_plan_dir

from convswap.cli import main


@pytest.mark.parametrize("command", [["run", SPATIAL, "--model", SIM, "--limit", "1"], ["tables", "runs"]],
                         ids=["run", "tables"])  # fmt: skip
def test_an_empty_out_is_refused_rather_than_read_as_the_current_folder(command, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exited:
        main([*command, "--out", ""])
    assert exited.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1] == (
        f"convswap {command[0]}: error: argument --out: an empty path names no file or folder"
    )
    assert list(tmp_path.iterdir()) == []


def test_an_out_under_a_file_says_it_is_a_file(tmp_path, capsys):
    (tmp_path / "F").write_text("a file\n")
    assert main(["run", SPATIAL, "--model", SIM, "--limit", "1", "--out", str(tmp_path / "F" / "sub")]) == 2
    assert capsys.readouterr().err.splitlines()[-1] == (
        f"convswap run: error: output folder {tmp_path / 'F' / 'sub'} cannot be created: {tmp_path / 'F'} is a file"
    )


def edited_vocabulary(vocabulary, tmp_path, edit) -> str:
    data = json.loads(vocabulary.read_text(encoding="utf-8"))
    path = tmp_path / "edited.vocab.json"
    path.write_text(json.dumps(edit(data)), encoding="utf-8")
    return str(path)


@pytest.mark.parametrize(
    ("edit", "said"),
    [
        (lambda data: {**data, "max_new_tokens": -5}, "max_new_tokens must be an integer >= 1, got -5"),
        (lambda data: {**data, "wheel": {**data["wheel"], "radius": float("nan")}},
         "wheel radius must be a finite number, got nan"),
        (lambda data: {**data, "wheel": {**data["wheel"], "radius": float("inf")}},
         "wheel radius must be a finite number, got inf"),
        (lambda data: {**data, "wheel": {**data["wheel"], "radius": -60}}, "wheel radius must be 0 or more, got -60.0"),
        (lambda data: [data], "not a vocabulary: a JSON list, not an object"),
    ],
    ids=["negative-budget", "nan-radius", "inf-radius", "negative-radius", "a-list"],
)  # fmt: skip
def test_a_damaged_vocabulary_is_one_line_naming_the_field(edit, said, vocabulary, tmp_path, capsys):
    path = edited_vocabulary(vocabulary, tmp_path, edit)
    argv = ["run", "color_ladder", "--model", SIM, "--vocabulary", path, "--limit", "1", "--out", str(tmp_path / "o")]
    assert main(argv) == 2
    assert capsys.readouterr().err.splitlines()[-1] == f"convswap run: error: {path}: {said}"
    assert not (tmp_path / "o").exists()


def test_a_vocabulary_nested_too_deep_is_one_line(tmp_path, capsys):
    path = tmp_path / "deep.vocab.json"
    path.write_text("[" * 100_000 + "]" * 100_000)
    argv = ["run", "color_ladder", "--model", SIM, "--vocabulary", str(path), "--out", str(tmp_path / "o")]
    assert main(argv) == 2
    assert capsys.readouterr().err.splitlines()[-1] == (
        f"convswap run: error: {path}: not a vocabulary: its JSON is nested too deep"
    )


def test_a_conventions_file_that_is_a_folder_is_refused_naming_it(tmp_path, capsys):
    plans = copy_plan_dir(tmp_path / "plans")
    (plans / "conventions.toml").mkdir()
    argv = ["run", SPATIAL, "--model", SIM, "--limit", "1", "--plan-dir", str(plans), "--out", str(tmp_path / "o")]
    assert main(argv) == 2
    assert (
        capsys.readouterr()
        .err.splitlines()[-1]
        .endswith(
            f"{plans / 'conventions.toml'} is not a regular file; a plan folder declares its conventions in a file of that name"
        )
    )
