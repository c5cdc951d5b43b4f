"""What a user meets when a gateway answers 200 with an HTML page, sends an image too large to decode, or nothing
listens at the URL: `convswap run` records the units it could not read as api_error and a rerun against a healthy
server asks exactly those again; `convswap audit-model` reports them; a served model is refused at load in one line.
"""

from __future__ import annotations

import socket

import pytest
from api_servers import LoopbackServer, Reply
from conftest import COCO_MINI
from image_servers import PlantedPainter, Rates, huge_png, image_edit_reply
from runner_support import records_in
from test_image_runs import asked_of

from convswap.cli import main
from convswap.core import ConvswapError
from convswap.readout.registry import load_backend
from convswap.runs.logs import model_folder

EXPERIMENT = "interface_swap"
LIMIT = 1
PAGE = b"<html><body>502 Bad Gateway</body></html>"
GATEWAY_PAGE = Reply(200, raw=PAGE, content_type="text/html")
OPENAI_KEY = "sk-test-gateway-0123456789"
GEMINI_KEY = "AIzaSyTest-gateway-0123456789"
# spec, the base URL's path, the arguments the run needs beyond the plan's, the words of a page's malformed reply
IMAGE_MODELS = {
    "openai-image": ("openai-image:gpt-image-1", "/v1", ("--interface", "image"),
                     f"malformed reply: the body is not a JSON object: {PAGE.decode()!r}"),
    "openai-chat-image": ("openai-chat-image:gateway/image-model-001", "/v1", (),
                          f"malformed reply: the body is not a JSON object: {PAGE.decode()!r}"),
    "gemini-image": ("gemini-image:gemini-2.5-flash-image", "", (),
                     "malformed reply: the SDK cannot read the body (JSONDecodeError"),
}  # fmt: skip


@pytest.fixture
def user(monkeypatch, tmp_path, capsys):
    """`user(*argv)`: convswap run as a user types it, with keys set and the response cache under tmp_path;
    (exit status, stdout, stderr)."""
    monkeypatch.setenv("OPENAI_API_KEY", OPENAI_KEY)
    monkeypatch.setenv("GEMINI_API_KEY", GEMINI_KEY)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    for name in ("OPENAI_BASE_URL", "GOOGLE_GEMINI_BASE_URL", "CONVSWAP_SERVED_BASE_URL"):
        monkeypatch.delenv(name, raising=False)

    def run(*argv: str) -> tuple[int, str, str]:
        capsys.readouterr()
        status = main(list(argv))
        captured = capsys.readouterr()
        return status, captured.out, captured.err

    return run


def run_argv(kind: str, url: str, out) -> list[str]:
    spec, path, extra, _ = IMAGE_MODELS[kind]
    return ["run", EXPERIMENT, "--model", spec, "--base-url", url + path, "--coco", str(COCO_MINI), "--limit",
            str(LIMIT), "--out", str(out), "--no-progress", *extra]  # fmt: skip


def folder_of(out, kind: str):
    return model_folder(out, EXPERIMENT, IMAGE_MODELS[kind][0], None)


@pytest.mark.parametrize("kind", sorted(IMAGE_MODELS))
def test_a_gateway_page_is_an_api_error_in_a_run_and_a_rerun_asks_exactly_those_again(user, tmp_path, kind):
    out = tmp_path / "runs"
    with LoopbackServer(lambda seen: GATEWAY_PAGE) as server:
        status, _, err = user(*run_argv(kind, server.url, out))
    records = records_in(folder_of(out, kind))
    assert status == 1 and "Traceback" not in err
    assert f"every one of the {len(records)} requests failed (api_error)" in err
    assert records and {record.parse_status for record in records} == {"api_error"}
    reason = IMAGE_MODELS[kind][3]
    drawn = [record for record in records if record.pixels is not None]
    assert drawn and all(reason in record.pixels.failure for record in drawn)
    sent = len(server.requests)
    assert sent == len(records)  # a malformed reply is not retried at once

    with LoopbackServer(PlantedPainter(asked_of(LIMIT), Rates(p_right=1.0))) as healthy:
        status, _, err = user(*run_argv(kind, healthy.url, out))
    assert status == 0 and len(healthy.requests) == sent  # nothing was cached: every unit asked again, once
    assert {record.parse_status for record in records_in(folder_of(out, kind))} <= {"ok", "protocol_noncompliance"}


def test_an_image_too_large_to_decode_is_an_api_error_and_a_rerun_asks_it_again(user, tmp_path):
    out = tmp_path / "runs"
    with LoopbackServer(lambda seen: image_edit_reply(huge_png(20_000, 20_000))) as server:
        status, _, err = user(*run_argv("openai-image", server.url, out))
    records = records_in(folder_of(out, "openai-image"))
    assert status == 1 and "Traceback" not in err and "DecompressionBomb" not in err
    assert records and {record.parse_status for record in records} == {"api_error"}
    assert all("more than the 64,000,000 an image may have" in record.pixels.failure for record in records)
    with LoopbackServer(PlantedPainter(asked_of(LIMIT), Rates(p_right=1.0))) as healthy:
        assert user(*run_argv("openai-image", healthy.url, out))[0] == 0
    assert len(healthy.requests) == len(records)
    assert all(record.pixels.image_sha256 for record in records_in(folder_of(out, "openai-image")))


@pytest.mark.parametrize("kind", sorted(IMAGE_MODELS))
def test_audit_model_reports_a_gateway_page_as_the_reason_of_each_probe(user, kind):
    spec, path, _, reason = IMAGE_MODELS[kind]
    with LoopbackServer(lambda seen: GATEWAY_PAGE) as server:
        status, out, err = user("audit-model", "--model", spec, "--base-url", server.url + path, "--coco",
                                str(COCO_MINI))  # fmt: skip
    assert status == 1 and "Traceback" not in err
    protocols = [line for line in out.splitlines() if line.strip().startswith(("point_marker ", "label_code "))]
    assert len(protocols) == 2 and all(reason in line for line in protocols)


def closed_port_url() -> str:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{probe.getsockname()[1]}"


@pytest.mark.parametrize("command", ["audit-model", "run"])
def test_a_served_model_behind_a_gateway_page_or_a_closed_port_is_refused_at_load_in_one_line(user, tmp_path,
                                                                                             qwen25_assets, command):  # fmt: skip
    argv = {"audit-model": ["audit-model"], "run": ["run", "synthetic_spatial", "--limit", "1", "--out",
                                                    str(tmp_path / "runs")]}[command]  # fmt: skip
    served = ["--model", "served:qwen-served", "--tokenizer", str(qwen25_assets)]
    with LoopbackServer(lambda seen: GATEWAY_PAGE) as server:
        status, _, err = user(*argv, *served, "--base-url", f"{server.url}/v1")
    (line,) = err.splitlines()[-1:]
    assert status == 2 and "Traceback" not in err
    assert line.endswith(f"served:qwen-served: cannot list the server's models at {server.url}: malformed reply: "
                         f"the body is not a JSON object: {PAGE.decode()!r}")  # fmt: skip
    closed = closed_port_url()
    status, _, err = user(*argv, *served, "--base-url", f"{closed}/v1")
    assert status == 2 and "Traceback" not in err
    assert f"cannot list the server's models at {closed}: connection to {closed}/v1/models failed: " in err
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize(
    ("spec", "variable"),
    [("openai:gpt-4o", "OPENAI_BASE_URL"), ("gemini:gemini-flash-latest", "GOOGLE_GEMINI_BASE_URL"),
     ("served:qwen-served", "CONVSWAP_SERVED_BASE_URL"), ("openai-image:gpt-image-1", "OPENAI_BASE_URL")],
)  # fmt: skip
@pytest.mark.parametrize("url", ["127.0.0.1:8000/v1", "htp://127.0.0.1:8000/v1", "localhost:8000"])
def test_a_base_url_without_http_is_refused_at_load_naming_the_option_or_variable(user, monkeypatch, tmp_path,
                                                                                  qwen25_assets, spec, variable,
                                                                                  url):  # fmt: skip
    options = {"cache_path": tmp_path / "api.sqlite"}
    if spec.startswith("served:"):
        options["tokenizer"] = str(qwen25_assets)
    with pytest.raises(ConvswapError) as raised:
        load_backend(spec, base_url=url, **options)
    assert str(raised.value) == f"{spec}: option base_url must be an http:// or https:// URL, got {url!r}"
    monkeypatch.setenv(variable, url)
    with pytest.raises(ConvswapError) as raised:
        load_backend(spec, **options)
    assert str(raised.value) == f"{spec}: ${variable} must be an http:// or https:// URL, got {url!r}"


def test_the_cli_names_the_base_url_it_refuses_in_one_line(user, qwen25_assets):
    status, _, err = user("audit-model", "--model", "served:qwen-served", "--tokenizer", str(qwen25_assets),
                          "--base-url", "127.0.0.1:8000/v1")  # fmt: skip
    assert status == 2 and err.strip().splitlines() == [
        "convswap audit-model: error: served:qwen-served: option base_url must be an http:// or https:// URL, got "
        "'127.0.0.1:8000/v1'"
    ]
