"""Declarations and a choice item shared by the convention and audit tests."""

from __future__ import annotations

from pathlib import Path

from convswap.core import ImageSpec, Trial

BOXES = {"a": "[10, 20, 110, 220]", "b": "[200, 40, 330, 250]", "c": "[400, 10, 600, 300]"}


def declare(folder: Path, text: str) -> Path:
    path = folder / "conventions.toml"
    path.write_text(text, encoding="utf-8")
    return path


CHOICE = """\
[box]
tasks = ["choice"]
option = "{box}"

[box_named_mispaired]
tasks = ["choice"]
option = "{box}"
gloss = "name"
mispaired = true

[mask]
tasks = ["choice"]
option = "{mask}"
"""


def choice_item() -> Trial:
    descriptions = (
        ("a", (("box", BOXES["a"]), ("name", "the dog on the left"))),
        ("b", (("box", BOXES["b"]), ("name", "the sleeping dog"))),
        ("c", (("box", BOXES["c"]), ("name", "the dog in the water"))),
    )
    question = "Which region shows the sleeping dog? {options}."
    return Trial("item-1", "choice", ("a", "b", "c"), "b", ImageSpec.of("file", path="park.jpg"), 640, 480,
                 meta=(("descriptions", descriptions), ("question", question)))  # fmt: skip
