"""Records per second on one GPU for full-size model architectures, against one full request per prompt.

Builds Qwen2.5-VL-7B and Qwen3-VL-4B from their published configurations
(written below; random weights, nothing downloaded), in bf16 and in 4-bit
(bitsandbytes nf4, bf16 compute, loaded the way `convswap run --quant 4bit`
loads a model), and reads COCO-shaped queries: one 640x480 photograph, six
conventions' prompts per query.  For each model and precision it prints one row:

  first-token   records/s of the backend's first-token readout (shared prefix, batched continuations)
  ft baseline   records/s of one full forward per prompt
  generation    records/s of the backend's greedy generation (16 new tokens, batched from the shared prefix)
  gen baseline  records/s of one full `generate` per prompt (what lmms-eval and VLMEvalKit do)
  peak GiB      the most GPU memory allocated while that row was measured
  prefill MFU   model FLOPs of the image prefix's forward per second, over the GPU's peak bf16 FLOP/s

Prefill FLOPs: 2 x non-embedding language-model parameters x prefix tokens, plus
2 x vision-tower parameters x image patches, plus causal attention
(2 x layers x tokens^2 x attention width); vision attention is left out, so the
figure slightly understates the work done.

Peak FLOP/s: 989 TFLOP/s, the H200 SXM's dense BF16 Tensor Core figure in
NVIDIA's H200 datasheet (1,979 TFLOP/s is the figure with sparsity).  Give
--peak-tflops for another GPU.

On a machine without a CUDA GPU it says so and exits 0.  `--cpu-check` runs the
same code on the CPU with the same architectures shrunk to a few units wide, to
check the code, not to measure anything.

    python benchmarks/gpu_throughput.py [--queries 4] [--new-tokens 16] [--cpu-check]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

H200_SXM_PEAK_BF16_TFLOPS = 989.0  # dense BF16 Tensor Core, NVIDIA H200 datasheet


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--queries", type=int, default=4, help="timed queries per measurement (plus one warm-up)")
    parser.add_argument("--new-tokens", type=int, default=16, help="greedy tokens per generated record")
    parser.add_argument("--peak-tflops", type=float, default=H200_SXM_PEAK_BF16_TFLOPS,
                        help=f"the GPU's peak dense bf16 TFLOP/s (default {H200_SXM_PEAK_BF16_TFLOPS:g}, H200 SXM)")  # fmt: skip
    parser.add_argument("--tokenizers", type=Path,
                        help="folder holding qwen2_5_vl/ (default: ../shared/assets/tokenizers beside the checkout)")  # fmt: skip
    parser.add_argument("--cpu-check", action="store_true",
                        help="run on the CPU with the architectures shrunk, to check the code (measures nothing)")  # fmt: skip
    args = parser.parse_args()
    if args.cpu_check:
        device = torch.device("cpu")
    elif torch.cuda.is_available():
        device = torch.device("cuda", 0)
    else:
        print("no CUDA GPU on this machine: nothing measured (run it where one is, or --cpu-check to test the code)")
        return 0
    from gpu_measurements import measure_all  # beside this script, which Python puts first on the path

    measure_all(args, device)
    return 0


if __name__ == "__main__":
    sys.exit(main())
