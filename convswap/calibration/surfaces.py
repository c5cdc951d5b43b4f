"""Token surfaces: which spelling of an answer alphabet a model actually emits, resolved by measurement.

An alphabet ("1".."K", or a calibrated color vocabulary) can begin an answer in
four surface variants: bare ("green"), leading space (" green"), capitalized
("Green") and both (" Green").  Tokenizers give each its own first token, and a
scorer that reads the wrong one reads a model that says " Green" as a model
that never answers.  So the variant is measured per model: probes with known
answers are shown, and the variant whose candidate first tokens carry the most
mean softmax mass is kept.  Two refusals guard the readout:

- a variant under which two candidates share their first token cannot tell
  those candidates apart, so it is never chosen; when every variant shares one
  (SmolVLM's " 1".." 9" all begin with the space token 216, and "1" and "10"
  share "1" in any digit-by-digit tokenizer) the alphabet has no first-token
  readout at all: `NoFirstTokenReadout`, and the answer must be generated and
  parsed instead;
- when even the best variant's mass is under MIN_CANDIDATE_MASS the model is
  not answering in that alphabet at all: `SurfaceRefused`.

Variants that spell every candidate identically to an earlier variant (the
capitalized forms of digits) are skipped, so each distinct spelling is measured
once and ties go to the earlier variant in VARIANTS order.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
from PIL import Image

from convswap.core import ConvswapError, OutputFormat, Prompt, Surface, Task
from convswap.instructions import WORD_ANSWER, integer_answer
from convswap.readout.base import Backend, LogitsUnavailable, Query
from convswap.readout.first_token import candidate_masses
from convswap.readout.logprobs import Bounds, Candidate, candidate_bounds
from convswap.readout.surface import PROBE_CONVENTION, VARIANTS, variant_strings

MIN_CANDIDATE_MASS = 0.5

# Probe texts end with the output instruction the experiment prompts use, so the
# surface measured is the one those prompts elicit.
PROBE_IMAGE_SIZE = 224
PROBE_IMAGE_GRAY = (128, 128, 128)


def first_token_ids(backend: Backend, strings: Sequence[str]) -> tuple[int, ...]:
    """The first token id of each string as the start of an answer."""
    ids = []
    for text in strings:
        tokens = backend.encode(text)
        if not tokens:
            raise ConvswapError(f"{backend.spec}: {text!r} encodes to no tokens")
        ids.append(int(tokens[0]))
    return tuple(ids)


def _check_alphabet(alphabet: Sequence[str]) -> tuple[str, ...]:
    alphabet = tuple(alphabet)
    if len(alphabet) < 2 or len(set(alphabet)) != len(alphabet) or not all(s and s == s.strip() for s in alphabet):
        raise ConvswapError(
            f"an alphabet needs at least two distinct, non-empty, unpadded answers; got {list(alphabet)}"
        )
    return alphabet


def distinct_variants(alphabet: Sequence[str]) -> tuple[str, ...]:
    """VARIANTS less those that spell the alphabet exactly as an earlier variant does."""
    seen: set[tuple[str, ...]] = set()
    kept = []
    for variant in VARIANTS:
        strings = variant_strings(alphabet, variant)
        if strings not in seen:
            seen.add(strings)
            kept.append(variant)
    return tuple(kept)


class NoFirstTokenReadout(ConvswapError):
    """Under every surface variant some candidates share their first token: generate and parse instead.

    first_tokens: each variant's first token ids, or its surface strings where candidates are matched by text.
    """

    def __init__(self, alphabet: tuple[str, ...], first_tokens: Mapping[str, tuple[int, ...] | tuple[str, ...]]):
        self.alphabet = alphabet
        self.first_tokens = dict(first_tokens)
        listing = "; ".join(f"{variant}: {list(ids)}" for variant, ids in self.first_tokens.items())
        by_text = any(isinstance(first, str) for ids in self.first_tokens.values() for first in ids)
        why = (
            "matched by text without the model's tokenizer, one answer's surface begins another's under every "
            "surface variant, so their first tokens cannot be told apart"
            if by_text
            else "candidates share a first token under every surface variant"
        )
        super().__init__(
            f"alphabet {list(alphabet)} has no first-token readout: {why} ({listing}); score it by generating and "
            "parsing"
        )


def mass_listing(masses: Mapping[str, float], shared: Sequence[str]) -> str:
    """Each variant's mean candidate mass, shared ones marked: "bare 0.912, space 0.031 (shared first token)"."""
    return ", ".join(
        f"{variant} {mass:.3f}" + (" (shared first token)" if variant in shared else "")
        for variant, mass in masses.items()
    )


class SurfaceRefused(ConvswapError):
    """No readable surface variant puts MIN_CANDIDATE_MASS on the candidates."""

    def __init__(
        self, alphabet: tuple[str, ...], masses: Mapping[str, float], shared: Sequence[str], bounded: str = ""
    ):
        self.alphabet = alphabet
        self.masses = dict(masses)
        self.shared = tuple(shared)
        # bounded: the evidence the masses are upper bounds from ("the server's top 20"), empty where exact
        listing = f"mean mass per variant at most, from {bounded}" if bounded else "mean mass per variant"
        super().__init__(
            f"alphabet {list(alphabet)} refused: no surface variant puts {MIN_CANDIDATE_MASS} of the probes' "
            f"first-token mass on the candidates ({listing}: {mass_listing(self.masses, self.shared)})"
        )


def integer_probe(answer: str, k: int) -> str:
    return f"Reply with the number {answer}. {integer_answer(k)}"


def word_probe(answer: str, k: int) -> str:
    return f"Reply with the color {answer}. {WORD_ANSWER}"


def probe_image() -> Image.Image:
    """A plain mid-gray image: the probes ask for a stated answer, so the image carries nothing."""
    return Image.new("RGB", (PROBE_IMAGE_SIZE, PROBE_IMAGE_SIZE), PROBE_IMAGE_GRAY)


def probe_query(alphabet: Sequence[str], output: OutputFormat, image: Image.Image | None = None) -> Query:
    """One visible-condition query with one prompt per candidate, each asking for that candidate by name.

    Each prompt's `target` key is the slot of the answer it asks for, so the probes
    are ordinary prompts with known answers.
    """
    alphabet = _check_alphabet(alphabet)
    task: Task
    if output == "integer":
        if alphabet != tuple(str(n) for n in range(1, len(alphabet) + 1)):
            raise ConvswapError(f"an integer alphabet must be '1'..'K' in order; got {list(alphabet)}")
        probe_text, task = integer_probe, "locate"
    elif output == "word":
        probe_text, task = word_probe, "color"
    else:
        raise ConvswapError(f"unknown output format {output!r}; one of integer, word")
    prompts = tuple(
        Prompt(
            trial_id=f"{PROBE_CONVENTION}-{slot}",
            convention=PROBE_CONVENTION,
            task=task,
            text=probe_text(answer, len(alphabet)),
            slots=alphabet,
            alphabet=alphabet,
            keys=(("target", slot),),
            output=output,
        )
        for slot, answer in enumerate(alphabet, start=1)
    )
    return Query(image=image if image is not None else probe_image(), prompts=prompts, condition="visible")


def readable_variants(backend: Backend, alphabet: Sequence[str]) -> tuple[dict[str, tuple[int, ...]], list[str]]:
    """First tokens of every distinct variant, and the variants whose candidates share one.

    Raises NoFirstTokenReadout when every variant is shared; needs the tokenizer only.
    """
    alphabet = _check_alphabet(alphabet)
    first_tokens = {v: first_token_ids(backend, variant_strings(alphabet, v)) for v in distinct_variants(alphabet)}
    shared = [v for v, ids in first_tokens.items() if len(set(ids)) < len(ids)]
    if len(shared) == len(first_tokens):
        raise NoFirstTokenReadout(alphabet, first_tokens)
    return first_tokens, shared


def resolve_surface(backend: Backend, alphabet: Sequence[str], probes: Sequence[Query]) -> Surface:
    """Measure which surface variant of `alphabet` the model emits on `probes` and return it.

    Every prompt of every probe query must answer in `alphabet`.  Raises
    NoFirstTokenReadout (before any forward pass) or SurfaceRefused.
    """
    alphabet = _check_alphabet(alphabet)
    prompts = [prompt for query in probes for prompt in query.prompts]
    if not prompts:
        raise ConvswapError(f"no probe prompts given to resolve the surface of {list(alphabet)}")
    for prompt in prompts:
        if prompt.alphabet != alphabet:
            raise ConvswapError(
                f"probe {prompt.trial_id!r} answers in {list(prompt.alphabet)}, not in the alphabet {list(alphabet)}"
            )
    first_tokens, shared = readable_variants(backend, alphabet)
    logits = np.concatenate([np.asarray(backend.next_token_logits(query), dtype=np.float64) for query in probes])
    masses = {v: float(candidate_masses(logits, ids).mean()) for v, ids in first_tokens.items()}
    readable = [v for v in first_tokens if v not in shared]
    best = max(readable, key=lambda v: masses[v])  # max keeps the first of equal masses: VARIANTS order
    if masses[best] < MIN_CANDIDATE_MASS:
        raise SurfaceRefused(alphabet, masses, shared)
    others = mass_listing({v: mass for v, mass in masses.items() if v != best}, shared)
    reason = f"{best} puts mean mass {masses[best]:.3f} on the candidates over {len(prompts)} probes" + (
        f"; {others}" if others else ""
    )
    return Surface(
        alphabet=alphabet,
        variant=best,
        token_ids=first_tokens[best],
        mass=masses[best],
        masses=tuple(masses.items()),
        reason=reason,
        shared=tuple(shared),
    )


# --- surfaces read through a server's log-probabilities --------------------------------------------------------


def logprob_candidates(backend: Backend, alphabet: Sequence[str]) -> tuple[dict[str, tuple[Candidate, ...]], list[str]]:
    """Each distinct variant's candidates, and the variants whose candidates cannot be told apart.

    With the model's tokenizer (a served model) the candidates are first token ids, as
    `readable_variants` finds them.  Without it (an API model) they are the surface
    strings, matched to the server's tokens by text; a variant in which one
    candidate's surface begins another's ("1" and "10") cannot be told apart that
    way, since whether "10" is one token is the unknown tokenizer's business.
    Raises NoFirstTokenReadout when no variant can.
    """
    alphabet = _check_alphabet(alphabet)
    try:
        first_tokens, shared = readable_variants(backend, alphabet)
    except LogitsUnavailable:
        pass
    else:
        return {v: tuple(Candidate(backend.decode_token(i), i) for i in ids) for v, ids in first_tokens.items()}, shared
    spellings = {v: variant_strings(alphabet, v) for v in distinct_variants(alphabet)}
    shared = [
        v for v, strings in spellings.items() if any(a != b and b.startswith(a) for a in strings for b in strings)
    ]
    if len(shared) == len(spellings):
        raise NoFirstTokenReadout(alphabet, spellings)
    return {v: tuple(Candidate(text) for text in strings) for v, strings in spellings.items()}, shared


def surface_candidates(backend: Backend, surface: Surface) -> tuple[Candidate, ...]:
    """The candidates a resolved surface reads: its token ids, or its surface strings where it has none."""
    if surface.token_ids:
        return tuple(Candidate(backend.decode_token(i), i) for i in surface.token_ids)
    return tuple(Candidate(text) for text in variant_strings(surface.alphabet, surface.variant))


def _mean(values: Sequence[float]) -> float:
    return float(np.mean(values))


def resolve_logprob_surface(backend: Backend, alphabet: Sequence[str], probes: Sequence[Query]) -> Surface:
    """`resolve_surface` for a backend read through its server's log-probabilities.

    Exact evidence resolves exactly as logits do.  Bounded evidence (a top-k list)
    chooses the readable variant with the most mean mass for sure (its lower bound;
    ties by the upper bound, then VARIANTS order) and refuses the alphabet only when
    no readable variant can reach MIN_CANDIDATE_MASS even at its upper bound; each
    trial's own bounds then decide whether it is scored (`logprobs.mass_verdict`).
    """
    alphabet = _check_alphabet(alphabet)
    candidates, shared = logprob_candidates(backend, alphabet)
    ids = tuple(dict.fromkeys(c.token_id for cs in candidates.values() for c in cs if c.token_id is not None))
    evidence = [item for query in probes for item in backend.first_token_logprobs(query, ids)]
    if not evidence:
        raise ConvswapError(f"no probe prompts given to resolve the surface of {list(alphabet)}")
    bounds: dict[str, list[Bounds]] = {v: [candidate_bounds(e, cs) for e in evidence] for v, cs in candidates.items()}
    lower = {v: _mean([b.mass_lower for b in found]) for v, found in bounds.items()}
    upper = {v: _mean([b.mass_upper for b in found]) for v, found in bounds.items()}
    exact = all(b.exact for found in bounds.values() for b in found)
    readable = [v for v in candidates if v not in shared]
    best = max(readable, key=lambda v: (lower[v], upper[v]))
    source = evidence[0].source
    if exact and lower[best] < MIN_CANDIDATE_MASS:
        raise SurfaceRefused(alphabet, lower, shared)
    if not exact and max(upper[v] for v in readable) < MIN_CANDIDATE_MASS:
        raise SurfaceRefused(alphabet, upper, shared, bounded=f"the server's {source}")
    others = mass_listing({v: mass for v, mass in lower.items() if v != best}, shared)
    span = "" if exact else f" (at most {upper[best]:.3f}, from the server's {source})"
    reason = f"{best} puts mean mass {lower[best]:.3f}{span} on the candidates over {len(evidence)} probes" + (
        f"; {others}" if others else ""
    )
    best_ids = tuple(c.token_id for c in candidates[best] if c.token_id is not None)
    return Surface(
        alphabet=alphabet,
        variant=best,
        token_ids=best_ids if len(best_ids) == len(alphabet) else (),
        mass=lower[best],
        masses=tuple(lower.items()),
        reason=reason,
        shared=tuple(shared),
        mass_upper=None if exact else upper[best],
    )
