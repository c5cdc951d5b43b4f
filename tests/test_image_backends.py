"""Image-answering API backends through the real `openai` and `google-genai` clients, against loopback servers."""

from __future__ import annotations

import base64
import hashlib
import io
import json
import sqlite3
import threading

import pytest
from api_servers import LoopbackServer, Reply, scripted
from image_servers import (
    chat_image_reply,
    gemini_blocked,
    gemini_image_reply,
    gemini_prompt_blocked,
    gemini_text_reply,
    huge_png,
    image_edit_reply,
    image_edit_without_image,
    moderation_refusal,
    png,
)
from PIL import Image

from convswap.core import ConvswapError, Prompt
from convswap.readout.api_common import RetryPolicy
from convswap.readout.base import Query
from convswap.readout.registry import load_backend

KEY = "sk-test-image-0123456789"
GEMINI_KEY = "AIzaSyTest-image-0123456789"
LANDSCAPE = Image.new("RGB", (640, 426), (30, 120, 60))  # coco image 139's size
PORTRAIT = Image.new("RGB", (426, 640), (30, 120, 60))
DRAWN = Image.new("RGB", (1536, 1024), (200, 40, 90))
NO_WAIT = RetryPolicy(max_attempts=3, sleep=lambda seconds: None)
SETUPS = {  # spec, base URL path, a reply carrying an image, a reply carrying none
    "edit": ("openai-image:gpt-image-1.5", "/v1", image_edit_reply, image_edit_without_image),
    "chat": ("openai-chat-image:gateway/image-model", "/v1", chat_image_reply, lambda: chat_image_reply(None, "No.")),
    "gemini": ("gemini-image:gemini-2.5-flash-image", "", gemini_image_reply, lambda: gemini_text_reply("It is 3.")),
}


@pytest.fixture(autouse=True)
def keys(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    monkeypatch.setenv("GEMINI_API_KEY", GEMINI_KEY)


def query(image: Image.Image = LANDSCAPE, *texts: str) -> Query:
    texts = texts or ("Put one cyan dot on the dog.",)
    prompts = tuple(
        Prompt("t1", "point_marker", "locate", text, ("top-left", "top-right"), (), (("target", 1),), "integer")
        for text in texts
    )
    return Query(image=image, prompts=prompts, condition="visible")


def backend(spec: str, server: LoopbackServer, tmp_path, path: str = "", **options):
    return load_backend(spec, base_url=server.url + path, cache_path=tmp_path / "api.sqlite", retry=NO_WAIT,
                        **options)  # fmt: skip


def draw(kind: str, server: LoopbackServer, tmp_path, image: Image.Image = LANDSCAPE, **options):
    spec, path, _, _ = SETUPS[kind]
    model = backend(spec, server, tmp_path, path, **options)
    try:
        return model.draw(query(image))
    finally:
        model.close()


def test_an_image_edit_sends_the_source_and_prompt_as_multipart_and_reads_b64_json(tmp_path):
    with LoopbackServer(lambda seen: image_edit_reply(png(DRAWN))) as server:
        (drawing,) = draw("edit", server, tmp_path, input_fidelity="high")
    (seen,) = server.requests
    assert seen.path == "/v1/images/edits"
    assert seen.headers["authorization"] == f"Bearer {KEY}"
    assert Image.open(io.BytesIO(seen.files["image"])).tobytes() == LANDSCAPE.tobytes()
    assert seen.body == {"model": "gpt-image-1.5", "prompt": "Put one cyan dot on the dog.", "n": "1",
                         "size": "1536x1024", "output_format": "png", "input_fidelity": "high"}  # fmt: skip
    assert drawing.image is not None and drawing.image.tobytes() == DRAWN.tobytes()
    assert drawing.asked_size == (1536, 1024)


def test_every_record_carries_the_input_fidelity_asked(tmp_path):
    with LoopbackServer(lambda seen: image_edit_reply(png(DRAWN))) as server:
        faithful = backend("openai-image:gpt-image-1.5", server, tmp_path, "/v1", input_fidelity="high")
        plain = backend("openai-image:gpt-image-1.5", server, tmp_path, "/v1")
    assert faithful.info().environment == {"input_fidelity": "high"}
    assert plain.info().environment == {"input_fidelity": None}
    faithful.close()
    plain.close()


@pytest.mark.parametrize(
    ("model", "image", "size"),
    [
        ("gpt-image-1", LANDSCAPE, "1536x1024"),
        ("gpt-image-1", PORTRAIT, "1024x1536"),
        ("gpt-image-1", Image.new("RGB", (500, 480)), "1024x1024"),
        # about a megapixel at 640:426, edges in steps of 16: 1024 * sqrt(640/426) = 1255 -> 1248, 1255 / 1.502 -> 832
        ("gpt-image-2", LANDSCAPE, "1248x832"),
        # a 10:1 strip is asked at GPT Image 2's widest, 3:1: 1024 * sqrt(3) = 1774 -> 1776, 1774 / 3 = 591 -> 592
        ("gpt-image-2", Image.new("RGB", (1000, 100)), "1776x592"),
    ],
)
def test_the_size_asked_is_the_accepted_one_closest_to_the_sources_aspect_ratio(tmp_path, model, image, size):
    with LoopbackServer(lambda seen: image_edit_reply(png(DRAWN))) as server:
        edit = backend(f"openai-image:{model}", server, tmp_path, "/v1")
        (drawing,) = edit.draw(query(image))
        edit.close()
    assert server.requests[0].body["size"] == size
    assert drawing.asked_size == tuple(int(side) for side in size.split("x"))


def test_an_image_only_model_refuses_text_and_a_mini_refuses_input_fidelity_before_any_request(tmp_path):
    with LoopbackServer(lambda seen: image_edit_reply(png(DRAWN))) as server:
        edit = backend("openai-image:gpt-image-1", server, tmp_path, "/v1")
        with pytest.raises(ConvswapError, match="answers in pixels only"):
            edit.generate(query())
        edit.close()
        with pytest.raises(ConvswapError, match="gpt-image-1-mini does not take option input_fidelity"):
            backend("openai-image:gpt-image-1-mini", server, tmp_path, "/v1", input_fidelity="high")
        with pytest.raises(ConvswapError, match="input_fidelity must be one of high, low"):
            backend("openai-image:gpt-image-1", server, tmp_path, "/v1", input_fidelity="max")
    assert server.requests == []


def test_chat_completions_ask_for_an_image_modality_and_read_the_data_url(tmp_path):
    with LoopbackServer(lambda seen: chat_image_reply(png(DRAWN), "Here it is.")) as server:
        (drawing,) = draw("chat", server, tmp_path)
    (seen,) = server.requests
    assert seen.path == "/v1/chat/completions"
    assert seen.body["modalities"] == ["image", "text"]
    url = seen.body["messages"][0]["content"][0]["image_url"]["url"]
    sent = base64.b64decode(url.removeprefix("data:image/png;base64,"))
    assert Image.open(io.BytesIO(sent)).tobytes() == LANDSCAPE.tobytes()
    assert drawing.image is not None and drawing.image.size == DRAWN.size


def test_gemini_asks_for_an_image_at_the_closest_aspect_ratio_and_for_text_under_a_text_convention(tmp_path):
    replies = scripted(gemini_image_reply(png(DRAWN)), then=gemini_text_reply("top-left"))
    with LoopbackServer(replies) as server:
        model = backend("gemini-image:gemini-2.5-flash-image", server, tmp_path)
        (drawing,) = model.draw(query())
        (generation,) = model.generate(query())
        model.close()
    drawn, spoken = server.requests
    assert drawn.path == "/v1/models/gemini-2.5-flash-image:generateContent"
    # 640:426 = 1.50: 3:2 exactly, drawn at 1248x832
    assert drawn.body["generationConfig"] == {"responseModalities": ["IMAGE"], "imageConfig": {"aspectRatio": "3:2"}}
    assert drawing.image is not None and drawing.asked_size == (1248, 832)
    assert spoken.body["generationConfig"]["responseModalities"] == ["TEXT"]
    assert generation.text == "top-left"


@pytest.mark.parametrize(
    ("kind", "reply", "reason"),
    [
        ("edit", moderation_refusal(), "refused by the content policy: moderation_blocked Your request was rejected"),
        ("edit", image_edit_without_image(), "no data[0].b64_json"),
        ("chat", chat_image_reply(None, "I cannot draw that."), "no image (finish reason stop); the model wrote: 'I"),
        ("gemini", gemini_blocked("IMAGE_SAFETY"), "no image: finish reason IMAGE_SAFETY"),
        ("gemini", gemini_blocked("PROHIBITED_CONTENT"), "no image: finish reason PROHIBITED_CONTENT"),
        ("gemini", gemini_prompt_blocked("SAFETY"), "the prompt was blocked (SAFETY)"),
        ("gemini", gemini_text_reply("The dog is top-left."), "no image part; the model wrote: 'The dog is top-left.'"),
    ],
)
def test_a_reply_without_a_usable_image_is_a_generation_failure_with_its_reason_sent_once(tmp_path, kind, reply,
                                                                                          reason):  # fmt: skip
    with LoopbackServer(lambda seen: reply) as server:
        (drawing,) = draw(kind, server, tmp_path)
        (again,) = draw(kind, server, tmp_path)  # a refusal is an answer: cached, never sent again
    assert drawing.image is None and not drawing.api_error
    assert reason in drawing.failure
    assert again == drawing and len(server.requests) == 1


GATEWAY_PAGE = Reply(200, raw=b"<html><body>502 Bad Gateway</body></html>", content_type="text/html")
COMPLETION = {"id": "x", "object": "chat.completion", "created": 1, "model": "m"}


def chat_url(url: str) -> Reply:
    message = {"role": "assistant", "content": None, "images": [{"type": "image_url", "image_url": {"url": url}}]}
    return Reply(200, {**COMPLETION, "choices": [{"index": 0, "message": message, "finish_reason": "stop"}]})


def gemini_inline(data: str) -> Reply:
    parts = [{"inlineData": {"mimeType": "image/png", "data": data}}]
    return Reply(200, {"candidates": [{"content": {"role": "model", "parts": parts}, "finishReason": "STOP"}]})


@pytest.mark.parametrize(
    ("kind", "reply", "reason"),
    [
        ("edit", Reply(200, {"created": 1, "data": "not a list"}), "not an images response"),
        ("edit", Reply(200, {"created": 1, "data": [{"b64_json": 7}]}), "data[0].b64_json is int, not text"),
        ("edit", Reply(200, {"created": 1, "data": [{"b64_json": "iVBOR*not base64*"}]}),
         "data[0].b64_json is not base64 ('iVBOR*not base64*')"),
        ("edit", image_edit_reply(b"GIF89a not really an image"),
         "the image that came back (26 bytes) cannot be decoded: it is not an image file"),
        ("edit", image_edit_reply(png(DRAWN)[:5000]), "the image that came back (5,000 bytes) cannot be decoded: "),
        ("edit", GATEWAY_PAGE, "the body is not a JSON object: '<html><body>502 Bad Gateway</body></html>'"),
        ("chat", Reply(200, {**COMPLETION, "choices": []}), "not a chat completion with a message"),
        ("chat", Reply(200, {**COMPLETION, "choices": [{"index": 0, "message": None, "finish_reason": "stop"}]}),
         "not a chat completion with a message"),
        ("chat", chat_url("https://cdn.example/drawn.png"), "the reply's image is not a base64 data URL"),
        ("chat", chat_url("data:image/png;base64,%%%"), "the reply's image data URL is not base64 ('%%%')"),
        ("chat", GATEWAY_PAGE, "the body is not a JSON object: '<html><body>502 Bad Gateway</body></html>'"),
        ("gemini", gemini_inline("%%% not base64"), "the SDK cannot read the body"),
        ("gemini", GATEWAY_PAGE, "the SDK cannot read the body (JSONDecodeError"),
    ],
)  # fmt: skip
def test_a_malformed_reply_is_an_api_error_never_cached_and_asked_again(tmp_path, kind, reply, reason):
    _, _, with_image, _ = SETUPS[kind]
    with LoopbackServer(lambda seen: reply) as server:
        (drawing,) = draw(kind, server, tmp_path)
        assert drawing.image is None and drawing.api_error and f"malformed reply: {reason}" in drawing.failure
        assert cached(tmp_path) == (0, 0)  # neither the reply nor its image is kept
        server.respond = lambda seen: with_image(png(DRAWN))
        (fixed,) = draw(kind, server, tmp_path)
    assert fixed.image is not None and len(server.requests) == 2  # not retried at once, and not cached


def cached(tmp_path) -> tuple[int, int]:
    """How many replies and images the response cache keeps."""
    with sqlite3.connect(tmp_path / "api.sqlite") as db:
        return tuple(db.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0] for table in ("responses", "images"))


@pytest.mark.parametrize(
    ("kind", "size", "reason"),
    [
        # Over Pillow's own limit (179 million pixels): its error, read from the header, is no traceback either.
        ("edit", (20_000, 20_000), "is beyond Pillow's own pixel limit, more than the 64,000,000 an image may have"),
        # Under Pillow's limit, over convswap's: Pillow would decode it.
        ("chat", (10_000, 8_000), "is 10000x8000 pixels, more than the 64,000,000 an image may have"),
        ("gemini", (8_001, 8_000), "is 8001x8000 pixels, more than the 64,000,000 an image may have"),
    ],
)
def test_an_image_above_the_pixel_limit_is_an_api_error_never_cached_and_asked_again(tmp_path, kind, size, reason):
    _, _, with_image, _ = SETUPS[kind]
    with LoopbackServer(lambda seen: with_image(huge_png(*size))) as server:
        (drawing,) = draw(kind, server, tmp_path)
        assert drawing.image is None and drawing.api_error
        assert "malformed reply: the image that came back (" in drawing.failure and reason in drawing.failure
        assert cached(tmp_path) == (0, 0)
        server.respond = lambda seen: with_image(png(DRAWN))
        (fixed,) = draw(kind, server, tmp_path)
    assert fixed.image is not None and fixed.image.size == DRAWN.size and len(server.requests) == 2


def test_an_image_an_older_version_kept_unread_is_asked_again_and_replaced(tmp_path):
    with LoopbackServer(lambda seen: image_edit_reply(png(DRAWN))) as server:
        draw("edit", server, tmp_path)
        bomb = huge_png(20_000, 20_000)
        with sqlite3.connect(tmp_path / "api.sqlite") as db:  # what a version that kept any bytes could hold
            db.execute("INSERT INTO images (sha256, data) VALUES (?, ?)", (hashlib.sha256(bomb).hexdigest(), bomb))
            (reply,) = db.execute("SELECT response FROM responses").fetchone()
            kept = {**json.loads(reply), "image_sha256": hashlib.sha256(bomb).hexdigest()}
            db.execute("UPDATE responses SET response = ?", (json.dumps(kept),))
        model = backend("openai-image:gpt-image-1.5", server, tmp_path, "/v1")
        (request,) = model.image_requests(query())
        assert model.cached_drawing(request, None) is None  # a batch asks it again too
        (drawing,) = model.draw(query())
        model.close()
    assert drawing.image is not None and drawing.image.tobytes() == DRAWN.tobytes()
    assert len(server.requests) == 2 and cached(tmp_path) == (1, 2)


@pytest.mark.parametrize("kind", sorted(SETUPS))
def test_429_and_500_are_retried_and_a_request_that_keeps_failing_is_an_api_error(tmp_path, kind):
    spec, path, with_image, _ = SETUPS[kind]
    busy = Reply(429, {"error": {"message": "slow down", "code": 429, "status": "RESOURCE_EXHAUSTED"}})
    broken = Reply(500, {"error": {"message": "internal", "code": 500, "status": "INTERNAL"}})
    with LoopbackServer(scripted(busy, broken, then=with_image(png(DRAWN)))) as server:
        (drawing,) = draw(kind, server, tmp_path / "recovers")
    assert drawing.image is not None and len(server.requests) == 3
    with LoopbackServer(lambda seen: broken) as server:
        (failed,) = draw(kind, server, tmp_path / "fails")
        assert failed.image is None and failed.api_error and "HTTP 500" in failed.failure
        assert len(server.requests) == NO_WAIT.max_attempts
        server.respond = lambda seen: with_image(png(DRAWN))
        (retried,) = draw(kind, server, tmp_path / "fails")  # nothing was cached: a rerun sends it again
    assert retried.image is not None and len(server.requests) == NO_WAIT.max_attempts + 1


@pytest.mark.parametrize("kind", sorted(SETUPS))
def test_a_request_that_times_out_is_an_api_error(tmp_path, kind):
    spec, path, with_image, _ = SETUPS[kind]
    with LoopbackServer(lambda seen: Reply(200, with_image(png(DRAWN)).body, delay=1.0)) as server:
        model = load_backend(spec, base_url=server.url + path, cache_path=tmp_path / "api.sqlite", timeout=0.05,
                             retry=RetryPolicy(max_attempts=1))  # fmt: skip
        (drawing,) = model.draw(query())
        model.close()
    assert drawing.api_error and "timed out" in drawing.failure


def test_an_image_of_another_size_than_asked_comes_back_as_it_is_with_the_asked_size_beside_it(tmp_path):
    square = Image.new("RGB", (1024, 1024), (0, 255, 255))
    with LoopbackServer(lambda seen: image_edit_reply(png(square))) as server:
        (drawing,) = draw("edit", server, tmp_path)
    assert drawing.image is not None and drawing.image.size == (1024, 1024)
    assert drawing.asked_size == (1536, 1024)


def test_the_cache_keys_every_option_and_keeps_each_returned_image_once(tmp_path):
    with LoopbackServer(lambda seen: image_edit_reply(png(DRAWN))) as server:
        plain = backend("openai-image:gpt-image-1.5", server, tmp_path, "/v1")
        plain.draw(query(LANDSCAPE, "dot the dog", "dot the cat"))  # two requests, one image back
        plain.draw(query(LANDSCAPE, "dot the dog"))  # cached
        plain.draw(query(PORTRAIT, "dot the dog"))  # another source image
        plain.close()
        assert len(server.requests) == 3
        faithful = backend("openai-image:gpt-image-1.5", server, tmp_path, "/v1", input_fidelity="high")
        faithful.draw(query(LANDSCAPE, "dot the dog"))  # another option
        faithful.close()
        other = backend("openai-image:gpt-image-1", server, tmp_path, "/v1")
        other.draw(query(LANDSCAPE, "dot the dog"))  # another model
        other.close()
    assert len(server.requests) == 5
    with sqlite3.connect(tmp_path / "api.sqlite") as db:
        assert db.execute("SELECT COUNT(*) FROM responses").fetchone() == (5,)
        assert db.execute("SELECT COUNT(*) FROM images").fetchone() == (1,)
        stored = " ".join(row[0] for row in db.execute("SELECT response FROM responses"))
    assert base64.b64encode(png(DRAWN)).decode()[:64] not in stored  # the image is kept by hash, not inline


def test_a_wrong_key_stops_the_run_in_one_line_without_the_key(tmp_path):
    with LoopbackServer(
        lambda seen: Reply(401, {"error": {"message": f"Incorrect API key provided: {KEY}"}})
    ) as server:
        model = backend("openai-image:gpt-image-1", server, tmp_path, "/v1")
        with pytest.raises(ConvswapError) as raised:
            model.draw(query())
        model.close()
    assert "HTTP 401" in str(raised.value) and KEY not in str(raised.value)


def test_once_cancelled_a_backend_sends_none_of_the_queued_image_requests(tmp_path):
    arrived, cancelled = threading.Event(), threading.Event()

    def slowly(seen):
        arrived.set()
        assert cancelled.wait(5)  # the first request is in flight until the backend has been cancelled
        return Reply(200, image_edit_reply(png(DRAWN)).body)

    with LoopbackServer(slowly) as server:
        model = backend("openai-image:gpt-image-1", server, tmp_path, "/v1", concurrency=1)
        outcome: list[object] = []
        worker = threading.Thread(
            target=lambda: outcome.append(_drawn_or_error(model, query(LANDSCAPE, "a", "b", "c")))
        )
        worker.start()
        assert arrived.wait(5)
        model.cancel()  # what Ctrl-C does
        cancelled.set()
        worker.join(5)
        model.close()
    assert not worker.is_alive()
    assert len(server.requests) == 1


def _drawn_or_error(model, asked):
    try:
        return model.draw(asked)
    except Exception as error:  # the queued requests' futures were cancelled
        return error


def test_connection_failures_are_retried_like_the_text_backends(tmp_path):
    # Nothing listens on the port any more: every attempt fails to connect.
    with LoopbackServer(lambda seen: image_edit_reply(png(DRAWN))) as server:
        url = server.url
    model = load_backend("openai-image:gpt-image-1", base_url=f"{url}/v1", cache_path=tmp_path / "api.sqlite",
                         retry=NO_WAIT)  # fmt: skip
    (drawing,) = model.draw(query())
    model.close()
    assert drawing.api_error and f"connection to {url}/v1/images/edits failed: " in drawing.failure
    assert len(drawing.failure.splitlines()) == 1
