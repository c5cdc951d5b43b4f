"""One name, one meaning: which records are mispaired, and what `model` means to `select` and `group_by`; and an
index-space record the audit cannot read through."""

from __future__ import annotations

from dataclasses import replace

from analysis_factory import color_trial, locate_trial, make_record, planted_readership

from convswap.analysis.loading import group_by, select
from convswap.analysis.mispaired import is_mispaired, readership_of
from convswap.audits.checks import derangement, index_space
from convswap.conventions.render import render
from convswap.core import Generation, ImageSpec, Trial

CATEGORIES = ("cup", "dog", "cat", "car", "bus", "tie")


def identify_trial(index: int) -> Trial:
    """An identify trial: the question names the cell of a cup, the options are six categories."""
    locate = locate_trial(index)
    return Trial(f"identify-{index}", "identify", CATEGORIES, "cup", ImageSpec.of("file", path=f"img{index}.jpg"),
                 locate.width, locate.height, grid=3, cell=locate.cell)  # fmt: skip


def identify_record(index: int, convention: str, answer: int | None):
    return make_record(identify_trial(index), convention, answer, experiment="coco_locate_identify")


def test_a_mispaired_identify_record_is_mispaired_though_it_has_no_name_key():
    record = identify_record(0, "pixels_mispaired", 1)
    assert set(record.keys) == {"coord"}
    assert is_mispaired(record)
    assert is_mispaired(make_record(locate_trial(0), "pixels_mispaired", 1, experiment="x"))
    assert not is_mispaired(identify_record(0, "pixels_glossed", 1))
    assert not is_mispaired(make_record(locate_trial(0), "pixels", 1, experiment="x"))


def test_a_record_is_mispaired_by_its_keys_whatever_its_conventions_name():
    # Conventions are declared per plan folder, so a name the shipped list lacks can be a user's mispaired one: the
    # record's keys, written by the renderer, say which it is.
    record = replace(make_record(locate_trial(0), "pixels_mispaired", 1, experiment="x"), convention="pixels_swapped")
    assert is_mispaired(record)
    plain = replace(make_record(locate_trial(0), "pixels", 1, experiment="x"), convention="thousandths")
    assert not is_mispaired(plain)


def test_the_derangement_audit_checks_mispaired_identify_records_by_the_same_definition():
    records = [identify_record(i, "pixels_mispaired", 1) for i in range(3)]
    records += [identify_record(i, "pixels", 1) for i in range(2)]
    result = derangement(records)
    assert (result.checked, result.failures) == (3, [])


def test_readership_compares_keys_only_where_a_record_has_both():
    trials = [locate_trial(i) for i in range(10)]
    follows = ["coord"] * 4 + ["name"] * 3 + ["neither"] * 3
    locate = planted_readership(trials, "pixels_mispaired", follows.__getitem__, experiment="coco_locate_identify")
    identify = [identify_record(i, "pixels_mispaired", 1) for i in range(5)]
    share = readership_of(locate + identify).readership
    assert (share.follows_coord, share.follows_name, share.n, share.k) == (4, 3, 10, 9)


def test_the_identify_prompt_glosses_the_question_not_the_options():
    prompt = render(identify_trial(0), "pixels_mispaired")
    assert prompt.glosses == () and dict(prompt.keys) == {"coord": prompt.slots.index("cup") + 1}


def test_select_matches_model_as_group_by_groups_it():
    records = [
        make_record(locate_trial(i), "pixels", 1, experiment="x", model="hf:m", quant=quant)
        for i, quant in enumerate((None, "4bit", "8bit", "4bit"))
    ]
    groups = group_by(records, "model")
    assert list(groups) == [("hf:m",), ("hf:m (4bit)",), ("hf:m (8bit)",)]
    for (model,), members in groups.items():
        assert select(records, model=model) == members
    assert select(records, model=("hf:m (4bit)", "hf:m (8bit)")) == records[1:]


def test_the_index_space_audit_names_an_ok_parse_without_a_slot():
    record = make_record(color_trial("c", "green"), "word", 1, experiment="color_ladder", readout="generate")
    record = replace(record, generation=Generation(record.slots[0], "stop"))
    assert (record.parse_status, record.parsed_slot) == ("ok", 1)
    result = index_space([replace(record, parsed_slot=None)])
    assert [failure.reason for failure in result.failures] == ["parse status ok but no parsed slot"]
    assert index_space([record]).failures == []
