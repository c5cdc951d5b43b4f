"""Typed record parts: a log written before the parts were typed loads field by field and writes the same bytes back,
and a part that does not load fails the audit checks that read it, by name, without stopping the audit.

tests/data/records-before-typed-parts.jsonl was written by the runner when the parts were plain dicts: five records
read by both readouts from the demo (visible, cached, color mispaired, COCO mispaired identify, COCO locate), a COCO
4x4 record read by generation alone, an API run's failed request and answered one (stimuli from another model's
vocabulary), and a first-token tie planted in one record's logits.
"""

from __future__ import annotations

import copy
import json
import pickle
from pathlib import Path

import pytest

from convswap.analysis.loading import load_records
from convswap.audits.log_audit import audit_folder
from convswap.cli import main
from convswap.core import (
    FirstTokenReadout,
    Generation,
    Record,
    RecordExtra,
    Surface,
    TokenScore,
    Trial,
    UnreadablePart,
    canonical_json,
)
from convswap.readout.base import MEMORIZE_INSTRUCTION

LOG = Path(__file__).parent / "data" / "records-before-typed-parts.jsonl"
LINES = LOG.read_text(encoding="utf-8").splitlines()


def by_unit(records):
    return {(r.trial_id, r.convention, r.condition, r.model): r for r in records}


@pytest.fixture(scope="module")
def records():
    return by_unit(Record.from_json(line) for line in LINES)


def test_every_line_loads_typed_parts_and_writes_the_same_bytes_back():
    for line in LINES:
        record = Record.from_json(line)
        assert record.to_json() == line
        assert isinstance(record.trial, Trial) and isinstance(record.extra, RecordExtra)
        assert record.first_token is None or isinstance(record.first_token, FirstTokenReadout)
        assert record.generation is None or isinstance(record.generation, Generation)
        assert record.unreadable_parts() == {}


def test_the_folder_reader_shares_parts_and_still_writes_the_same_bytes(tmp_path):
    (tmp_path / "log.jsonl").write_text(LOG.read_text(encoding="utf-8"), encoding="utf-8")
    loaded = load_records(tmp_path)
    assert sorted(record.to_json() for record in loaded) == sorted(LINES)
    ladder = [r for r in loaded if (r.experiment, r.trial_id) == ("color_ladder", "color-heldout-0-0")]
    assert len(ladder) == 2 and ladder[0].trial is ladder[1].trial  # two conventions' records share one trial


def test_the_folder_reader_keeps_an_integer_beyond_64_bits_whole(tmp_path):
    logged = json.loads(LINES[0])
    logged["trial"]["meta"]["seed"] = 2**70 + 1  # a float would read it as 2**70
    (tmp_path / "log.jsonl").write_text(canonical_json(logged) + "\n", encoding="utf-8")
    (record,) = load_records(tmp_path)
    assert record.trial.meta_value("seed") == 2**70 + 1 and record.to_json() == canonical_json(logged)


def test_a_record_logged_with_fewer_fields_takes_their_defaults_and_an_unknown_or_missing_one_is_refused():
    older = json.loads(LINES[0])
    for name in ("extra", "dtype", "environment"):  # fields a record logged before they existed lacks
        del older[name]
    record = Record.from_dict(copy.deepcopy(older))
    assert (record.extra, record.dtype, record.environment, record.pixels) == (RecordExtra(), None, {}, None)
    assert record.prompt == older["prompt"] and record.trial.to_json() == older["trial"]
    unknown = {**json.loads(LINES[0]), "bogus": 1}
    with pytest.raises(TypeError, match="unexpected keyword argument 'bogus'"):
        Record.from_dict(unknown)
    missing = json.loads(LINES[0])
    del missing["prompt"]
    with pytest.raises(TypeError, match="missing 1 required positional argument: 'prompt'"):
        Record.from_dict(missing)


def test_each_field_reads_as_logged():
    for line in LINES:
        logged = json.loads(line)
        record = Record.from_json(line)
        assert record.trial.to_json() == logged["trial"]
        assert record.extra.to_json() == logged["extra"]
        if logged["generation"] is not None:
            assert {name: getattr(record.generation, name) for name in logged["generation"]} == logged["generation"]
        if logged["first_token"] is not None:
            first_token = logged["first_token"]
            assert record.first_token.candidate_logits == tuple(first_token["candidate_logits"])
            assert record.first_token.top == tuple(TokenScore(**score) for score in first_token["top"])
            assert (record.first_token.slot, record.first_token.candidate_mass) == (
                first_token["slot"],
                first_token["candidate_mass"],
            )


def test_a_record_read_by_both_readouts(records):
    record = records[("color-heldout-0-0", "word", "cached", "sim:qwen3vl-like")]
    assert (record.first_token.slot, record.first_token.surface, record.first_token.tie) == (3, "bare", False)
    assert record.first_token.top[0] == TokenScore(135, "purple", 0.9839856565424762)
    assert (record.generation.text, record.generation.finish_reason, record.generation.max_new_tokens) == (
        "purple",
        "stop",
        16,
    )
    assert (record.trial.target, record.trial.held_out, record.trial.meta_value("stimulus_angle")) == (
        "green",
        True,
        146,
    )
    assert record.trial.referents == ("orange", "yellow", "green", "blue", "purple", "pink")
    assert record.extra.memorize_instruction == MEMORIZE_INSTRUCTION
    assert isinstance(record.extra.surface, Surface) and record.extra.surface.variant == "bare"
    assert record.extra.vocabulary_of is None
    visible = records[("color-heldout-0-0", "hue_legend", "visible", "sim:qwen3vl-like")]
    assert visible.extra.memorize_instruction is None and visible.trial == record.trial


def test_a_tie_an_api_error_and_another_models_vocabulary(records):
    tie = records[("color-heldout-0-1", "hue_legend", "visible", "sim:qwen3vl-like")]
    assert (tie.first_token.slot, tie.first_token.tie, tie.first_token.tied_slots, tie.answer_slot) == (
        None,
        True,
        (5, 6),
        None,
    )
    failed = records[("spatial-0-0", "pixels", "cached", "openai:gpt-4o")]
    assert failed.first_token is None and failed.parse_status == "api_error"
    assert (failed.generation.text, failed.generation.finish_reason) == (None, "error")
    assert failed.generation.error == "openai:gpt-4o: HTTP 500: overloaded (gave up after 1 attempt(s))"
    assert failed.extra.vocabulary_of["spec"] == "sim:qwen3vl-like"
    generated = records[("coco-117645-person-4x4-locate", "cell_name", "visible", "sim:qwen3vl-like")]
    assert generated.readout == "generate" and generated.first_token is None and generated.extra == RecordExtra()
    assert (generated.trial.grid, generated.trial.task, generated.generation.text) == (4, "locate", "10")


@pytest.mark.parametrize(
    ("part", "garbled", "error"),
    [
        ("trial", {}, "KeyError: 'trial_id'"),
        (
            "generation",
            {"text": "1"},
            "TypeError: Generation.__init__() missing 1 required positional argument: 'finish_reason'",
        ),  # fmt: skip
        ("first_token", {"slot": 4}, "KeyError: 'surface'"),
        (
            "extra",
            {"surface_of": "bare"},
            "TypeError: RecordExtra.__init__() got an unexpected keyword argument 'surface_of'",
        ),  # fmt: skip
    ],
)
def test_a_part_that_does_not_load_is_kept_as_logged_and_raises_where_it_is_read(part, garbled, error):
    line = canonical_json({**json.loads(LINES[0]), part: garbled})
    record = Record.from_json(line)
    assert list(record.unreadable_parts()) == [part]
    assert isinstance(getattr(record, part), UnreadablePart)
    assert record.to_json() == line
    assert copy.deepcopy(record).to_json() == line and pickle.loads(pickle.dumps(record)).to_json() == line
    name, _, message = error.partition(": ")
    with pytest.raises((KeyError, TypeError)) as raised:
        _ = getattr(record, part).target
    assert type(raised.value).__name__ == name and str(raised.value) == message


def test_a_log_with_a_garbled_record_is_audited_and_the_record_fails_by_name(tmp_path, capsys):
    garbled = canonical_json({**json.loads(LINES[0]), "generation": {"text": "1"}})
    (tmp_path / "log.jsonl").write_text("".join(line + "\n" for line in [garbled, *LINES[1:]]), encoding="utf-8")
    records, results = audit_folder(tmp_path)
    assert len(records) == len(LINES)
    relabel = next(result for result in results if result.name == "relabel")
    reason = (
        "record unreadable: TypeError: Generation.__init__() missing 1 required positional argument: 'finish_reason'"
    )
    assert [(failure.record.trial_id, failure.reason) for failure in relabel.failures] == [
        ("color-heldout-0-0", reason)
    ]
    # The log was written under an earlier version of color_ladder.toml: read as such, and labelled so.
    assert main(["audit", str(tmp_path), "--allow-unregistered"]) == 1
    report = capsys.readouterr().out
    assert f"sim:qwen3vl-like visible hue_legend color-heldout-0-0: {reason}" in report
    assert 'raw: generation as logged: {"text":"1"}; first tokens' in report
