"""Requests per second of an API backend at concurrency N against concurrency 1.

A loopback server with a fixed latency stands in for the API, so the ratio
measures the backend's concurrency alone.  Each run uses a fresh response
cache, so every request is sent.  The image endpoints (`openai-image`:
images.edit, `openai-chat-image`: chat completions with an image modality,
`gemini-image`: generate_content with an image modality) answer every
guidance prompt with a 1024x1024 PNG; `--api all` runs every endpoint.

    python benchmarks/api_throughput.py --api openai --requests 64 --concurrency 8 --latency 0.05
    python benchmarks/api_throughput.py --api all --requests 32 --concurrency 8 --latency 0.2
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

from PIL import Image

# The loopback server lives with the tests that also use it.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from api_servers import LoopbackServer, gemini_reply, openai_reply  # noqa: E402
from image_servers import chat_image_reply, gemini_image_reply, image_edit_reply, png  # noqa: E402

from convswap.core import Prompt  # noqa: E402
from convswap.readout.base import Query  # noqa: E402
from convswap.readout.registry import load_backend  # noqa: E402

DRAWN = png(Image.new("RGB", (1024, 1024), (0, 255, 255)))
SETUPS = {  # key variable, spec, base URL, the server's reply, whether the backend draws (an image endpoint)
    "openai": ("OPENAI_API_KEY", "openai:gpt-4o", lambda url: f"{url}/v1", lambda: openai_reply("3"), False),
    "gemini": ("GEMINI_API_KEY", "gemini:gemini-flash-latest", lambda url: url, lambda: gemini_reply("3"), False),
    "openai-image": ("OPENAI_API_KEY", "openai-image:gpt-image-1.5", lambda url: f"{url}/v1",
                     lambda: image_edit_reply(DRAWN), True),
    "openai-chat-image": ("OPENAI_API_KEY", "openai-chat-image:gateway/image", lambda url: f"{url}/v1",
                          lambda: chat_image_reply(DRAWN), True),
    "gemini-image": ("GEMINI_API_KEY", "gemini-image:gemini-2.5-flash-image", lambda url: url,
                     lambda: gemini_image_reply(DRAWN), True),
}  # fmt: skip


def requests_per_second(api: str, requests: int, concurrency: int, latency: float) -> float:
    key_variable, spec, base_url, reply, draws = SETUPS[api]
    # A placeholder key: the real one never needs to leave this process, even for 127.0.0.1.
    os.environ[key_variable] = "benchmark-placeholder-key"
    prompts = tuple(
        Prompt("trial", "cell_name", "locate", f"question {i}", ("a", "b"), ("1", "2"), (("target", 1),), "integer")
        for i in range(requests)
    )
    query = Query(image=Image.new("RGB", (64, 64), (120, 60, 200)), prompts=prompts, condition="visible")
    answer = reply()
    with tempfile.TemporaryDirectory() as cache_dir, LoopbackServer(lambda seen: answer, latency=latency) as server:
        backend = load_backend(
            spec, base_url=base_url(server.url), cache_path=Path(cache_dir) / "api.sqlite", concurrency=concurrency
        )
        started = time.perf_counter()
        if draws:
            answered = all(drawing.image is not None for drawing in backend.draw(query))
        else:
            answered = all(generation.text == "3" for generation in backend.generate(query))
        elapsed = time.perf_counter() - started
        backend.close()
    if len(server.requests) != requests or not answered:
        raise SystemExit(f"benchmark run went wrong: {len(server.requests)} requests sent for {requests} prompts")
    return requests / elapsed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--api", choices=[*sorted(SETUPS), "all"], default="openai",
                        help="which SDK and wire format to use (all: each in turn)")  # fmt: skip
    parser.add_argument("--requests", type=int, default=64, help="requests per run (distinct prompts)")
    parser.add_argument("--concurrency", type=int, default=8, help="concurrency compared against 1")
    parser.add_argument("--latency", type=float, default=0.05, help="seconds the server waits before each answer")
    args = parser.parse_args()

    for api in sorted(SETUPS) if args.api == "all" else [args.api]:
        serial = requests_per_second(api, args.requests, 1, args.latency)
        parallel = requests_per_second(api, args.requests, args.concurrency, args.latency)
        print(f"{api}: {args.requests} requests, server latency {args.latency * 1000:.0f} ms")
        print(f"concurrency 1:  {serial:7.1f} requests/s")
        print(f"concurrency {args.concurrency}:  {parallel:7.1f} requests/s")
        print(f"ratio: {parallel / serial:.2f}x (ideal {args.concurrency}x)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
