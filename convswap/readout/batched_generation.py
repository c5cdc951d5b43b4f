"""Greedy generation for several prompts of a query at once, from one copy of the shared prefix cache.

The prefix (image included) is in the cache once; the cache is copied once and
repeated to the batch.  Each prompt's continuation is padded on its left, so the
pads sit between the shared prefix and the continuation and every row's last
token is in the last column: one new token per row per step then lines up.  An
attention mask hides the pads, and each real token gets the position it has in
its own full sequence (the Qwen family's multimodal positions included), so each
row reads exactly what one uncached forward of that prompt would.

Decoding is the argmax at every step, as `generate` with `do_sample=False`; a row
is done when it produces a stop token (counted, as `generate` counts it) or
reaches the budget.  Rows that are done leave the batch, their cache rows with them.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from convswap.readout.prefix_cache import Tokenized, branch, model_inputs


@dataclass(frozen=True)
class GeneratedTokens:
    """One row's new tokens, and whether it ended on a stop token rather than at the budget."""

    tokens: list[int]
    stopped: bool


def _continuation_batch(tokenized: Tokenized, indices: Sequence[int]) -> dict[str, torch.Tensor]:
    """The rows' continuations left-padded to one width, with their attention mask and positions."""
    split = tokenized.split
    suffixes = [tokenized.input_ids[i][split:] for i in indices]
    width = max(len(suffix) for suffix in suffixes)
    rows = len(indices)
    input_ids = torch.zeros((rows, width), dtype=suffixes[0].dtype)
    # The mask covers the cached prefix too: it is what the model reads in full.
    attention_mask = torch.ones((rows, split + width), dtype=torch.long)
    if tokenized.positions is not None:
        sections = tokenized.positions[0].shape[0]
        positions = torch.zeros((sections, rows, width), dtype=torch.long)
    else:
        positions = torch.zeros((rows, width), dtype=torch.long)
    for row, (index, suffix) in enumerate(zip(indices, suffixes, strict=True)):
        pad = width - len(suffix)
        input_ids[row, pad:] = suffix
        attention_mask[row, split : split + pad] = 0
        if tokenized.positions is not None:
            positions[:, row, pad:] = tokenized.positions[index][:, 0, split:]
        else:
            positions[row, pad:] = torch.arange(split, split + len(suffix))
    return {"input_ids": input_ids, "attention_mask": attention_mask, "position_ids": positions}


def generate_batch(
    model: Any,
    tokenized: Tokenized,
    prefix_cache: Any,
    indices: Sequence[int],
    max_new_tokens: int,
    stop_ids: Collection[int],
) -> list[GeneratedTokens]:
    """Greedy new tokens for each listed prompt, in the order listed, decoded together from one prefix copy."""
    if max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be at least 1, got {max_new_tokens}")
    batch = _continuation_batch(tokenized, indices)
    cache = branch(prefix_cache)
    if len(indices) > 1:
        cache.batch_repeat_interleave(len(indices))
    inputs = model_inputs(batch, model)
    attention_mask, positions = inputs["attention_mask"], inputs["position_ids"]
    stop = torch.tensor(sorted(stop_ids), dtype=torch.long, device=model.device)
    tokens: list[list[int]] = [[] for _ in indices]
    stopped = [False] * len(indices)
    live = list(range(len(indices)))  # the rows still decoding, in batch order
    logits_to_keep = 1
    for _ in range(max_new_tokens):
        output = model(**inputs, cache=cache, use_cache=True, logits_to_keep=logits_to_keep)
        chosen = output.logits[:, -1].argmax(dim=-1)
        ends = torch.isin(chosen, stop)
        for row, token, ended in zip(live, chosen.tolist(), ends.tolist(), strict=True):
            tokens[row].append(token)
            stopped[row] = ended
        keep = (~ends).nonzero()[:, 0]
        if len(keep) == 0:
            break
        if len(keep) < len(live):
            cache.batch_select_indices(keep)
            live = [live[i] for i in keep.tolist()]
            chosen, attention_mask, positions = chosen[keep], attention_mask[keep], positions[..., keep, :]
        attention_mask = torch.cat([attention_mask, attention_mask.new_ones((len(live), 1))], dim=1)
        # Every family places a generated token one position after the row's last one (the Qwen
        # family's sections all advance together for text).
        positions = positions[..., -1:] + 1
        inputs = {"input_ids": chosen[:, None], "attention_mask": attention_mask, "position_ids": positions}
    return [GeneratedTokens(row_tokens, row_stopped) for row_tokens, row_stopped in zip(tokens, stopped, strict=True)]
