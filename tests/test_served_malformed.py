"""A served model's server that answers 200 with what its API does not document: refused in one line at load, and
once loaded an api_error for generation and a refused first-token readout, neither cached, which a healthy server
then answers."""

from __future__ import annotations

import sqlite3

import pytest
from api_servers import LoopbackServer, Reply
from served_servers import served_server
from test_served_backend import (  # noqa: F401 (fixtures, shared)
    NAME,
    connect,
    loaded_processors,
    planted,
    processor,
    processor_loaded_once,
    read_probes,
)

from convswap.calibration.surfaces import probe_query
from convswap.core import ConvswapError
from convswap.readout.logprobs import LOGPROB_TOKEN_IDS, TOKEN_IDS_LOGPROB, LogprobsRefused

PAGE = b"<html><body>502 Bad Gateway</body></html>"
GATEWAY_PAGE = Reply(200, raw=PAGE, content_type="text/html")


def behind_a_gateway(respond, pages):
    """The server's own answers, except on the paths `pages` names: a gateway's HTML page with status 200."""
    return lambda seen: GATEWAY_PAGE if seen.path in pages else respond(seen)


def cached_rows(tmp_path) -> int:
    with sqlite3.connect(tmp_path / "api.sqlite") as db:
        return db.execute("SELECT COUNT(*) FROM responses").fetchone()[0]


@pytest.mark.parametrize(
    ("sglang", "pages", "reason"),
    [
        (None, {"/v1/models"}, f"cannot list the server's models at {{url}}: malformed reply: the body is not a "
                                f"JSON object: {PAGE.decode()!r}"),
        (None, {"/tokenize"}, "unreadable /tokenize reply from {url}: JSONDecodeError: Expecting value"),
        # SGLang's /tokenize takes no chat messages: the prompt tokens its chat completion counts are compared.
        ("model_info", {"/v1/chat/completions"}, f"the probes at load failed on the server at {{url}}: malformed reply: the "
                                         f"body is not a JSON object: {PAGE.decode()!r}"),
    ],
)  # fmt: skip
def test_a_page_in_place_of_a_probes_reply_refuses_the_model_in_one_line(planted, qwen25_assets, tmp_path,  # noqa: F811
                                                                         sglang, pages, reason):  # fmt: skip
    served, _ = planted
    with LoopbackServer(behind_a_gateway(served_server(served, sglang=sglang), pages)) as server:
        with pytest.raises(ConvswapError) as raised:
            connect(server, qwen25_assets, tmp_path)
    assert str(raised.value).startswith(f"served:{NAME}: {reason.format(url=server.url)}")
    assert len(str(raised.value).splitlines()) == 1


@pytest.mark.parametrize(
    ("sglang", "source", "readout_path"),
    [(None, LOGPROB_TOKEN_IDS, "/v1/chat/completions"), ("model_info", TOKEN_IDS_LOGPROB, "/generate")],
)
def test_a_page_once_loaded_refuses_the_readout_and_is_an_api_error_never_cached(planted, qwen25_assets,  # noqa: F811
                                                                                 tmp_path, sglang, source,
                                                                                 readout_path):  # fmt: skip
    served, _ = planted
    healthy = served_server(served, sglang=sglang)
    with LoopbackServer(healthy) as server:
        backend = connect(server, qwen25_assets, tmp_path)
        try:
            assert backend.info().environment["first_token_readout"] == source
            server.respond = behind_a_gateway(healthy, {readout_path, "/v1/chat/completions"})
            probes = probe_query(tuple("123456789"), "integer")
            with pytest.raises(LogprobsRefused, match=f"served:{NAME} gives no first-token logprobs: malformed reply"):
                backend.first_token_logprobs(probes, (16, 17, 18))
            generations = backend.generate(probes)
            assert all(g.finish_reason == "error" and "malformed reply: the body is not a JSON object" in g.error
                       for g in generations)  # fmt: skip
            assert cached_rows(tmp_path) == 0
            server.respond = healthy
            surface, readouts = read_probes(backend)
            assert all(readout.source == source and readout.exact for readout in readouts)
            assert all(g.error is None for g in backend.generate(probes))
        finally:
            backend.close()
