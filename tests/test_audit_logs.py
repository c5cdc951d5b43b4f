"""`convswap audit` on a clean run of every experiment kind, and each check against a planted defect in one record."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from audit_runs import audit, failing, run

from convswap.analysis.loading import load_records
from convswap.audits import checks
from convswap.audits.held_out import find_vocabularies, held_out
from convswap.audits.log_audit import audit_records
from convswap.audits.prompt_text import read_options
from convswap.cli import main
from convswap.core import ColorAnchor, Record, canonical_json

MISPAIRED = {"pixels_mispaired", "normalized_mispaired", "hue_glossed_mispaired", "hue_legend_mispaired"}


@pytest.fixture(scope="module")
def clean(built_once, coco_annotations):
    """Calibration, the color ladder (with enough trials for the pairing break), readership, synthetic, COCO on
    3x3 and on 4x4 (whose labels 1-16 have no first-token readout, so they are generated and parsed)."""

    def build(root: Path) -> None:
        out = root / "runs"
        run("calibration", out)
        run("color_ladder", out, limit=20)
        run("color_readership", out, limit=6)
        run("synthetic_spatial", out, limit=6)
        run("coco_locate_identify", out, limit=6, coco=coco_annotations.parents[1])
        run("coco_4x4", out, limit=6, coco=coco_annotations.parents[1])

    return built_once("audit_clean", build) / "runs"


@pytest.fixture(scope="module")
def records(clean):
    return load_records(clean)


def one(records, **fields):
    return next(r for r in records if all(getattr(r, name) == value for name, value in fields.items()))


def reasons(result) -> list[str]:
    return [failure.reason for failure in result.failures]


def test_a_clean_run_passes_every_check(clean, records, capsys):
    status, report, rows = audit(capsys, clean)
    assert status == 0, report
    # ties: added with the tie readout (a convention tying on over 1% of its first-token readouts fails)
    # pixel-reparse, source-marks: added with pixel answers (a text-only log checks none with them)
    assert list(rows) == ["prompt-target", "relabel", "pairing-break", "ties", "alphabet", "truncation",
                          "derangement", "index-space", "held-out", "pixel-reparse", "source-marks"]  # fmt: skip
    assert not failing(rows)
    n = len(records)
    assert rows["prompt-target"][0] == rows["relabel"][0] == rows["index-space"][0] == n
    assert rows["derangement"][0] == sum(r.convention in MISPAIRED for r in records)
    assert rows["alphabet"][0] == sum(r.readout == "first_token" for r in records)
    assert rows["held-out"][0] == sum(r.task == "color" and r.trial.held_out for r in records)
    assert {r.task for r in records} == {"color", "locate", "identify"}
    assert {r.readout for r in records} == {"first_token", "generate"}
    # The ladder's 20 trials and their crossover pairs give groups large enough to test.
    assert "color_ladder sim:qwen3vl-like visible label (K=6): shuffled accuracy" in report
    # A text-only log has no pixel answer for the pixel checks to read: they say so rather than pass.
    assert report.rstrip().endswith(
        f"{n} records audited; every check that ran passed; did not run: pixel-reparse (not run), "
        "source-marks (not run)"
    )


# --- prompt-target ----------------------------------------------------------------------------------


def test_a_key_at_another_option_fails_prompt_target(records):
    record = one(records, convention="label", condition="visible")
    wrong = record.keys["target"] % len(record.slots) + 1
    result = checks.prompt_target([replace(record, keys={"target": wrong})])
    description = record.prompt.split(f"{wrong}=")[1].split(",")[0].split(".")[0]
    assert reasons(result) == [
        f"key target={wrong}: option {description!r} denotes {description!r}, not the target {record.trial.target!r}"
    ]


def test_a_coordinate_outside_the_target_cell_fails_prompt_target(records):
    record = one(records, convention="pixels", task="locate")
    key = record.keys["target"]
    other = record.keys["target"] % len(record.slots) + 1
    options = read_options(record.prompt, record.trial, "pixels")
    text = record.prompt.replace(f"{key}={options[key - 1].description}", f"{key}={options[other - 1].description}")
    result = checks.prompt_target([replace(record, prompt=text)])
    assert reasons(result) == [
        f"key target={key}: option {options[other - 1].description!r} denotes {record.slots[other - 1]!r}, "
        f"not the target {record.trial.target!r}"
    ]


def test_an_identify_question_about_another_cell_fails_prompt_target(records):
    record = one(records, convention="cell_name", task="identify")
    cell = record.trial.cell
    other = "center" if cell != "center" else "top-left"
    result = checks.prompt_target(
        [replace(record, prompt=record.prompt.replace(f"position {cell}?", f"position {other}?"))]
    )
    assert reasons(result) == [f"the question's position {other!r} denotes {other!r}, not the object's cell {cell!r}"]


def test_a_name_key_whose_gloss_is_not_the_target_fails_prompt_target(records):
    record = one(records, convention="pixels_mispaired", task="locate")
    coord = record.keys["coord"]
    result = checks.prompt_target([replace(record, keys={"coord": coord, "name": coord})])
    assert reasons(result) == [
        f"key name={coord}: option {read_options(record.prompt, record.trial, 'pixels')[coord - 1].description!r} "
        f"is glossed {record.glosses[coord - 1]!r}, not the target {record.trial.target!r}"
    ]


def test_an_unreadable_prompt_fails_instead_of_stopping_the_audit(records):
    record = one(records, convention="hue_bare")
    result = checks.prompt_target([replace(record, prompt="Which one?")])
    assert reasons(result) == ["record unreadable: PromptUnreadable: no option list found"]


def test_one_prompt_text_is_read_against_each_record_own_trial(records):
    # Records that share a prompt's words are read once per distinct trial: an equal trial reads it alike, a trial
    # of another size puts the same pixel coordinates in another cell.
    record = next(
        r for r in records if r.convention == "pixels" and r.task == "locate" and r.trial.target != "top-left"
    )
    equal = replace(record, trial=replace(record.trial))
    larger = replace(record, trial=replace(record.trial, width=2 * record.trial.width, height=2 * record.trial.height))
    unreadable = [replace(r, prompt="Which one?") for r in (record, equal)]
    result = checks.prompt_target([record, equal, larger, *unreadable])
    assert [failure.record for failure in result.failures] == [larger, *unreadable]
    key = record.keys["target"]
    assert result.failures[0].reason.startswith(f"key target={key}: option ")
    assert result.failures[0].reason.endswith(f"not the target {record.trial.target!r}")
    assert reasons(result)[1:] == ["record unreadable: PromptUnreadable: no option list found"] * 2


# --- relabel -----------------------------------------------------------------------------------------


def test_a_stored_parse_the_text_does_not_give_fails_relabel(records):
    record = one(records, convention="word", condition="visible")
    other = record.parsed_slot % len(record.slots) + 1
    result = checks.relabel([replace(record, parsed_slot=other)])
    assert reasons(result) == [
        f"stored parse (slot {other}, ok) but the text parses to (slot {record.parsed_slot}, ok)"
    ]


def test_a_first_token_slot_that_is_not_the_argmax_fails_relabel(records):
    record = one(records, convention="label", condition="cached")
    slot = record.first_token.slot
    other = slot % len(record.slots) + 1
    first_token = replace(record.first_token, slot=other)
    result = checks.relabel([replace(record, first_token=first_token, answer_slot=other)])
    assert reasons(result) == [f"stored first-token slot {other} but the candidate logits' argmax is slot {slot}"]


def tied(record, slots=(1, 2)):
    """The record as a tie of `slots` at the top candidate logit: no slot, neither right nor wrong."""
    top = max(record.first_token.candidate_logits) + 1.0
    logits = [top if slot in slots else value for slot, value in enumerate(record.first_token.candidate_logits, 1)]
    first_token = replace(record.first_token, candidate_logits=tuple(logits), slot=None, tie=True, tied_slots=slots)
    return replace(record, first_token=first_token, answer_slot=None, correct=dict.fromkeys(record.correct, False))


def test_a_recorded_tie_passes_relabel_and_a_tie_given_a_slot_fails_it(records):
    record = one(records, convention="label", condition="cached")
    assert checks.relabel([tied(record)]).passed
    planted = tied(record)
    first_token = replace(planted.first_token, slot=1, tie=False, tied_slots=())
    result = checks.relabel([replace(planted, first_token=first_token, answer_slot=1)])
    assert reasons(result) == ["the candidate logits tie at slots [1, 2] but the record stores (slot, tie, tied) "
                               "(1, False, [])"]  # fmt: skip


@pytest.mark.parametrize(("n_tied", "passes"), [(0, True), (1, True), (2, False)])
def test_a_convention_tying_on_over_one_percent_of_its_readouts_fails_ties(records, n_tied, passes):
    record = one(records, convention="label", condition="cached")
    group = [replace(record, trial_id=f"t{i}") for i in range(100)]
    group[:n_tied] = [tied(r) for r in group[:n_tied]]
    result = checks.ties(group)
    assert result.checked == 100 and result.passed == passes
    where = f"{record.experiment} {record.model} cached label"
    if n_tied:
        assert result.notes == [f"{where}: {n_tied}/100 first-token ties"]
    else:
        assert result.notes == ["no first-token tie"]
    if not passes:
        assert reasons(result) == [f"tie rate over 1%: {where}: 2/100 first-token ties"]


def test_correctness_that_the_answer_does_not_give_fails_relabel(records):
    record = one(records, convention="hue_legend", condition="visible")
    flipped = {key: not value for key, value in record.correct.items()}
    result = checks.relabel([replace(record, correct=flipped)])
    assert reasons(result) == [
        f"stored correctness {flipped} but answer slot {record.answer_slot} scores {record.correct}"
    ]


def test_an_answer_slot_from_the_other_readout_fails_relabel(records):
    record = one(records, convention="label", condition="visible")
    other = record.answer_slot % len(record.slots) + 1
    result = checks.relabel([replace(record, answer_slot=other)])
    assert reasons(result) == [f"answer slot {other} is not the first_token readout's slot {record.answer_slot}"]


# --- pairing-break ----------------------------------------------------------------------------------


def test_a_score_that_survives_the_shuffle_fails_pairing_break(records):
    """Every target in slot 1 and every answer slot 1: right on every trial, whichever trial it is scored against."""
    group = [
        r for r in records if r.experiment == "color_ladder" and r.convention == "label" and r.condition == "visible"
    ]
    assert len(group) == 44
    leaking = [replace(r, keys={"target": 1}, answer_slot=1, correct={"target": True}) for r in group]
    result = checks.pairing_break(leaking)
    assert result.checked == 44
    assert reasons(result) == [
        "scorer leaks: color_ladder sim:qwen3vl-like visible label (K=6): shuffled accuracy 44/44 against chance 1/6, "
        f"p = {6.0**-44:.3g}"  # all 44 right: no other count is as unlikely under chance
    ]
    assert checks.pairing_break(group).passed


def test_small_groups_are_named_untested_by_pairing_break(records):
    group = [r for r in records if r.experiment == "color_readership" and r.convention == "word"][:5]
    result = checks.pairing_break(group)
    assert result.passed and result.checked == 5
    assert result.notes == [
        f"color_readership sim:qwen3vl-like {group[0].condition} word (K=6): 5 scored records, too few to test"
    ]


def test_a_check_that_could_not_run_says_so_with_its_reason_and_rule(coco_annotations, tmp_path, capsys):
    """A small COCO run: no held-out color record, and every pairing-break group under the minimum."""
    out = tmp_path / "runs"
    run("coco_locate_identify", out, limit=3, coco=coco_annotations.parents[1])
    status, report, rows = audit(capsys, out)
    assert status == 0, report
    lines = {line.split()[0]: line for line in report.splitlines() if line.split() and line.split()[0] in rows}
    assert lines["pairing-break"].endswith(
        f"too few: every group has fewer than {checks.PAIRING_BREAK_MIN_RECORDS} scored records (fails at p < 0.001)"
    )
    assert lines["held-out"].endswith("  0         0  not run: no record it applies to")
    assert rows["prompt-target"][2] == "pass"
    assert report.rstrip().endswith(
        "records audited; every check that ran passed; did not run: pairing-break (too few), held-out (not run), "
        "pixel-reparse (not run), source-marks (not run)"
    )
    main(["view", str(out), "--out", str(tmp_path / "site")])
    index = (tmp_path / "site" / "index.html").read_text(encoding="utf-8")
    assert '<tr class="check too-few"><td>pairing-break</td>' in index
    assert "too few: every group has fewer than 20 scored records (fails at p &lt; 0.001)</td>" in index
    assert '<tr class="check not-run"><td>held-out</td>' in index


# --- alphabet ----------------------------------------------------------------------------------------


def test_candidate_mass_under_half_fails_alphabet(records):
    record = one(records, convention="word", condition="visible")
    result = checks.alphabet([replace(record, first_token=replace(record.first_token, candidate_mass=0.3))])
    assert reasons(result) == [f"candidate mass 0.300 < 0.5 (surface {record.first_token.surface!r})"]


def test_candidates_sharing_a_first_token_fail_alphabet(records):
    record = one(records, convention="label", condition="visible")
    ids = [216] * len(record.alphabet)
    result = checks.alphabet([replace(record, first_token=replace(record.first_token, candidate_token_ids=tuple(ids)))])
    assert reasons(result) == [f"candidates share first token(s) [216]: {ids} (surface 'bare')"]


def test_a_first_token_score_despite_a_refusal_fails_alphabet(records):
    record = one(records, convention="label", condition="visible")
    result = checks.alphabet([replace(record, first_token_refused="no surface carries 0.5")])
    assert reasons(result) == ["scored by first token although that readout was refused: no surface carries 0.5"]


def test_generated_records_are_not_alphabet_checked(records):
    record = one(records, convention="label", condition="visible")
    assert checks.alphabet([replace(record, readout="generate", first_token=None)]).checked == 0


# --- truncation --------------------------------------------------------------------------------------


def cut(record, text, finish_reason, status, answer=None):
    generation = replace(record.generation, text=text, finish_reason=finish_reason)
    correct = {key: answer == slot for key, slot in record.keys.items()}
    return replace(record, generation=generation, parse_status=status, parsed_slot=answer, answer_slot=answer,
                   readout="generate", first_token=None, correct=correct)  # fmt: skip


def test_truncations_flagged_as_such_pass_and_are_shown(records):
    record = one(records, convention="label", condition="visible")
    result = checks.truncation([cut(record, "", "length", "truncated"), cut(record, " ", "stop", "empty")])
    assert result.passed and result.checked == 2
    assert result.notes == [
        "sim:qwen3vl-like visible label: 2 empty or length-stopped (1 at the token budget of 16), recorded as "
        "{'empty': 1, 'truncated': 1}; texts: ''; ' '"
    ]


def test_a_truncation_recorded_as_a_parse_failure_fails_truncation(records):
    record = one(records, convention="label", condition="visible")
    result = checks.truncation([cut(record, "The answer is", "length", "unparseable")])
    assert reasons(result) == [
        "a generation stopped by 'length' with text 'The answer is' is recorded as 'unparseable', not 'truncated'"
    ]


def test_a_scored_truncation_fails_truncation(records):
    record = one(records, convention="label", condition="visible")
    result = checks.truncation([cut(record, "1", "length", "truncated", answer=1)])
    assert reasons(result) == [
        f"a truncated generation is scored: answer slot 1, correct {cut(record, '1', 'length', 'truncated', 1).correct}"
    ]


# --- derangement -------------------------------------------------------------------------------------


def test_an_option_glossed_with_its_own_name_fails_derangement(records):
    record = one(records, convention="pixels_mispaired", task="locate")
    options = read_options(record.prompt, record.trial, "pixels")
    own = f"1={options[0].description.split(' [')[0]} [{record.slots[0]}]"
    text = record.prompt.replace(f"1={options[0].description}", own)
    result = checks.derangement([replace(record, prompt=text)])
    assert reasons(result) == [f"slot(s) [1] glossed with their own name: {[own[2:]]}"]


def test_coinciding_keys_fail_derangement(records):
    record = one(records, convention="hue_glossed_mispaired")
    coord = record.keys["coord"]
    result = checks.derangement([replace(record, keys={"coord": coord, "name": coord})])
    assert reasons(result) == [f"coord and name keys coincide at slot {coord}"]


def test_a_legend_pairing_an_angle_with_its_own_word_fails_derangement(records):
    record = one(records, convention="hue_legend_mispaired")
    trial = record.trial
    angle_of = {anchor.word: anchor.angle for anchor in trial.anchors}
    first = record.slots[0]
    stated = f"{angle_of[first]} is {record.glosses[0]}"
    text = record.prompt.replace(stated, f"{angle_of[first]} is {first}")
    result = checks.derangement([replace(record, prompt=text)])
    assert reasons(result) == [f"slot(s) [1] glossed with their own name: [{str(angle_of[first])!r}]"]


def test_stored_glosses_that_differ_from_the_text_fail_derangement(records):
    record = one(records, convention="hue_glossed_mispaired")
    rotated = record.glosses[1:] + record.glosses[:1]
    result = checks.derangement([replace(record, glosses=rotated)])
    assert reasons(result) == [f"stored glosses {list(rotated)} differ from the prompt text's {list(record.glosses)}"]


def test_an_identify_question_glossed_with_its_own_cell_fails_derangement(records):
    record = one(records, convention="pixels_mispaired", task="identify")
    position = record.prompt.split("at position ")[1].split("?")[0]
    body = position.split(" [")[0]
    text = record.prompt.replace(position, f"{body} [{record.trial.cell}]")
    result = checks.derangement([replace(record, prompt=text)])
    assert reasons(result) == [
        f"the question's position {body!r} is glossed {record.trial.cell!r}, the object's own cell"
    ]


# --- index space -------------------------------------------------------------------------------------


def test_a_word_alphabet_in_canonical_order_fails_index_space(records):
    record = next(r for r in records if r.convention == "word" and r.referents != r.slots)
    result = checks.index_space([replace(record, alphabet=record.referents)])
    assert reasons(result) == [
        f"word alphabet {list(record.referents)} is not the options in slot order {list(record.slots)}"
    ]


def test_a_parsed_word_at_another_slot_fails_index_space(records):
    record = one(records, convention="word", condition="cached")
    other = record.parsed_slot % len(record.slots) + 1
    result = checks.index_space([replace(record, parsed_slot=other)])
    said = record.generation.text.strip().lower()
    assert reasons(result) == [f"parsed slot {other} holds {record.slots[other - 1]!r} but the text says {said!r}"]


def test_a_key_outside_the_options_fails_index_space(records):
    record = one(records, experiment="coco_4x4", convention="cell_name")
    result = checks.index_space([replace(record, keys={"target": 17})])
    assert reasons(result) == ["target slot 17 is outside slots 1..16"]


# --- held-out ----------------------------------------------------------------------------------------


def held_out_record(records):
    return next(r for r in records if r.task == "color" and r.trial.held_out)


def test_trial_anchors_other_than_the_vocabulary_fail_held_out(clean, records):
    record = held_out_record(records)
    trial = record.trial
    moved = tuple(ColorAnchor(a.word, (a.angle + 1) % 360) for a in trial.anchors)
    result = held_out([replace(record, trial=replace(trial, anchors=moved))], find_vocabularies(clean))
    assert len(result.failures) == 1
    assert result.failures[0].reason.startswith("the trial's anchors ")


def test_a_vocabulary_file_that_does_not_load_is_named(clean, records, tmp_path):
    broken = tmp_path / "vocabulary.json"
    data = json.loads(next(clean.rglob("vocabulary.json")).read_text())
    data["held_out"] = data["held_out"][1:]
    broken.write_text(json.dumps(data))
    result = held_out([held_out_record(records)], find_vocabularies(tmp_path))
    (reason,) = reasons(result)
    assert reason.startswith(f"cannot verify: no vocabulary file for sim:qwen3vl-like; {broken} does not load: ")
    assert "stored 'held_out' does not follow from the recorded answers" in reason


def logged_as(record, **parts):
    """The record as read back from a log line whose named parts were logged as given."""
    return Record.from_json(canonical_json({**json.loads(record.to_json()), **parts}))


def test_garbled_records_fail_every_check_that_reads_them_without_stopping_the_audit(records, tmp_path):
    record = one(records, convention="label", condition="visible")
    # Garbled parts are read from a log line, where they are found: a record built in memory holds typed parts.
    garbled = [logged_as(record, trial={}), logged_as(record, generation={"text": "1"}),
               replace(record, convention="x")]  # fmt: skip
    results = {result.name: result for result in audit_records(garbled, find_vocabularies(tmp_path), seed=0)}
    assert reasons(results["prompt-target"])[0] == "record unreadable: KeyError: 'trial_id'"
    assert reasons(results["relabel"]) == [
        "record unreadable: TypeError: Generation.__init__() missing 1 required positional argument: 'finish_reason'",
        "record unreadable: ConvswapError: unknown convention 'x'",
    ]
    assert results["derangement"].checked == 0


# --- the command's refusals -------------------------------------------------------------------------


def test_bad_folders_and_files_exit_2_naming_them(tmp_path, capsys, clean):
    assert main(["audit", str(tmp_path / "nowhere")]) == 2
    assert f"log folder {tmp_path / 'nowhere'} does not exist" in capsys.readouterr().err
    assert main(["audit", str(tmp_path)]) == 2
    assert f"no records found under {tmp_path}" in capsys.readouterr().err
    assert main(["audit", str(clean), "--vocabulary", str(tmp_path / "missing.json")]) == 2
    assert f"vocabulary file not found: {tmp_path / 'missing.json'}" in capsys.readouterr().err
    (tmp_path / "bad.jsonl").write_text("{not json}\n")
    assert main(["audit", str(tmp_path)]) == 2
    assert f"{tmp_path / 'bad.jsonl'}:1: not a log record" in capsys.readouterr().err
