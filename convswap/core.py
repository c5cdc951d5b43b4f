"""Core types shared by every area of convswap.

The data flow is: stimuli make a `Trial` -> a convention renders it into a
`Prompt` -> a backend reads the model and returns a `FirstTokenReadout` and/or a
`Generation` -> the parser maps the text to a slot -> the runner writes a
`Record`.  Everything after rendering speaks in *slots* of one prompt (1..K):
a parser never returns an index into any other list.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from functools import cache, cached_property
from typing import Any, Literal, NamedTuple, get_args

Task = Literal["locate", "identify", "color", "choice"]  # choice: a multiple-choice item of a user's benchmark
Condition = Literal["visible", "cached"]
Side = Literal["answer", "question"]
Gloss = Literal["none", "glossed", "mispaired"]
OutputFormat = Literal["integer", "word"]
# The last three are the unscored outcomes of a pixel answer (`PixelAnswer.outcome`), counted apart like the rest.
ParseStatus = Literal[
    "ok", "unparseable", "empty", "truncated", "refused", "api_error",
    "generation_failure", "protocol_noncompliance", "parser_failure",
]  # fmt: skip
Interface = Literal["text", "image"]  # what a backend answers in: text under a convention, pixels under a protocol
# ProVisE's five outcomes of a pixel answer, in its precedence (appendix C.7): the first that applies is the one.
Outcome = Literal["generation_failure", "protocol_noncompliance", "parser_failure", "incorrect", "correct"]

TASKS: tuple[Task, ...] = get_args(Task)
CONDITIONS: tuple[Condition, ...] = get_args(Condition)
PARSE_STATUSES: tuple[ParseStatus, ...] = get_args(ParseStatus)
# How an answer was read: the restricted first token, a parsed generation, or a parsed drawing.
Readout = Literal["first_token", "generate", "pixels"]
READOUTS: tuple[Readout, ...] = get_args(Readout)
INTERFACES: tuple[Interface, ...] = get_args(Interface)
OUTCOMES: tuple[Outcome, ...] = get_args(Outcome)
UNSCORED_OUTCOMES: tuple[Outcome, ...] = OUTCOMES[:3]
TEXT_PARSE_STATUSES: tuple[ParseStatus, ...] = tuple(s for s in PARSE_STATUSES if s not in UNSCORED_OUTCOMES)


class ConvswapError(Exception):
    """An error a user can act on; the CLI prints its message on one line and exits 2."""


def sha256_hex(data: bytes | str) -> str:
    if isinstance(data, str):
        data = data.encode("utf-8")
    return hashlib.sha256(data).hexdigest()


class FrozenMapping(tuple):
    """A mapping frozen into sorted (key, value) pairs, so that it can sit in a frozen dataclass.

    A distinct type, so that thawing tells a frozen mapping from a frozen list
    that happens to hold pairs.
    """


def freeze(mapping: Mapping[str, Any]) -> FrozenMapping:
    """A JSON-like mapping in hashable form: nested mappings frozen too, lists as tuples."""
    return FrozenMapping(sorted((str(key), _freeze_value(value)) for key, value in mapping.items()))


ALREADY_FROZEN = (str, int, float, type(None), FrozenMapping)


def _freeze_value(value: Any) -> Any:
    # Scalars first: they are most values, and the Mapping test below is an abstract-class check, which is slow.
    if isinstance(value, ALREADY_FROZEN):
        return value
    if isinstance(value, Mapping):
        return freeze(value)
    if isinstance(value, list | tuple):
        return tuple(_freeze_value(v) for v in value)
    return value


def thaw(value: Any) -> Any:
    """The JSON form of a frozen value: frozen mappings as dicts, tuples as lists."""
    if isinstance(value, FrozenMapping):
        return {key: thaw(v) for key, v in value}
    if isinstance(value, tuple):
        return [thaw(v) for v in value]
    return value


@dataclass(frozen=True)
class ImageSpec:
    """How to obtain a trial's image: a file on disk, or a deterministic render.

    `kind` is "file" (params: path) or the name of a renderer in
    `convswap.stimuli.render` (params: whatever that renderer takes, seed included).
    """

    kind: str
    params: tuple[tuple[str, Any], ...] = ()

    @classmethod
    def of(cls, kind: str, **params: Any) -> ImageSpec:
        return cls(kind=kind, params=freeze(params))

    def param(self, name: str) -> Any:
        for key, value in self.params:
            if key == name:
                return value
        raise KeyError(f"image spec {self.kind!r} has no parameter {name!r}")

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "params": {k: thaw(v) for k, v in self.params}}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ImageSpec:
        return cls.of(data["kind"], **data.get("params", {}))


@dataclass(frozen=True)
class ColorAnchor:
    """One word of a model's calibrated vocabulary and the angle it is anchored at."""

    word: str
    angle: int


@dataclass(frozen=True)
class Trial:
    """One item: K canonical referents, the right one, the image and what the question needs.

    referents: canonical, convention-free names in canonical order.  For spatial
    trials these are cell names (row-major), for identify trials object categories,
    for color trials calibrated color words.
    target: the referent that is right.
    subject: what the question is about -- locate: the object phrase ("microwave",
    "green square"); identify: unused (the position comes from `cell`); color: the
    cued cell's name ({where} in the templates).
    cell: the target's cell name for spatial trials (identify: the position asked about).
    anchors: color trials: the vocabulary with each word's calibrated angle.
    held_out: color trials: the stimulus angle is a held-out angle.
    """

    trial_id: str
    task: Task
    referents: tuple[str, ...]
    target: str
    image: ImageSpec
    width: int
    height: int
    grid: int | None = None
    subject: str = ""
    cell: str | None = None
    anchors: tuple[ColorAnchor, ...] = ()
    held_out: bool = False
    meta: tuple[tuple[str, Any], ...] = ()

    def __post_init__(self) -> None:
        if self.target not in self.referents:
            raise ConvswapError(f"trial {self.trial_id}: target {self.target!r} is not among its referents")
        if len(set(self.referents)) != len(self.referents):
            raise ConvswapError(f"trial {self.trial_id}: referents repeat: {self.referents}")

    @property
    def k(self) -> int:
        return len(self.referents)

    @cached_property
    def meta_entries(self) -> Mapping[str, Any]:
        """The meta as a mapping (not to be changed), made once per trial: analyses look entries up for every
        record, and the records of a trial loaded from a log share one trial."""
        return dict(self.meta)

    def meta_value(self, name: str, default: Any = None) -> Any:
        return self.meta_entries.get(name, default)

    def to_json(self) -> dict[str, Any]:
        # A shallow copy, the nested fields written below: `asdict` copied the image, anchors and meta deeply only to
        # have them replaced, half of what writing a record cost.
        data = {name: getattr(self, name) for name in self.__dataclass_fields__}
        data["referents"] = list(self.referents)
        data["image"] = self.image.to_json()
        data["anchors"] = [{"word": a.word, "angle": a.angle} for a in self.anchors]
        data["meta"] = {k: thaw(v) for k, v in self.meta}
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Trial:
        return cls(
            trial_id=data["trial_id"],
            task=data["task"],
            referents=tuple(data["referents"]),
            target=data["target"],
            image=ImageSpec.from_json(data["image"]),
            # As logged, not coerced: a record reader judges the types (`record_checks`).
            width=data["width"],
            height=data["height"],
            grid=data.get("grid"),
            subject=data.get("subject", ""),
            cell=data.get("cell"),
            anchors=tuple(ColorAnchor(a["word"], int(a["angle"])) for a in data.get("anchors", ())),
            held_out=data.get("held_out", False),
            meta=freeze(data.get("meta", {})),
        )


@dataclass(frozen=True)
class Prompt:
    """One trial rendered under one convention.

    slots[i] is the referent shown at slot i+1.  alphabet[i] is the answer string
    for slot i+1 ("1".."K", or the words for a word-answer convention).  keys maps
    a key name ("target"; or "coord" and "name" for a mispaired gloss) to a slot
    (1-based).  glosses[i] is the referent named beside slot i+1's description
    (glossed and mispaired conventions), else empty.
    """

    trial_id: str
    convention: str
    task: Task
    text: str
    slots: tuple[str, ...]
    alphabet: tuple[str, ...]
    keys: tuple[tuple[str, int], ...]
    output: OutputFormat
    glosses: tuple[str, ...] = ()

    @property
    def k(self) -> int:
        return len(self.slots)

    def key(self, name: str) -> int | None:
        return dict(self.keys).get(name)

    @property
    def sha256(self) -> str:
        return sha256_hex(self.text)


class TokenScore(NamedTuple):
    """One of the most probable first tokens.  A named tuple: a loaded log holds ten per first-token readout,
    and tuples of plain values cost the cyclic collector nothing to track, where class instances do."""

    token_id: int | None  # None where a server names the token by its text alone (an API's top logprobs)
    text: str
    prob: float


@dataclass(frozen=True)
class Surface:
    """The resolved token surface of one alphabet for one model (see `convswap.readout.surface`).

    token_ids[i] is the first token of alphabet[i] under `variant`; mass is the
    mean candidate mass over the probes under it; masses holds that mean for
    every distinct variant measured, including those excluded because their
    candidates share a first token (listed in `shared`), so the log shows what
    the model emits even when it cannot be read.
    """

    alphabet: tuple[str, ...]
    variant: str
    token_ids: tuple[int, ...]
    mass: float
    masses: tuple[tuple[str, float], ...]
    reason: str
    shared: tuple[str, ...] = ()
    # A surface measured on a server's top-k logprobs: `mass` is then the mean lower bound and this the mean
    # upper bound; None where the masses are exact.
    mass_upper: float | None = None

    def to_json(self) -> dict[str, Any]:
        data = {
            "alphabet": list(self.alphabet),
            "variant": self.variant,
            "token_ids": list(self.token_ids),
            "mass": self.mass,
            "masses": dict(self.masses),
            "reason": self.reason,
            "shared": list(self.shared),
        }
        if self.mass_upper is not None:
            data["mass_upper"] = self.mass_upper
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Surface:
        return cls(
            alphabet=tuple(data["alphabet"]),
            variant=data["variant"],
            token_ids=tuple(data["token_ids"]),
            mass=data["mass"],
            masses=tuple(data["masses"].items()),
            reason=data["reason"],
            shared=tuple(data.get("shared", ())),
            mass_upper=data.get("mass_upper"),
        )


class QuickRestore:
    """A base of the slotted record parts that unpickles them faster: a frozen slotted dataclass is restored by a
    loop that calls `fields()` and `object.__setattr__` for every field of every part, and the record cache
    unpickles four parts per record; this restore sets the slots through their descriptors, found once per type
    (15-19% off unpickling a log's records)."""

    __slots__ = ()

    def __reduce__(self) -> tuple[Any, ...]:
        part_type: type = type(self)
        return (_restored, (part_type, tuple([getattr(self, name) for name in _slot_names(part_type)])))


def _restored(part_type: type, values: tuple[Any, ...]) -> Any:
    part: Any = object.__new__(part_type)
    for set_slot, value in zip(_slot_setters(part_type), values, strict=True):
        set_slot(part, value)
    return part


@cache
def _slot_names(part_type: type) -> tuple[str, ...]:
    return tuple(vars(part_type)["__slots__"])


@cache
def _slot_setters(part_type: type) -> tuple[Any, ...]:
    return tuple(vars(part_type)[name].__set__ for name in _slot_names(part_type))


@dataclass(frozen=True, slots=True)
class FirstTokenReadout(QuickRestore):
    """Restricted first-token readout over one alphabet under its resolved surface.

    candidate_logits[i] is the logit of slot i+1's first token; candidate_mass is
    the full-vocabulary softmax summed over the candidate tokens; slot is the
    restricted argmax (1-based), None when several candidates share the top
    logit exactly: then `tie` is set and `tied_slots` names them, and the record
    is neither right nor wrong.

    Provenance (`convswap.readout.logprobs`): `source` says where the numbers
    came from: "logits" (a local model's whole distribution), "logprob_token_ids"
    (vLLM: the log-probability of exactly each candidate), "token_ids_logprob"
    (SGLang's native equivalent) or "top_logprobs" (a server's or an API's top
    k).  The first three are exact: candidate_logits are log-probabilities, the
    logits up to a constant.  A top-k readout is bounded: candidate_logits is
    empty, `logprob_bounds` holds each candidate's [lower, upper] log-probability
    (lower None where the candidate is absent from the top k), candidate_mass is
    the mass's lower bound and candidate_mass_upper its upper bound, and
    `mass_verdict` is the mass rule's verdict on those bounds ("score",
    "refuse" or "undetermined"); slot is None also when the bounds do not decide
    the argmax.  `candidate_texts` are the surface strings matched by text where
    the server's tokenizer is not known (an API model), whose candidate_token_ids
    are then empty.
    """

    surface: str
    candidate_token_ids: tuple[int, ...]
    candidate_logits: tuple[float, ...]
    candidate_mass: float
    top: tuple[TokenScore, ...]
    slot: int | None
    tie: bool = False
    tied_slots: tuple[int, ...] = ()
    source: str = "logits"
    candidate_texts: tuple[str, ...] = ()
    logprob_bounds: tuple[tuple[float | None, float], ...] = ()
    candidate_mass_upper: float | None = None
    mass_verdict: str | None = None

    @property
    def exact(self) -> bool:
        return self.candidate_mass_upper is None

    def to_json(self) -> dict[str, Any]:
        # A shallow copy: every field is a scalar or a tuple of them, which `asdict` would copy deeply, at a cost
        # that dominated writing a large log's pages.
        data = {
            **{name: getattr(self, name) for name in self.__dataclass_fields__},
            "top": [score._asdict() for score in self.top],
        }
        # Provenance beyond a local model's readout is written only where it says something, so the
        # records of local models read as they always have.
        for name, unset in _READOUT_DEFAULTS.items():
            if data[name] == unset:
                del data[name]
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> FirstTokenReadout:
        return cls(
            surface=data["surface"],
            candidate_token_ids=tuple(data["candidate_token_ids"]),
            candidate_logits=tuple(data["candidate_logits"]),
            candidate_mass=data["candidate_mass"],
            top=tuple([TokenScore(score["token_id"], score["text"], score["prob"]) for score in data["top"]]),
            slot=data["slot"],
            tie=data.get("tie", False),
            tied_slots=tuple(data.get("tied_slots", ())),
            source=data.get("source", "logits"),
            candidate_texts=tuple(data.get("candidate_texts", ())),
            logprob_bounds=tuple((low, high) for low, high in data.get("logprob_bounds", ())),
            candidate_mass_upper=data.get("candidate_mass_upper"),
            mass_verdict=data.get("mass_verdict"),
        )


_READOUT_DEFAULTS: dict[str, Any] = {
    "source": "logits",
    "candidate_texts": (),
    "logprob_bounds": (),
    "candidate_mass_upper": None,
    "mass_verdict": None,
}


@dataclass(frozen=True, slots=True)
class Generation(QuickRestore):
    """Greedy generated text with why it stopped.  text is None when the backend gave none."""

    text: str | None
    finish_reason: str  # "stop" (end of sequence), "length", or the API's own word
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    reasoning_tokens: int | None = None
    error: str | None = None  # set only for a request that failed for good (status api_error)
    max_new_tokens: int | None = None  # the output budget the backend gave the generation

    def to_json(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.__dataclass_fields__}  # scalars only: no deep copy

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Generation:
        return cls(**data)


@dataclass(frozen=True)
class Parsed:
    slot: int | None
    status: ParseStatus


def canonical_json(data: Any) -> str:
    return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


@dataclass(frozen=True)
class RecordExtra:
    """What a record holds beyond its readouts: each entry is logged only when set."""

    memorize_instruction: str | None = None  # the instruction a cached query's image turn carried
    surface: Surface | None = None  # the token surface the first-token readout scored by
    vocabulary_of: dict[str, Any] | None = None  # the model whose vocabulary drew the stimuli, when not this one
    batch: dict[str, str] | None = None  # {"id", "custom_id"}: the provider batch that answered the request

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {}
        if self.memorize_instruction is not None:
            data["memorize_instruction"] = self.memorize_instruction
        if self.surface is not None:
            data["surface"] = self.surface.to_json()
        if self.vocabulary_of is not None:
            data["vocabulary_of"] = self.vocabulary_of
        if self.batch is not None:
            data["batch"] = self.batch
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RecordExtra:
        surface = data.get("surface")
        return cls(**{**data, "surface": Surface.from_json(surface) if surface is not None else None})


IMAGES_DIR = "images"  # beside a log: the kept images of its pixel answers, each named by its sha256


@dataclass(frozen=True, slots=True)
class PixelAnswer(QuickRestore):
    """A pixel answer under a visual protocol: the image that came back, where it is kept, its parse, its outcome.

    image_sha256: the sha256 of the PNG kept at `images/<image_sha256>.png` beside the log; None when no image came
    back (`failure` says why).  image_size: (width, height) of the image as it came back, before it was resized
    to the source's resolution for parsing.  parse: the protocol parse as `ProtocolParse.to_json()` writes it
    (status, output, components, reason); None without an image.  k, layout: what the parser was given.  The
    record's `parsed_slot` is the slot the parse answers (0: a point inside no referent's region, a wrong answer).
    asked_size: the (width, height) an API backend asked the image model for, where it asks for one.
    parsed_by: which route parsed the image: "pipeline" (the protocol's registered operations) or "reader" (its
    reader model, the fallback route); reader_answer: the reader's text, which the parse's slot is read from.
    seed: the generator seed a local image model drew it with (`diffusers:`); batch: the conventions drawn in the
    same call, in call order, where several were (`--image-batch`).  Each is absent from the JSON where it is None,
    so that the records of every other backend read as they always did.
    """

    protocol: str
    protocol_sha256: str
    outcome: Outcome
    image_sha256: str | None
    image_size: tuple[int, int] | None
    parse: dict[str, Any] | None
    k: int
    layout: str | None = None
    failure: str | None = None
    asked_size: tuple[int, int] | None = None
    parsed_by: Literal["pipeline", "reader"] = "pipeline"
    reader_answer: str | None = None
    seed: int | None = None
    batch: tuple[str, ...] | None = None

    @property
    def image_name(self) -> str | None:
        """The kept image's path relative to the log's folder."""
        return f"{IMAGES_DIR}/{self.image_sha256}.png" if self.image_sha256 is not None else None

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["image_size"] = list(self.image_size) if self.image_size is not None else None
        data["asked_size"] = list(self.asked_size) if self.asked_size is not None else None
        for optional in ("seed", "batch"):
            if data[optional] is None:
                del data[optional]
        if self.batch is not None:
            data["batch"] = list(self.batch)
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> PixelAnswer:
        size, asked = data.get("image_size"), data.get("asked_size")
        batch = data.get("batch")
        return cls(**{**data, "image_size": (int(size[0]), int(size[1])) if size is not None else None,
                      "asked_size": (int(asked[0]), int(asked[1])) if asked is not None else None,
                      "batch": tuple(batch) if batch is not None else None})  # fmt: skip


def outcome_of(image: bool, parse_status: str | None, answer_slot: int | None, target: int | None) -> Outcome:
    """The one outcome of a pixel answer, in ProVisE's precedence: no image, then the contract, then the parser,
    then the answer against the target slot."""
    if not image:
        return "generation_failure"
    if parse_status in ("protocol_noncompliance", "parser_failure"):
        return parse_status  # type: ignore[return-value]
    if parse_status != "ok":
        raise ConvswapError(f"a protocol parse has no status {parse_status!r}")
    return "correct" if answer_slot is not None and answer_slot == target else "incorrect"


class UnreadablePart:
    """A record part whose logged JSON does not load as its type.

    It is kept as logged, so the record still writes its own line, and reading
    any field of it raises the error that loading it raised: each audit check
    that reads the part fails that record by name, while the rest of the log
    still loads and is audited.
    """

    __slots__ = ("logged", "error")

    def __init__(self, logged: Any, error: Exception) -> None:
        self.logged = logged
        self.error = error

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):  # what copy and pickle probe for is simply absent
            raise AttributeError(name)
        raise self.error

    def to_json(self) -> Any:
        return self.logged


PartType = type[Trial] | type[FirstTokenReadout] | type[Generation] | type[RecordExtra] | type[PixelAnswer]
# What loading a garbled part can raise: a missing or unknown field, a value of the wrong kind, a trial that
# contradicts itself.
PART_ERRORS = (KeyError, TypeError, ValueError, AttributeError, RecursionError, ConvswapError)


def load_part(part_type: PartType, logged: Any) -> Any:
    """A record part from its logged JSON; one already loaded is kept (a reader may share loaded parts), and
    one that does not load is an `UnreadablePart` standing in for it."""
    if isinstance(logged, (part_type, UnreadablePart)):
        return logged
    try:
        return part_type.from_json(logged)
    except PART_ERRORS as error:
        return UnreadablePart(logged, error)


@dataclass(frozen=True, slots=True)
class Record(QuickRestore):
    """One JSONL line: one (model, condition, convention, trial).

    Holds enough to recompute every label and audit every prompt without the code
    that made it.  `correct` maps each key name to whether the parsed (or, when
    readout == "first_token", the first-token) slot equals that key.
    """

    experiment: str
    plan_hash: str
    package_version: str
    model: str
    model_revision: str
    quant: str | None
    backend: str
    condition: Condition
    convention: str
    task: Task
    trial_id: str
    referents: tuple[str, ...]
    slots: tuple[str, ...]
    glosses: tuple[str, ...]
    keys: dict[str, int]
    prompt: str
    prompt_sha256: str
    acknowledgement: str | None
    image_sha256: str
    alphabet: tuple[str, ...]
    readout: Readout
    first_token: FirstTokenReadout | None
    first_token_refused: str | None
    generation: Generation | None
    parsed_slot: int | None
    parse_status: ParseStatus
    answer_slot: int | None
    correct: dict[str, bool]
    trial: Trial
    timestamp: str
    shard: tuple[int, int] = (0, 1)
    extra: RecordExtra = field(default_factory=RecordExtra)
    dtype: str | None = None  # weight dtype of a local model
    environment: dict[str, str | None] = field(default_factory=dict)  # versions, device kind, attention
    pixels: PixelAnswer | None = None  # a pixel answer (readout "pixels"); logged only when set

    @property
    def interface(self) -> Interface:
        return "image" if self.readout == "pixels" else "text"

    @property
    def unit(self) -> tuple[str, str, str, str]:
        """The identity a run must write once and only once."""
        return (self.model, self.condition, self.convention, self.trial_id)

    def unreadable_parts(self) -> dict[str, UnreadablePart]:
        """The parts, by field name, whose logged JSON did not load."""
        return {name: part for name in PART_FIELDS if isinstance(part := getattr(self, name), UnreadablePart)}

    def to_json(self) -> str:
        data = {item.name: getattr(self, item.name) for item in fields(self)}
        for name in PART_FIELDS:
            if data[name] is not None:
                data[name] = data[name].to_json()
        if data["pixels"] is None:  # text records read exactly as they did before pixel answers existed
            del data["pixels"]
        return canonical_json(data)

    @classmethod
    def from_json(cls, line: str) -> Record:
        return cls.from_dict(json.loads(line))

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Record:
        """A record from its decoded JSON object (which is changed in place); parts already loaded are kept."""
        for name in ("referents", "slots", "glosses", "alphabet", "shard"):
            data[name] = tuple(data[name])
        for name, part_type in PART_TYPES.items():
            logged = data.get(name)
            if logged is not None:
                data[name] = load_part(part_type, logged)
        # Keywords in a log's sorted order are each searched for among __init__'s parameters; the fields a record
        # logs are the first of those declared (a text record's stop before `pixels`), so they go in by position.
        if data.keys() == _LOGGED_FIELDS.get(len(data)):
            return cls(*map(data.__getitem__, _RECORD_FIELDS[: len(data)]))
        return cls(**data)


PART_TYPES: dict[str, PartType] = {
    "first_token": FirstTokenReadout,
    "generation": Generation,
    "trial": Trial,
    "extra": RecordExtra,
    "pixels": PixelAnswer,
}
PART_FIELDS = tuple(PART_TYPES)
_RECORD_FIELDS = tuple(item.name for item in fields(Record))
# The field names a record may log by position, by their number: the declared fields up to that one.
_LOGGED_FIELDS = {count: frozenset(_RECORD_FIELDS[:count]) for count in range(len(_RECORD_FIELDS) + 1)}


def score_answer(answer_slot: int | None, keys: Mapping[str, int]) -> dict[str, bool]:
    """Correctness of one answer against each key.  An unscored answer (None) is correct on no key;
    the record's parse status says why it was not scored, so it is never read as a wrong answer."""
    return {name: answer_slot is not None and answer_slot == slot for name, slot in keys.items()}
