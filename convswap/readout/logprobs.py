"""The first-token readout from what a server returns: exact candidate log-probabilities, or a top-k list.

A server never hands over the whole next-token distribution.  It returns either
the log-probability of exactly each token asked for (vLLM's
`logprob_token_ids`, SGLang's `token_ids_logprob`), normalized over the whole
vocabulary, so that the candidates' logits up to a constant and their mass are
both exact; or the k most probable tokens (`top_logprobs`), which tell some
things exactly and bound the rest:

- a candidate in the list has its log-probability exactly; one absent from it
  lies below the k-th (the list's last);
- the restricted argmax is therefore exact whenever some candidate is listed:
  the best listed one beats every absent one;
- the candidate mass lies between the listed candidates' mass (lower bound)
  and that plus every absent candidate at the k-th probability (upper bound).

Where candidates are matched by text (an API model, whose tokenizer is not
known here) an absent candidate's first token may also be a listed token that
begins its surface (" " of " 3", "gre" of "green"); its upper bound takes that
token's probability as well.

The mass rule of the spec (refuse a readout whose candidate mass is under the
threshold) becomes three verdicts on bounds: refuse when the upper bound is
under it, score when the lower bound reaches it, and otherwise undetermined.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from convswap.core import ConvswapError, FirstTokenReadout, Surface, TokenScore

# vLLM returns a log-probability too small for float32 as this value.
FLOOR = -9999.0
SCORE, REFUSE, UNDETERMINED = "score", "refuse", "undetermined"
MASS_VERDICTS = (SCORE, REFUSE, UNDETERMINED)
# Where the numbers of a readout came from (FirstTokenReadout.source).
LOGITS = "logits"
LOGPROB_TOKEN_IDS = "logprob_token_ids"
TOKEN_IDS_LOGPROB = "token_ids_logprob"
TOP_LOGPROBS = "top_logprobs"
# What a server gives (served:), in the order its probe at load tries them.
SERVED_READOUTS = (LOGPROB_TOKEN_IDS, TOKEN_IDS_LOGPROB, TOP_LOGPROBS)


class LogprobsRefused(ConvswapError):
    """The server will not give first-token log-probabilities (a reasoning model's 400, say): generate instead."""


@dataclass(frozen=True)
class ListedToken:
    """One token a server listed for the first answer position; token_id None where it names the token by text."""

    text: str
    logprob: float
    token_id: int | None = None


@dataclass(frozen=True)
class FirstTokenLogprobs:
    """What one reply told about the first answer token.

    requested: (token id, log-probability) of every id asked for by id, exact;
    listed: the top-k list, most probable first (empty where only ids were asked for).
    """

    source: str
    listed: tuple[ListedToken, ...] = ()
    requested: tuple[tuple[int, float], ...] = ()


@dataclass(frozen=True)
class Candidate:
    """A candidate's first token: by id where the model's tokenizer is known, else by its surface text."""

    text: str
    token_id: int | None = None


@dataclass(frozen=True)
class Bounds:
    """Each candidate's log-probability as [lower, upper] (lower -inf when unknown) and the mass's bounds."""

    lower: tuple[float, ...]
    upper: tuple[float, ...]
    mass_lower: float
    mass_upper: float

    @property
    def exact(self) -> bool:
        return self.lower == self.upper


def _clean(logprob: float) -> float:
    return -math.inf if logprob <= FLOOR else float(logprob)


def _listed_logprob(listed: Sequence[ListedToken], candidate: Candidate) -> float | None:
    for token in listed:
        same_id = token.token_id is not None and candidate.token_id is not None
        if (token.token_id == candidate.token_id) if same_id else (token.text == candidate.text):
            return token.logprob
    return None


def candidate_bounds(evidence: FirstTokenLogprobs, candidates: Sequence[Candidate]) -> Bounds:
    """Bounds on each candidate's first-token log-probability and on the candidates' mass."""
    requested = dict(evidence.requested)
    listed = evidence.listed
    # Anything not listed is at most as probable as the last listed token; with no list, nothing is known.
    below_list = min((_clean(token.logprob) for token in listed), default=0.0)
    lower, upper = [], []
    for candidate in candidates:
        value = requested.get(candidate.token_id) if candidate.token_id is not None else None
        if value is None:
            value = _listed_logprob(listed, candidate)
        if value is not None:
            lower.append(_clean(value))
            upper.append(_clean(value))
            continue
        bound = below_list
        if candidate.token_id is None:
            beginnings = [
                t.logprob for t in listed if t.text and t.text != candidate.text and candidate.text.startswith(t.text)
            ]
            bound = max([bound, *map(_clean, beginnings)])
        lower.append(-math.inf)
        upper.append(bound)
    known: dict[object, float] = {}
    for candidate, low in zip(candidates, lower, strict=True):
        if low > -math.inf:
            known[candidate.token_id if candidate.token_id is not None else candidate.text] = low
    mass_lower = sum(math.exp(value) for value in known.values())
    unknown = sum(
        math.exp(high) for low, high in zip(lower, upper, strict=True) if low == -math.inf and high > -math.inf
    )
    return Bounds(tuple(lower), tuple(upper), min(1.0, mass_lower), min(1.0, mass_lower + unknown))


def bounded_argmax(lower: Sequence[float], upper: Sequence[float]) -> tuple[int, ...] | None:
    """The 1-based slots holding the restricted argmax (several on an exact tie), or None when bounds do not decide.

    A candidate known exactly wins when no other candidate's upper bound exceeds it;
    the ones known only from above never hold it on their own.
    """
    known = [i for i, value in enumerate(lower) if value > -math.inf]
    if not known:
        return None
    best = max(lower[i] for i in known)
    if any(high > best for i, high in enumerate(upper) if lower[i] == -math.inf):
        return None
    return tuple(i + 1 for i in known if lower[i] == best)


def mass_verdict(bounds: Bounds, decided: bool, min_mass: float) -> str:
    """The mass rule on bounds: refuse under min_mass for sure, score at or over it for sure, else undetermined."""
    if bounds.mass_upper < min_mass:
        return REFUSE
    if decided and bounds.mass_lower >= min_mass:
        return SCORE
    return UNDETERMINED


def logprob_readout(
    evidence: FirstTokenLogprobs,
    surface: Surface,
    candidates: Sequence[Candidate],
    min_mass: float,
    show: Callable[[ListedToken], str] | None = None,
) -> FirstTokenReadout:
    """One prompt's first-token readout from a server's log-probabilities under a resolved surface.

    Exact evidence reads exactly as a local model's logits do (candidate_logits are
    the log-probabilities); bounded evidence records the bounds and the mass verdict.
    `show` names a listed token in the readout's `top` (its text by default).
    """
    if len(candidates) != len(surface.alphabet):
        raise ConvswapError(f"{len(candidates)} candidates for an alphabet of {len(surface.alphabet)}")
    bounds = candidate_bounds(evidence, candidates)
    top = tuple(
        TokenScore(token.token_id, show(token) if show else token.text, math.exp(_clean(token.logprob)))
        for token in evidence.listed
    )
    ids = tuple(c.token_id for c in candidates if c.token_id is not None)
    texts = () if len(ids) == len(candidates) else tuple(c.text for c in candidates)
    slots = bounded_argmax(bounds.lower, bounds.upper)
    tied = slots if slots is not None and len(slots) > 1 else ()
    common = dict(
        surface=surface.variant,
        candidate_token_ids=ids if not texts else (),
        candidate_texts=texts,
        candidate_mass=bounds.mass_lower,
        top=top,
        slot=slots[0] if slots is not None and len(slots) == 1 else None,
        tie=bool(tied),
        tied_slots=tied,
        source=evidence.source,
    )
    if bounds.exact:
        logits = tuple(FLOOR if value == -math.inf else value for value in bounds.lower)
        return FirstTokenReadout(candidate_logits=logits, **common)  # type: ignore[arg-type]
    return FirstTokenReadout(
        candidate_logits=(),
        logprob_bounds=tuple(
            (None if low == -math.inf else low, high) for low, high in zip(bounds.lower, bounds.upper, strict=True)
        ),
        candidate_mass_upper=bounds.mass_upper,
        mass_verdict=mass_verdict(bounds, slots is not None, min_mass),
        **common,  # type: ignore[arg-type]
    )


def scored_by_first_token(readout: FirstTokenReadout | None) -> bool:
    """A first-token readout a record is scored on: any exact one, and a bounded one the mass rule scores."""
    return readout is not None and readout.mass_verdict in (None, SCORE)


def readout_slots(readout: FirstTokenReadout) -> tuple[int, ...] | None:
    """The slots a stored readout's own numbers put on top (exact logits or bounds), None where bounds do not decide."""
    if readout.candidate_logits:
        best = max(readout.candidate_logits)
        return tuple(i + 1 for i, value in enumerate(readout.candidate_logits) if value == best)
    lower = [-math.inf if low is None else low for low, _ in readout.logprob_bounds]
    return bounded_argmax(lower, [high for _, high in readout.logprob_bounds])
