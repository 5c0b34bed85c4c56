"""`runtime.socket_reads.arrived`: a read takes what already waits behind it, never waits
for more, and leaves the socket as it found it; over a plain socket and over real TLS,
where each `recv` gives one record."""

from __future__ import annotations

import array
import contextlib
import fcntl
import socket
import ssl
import termios
import threading
import time
from collections.abc import Iterator

import httpx
import pytest

from runtime.deadline import guard_client
from runtime.socket_reads import GATHERED_BYTES, arrived
from sandbox.tls import TLSAuthority

RECORD = 16 * 1024  # the most one TLS record carries


def _in_kernel(sock: socket.socket) -> int:
    """Bytes the kernel holds for the socket, not yet read (TLS records still encrypted)."""
    count = array.array("i", [0])
    fcntl.ioctl(sock.fileno(), termios.FIONREAD, count)
    return count[0]


def _wait_in_kernel(sock: socket.socket, size: int) -> None:
    deadline = time.monotonic() + 5
    while _in_kernel(sock) < size:
        assert time.monotonic() < deadline, "the bytes never arrived"
        time.sleep(0.01)


def test_what_already_waits_is_taken_up_to_the_size_asked_and_nothing_is_waited_for() -> None:
    left, right = socket.socketpair()
    with left, right:
        right.settimeout(7.0)
        left.sendall(b"a" * 1000)
        _wait_in_kernel(right, 1000)
        first = right.recv(10)
        assert arrived(right, first, 600) == b"a" * 600  # no more than asked for
        assert arrived(right, right.recv(10), 10_000) == b"a" * 400  # all that waited
        assert right.gettimeout() == 7.0  # its timeout is given back

        started = time.monotonic()
        assert arrived(right, b"xy", 10_000) == b"xy"  # nothing waits: returns at once
        assert time.monotonic() - started < 1.0
        assert arrived(right, b"", 10_000) == b""  # the end of a stream stays the end

        left.sendall(b"tail")
        left.shutdown(socket.SHUT_WR)
        _wait_in_kernel(right, 4)
        assert arrived(right, b"head-", 10_000) == b"head-tail"  # then the end: it stops
        assert right.recv(10) == b""  # and the next read meets the end


@pytest.fixture(scope="module")
def authority() -> TLSAuthority:
    return TLSAuthority()


@pytest.fixture
def tls_pair(authority: TLSAuthority) -> Iterator[tuple[ssl.SSLSocket, ssl.SSLSocket]]:
    listener = socket.create_server(("127.0.0.1", 0))
    accepted: list[ssl.SSLSocket] = []

    def accept() -> None:
        conn, _ = listener.accept()
        accepted.append(authority.server_context().wrap_socket(conn, server_side=True))

    thread = threading.Thread(target=accept)
    thread.start()
    client = authority.client_context().wrap_socket(
        socket.create_connection(listener.getsockname()), server_hostname="localhost"
    )
    thread.join(timeout=10)
    listener.close()
    (server,) = accepted
    try:
        yield server, client
    finally:
        client.close()
        server.close()


def test_over_tls_the_records_that_arrived_come_as_one_piece(
    tls_pair: tuple[ssl.SSLSocket, ssl.SSLSocket],
) -> None:
    server, client = tls_pair
    client.settimeout(7.0)
    body = bytes(range(256)) * 1024  # 256 KiB: sixteen records at least
    server.sendall(body)
    first = client.recv(len(body))
    assert len(first) <= RECORD  # TLS alone gives one record per read
    got = bytearray(first)
    deadline = time.monotonic() + 5
    while len(got) < len(body):
        assert time.monotonic() < deadline, "the body never arrived"
        piece = arrived(client, client.recv(len(body) - len(got)), len(body) - len(got))
        got += piece
    assert bytes(got) == body  # every byte, in order, none twice
    assert client.gettimeout() == 7.0

    # Nothing waits now: a read of what arrived returns at once, and the socket still
    # reads what the server sends next, as a blocking socket with its timeout.
    started = time.monotonic()
    assert arrived(client, b"last", 1 << 20) == b"last"
    assert time.monotonic() - started < 1.0
    server.sendall(b"after")
    assert client.recv(100) == b"after"


def test_over_tls_records_already_there_are_gathered(
    tls_pair: tuple[ssl.SSLSocket, ssl.SSLSocket],
) -> None:
    server, client = tls_pair
    client.settimeout(7.0)
    body = b"z" * (3 * RECORD)  # within what the kernel buffers for a socket
    server.sendall(body)
    _wait_in_kernel(client, len(body))  # all of it, encrypted, before the first read
    gathered = arrived(client, client.recv(len(body)), len(body))
    # More than the one record a TLS read gives, no more than a piece is allowed.
    assert RECORD < len(gathered) <= GATHERED_BYTES < len(body)
    assert gathered == body[: len(gathered)]


BODY = bytes(range(251)) * 8000  # ~2 MB: a hundred records and more, no period of 16 KiB


def _serve_body(conn: socket.socket) -> None:
    """Answer one GET with BODY in chunks of a few records, as a watch stream comes."""
    with conn:
        request = b""
        while b"\r\n\r\n" not in request:
            request += conn.recv(4096)
        conn.sendall(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
        for start in range(0, len(BODY), 50_000):
            piece = BODY[start : start + 50_000]
            conn.sendall(b"%x\r\n%s\r\n" % (len(piece), piece))
        conn.sendall(b"0\r\n\r\n")


def _pipe(source: socket.socket, sink: socket.socket) -> None:
    with contextlib.suppress(OSError):
        while data := source.recv(65536):
            sink.sendall(data)
    with contextlib.suppress(OSError):
        sink.shutdown(socket.SHUT_WR)


@pytest.fixture
def tls_server(authority: TLSAuthority) -> Iterator[str]:
    """An HTTPS server that sends BODY to each GET."""
    listener = socket.create_server(("127.0.0.1", 0))
    context = authority.server_context()

    def serve() -> None:
        with contextlib.suppress(OSError):
            while True:
                conn, _ = listener.accept()
                tls = context.wrap_socket(conn, server_side=True)
                threading.Thread(target=_serve_body, args=(tls,), daemon=True).start()

    threading.Thread(target=serve, daemon=True).start()
    yield f"https://localhost:{listener.getsockname()[1]}"
    listener.close()


@pytest.fixture
def https_proxy(authority: TLSAuthority) -> Iterator[str]:
    """A proxy spoken to over TLS that tunnels CONNECT: TLS inside TLS to the server."""
    listener = socket.create_server(("127.0.0.1", 0))
    context = authority.server_context()

    def tunnel(conn: socket.socket) -> None:
        client = context.wrap_socket(conn, server_side=True)
        request = b""
        while b"\r\n\r\n" not in request:
            request += client.recv(4096)
        port = request.split()[1].decode().rpartition(":")[2]
        upstream = socket.create_connection(("127.0.0.1", int(port)))
        client.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
        threading.Thread(target=_pipe, args=(upstream, client), daemon=True).start()
        _pipe(client, upstream)

    def serve() -> None:
        with contextlib.suppress(OSError):
            while True:
                conn, _ = listener.accept()
                threading.Thread(target=tunnel, args=(conn,), daemon=True).start()

    threading.Thread(target=serve, daemon=True).start()
    yield f"https://localhost:{listener.getsockname()[1]}"
    listener.close()


def _streamed(client: httpx.Client, url: str) -> bytes:
    with client.stream("GET", url) as response:
        return b"".join(response.iter_raw())


def test_a_stream_read_through_the_guarded_client_arrives_whole(
    authority: TLSAuthority, tls_server: str
) -> None:
    client = guard_client(httpx.Client(verify=authority.client_context(), timeout=10))
    with client:
        assert _streamed(client, f"{tls_server}/") == BODY


def test_tls_inside_an_https_proxy_s_tls_arrives_whole(
    authority: TLSAuthority, tls_server: str, https_proxy: str
) -> None:
    """Through an HTTPS proxy the socket carries the proxy's records, and the server's
    inside them: reads there are never taken from the socket behind the TLS layers."""
    proxy = httpx.Proxy(https_proxy, ssl_context=authority.client_context())
    client = guard_client(
        httpx.Client(proxy=proxy, verify=authority.client_context(), timeout=10, trust_env=False)
    )
    with client:
        assert _streamed(client, f"{tls_server}/") == BODY
