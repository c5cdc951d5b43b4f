"""Tiny random-weight vision-language models, one per family, saved for `from_pretrained`.

`build_tiny(family, directory)` writes a model folder (config, weights, processor,
tokenizer, chat template, generation config) and returns its path; load it with
`AutoProcessor` + `AutoModelForImageTextToText` or as `hf:<path>`.  Families that
have real tokenizers and processor configs in ../shared/assets use them as they
are (Qwen2.5-VL, SmolVLM); the others are assembled from those vocabularies with
the special tokens and chat template their processors require.

Sizes default to hidden 64, 2 layers, vision towers that turn a 64 px image into
a handful of image tokens; `TinySize` scales them up for benchmarks.  `edit` runs
on the model before it is saved (to plant a known preference in the output layer).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import (
    AutoModelForImageTextToText,
    AutoProcessor,
    AutoTokenizer,
    CLIPImageProcessor,
    CLIPVisionConfig,
    Gemma3Config,
    Gemma3ImageProcessor,
    Gemma3Processor,
    GenerationConfig,
    GotOcr2ImageProcessor,
    Idefics2Config,
    Idefics2ImageProcessor,
    Idefics2Processor,
    Idefics3Config,
    InternVLConfig,
    InternVLProcessor,
    InternVLVideoProcessor,
    LlamaConfig,
    LlavaConfig,
    LlavaNextConfig,
    LlavaNextImageProcessor,
    LlavaNextProcessor,
    LlavaProcessor,
    Mistral3Config,
    MistralConfig,
    PixtralImageProcessor,
    PixtralProcessor,
    PixtralVisionConfig,
    PreTrainedModel,
    Qwen2_5_VLConfig,
    Qwen2Config,
    Qwen2VLConfig,
    Qwen2VLImageProcessor,
    Qwen2VLProcessor,
    Qwen2VLVideoProcessor,
    Qwen3VLConfig,
    Qwen3VLProcessor,
    Qwen3VLVideoProcessor,
)

# The shared assets beside the repository root (tests pass the conftest fixtures' folder instead).
TOKENIZERS = Path(__file__).resolve().parents[1].parent / "shared" / "assets" / "tokenizers"
QWEN25 = "qwen2_5_vl"
SMOLVLM = "smolvlm_256m"

FAMILIES = (
    "qwen2_5_vl",
    "smolvlm",
    "qwen3_vl",
    "llava",
    "internvl",
    "gemma3",
    "gemma3_sliding",
    "llava_next",
    "qwen2_vl",
    "idefics2",
    "mistral3",
)

# A LLaVA-1.5 style template: role words and spaces rather than special tokens
# between turns, so a prefix and its continuation do not split at a token boundary.
LLAVA_CHAT_TEMPLATE = (
    "{% for message in messages %}{{ message['role'].upper() + ': ' }}"
    "{% for content in message['content'] if content['type'] == 'image' %}{{ '<image>\n' }}{% endfor %}"
    "{% for content in message['content'] if content['type'] == 'text' %}{{ content['text'] + ' ' }}{% endfor %}"
    "{% endfor %}{% if add_generation_prompt %}{{ 'ASSISTANT:' }}{% endif %}"
)

# The InternVL3 template without its default system prompt.
INTERNVL_CHAT_TEMPLATE = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' }}"
    "{% for content in message['content'] %}{% if content['type'] == 'image' %}{{ '<IMG_CONTEXT>\n' }}"
    "{% elif content['type'] == 'text' %}{{ content['text'] }}{% endif %}{% endfor %}"
    "{{ '<|im_end|>\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

# Gemma-3's template writes the BOS itself, and its tokenizer adds one too: the case that reads a doubled BOS
# unless tokenization follows the processor's chat path.
GEMMA3_CHAT_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}"
    "{{ '<start_of_turn>' + ('model' if message['role'] == 'assistant' else message['role']) + '\n' }}"
    "{% for content in message['content'] %}{% if content['type'] == 'image' %}{{ '<start_of_image>' }}"
    "{% elif content['type'] == 'text' %}{{ content['text'] | trim }}{% endif %}{% endfor %}"
    "{{ '<end_of_turn>\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<start_of_turn>model\n' }}{% endif %}"
)
GEMMA3_IMAGE_TOKENS = {
    "boi_token": "<start_of_image>",
    "eoi_token": "<end_of_image>",
    "image_token": "<image_soft_token>",
}
# A window shorter than any prompt (image included), so that sliding layers drop part of the shared prefix.
SHORT_SLIDING_WINDOW = 8

# Idefics2's template; its tokenizer (unlike SmolVLM's) adds a BOS the template does not write.
IDEFICS2_CHAT_TEMPLATE = (
    "{% for message in messages %}{{ message['role'].capitalize() }}"
    "{% if message['content'][0]['type'] == 'image' %}{{ ':' }}{% else %}{{ ': ' }}{% endif %}"
    "{% for content in message['content'] %}{% if content['type'] == 'text' %}{{ content['text'] }}"
    "{% elif content['type'] == 'image' %}{{ '<image>' }}{% endif %}{% endfor %}<end_of_utterance>\n{% endfor %}"
    "{% if add_generation_prompt %}{{ 'Assistant:' }}{% endif %}"
)

# Mistral-3's instruction format, BOS-first like Gemma-3's.
MISTRAL3_CHAT_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}{% if message['role'] == 'user' %}{{ '[INST]' }}"
    "{% for content in message['content'] %}{% if content['type'] == 'image' %}{{ '[IMG]' }}"
    "{% elif content['type'] == 'text' %}{{ content['text'] }}{% endif %}{% endfor %}{{ '[/INST]' }}"
    "{% else %}{% for content in message['content'] %}{{ content['text'] }}{% endfor %}{{ eos_token }}{% endif %}"
    "{% endfor %}"
)
PIXTRAL_IMAGE_TOKENS = ["[IMG]", "[IMG_BREAK]", "[IMG_END]", "[INST]", "[/INST]"]

# Qwen-vocabulary models stop at <|im_end|> or <|endoftext|>.
QWEN_GENERATION = GenerationConfig(eos_token_id=[151645, 151643], pad_token_id=151643)

INTERNVL_IMAGE_TOKENS = {
    "start_image_token": "<img>",
    "end_image_token": "</img>",
    "context_image_token": "<IMG_CONTEXT>",
    "video_token": "<video>",
}


@dataclass(frozen=True)
class TinySize:
    """Text width and depth, and the vision tower's input side and patch (image tokens follow from them)."""

    hidden: int = 64
    layers: int = 2
    heads: int = 4
    image_px: int = 64
    vision_hidden: int = 64
    vision_layers: int = 1


TINY = TinySize()


def _text(size: TinySize, vocab_size: int, **extra) -> dict:
    return dict(
        vocab_size=vocab_size,
        hidden_size=size.hidden,
        intermediate_size=2 * size.hidden,
        num_hidden_layers=size.layers,
        num_attention_heads=size.heads,
        num_key_value_heads=size.heads // 2,
        max_position_embeddings=4096,
        **extra,
    )


def _vision(size: TinySize, **extra) -> dict:
    return dict(
        hidden_size=size.vision_hidden,
        intermediate_size=2 * size.vision_hidden,
        num_hidden_layers=size.vision_layers,
        num_attention_heads=2,
        **extra,
    )


def _qwen_vision(size: TinySize, **extra) -> dict:
    return dict(
        depth=size.vision_layers,
        hidden_size=size.vision_hidden,
        intermediate_size=2 * size.vision_hidden,
        num_heads=2,
        out_hidden_size=size.hidden,
        **extra,
    )


def _mrope_section(size: TinySize) -> list[int]:
    # The three rotary sections (time, height, width) share half of one head's width.
    half = size.hidden // size.heads // 2
    return [half - 2 * (half // 3), half // 3, half // 3]


def _qwen2_5_vl(size: TinySize, tokenizers: Path):
    processor = AutoProcessor.from_pretrained(tokenizers / QWEN25)
    # The real processor resizes to multiples of 28 px; keep the image at the requested side.
    side = size.image_px - size.image_px % 28
    processor.image_processor.size = {"shortest_edge": side * side, "longest_edge": side * side}
    config = Qwen2_5_VLConfig(
        text_config=_text(
            size, len(processor.tokenizer), rope_scaling={"type": "mrope", "mrope_section": _mrope_section(size)}
        ),
        vision_config=_qwen_vision(size, window_size=56, fullatt_block_indexes=[0]),
    )
    return config, processor, QWEN_GENERATION


def _qwen3_vl(size: TinySize, tokenizers: Path):
    tokenizer = AutoTokenizer.from_pretrained(tokenizers / QWEN25)
    pixels = size.image_px * size.image_px
    processor = Qwen3VLProcessor(
        image_processor=Qwen2VLImageProcessor(
            patch_size=16,
            merge_size=2,
            size={"shortest_edge": pixels, "longest_edge": pixels},
            image_mean=[0.5, 0.5, 0.5],
            image_std=[0.5, 0.5, 0.5],
        ),
        tokenizer=tokenizer,
        video_processor=Qwen3VLVideoProcessor(),
        chat_template=tokenizer.chat_template,
    )
    patches_per_side = size.image_px // 16
    config = Qwen3VLConfig(
        text_config=_text(
            size,
            len(tokenizer),
            head_dim=size.hidden // size.heads,
            rope_parameters={
                "rope_type": "default",
                "rope_theta": 5000000.0,
                "mrope_section": _mrope_section(size),
                "mrope_interleaved": True,
            },
        ),
        vision_config=_qwen_vision(
            size, num_position_embeddings=patches_per_side * patches_per_side, deepstack_visual_indexes=[0]
        ),
    )
    return config, processor, QWEN_GENERATION


def _smolvlm(size: TinySize, tokenizers: Path):
    processor = AutoProcessor.from_pretrained(tokenizers / SMOLVLM)
    image_processor = processor.image_processor
    image_processor.do_image_splitting = False
    image_processor.size = {"longest_edge": size.image_px}
    image_processor.max_image_size = {"longest_edge": size.image_px}
    patch, scale = 16, 2
    processor.image_seq_len = (size.image_px // patch) ** 2 // scale**2
    config = Idefics3Config(
        text_config=_text(size, len(processor.tokenizer), model_type="llama", head_dim=size.hidden // size.heads),
        vision_config=_vision(size, image_size=size.image_px, patch_size=patch),
        scale_factor=scale,
        image_token_id=processor.image_token_id,
    )
    return config, processor, GenerationConfig.from_pretrained(tokenizers / SMOLVLM)


def _llava(size: TinySize, tokenizers: Path):
    # SmolVLM's vocabulary has an `<image>` token; LLaVA needs nothing else from a tokenizer.
    tokenizer = AutoTokenizer.from_pretrained(tokenizers / SMOLVLM)
    patch = 16
    processor = LlavaProcessor(
        image_processor=CLIPImageProcessor(
            size={"shortest_edge": size.image_px}, crop_size={"height": size.image_px, "width": size.image_px}
        ),
        tokenizer=tokenizer,
        patch_size=patch,
        vision_feature_select_strategy="default",
        num_additional_image_tokens=1,
        chat_template=LLAVA_CHAT_TEMPLATE,
    )
    image_tokens = (size.image_px // patch) ** 2
    config = LlavaConfig(
        text_config=LlamaConfig(**_text(size, len(tokenizer))),
        vision_config=CLIPVisionConfig(
            **_vision(size, image_size=size.image_px, patch_size=patch, projection_dim=size.vision_hidden)
        ),
        image_token_index=processor.image_token_id,
        image_seq_length=image_tokens,
    )
    return config, processor, GenerationConfig(eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)


def _internvl(size: TinySize, tokenizers: Path):
    tokenizer = AutoTokenizer.from_pretrained(tokenizers / QWEN25, extra_special_tokens=INTERNVL_IMAGE_TOKENS)
    patch, downsample = 16, 0.5
    image_tokens = int((size.image_px // patch) ** 2 * downsample**2)
    processor = InternVLProcessor(
        image_processor=GotOcr2ImageProcessor(
            size={"height": size.image_px, "width": size.image_px}, crop_to_patches=False
        ),
        tokenizer=tokenizer,
        video_processor=InternVLVideoProcessor(),
        image_seq_length=image_tokens,
        chat_template=INTERNVL_CHAT_TEMPLATE,
    )
    config = InternVLConfig(
        text_config=Qwen2Config(**_text(size, len(tokenizer))),
        vision_config=_vision(size, image_size=size.image_px, patch_size=patch),
        image_token_id=tokenizer.context_image_token_id,
        image_seq_length=image_tokens,
        downsample_ratio=downsample,
    )
    return config, processor, QWEN_GENERATION


def _gemma3(size: TinySize, tokenizers: Path, sliding_window: int = 4096):
    tokenizer = AutoTokenizer.from_pretrained(
        tokenizers / QWEN25, bos_token="<bos>", add_bos_token=True, extra_special_tokens=GEMMA3_IMAGE_TOKENS
    )
    tokenizer.add_special_tokens({"additional_special_tokens": ["<start_of_turn>", "<end_of_turn>"]})
    patch = 16
    image_tokens = (size.image_px // patch) ** 2 // 4  # the projector pools 2x2 patches
    processor = Gemma3Processor(
        image_processor=Gemma3ImageProcessor(size={"height": size.image_px, "width": size.image_px}),
        tokenizer=tokenizer,
        chat_template=GEMMA3_CHAT_TEMPLATE,
        image_seq_length=image_tokens,
    )
    config = Gemma3Config(
        text_config=_text(
            size,
            len(tokenizer),
            head_dim=size.hidden // size.heads,
            sliding_window=sliding_window,
            layer_types=["sliding_attention", "full_attention"] * (size.layers // 2),
        ),
        vision_config=_vision(size, image_size=size.image_px, patch_size=patch),
        mm_tokens_per_image=image_tokens,
        boi_token_index=tokenizer.boi_token_id,
        eoi_token_index=tokenizer.eoi_token_id,
        image_token_index=tokenizer.image_token_id,
    )
    end_of_turn = tokenizer.convert_tokens_to_ids("<end_of_turn>")
    return config, processor, GenerationConfig(eos_token_id=end_of_turn, pad_token_id=tokenizer.pad_token_id)


def _llava_next(size: TinySize, tokenizers: Path):
    tokenizer = AutoTokenizer.from_pretrained(tokenizers / SMOLVLM)
    patch, side = 16, size.image_px
    # Anyres: a wide image is cut into two tiles beside the base view.
    pinpoints = [[side, side], [side, 2 * side], [2 * side, side]]
    processor = LlavaNextProcessor(
        image_processor=LlavaNextImageProcessor(
            size={"shortest_edge": side}, crop_size={"height": side, "width": side}, image_grid_pinpoints=pinpoints
        ),
        tokenizer=tokenizer,
        patch_size=patch,
        vision_feature_select_strategy="default",
        num_additional_image_tokens=1,
        chat_template=LLAVA_CHAT_TEMPLATE,
    )
    config = LlavaNextConfig(
        text_config=LlamaConfig(**_text(size, len(tokenizer))),
        vision_config=CLIPVisionConfig(
            **_vision(size, image_size=side, patch_size=patch, projection_dim=size.vision_hidden)
        ),
        image_token_index=processor.image_token_id,
        image_grid_pinpoints=pinpoints,
        image_seq_length=(side // patch) ** 2,
    )
    return config, processor, GenerationConfig(eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)


def _qwen2_vl(size: TinySize, tokenizers: Path):
    tokenizer = AutoTokenizer.from_pretrained(tokenizers / QWEN25)
    side = size.image_px - size.image_px % 28
    processor = Qwen2VLProcessor(
        image_processor=Qwen2VLImageProcessor(size={"shortest_edge": side * side, "longest_edge": side * side}),
        tokenizer=tokenizer,
        video_processor=Qwen2VLVideoProcessor(),
        chat_template=tokenizer.chat_template,
    )
    config = Qwen2VLConfig(
        text_config=_text(size, len(tokenizer), rope_scaling={"type": "mrope", "mrope_section": _mrope_section(size)}),
        vision_config=dict(
            depth=size.vision_layers,
            embed_dim=size.vision_hidden,
            hidden_size=size.hidden,
            num_heads=2,
            mlp_ratio=2,
        ),
    )
    return config, processor, QWEN_GENERATION


def _idefics2(size: TinySize, tokenizers: Path):
    tokenizer = AutoTokenizer.from_pretrained(tokenizers / SMOLVLM, add_bos_token=True)
    patch, latents = 16, 4  # the perceiver resamples any image to `latents` tokens
    processor = Idefics2Processor(
        image_processor=Idefics2ImageProcessor(
            do_image_splitting=False, size={"longest_edge": size.image_px, "shortest_edge": size.image_px}
        ),
        tokenizer=tokenizer,
        image_seq_len=latents,
        chat_template=IDEFICS2_CHAT_TEMPLATE,
    )
    config = Idefics2Config(
        text_config=_text(size, len(tokenizer), model_type="mistral", head_dim=size.hidden // size.heads),
        vision_config=_vision(size, image_size=size.image_px, patch_size=patch),
        perceiver_config=dict(
            hidden_size=size.hidden,
            resampler_n_latents=latents,
            resampler_depth=1,
            resampler_n_heads=2,
            resampler_head_dim=16,
            num_key_value_heads=1,
        ),
        image_token_id=processor.image_token_id,
    )
    end_of_utterance = tokenizer.convert_tokens_to_ids("<end_of_utterance>")
    return config, processor, GenerationConfig(eos_token_id=end_of_utterance, pad_token_id=tokenizer.pad_token_id)


def _mistral3(size: TinySize, tokenizers: Path):
    tokenizer = AutoTokenizer.from_pretrained(
        tokenizers / QWEN25, bos_token="<s>", eos_token="</s>", add_bos_token=True
    )
    tokenizer.add_special_tokens({"additional_special_tokens": PIXTRAL_IMAGE_TOKENS})
    patch, merge = 16, 2
    processor = PixtralProcessor(
        image_processor=PixtralImageProcessor(size={"longest_edge": size.image_px}, patch_size=patch),
        tokenizer=tokenizer,
        patch_size=patch,
        spatial_merge_size=merge,
        chat_template=MISTRAL3_CHAT_TEMPLATE,
    )
    config = Mistral3Config(
        text_config=MistralConfig(**_text(size, len(tokenizer), head_dim=size.hidden // size.heads)),
        vision_config=PixtralVisionConfig(
            **_vision(size, image_size=size.image_px, patch_size=patch, head_dim=size.vision_hidden // 2)
        ),
        image_token_index=tokenizer.convert_tokens_to_ids("[IMG]"),
        spatial_merge_size=merge,
    )
    return config, processor, GenerationConfig(eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)


_BUILDERS = {
    "qwen2_5_vl": _qwen2_5_vl,
    "smolvlm": _smolvlm,
    "qwen3_vl": _qwen3_vl,
    "llava": _llava,
    "internvl": _internvl,
    "gemma3": _gemma3,
    "gemma3_sliding": functools.partial(_gemma3, sliding_window=SHORT_SLIDING_WINDOW),
    "llava_next": _llava_next,
    "qwen2_vl": _qwen2_vl,
    "idefics2": _idefics2,
    "mistral3": _mistral3,
}


def build_tiny(
    family: str,
    directory: Path,
    *,
    size: TinySize = TINY,
    seed: int = 0,
    edit: Callable[[PreTrainedModel], None] | None = None,
    name: str | None = None,
    tokenizers: Path = TOKENIZERS,
) -> Path:
    """Write a random-weight model of `family` (one of FAMILIES) to `directory`/`name` and return that path.

    `name` defaults to the family; give another to keep several variants of one family side by side.
    `tokenizers` is the folder holding the shared qwen2_5_vl/ and smolvlm_256m/ assets.
    """
    if family not in _BUILDERS:
        raise ValueError(f"unknown family {family!r}; one of {', '.join(FAMILIES)}")
    for asset in (QWEN25, SMOLVLM):
        if not (Path(tokenizers) / asset).is_dir():
            raise FileNotFoundError(f"tokenizer assets missing: {Path(tokenizers) / asset}")
    config, processor, generation = _BUILDERS[family](size, Path(tokenizers))
    torch.manual_seed(seed)
    model = AutoModelForImageTextToText.from_config(config, dtype=torch.float32).eval()
    model.generation_config = generation
    if edit is not None:
        with torch.no_grad():
            edit(model)
    path = Path(directory) / (name or family)
    model.save_pretrained(path)
    processor.save_pretrained(path)
    _list_added_tokens_in_config(processor.tokenizer, path)
    return path


def _list_added_tokens_in_config(tokenizer, path: Path) -> None:
    """List the added tokens in tokenizer_config.json too, as the hub checkpoints in ../shared/assets do.

    transformers 5 saves them in tokenizer.json only, and loading a folder without them parses the whole
    tokenizer.json a second time just to read them back: with Qwen's vocabulary, 0.6 of the 1 CPU s a
    processor's load takes.  The tokenizer loaded is the same either way.
    """
    config_file = path / "tokenizer_config.json"
    config = json.loads(config_file.read_text(encoding="utf-8"))
    config["added_tokens_decoder"] = {
        str(token_id): token.__getstate__() for token_id, token in tokenizer.added_tokens_decoder.items()
    }
    config_file.write_text(json.dumps(config, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def planting(logits: dict[int, float]) -> Callable[[PreTrainedModel], None]:
    """A SmolVLM edit after which every prompt's next-token logits are exactly `logits` (0 elsewhere).

    With attention and MLP outputs zeroed and one embedding for every token, the
    last position's final hidden state is the same vector z for any input; output
    rows l * z / |z|^2 then give logit l.
    """

    def edit(model) -> None:
        text = model.model.text_model
        for layer in text.layers:
            layer.self_attn.o_proj.weight.zero_()
            layer.mlp.down_proj.weight.zero_()
        embeddings = text.embed_tokens.weight
        embeddings[:] = torch.linspace(-1.0, 1.0, embeddings.shape[1])
        z = text.norm(embeddings[:1])[0]
        model.lm_head.weight.zero_()
        for token_id, logit in logits.items():
            model.lm_head.weight[token_id] = logit * z / z.dot(z)

    return edit
