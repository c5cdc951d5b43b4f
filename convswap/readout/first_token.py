"""The restricted first-token readout: which candidate's first token the model prefers, and how much it emits any.

Probabilities are always the full-vocabulary softmax, computed in float64 with
log-sum-exp so that large logits neither overflow nor lose the small masses the
refusal rule (candidate mass under 0.5) depends on.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
from scipy.special import log_softmax, logsumexp

from convswap.core import ConvswapError, FirstTokenReadout, Surface, TokenScore

DEFAULT_TOP_K = 10


def _as_logits(logits: np.ndarray, ndim: int) -> np.ndarray:
    array = np.asarray(logits, dtype=np.float64)
    if array.ndim != ndim or array.shape[-1] == 0:
        raise ConvswapError(f"expected logits with {ndim} dimension(s) over a vocabulary, got shape {array.shape}")
    if not np.all(np.isfinite(array)):
        raise ConvswapError("logits contain NaN or infinite values; the model's output cannot be read")
    return array


def _check_ids(token_ids: Sequence[int] | np.ndarray, vocab_size: int) -> np.ndarray:
    ids = np.asarray(token_ids, dtype=np.int64)
    if ids.size == 0 or ids.min() < 0 or ids.max() >= vocab_size:
        raise ConvswapError(f"candidate token ids {list(token_ids)} do not all lie in a vocabulary of {vocab_size}")
    return ids


def candidate_masses(logits: np.ndarray, token_ids: Sequence[int] | np.ndarray) -> np.ndarray:
    """Softmax mass on the set of `token_ids` for each row of `logits` [n, vocab]; a repeated id counts once."""
    rows = _as_logits(logits, 2)
    return _mass(log_softmax(rows, axis=1), _check_ids(token_ids, rows.shape[1]))


def _mass(log_probs: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """Softmax mass on the set of `ids` from log-probabilities over the vocabulary (the last axis): one pass over
    the vocabulary has made them, so the rest is a sum over the candidates alone."""
    return np.exp(logsumexp(log_probs[..., np.unique(ids)], axis=-1))


def _top_ids(log_probs: np.ndarray, k: int) -> np.ndarray:
    """The k most probable token ids, ties by lower id (sorting only the tokens at or above the k-th value)."""
    k = min(k, log_probs.size)
    threshold = np.partition(log_probs, log_probs.size - k)[log_probs.size - k]
    contenders = np.flatnonzero(log_probs >= threshold)
    return contenders[np.lexsort((contenders, -log_probs[contenders]))][:k]


def first_token_readout(
    logits_row: np.ndarray,
    surface: Surface,
    decode_token: Callable[[int], str],
    top_k: int = DEFAULT_TOP_K,
) -> FirstTokenReadout:
    """Read one prompt's first-token distribution under a resolved surface.

    slot is the restricted argmax over the candidates' first tokens (1-based),
    taken on the logits upcast to float32 or wider; when several candidates hold
    the top logit exactly, no slot is chosen: the readout records the tie and
    the tied slots (a low-precision model ties often, and the lower slot would
    win every one).  `top` lists the `top_k` most probable
    first tokens of the whole vocabulary, ties by lower token id, so the log
    shows what the model would have said when the candidates get little mass.
    """
    row = _as_logits(logits_row, 1)
    ids = _check_ids(surface.token_ids, row.size)
    if top_k < 1:
        raise ConvswapError(f"top_k must be at least 1, got {top_k}")
    log_probs = log_softmax(row)
    candidate_logits = row[ids]
    top_ids = _top_ids(log_probs, top_k)
    tied_slots = tuple(int(i) + 1 for i in np.flatnonzero(candidate_logits == candidate_logits.max()))
    return FirstTokenReadout(
        surface=surface.variant,
        candidate_token_ids=tuple(int(i) for i in ids),
        candidate_logits=tuple(float(v) for v in candidate_logits),
        candidate_mass=float(_mass(log_probs, ids)),
        top=tuple(TokenScore(int(i), decode_token(int(i)), float(np.exp(log_probs[i]))) for i in top_ids),
        slot=tied_slots[0] if len(tied_slots) == 1 else None,
        tie=len(tied_slots) > 1,
        tied_slots=tied_slots if len(tied_slots) > 1 else (),
    )
