"""The pre-registered analysis plan: one TOML file per experiment, loaded and validated.

A plan file states, before any data exists, what an experiment runs (`[design]`),
what it tests (`[[hypotheses]]`), what it drops (`exclusions`), what would count
against it (`failure_conditions`), when a null contrast is uninformative
(`[gate]`), and which analyses are already known to be post hoc (`post_hoc`).
Whether a file is registered, and whether it changed since, is the ledger's
business (`convswap.experiments.ledger`); this module only reads files.

Every problem is a `ConvswapError` naming the file, the field and the value, so
a plan that loads is a plan the runner and the analysis can rely on.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TypeVar, get_args

from convswap.conventions import CONVENTIONS
from convswap.core import CONDITIONS, TASKS, Condition, ConvswapError, Task, sha256_hex

PLAN_DIR_NAME = "analysis_plan"

Stimuli = Literal["calibration", "color_arrays", "synthetic_spatial", "coco"]
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
Key = Literal["target", "coord", "name"]
GateReadout = Literal["same_as_contrast", "first_token", "generate"]

STIMULI: tuple[Stimuli, ...] = get_args(Stimuli)
READOUTS: tuple[PlanReadout, ...] = get_args(PlanReadout)
ANGLE_SETS: tuple[AngleSet, ...] = get_args(AngleSet)
ENDPOINTS: tuple[Endpoint, ...] = get_args(Endpoint)
TESTS: tuple[Test, ...] = get_args(Test)
DIRECTIONS: tuple[Direction, ...] = get_args(Direction)
KEYS: tuple[Key, ...] = get_args(Key)
GATE_READOUTS: tuple[GateReadout, ...] = get_args(GateReadout)
CALIBRATED_K = "calibrated"  # color: K is the size of the model's calibrated vocabulary

Choice = TypeVar("Choice", bound=str)

_NAME = re.compile(r"^[a-z][a-z0-9_]*$")
_TOP_LEVEL = {
    "id",
    "version",
    "title",
    "spec_section",
    "design",
    "hypotheses",
    "exclusions",
    "failure_conditions",
    "gate",
    "post_hoc",
    "registered_analyses",
    "held_out",
    "calibration",
}
_DESIGN = {"stimuli", "tasks", "conventions", "conditions", "n", "seeds", "grid", "readout", "k", "models",
           "crossover", "angles"}  # fmt: skip
_HYPOTHESIS = {"id", "statement", "endpoint", "contrast", "test", "direction", "alpha", "task", "condition", "key",
               "null"}  # fmt: skip
_GATE = {"control", "threshold_points", "readout"}
_STRICT_FRACTION = "must be a number strictly between 0 and 1"


@dataclass(frozen=True)
class Design:
    stimuli: Stimuli
    tasks: tuple[Task, ...]
    conventions: tuple[str, ...]
    conditions: tuple[Condition, ...]
    n: int
    seeds: tuple[int, ...]
    grid: int | None
    readout: PlanReadout
    k: tuple[tuple[str, int | str], ...]  # task -> K, or "calibrated"
    models: tuple[str, ...] = ()  # the registered model set of a cross-model comparison
    crossover: bool = False  # color arrays: also run the cue-crossover pairs
    angles: AngleSet | None = None  # color arrays: held-out or calibration angles

    def k_for(self, task: str) -> int | str:
        for name, value in self.k:
            if name == task:
                return value
        raise ConvswapError(f"the design has no task {task!r} (tasks: {', '.join(self.tasks)})")


@dataclass(frozen=True)
class Hypothesis:
    id: str
    statement: str
    endpoint: Endpoint
    contrast: tuple[str, ...]
    test: Test
    direction: Direction
    alpha: float
    task: str
    condition: str | None = None  # None: every condition of the design, each tested apart
    key: Key | None = None  # None: "target", or "coord" for a mispaired convention
    null: float | str | None = None  # a rate, or "chance" (1/K)


@dataclass(frozen=True)
class Gate:
    control: str
    threshold_points: float
    readout: GateReadout


@dataclass(frozen=True)
class HeldOutRule:
    """Which integer angles may be shown as held-out stimuli (spec 3.6, amended in section 8)."""

    min_from_own_anchor_deg: int
    max_from_own_anchor_deg: int
    min_from_other_anchor_deg: int
    off_calibration_grid: bool
    # Distance from every calibration angle whose swatch drew another word, kept as an
    # anchor or discarded.  None: the unamended rule, which saw only the anchors.
    min_from_other_name_deg: int | None = None


@dataclass(frozen=True)
class CalibrationDesign:
    """The free-report vocabulary calibration of spec 3.1."""

    step_deg: int
    renders_per_angle: int
    min_anchor_separation_deg: int
    min_candidate_mass: float


@dataclass(frozen=True)
class Plan:
    id: str
    version: int
    title: str
    spec_section: str
    path: Path
    sha256: str
    design: Design
    hypotheses: tuple[Hypothesis, ...]
    gate: Gate | None
    exclusions: tuple[str, ...]
    failure_conditions: tuple[str, ...]
    post_hoc: tuple[str, ...]
    registered_analyses: tuple[str, ...]
    held_out: HeldOutRule | None = None
    calibration: CalibrationDesign | None = None

    def hypothesis(self, hypothesis_id: str) -> Hypothesis:
        for hypothesis in self.hypotheses:
            if hypothesis.id == hypothesis_id:
                return hypothesis
        raise ConvswapError(f"{self.path}: no hypothesis {hypothesis_id!r}")


def registered_names(plan: Plan) -> frozenset[str]:
    """The analyses declared before the data: hypothesis ids and registered analyses.

    Any other name, including every name on the plan's own `post_hoc` list, is
    post hoc and must be labelled so wherever it appears.
    """
    return frozenset(h.id for h in plan.hypotheses) | frozenset(plan.registered_analyses)


def load_plan(path: str | Path) -> Plan:
    path = Path(path)
    try:
        raw = path.read_bytes()
    except OSError as error:
        raise ConvswapError(f"cannot read plan file {path}: {error.strerror}") from error
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as error:
        raise ConvswapError(f"{path}: not valid TOML: {error}") from error
    return _Reader(path).plan(data, sha256_hex(raw))


def find_experiment(plan_dir: str | Path, experiment_id: str) -> Path:
    """The plan file of an experiment: `<plan_dir>/<id>.toml` (a plan's id is its file name)."""
    plan_dir = Path(plan_dir)
    path = plan_dir / f"{experiment_id}.toml"
    if not path.is_file():
        known = ", ".join(p.stem for p in plan_files(plan_dir)) or "none"
        raise ConvswapError(f"no experiment {experiment_id!r} in {plan_dir} (experiments: {known})")
    return path


def plan_files(plan_dir: str | Path) -> list[Path]:
    return sorted(Path(plan_dir).glob("*.toml"))


def default_plan_dir() -> Path:
    """`./analysis_plan` when it exists, else the one in the source checkout this package runs from.

    The plan is part of the repository, not of an installed package: a run from
    the repository root finds it, and so does a run elsewhere of an editable install.
    """
    here = Path(PLAN_DIR_NAME)
    if here.is_dir():
        return here
    checkout = Path(__file__).resolve().parents[2] / PLAN_DIR_NAME
    if checkout.is_dir():
        return checkout
    raise ConvswapError(f"no {PLAN_DIR_NAME}/ folder here or in the source checkout; pass --plan-dir")


class _Reader:
    """Validates one file's parsed TOML; every error names the file, the field and the value."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def fail(self, field: str, problem: str, value: Any) -> ConvswapError:
        return ConvswapError(f"{self.path}: {field}: {problem}, got {value!r}")

    def plan(self, data: dict[str, Any], digest: str) -> Plan:
        self.known_keys(data, _TOP_LEVEL, "")
        plan_id = self.name(data, "id")
        if plan_id != self.path.stem:
            raise self.fail("id", f"must equal the file name {self.path.stem!r}", plan_id)
        design = self.design(self.table(data, "design"))
        hypotheses = tuple(self.hypothesis(h, i, design) for i, h in enumerate(self.tables(data, "hypotheses")))
        self.unique([h.id for h in hypotheses], "hypotheses.id")
        post_hoc = self.names(data, "post_hoc", default=())
        registered = self.names(data, "registered_analyses", default=())
        overlap = sorted((set(registered) | {h.id for h in hypotheses}) & set(post_hoc))
        if overlap:
            raise self.fail("post_hoc", "names an analysis that is also registered", overlap)
        return Plan(
            id=plan_id,
            version=self.integer(data, "version", minimum=1),
            title=self.text(data, "title"),
            spec_section=self.text(data, "spec_section"),
            path=self.path,
            sha256=digest,
            design=design,
            hypotheses=hypotheses,
            gate=self.gate(data["gate"], design) if "gate" in data else None,
            exclusions=self.texts(data, "exclusions"),
            failure_conditions=self.texts(data, "failure_conditions"),
            post_hoc=post_hoc,
            registered_analyses=registered,
            held_out=self.held_out(data["held_out"]) if "held_out" in data else None,
            calibration=self.calibration(data, design),
        )

    def design(self, data: dict[str, Any]) -> Design:
        self.known_keys(data, _DESIGN, "design.")
        stimuli = self.choice(data, "stimuli", STIMULI, "design.")
        tasks = self.choices(data, "tasks", TASKS, "design.")
        conditions = self.choices(data, "conditions", CONDITIONS, "design.")
        conventions = self.conventions(data, tasks, stimuli)
        grid = self.integer(data, "grid", prefix="design.", default=None)
        if grid is not None and grid not in (3, 4):
            raise self.fail("design.grid", "must be 3 or 4", grid)
        if grid is None and stimuli != "calibration":
            raise self.fail("design.grid", f"is required for {stimuli} stimuli", None)
        angles = data.get("angles")
        if (stimuli == "color_arrays") != (angles is not None):
            raise self.fail("design.angles", "is required for color_arrays stimuli and only for them", angles)
        if angles is not None and angles not in ANGLE_SETS:
            raise self.fail("design.angles", f"must be one of {', '.join(ANGLE_SETS)}", angles)
        crossover = data.get("crossover", False)
        if not isinstance(crossover, bool) or (crossover and stimuli != "color_arrays"):
            raise self.fail("design.crossover", "must be a boolean, true only for color_arrays stimuli", crossover)
        seeds = self.integers(data, "seeds", "design.")
        self.unique(list(seeds), "design.seeds")
        return Design(
            stimuli=stimuli,
            tasks=tasks,
            conventions=conventions,
            conditions=conditions,
            n=self.integer(data, "n", prefix="design.", minimum=1),
            seeds=seeds,
            grid=grid,
            readout=self.choice(data, "readout", READOUTS, "design."),
            k=self.k(data, tasks, stimuli),
            models=self.texts(data, "models", prefix="design.", default=()),
            crossover=crossover,
            angles=angles,
        )

    def conventions(self, data: dict[str, Any], tasks: tuple[str, ...], stimuli: str) -> tuple[str, ...]:
        names = self.names(data, "conventions", prefix="design.")
        if not names and stimuli != "calibration":
            raise self.fail("design.conventions", "must list at least one convention", [])
        self.unique(list(names), "design.conventions")
        for name in names:
            if name not in CONVENTIONS:
                raise self.fail("design.conventions", f"unknown convention (known: {', '.join(CONVENTIONS)})", name)
            for task in tasks:
                if task not in CONVENTIONS[name].tasks:
                    raise self.fail("design.conventions", f"convention does not apply to task {task!r}", name)
        return names

    def k(self, data: dict[str, Any], tasks: tuple[str, ...], stimuli: str) -> tuple[tuple[str, int | str], ...]:
        # Free report has no alternatives, so a calibration design has no K.
        if stimuli == "calibration":
            if "k" in data:
                raise self.fail(
                    "design.k", "must be absent for calibration (free report has no alternatives)", data["k"]
                )
            return ()
        value = data.get("k")
        if not isinstance(value, dict):
            value = {task: value for task in tasks}
        if sorted(value) != sorted(tasks):
            raise self.fail("design.k", f"must give K for exactly the tasks {list(tasks)}", value)
        for task, k in value.items():
            if k != CALIBRATED_K and (isinstance(k, bool) or not isinstance(k, int) or k < 2):
                raise self.fail(f"design.k.{task}", f"must be an integer >= 2 or {CALIBRATED_K!r}", k)
        return tuple((task, value[task]) for task in tasks)

    def hypothesis(self, data: dict[str, Any], index: int, design: Design) -> Hypothesis:
        prefix = f"hypotheses[{index}]."
        self.known_keys(data, _HYPOTHESIS, prefix)
        contrast = self.names(data, "contrast", prefix=prefix)
        if not contrast:
            raise self.fail(f"{prefix}contrast", "must name at least one convention", [])
        for name in contrast:
            if name not in design.conventions:
                raise self.fail(f"{prefix}contrast", "names a convention the design does not run", name)
        task = data.get("task", design.tasks[0] if len(design.tasks) == 1 else None)
        if task not in design.tasks:
            raise self.fail(f"{prefix}task", f"must be one of the design's tasks {list(design.tasks)}", task)
        condition = data.get("condition")
        if condition is not None and condition not in design.conditions:
            raise self.fail(f"{prefix}condition", f"must be one of {list(design.conditions)}", condition)
        key = data.get("key")
        if key is not None and key not in KEYS:
            raise self.fail(f"{prefix}key", f"must be one of {', '.join(KEYS)}", key)
        return Hypothesis(
            id=self.name(data, "id", prefix=prefix),
            statement=self.text(data, "statement", prefix=prefix),
            endpoint=self.choice(data, "endpoint", ENDPOINTS, prefix),
            contrast=contrast,
            test=self.choice(data, "test", TESTS, prefix),
            direction=self.choice(data, "direction", DIRECTIONS, prefix),
            alpha=self.number(data.get("alpha"), f"{prefix}alpha", lambda v: 0 < v < 1, _STRICT_FRACTION),
            task=task,
            condition=condition,
            key=key,
            null=self.null(data.get("null"), prefix),
        )

    def null(self, value: Any, prefix: str) -> float | str | None:
        if value is None or value == "chance":
            return value
        return self.number(value, f"{prefix}null", lambda v: 0 <= v <= 1, "must be 'chance' or a rate in [0, 1]")

    def gate(self, data: Any, design: Design) -> Gate:
        if not isinstance(data, dict):
            raise self.fail("gate", "must be a table", data)
        self.known_keys(data, _GATE, "gate.")
        control = data.get("control")
        if control not in design.conventions:
            raise self.fail("gate.control", "must be a convention the design runs", control)
        threshold = self.number(data.get("threshold_points"), "gate.threshold_points", lambda v: 0 <= v <= 100,
                                "must be a number of percentage points in [0, 100]")  # fmt: skip
        return Gate(control=control, threshold_points=threshold,
                    readout=self.choice(data, "readout", GATE_READOUTS, "gate."))  # fmt: skip

    def held_out(self, data: Any) -> HeldOutRule:
        if not isinstance(data, dict):
            raise self.fail("held_out", "must be a table", data)
        fields = {"min_from_own_anchor_deg", "max_from_own_anchor_deg", "min_from_other_anchor_deg",
                  "off_calibration_grid", "min_from_other_name_deg"}  # fmt: skip
        self.known_keys(data, fields, "held_out.")
        low = self.integer(data, "min_from_own_anchor_deg", prefix="held_out.", minimum=1)
        high = self.integer(data, "max_from_own_anchor_deg", prefix="held_out.", minimum=low)
        off_grid = data.get("off_calibration_grid")
        if not isinstance(off_grid, bool):
            raise self.fail("held_out.off_calibration_grid", "must be a boolean", off_grid)
        return HeldOutRule(
            min_from_own_anchor_deg=low,
            max_from_own_anchor_deg=high,
            min_from_other_anchor_deg=self.integer(data, "min_from_other_anchor_deg", prefix="held_out.", minimum=1),
            off_calibration_grid=off_grid,
            min_from_other_name_deg=self.integer(
                data, "min_from_other_name_deg", prefix="held_out.", minimum=1, default=None
            ),  # fmt: skip
        )

    def calibration(self, data: dict[str, Any], design: Design) -> CalibrationDesign | None:
        if (design.stimuli == "calibration") != ("calibration" in data):
            raise self.fail(
                "calibration", "is required for calibration stimuli and only for them", data.get("calibration")
            )
        if "calibration" not in data:
            return None
        table = self.table(data, "calibration")
        self.known_keys(table, {"step_deg", "renders_per_angle", "min_anchor_separation_deg", "min_candidate_mass"},
                        "calibration.")  # fmt: skip
        step = self.integer(table, "step_deg", prefix="calibration.", minimum=1)
        if 360 % step:
            raise self.fail("calibration.step_deg", "must divide 360", step)
        return CalibrationDesign(
            step_deg=step,
            renders_per_angle=self.integer(table, "renders_per_angle", prefix="calibration.", minimum=2),
            min_anchor_separation_deg=self.integer(
                table, "min_anchor_separation_deg", prefix="calibration.", minimum=1
            ),
            min_candidate_mass=self.number(
                table.get("min_candidate_mass"), "calibration.min_candidate_mass", lambda v: 0 < v < 1, _STRICT_FRACTION
            ),
        )

    # -- field readers ---------------------------------------------------------------

    def known_keys(self, data: dict[str, Any], allowed: set[str], prefix: str) -> None:
        for key in data:
            if key not in allowed:
                raise self.fail(f"{prefix}{key}", f"unknown field (known: {', '.join(sorted(allowed))})", data[key])

    def table(self, data: dict[str, Any], field: str) -> dict[str, Any]:
        value = data.get(field)
        if not isinstance(value, dict):
            raise self.fail(field, "must be a table", value)
        return value

    def tables(self, data: dict[str, Any], field: str) -> list[dict[str, Any]]:
        value = data.get(field, [])
        if not isinstance(value, list) or not all(isinstance(item, dict) for item in value):
            raise self.fail(field, "must be an array of tables ([[...]])", value)
        return value

    def text(self, data: dict[str, Any], field: str, prefix: str = "") -> str:
        value = data.get(field)
        if not isinstance(value, str) or not value.strip():
            raise self.fail(f"{prefix}{field}", "must be a non-empty string", value)
        return value

    def texts(self, data: dict[str, Any], field: str, prefix: str = "", default: Any = None) -> tuple[str, ...]:
        value = data.get(field, default)
        if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) and v.strip() for v in value):
            raise self.fail(f"{prefix}{field}", "must be a list of non-empty strings", value)
        return tuple(value)

    def name(self, data: dict[str, Any], field: str, prefix: str = "") -> str:
        value = data.get(field)
        if not isinstance(value, str) or not _NAME.match(value):
            raise self.fail(f"{prefix}{field}", "must be a lower-case identifier (a-z, 0-9, _)", value)
        return value

    def names(self, data: dict[str, Any], field: str, prefix: str = "", default: Any = None) -> tuple[str, ...]:
        value = data.get(field, default)
        if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) and _NAME.match(v) for v in value):
            raise self.fail(f"{prefix}{field}", "must be a list of lower-case identifiers", value)
        return tuple(value)

    def choice(self, data: dict[str, Any], field: str, allowed: tuple[Choice, ...], prefix: str) -> Choice:
        value = data.get(field)
        if value not in allowed:
            raise self.fail(f"{prefix}{field}", f"must be one of {', '.join(allowed)}", value)
        return value

    def choices(self, data: dict[str, Any], field: str, allowed: tuple[Choice, ...], prefix: str) -> tuple[Choice, ...]:
        value = data.get(field)
        if not isinstance(value, list) or not value:
            raise self.fail(f"{prefix}{field}", f"must be a non-empty list drawn from {', '.join(allowed)}", value)
        for item in value:
            if item not in allowed:
                raise self.fail(f"{prefix}{field}", f"must be drawn from {', '.join(allowed)}", item)
        self.unique(value, f"{prefix}{field}")
        return tuple(value)

    def integer(self, data: dict[str, Any], field: str, prefix: str = "", minimum: int = 0, default: Any = ...) -> Any:
        if field not in data and default is not ...:
            return default
        value = data.get(field)
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise self.fail(f"{prefix}{field}", f"must be an integer >= {minimum}", value)
        return value

    def number(self, value: Any, field: str, within: Callable[[float], bool], problem: str) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not within(value):
            raise self.fail(field, problem, value)
        return float(value)

    def integers(self, data: dict[str, Any], field: str, prefix: str) -> tuple[int, ...]:
        value = data.get(field)
        if not isinstance(value, list) or not value:
            raise self.fail(f"{prefix}{field}", "must be a non-empty list of integers >= 0", value)
        for item in value:
            if isinstance(item, bool) or not isinstance(item, int) or item < 0:
                raise self.fail(f"{prefix}{field}", "must hold integers >= 0", item)
        return tuple(value)

    def unique(self, values: list[Any], field: str) -> None:
        repeated = sorted({v for v in values if values.count(v) > 1})
        if repeated:
            raise self.fail(field, "repeats", repeated)
