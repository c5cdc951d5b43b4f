"""Serving a built site on loopback, on a port the system picks."""

from __future__ import annotations

import functools
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

HOST = "127.0.0.1"


class QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the base class's name
        """Requests are not logged: the address printed at start is what a user needs."""


def site_server(site: Path) -> ThreadingHTTPServer:
    """A server for `site` bound to 127.0.0.1 on a free port (read it from `server_address`)."""
    handler = functools.partial(QuietHandler, directory=str(site))
    return ThreadingHTTPServer((HOST, 0), handler)
