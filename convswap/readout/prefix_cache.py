"""One image prefix, encoded once, shared by every prompt of a query.

Every prompt of a query is rendered into its full conversation and tokenized
whole by the processor, with the special-token rule of the processor's own chat
path (`apply_chat_template(..., tokenize=True)`): a rendered text that already
begins with the tokenizer's BOS gets no second one.  `check_conformance` compares
this tokenization with the chat path's at model load.  The sequences are cut where they first differ, so the
shared part is exactly the tokens a full forward would see (tokenizing a prefix
and a suffix apart can move a token boundary).  The image goes through the
image processor once per query; every prompt reuses its pixels and grid.  The
prefix, image included, is encoded once into a KV cache; each batch of
continuations runs on a copy of it, because a cache grows in place and a reused
one would carry the previous continuation along.

Qwen-family models place text and image tokens with multimodal rotary
positions.  A continuation left to infer them would use whatever offset the
model kept from its last forward, so positions are computed for each full
sequence and the continuation is given its own slice.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

import torch
from PIL import Image

from convswap.core import Condition, ConvswapError
from convswap.readout.conversation import conversation

# Processor outputs with one entry per token; everything else (pixels, grids) describes the image.
TOKEN_ALIGNED = ("input_ids", "attention_mask", "mm_token_type_ids", "token_type_ids")


def chat_messages(condition: Condition, question: str, image: Image.Image | None = None) -> list[dict[str, Any]]:
    """The conversation of one prompt as chat-template messages, the image part first in its turn.

    Given the image, its part carries it, as the processor's chat path takes it.
    """
    image_part = {"type": "image"} if image is None else {"type": "image", "image": image}
    return [
        {
            "role": turn.role,
            "content": ([image_part] if turn.image else []) + [{"type": "text", "text": turn.text}],
        }
        for turn in conversation(condition, question)
    ]


def render_conversation(processor: Any, condition: Condition, question: str) -> str:
    """The full prompt text the model reads, through the model's own chat template."""
    return processor.apply_chat_template(chat_messages(condition, question), add_generation_prompt=True)


def adds_special_tokens(processor: Any, rendered: str) -> bool:
    """The chat path's rule: a template that writes the BOS itself must not get a second one from the tokenizer."""
    bos = processor.tokenizer.bos_token
    return not (bos is not None and rendered.startswith(bos))


def encode_conversation(processor: Any, image: Image.Image, condition: Condition, question: str) -> dict:
    """One prompt's full processor output (token ids, pixels), batch of one."""
    rendered = render_conversation(processor, condition, question)
    return dict(
        processor(
            text=[rendered],
            images=[image],
            add_special_tokens=adds_special_tokens(processor, rendered),
            return_tensors="pt",
        )
    )


def visible_token(tokenizer: Any, token_id: int) -> str:
    """A token as its vocabulary spells it, with its id: `'▁' (29871)`, never an invisible ''."""
    return f"{tokenizer.convert_ids_to_tokens(token_id)!r} ({token_id})"


# The probe asks something neutral; what matters is that its tokens go through both paths.
PROBE_QUESTION = "Which color is at the top-left? Answer with 1, 2 or 3."


def check_conformance(processor: Any, image: Image.Image) -> None:
    """Refuse a model whose tokens here differ from its processor's chat path, in either condition.

    The chat path gets the image inside the messages, as a user of the model
    would pass it; the first differing position and both tokens are named.
    """
    tokenizer = processor.tokenizer
    for condition in ("visible", "cached"):
        ours = encode_conversation(processor, image, condition, PROBE_QUESTION)["input_ids"][0].tolist()
        theirs = processor.apply_chat_template(
            chat_messages(condition, PROBE_QUESTION, image),
            tokenize=True,
            return_dict=True,
            return_tensors="pt",
            add_generation_prompt=True,
        )["input_ids"][0].tolist()
        if ours != theirs:
            position = common_prefix_length([torch.tensor(ours), torch.tensor(theirs)])
            raise ConvswapError(
                f"{type(processor).__name__}: the {condition} probe's tokens differ from the processor's chat path "
                f"at position {position}: convswap reads {_token_at(tokenizer, ours, position)}, "
                f"the chat path {_token_at(tokenizer, theirs, position)}"
            )


def _token_at(tokenizer: Any, sequence: list[int], position: int) -> str:
    return visible_token(tokenizer, sequence[position]) if position < len(sequence) else "the end of the sequence"


def common_prefix_length(sequences: list[torch.Tensor]) -> int:
    shortest = min(len(sequence) for sequence in sequences)
    stacked = torch.stack([sequence[:shortest] for sequence in sequences])
    differs = (stacked != stacked[0]).any(dim=0).nonzero()
    return int(differs[0]) if len(differs) else shortest


@dataclass
class Tokenized:
    """Every prompt of one query as the full sequence a single forward would read."""

    encodings: list[dict[str, torch.Tensor]]  # the processor's output per prompt, batch of one
    positions: list[torch.Tensor] | None  # multimodal rotary positions [sections, 1, length], Qwen family only
    split: int  # tokens shared by every prompt; each continuation keeps at least one

    @property
    def input_ids(self) -> list[torch.Tensor]:
        return [encoding["input_ids"][0] for encoding in self.encodings]


class _ImageProcessedOnce:
    """A processor's image processor that runs on a query's image once and hands every later call the same features.

    Every prompt of a query shows the same image, so its pixels and grid are the
    same for each; only the first call does the work.  Each call gets its own
    copy of the feature mapping, so a processor that pops entries from it does
    not take them from the next prompt.
    """

    def __init__(self, image_processor: Any) -> None:
        self._image_processor = image_processor
        self._features: Any = None

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self._features is None:
            self._features = self._image_processor(*args, **kwargs)
        return copy.copy(self._features)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._image_processor, name)


def with_image_processed_once(processor: Any) -> Any:
    """A shallow copy of `processor` whose image processor runs once: use it for one image only."""
    once = copy.copy(processor)
    once.image_processor = _ImageProcessedOnce(processor.image_processor)
    return once


def tokenize(model: Any, processor: Any, image: Image.Image, condition: Condition, texts: list[str]) -> Tokenized:
    processor = with_image_processed_once(processor)
    encodings = [encode_conversation(processor, image, condition, text) for text in texts]
    sequences = [encoding["input_ids"][0] for encoding in encodings]
    split = min(common_prefix_length(sequences), min(len(sequence) for sequence in sequences) - 1)
    image_token = processor.image_token_id
    if any((sequence[split:] == image_token).any() for sequence in sequences):
        raise ConvswapError(
            f"{type(processor).__name__}: the chat template puts image tokens after the point where the "
            "questions differ, so the image cannot be encoded once as a shared prefix"
        )
    positions = None
    base_model: Any = getattr(model, "model", None)
    if hasattr(base_model, "get_rope_index"):
        positions = [
            base_model.get_rope_index(
                encoding["input_ids"],
                mm_token_type_ids=encoding["mm_token_type_ids"],
                image_grid_thw=encoding.get("image_grid_thw"),
                attention_mask=encoding["attention_mask"],
            )[0]
            for encoding in encodings
        ]
    return Tokenized(encodings=encodings, positions=positions, split=split)


def encode_prefix(model: Any, tokenized: Tokenized) -> Any:
    """Run the shared prefix (image included) once and return its KV cache."""
    split = tokenized.split
    inputs = {
        name: value[:, :split] if name in TOKEN_ALIGNED else value for name, value in tokenized.encodings[0].items()
    }
    if tokenized.positions is not None:
        inputs["position_ids"] = tokenized.positions[0][..., :split]
    # No position of the prefix is projected onto the vocabulary: only its cache is needed.
    nothing = torch.empty(0, dtype=torch.long, device=model.device)
    output = model(**model_inputs(inputs, model), use_cache=True, logits_to_keep=nothing)
    return output.cache


def branch(prefix_cache: Any) -> Any:
    """A copy of the prefix cache for one pass to grow: caches grow in place."""
    return copy.deepcopy(prefix_cache)


def continuation_logits(model: Any, tokenized: Tokenized, prefix_cache: Any, indices: list[int]) -> torch.Tensor:
    """Next-token logits after each listed prompt's full sequence, from one batched pass over their continuations.

    Continuations are right-padded: under a causal mask a pad only ever follows
    the real tokens, so no real token attends to one and no attention mask is needed.
    """
    split = tokenized.split
    suffixes = [tokenized.input_ids[i][split:] for i in indices]
    lengths = torch.tensor([len(suffix) for suffix in suffixes])
    width = int(lengths.max())
    input_ids = torch.zeros((len(indices), width), dtype=suffixes[0].dtype)
    for row, suffix in enumerate(suffixes):
        input_ids[row, : len(suffix)] = suffix
    inputs: dict[str, torch.Tensor] = {"input_ids": input_ids}
    if tokenized.positions is not None:
        positions = torch.zeros((tokenized.positions[0].shape[0], len(indices), width), dtype=torch.long)
        for row, i in enumerate(indices):
            positions[:, row, : lengths[row]] = tokenized.positions[i][:, 0, split:]
        inputs["position_ids"] = positions
    cache = branch(prefix_cache)
    if len(indices) > 1:
        cache.batch_repeat_interleave(len(indices))
    # Each row's last real token is the only position projected onto the vocabulary.
    last = (lengths - 1)[:, None].to(model.device)
    output = model(**model_inputs(inputs, model), cache=cache, use_cache=True, logits_to_keep=last)
    return output.logits[:, 0]


def generation_inputs(model: Any, tokenized: Tokenized, index: int) -> dict[str, torch.Tensor]:
    """What `generate` needs to continue a prefix cache: the full token-aligned inputs and the image grid, no pixels.

    The cache already holds the image; pixels passed again would be matched
    against the image tokens of the uncached part, which holds none.
    """
    encoding = tokenized.encodings[index]
    return model_inputs({name: value for name, value in encoding.items() if not name.startswith("pixel_")}, model)


def model_inputs(inputs: dict[str, torch.Tensor], model: Any) -> dict[str, torch.Tensor]:
    """Inputs on the model's first device; pixels in the model's dtype."""
    return {
        name: value.to(model.device, model.dtype) if value.is_floating_point() else value.to(model.device)
        for name, value in inputs.items()
    }
