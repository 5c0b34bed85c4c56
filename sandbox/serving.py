"""What both fake servers share: a loopback HTTP server that can cut its connections, and
reading a request body (Content-Length or chunked: httpx and urllib3 send either).
"""

from __future__ import annotations

import contextlib
import socket
import socketserver
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

HOST = "127.0.0.1"


def free_port() -> int:
    """A port free on 127.0.0.1 now, for a process to bind later (one that takes it in
    between makes that process fail to start, which its caller reports)."""
    with socket.socket() as probe:
        probe.bind((HOST, 0))
        return int(probe.getsockname()[1])


class LoopbackServer(ThreadingHTTPServer):
    """A threading HTTP server on 127.0.0.1 that tracks its connections.

    `cut_connections()` shuts every open one (keep-alive and streams alike), so "the server
    is down" means down for clients holding a pooled connection too. Clients that vanish
    mid-request are routine for a fake and are not reported.
    """

    daemon_threads = True
    allow_reuse_address = True  # a restart rebinds the same port while old sockets linger
    block_on_close = False
    request_queue_size = 128

    def __init__(self, port: int, handler: type[BaseHTTPRequestHandler]) -> None:
        self._connections: set[socket.socket] = set()
        self._connections_lock = threading.Lock()
        super().__init__((HOST, port), handler)

    def server_bind(self) -> None:
        # HTTPServer.server_bind resolves the host name, which can stall on a bad resolver.
        socketserver.TCPServer.server_bind(self)
        self.server_name, self.server_port = HOST, self.server_address[1]

    def process_request(self, request: Any, client_address: Any) -> None:
        with self._connections_lock:
            self._connections.add(request)
        super().process_request(request, client_address)

    def shutdown_request(self, request: Any) -> None:
        with self._connections_lock:
            self._connections.discard(request)
        super().shutdown_request(request)

    def cut_connections(self) -> None:
        with self._connections_lock:
            connections = list(self._connections)
        for connection in connections:
            with contextlib.suppress(OSError):
                connection.shutdown(socket.SHUT_RDWR)

    def handle_error(self, request: Any, client_address: Any) -> None:
        if isinstance(sys.exc_info()[1], OSError):
            return
        super().handle_error(request, client_address)


class InvalidLength(ValueError):
    """The Content-Length header is not a non-negative integer."""


def read_request_body(handler: BaseHTTPRequestHandler) -> bytes:
    """The whole body; ConnectionResetError when the client goes away part way."""
    if "chunked" in handler.headers.get("Transfer-Encoding", "").lower():
        return _read_chunked(handler)
    try:
        length = int(handler.headers.get("Content-Length") or 0)
    except ValueError:
        raise InvalidLength("invalid Content-Length") from None
    if length < 0:
        raise InvalidLength("invalid Content-Length")
    return _read_exactly(handler, length)


def _read_exactly(handler: BaseHTTPRequestHandler, length: int) -> bytes:
    data = handler.rfile.read(length) if length else b""
    if len(data) < length:
        raise ConnectionResetError("the client went away mid-body")
    return data


def _read_chunked(handler: BaseHTTPRequestHandler) -> bytes:
    chunks = []
    while True:
        size_line = handler.rfile.readline(1024)
        if not size_line:
            raise ConnectionResetError("the client went away mid-body")
        size = int(size_line.split(b";", 1)[0].strip() or b"0", 16)
        if size == 0:
            break
        chunks.append(_read_exactly(handler, size))
        _read_exactly(handler, 2)  # the CRLF after each chunk
    while handler.rfile.readline(1024) not in (b"\r\n", b"\n", b""):
        pass  # trailers: ignored
    return b"".join(chunks)
