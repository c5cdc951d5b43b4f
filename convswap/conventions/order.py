"""Option order and the mispaired gloss, both seeded by a sha256 of the trial id.

The order is a permutation that is random across trials and identical across
the conventions of one trial.  The derangement comes from the same seed (the
same random stream, drawn after the order), so a trial's mispaired gloss is as
fixed as its order.  Python's `hash` is salted per process and is never used.
"""

from __future__ import annotations

import hashlib

import numpy as np

from convswap.core import ConvswapError

_MAX_DERANGEMENT_DRAWS = 10_000


def _trial_rng(trial_id: str) -> np.random.Generator:
    seed = int.from_bytes(hashlib.sha256(trial_id.encode("utf-8")).digest()[:8], "big")
    return np.random.default_rng(seed)


def option_order(trial_id: str, k: int) -> tuple[int, ...]:
    """order[slot - 1] is the canonical index of the referent shown at that slot."""
    return tuple(int(i) for i in _trial_rng(trial_id).permutation(k))


def derangement(trial_id: str, k: int) -> tuple[int, ...]:
    """A permutation of range(k) with no fixed point: slot i+1 is glossed with the name of slot d[i]+1.

    Drawn uniformly by rejection from the trial's random stream.
    """
    if k < 2:
        raise ConvswapError(f"trial {trial_id}: cannot derange {k} option(s); a mispaired gloss needs at least 2")
    rng = _trial_rng(trial_id)
    rng.permutation(k)  # the option order comes first in the stream
    for _ in range(_MAX_DERANGEMENT_DRAWS):
        candidate = tuple(int(i) for i in rng.permutation(k))
        if all(candidate[i] != i for i in range(k)):
            return check_derangement(candidate, trial_id)
    raise ConvswapError(f"trial {trial_id}: no derangement of {k} options found")


def check_derangement(mapping: tuple[int, ...], trial_id: str) -> tuple[int, ...]:
    """Raise unless `mapping` is a permutation of range(len(mapping)) with no fixed point."""
    k = len(mapping)
    if sorted(mapping) != list(range(k)):
        raise ConvswapError(f"trial {trial_id}: {list(mapping)} is not a permutation of 0..{k - 1}")
    fixed = [i for i in range(k) if mapping[i] == i]
    if fixed:
        raise ConvswapError(f"trial {trial_id}: mispaired gloss has fixed point(s) at slot(s) {[i + 1 for i in fixed]}")
    return mapping
