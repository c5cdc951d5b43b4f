"""A TCP proxy on 127.0.0.1 in front of a server, to make that server go away, slow down or restart under a client.

`TcpProxy(upstream_port)` forwards each connection it accepts to the server,
byte for byte, in threads.  `close()` stops listening and resets every open
connection (a server that stopped: the next connection is refused); `open()`
listens again on the same port; `delay` holds each chunk of the server's
answer that many seconds (a server too slow for the client's timeout);
`cut_next_request()` resets the next connection that sends a request before the
request reaches the server (a server that restarted under a request on the wire).
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
import time
from typing import Self


class TcpProxy:
    def __init__(self, upstream_port: int) -> None:
        self.upstream = ("127.0.0.1", upstream_port)
        self.delay = 0.0
        self._cut_next = threading.Event()
        self._lock = threading.Lock()
        self._connections: set[socket.socket] = set()
        self._listener: socket.socket | None = None
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        self.open()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def open(self) -> None:
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen()
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def close(self) -> None:
        if self._listener is not None:
            with contextlib.suppress(OSError):
                self._listener.shutdown(socket.SHUT_RDWR)  # wakes the thread blocked in accept()
            self._listener.close()
            self._listener = None
        with self._lock:
            connections, self._connections = self._connections, set()
        for connection in connections:
            _reset(connection)

    def cut_next_request(self) -> None:
        self._cut_next.set()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            try:
                server = socket.create_connection(self.upstream)
            except OSError:
                _reset(client)
                continue
            with self._lock:
                self._connections |= {client, server}
            threading.Thread(target=self._pump, args=(client, server, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(server, client, False), daemon=True).start()

    def _pump(self, source: socket.socket, target: socket.socket, requests: bool) -> None:
        try:
            while chunk := source.recv(65536):
                if requests and self._cut_next.is_set():
                    self._cut_next.clear()
                    _reset(source)
                    _reset(target)
                    return
                if not requests and self.delay:
                    time.sleep(self.delay)
                target.sendall(chunk)
        except OSError:
            pass
        finally:
            with contextlib.suppress(OSError):
                target.shutdown(socket.SHUT_WR)


def _reset(connection: socket.socket) -> None:
    """Close with a reset (RST), as the connections of a process that died are."""
    with contextlib.suppress(OSError):
        connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    connection.close()
