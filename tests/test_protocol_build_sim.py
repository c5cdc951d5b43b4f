"""`convswap protocol build --planner sim:<planner>`: the simulated planner, run as a user runs it, without an API.

What it answers is checked against references worked out here from the shipped protocols.toml and the items file
(which protocol fits, which hue is free), and its planted faults against what the builder does with each: a static
refusal or a failed smoke, revised once, or a rejection that writes nothing.
"""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import cv2
import numpy as np
import pytest
from planner_servers import COCO_IMAGES, items_folder

from convswap.builder.sim_planner import PLANNERS
from convswap.cli import main
from convswap.defaults import SIM_PLANNERS
from convswap.protocols import load_protocols

SHIPPED = tomllib.loads((Path(__file__).resolve().parents[1] / "convswap" / "protocols" / "protocols.toml").read_text())


def build(items: Path, planner: str, *extra: str) -> int:
    return main(["protocol", "build", str(items), "--planner", f"sim:{planner}", "--out", str(items.parent),
                 "--image-root", str(COCO_IMAGES), "--smoke", "3", *extra])  # fmt: skip


def opencv_hue(color: str) -> int:
    rgb = np.array([[[int(color[i : i + 2], 16) for i in (1, 3, 5)]]], dtype=np.uint8)
    return int(cv2.cvtColor(rgb, cv2.COLOR_RGB2HSV)[0, 0, 0])


def k4_items(folder: Path) -> Path:
    """The example items cut to four referents each, the target among them."""
    items = items_folder(folder)
    lines = []
    for line in items.read_text().splitlines():
        item = json.loads(line)
        kept = [item["target"], *[r for r in item["referents"] if r != item["target"]][:3]]
        item["referents"] = {r: fields for r, fields in item["referents"].items() if r in kept}
        lines.append(json.dumps(item))
    items.write_text("\n".join(lines) + "\n")
    return items


def table_row(out: str, attempt: str) -> list[str]:
    (row,) = [line for line in out.splitlines() if f"| {attempt} |" in line]
    return [cell.strip() for cell in row.strip("|").split("|")]


def test_the_perfect_planner_reuses_the_first_shipped_protocol_that_reads_the_items(tmp_path, capsys):
    # Shipped order: point_marker reads a point (these items give no regions), label_code a slot of a strip.
    fitting = [name for name, table in SHIPPED.items() if "choice" in table["tasks"] and table["output"] == "slot"
               and table.get("layout") == "strip"]  # fmt: skip
    assert list(SHIPPED)[:2] == ["point_marker", fitting[0]]
    items = items_folder(tmp_path / "plans")
    assert build(items, "perfect") == 0
    out = capsys.readouterr().out
    assert table_row(out, "initial")[5:7] == ["reuse", fitting[0]] and table_row(out, "initial")[-1] == "3/3"
    assert "verdict: pass (initial)" in out
    text = (items.parent / "protocols.toml").read_text()
    assert f"It reuses the declared protocol {fitting[0]}; nothing new is declared." in text
    assert tomllib.loads(text) == {}


def test_items_with_regions_get_the_point_protocol_first_and_its_smoke_reads_a_dot_on_the_photographs_cyan(
    tmp_path, capsys
):
    """point_marker, first in the shipped file, reads these items once they give regions; the smoke item whose
    photograph is cyan where the dot goes is read too (the photograph's own colour is no answer, the dot over it
    is), so nothing is revised."""
    items = items_folder(tmp_path / "plans", regions=True)
    assert build(items, "perfect") == 0
    out = capsys.readouterr().out
    initial = table_row(out, "initial")
    assert (initial[5:7], initial[-1]) == (["reuse", "point_marker"], "3/3")
    assert "verdict: pass (initial)" in out and "| revision |" not in out
    assert "It reuses the declared protocol point_marker" in (items.parent / "protocols.toml").read_text()


def test_a_smoke_fault_is_revised_and_the_build_declared_in_a_hue_no_protocol_holds(tmp_path, capsys):
    items = items_folder(tmp_path / "plans")
    assert build(items, "builder-strict") == 0
    out = capsys.readouterr().out
    initial, revision = table_row(out, "initial"), table_row(out, "revision")
    assert initial[5:7] == revision[5:7] == ["build", "yellow_strip"]
    assert (initial[-2:], revision[-2:]) == (["passed", "0/3"], ["passed", "3/3"])
    reasons = [line for line in out.splitlines() if line.startswith("  initial: smoke: item ")]
    assert len(reasons) == 3 and all("no component of the protocol's colour passed the filter" in r for r in reasons)
    assert "verdict: pass (revision)" in out
    assert (items.parent / "protocols.toml").read_text().startswith(f"# {items}: route build, smoke pass (revision)")
    built = load_protocols(items.parent)["yellow_strip"]
    assert built.layout == "strip" and built.tasks == ("choice",) and built.output_kind == "slot"
    assert built.hsv.hue[0] <= opencv_hue(built.color_hex) <= built.hsv.hue[1]
    for name, table in SHIPPED.items():
        low, high = table["hsv"]["hue"]
        assert not low <= opencv_hue(built.color_hex) <= high, name
    # A second build draws in a colour the first's range does not hold either.
    assert build(items, "builder") == 0
    declared = load_protocols(items.parent)
    second = declared[table_row(capsys.readouterr().out, "initial")[6]]
    assert second.color_hex != built.color_hex
    assert not built.hsv.hue[0] <= opencv_hue(second.color_hex) <= built.hsv.hue[1]


def test_a_static_fault_is_refused_in_one_line_and_mended_by_the_revision(tmp_path, capsys):
    items = items_folder(tmp_path / "plans")
    assert build(items, "builder-slips") == 0
    out = capsys.readouterr().out
    assert table_row(out, "initial")[-2:] == ["refused", "-"]
    (reason,) = [line for line in out.splitlines() if line.startswith("  initial: ")]
    assert reason.startswith("  initial: static check: yellow_strip.pipeline[2].op: names no registered operation")
    assert reason.endswith("got 'denoise'")
    assert "verdict: pass (revision)" in out and "yellow_strip" in load_protocols(items.parent)


def test_a_planner_that_repeats_its_fault_is_rejected_and_nothing_is_written(tmp_path, capsys):
    items = items_folder(tmp_path / "plans")
    assert build(items, "builder-stubborn") == 2
    captured = capsys.readouterr()
    assert "verdict: rejected" in captured.out
    assert captured.err.splitlines() == [
        f"convswap protocol: error: no protocol accepted for {items} after 2 attempt(s): static check: "
        "yellow_strip.pipeline[2].op: names no registered operation (known: load_generated, load_source, hsv_mask, "
        "subtract, morphology, components, filter, refuse_merged, select_one, centroid, normalize, slot_of_point, count), got "
        "'denoise'; nothing written"
    ]
    assert not (items.parent / "protocols.toml").exists()


def test_items_of_four_options_are_built_in_corners_and_listed_with_four(tmp_path, capsys):
    items = k4_items(tmp_path / "plans")
    assert build(items, "builder") == 0
    assert table_row(capsys.readouterr().out, "initial")[3:7] == ["4", "initial", "build", "yellow_corners4"]
    assert main(["protocols", "--plan-dir", str(items.parent)]) == 0
    listing = capsys.readouterr().out
    entry = listing[listing.index("yellow_corners4  tasks: choice") :].splitlines()
    (guidance,) = [line for line in entry[:5] if line.startswith("  choice: ")]
    options = guidance.split('"')[1].split("? ", 1)[1].split(", ")
    assert [option.split("=")[0] for option in options] == ["1", "2", "3", "4"]
    assert "4 is the bottom-right corner" in guidance


def test_what_it_answers_depends_on_the_request_alone(tmp_path, capsys):
    """Two folders whose items differ in every target: the same protocol is declared, byte for byte."""
    declared = []
    for name, targets in (("a", None), ("b", {"coco-311002-baseball-bat": "top-left", "coco-310200-bowl": "center"})):
        items = items_folder(tmp_path / name, targets)
        assert build(items, "builder-strict") == 0
        declared.append((items.parent / "protocols.toml").read_text().split("\n", 1)[1])
    assert declared[0] == declared[1]


def test_an_unknown_planner_and_a_planner_of_no_structured_answer_are_one_line(tmp_path, capsys):
    items = items_folder(tmp_path / "plans")
    assert build(items, "qwen3vl-like") == 2
    assert capsys.readouterr().err.splitlines() == [
        f"convswap protocol: error: --planner sim:qwen3vl-like is no simulated planner; planners: "
        f"{', '.join(SIM_PLANNERS)}"
    ]
    assert main(["protocol", "build", str(items), "--planner", "hf:/no/such/model", "--out", str(items.parent)]) == 2
    assert capsys.readouterr().err.splitlines() == [
        "convswap protocol: error: --planner hf:/no/such/model cannot be asked for a structured answer; give "
        f"openai:<model>, gemini:<model> or sim:<planner> ({', '.join(SIM_PLANNERS)})"
    ]
    assert not (items.parent / "protocols.toml").exists()


@pytest.mark.parametrize("name", SIM_PLANNERS)
def test_the_help_names_every_simulated_planner(name, capsys):
    assert tuple(PLANNERS) == SIM_PLANNERS
    with pytest.raises(SystemExit):
        main(["protocol", "build", "--help"])
    out = capsys.readouterr().out  # argparse may wrap a name at its hyphen
    assert "sim:<planner>" in out and name in "".join(out.split())
