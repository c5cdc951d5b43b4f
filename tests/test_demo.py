"""`convswap demo`: the whole program on the simulated observer, ending in the main tables."""

from __future__ import annotations

import pytest
from demo_support import demo_of_fixture  # noqa: F401 (the fixture demo_of, shared)

pytestmark = pytest.mark.slow  # tiny transformers models or whole runs: see the README's fast tier

LOGS = {
    "color_ladder": ("visible.jsonl", "cached.jsonl"),
    "color_readership": ("visible.jsonl", "cached.jsonl"),
    "synthetic_spatial": ("visible.jsonl", "cached.jsonl"),
    "coco_locate_identify": ("visible.jsonl",),
    "cross_model": ("visible.jsonl",),
}


def test_demo_runs_every_experiment_and_prints_the_main_tables(demo_of, coco_annotations):
    demo = demo_of(coco_annotations.parent.parent, limit=6)
    out, printed = demo.out, demo.printed
    vocabulary = out / "calibration" / "sim-qwen3vl-like" / "vocabulary.json"
    assert f"calibration: vocabulary at {vocabulary}" in printed
    for experiment, names in LOGS.items():
        for name in names:
            log = out / experiment / "sim-qwen3vl-like" / name
            assert log.stat().st_size > 0
            assert f"log: {log}" in printed
    # The second observer of the cross-model comparison reads pixels, not normalized coordinates.
    second = out / "cross_model" / "sim-qwen25vl-like" / "visible.jsonl"
    assert f"log: {second}" in printed and second.stat().st_size > 0
    # With photographs it also answers in pixels, on the painter, and prints the outcome and complementarity tables.
    painted = out / "interface_swap" / "sim-painter-like"
    assert f"log: {painted / 'visible.jsonl'}" in printed and any((painted / "images").iterdir())
    assert "# Pixel answers -- outcomes per model and protocol" in printed
    assert "# Text against pixels -- complementarity on the same trials" in printed
    headings = ("# Table 1: color ladder", "# Table 2: COCO", "# Table 3: readership", "# Table 4: paired",
                "# Table 8: synthetic")  # fmt: skip
    for heading in headings:
        assert heading in printed
    # The main tables print in the spec's layout (human row labels, the pair named once), within 120 columns.
    assert "| sim:qwen25vl-like vs sim:qwen3vl-like | English cell name |" in printed
    assert "| hue angle with the word attached |" in printed
    tables = printed[printed.index("# Table 1") : printed.index(f"logs: {out}")]
    assert max(len(line) for line in tables.splitlines()) <= 120
    # The demo ends by saying where everything is and how to read the records in a browser.
    assert printed.rstrip().endswith(
        f"logs: {out}\ntables and figures: {out / 'tables'}\n"
        f"read what the model said, record by record: convswap view {out} --serve"
    )
    assert (out / "tables" / "table2_coco.md").is_file()
    assert (out / "tables" / "figure1_locate.png").is_file()


def test_demo_without_coco_skips_the_photographs(demo_of):
    demo = demo_of(None, limit=2)
    out, printed = demo.out, demo.printed
    assert "# Table 1: color ladder" in printed and "# Table 2: COCO" not in printed
    assert not (out / "coco_locate_identify").exists() and not (out / "cross_model").exists()
    assert not (out / "interface_swap").exists() and "# Pixel answers" not in printed
