"""`/healthz`, `/readyz` and `/metrics` on `HEALTH_ADDR`, served from one daemon thread.

- `/healthz` (liveness) fails only for what a restart cures: a worker thread that died, a
  loop that made no progress for longer than it may (a watch stuck past its timeout), a
  lost Lease not acted on. An unreachable Moonin API or a forbidden resource degrades a
  component but keeps it alive: a restart would not help, and the queue is on disk anyway.
- `/readyz` (readiness) fails until start-up is done, once shutdown began, and while a
  component is refused a permission it needs (a 403 from the API server: the problem names
  the verb, API group, resource and namespace or cluster scope, so a wrong RBAC rule shows
  in `kubectl get pods` and in a GitOps tool's health, not only in the logs), holds its
  place until something outside it recovers (a full disk), or has not finished a list
  within the warm-up budget; a standby discovery replica is ready.
- `/metrics`: the Prometheus text format (`agent.metrics`).

Both checks answer JSON `{"ok": bool, "problems": [...]}` with 200 or 503; `/readyz` adds
`"details"`: what an operator should know that fails no check (objects skipped).

Connections: one request each, a thread each, and neither may be held. A connection has
`request_seconds` in all, to send its request and read the answer: an idle client, or one
that trickles its headers a byte at a time, is cut off then. At most `max_connections` are
served at once; a new one displaces the oldest (a probe's exchange takes milliseconds, so
the oldest is the one holding on), so a crowd of clients costs neither threads nor memory
and cannot keep the kubelet's probes out. A client that leaves before its answer is written
is not an error: it is counted (`clients_gone`), and nothing is printed.
"""

from __future__ import annotations

import contextlib
import io
import socket
import sys
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import msgspec
import structlog

from agent.metrics import CONTENT_TYPE

log = structlog.get_logger("agent.health")

Check = Callable[[], list[str]]  # the problems found; none means healthy

# A probe's whole exchange takes milliseconds; the kubelet gives up after a second.
REQUEST_SECONDS = 5.0
# The kubelet's two probes and a scraper or two, with room to spare.
MAX_CONNECTIONS = 16


class HealthServer:
    def __init__(
        self,
        host: str,
        port: int,
        *,
        live: Check,
        ready: Check,
        metrics: Callable[[], bytes],
        details: Check = list,
        request_seconds: float = REQUEST_SECONDS,
        max_connections: int = MAX_CONNECTIONS,
    ) -> None:
        routes: dict[str, Callable[[], tuple[int, str, bytes]]] = {
            "/healthz": lambda: _check(live),
            "/readyz": lambda: _check(ready, details),
            "/metrics": lambda: (200, CONTENT_TYPE, metrics()),
        }
        # Binding here, not in start(): a taken port stops start-up with a clear error.
        self._server = _Server((host, port), _handler(routes, request_seconds), max_connections)
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="health-server", daemon=True
        )

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def clients_gone(self) -> int:
        """Clients that left before their answer was written."""
        return self._server.clients_gone

    def start(self) -> None:
        self._thread.start()
        log.info("health_server_started", port=self.port)

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def _check(check: Check, details: Check | None = None) -> tuple[int, str, bytes]:
    try:
        problems = check()
    except Exception as exc:  # a check that cannot tell is a failing check
        problems = [f"health check failed: {exc}"]
    answer: dict[str, object] = {"ok": not problems, "problems": problems}
    if details is not None:
        answer["details"] = details()
    body = msgspec.json.encode(answer)
    return (503 if problems else 200), "application/json", body


class _Server(ThreadingHTTPServer):
    """A thread per connection, `max_connections` served at once: a new one displaces the
    oldest, so a crowd of idle clients cannot keep a probe out."""

    daemon_threads = True

    def __init__(
        self,
        address: tuple[str, int],
        handler: type[BaseHTTPRequestHandler],
        max_connections: int,
    ) -> None:
        super().__init__(address, handler)
        self._max = max_connections
        self._lock = threading.Lock()
        self._served: dict[socket.socket, None] = {}  # oldest first
        self._running = 0  # the served ones' and the displaced ones' still winding down
        self.clients_gone = 0

    def process_request(self, request: Any, client_address: Any) -> None:
        # In the accepting thread, so it runs one connection at a time.
        with self._lock:
            if self._running >= 2 * self._max:
                # Displaced threads not gone yet: wait for them rather than add more.
                self.shutdown_request(request)
                return
            if len(self._served) >= self._max:
                oldest = next(iter(self._served))
                del self._served[oldest]
                with contextlib.suppress(OSError):  # closed meanwhile
                    oldest.shutdown(socket.SHUT_RDWR)  # its thread's next read or write fails
            self._served[request] = None
            self._running += 1
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._ended(request)  # no thread started
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._ended(request)

    def _ended(self, request: socket.socket) -> None:
        with self._lock:
            self._served.pop(request, None)
            self._running -= 1

    def handle_error(self, request: Any, client_address: Any) -> None:
        # The default prints a traceback to stderr for what is only a client leaving.
        error = sys.exc_info()[1]
        if isinstance(error, ConnectionError | TimeoutError):
            self.clients_gone += 1
            return
        log.warning("health_request_failed", error=f"{type(error).__name__}: {error}")


class _DeadlineReader(io.RawIOBase):
    """A connection's reading side that gives up once the connection's time is over:
    every read waits only for what is left, so trickled bytes do not extend it."""

    def __init__(self, connection: socket.socket, deadline: float) -> None:
        self._connection = connection
        self._deadline = deadline

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        self._connection.settimeout(_left(self._deadline))
        return self._connection.recv_into(buffer)


def _left(deadline: float) -> float:
    # Never 0: a zero timeout would make the socket non-blocking instead of expired.
    return max(deadline - time.monotonic(), 0.001)


def _handler(
    routes: dict[str, Callable[[], tuple[int, str, bytes]]], request_seconds: float
) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def setup(self) -> None:
            super().setup()
            self._deadline = time.monotonic() + request_seconds
            self.rfile.close()  # the plain reader setup() made: reads would wait forever
            self.rfile = io.BufferedReader(_DeadlineReader(self.connection, self._deadline))

        def do_GET(self) -> None:
            route = routes.get(self.path.split("?", 1)[0])
            if route is None:
                status, content_type, body = 404, "text/plain", b"not found\n"
            else:
                status, content_type, body = route()
            # sendall under a timeout bounds the whole answer: a client that stops reading
            # cannot hold the thread either.
            self.connection.settimeout(_left(self._deadline))
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            """Probes every few seconds would drown the agent's own logs."""

    return Handler
