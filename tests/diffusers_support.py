"""Tiny random-weight edit pipelines, built from configs as diffusers' own pipeline tests build them, and saved.

Each is the real pipeline class with the real tokenizer shipped in ../shared/assets (Qwen2.5-VL's, which is
Qwen3's vocabulary too): only the widths and depths are shrunk.  The VAEs downsample 16 times (diffusers' tests use
4 and 1), so that the megapixel the Qwen editor always encodes its source at costs seconds, not minutes, on a CPU.
The FLUX.2 [klein] text encoder has 28 layers of width 16, so that the pipeline's default hidden-state layers
(9, 18, 27) exist and it is called with no argument a real checkpoint would not need.
"""

from __future__ import annotations

from pathlib import Path

import torch
from diffusers import (
    AutoencoderKLFlux2,
    AutoencoderKLQwenImage,
    FlowMatchEulerDiscreteScheduler,
    Flux2KleinPipeline,
    Flux2Transformer2DModel,
    QwenImageEditPipeline,
    QwenImageTransformer2DModel,
)
from transformers import (
    Qwen2_5_VLConfig,
    Qwen2_5_VLForConditionalGeneration,
    Qwen2Tokenizer,
    Qwen2TokenizerFast,
    Qwen2VLProcessor,
    Qwen3Config,
    Qwen3ForCausalLM,
)

QWEN_TOKENIZER = Path(__file__).resolve().parents[2] / "shared" / "assets" / "tokenizers" / "qwen2_5_vl"


def tiny_qwen_image_edit() -> QwenImageEditPipeline:
    torch.manual_seed(0)
    transformer = QwenImageTransformer2DModel(patch_size=2, in_channels=16, out_channels=4, num_layers=2,
                                              attention_head_dim=16, num_attention_heads=3, joint_attention_dim=16,
                                              guidance_embeds=False, axes_dims_rope=(8, 4, 4))  # fmt: skip
    z_dim = 4
    vae = AutoencoderKLQwenImage(base_dim=8, z_dim=z_dim, dim_mult=[1, 1, 1, 1, 1], num_res_blocks=1,
                                 temperal_downsample=[False, True, True, True], latents_mean=[0.0] * z_dim,
                                 latents_std=[1.0] * z_dim)  # fmt: skip
    text = {"hidden_size": 16, "intermediate_size": 16, "num_hidden_layers": 2, "num_attention_heads": 2,
            "num_key_value_heads": 2, "rope_theta": 1000000.0,
            "rope_scaling": {"mrope_section": [1, 1, 2], "rope_type": "default", "type": "default"}}  # fmt: skip
    vision = {"depth": 2, "hidden_size": 16, "intermediate_size": 16, "num_heads": 2, "out_hidden_size": 16}
    config = Qwen2_5_VLConfig(text_config=text, vision_config=vision, hidden_size=16, vocab_size=152064,
                              vision_end_token_id=151653, vision_start_token_id=151652, vision_token_id=151654)  # fmt: skip
    return QwenImageEditPipeline(
        transformer=transformer,
        vae=vae,
        scheduler=FlowMatchEulerDiscreteScheduler(),
        text_encoder=Qwen2_5_VLForConditionalGeneration(config).eval(),
        tokenizer=Qwen2Tokenizer.from_pretrained(QWEN_TOKENIZER),
        processor=Qwen2VLProcessor.from_pretrained(QWEN_TOKENIZER),
    )


def tiny_flux2_klein() -> Flux2KleinPipeline:
    torch.manual_seed(0)
    transformer = Flux2Transformer2DModel(patch_size=1, in_channels=4, num_layers=1, num_single_layers=1,
                                          attention_head_dim=16, num_attention_heads=2, joint_attention_dim=48,
                                          timestep_guidance_channels=256, axes_dims_rope=[4, 4, 4, 4],
                                          guidance_embeds=False)  # fmt: skip
    config = Qwen3Config(intermediate_size=16, hidden_size=16, num_hidden_layers=28, num_attention_heads=2,
                         num_key_value_heads=2, vocab_size=151936, max_position_embeddings=1024)  # fmt: skip
    vae = AutoencoderKLFlux2(sample_size=32, in_channels=3, out_channels=3, down_block_types=("DownEncoderBlock2D",) * 5,
                             up_block_types=("UpDecoderBlock2D",) * 5, block_out_channels=(4,) * 5, layers_per_block=1,
                             latent_channels=1, norm_num_groups=1, use_quant_conv=False, use_post_quant_conv=False)  # fmt: skip
    return Flux2KleinPipeline(
        scheduler=FlowMatchEulerDiscreteScheduler(),
        text_encoder=Qwen3ForCausalLM(config).eval(),
        tokenizer=Qwen2TokenizerFast.from_pretrained(QWEN_TOKENIZER),
        transformer=transformer,
        vae=vae,
        is_distilled=True,
    )
