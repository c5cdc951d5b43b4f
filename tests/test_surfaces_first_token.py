"""The first-token readout against an independent numpy computation of the same softmax."""

from __future__ import annotations

import math

import numpy as np
import pytest

from convswap.core import ConvswapError, Surface
from convswap.readout.first_token import candidate_masses, first_token_readout


def surface(token_ids, variant="space_capitalized") -> Surface:
    alphabet = tuple(f"w{i}" for i in range(len(token_ids)))
    return Surface(alphabet, variant, tuple(token_ids), 0.9, ((variant, 0.9),), "planted")


def decode(token_id: int) -> str:
    return f"<{token_id}>"


def longhand_softmax(row: np.ndarray) -> np.ndarray:
    shifted = np.exp(row.astype(np.float64) - row.max())
    return shifted / shifted.sum()


def test_readout_matches_an_independent_softmax():
    rng = np.random.default_rng(7)
    row = rng.normal(0, 3, size=5000).astype(np.float32)
    ids = (17, 4021, 333, 2500)
    row[333] = 20.0
    readout = first_token_readout(row, surface(ids), decode)
    probs = longhand_softmax(row)
    assert readout.surface == "space_capitalized"
    assert readout.candidate_token_ids == ids
    assert readout.candidate_logits == tuple(float(row[i]) for i in ids)
    assert readout.candidate_mass == pytest.approx(probs[list(ids)].sum(), rel=1e-12)
    assert readout.slot == 3
    order = np.argsort(-probs, kind="stable")[:10]
    assert [t.token_id for t in readout.top] == order.tolist()
    assert [t.text for t in readout.top] == [f"<{i}>" for i in order]
    assert [t.prob for t in readout.top] == pytest.approx(probs[order].tolist(), rel=1e-12)
    assert readout.top[0].token_id == 333


def test_huge_logits_neither_overflow_nor_lose_small_masses():
    row = np.zeros(1000, dtype=np.float32)
    row[5] = 3.0e4
    row[9] = 3.0e4 - 80.0
    readout = first_token_readout(row, surface((9, 11)), decode, top_k=3)
    # Mass of token 9 and 11 relative to token 5: e^-80 + e^-30000 (underflows to 0 in any precision).
    assert readout.candidate_mass == pytest.approx(math.exp(-80), rel=1e-9)
    assert readout.candidate_mass > 0
    assert readout.slot == 1
    assert [t.token_id for t in readout.top] == [5, 9, 0]
    assert readout.top[0].prob == pytest.approx(1.0)


def test_a_tie_at_the_top_candidate_chooses_no_slot_and_names_the_tied_slots():
    """Ties used to go to the lower slot silently; now no slot wins, and the top tokens still list by lower id."""
    row = np.zeros(50, dtype=np.float32)
    row[[40, 30, 20]] = 2.0
    readout = first_token_readout(row, surface((40, 30, 20)), decode, top_k=4)
    assert (readout.slot, readout.tie, readout.tied_slots) == (None, True, (1, 2, 3))
    assert [t.token_id for t in readout.top] == [20, 30, 40, 0]


def test_a_tie_below_the_top_is_no_tie():
    row = np.zeros(50, dtype=np.float32)
    row[[7, 8]] = 1.0
    row[9] = 1.5
    readout = first_token_readout(row, surface((7, 8, 9)), decode)
    assert (readout.slot, readout.tie, readout.tied_slots) == (3, False, ())


def test_bfloat16_logits_upcast_keep_their_ties_and_their_one_ulp_differences():
    torch = pytest.importorskip("torch")
    # 1.0 and 1.0 + 2^-7 are neighbours in bfloat16; 1.001 rounds onto 1.0.
    logits = torch.tensor([1.0, 1.001, 1.0 + 2**-7, 0.5], dtype=torch.bfloat16)
    row = logits.float().numpy()
    tied = first_token_readout(row, surface((0, 1)), decode)
    assert (tied.slot, tied.tie, tied.tied_slots) == (None, True, (1, 2))
    apart = first_token_readout(row, surface((0, 2)), decode)
    assert (apart.slot, apart.tie) == (2, False)


def test_candidate_masses_rows_and_repeated_ids():
    logits = np.array([[0.0, 1.0, 2.0, 3.0], [5.0, 0.0, 0.0, 0.0]])
    expected = [longhand_softmax(logits[0])[[1, 3]].sum(), longhand_softmax(logits[1])[[1, 3]].sum()]
    assert candidate_masses(logits, [1, 3, 3]).tolist() == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize(
    ("row", "ids", "message"),
    [
        (np.array([0.0, np.nan, 1.0]), (0, 2), "NaN or infinite"),
        (np.array([0.0, np.inf, 1.0]), (0, 2), "NaN or infinite"),
        (np.zeros((2, 3)), (0, 2), r"1 dimension\(s\).*shape \(2, 3\)"),
        (np.zeros(0), (0,), "shape"),
        (np.zeros(3), (0, 3), r"do not all lie in a vocabulary of 3"),
        (np.zeros(3), (-1, 2), "do not all lie in a vocabulary"),
    ],
)
def test_unreadable_logits_are_refused(row, ids, message):
    with pytest.raises(ConvswapError, match=message):
        first_token_readout(row, surface(ids), decode)


def test_top_k_must_be_positive_and_may_exceed_the_vocabulary():
    with pytest.raises(ConvswapError, match="top_k must be at least 1"):
        first_token_readout(np.zeros(3), surface((0, 1)), decode, top_k=0)
    assert len(first_token_readout(np.zeros(3), surface((0, 1)), decode, top_k=10).top) == 3
