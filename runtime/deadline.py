"""A total time limit for one call, whatever the HTTP library under it does with timeouts.

httpx times each socket operation on its own: a server (or a proxy) that sends one
byte every few seconds restarts the read timeout with every byte and keeps a call alive for
ever. `within(seconds)` gives the calls the current thread makes inside it one deadline for
everything: connecting, sending, waiting for the answer and reading all of it.

How httpx (every Kubernetes and Moonin call of the agent) is held to it: `guard_client(client)`
wraps the network backend of every connection pool of the client, so each connect, read,
write and TLS handshake waits at most until the deadline (an operation that would start
after it fails at once as a timeout), and its socket is under `Deadline.guard`: a watchdog
thread shuts the socket down when the deadline passes (or on `cancel()`), so a reader
blocked in `recv` wakes up with an error. The same wrapper has each read take what has
already arrived behind it (`runtime.socket_reads`).

Callers ask `Deadline.expired` when a call failed, and `Deadline.interrupted` when it seemed
to succeed (a shut-down socket can look like the end of a body), and report "deadline
exceeded" (or, after `cancel()`, `cancelled`) rather than the library's own error. Name
resolution is not bounded: `getaddrinfo` cannot be interrupted, and the resolver's own
timeouts apply to it.

Deadlines nest: an inner one never outlives the outer, and `cancel()` on an outer one ends
every call inside it at once, from any thread (`within(math.inf)` makes one with no time
limit): how a loop gives its calls one budget, and how a stopping loop gives up a call in
flight.

How it fails: `guard_client` raises RuntimeError when httpx's transports are not laid out as
this module expects (an upgrade changed them): better a clear failure at start-up than calls
without a deadline.
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
import math
import socket
import threading
import time
from collections.abc import Iterable, Iterator
from contextvars import ContextVar
from typing import Any

import httpcore
import httpx

from runtime import socket_reads

_current: ContextVar[Deadline | None] = ContextVar("moonin_deadline", default=None)


class Deadline:
    """The instant a call must be over by (`time.monotonic()` clock), and the sockets that
    calls under it use, shut down if it passes (or is cancelled) while they run."""

    def __init__(self, seconds: float, *, outer: Deadline | None = None) -> None:
        self.seconds = seconds
        self.at = time.monotonic() + seconds
        self._outer = outer
        if outer is not None:
            self.at = min(self.at, outer.at)
        self._lock = threading.Lock()
        self._sockets: set[socket.socket] = set()
        self._fired = False
        self._cancelled = False
        self._finished = False

    def remaining(self) -> float:
        return self.at - time.monotonic()

    @property
    def expired(self) -> bool:
        """Whether the deadline has passed, or this call was ended (`interrupted`)."""
        return self.interrupted or self.remaining() <= 0

    @property
    def interrupted(self) -> bool:
        """Whether the sockets of this call were shut down under it (its deadline or one it
        is inside passed while it ran, or was cancelled): what it read may be cut short."""
        return self._fired or (self._outer is not None and self._outer.interrupted)

    @property
    def cancelled(self) -> bool:
        """Whether `cancel()` ended this call (on it, or on one it is inside)."""
        return self._cancelled or (self._outer is not None and self._outer.cancelled)

    def missed(self) -> str:
        """What a call that ran past this deadline says about it."""
        return f"no complete answer within {self.seconds:g} s"

    def cap(self, timeout: float | None) -> float:
        """`timeout` shortened to what is left; TimeoutError when nothing is."""
        if self.expired:
            raise TimeoutError(f"deadline of {self.seconds:g} s exceeded")
        left = self.remaining()
        return left if timeout is None else min(timeout, left)

    def guard(self, sock: socket.socket) -> None:
        """Have `sock` shut down if this call, or one it is inside, is still running at its
        deadline or is cancelled."""
        scope: Deadline | None = self
        while scope is not None:
            scope._hold(sock)
            scope = scope._outer

    def cancel(self) -> None:
        """End the calls running under this deadline now (from any thread)."""
        with self._lock:
            self._cancelled = not self._finished
        self._fire()

    def release(self) -> None:
        """Guard no more sockets for this call: its connection goes back to a pool, where
        another call may take it. `within` releases on the way out; a caller that hands a
        connection back earlier releases first."""
        with self._lock:
            self._finished = True
            sockets, self._sockets = self._sockets, set()
        scope = self._outer
        while scope is not None:
            with scope._lock:
                scope._sockets -= sockets
            scope = scope._outer

    def _hold(self, sock: socket.socket) -> None:
        with self._lock:
            if self._finished or sock in self._sockets:
                return
            if not self._fired:
                self._sockets.add(sock)
                if not math.isinf(self.at):
                    _watchdog.arm(self)
                return
        shut_down(sock)

    def _fire(self) -> None:
        with self._lock:
            if self._finished or self._fired:
                return
            self._fired = True
            sockets, self._sockets = self._sockets, set()
        for sock in sockets:
            shut_down(sock)


def current() -> Deadline | None:
    """The deadline of the call the current thread is making, if any."""
    return _current.get()


@contextlib.contextmanager
def within(seconds: float) -> Iterator[Deadline]:
    """Run the block's network calls under one deadline `seconds` from now (`math.inf`: no
    time limit, only `cancel()`)."""
    if seconds <= 0:
        raise ValueError("a deadline must be positive")
    deadline = Deadline(seconds, outer=_current.get())
    token = _current.set(deadline)
    try:
        yield deadline
    finally:
        _current.reset(token)
        deadline.release()


def shut_down(sock: socket.socket) -> None:
    """Wake whoever is blocked reading `sock`, from another thread: its reads then end as
    at a closed connection. Only the reader's thread may close it: a close here frees the
    descriptor while a read may be about to use it, and a new connection can get the same
    number. The base class's shutdown works on a TLS socket's descriptor too, without
    touching its SSL state under the reading thread."""
    with contextlib.suppress(OSError):  # already closed by the other side
        socket.socket.shutdown(sock, socket.SHUT_RDWR)


class _Watchdog:
    """One thread for the process: fires the deadlines of calls that are still running."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._heap: list[tuple[float, int, Deadline]] = []
        self._armed: set[int] = set()
        self._order = itertools.count()
        self._thread: threading.Thread | None = None

    def arm(self, deadline: Deadline) -> None:
        with self._cond:
            if id(deadline) in self._armed:
                return
            self._armed.add(id(deadline))
            earliest = self._heap[0][0] if self._heap else None
            heapq.heappush(self._heap, (deadline.at, next(self._order), deadline))
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="deadline-watchdog", daemon=True
                )
                self._thread.start()
            elif earliest is None or deadline.at < earliest:
                self._cond.notify()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._heap or self._heap[0][0] > time.monotonic():
                    wait = self._heap[0][0] - time.monotonic() if self._heap else None
                    self._cond.wait(wait)
                _, _, deadline = heapq.heappop(self._heap)
                self._armed.discard(id(deadline))
            deadline._fire()  # a finished call's deadline does nothing


_watchdog = _Watchdog()


# -- httpx ------------------------------------------------------------------------------------


def guard_client(client: httpx.Client) -> httpx.Client:
    """Hold every request `client` sends (direct or through a proxy) to `within()`."""
    transports: Iterable[Any] = [client._transport, *client._mounts.values()]
    for transport in transports:
        if transport is None or not isinstance(transport, httpx.HTTPTransport):
            continue  # a test's MockTransport: nothing on the network to bound
        pool = getattr(transport, "_pool", None)
        backend = getattr(pool, "_network_backend", None)
        if backend is None:
            raise RuntimeError(
                "httpx's HTTPTransport has no connection pool with a network backend: "
                "request deadlines cannot be enforced with this httpx version"
            )
        if not isinstance(backend, _GuardedBackend):
            pool._network_backend = _GuardedBackend(backend)  # type: ignore[union-attr]
    return client


def _capped(timeout: float | None, error: type[Exception]) -> float | None:
    deadline = _current.get()
    return timeout if deadline is None else _cap(deadline, timeout, error)


def _cap(deadline: Deadline, timeout: float | None, error: type[Exception]) -> float:
    """`Deadline.cap`, failing as the httpcore timeout `error` that httpx translates."""
    try:
        return deadline.cap(timeout)
    except TimeoutError as exc:
        raise error(str(exc)) from None


class _GuardedStream(httpcore.NetworkStream):
    def __init__(self, inner: httpcore.NetworkStream, *, layers: int = 0) -> None:
        """`layers`: how many TLS layers `inner` has (a TLS connection through an HTTPS
        proxy has two)."""
        self._inner = inner
        self._layers = layers
        self._sock: socket.socket | None = inner.get_extra_info("socket")
        # Bytes already arrived are taken from the socket only where reading the socket
        # is reading the stream: a plain one, or one TLS layer (the socket is then an
        # SSLSocket). The inner layer of TLS in TLS decrypts through a buffer of its own,
        # and the socket under it carries the outer layer's records.
        self._gathered_from = self._sock if layers <= 1 else None

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        data = self._inner.read(max_bytes, self._guarded(timeout, httpcore.ReadTimeout))
        if self._gathered_from is None:
            return data
        return socket_reads.arrived(self._gathered_from, data, max_bytes)

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._inner.write(buffer, self._guarded(timeout, httpcore.WriteTimeout))

    def _guarded(self, timeout: float | None, error: type[Exception]) -> float | None:
        # Capped, so the operation times out at the deadline by itself; guarded, so a
        # cancel from another thread wakes it too.
        deadline = _current.get()
        if deadline is None:
            return timeout
        if self._sock is not None:
            deadline.guard(self._sock)
        return _cap(deadline, timeout, error)

    def close(self) -> None:
        self._inner.close()

    def start_tls(
        self,
        ssl_context: Any,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore.NetworkStream:
        capped = _capped(timeout, httpcore.ConnectTimeout)
        return _GuardedStream(
            self._inner.start_tls(ssl_context, server_hostname, capped), layers=self._layers + 1
        )

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)


class _GuardedBackend(httpcore.NetworkBackend):
    def __init__(self, inner: httpcore.NetworkBackend) -> None:
        self._inner = inner

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.NetworkStream:
        capped = _capped(timeout, httpcore.ConnectTimeout)
        return _GuardedStream(
            self._inner.connect_tcp(host, port, capped, local_address, socket_options)
        )

    def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.NetworkStream:
        capped = _capped(timeout, httpcore.ConnectTimeout)
        return _GuardedStream(self._inner.connect_unix_socket(path, capped, socket_options))

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(seconds)
