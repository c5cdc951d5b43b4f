"""Building a visual protocol for a benchmark of one's own (ProVisE's builder, its section 2.2 and appendix C.3).

A planner (a text model) receives the items' answer contract, at most three examples with their targets removed,
and the inventory of registered parser operations and declared protocols, and answers with one declaration under
a JSON schema: **reuse** a declared protocol, **build** a new one from registered operations, or **fallback** (a
reader model reads the generated image alone).  The answer is data, never code.  It is checked statically
(`check_answer`), then smoke-validated on a few items with an image model (`smoke`): every image generated, parsed
twice alike without parser failure, and mapped to one of the options.  A protocol that fails is revised once, with
the failure reasons only, then accepted or rejected.  An accepted one is appended to the plan folder's
protocols.toml with a comment naming its route and smoke result, so a plan of that folder runs and pins it like any
declaration.

No path of the builder holds an item's target: the items' targets are dropped when the contract is made
(`Contract`), the smoke trials carry a placeholder target (their first referent; smoke judges whether an answer is
readable, never whether it is right), and only the leakage check sees the examples' answers, to refuse a declaration
that spells one.
"""

from __future__ import annotations

import json
import re
import tempfile
import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from convswap.conventions.declarations import FILE_NAME as CONVENTIONS_FILE
from convswap.core import TASKS, ConvswapError, Generation, Trial
from convswap.defaults import DEFAULT_SMOKE, MAX_EXAMPLES
from convswap.protocols.declarations import FILE_NAME, GUIDANCE_FIELDS, READER_FIELDS, SHIPPED_FILE
from convswap.protocols.layouts import LAYOUTS, OUTER_CELLS, SLOT_LAYOUTS, check_layout
from convswap.protocols.protocol import MARK_COUNTS, OUTPUT_KINDS, PRIMITIVES, Protocol

if TYPE_CHECKING:
    from convswap.conventions.declarations import Catalog
    from convswap.readout.base import Backend
    from convswap.stimuli.items import Item

Route = Literal["reuse", "build", "fallback"]
ROUTES: tuple[Route, ...] = ("reuse", "build", "fallback")
TASK = "choice"  # an items file's items are choice trials
SMOKE_SEED = 0
_NAME = re.compile(r"^[a-z][a-z0-9_]*$")
# A reader prompt holding a piece of an example's question this long is refused; a shorter piece ("Which one?") is
# the wording of any evidence contract, not the question.
MIN_QUESTION_PART = 12


# --- the contract the planner sees ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Contract:
    """What the planner is told about the items: their schema and answer-hidden examples, never a target.

    output_kinds: the outputs an answer of these items can be read from: a slot always (the option's slot), a point
    where every item gives each referent's region, a count where every referent is a whole number.
    """

    items_file: str
    n_items: int
    k: int
    referent_fields: tuple[str, ...]
    regions: bool
    output_kinds: tuple[str, ...]
    examples: tuple[Mapping[str, Any], ...]

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Contract:
        """The contract as the planner reads it from its request (the items file by its name alone)."""
        return cls(data["items_file"], data["n_items"], data["k"], tuple(data["referent_fields"]), data["regions"],
                   tuple(data["output_kinds_that_fit"]), tuple(data["examples"]))  # fmt: skip

    def to_json(self) -> dict[str, Any]:
        return {
            "items_file": Path(self.items_file).name,
            "task": TASK,
            "n_items": self.n_items,
            "k": self.k,
            "answer": f"one of the item's {self.k} referents, scored by accuracy",
            "referent_fields": list(self.referent_fields),
            "regions": self.regions,
            "output_kinds_that_fit": list(self.output_kinds),
            "examples": [dict(example) for example in self.examples],
        }


def contract_of(path: Path, items: Sequence[Item], examples: int) -> Contract:
    """The items' contract with the first `examples` items (at most three) as examples, their targets dropped."""
    from convswap.stimuli.items import description_fields

    if not 0 <= examples <= MAX_EXAMPLES:
        raise ConvswapError(f"--examples must be 0 to {MAX_EXAMPLES}, got {examples}")
    ks = sorted({len(item.referents) for item in items})
    if len(ks) > 1:
        raise ConvswapError(f"items file {path}: items hold {' and '.join(map(str, ks))} referents; a protocol is "
                            f"built for one K, so give items of one K")  # fmt: skip
    kinds = ["slot"]
    if all(item.regions for item in items):
        kinds.append("point")
    if all(referent.isdigit() for item in items for referent, _ in item.referents):
        kinds.append("count")
    shown = tuple(
        {"id": item.id, "question": item.question,
         "referents": {referent: dict(fields) for referent, fields in item.referents},
         **({"regions": {referent: list(box) for referent, box in item.regions}} if item.regions else {})}
        for item in items[:examples]
    )  # fmt: skip
    return Contract(str(path), len(items), ks[0], description_fields(items), "point" in kinds, tuple(kinds), shown)


def example_answers(items: Sequence[Item], examples: int) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """(example id, the values that spell its answer: the target's id and descriptions), for the leakage check only."""
    return tuple(
        (item.id, (item.target, *(text for _, text in dict(item.referents)[item.target]))) for item in items[:examples]
    )


# --- what the planner is asked, and the schema of its answer ----------------------------------------------------


def inventory(catalog: Mapping[str, Protocol]) -> dict[str, Any]:
    """The registered parser operations (parameters, what each needs and gives) and the declared protocols."""
    from convswap.protocols.operations import OPERATIONS

    operations = {
        name: {"does": " ".join((op.function.__doc__ or "").split()),
               "parameters": op.params.model_json_schema().get("properties", {}), "needs": list(op.needs),
               "gives": list(op.gives), "output": op.output}
        for name, op in OPERATIONS.items()
    }  # fmt: skip
    protocols = {name: declaration_of(protocol) for name, protocol in catalog.items()}
    return {"operations": operations, "protocols": protocols}


def declaration_of(protocol: Protocol) -> dict[str, Any]:
    """A protocol as the planner reads and answers one."""
    return {
        "tasks": list(protocol.tasks),
        "guidance": protocol.guidance,
        "primitive": protocol.primitive,
        "color": protocol.color_hex,
        "count": protocol.count,
        "output": protocol.output_kind,
        "layout": protocol.layout,
        "directions": [{"cell": cell, "word": word} for cell, word in protocol.directions] or None,
        "hsv": {
            "hue": list(protocol.hsv.hue),
            "saturation": list(protocol.hsv.saturation),
            "value": list(protocol.hsv.value),
        },  # fmt: skip
        "pipeline": [
            {"op": step.op, "params": [{"name": key, "value": value} for key, value in step.params]}
            for step in protocol.pipeline
        ]
        or None,  # fmt: skip
        "reader": {"model": protocol.reader.model, "prompt": protocol.reader.prompt, "inputs": ["generated"]}
        if protocol.reader
        else None,
    }


def _nullable(schema: dict[str, Any]) -> dict[str, Any]:
    return {"anyOf": [schema, {"type": "null"}]}


def _object(properties: dict[str, Any]) -> dict[str, Any]:
    # Every property required and no other: what OpenAI's strict structured outputs ask of a schema.
    return {"type": "object", "properties": properties, "required": list(properties), "additionalProperties": False}


_PAIR = {"type": "array", "items": {"type": "integer"}}
ANSWER_SCHEMA: dict[str, Any] = _object({
    "route": {"type": "string", "enum": list(ROUTES)},
    "reuse": _nullable({"type": "string"}),
    "name": _nullable({"type": "string"}),
    "declaration": _nullable(_object({
        "tasks": {"type": "array", "items": {"type": "string", "enum": list(TASKS)}},
        "guidance": {"type": "string"},
        "primitive": {"type": "string", "enum": list(PRIMITIVES)},
        "color": {"type": "string"},
        "count": {"type": "string", "enum": list(MARK_COUNTS)},
        "output": {"type": "string", "enum": list(OUTPUT_KINDS)},
        "layout": _nullable({"type": "string", "enum": list(LAYOUTS)}),
        "directions": _nullable({"type": "array", "items": _object({"cell": {"type": "string"},
                                                                   "word": {"type": "string"}})}),
        "hsv": _object({"hue": _PAIR, "saturation": _PAIR, "value": _PAIR}),
        "pipeline": _nullable({"type": "array", "items": _object({
            "op": {"type": "string"},
            "params": {"type": "array", "items": _object({
                "name": {"type": "string"}, "value": {"anyOf": [{"type": "number"}, {"type": "string"}]}})},
        })}),
        "reader": _nullable(_object({"model": {"type": "string"}, "prompt": {"type": "string"},
                                     "inputs": {"type": "array", "items": {"type": "string"}}})),
    })),
    "rationale": {"type": "string"},
})  # fmt: skip
SCHEMA_NAME = "visual_protocol"


def _format_notes() -> str:
    """The declaration format as protocols.toml's header states it."""
    lines = []
    for line in SHIPPED_FILE.read_text(encoding="utf-8").splitlines():
        if not line.startswith("#"):
            break
        lines.append(line[1:].strip())
    return "\n".join(lines)


# Each heads a JSON document of the request, as a simulated planner finds it (`convswap.builder.sim_planner`).
CONTRACT_HEADING = "The task contract and examples (answers withheld):\n"
INVENTORY_HEADING = "The registered parser operations and declared protocols:\n"
REVISION_HEADING = "Your previous answer failed; revise it once. Your previous answer:\n"


def planner_request(contract: Contract, catalog: Mapping[str, Protocol], revision: Revision | None = None) -> str:
    """The whole text the planner is sent."""
    parts = [
        "You design the visual protocol by which an image-generation model answers every item of a benchmark: it "
        "draws its answer into the item's image, and a parser reads the drawing back into one of the item's "
        "options, scored by the benchmark's own metric. Choose one route. reuse: one of the declared protocols "
        "below fits; give its name in `reuse`. build: compose the registered parser operations below into a new "
        "declaration; give its `name` (a new lower-case identifier) and `declaration`. fallback: no pipeline of "
        "the registered operations can read the answer; declare the drawing and a `reader` (a text model spec, "
        'the prompt it reads the generated image with, inputs ["generated"]) and no pipeline; the reader sees '
        "the generated image alone, never the source image or the question.",
        f"A guidance template may name only {', '.join('{' + f + '}' for f in GUIDANCE_FIELDS)}; a reader prompt "
        f"only {', '.join('{' + f + '}' for f in READER_FIELDS)}. Colours are OpenCV HSV: hue 0-179, saturation "
        "and value 0-255. Each pipeline step gives its parameters as name/value pairs. The answer is data only, "
        "never code.",
        "The declaration format (as protocols.toml states it):\n" + _format_notes(),
        CONTRACT_HEADING + json.dumps(contract.to_json(), indent=1),
        INVENTORY_HEADING + json.dumps(inventory(catalog), indent=1),
    ]
    if revision is not None:
        parts.append(
            REVISION_HEADING
            + json.dumps(revision.answer, indent=1)
            + "\nWhy it failed:\n"
            + "\n".join(f"- {reason}" for reason in revision.reasons)
        )
    return "\n\n".join(parts)


@dataclass(frozen=True)
class Revision:
    """What a revision request adds: the previous answer and why it failed (never whether it was right)."""

    answer: Mapping[str, Any]
    reasons: tuple[str, ...]


class Planner(typing.Protocol):
    """What the builder asks: a text answer under a JSON schema (an API text model's `structured`)."""

    spec: str

    def structured(self, text: str, schema: Mapping[str, Any], name: str) -> Generation: ...

    def close(self) -> None: ...


def ask_planner(planner: Planner, text: str) -> dict[str, Any]:
    """The planner's answer as JSON; a failed request or an answer that is no JSON object is one line."""
    generation = planner.structured(text, ANSWER_SCHEMA, SCHEMA_NAME)
    if generation.error:
        raise ConvswapError(f"the planner's request failed: {generation.error}")
    try:
        answer = json.loads(generation.text or "")
    except json.JSONDecodeError as error:
        raise ConvswapError(f"planner {planner.spec}: its answer is not JSON ({error.msg}), got "
                            f"{(generation.text or '')[:80]!r}") from None  # fmt: skip
    if not isinstance(answer, dict) or answer.get("route") not in ROUTES:
        raise ConvswapError(f"planner {planner.spec}: route: must be one of {', '.join(ROUTES)}, got "
                            f"{answer.get('route') if isinstance(answer, dict) else answer!r}")  # fmt: skip
    return answer


# --- static checks ----------------------------------------------------------------------------------------------


class Refused(ConvswapError):
    """The planner's answer failed a static check; the message is one line naming the field."""


@dataclass(frozen=True)
class Candidate:
    """An answer that passed the static checks: its route and protocol, and the table to declare (None on reuse)."""

    route: Route
    protocol: Protocol
    table: dict[str, Any] | None


def table_of(declaration: Mapping[str, Any]) -> dict[str, Any]:
    """The planner's declaration as a protocols.toml table: nulls left out, parameters and directions as tables."""
    table: dict[str, Any] = {}
    for key, value in declaration.items():
        if value is None:
            continue
        if key == "pipeline" and isinstance(value, list):
            value = [_step_table(step) for step in value]
        elif key == "directions" and isinstance(value, list):
            value = {pair.get("cell"): pair.get("word") for pair in value if isinstance(pair, dict)}
        table[key] = value
    return table


def _step_table(step: Any) -> Any:
    if not isinstance(step, dict) or not isinstance(step.get("params", []), list):
        return step
    params = {p.get("name"): p.get("value") for p in step.get("params", []) if isinstance(p, dict)}
    return {"op": step.get("op"), **params}


def protocol_of(name: str, table: Mapping[str, Any]) -> Protocol:
    """A declaration's protocols.toml table (`table_of`) as a protocol, or `Refused` naming its first bad field."""
    from pydantic import ValidationError

    from convswap.protocols.declarations import Declaration
    from convswap.validation import first_problem, shown

    try:
        return Declaration.model_validate(table).protocol(name, table)
    except ValidationError as error:
        field, reason, value = first_problem(error)
        raise Refused(f"{name}.{field}: {reason}, got {shown(value)}") from None


def check_answer(
    answer: Mapping[str, Any],
    contract: Contract,
    catalog: Mapping[str, Protocol],
    taken: set[str],
    answers: Sequence[tuple[str, Sequence[str]]],
) -> Candidate:
    """The answer as a checked candidate, or `Refused` in one line naming the field.

    taken: names a new protocol may not have (text conventions, declared protocols).  answers: the examples'
    answer values, refused anywhere in a guidance or reader prompt.
    """
    route: Route = answer["route"]
    if route == "reuse":
        reused = answer.get("reuse")
        if not isinstance(reused, str) or reused not in catalog:
            raise Refused(f"reuse: names no declared protocol (known: {', '.join(catalog)}), got {reused!r}")
        protocol = catalog[reused]
        _check_fits(protocol, contract, "reuse")
        return Candidate(route, protocol, None)
    name = answer.get("name")
    if not isinstance(name, str) or not _NAME.match(name):
        raise Refused(f"name: must be a lower-case identifier (a-z, 0-9, _), got {name!r}")
    if name in taken:
        raise Refused(f"name: is already a declared protocol's or convention's, got {name!r}")
    declaration = answer.get("declaration")
    if not isinstance(declaration, dict):
        raise Refused(f"declaration: must be a table for route {route}, got {declaration!r}")
    table = table_of(declaration)
    protocol = protocol_of(name, table)
    if route == "build" and not protocol.pipeline:
        raise Refused(f"{name}.pipeline: a build composes registered operations; without one it is the fallback "
                      f"route")  # fmt: skip
    if route == "fallback" and (protocol.pipeline or protocol.reader is None):
        field = "pipeline" if protocol.pipeline else "reader"
        raise Refused(f"{name}.{field}: a fallback protocol is read by its reader alone: a reader and no pipeline")
    _check_fits(protocol, contract, name)
    _check_leaks(protocol, answers, contract)
    if protocol.reader is not None:
        _check_reader_model(protocol)
    return Candidate(route, protocol, table)


def _check_fits(protocol: Protocol, contract: Contract, where: str) -> None:
    if TASK not in protocol.tasks:
        raise Refused(f"{where}.tasks: must include {TASK}, the items' task, got {list(protocol.tasks)}")
    if protocol.output_kind not in contract.output_kinds:
        why = {"point": "the items give no region per referent", "count": "the items' referents are not counts"}
        raise Refused(f"{where}.output: {protocol.output_kind} does not read these items' answer "
                      f"({why.get(protocol.output_kind, '')}; what fits: {', '.join(contract.output_kinds)})")  # fmt: skip
    if protocol.layout == "grid3x3_outer":
        words = {word for _, word in protocol.directions}
        referents = {referent for example in contract.examples for referent in example["referents"]}
        if not referents <= words:
            raise Refused(f"{where}.directions: the referents {sorted(referents - words)} are no direction of the "
                          f"grid's outer cells ({', '.join(OUTER_CELLS)})")  # fmt: skip
    if protocol.layout in SLOT_LAYOUTS:
        try:
            check_layout(protocol.layout, contract.k)
        except ConvswapError as error:
            raise Refused(f"{where}.layout: {error}") from None


def _check_leaks(protocol: Protocol, answers: Sequence[tuple[str, Sequence[str]]], contract: Contract) -> None:
    texts = [("guidance", protocol.guidance)]
    if protocol.reader is not None:
        texts.append(("reader.prompt", protocol.reader.prompt))
    restated = {value.lower() for _, values in answers for value in values}
    for field, text in texts:
        lowered = text.lower()
        if any(re.search(rf"(?<!\w){re.escape(value)}(?!\w)", lowered) for value in restated):
            # Neither the value nor the example: the revision request carries this line, and either would tell
            # the planner an answer.
            raise Refused(f"{protocol.name}.{field}: restates an example's answer (answer leakage)")
    if protocol.reader is not None:
        for shown in contract.examples:
            for part in shown["question"].split("{options}"):
                if len(part.strip()) >= MIN_QUESTION_PART and part.strip().lower() in protocol.reader.prompt.lower():
                    raise Refused(f"{protocol.name}.reader.prompt: holds the question of example {shown['id']}; a "
                                  f"reader never receives the question")  # fmt: skip


def _check_reader_model(protocol: Protocol) -> None:
    from convswap.readout.registry import backend_entry

    assert protocol.reader is not None
    try:
        entry = backend_entry(protocol.reader.model)
    except ConvswapError as error:
        raise Refused(f"{protocol.name}.reader.model: {error}") from None
    if "text" not in entry.interfaces:
        raise Refused(f"{protocol.name}.reader.model: {protocol.reader.model} does not answer in text")


# --- smoke validation -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SmokeItem:
    """One smoke item: ok, or the failure (generation_failure, protocol_noncompliance, parser_failure, unstable,
    no_option) and why."""

    item: str
    outcome: str
    reason: str | None = None

    def line(self) -> str:
        return f"item {self.item}: {self.outcome}" + (f": {self.reason}" if self.reason else "")


def blind(trial: Trial) -> Trial:
    """The trial with a placeholder target (its first referent): smoke never needs an answer, and holds none."""
    return replace(trial, target=trial.referents[0])


def smoke(
    protocol: Protocol, trials: Sequence[Trial], painter: Backend, catalog: Catalog, reader: Backend | None
) -> list[SmokeItem]:
    """Each trial drawn by the painter under the protocol, parsed (twice, to agree) or read, mapped to an option."""
    from convswap.protocols.answers import answer_of
    from convswap.readout.base import Query
    from convswap.runs.pixel_answers import parse_kept, protocol_prompt
    from convswap.runs.protocol_reader import read_image
    from convswap.stimuli.render import render_image

    results = []
    for trial in trials:
        prompt = protocol_prompt(trial, protocol, catalog)
        source = render_image(trial.image)
        drawing = painter.draw(Query(source, (prompt,), "visible", trial, (protocol,)))[0]
        if drawing.api_error:
            raise ConvswapError(f"smoke could not run: the painter's request for item {trial.trial_id} failed "
                                f"({drawing.failure}); nothing was written, run again")  # fmt: skip
        if drawing.image is None:
            results.append(SmokeItem(trial.trial_id, "generation_failure", drawing.failure))
            continue
        image = drawing.image.convert("RGB")
        if not protocol.pipeline:
            assert reader is not None
            reading = read_image(reader, protocol, prompt, image)
            if reading.error:
                raise ConvswapError(f"smoke could not run: the reader's request failed ({reading.error})")
            results.append(SmokeItem(trial.trial_id, "ok") if reading.slot else
                           SmokeItem(trial.trial_id, "no_option", f"the reader answered {reading.text!r}"))  # fmt: skip
            continue
        parse = parse_kept(protocol, image, source, prompt.k)
        if parse.to_json() != parse_kept(protocol, image, source, prompt.k).to_json():
            results.append(SmokeItem(trial.trial_id, "unstable", "two parses of the image differ"))
        elif parse.status != "ok":
            results.append(SmokeItem(trial.trial_id, parse.status, parse.reason))
        elif not answer_of(protocol, parse, trial, prompt.slots):
            results.append(SmokeItem(trial.trial_id, "no_option", "the parse answers none of the options"))
        else:
            results.append(SmokeItem(trial.trial_id, "ok"))
    return results


# --- the build ----------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Attempt:
    """One planner answer: its route and protocol name, the refusal of the static checks, and the smoke results."""

    answer: Mapping[str, Any]
    refusal: str | None = None
    candidate: Candidate | None = None
    smoke: tuple[SmokeItem, ...] = ()

    @property
    def passed(self) -> bool:
        return self.candidate is not None and bool(self.smoke) and all(s.outcome == "ok" for s in self.smoke)

    def reasons(self) -> tuple[str, ...]:
        if self.refusal:
            return (f"static check: {self.refusal}",)
        return tuple(f"smoke: {s.line()}" for s in self.smoke if s.outcome != "ok")


@dataclass(frozen=True)
class Build:
    """The builder's verdict on one items file: its attempts (one, or a first and its revision)."""

    contract: Contract
    attempts: tuple[Attempt, ...]

    @property
    def accepted(self) -> Attempt | None:
        return self.attempts[-1] if self.attempts[-1].passed else None

    @property
    def stage(self) -> str:
        if self.accepted is None:
            return "rejected"
        return "pass (initial)" if len(self.attempts) == 1 else "pass (revision)"


def build_protocol(
    items_path: Path,
    planner: Planner,
    painter: Backend,
    plan_dir: Path,
    *,
    examples: int = MAX_EXAMPLES,
    n_smoke: int = DEFAULT_SMOKE,
    image_root: Path | None = None,
) -> Build:
    """Plan, check and smoke-validate a protocol for the items (their images under `image_root`, else the items
    file's folder); revise once on failure.  Writes nothing."""
    from convswap.conventions.declarations import conventions_of
    from convswap.protocols.declarations import load_protocols
    from convswap.readout.registry import load_backend
    from convswap.stimuli.items import read_items, select_items

    items = read_items(items_path, image_root=image_root, root_named_by="--image-root")
    contract = contract_of(items_path, items, examples)
    answers = example_answers(items, examples)
    catalog = load_protocols(plan_dir)
    conventions = conventions_of(plan_dir)
    taken = set(catalog) | set(conventions)
    if not (plan_dir / CONVENTIONS_FILE).is_file():
        raise ConvswapError(f"--out {plan_dir}: holds no {CONVENTIONS_FILE}; a guidance prompt asks the question in "
                            f"a convention of {TASK} items it declares (write the items' own {CONVENTIONS_FILE} "
                            f"there)")  # fmt: skip
    if not any(TASK in convention.tasks for convention in conventions.values()):
        raise ConvswapError(f"--out {plan_dir}: its {CONVENTIONS_FILE} declares no convention of {TASK} items, which "
                            f"a guidance prompt asks the question in (the items' own conventions.toml)")  # fmt: skip
    if n_smoke < 1:
        raise ConvswapError(f"--smoke must be at least 1, got {n_smoke}")
    trials = [blind(item.trial()) for item in select_items(items, min(n_smoke, len(items)), SMOKE_SEED)]
    del items  # from here on nothing holds a target
    attempts: list[Attempt] = []
    revision = None
    for _ in range(2):
        answer = ask_planner(planner, planner_request(contract, catalog, revision))
        try:
            candidate = check_answer(answer, contract, catalog, taken, answers)
        except Refused as refused:
            attempts.append(Attempt(answer, refusal=str(refused)))
        else:
            reader = None
            if candidate.protocol.reader is not None and not candidate.protocol.pipeline:
                reader = load_backend(candidate.protocol.reader.model)
            try:
                results = smoke(candidate.protocol, trials, painter, conventions, reader)
            finally:
                if reader is not None and hasattr(reader, "close"):
                    reader.close()
            attempts.append(Attempt(answer, candidate=candidate, smoke=tuple(results)))
        if attempts[-1].passed:
            break
        revision = Revision(answer, attempts[-1].reasons())
    return Build(contract, tuple(attempts))


# --- the plan folder's declaration and the report ---------------------------------------------------------------


def smoke_summary(attempt: Attempt) -> str:
    ok = sum(s.outcome == "ok" for s in attempt.smoke)
    read = (
        "read by its reader" if attempt.candidate and not attempt.candidate.protocol.pipeline else "parsed alike twice"
    )
    return f"{ok}/{len(attempt.smoke)} smoke items drawn, {read} and mapped to an option"


def declare(build: Build, plan_dir: Path, painter: str) -> Path:
    """Append the accepted protocol to the folder's protocols.toml, atomically, with a comment naming its route and
    smoke result; the whole file is checked before it replaces the old one."""
    import tomli_w

    from convswap.fileio import atomic_write_text
    from convswap.protocols.declarations import load_protocol_file

    attempt = build.accepted
    assert attempt is not None and attempt.candidate is not None
    candidate = attempt.candidate
    path = plan_dir / FILE_NAME
    old = path.read_text(encoding="utf-8") if path.is_file() else ""
    comment = (f"# {build.contract.items_file}: route {candidate.route}, smoke {build.stage} on {painter}: "
               f"{smoke_summary(attempt)}.")  # fmt: skip
    if candidate.table is None:
        block = f"{comment}\n# It reuses the declared protocol {candidate.protocol.name}; nothing new is declared.\n"
    else:
        block = f"{comment}\n{tomli_w.dumps({candidate.protocol.name: candidate.table})}"
    new = (old.rstrip("\n") + "\n\n" if old.strip() else "") + block
    with tempfile.TemporaryDirectory() as scratch:  # the whole new file is read back before it replaces the old
        (Path(scratch) / FILE_NAME).write_text(new, encoding="utf-8")
        load_protocol_file(Path(scratch) / FILE_NAME)
    plan_dir.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, new)
    return path


def _construction(protocol: Protocol | None) -> str:
    if protocol is None:
        return "-"
    where = f" in {protocol.layout} slots" if protocol.layout else ""
    return f"{protocol.count} {protocol.primitive} {protocol.color_hex}{where}, {protocol.output_kind} output"


def _parser(protocol: Protocol | None) -> str:
    if protocol is None:
        return "-"
    if not protocol.pipeline:
        return f"reader {protocol.reader.model}" if protocol.reader else "-"
    return " -> ".join(step.op for step in protocol.pipeline)


def report(build: Build) -> str:
    """ProVisE's Table 10 for one items file, one row per attempt (route, construction, parser, metric, checks,
    smoke), then the verdict and the reasons of every attempt that failed."""
    rows = ["| items | task | N | K | attempt | route | protocol | construction | parser | metric | checks | smoke |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    contract = build.contract
    for index, attempt in enumerate(build.attempts):
        protocol = attempt.candidate.protocol if attempt.candidate else None
        name = protocol.name if protocol else attempt.answer.get("name") or attempt.answer.get("reuse")
        smoke = f"{sum(s.outcome == 'ok' for s in attempt.smoke)}/{len(attempt.smoke)}" if attempt.smoke else "-"
        rows.append(f"| {contract.items_file} | {TASK} | {contract.n_items} | {contract.k} | "
                    f"{'initial' if index == 0 else 'revision'} | {attempt.answer.get('route')} | {name} | "
                    f"{_construction(protocol)} | {_parser(protocol)} | accuracy | "
                    f"{'refused' if attempt.refusal else 'passed'} | {smoke} |")  # fmt: skip
    lines = [*rows, "", f"verdict: {build.stage}"]
    for index, attempt in enumerate(build.attempts):
        lines += [f"  {'initial' if index == 0 else 'revision'}: {reason}" for reason in attempt.reasons()]
    return "\n".join(lines)
