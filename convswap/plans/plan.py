"""The pre-registered analysis plan: one TOML file per experiment, loaded and validated.

A plan file states, before any data exists, what an experiment runs (`[design]`),
what it tests (`[[hypotheses]]`), what it drops (`exclusions`), what would count
against it (`failure_conditions`), when a null contrast is uninformative
(`[gate]`), and which analyses are already known to be post hoc (`post_hoc`).
Whether a file is registered, and whether it changed since, is the ledger's
business (`convswap.plans.ledger`); this module only reads files (which plan
folder a command reads is `convswap.plan_folders`' business).

Every problem is a `ConvswapError` naming the file, the field and the value, so
a plan that loads is a plan the runner and the analysis can rely on.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Annotated, Any, Literal, get_args

from pydantic import BeforeValidator, Field, PrivateAttr, ValidationInfo, field_validator, model_validator

from convswap.conventions.cells import GRID_SIZES, has_english_names
from convswap.conventions.declarations import CONVENTIONS, Catalog, conventions_of
from convswap.conventions.declarations import FILE_NAME as CONVENTIONS_FILE_NAME
from convswap.conventions.render import describes_grid
from convswap.core import CONDITIONS, TASKS, Condition, ConvswapError, Task, canonical_json, sha256_hex
from convswap.plans.analyses import ANALYSES
from convswap.protocols import Protocol, load_protocols
from convswap.protocols.declarations import FILE_NAME as PROTOCOLS_FILE_NAME
from convswap.protocols.layouts import check_layout
from convswap.validation import (
    Table,
    at_least,
    checked,
    is_integer,
    is_number,
    one_of,
    problem,
    read_toml,
    validate_file,
)

Stimuli = Literal["calibration", "color_arrays", "synthetic_spatial", "coco", "items"]
PlanReadout = Literal["first_token", "generate", "both"]
AngleSet = Literal["held_out", "calibration"]
Endpoint = Literal["accuracy", "readership", "follows_coord", "follows_name", "crossover_interaction"]
Test = Literal[
    "mcnemar_exact",  # paired accuracy of two conventions on the same trials
    "binomial_exact",  # one rate against a stated null
    "bootstrap",  # percentile interval of a paired difference, resampling trials
    "readership",  # P(response = coord key | keys disagree) / (1/K), exact binomial against 1/K
    "crossover_sign_reversal",  # cue-crossover shifts reverse sign at the two swapped locations
    "monotone_in_readership",  # accuracy ordered as readership orders the conventions
    "inversion_search",  # every model pair, paired difference per convention, sign changes reported
]
Direction = Literal["greater", "less", "two_sided"]
# How the p values of a plan's confirmatory family are adjusted together (statsmodels' multipletests: holm, fdr_bh).
Multiplicity = Literal["holm", "bh", "none"]
Key = Literal["target", "coord", "name"]
GateReadout = Literal["same_as_contrast", "first_token", "generate"]

STIMULI: tuple[Stimuli, ...] = get_args(Stimuli)
ITEMS_STIMULI = "items"  # a user's own multiple-choice benchmark, read from a JSONL file
ITEMS_TASK = "choice"
READOUTS: tuple[PlanReadout, ...] = get_args(PlanReadout)
ANGLE_SETS: tuple[AngleSet, ...] = get_args(AngleSet)
ENDPOINTS: tuple[Endpoint, ...] = get_args(Endpoint)
TESTS: tuple[Test, ...] = get_args(Test)
DIRECTIONS: tuple[Direction, ...] = get_args(Direction)
MULTIPLICITIES: tuple[Multiplicity, ...] = get_args(Multiplicity)
# The tests whose rows carry a p value, which a confirmatory family can adjust.
P_VALUED_TESTS = ("mcnemar_exact", "binomial_exact", "readership")
# The tests that compare a fixed number of conventions: two paired against each other, or one against a null.
CONTRAST_SIZES: dict[str, int] = {"mcnemar_exact": 2, "bootstrap": 2, "binomial_exact": 1, "readership": 1}
KEYS: tuple[Key, ...] = get_args(Key)
GATE_READOUTS: tuple[GateReadout, ...] = get_args(GateReadout)
CALIBRATED_K = "calibrated"  # color: K is the size of the model's calibrated vocabulary
SYNTHETIC_GRID = 3  # the synthetic arrays (spatial and color) are drawn on a 3x3 grid
IDENTIFY_K = (2, 9)  # the target and 1 to 8 distractors

_NAME = re.compile(r"^[a-z][a-z0-9_]*$")
_STRICT_FRACTION = "must be a number strictly between 0 and 1"


def _number(within: Callable[[float], bool], message: str) -> BeforeValidator:
    return checked(lambda value: is_number(value) and within(value), message)


def _repeats(values: Sequence[Any], where: tuple[str, ...] = ()) -> None:
    repeated = sorted({value for value in values if values.count(value) > 1})
    if repeated:
        raise problem("repeats", repeated, where)


def _distinct_list(item_ok: Callable[[Any], bool], not_a_list: str, bad_item: str) -> BeforeValidator:
    """A non-empty list of distinct items, each of which `item_ok` accepts."""

    def check(value: Any) -> Any:
        if not isinstance(value, list) or not value:
            raise problem(not_a_list, value)
        for item in value:
            if not item_ok(item):
                raise problem(bad_item, item)
        _repeats(value)
        return value

    return BeforeValidator(check)


def _drawn_from(allowed: Sequence[str]) -> BeforeValidator:
    return _distinct_list(lambda item: item in allowed, f"must be a non-empty list drawn from {', '.join(allowed)}",
                          f"must be drawn from {', '.join(allowed)}")  # fmt: skip


def _is_name(value: Any) -> bool:
    return isinstance(value, str) and bool(_NAME.match(value))


Text = Annotated[str, checked(lambda value: isinstance(value, str) and value.strip(), "must be a non-empty string")]
Texts = Annotated[
    tuple[str, ...],
    checked(lambda value: isinstance(value, list | tuple) and all(isinstance(v, str) and v.strip() for v in value),
            "must be a list of non-empty strings"),
]  # fmt: skip
Name = Annotated[str, checked(_is_name, "must be a lower-case identifier (a-z, 0-9, _)")]
Names = Annotated[
    tuple[str, ...],
    checked(lambda value: isinstance(value, list | tuple) and all(map(_is_name, value)),
            "must be a list of lower-case identifiers"),
]  # fmt: skip
Fraction = Annotated[float, _number(lambda value: 0 < value < 1, _STRICT_FRACTION)]
Boolean = Annotated[bool, checked(lambda value: isinstance(value, bool), "must be a boolean")]


def _catalog_reader(info: ValidationInfo) -> Callable[[], Catalog]:
    """The reader of the plan folder's conventions that `load_plan` puts in the validation context."""
    if info.context is None or "catalog" not in info.context:
        raise ConvswapError("a plan is validated through load_plan, which reads its folder's conventions")
    return info.context["catalog"]


def plan_conventions(info: ValidationInfo) -> Catalog:
    """The conventions of the plan's folder (the folder of its file): the shipped ones and the folder's own, read
    once per loaded plan."""
    return _catalog_reader(info)()


def plan_protocols(info: ValidationInfo) -> dict[str, Protocol]:
    """The visual protocols of the plan's folder: the shipped ones and the folder's own protocols.toml, read once
    per loaded plan."""
    if info.context is None or "protocols" not in info.context:
        raise ConvswapError("a plan is validated through load_plan, which reads its folder's protocols")
    return info.context["protocols"]()


def _design_of(info: ValidationInfo) -> Design | None:
    """The plan's design when it validated (fields validate in order, and the design comes first)."""
    return info.data.get("design")


class Design(Table):
    stimuli: Annotated[Stimuli, one_of(STIMULI)]
    tasks: Annotated[tuple[Task, ...], _drawn_from(TASKS)]
    conventions: Names
    conditions: Annotated[tuple[Condition, ...], _drawn_from(CONDITIONS)]
    n: Annotated[int, at_least(1)]
    seeds: Annotated[
        tuple[int, ...],
        _distinct_list(lambda item: is_integer(item) and item >= 0, "must be a non-empty list of integers >= 0",
                       "must hold integers >= 0"),
    ]  # fmt: skip
    grid: Annotated[int | None, checked(lambda value: value is None or (is_integer(value) and value >= 0),
                                        "must be an integer >= 0")] = Field(None, validate_default=True)  # fmt: skip
    readout: Annotated[PlanReadout, one_of(READOUTS)]
    k: tuple[tuple[str, int | str], ...]  # task -> K, or "calibrated"
    models: Texts = ()  # the registered model set of a cross-model comparison
    crossover: bool = False  # color arrays: also run the cue-crossover pairs
    angles: AngleSet | None = Field(None, validate_default=True)  # color arrays: held-out or calibration angles
    # items stimuli: a folder item images may lie in, relative to the plan's folder (default: the items file's)
    image_root: str | None = None
    # items stimuli: the JSONL items file, relative to the plan's folder
    items: str | None = Field(None, validate_default=True)

    @field_validator("conventions")
    @classmethod
    def _known_conventions(cls, names: tuple[str, ...], info: ValidationInfo) -> tuple[str, ...]:
        stimuli, tasks = info.data.get("stimuli"), info.data.get("tasks", ())
        if not names and stimuli != "calibration":
            raise problem("must list at least one convention", [])
        _repeats(list(names))
        catalog = plan_conventions(info)
        # Read even where every name is a text convention: the folder's protocols.toml may declare one of them too.
        protocols = plan_protocols(info)
        for name in names:
            if name not in catalog:  # a visual protocol answers on the same footing as a text convention
                if name not in protocols:
                    raise problem(f"unknown convention (known: {', '.join(catalog)}; visual protocols: "
                                  f"{', '.join(protocols)})", name)  # fmt: skip
                # A protocol answers the tasks it serves and is not asked on the others (point_marker: locate).
                if tasks and not set(tasks) & set(protocols[name].tasks):
                    raise problem(f"protocol answers none of the tasks {list(tasks)} (it answers "
                                  f"{', '.join(protocols[name].tasks)})", name)  # fmt: skip
                continue
            for task in tasks:
                if task not in catalog[name].tasks:
                    raise problem(f"convention does not apply to task {task!r}", name)
        return names

    @model_validator(mode="after")
    def _protocols_answer_visible(self, info: ValidationInfo) -> Design:
        # The image and its guidance prompt go in one turn: a pixel answer has no cached condition.
        if "cached" in self.conditions:
            protocols = [name for name in self.conventions if name not in plan_conventions(info)]
            if protocols:
                raise problem(f"asks the cached condition for the protocol {protocols[0]}, which answers in the "
                              "visible condition only", list(self.conditions), ("conditions",))  # fmt: skip
        return self

    @field_validator("grid")
    @classmethod
    def _grid_required(cls, grid: int | None, info: ValidationInfo) -> int | None:
        stimuli = info.data.get("stimuli")
        if grid is not None and grid not in GRID_SIZES:
            raise problem(f"must be one of {', '.join(map(str, GRID_SIZES))}", grid)
        if grid is None and stimuli not in (None, "calibration", ITEMS_STIMULI):
            raise problem(f"is required for {stimuli} stimuli", None)
        if stimuli in ("synthetic_spatial", "color_arrays") and grid != SYNTHETIC_GRID:
            raise problem(f"must be {SYNTHETIC_GRID} for {stimuli} stimuli (the arrays are drawn on a 3x3 grid)", grid)
        return grid

    @field_validator("k", mode="before")
    @classmethod
    def _k_per_task(cls, value: Any, info: ValidationInfo) -> tuple[tuple[str, int | str], ...]:
        # Free report has no alternatives, so a calibration design has no K.
        stimuli, tasks = info.data.get("stimuli"), info.data.get("tasks", ())
        if stimuli == "calibration":
            if value is not None:
                raise problem("must be absent for calibration (free report has no alternatives)", value)
            return ()
        if not isinstance(value, dict):
            value = {task: value for task in tasks}
        if sorted(value) != sorted(tasks):
            raise problem(f"must give K for exactly the tasks {list(tasks)}", value)
        for task, k in value.items():
            _check_k(task, k, info.data.get("grid"))
        return tuple((task, value[task]) for task in tasks)

    @model_validator(mode="after")
    def _protocol_layouts_hold_k(self, info: ValidationInfo) -> Design:
        # A trial whose options outnumber the layout's slots could only stop its run at that trial.
        catalog = plan_conventions(info)
        for name in (name for name in self.conventions if name not in catalog):
            protocol = plan_protocols(info)[name]
            for task, k in self.k:
                if protocol.layout is not None and task in protocol.tasks and isinstance(k, int):
                    try:
                        check_layout(protocol.layout, k)
                    except ConvswapError as error:
                        raise problem(f"protocol answers {task} trials of K={k} in slots it has not got ({error})",
                                      name, ("conventions",)) from None  # fmt: skip
        return self

    @model_validator(mode="after")
    def _conventions_describe_the_grid(self, info: ValidationInfo) -> Design:
        # Grids over 4x4 have no English cell names, so no convention naming one can describe them.
        if self.grid is None or has_english_names(self.grid):
            return self
        catalog = plan_conventions(info)
        for name in self.conventions:
            if name in catalog and not describes_grid(catalog[name], self.grid):
                raise problem(f"names cells by English name, which the {self.grid}x{self.grid} grid's cells do not "
                              "have (use grid references)", name, ("conventions",))  # fmt: skip
        return self

    @field_validator("crossover", mode="before")
    @classmethod
    def _crossover_for_color(cls, crossover: Any, info: ValidationInfo) -> Any:
        if not isinstance(crossover, bool) or (crossover and info.data.get("stimuli") != "color_arrays"):
            raise problem("must be a boolean, true only for color_arrays stimuli", crossover)
        return crossover

    @field_validator("angles", mode="before")
    @classmethod
    def _angles_for_color(cls, angles: Any, info: ValidationInfo) -> Any:
        if (info.data.get("stimuli") == "color_arrays") != (angles is not None):
            raise problem("is required for color_arrays stimuli and only for them", angles)
        if angles is not None and angles not in ANGLE_SETS:
            raise problem(f"must be one of {', '.join(ANGLE_SETS)}", angles)
        return angles

    @field_validator("image_root", mode="before")
    @classmethod
    def _image_root_for_items(cls, root: Any, info: ValidationInfo) -> Any:
        if info.data.get("stimuli") != ITEMS_STIMULI:
            raise problem(f"is for {ITEMS_STIMULI} stimuli only", root)
        if not isinstance(root, str) or not root.strip():
            raise problem("must be a folder name relative to the plan's folder", root)
        plan_path = info.context["path"] if info.context else Path(".")
        folder = image_root_path(plan_path, root)
        if folder is None or not folder.is_dir():
            raise problem(f"no such folder {folder}", root)
        return root

    @field_validator("items", mode="before")
    @classmethod
    def _items_file(cls, items: Any, info: ValidationInfo) -> Any:
        stimuli, tasks = info.data.get("stimuli"), info.data.get("tasks")
        if (stimuli == ITEMS_STIMULI) != (items is not None):
            raise problem(f"is required for {ITEMS_STIMULI} stimuli and only for them", items)
        if items is None:
            return None
        if not isinstance(items, str) or not items.strip():
            raise problem("must be a file name relative to the plan's folder", items)
        plan_path = info.context["path"] if info.context else Path(".")
        path = items_path(plan_path, items)
        if not path.is_file():
            raise problem(f"no such file {path}", items)
        from convswap.stimuli.items import read_items  # pillow and numpy, needed only by items plans

        if "image_root" not in info.data:
            return items  # the image root was refused: the images cannot be judged without it
        k = dict(info.data.get("k", ())).get(ITEMS_TASK)
        root = info.data.get("image_root")
        read_items(
            path, k if is_integer(k) else None, image_root_path(plan_path, root)
        )  # a bad line is a ConvswapError naming file, line, field, value
        if tasks is not None and tasks != (ITEMS_TASK,):
            raise problem(f"items stimuli run the task {ITEMS_TASK!r} alone, not {list(tasks)}", items)
        return items

    def k_for(self, task: str) -> int | str:
        for name, value in self.k:
            if name == task:
                return value
        raise ConvswapError(f"the design has no task {task!r} (tasks: {', '.join(self.tasks)})")


def _check_k(task: str, k: Any, grid: int | None) -> None:
    """K must be one the stimuli produce: every cell for locate, the target and 1 to 8 distractors for identify."""
    if task == "color" and k == CALIBRATED_K:
        return
    if task == "locate" and grid is not None:
        if not is_integer(k) or k != grid * grid:
            raise problem(f"must be {grid * grid}: locate offers every cell of the {grid}x{grid} grid", k, (task,))
    elif task == "identify":
        low, high = IDENTIFY_K
        if not is_integer(k) or not low <= k <= high:
            raise problem(f"must be an integer from {low} to {high} (the target and 1 to 8 distractors)", k, (task,))
    elif not is_integer(k) or k < 2:
        allowed = f" or {CALIBRATED_K!r}" if task == "color" else ""
        raise problem(f"must be an integer >= 2{allowed}", k, (task,))


class Hypothesis(Table):
    id: Name
    statement: Text
    endpoint: Annotated[Endpoint, one_of(ENDPOINTS)]
    contrast: Names
    test: Annotated[Test, one_of(TESTS)]
    direction: Annotated[Direction, one_of(DIRECTIONS)]
    alpha: Fraction
    task: str  # filled from the design when it has one task
    condition: Condition | None = None  # None: every condition of the design, each tested apart
    key: Annotated[
        Key | None, checked(lambda value: value is None or value in KEYS, f"must be one of {', '.join(KEYS)}")
    ] = None  # None: "target", or "coord" for a mispaired convention
    null: Annotated[
        float | str | None,
        checked(lambda value: value in (None, "chance") or (is_number(value) and 0 <= value <= 1),
                "must be 'chance' or a rate in [0, 1]"),
    ] = None  # a rate, or "chance" (1/K)  # fmt: skip
    # Power at registration (mcnemar_exact): the share of paired trials the two conventions are expected to score
    # differently, and the accuracy difference the study means to detect (a fraction, at most the discordance).
    discordance: Fraction | None = None
    effect: Fraction | None = None

    @model_validator(mode="after")
    def _power_of_a_paired_test(self) -> Hypothesis:
        for name in ("discordance", "effect"):
            if getattr(self, name) is not None and self.test != "mcnemar_exact":
                raise problem(f"is for the mcnemar_exact test only (power of the paired exact test), not "
                              f"{self.test}", getattr(self, name), (name,))  # fmt: skip
        if self.effect is not None and self.discordance is None:
            raise problem("needs the discordance it is to be detected at", self.effect, ("effect",))
        if self.effect is not None and self.discordance is not None and self.effect > self.discordance:
            raise problem(f"cannot exceed the discordance {self.discordance:g}: only discordant trials differ",
                          self.effect, ("effect",))  # fmt: skip
        return self


class Gate(Table):
    control: Annotated[str, checked(lambda value: isinstance(value, str), "must be a convention the design runs")]
    threshold_points: Annotated[
        float, _number(lambda value: 0 <= value <= 100, "must be a number of percentage points in [0, 100]")
    ]
    readout: Annotated[GateReadout, one_of(GATE_READOUTS)]


class HeldOutRule(Table):
    """Which integer angles may be shown as held-out stimuli (spec 3.6, amended in section 8)."""

    min_from_own_anchor_deg: Annotated[int, at_least(1)]
    max_from_own_anchor_deg: int
    min_from_other_anchor_deg: Annotated[int, at_least(1)]
    off_calibration_grid: Boolean
    # Distance from every calibration angle whose swatch drew another word, kept as an
    # anchor or discarded.  None: the unamended rule, which saw only the anchors.
    min_from_other_name_deg: Annotated[int, at_least(1)] | None = None

    @field_validator("max_from_own_anchor_deg", mode="before")
    @classmethod
    def _not_below_the_minimum(cls, high: Any, info: ValidationInfo) -> Any:
        low = info.data.get("min_from_own_anchor_deg", 1)
        if not is_integer(high) or high < low:
            raise problem(f"must be an integer >= {low}", high)
        return high


class CalibrationDesign(Table):
    """The free-report vocabulary calibration of spec 3.1."""

    step_deg: Annotated[int, at_least(1)]
    renders_per_angle: Annotated[int, at_least(2)]
    min_anchor_separation_deg: Annotated[int, at_least(1)]
    min_candidate_mass: Fraction
    min_anchors: Annotated[int, at_least(1)]  # fewer: the model is excluded from every color experiment

    @field_validator("step_deg")
    @classmethod
    def _divides_the_circle(cls, step: int) -> int:
        if 360 % step:
            raise problem("must divide 360", step)
        return step


class Plan(Table):
    """A plan file as loaded; `path` and `sha256` are the file's, the rest its fields."""

    not_in_file = frozenset({"path", "sha256"})

    # Fields validate in this order and the first failure is reported: the design before what refers to it.
    id: Name
    design: Design
    hypotheses: tuple[Hypothesis, ...] = ()
    # The confirmatory hypotheses, whose p values (every model and condition) are adjusted together.
    family: Names = ()
    multiplicity: Annotated[Multiplicity, one_of(MULTIPLICITIES)] = "holm"
    post_hoc: Names = ()
    registered_analyses: Names = ()
    version: Annotated[int, at_least(1)]
    title: Text
    spec_section: Text
    path: Path
    sha256: str
    gate: Gate | None = None
    exclusions: Texts
    failure_conditions: Texts
    held_out: HeldOutRule | None = None
    calibration: CalibrationDesign | None = Field(None, validate_default=True)
    # The folder's conventions as its validation read them, so that a run renders exactly those.
    _catalog: Callable[[], Catalog] = PrivateAttr()
    _protocols: Callable[[], dict[str, Protocol]] = PrivateAttr()

    @model_validator(mode="after")
    def _keep_the_folders_conventions(self, info: ValidationInfo) -> Plan:
        self._catalog = _catalog_reader(info)
        self._protocols = info.context["protocols"] if info.context else dict
        return self

    @property
    def protocols(self) -> dict[str, Protocol]:
        """The visual protocols the design runs, by name, as its folder declares them (shipped or its own)."""
        names = [name for name in self.design.conventions if name not in self.catalog]
        if not names:
            return {}
        declared = self._protocols()
        return {name: declared[name] for name in names}

    @property
    def catalog(self) -> Catalog:
        """The conventions its folder offers: the shipped ones and those the folder's conventions.toml declares."""
        return self._catalog()

    @field_validator("id")
    @classmethod
    def _named_as_its_file(cls, plan_id: str, info: ValidationInfo) -> str:
        stem = info.context["path"].stem if info.context else plan_id
        if plan_id != stem:
            raise problem(f"must equal the file name {stem!r}", plan_id)
        return plan_id

    @field_validator("hypotheses", mode="before")
    @classmethod
    def _hypotheses_of_the_design(cls, value: Any, info: ValidationInfo) -> Any:
        if not isinstance(value, list) or not all(isinstance(item, dict) for item in value):
            raise problem("must be an array of tables ([[...]])", value)
        design = _design_of(info)
        if design is None:
            return value
        tasks = design.tasks
        filled = [{"task": tasks[0] if len(tasks) == 1 else None, **item} for item in value]
        for index, item in enumerate(filled):
            if item["task"] not in tasks:
                raise problem(f"must be one of the design's tasks {list(tasks)}", item["task"], (index, "task"))
            condition = item.get("condition")
            if condition is not None and condition not in design.conditions:
                raise problem(f"must be one of {list(design.conditions)}", condition, (index, "condition"))
        return filled

    @field_validator("hypotheses")
    @classmethod
    def _contrasts_the_design_runs(cls, hypotheses: tuple[Hypothesis, ...], info: ValidationInfo) -> Any:
        design = _design_of(info)
        for index, hypothesis in enumerate(hypotheses):
            if not hypothesis.contrast:
                raise problem("must name at least one convention", [], (index, "contrast"))
            if len(set(hypothesis.contrast)) < len(hypothesis.contrast):
                raise problem("names a convention twice: no convention is contrasted with itself",
                              list(hypothesis.contrast), (index, "contrast"))  # fmt: skip
            size = CONTRAST_SIZES.get(hypothesis.test)
            if size is not None and len(hypothesis.contrast) != size:
                raise problem(f"must name {size} convention{'s' * (size > 1)} for the {hypothesis.test} test",
                              list(hypothesis.contrast), (index, "contrast"))  # fmt: skip
            for name in hypothesis.contrast:
                if design is not None and name not in design.conventions:
                    raise problem("names a convention the design does not run", name, (index, "contrast"))
                if design is not None and name not in plan_conventions(info):
                    served = plan_protocols(info)[name].tasks
                    if hypothesis.task not in served:
                        raise problem(f"names a protocol that does not answer the task {hypothesis.task!r} (it "
                                      f"answers {', '.join(served)})", name, (index, "contrast"))  # fmt: skip
        _repeats([hypothesis.id for hypothesis in hypotheses], ("id",))
        return hypotheses

    @field_validator("family")
    @classmethod
    def _family_of_tested_hypotheses(cls, family: tuple[str, ...], info: ValidationInfo) -> tuple[str, ...]:
        _repeats(list(family))
        tests = {hypothesis.id: hypothesis.test for hypothesis in info.data.get("hypotheses", ())}
        for name in family:
            if name not in tests:
                raise problem(f"names no hypothesis of the plan (hypotheses: {', '.join(tests) or 'none'})", name)
            if tests[name] not in P_VALUED_TESTS:
                raise problem(f"names a hypothesis whose {tests[name]} test gives no p value to adjust (tests with "
                              f"one: {', '.join(P_VALUED_TESTS)})", name)  # fmt: skip
        return family

    @model_validator(mode="after")
    def _multiplicity_of_a_family(self) -> Plan:
        if "multiplicity" in self.model_fields_set and not self.family:
            raise problem("adjusts no family: declare the confirmatory hypotheses in family = [...]",
                          self.multiplicity, ("multiplicity",))  # fmt: skip
        return self

    @field_validator("gate")
    @classmethod
    def _gate_controls_a_convention_the_design_runs(cls, gate: Gate | None, info: ValidationInfo) -> Gate | None:
        design = _design_of(info)
        if gate is not None and design is not None and gate.control not in design.conventions:
            raise problem("must be a convention the design runs", gate.control, ("control",))
        return gate

    @field_validator("calibration", mode="before")
    @classmethod
    def _calibration_for_calibration_stimuli(cls, value: Any, info: ValidationInfo) -> Any:
        design = _design_of(info)
        if design is not None and (design.stimuli == "calibration") != (value is not None):
            raise problem("is required for calibration stimuli and only for them", value)
        return value

    @field_validator("registered_analyses", "post_hoc")
    @classmethod
    def _analyses_in_the_catalog(cls, names: tuple[str, ...]) -> tuple[str, ...]:
        for name in names:
            if name not in ANALYSES:
                raise problem("unknown analysis (`convswap plan analyses` lists the known ones)", name)
        return names

    @model_validator(mode="after")
    def _post_hoc_is_not_registered(self) -> Plan:
        overlap = sorted((set(self.registered_analyses) | {h.id for h in self.hypotheses}) & set(self.post_hoc))
        if overlap:
            raise problem("names an analysis that is also registered", overlap, ("post_hoc",))
        return self

    @model_validator(mode="after")
    def _calibration_the_code_applies(self) -> Plan:
        from convswap.plans.calibration_rules import unapplied  # here: the calibration code is slow to import

        tables = {"calibration": self.calibration, "held_out": self.held_out}
        stated = {(name, key): value for name, table in tables.items() if table is not None
                  for key, value in table.model_dump().items()}  # fmt: skip
        found = unapplied(stated)
        if found is not None:
            where, stated, why = found
            raise problem(why, stated, where)
        return self

    def hypothesis(self, hypothesis_id: str) -> Hypothesis:
        for hypothesis in self.hypotheses:
            if hypothesis.id == hypothesis_id:
                return hypothesis
        raise ConvswapError(f"{self.path}: no hypothesis {hypothesis_id!r}")


def items_path(plan_path: Path, items: str) -> Path:
    """An items file named by a plan: relative to the plan's folder."""
    return plan_path.parent / items


def image_root_path(plan_path: Path, image_root: str | None) -> Path | None:
    """The folder a plan lets item images lie in, relative to the plan's folder; None: the items file's folder."""
    return None if image_root is None else plan_path.parent / image_root


def declared_conventions_sha256(plan: Plan) -> str | None:
    """The sha256 of the declarations of the conventions a plan runs from its folder's conventions.toml; None when
    it runs shipped conventions only.

    The ledger pins it beside the plan file's own hash, so that a declaration edited after registration (an option
    template, a gloss) changes what the plan registered as surely as an edit of the plan file does.
    """
    declared = _folder_declarations(plan)
    return sha256_hex(canonical_json(declared)) if declared else None


def declaration_sha256s(plan: Plan) -> dict[str, str]:
    """The sha256 of each declaration `declared_conventions_sha256` covers, by name: the ledger pins them too, so
    that an edit names the convention or protocol it changed."""
    return {name: sha256_hex(canonical_json(value)) for name, value in _folder_declarations(plan).items()}


def _folder_declarations(plan: Plan) -> dict[str, Any]:
    declared: dict[str, Any] = {
        name: asdict(plan.catalog[name])
        for name in plan.design.conventions
        if name in plan.catalog and name not in CONVENTIONS
    }
    shipped = load_protocols(None) if plan.protocols else {}
    for name, protocol in plan.protocols.items():  # its folder's protocols.toml, pinned by their declaration hash
        if name not in shipped or shipped[name].sha256 != protocol.sha256:
            declared[name] = {"protocol_sha256": protocol.sha256}
    return declared


def registered_names(plan: Plan) -> frozenset[str]:
    """The analyses declared before the data: hypothesis ids and registered analyses.

    Any other name, including every name on the plan's own `post_hoc` list, is
    post hoc and must be labelled so wherever it appears.
    """
    return frozenset(h.id for h in plan.hypotheses) | frozenset(plan.registered_analyses)


def load_plan(path: str | Path) -> Plan:
    path = Path(path)
    data, raw = read_toml(path, "plan")
    # Read when a validator first needs it (a broken conventions.toml is reported in field order), then kept.
    catalog = functools.cache(lambda: conventions_of(path.parent))
    protocols = functools.cache(lambda: load_protocols(path.parent))
    context = {"path": path, "sha256": sha256_hex(raw), "catalog": catalog, "protocols": protocols}
    return validate_file(Plan, data, path, context)


def find_experiment(plan_dir: str | Path, experiment_id: str) -> Path:
    """The plan file of an experiment: `<plan_dir>/<id>.toml` (a plan's id is its file name)."""
    plan_dir = Path(plan_dir)
    path = plan_dir / f"{experiment_id}.toml"
    if not path.is_file():
        known = ", ".join(p.stem for p in plan_files(plan_dir)) or "none"
        raise ConvswapError(f"no experiment {experiment_id!r} in {plan_dir} (experiments: {known})")
    return path


def plan_files(plan_dir: str | Path) -> list[Path]:
    """A folder's plan files: every *.toml but the folder's own convention and protocol declarations."""
    declarations = (CONVENTIONS_FILE_NAME, PROTOCOLS_FILE_NAME)
    return sorted(path for path in Path(plan_dir).glob("*.toml") if path.name not in declarations)
