"""Reading a request body off a stdlib HTTP handler: Content-Length or chunked.

Both fake servers need it; clients (httpx, urllib3) send either framing.
"""

from __future__ import annotations

from http.server import BaseHTTPRequestHandler


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
