"""Parser sensitivity (ProVisE's section 4.5): a protocol's deterministic parser and its declared reader on the same
kept images of a run.

Every pixel record of a protocol that declares both a pipeline and a reader is read again by the reader from its
kept image alone (`protocol_reader.read_image`); the record's own parse stays as the run made it.  Both columns use
the same records, a record without an image or a valid answer counting as not correct under each, as ProVisE's
zeros do.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from convswap.core import ConvswapError, Prompt

if TYPE_CHECKING:
    from convswap.protocols import Protocol
    from convswap.readout.base import Backend

SCORED = ("correct", "incorrect")


@dataclass(frozen=True)
class SensitivityRow:
    """One model and protocol: N records, the valid answers under each parser, how often both valid ones agree,
    and accuracy under each (records without a valid answer counted as not correct)."""

    model: str
    protocol: str
    reader: str
    n: int
    parser_valid: int
    reader_valid: int
    both_valid: int
    agree: int
    parser_correct: int
    reader_correct: int

    def cells(self) -> list[str]:
        def share(count: int, total: int) -> str:
            return f"{count}/{total} ({100 * count / total:.1f}%)" if total else "-"

        return [self.model, self.protocol, self.reader, str(self.n), share(self.parser_valid, self.n),
                share(self.reader_valid, self.n), share(self.agree, self.both_valid),
                share(self.parser_correct, self.n), share(self.reader_correct, self.n)]  # fmt: skip


HEADER = ("model", "protocol", "reader", "N", "parser valid", "reader valid", "agreement (both valid)",
          "accuracy, parser", "accuracy, reader")  # fmt: skip


def sensitivity(folder: Path, catalog: Mapping[str, Protocol], load: Callable[[str], Backend]) -> list[SensitivityRow]:
    """The rows of one model folder's pixel records whose protocol declares a pipeline and a reader."""
    from PIL import Image

    from convswap.runs.logs import log_files, read_records
    from convswap.runs.pixel_answers import image_path
    from convswap.runs.protocol_reader import read_image

    counts: dict[tuple[str, str], list[int]] = {}
    readers: dict[str, Backend] = {}
    try:
        for record in (r for path in log_files(folder) for r in read_records(path)):
            pixels = record.pixels
            protocol = catalog.get(record.convention)
            if pixels is None or protocol is None or protocol.reader is None or not protocol.pipeline:
                continue
            target = record.keys["target"]
            parser_slot = record.parsed_slot if pixels.outcome in SCORED else None
            reader_slot = None
            if pixels.image_sha256 is not None:
                spec = protocol.reader.model
                if spec not in readers:
                    readers[spec] = load(spec)
                with Image.open(image_path(folder, pixels.image_sha256)) as kept:
                    image = kept.convert("RGB")
                prompt = Prompt(record.trial_id, record.convention, record.task, record.prompt, record.slots, (),
                                tuple(record.keys.items()), "integer")  # fmt: skip
                reading = read_image(readers[spec], protocol, prompt, image)
                if reading.error:
                    raise ConvswapError(f"the reader's request for {record.trial_id} failed: {reading.error}")
                reader_slot = reading.slot
            row = counts.setdefault((record.model, protocol.name), [0] * 7)
            both = parser_slot is not None and reader_slot is not None
            for index, value in enumerate((1, parser_slot is not None, reader_slot is not None, both,
                                           both and parser_slot == reader_slot, parser_slot == target,
                                           reader_slot == target)):  # fmt: skip
                row[index] += int(value)
    finally:
        for backend in readers.values():
            close = getattr(backend, "close", None)
            if close is not None:
                close()
    return [SensitivityRow(model, name, catalog[name].reader.model, *row)  # type: ignore[union-attr]
            for (model, name), row in sorted(counts.items())]  # fmt: skip


def markdown(rows: list[SensitivityRow]) -> str:
    lines = ["| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER)]
    lines += ["| " + " | ".join(row.cells()) + " |" for row in rows]
    return "\n".join(lines)
