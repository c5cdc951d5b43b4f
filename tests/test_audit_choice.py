"""The audits read a choice item's prompt back through the item's own descriptions: each option and each gloss
names the one referent the item describes in those words, so a key that points elsewhere is caught."""

from __future__ import annotations

from dataclasses import replace

from convention_support import BOXES, CHOICE, choice_item, declare
from runner_support import record

from convswap.audits import checks
from convswap.audits.prompt_text import read_options
from convswap.conventions.declarations import conventions_of
from convswap.conventions.render import render
from convswap.core import Prompt, Record


def logged(prompt: Prompt) -> Record:
    item = choice_item()
    return record(item.trial_id, experiment="items", task="choice", convention=prompt.convention, trial=item,
                  referents=item.referents, slots=prompt.slots, glosses=prompt.glosses, keys=dict(prompt.keys),
                  prompt=prompt.text, alphabet=prompt.alphabet, generation=None, parsed_slot=None,
                  parse_status="empty", answer_slot=None, correct={key: False for key, _ in prompt.keys})  # fmt: skip


def test_the_options_and_glosses_of_a_choice_prompt_read_back_to_the_items_referents(tmp_path):
    declare(tmp_path, CHOICE)
    catalog = conventions_of(tmp_path)
    item = choice_item()
    plain = render(item, catalog["box"], order=("c", "a", "b"))
    assert [(o.referent, o.gloss) for o in read_options(plain.text, item, None)] == [("c", None), ("a", None),
                                                                                     ("b", None)]  # fmt: skip
    mispaired = render(item, catalog["box_named_mispaired"], order=("a", "b", "c"), mispairing=(1, 2, 0))
    read = read_options(mispaired.text, item, None)
    assert [(o.referent, o.gloss) for o in read] == [("a", "b"), ("b", "c"), ("c", "a")]


def test_the_audit_passes_a_true_choice_record_and_catches_a_wrong_key(tmp_path):
    declare(tmp_path, CHOICE)
    catalog = conventions_of(tmp_path)
    item = choice_item()
    true_records = [logged(render(item, catalog[name])) for name in ("box", "box_named_mispaired")]
    for check in (checks.prompt_target, checks.derangement, checks.index_space):
        result = check(true_records, catalog)
        assert result.passed, result.failures
    assert checks.derangement(true_records, catalog).checked == 1

    box = true_records[0]
    wrong = box.keys["target"] % 3 + 1
    result = checks.prompt_target([replace(box, keys={"target": wrong})], catalog)
    shown = box.slots[wrong - 1]
    assert [failure.reason for failure in result.failures] == [
        f"key target={wrong}: option {BOXES[shown]!r} denotes {shown!r}, not the target 'b'"
    ]
    mispaired = true_records[1]
    swapped = {"coord": mispaired.keys["name"], "name": mispaired.keys["coord"]}
    assert not checks.prompt_target([replace(mispaired, keys=swapped)], catalog).passed
