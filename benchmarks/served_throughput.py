"""First-token records per second of a served: model at 1, 8 and 32 requests in flight, and the ratio to one at a time.

By default a loopback vLLM-format server with a fixed latency stands in for the
server (its logprobs planted over the Qwen2.5-VL tokenizer in ../shared/assets),
so the ratios measure the backend's concurrency alone.  --vllm starts a real
vLLM on 127.0.0.1 instead, serving the real-engine tests' tiny Qwen2.5-VL from
the environment scripts/vllm_env.sh builds (tests/vllm_server.py), and stops it
after; its ratios measure the backend and the engine's batching together on
this machine's CPUs.  Point it at a server of your own with --base-url, --model
and --tokenizer.  Each run uses a fresh response cache, so every request is
sent; the capability and conformance probes at load are not timed.

    python benchmarks/served_throughput.py --records 64 --latency 0.1
    python benchmarks/served_throughput.py --vllm --records 64
    python benchmarks/served_throughput.py --base-url http://gpu-node:8000/v1 --model Qwen/Qwen2.5-VL-72B-Instruct \\
        --tokenizer Qwen/Qwen2.5-VL-72B-Instruct
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import tempfile
import time
from pathlib import Path

from PIL import Image

# The loopback servers live with the tests that also use them.
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from api_servers import LoopbackServer  # noqa: E402
from served_servers import Served, planted_distribution, served_server  # noqa: E402
from vllm_server import VllmUnavailable, build_model, running_vllm, vllm_environment  # noqa: E402

from convswap.calibration.surfaces import MIN_CANDIDATE_MASS, surface_candidates  # noqa: E402
from convswap.core import ConvswapError, Prompt, Surface  # noqa: E402
from convswap.readout.base import Query  # noqa: E402
from convswap.readout.logprobs import logprob_readout  # noqa: E402
from convswap.readout.registry import load_backend  # noqa: E402

IN_FLIGHT = (1, 8, 32)
DIGITS = tuple(str(n) for n in range(1, 10))
QWEN = ROOT.parent / "shared" / "assets" / "tokenizers" / "qwen2_5_vl"


def records_per_second(base_url: str, model: str, tokenizer: str, records: int, in_flight: int) -> float:
    """First-token readouts of `records` distinct prompts, `in_flight` requests at a time."""
    prompts = tuple(
        Prompt(
            f"t{i}",
            "cell_name",
            "locate",
            f"Which cell holds object {i}? Answer with 1 to 9.",
            DIGITS,
            DIGITS,
            (("target", 1),),
            "integer",
        )  # fmt: skip
        for i in range(records)
    )
    query = Query(image=Image.new("RGB", (64, 64), (120, 60, 200)), prompts=prompts, condition="visible")
    with tempfile.TemporaryDirectory() as cache_dir:
        backend = load_backend(f"served:{model}", base_url=base_url, tokenizer=tokenizer,
                               cache_path=Path(cache_dir) / "api.sqlite", concurrency=in_flight)  # fmt: skip
        try:
            ids = tuple(backend.encode(digit)[0] for digit in DIGITS)
            surface = Surface(DIGITS, "bare", ids, 1.0, (), "")
            candidates = surface_candidates(backend, surface)
            started = time.perf_counter()
            evidence = backend.first_token_logprobs(query, ids)
            readouts = [logprob_readout(e, surface, candidates, MIN_CANDIDATE_MASS) for e in evidence]
            elapsed = time.perf_counter() - started
        finally:
            backend.close()
    if len(readouts) != records or any(r.slot is None for r in readouts):
        raise SystemExit("benchmark run went wrong: a prompt was not read")
    return records / elapsed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=64, help="records per run (distinct prompts; default 64)")
    parser.add_argument("--latency", type=float, default=0.1, help="loopback server: seconds before each answer")
    server = parser.add_mutually_exclusive_group()
    server.add_argument("--vllm", action="store_true",
                        help="a real vLLM on 127.0.0.1 serving a tiny Qwen2.5-VL, started here and stopped after")  # fmt: skip
    server.add_argument("--base-url", help="a real server instead of the loopback one (e.g. http://host:8000/v1)")
    parser.add_argument("--model", default="qwen-served", help="the served model's name (with --base-url)")
    parser.add_argument("--tokenizer", default=str(QWEN), help="the served model's tokenizer folder or hub id")
    args = parser.parse_args()

    with contextlib.ExitStack() as stack:
        base_url = args.base_url
        if args.vllm:
            work = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="served-throughput-")))
            try:
                environment = vllm_environment()
                folder = build_model(work, QWEN.parent)
                vllm = stack.enter_context(running_vllm(folder, args.model, work / "server.log", environment))
            except VllmUnavailable as error:  # the environment's build or the server's start: its first line
                raise SystemExit(f"served_throughput: no vLLM: {str(error).splitlines()[0]}") from None
            base_url, args.tokenizer = vllm.base_url, str(folder)
            print(f"vLLM on {vllm.url}, ready in {vllm.started_in_s:.0f} s; {args.records} records per run")
        elif base_url is None:
            from transformers import AutoProcessor

            processor = AutoProcessor.from_pretrained(args.tokenizer)
            vocab = len(processor.tokenizer)
            three = processor.tokenizer.encode("3", add_special_tokens=False)[0]
            served = Served(args.model, processor, planted_distribution(vocab, {three: 20.0}), reads_inputs=False)
            server = stack.enter_context(LoopbackServer(served_server(served), latency=args.latency))
            base_url = f"{server.url}/v1"
            print(f"loopback vLLM-format server, latency {args.latency * 1000:.0f} ms; {args.records} records per run")
        try:
            rates = {n: records_per_second(base_url, args.model, args.tokenizer, args.records, n) for n in IN_FLIGHT}
        except ConvswapError as error:  # no server at --base-url, or not the one asked for: what convswap says
            raise SystemExit(f"served_throughput: {error}") from None
    for n, rate in rates.items():
        print(f"{n:>3} in flight: {rate:7.1f} records/s  ({rate / rates[1]:.2f}x one at a time)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
