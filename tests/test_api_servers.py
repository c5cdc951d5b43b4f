"""The loopback API server stays quiet when a client gives up, and still reports its own faults."""

from __future__ import annotations

import http.client

from api_servers import LoopbackServer, Reply

LATENCY_S = 0.1


def connect(server: LoopbackServer, timeout: float) -> http.client.HTTPConnection:
    host, port = server.url.removeprefix("http://").split(":")
    return http.client.HTTPConnection(host, int(port), timeout=timeout)


def ask_and_hang_up(server: LoopbackServer) -> None:
    """Send one request and close the connection long before the answer comes, as a client timeout does."""
    connection = connect(server, timeout=LATENCY_S / 6)
    try:
        connection.request("POST", "/v1/chat", body=b"{}", headers={"Content-Type": "application/json"})
        connection.getresponse()
    except TimeoutError:
        pass
    connection.close()
    server.wait_handled()  # the server has written its answer into the closed connection


def test_a_client_that_hangs_up_leaves_no_traceback(capfd):
    with LoopbackServer(lambda seen: Reply(200, {"text": "x" * 100_000}), latency=LATENCY_S) as server:
        ask_and_hang_up(server)
    assert len(server.requests) == 1
    assert "Traceback" not in capfd.readouterr().err


def test_a_fault_of_the_responder_is_still_reported(capfd):
    def broken(seen):
        raise ValueError("responder bug")

    with LoopbackServer(broken) as server:
        connection = connect(server, timeout=5)
        connection.request("POST", "/v1/chat", body=b"{}", headers={"Content-Type": "application/json"})
        try:
            connection.getresponse()
        except http.client.RemoteDisconnected:
            pass
        connection.close()
        server.wait_handled()
    assert "ValueError: responder bug" in capfd.readouterr().err
