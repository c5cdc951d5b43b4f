"""The parser operations a protocol's pipeline names: THE extension point for new ways of reading a drawn answer.

Each operation is one function registered with the `operation` decorator, with the pydantic model of the
parameters a declaration may give it, the parts of the parse state it needs and those it gives:

    @operation("centroid", needs=("selected",), gives=("point",))
    def centroid(state: ParseState, params: NoParams) -> None:
        state.point = state.components[state.selected].centroid

A pipeline is checked when it is declared: every parameter against the model, every operation's needs against
what the steps before it give, and the output against the protocol's output kind.  At parse time an operation
either updates the state, raises `Noncompliant` (an image came back but the contract is not met: no mark, two
marks, a mark outside the layout) or fails otherwise (the parser could not run on it).

Colours follow OpenCV's HSV convention (hue 0-179, saturation and value 0-255), the one ProVisE's thresholds are
written in; components are 8-connected.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Annotated, Any, Literal

import numpy as np

from convswap.core import ConvswapError
from convswap.images import MAX_IMAGE_PIXELS
from convswap.protocols.layouts import center_cell, slot_of, slot_rects
from convswap.validation import Table, checked, is_integer, is_number, one_of

if TYPE_CHECKING:
    from PIL import Image

    from convswap.protocols.protocol import OutputKind, Protocol, Step


class Noncompliant(Exception):
    """The image does not meet the protocol's contract; the message says how."""


@dataclass(frozen=True)
class Component:
    """One connected component of the protocol's colour: area in pixels, bbox (x, y, w, h), centroid (x, y) in
    pixels of the source resolution, fill ratio (area over its bounding box), and whether the parser kept it (when
    not, why)."""

    area: int
    bbox: tuple[int, int, int, int]
    centroid: tuple[float, float]
    fill_ratio: float
    kept: bool = True
    reason: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"area": self.area, "bbox": list(self.bbox), "centroid": list(self.centroid),
                "fill_ratio": self.fill_ratio, "kept": self.kept, "reason": self.reason}  # fmt: skip

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Component:
        x, y, w, h = data["bbox"]
        cx, cy = data["centroid"]
        return cls(int(data["area"]), (x, y, w, h), (cx, cy), data["fill_ratio"], data["kept"], data["reason"])


@dataclass
class ParseState:
    """What the steps of one parse read and write; `components[i]` is the label i+1 of `labels`."""

    protocol: Protocol
    k: int | None
    layout: str | None
    generated_image: Image.Image
    source_image: Image.Image
    generated: np.ndarray | None = None  # RGB, uint8, at the source's resolution
    source: Image.Image | None = None  # RGB; operations read the parts they need
    mask: np.ndarray | None = None  # uint8, 255 where a pixel is the protocol's colour
    labels: np.ndarray | None = None
    components: list[Component] = field(default_factory=list)
    misshapen: set[int] = field(default_factory=set)  # components refused for their shape, not their size
    selected: int | None = None
    point: tuple[float, float] | None = None
    output: Any = None

    @property
    def size(self) -> tuple[int, int]:
        return self.source_image.size


@dataclass(frozen=True)
class Operation:
    name: str
    function: Callable[[ParseState, Any], None]
    params: type[Table]
    needs: tuple[str, ...]
    gives: tuple[str, ...]
    output: OutputKind | None  # the output kind it gives, when it gives the output


OPERATIONS: dict[str, Operation] = {}


def operation(
    name: str,
    params: type[Table] | None = None,
    *,
    needs: tuple[str, ...] = (),
    gives: tuple[str, ...] = (),
    output: OutputKind | None = None,
) -> Callable[[Callable[[ParseState, Any], None]], Callable[[ParseState, Any], None]]:
    """Register a function as the operation `name` (see the module docstring)."""

    def register(function: Callable[[ParseState, Any], None]) -> Callable[[ParseState, Any], None]:
        if name in OPERATIONS:
            raise ConvswapError(f"operation {name!r} is registered twice")
        gives_all = (*gives, "output") if output else gives
        OPERATIONS[name] = Operation(name, function, params or NoParams, needs, gives_all, output)
        return function

    return register


INPUTS = ("generated_image", "source_image")


def check_pipeline(steps: tuple[Step, ...], output_kind: str) -> tuple[int | None, str | None]:
    """(step index, problem) for the first step whose needs no earlier step gives, or (None, problem) when the
    pipeline does not end in the protocol's output kind; (None, None) when it is sound."""
    available = set(INPUTS)
    gives_output: Operation | None = None
    for index, step in enumerate(steps):
        op = OPERATIONS[step.op]
        missing = [need for need in op.needs if need not in available]
        if missing:
            return index, f"needs the {', '.join(missing)}, which no earlier step gives"
        available.update(op.gives)
        if op.output:
            gives_output = op
    if gives_output is None:
        return None, f"must end in a step that gives the {output_kind} output"
    if gives_output.output != output_kind:
        return None, f"gives a {gives_output.output} output ({gives_output.name}), not the declared {output_kind}"
    return None, None


def run_step(state: ParseState, step: Step) -> None:
    op = OPERATIONS[step.op]
    op.function(state, _params(op.params, step.params))


_PARAMS_CACHE: dict[tuple[str, Any], Table] = {}


def _params(model: type[Table], frozen: Any) -> Table:
    key = (model.__name__, frozen)
    if key not in _PARAMS_CACHE:
        _PARAMS_CACHE[key] = model.model_validate(dict(frozen))
    return _PARAMS_CACHE[key]


def _cv2() -> Any:
    import cv2

    return cv2


# --- parameters --------------------------------------------------------------------------------------------------


def _fraction(inclusive_zero: bool) -> Any:
    low = "0 <=" if inclusive_zero else "0 <"
    return checked(
        lambda value: is_number(value) and (value >= 0 if inclusive_zero else value > 0) and value <= 1,
        f"must be a number with {low} x <= 1",
    )


MAX_KERNEL = 51
# The least rise above a cut that makes a part a mark of its own, in pixels: a stroke 4 pixels wide has a depth of
# 2, and the distance transform's steps along its edges are about 1.
RISE_PIXELS = 1.5
# The square the shift between source and generated image is measured on, in pixels: phase correlation on it
# costs a millisecond, on a whole 1024-pixel image 30.
ALIGN_WINDOW = 256
# A mark's area against the median mark's: beyond this, no drawn answer has marks of one size.
MAX_AREA_RATIO = 100


class NoParams(Table):
    pass


class SubtractParams(Table):
    # The farthest a regenerated image moves the photograph, in pixels: the source is aligned within it.
    guard: Annotated[int, checked(lambda v: is_integer(v) and 0 <= v <= 50, "must be an integer 0 to 50")] = 7
    # How far (RGB distance, 0 to 441) a generated pixel may lie from the aligned source's and still be the
    # photograph's own: JPEG at quality 60 moves a flat patch's pixels by less; a mark's pure colour over a paler
    # patch of its hue lies farther.
    tolerance: Annotated[int, checked(lambda v: is_integer(v) and 0 <= v <= 441, "must be an integer 0 to 441")] = 40


class MorphologyParams(Table):
    mode: Annotated[Literal["open", "close", "dilate"], one_of(("open", "close", "dilate"))]
    # A mark a protocol asks for is tens of pixels across: a larger kernel erases it, and costs its square per pixel
    # (kernel = 100001 took a minute and 10 GB a parse).
    kernel: Annotated[int, checked(lambda v: is_integer(v) and 1 <= v <= MAX_KERNEL and v % 2 == 1,
                                   f"must be an odd integer 1 to {MAX_KERNEL}")]  # fmt: skip
    iterations: Annotated[int, checked(lambda v: is_integer(v) and 1 <= v <= 10, "must be an integer 1 to 10")] = 1


class FilterParams(Table):
    min_area: Annotated[int, checked(lambda v: is_integer(v) and 1 <= v <= MAX_IMAGE_PIXELS,
                                     f"must be an integer 1 to {MAX_IMAGE_PIXELS} (the most pixels an image has)")] = 1  # fmt: skip
    max_fraction: Annotated[float, _fraction(False)] = 1.0  # of the image's area
    min_fill: Annotated[float, _fraction(True)] = 0.0
    min_solidity: Annotated[float, _fraction(True)] = 0.0
    max_area_ratio: Annotated[float | None, checked(lambda v: is_number(v) and 1 < v <= MAX_AREA_RATIO,
                                                    f"must be a number > 1 and at most {MAX_AREA_RATIO}")] = None  # fmt: skip


class MergedParams(Table):
    # The lowest cut through a mark's depth, as a share of its deepest point: marks run together meet at a neck
    # narrower than each of them, which a cut at this depth or deeper separates.
    level: Annotated[float, _fraction(False)] = 0.3
    # A part the cut leaves counts as a mark of its own when its own deepest point rises this share above the cut
    # (and at least RISE_PIXELS): a stroke's or a ring's uneven edge leaves fragments that barely rise.
    rise: Annotated[float, _fraction(False)] = 0.15
    # ... and is at least this share of the mark's deepest point: a small bump on a dot is not a second dot.
    comparable: Annotated[float, _fraction(False)] = 0.5


class SelectParams(Table):
    ambiguous_ratio: Annotated[float, _fraction(False)]


class SlotParams(Table):
    min_inside: Annotated[float, _fraction(False)] = 0.8


class CountParams(Table):
    refuse_misshapen: Annotated[bool, checked(lambda v: isinstance(v, bool), "must be a boolean")] = True


# --- operations --------------------------------------------------------------------------------------------------


@operation("load_generated", needs=("generated_image",), gives=("generated",))
def load_generated(state: ParseState, params: NoParams) -> None:
    """The generated image as RGB at the source's resolution: a model may answer at another size (ProVisE resizes
    likewise), and every threshold below is in source pixels."""
    from PIL import Image

    image = _rgb(state.generated_image)
    if image.size != state.size:
        image = image.resize(state.size, Image.Resampling.BILINEAR)
    state.generated = np.asarray(image)


@operation("load_source", needs=("source_image",), gives=("source",))
def load_source(state: ParseState, params: NoParams) -> None:
    state.source = _rgb(state.source_image)


def _rgb(image: Image.Image) -> Image.Image:
    return image if image.mode == "RGB" else image.convert("RGB")


def colour_mask(protocol: Protocol, rgb: np.ndarray) -> np.ndarray:
    """255 where a pixel of an RGB image falls inside the protocol's HSV range, else 0."""
    cv2 = _cv2()
    hsv = cv2.cvtColor(rgb, cv2.COLOR_RGB2HSV)
    return cv2.inRange(hsv, np.array(protocol.hsv.lower, np.uint8), np.array(protocol.hsv.upper, np.uint8))


@operation("hsv_mask", needs=("generated",), gives=("mask",))
def hsv_mask(state: ParseState, params: NoParams) -> None:
    """The generated pixels inside the protocol's declared `hsv` range (one range, declared once, which the
    painter and the viewer's mask read too)."""
    assert state.generated is not None
    state.mask = colour_mask(state.protocol, state.generated)


@operation("subtract", SubtractParams, needs=("mask", "source"))
def subtract(state: ParseState, params: SubtractParams) -> None:
    """Remove from the mask what the photograph already had at the same place: a pixel of the protocol's colour in
    the source, aligned to the generated image (a regenerated image moves it a few pixels, up to `guard`), which
    the generated pixel still matches (within `tolerance`).  A mark painted over a patch of its own hue differs
    from the patch and stays whole; the patch itself, moved, goes whole, not leaving slivers beside a guard band."""
    cv2 = _cv2()
    assert state.mask is not None and state.source is not None and state.generated is not None
    height, width = state.mask.shape
    # Only a marked pixel within `guard` of the source's colour can be the photograph's own: the source is read
    # around the marks alone (a mark is small beside the image), twice the guard out, so that a shift of up to the
    # guard brings in none that was not read.
    x, y, w, h = cv2.boundingRect(state.mask)
    if not w:
        return
    reach = 2 * params.guard
    x0, y0 = max(x - reach, 0), max(y - reach, 0)
    x1, y1 = min(x + w + reach, width), min(y + h + reach, height)
    source = np.asarray(state.source)
    colour = colour_mask(state.protocol, source[y0:y1, x0:x1])
    if not colour.any():
        return
    marked = state.mask[y0:y1, x0:x1]
    if params.guard:
        side = 2 * params.guard + 1
        near = cv2.dilate(colour, cv2.getStructuringElement(cv2.MORPH_ELLIPSE, (side, side)))
        if not cv2.bitwise_and(marked, near).any():
            return
    dx, dy = _shift(cv2, source, state.generated, params.guard)
    if (dx, dy) != (0, 0):
        moved = np.array([[1, 0, dx], [0, 1, dy]], dtype=np.float32)
        # What a shift brings in past the image's edge is the edge repeated, as an editor extends a moved image.
        colour = cv2.warpAffine(colour, moved, colour.shape[::-1], flags=cv2.INTER_NEAREST,
                                borderMode=cv2.BORDER_REPLICATE)  # fmt: skip
    # Of the marked pixels where the aligned source has the colour, those the generated pixel still matches.
    own = cv2.bitwise_and(colour, marked)
    rows, cols = np.nonzero(own)
    was = source[np.clip(rows + y0 - dy, 0, height - 1), np.clip(cols + x0 - dx, 0, width - 1)].astype(np.float32)
    difference = state.generated[rows + y0, cols + x0].astype(np.float32) - was
    changed = np.einsum("ij,ij->i", difference, difference) > params.tolerance**2
    own[rows[changed], cols[changed]] = 0
    # The pixel alignment leaves along a patch's edge (a sub-pixel shift, JPEG's ringing) is the patch's too.
    own = cv2.dilate(own, np.ones((3, 3), np.uint8))
    mask = state.mask.copy()
    mask[y0:y1, x0:x1] = cv2.bitwise_and(marked, cv2.bitwise_not(own))
    state.mask = mask


def _shift(cv2: Any, source: np.ndarray, generated: np.ndarray, guard: int) -> tuple[int, int]:
    """The whole-pixel shift that moves the source onto the generated image, by phase correlation on the middle
    ALIGN_WINDOW pixels square (the shift is the whole image's); none when it finds none within `guard` pixels
    (an image redrawn beyond recognition)."""
    height, width = source.shape[:2]
    if not guard or min(height, width) < 2 * guard + 2:
        return 0, 0
    top, left = max((height - ALIGN_WINDOW) // 2, 0), max((width - ALIGN_WINDOW) // 2, 0)
    middle = (slice(top, top + ALIGN_WINDOW), slice(left, left + ALIGN_WINDOW))
    gray = [cv2.cvtColor(image[middle], cv2.COLOR_RGB2GRAY).astype(np.float32) for image in (source, generated)]
    window = cv2.createHanningWindow(gray[0].shape[::-1], cv2.CV_32F)
    (dx, dy), _ = cv2.phaseCorrelate(gray[0], gray[1], window)
    shift = round(dx), round(dy)
    return shift if max(abs(shift[0]), abs(shift[1])) <= guard else (0, 0)


@operation("morphology", MorphologyParams, needs=("mask",))
def morphology(state: ParseState, params: MorphologyParams) -> None:
    """A square kernel of `kernel` pixels: open removes specks and threads, close fills pinholes, dilate grows."""
    cv2 = _cv2()
    kernel = np.ones((params.kernel, params.kernel), np.uint8)
    modes = {"open": cv2.MORPH_OPEN, "close": cv2.MORPH_CLOSE, "dilate": cv2.MORPH_DILATE}
    state.mask = cv2.morphologyEx(state.mask, modes[params.mode], kernel, iterations=params.iterations)


@operation("components", needs=("mask",), gives=("components",))
def components(state: ParseState, params: NoParams) -> None:
    cv2 = _cv2()
    assert state.mask is not None
    labels = np.zeros(state.mask.shape, np.int32)
    state.labels, state.components = labels, []
    # Labelled within the bounding box of the marked pixels: a mark is small beside the image.
    x0, y0, w, h = cv2.boundingRect(state.mask)
    if not w:
        return
    count, crop, stats, centroids = cv2.connectedComponentsWithStats(
        np.ascontiguousarray(state.mask[y0 : y0 + h, x0 : x0 + w]), connectivity=8
    )
    labels[y0 : y0 + h, x0 : x0 + w] = crop
    for label in range(1, count):
        x, y, w, h, area = (int(v) for v in stats[label])
        centroid = (round(float(centroids[label][0]) + x0, 3), round(float(centroids[label][1]) + y0, 3))
        state.components.append(Component(area, (x + x0, y + y0, w, h), centroid, round(area / (w * h), 4)))


def _solidity(state: ParseState, index: int) -> float:
    """The component's area over that of its filled convex hull, both counted in pixels."""
    cv2 = _cv2()
    assert state.labels is not None
    x, y, w, h = state.components[index].bbox
    crop = (state.labels[y : y + h, x : x + w] == index + 1).astype(np.uint8)
    contours, _ = cv2.findContours(crop, cv2.RETR_EXTERNAL, cv2.CHAIN_APPROX_NONE)
    hull = np.zeros_like(crop)
    cv2.fillConvexPoly(hull, cv2.convexHull(np.concatenate(contours)), 1)
    return int(crop.sum()) / max(int(hull.sum()), 1)


@operation("filter", FilterParams, needs=("components",))
def filter_components(state: ParseState, params: FilterParams) -> None:
    """Keep the components of plausible size and shape: at least `min_area` pixels and at most `max_fraction` of
    the image, filling at least `min_fill` of their bounding box, at least `min_solidity` of their convex hull
    (marks merged into one blob are not convex), and, with `max_area_ratio`, at most that many times the
    median area of the other kept components (two marks merged are twice the size of the rest)."""
    width, height = state.size
    largest = params.max_fraction * width * height
    for index, component in enumerate(state.components):
        if not component.kept:
            continue
        reason = None
        if component.area < params.min_area:
            reason = f"area {component.area} < {params.min_area} pixels: too small to localize"
        elif component.area > largest:
            reason = f"area {component.area} > {params.max_fraction} of the image: not a mark"
        elif component.fill_ratio < params.min_fill:
            reason = f"fill ratio {component.fill_ratio:.2f} < {params.min_fill}: too diffuse"
            state.misshapen.add(index)
        elif params.min_solidity and (solidity := _solidity(state, index)) < params.min_solidity:
            reason = f"solidity {solidity:.2f} < {params.min_solidity}: not one convex mark (merged marks?)"
            state.misshapen.add(index)
        if reason:
            state.components[index] = replace(component, kept=False, reason=reason)
    if params.max_area_ratio is not None:
        _refuse_outsized(state, params.max_area_ratio)


@operation("refuse_merged", MergedParams, needs=("components",))
def refuse_merged(state: ParseState, params: MergedParams) -> None:
    """Refuse a kept component that is several marks run together, whatever the marks' shape.

    Its depth at each pixel is the distance to the nearest pixel outside it, holes filled (a ring is as deep as
    the disk it encloses).  One mark of any shape, a dot, a star, a tick or a ring, has one deepest region that
    every shallower level stays joined to; two dots run together have two, joined only by a shallow neck.  So the
    component is cut at depths from `level` of its deepest point up, and refused (merged markers: no count) when a
    cut leaves two or more parts that each rise `rise` of their own depth above it and are `comparable` deep.
    """
    cv2 = _cv2()
    from scipy import ndimage

    assert state.labels is not None
    for index in _kept(state):
        x, y, w, h = state.components[index].bbox
        inside = (state.labels[y : y + h, x : x + w] == index + 1).astype(np.uint8)
        filled = np.zeros((h + 2, w + 2), np.uint8)  # a pixel of background around it, for the distances
        contours, _ = cv2.findContours(inside, cv2.RETR_EXTERNAL, cv2.CHAIN_APPROX_NONE)
        cv2.drawContours(filled, contours, -1, 1, thickness=cv2.FILLED, offset=(1, 1))
        depth = cv2.distanceTransform(filled, cv2.DIST_L2, 5)
        deepest = float(depth.max())
        for share in np.arange(params.level, 0.95, 0.1):
            cut = share * deepest
            parts, labels = cv2.connectedComponents((depth >= cut).astype(np.uint8), connectivity=8)
            if parts <= 2:
                continue
            peaks = ndimage.maximum(depth, labels, range(1, parts))
            marks = [peak for peak in peaks if peak >= params.comparable * deepest
                     and peak - cut >= max(params.rise * peak, RISE_PIXELS)]  # fmt: skip
            if len(marks) >= 2:
                component = state.components[index]
                reason = (f"{len(marks)} marks run together: a cut at {share:.1f} of its depth of {deepest:.1f} "
                          "pixels parts them (merged markers)")  # fmt: skip
                state.components[index] = replace(component, kept=False, reason=reason)
                state.misshapen.add(index)
                break


def _refuse_outsized(state: ParseState, ratio: float) -> None:
    kept = _kept(state)
    outsized = []
    for index in kept:
        others = [state.components[other].area for other in kept if other != index]
        if others and state.components[index].area > ratio * float(np.median(others)):
            outsized.append((index, float(np.median(others))))
    for index, median in outsized:
        component = state.components[index]
        reason = f"area {component.area} > {ratio} times the other marks' median ({median:.0f}): merged marks?"
        state.components[index] = replace(component, kept=False, reason=reason)
        state.misshapen.add(index)


def _kept(state: ParseState) -> list[int]:
    return [index for index, component in enumerate(state.components) if component.kept]


@operation("select_one", SelectParams, needs=("components",), gives=("selected",))
def select_one(state: ParseState, params: SelectParams) -> None:
    """The largest kept component; ambiguous, so no answer, when the second largest has at least
    `ambiguous_ratio` of its area."""
    kept = sorted(_kept(state), key=lambda index: -state.components[index].area)
    if not kept:
        raise Noncompliant("no mark: no component of the protocol's colour passed the filter")
    first = state.components[kept[0]]
    if len(kept) > 1:
        second = state.components[kept[1]]
        ratio = second.area / first.area
        if ratio >= params.ambiguous_ratio:
            raise Noncompliant(
                f"ambiguous: a second mark of {second.area} pixels is {ratio:.2f} of the largest ({first.area}), "
                f"at least {params.ambiguous_ratio}"
            )
    for index in kept[1:]:
        other = state.components[index]
        state.components[index] = replace(other, kept=False, reason=(
            f"smaller than the selected mark ({other.area} < {params.ambiguous_ratio} of {first.area} pixels)"))  # fmt: skip
    state.selected = kept[0]


@operation("centroid", needs=("selected",), gives=("point",))
def centroid(state: ParseState, params: NoParams) -> None:
    assert state.selected is not None
    state.point = state.components[state.selected].centroid


@operation("normalize", needs=("point",), output="point")
def normalize(state: ParseState, params: NoParams) -> None:
    """The point as fractions of the image's width and height, (0, 0) the top-left corner."""
    assert state.point is not None
    width, height = state.size
    state.output = (round(state.point[0] / width, 6), round(state.point[1] / height, 6))


@operation("slot_of_point", SlotParams, needs=("selected",), output="slot")
def slot_of_point(state: ParseState, params: SlotParams) -> None:
    """The slot of the layout holding the selected mark's centroid, when at least `min_inside` of the mark lies
    in it; a mark outside every slot, on the 3x3 grid's center, or across two slots is no answer."""
    assert state.selected is not None and state.labels is not None and state.layout is not None
    component = state.components[state.selected]
    width, height = state.size
    x, y = component.centroid
    if state.layout == "grid3x3_outer":
        x0, y0, x1, y1 = center_cell(width, height)
        if x0 <= x < x1 and y0 <= y < y1:
            raise Noncompliant(f"the mark at ({x:.0f}, {y:.0f}) is on the center cell, which is no answer")
    slot = slot_of(state.layout, state.k, width, height, x, y)
    if slot is None:
        raise Noncompliant(f"the mark at ({x:.0f}, {y:.0f}) lies outside the {state.layout} layout's slots")
    x0, y0, x1, y1 = slot_rects(state.layout, state.k, width, height)[slot - 1]
    rows = slice(int(np.ceil(y0 - 0.5)), int(np.ceil(y1 - 0.5)))  # pixel centers inside the half-open rectangle
    cols = slice(int(np.ceil(x0 - 0.5)), int(np.ceil(x1 - 0.5)))
    inside = int((state.labels[rows, cols] == state.selected + 1).sum()) / component.area
    if inside < params.min_inside:
        raise Noncompliant(
            f"the mark lies across slots: {inside:.0%} of it is inside slot {slot}, less than {params.min_inside:.0%}"
        )
    state.output = slot


@operation("count", CountParams, needs=("components",), output="count")
def count(state: ParseState, params: CountParams) -> None:
    """The number of kept components; none, or (with `refuse_misshapen`) a mark as large as half the kept marks'
    median refused for its shape, which may be several marks merged, is no answer."""
    kept_areas = [state.components[index].area for index in _kept(state)]
    # A misshapen component counts against the count when it is as large as a mark: a sliver of the photograph's own
    # colour that the re-encoding moved is not one.
    least = 0.5 * float(np.median(kept_areas)) if kept_areas else 0.0
    misshapen = [index for index in sorted(state.misshapen) if state.components[index].area >= least]
    if params.refuse_misshapen and misshapen:
        component = state.components[misshapen[0]]
        raise Noncompliant(f"a mark of {component.area} pixels has an irregular shape ({component.reason})")
    kept = len(kept_areas)
    if not kept:
        raise Noncompliant("no mark: no component of the protocol's colour passed the filter")
    state.output = kept
