"""Scorer-integrity checks over pixel answers: every stored image re-parsed from its file, and no mark of the source
counted as an answer.

`pixel_reparse` fails a record whose image is missing from `images/` beside its log or hashes otherwise than the
record says, whose protocol's declaration is no longer the one it ran under, or whose stored parse, slot, outcome
or score differs from what the protocol's parser makes of the file now.  `source_marks` fails a record whose
answered mark was already in the source image: the pixels of the kept component are looked up in the source's own
mask of the protocol's colour, apart from the parser's own subtraction.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import numpy as np
from PIL import Image

from convswap.audits.checks import CheckResult, per_record
from convswap.core import IMAGES_DIR, UNSCORED_OUTCOMES, ImageSpec, Prompt, Record, outcome_of, score_answer, sha256_hex
from convswap.protocols import Protocol, ProtocolParse, answer_of, colour_mask
from convswap.runs.pixel_answers import parse_kept
from convswap.runs.protocol_reader import reader_parse, slot_of_answer
from convswap.stimuli.render import render_image

# A kept mark whose pixels are mostly of the protocol's colour in the source already was there before the answer.
MAX_SOURCE_SHARE = 0.5
# Sources kept decoded by `source_images`: a trial's pixel records lie together in its log.
SOURCES_KEPT = 8

Sources = Callable[[ImageSpec], Image.Image]


def source_images() -> Sources:
    """`render_image`, each of the last SOURCES_KEPT sources decoded once: one audit's two pixel checks ask for a
    trial's source once per protocol each.  Made anew for each audit, so that a source changed on disk since the
    last one is read again.  The images it gives are shared: only read them."""
    return functools.lru_cache(maxsize=SOURCES_KEPT)(render_image)


def kept_images(logdir: Path) -> dict[str, Path]:
    """Every kept image under `logdir`, by the sha256 its name gives (content-addressed, so any copy serves)."""
    return {path.stem: path for path in sorted(Path(logdir).rglob(f"{IMAGES_DIR}/*.png"))}


def _is_pixel(record: Record) -> bool:
    return record.pixels is not None


def pixel_reparse(
    records: Sequence[Record],
    images: Mapping[str, Path],
    protocols: Mapping[str, Protocol],
    sources: Sources,
) -> CheckResult:
    return per_record("pixel-reparse", "every stored image, re-parsed from its file, gives the stored parse, slot "
                      "and outcome", records, lambda record: _reparse_problem(record, images, protocols, sources),
                      applies=_is_pixel)  # fmt: skip


def _reparse_problem(
    record: Record, images: Mapping[str, Path], protocols: Mapping[str, Protocol], sources: Sources
) -> str | None:
    answer = record.pixels
    assert answer is not None
    protocol = protocols.get(answer.protocol)
    if protocol is None:
        return f"protocol {answer.protocol!r} is declared nowhere the audit reads (shipped or the plan folder's)"
    if protocol.sha256 != answer.protocol_sha256:
        return (f"protocol {answer.protocol}'s declaration changed since the run (sha256 {answer.protocol_sha256[:12]} "
                f"then, {protocol.sha256[:12]} now)")  # fmt: skip
    target = record.keys.get("target")
    if answer.image_sha256 is None:
        expected = outcome_of(False, None, None, target)
        if answer.outcome != expected or answer.parse is not None:
            return f"no image was kept, so the outcome is {expected}, not {answer.outcome} (parse {answer.parse})"
        return _scored_as(record, None, expected, api_error=record.parse_status == "api_error")
    path = images.get(answer.image_sha256)
    if path is None:
        return f"its image {answer.image_name} is missing"
    data = path.read_bytes()
    if sha256_hex(data) != answer.image_sha256:
        return f"{path} hashes to {sha256_hex(data)[:12]}, not the {answer.image_sha256[:12]} its name and record give"
    route = "pipeline" if protocol.pipeline else "reader"
    if answer.parsed_by != route:
        return f"parsed by its {answer.parsed_by}, but protocol {protocol.name} is parsed by its {route}"
    if not protocol.pipeline:  # the fallback route: the reader's stored answer, read again, gives the parse
        prompt = Prompt(record.trial_id, record.convention, record.task, record.prompt, record.slots, (),
                        tuple(record.keys.items()), "integer")  # fmt: skip
        slot = slot_of_answer(protocol, prompt, answer.reader_answer)
        parse = reader_parse(slot, answer.reader_answer)
    else:
        with Image.open(path) as image:
            parse = parse_kept(protocol, image, sources(record.trial.image), answer.k)
        slot = None
        if parse.status == "ok":
            found = answer_of(protocol, parse, record.trial, record.slots)
            slot = 0 if found is None else found
    if parse.to_json() != answer.parse:
        return f"re-parsed as {parse.to_json()}, stored as {answer.parse}"
    if slot != record.parsed_slot:
        return f"the parse answers slot {slot}, the record stores {record.parsed_slot}"
    expected = outcome_of(True, parse.status, slot, target)
    if expected != answer.outcome:
        return f"the outcome is {expected}, the record stores {answer.outcome}"
    return _scored_as(record, slot, expected)


def _scored_as(record: Record, slot: int | None, outcome: str, api_error: bool = False) -> str | None:
    """The record's status, answer and score as its outcome makes them (a request that failed for good, no image:
    status api_error)."""
    unscored = outcome in UNSCORED_OUTCOMES
    status, answer_slot = ("api_error" if api_error else outcome, None) if unscored else ("ok", slot)
    if (record.parse_status, record.answer_slot) != (status, answer_slot):
        return (f"outcome {outcome} makes status {status} and answer slot {answer_slot}, the record stores "
                f"{record.parse_status} and {record.answer_slot}")  # fmt: skip
    if record.correct != score_answer(answer_slot, record.keys):
        return f"answer slot {answer_slot} scores {score_answer(answer_slot, record.keys)}, stored {record.correct}"
    return None


def source_marks(records: Sequence[Record], protocols: Mapping[str, Protocol], sources: Sources) -> CheckResult:
    return per_record("source-marks", "no mark already in the source image is counted as an answer", records,
                      lambda record: _source_mark_problem(record, protocols, sources),
                      applies=lambda record: record.pixels is not None and record.pixels.parse is not None
                      and record.pixels.parse.get("status") == "ok" and record.pixels.protocol in protocols)  # fmt: skip


def _source_mark_problem(record: Record, protocols: Mapping[str, Protocol], sources: Sources) -> str | None:
    answer = record.pixels
    assert answer is not None and answer.parse is not None
    protocol = protocols[answer.protocol]
    mask = colour_mask(protocol, np.asarray(sources(record.trial.image).convert("RGB"))) > 0
    for component in ProtocolParse.from_json(answer.parse).components:
        if not component.kept:
            continue
        x, y, w, h = component.bbox
        share = float(mask[y : y + h, x : x + w].sum()) / max(component.area, 1)
        if share > MAX_SOURCE_SHARE:
            return (f"the kept mark at {list(component.bbox)} is {100 * min(share, 1):.0f}% {protocol.name} colour in "
                    "the source image itself: a mark already there was counted as the answer")  # fmt: skip
    return None
