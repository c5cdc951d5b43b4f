"""Records with planted outcomes for the analysis tests: real trials rendered by the real conventions."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Callable, Iterable
from pathlib import Path

from convswap.analysis.generate import generate
from convswap.conventions.cells import cell_center_px, cell_names
from convswap.conventions.render import render
from convswap.core import ColorAnchor, FirstTokenReadout, Generation, ImageSpec, Prompt, Record, Trial

CELLS = cell_names(3)
WIDTH, HEIGHT = 640, 426
COLOR_ANCHORS = (
    ColorAnchor("orange", 30),
    ColorAnchor("yellow", 80),
    ColorAnchor("green", 145),
    ColorAnchor("blue", 230),
    ColorAnchor("purple", 290),
    ColorAnchor("pink", 340),
)
COLOR_WORDS = tuple(anchor.word for anchor in COLOR_ANCHORS)


def locate_trial(index: int, *, category: str = "cup", area: float = 0.01, margin: float = 0.1) -> Trial:
    """A COCO-like locate trial whose object sits at the center of cell index % 9."""
    cell = CELLS[index % 9]
    row, column = divmod(CELLS.index(cell), 3)
    center = cell_center_px(row, column, WIDTH, HEIGHT, 3)
    return Trial(
        trial_id=f"coco-{index}",
        task="locate",
        referents=CELLS,
        target=cell,
        image=ImageSpec.of("file", path=f"img{index}.jpg"),
        width=WIDTH,
        height=HEIGHT,
        grid=3,
        subject=category,
        cell=cell,
        meta=(("area_fraction", area), ("center", (float(center[0]), float(center[1]))), ("margin", margin)),
    )


def color_trial(trial_id: str, target: str, *, meta: tuple = ()) -> Trial:
    return Trial(
        trial_id=trial_id,
        task="color",
        referents=COLOR_WORDS,
        target=target,
        image=ImageSpec.of("file", path=f"{trial_id}.png"),
        width=256,
        height=256,
        grid=3,
        subject="top-left",
        anchors=COLOR_ANCHORS,
        held_out=True,
        meta=meta,
    )


def make_record(
    trial: Trial,
    convention: str,
    answer: int | None,
    *,
    experiment: str,
    model: str = "sim:a",
    quant: str | None = None,
    condition: str = "visible",
    readout: str = "first_token",
    logits: Iterable[float] | None = None,
    parsed_slot: int | None = None,
    parse_status: str = "ok",
    prompt: Prompt | None = None,
) -> Record:
    """A record of `trial` under `convention` whose scored answer is slot `answer` (None: not scored).

    With readout first_token the answer is the first-token argmax (logits planted
    to match unless given); `parsed_slot` is the generation's slot, if any.
    """
    prompt = prompt or render(trial, convention)
    keys = dict(prompt.keys)
    k = prompt.k
    first_token = None
    if readout == "first_token" and answer is not None:
        values = list(logits) if logits is not None else [5.0 if slot == answer else 0.0 for slot in range(1, k + 1)]
        first_token = FirstTokenReadout(
            surface="bare",
            candidate_token_ids=tuple(range(k)),
            candidate_logits=tuple(values),
            candidate_mass=0.9,
            top=(),
            slot=answer,
        )
    generation = None if parsed_slot is None and readout == "first_token" else Generation("x", "stop")
    if readout == "generate":
        parsed_slot = answer
        if answer is None and parse_status == "ok":
            parse_status = "unparseable"
    return Record(
        experiment=experiment,
        plan_hash="0" * 64,
        package_version="0.1.0",
        model=model,
        model_revision="r",
        quant=quant,
        backend="sim",
        condition=condition,
        convention=convention,
        task=trial.task,
        trial_id=trial.trial_id,
        referents=trial.referents,
        slots=prompt.slots,
        glosses=prompt.glosses,
        keys=keys,
        prompt=prompt.text,
        prompt_sha256=prompt.sha256,
        acknowledgement=None,
        image_sha256="0" * 64,
        alphabet=prompt.alphabet,
        readout=readout,
        first_token=first_token,
        first_token_refused=None,
        generation=generation,
        parsed_slot=parsed_slot,
        parse_status=parse_status,
        answer_slot=answer,
        correct={name: answer is not None and answer == slot for name, slot in keys.items()},
        trial=trial,
        timestamp="2026-11-29T00:00:00Z",
    )


def slot_of(trial: Trial, convention: str, referent: str) -> int:
    return render(trial, convention).slots.index(referent) + 1


def wrong_slot(trial: Trial, convention: str, avoid: Iterable[int] = ()) -> int:
    """A slot that is none of the keys (nor any slot in `avoid`)."""
    prompt = render(trial, convention)
    taken = set(dict(prompt.keys).values()) | set(avoid)
    return next(slot for slot in range(1, prompt.k + 1) if slot not in taken)


def planted(
    trials: Iterable[Trial],
    convention: str,
    right: Callable[[int], bool],
    **fields,
) -> list[Record]:
    """One record per trial: right on trial i when right(i), else a wrong slot."""
    records = []
    for index, trial in enumerate(trials):
        prompt = render(trial, convention)
        key = dict(prompt.keys).get("target", dict(prompt.keys).get("coord"))
        answer = key if right(index) else wrong_slot(trial, convention)
        records.append(make_record(trial, convention, answer, prompt=prompt, **fields))
    return records


def planted_readership(
    trials: Iterable[Trial], convention: str, follows: Callable[[int], str], **fields
) -> list[Record]:
    """One mispaired record per trial, answering the key follows(i) names (`coord` or `name`), else neither."""
    records = []
    for index, trial in enumerate(trials):
        prompt = render(trial, convention)
        keys = dict(prompt.keys)
        choice = follows(index)
        answer = keys[choice] if choice in keys else wrong_slot(trial, convention)
        records.append(make_record(trial, convention, answer, prompt=prompt, **fields))
    return records


CROSSOVER_SWAPS = (("green", "blue", "pink"), ("orange", "purple", "yellow"), ("yellow", "green", "blue"))


def crossover_records(score: Callable[..., float], convention: str = "label") -> list[Record]:
    """Six cached color_ladder records per pair of CROSSOVER_SWAPS (X, Y swapped; Z untouched).

    score(array, role, word, target, (X, Y)) is the logit planted for `word`; the answer is the argmax.
    """
    records = []
    for index, (x, y, z) in enumerate(CROSSOVER_SWAPS):
        targets = {("A", "first"): x, ("B", "first"): y, ("A", "second"): y, ("B", "second"): x}
        targets.update({("A", "untouched"): z, ("B", "untouched"): z})
        for (array, role), target in targets.items():
            meta = (("array", array), ("pair", f"p{index}"), ("role", role))
            trial = color_trial(f"x{index}-{array}-{role}", target, meta=meta)
            prompt = render(trial, convention)
            logits = [score(array, role, word, target, (x, y)) for word in prompt.slots]
            answer = logits.index(max(logits)) + 1
            records.append(
                make_record(
                    trial,
                    convention,
                    answer,
                    experiment="color_ladder",
                    condition="cached",
                    logits=logits,
                    prompt=prompt,
                )
            )
    return records


def write_jsonl(path: Path, records: Iterable[Record]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(record.to_json() + "\n" for record in records), encoding="utf-8")
    return path


def as_json_lines(records: Iterable[Record]) -> list[dict]:
    return [json.loads(record.to_json()) for record in records]


def rows(out: Path, name: str) -> list[dict[str, str]]:
    """The rows of a generated table, read from its CSV."""
    with (out / f"{name}.csv").open(encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def row(out: Path, name: str, **match: str) -> dict[str, str]:
    """The one row of a generated table whose cells equal `match`."""
    found = [r for r in rows(out, name) if all(r[key] == value for key, value in match.items())]
    assert len(found) == 1, f"{name}: {len(found)} rows match {match}"
    return found[0]


def planted_tables(root: Path, experiment: str, plan: str, right: dict[tuple[str, str], set[int]], items: int) -> Path:
    """The tables of a plan folder holding `plan`, generated from one record per locate trial for each (model,
    convention) of `right`, right on the trial indices it holds; what generate said is kept in root/messages.txt."""
    (root / "plans").mkdir(parents=True)
    (root / "plans" / f"{experiment}.toml").write_text(plan, encoding="utf-8")
    trials = [locate_trial(index) for index in range(items)]
    records = [record for (model, convention), answered in right.items()
               for record in planted(trials, convention, answered.__contains__, experiment=experiment, model=model)]  # fmt: skip
    write_jsonl(root / "logs" / "planted.jsonl", records)
    messages = io.StringIO()
    summary = generate(root / "logs", root / "out", plan_dir=root / "plans", messages=messages)
    assert summary.failed == []
    (root / "messages.txt").write_text(messages.getvalue())
    return root / "out"
