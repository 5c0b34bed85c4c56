"""`/healthz`, `/readyz` and `/metrics` on `HEALTH_ADDR`, served from one daemon thread.

- `/healthz` (liveness) fails only for what a restart cures: a worker thread that died, a
  loop that made no progress for longer than it may (a watch stuck past its timeout), a
  lost Lease not acted on. An unreachable Moonin API or a forbidden resource degrades a
  component but keeps it alive: a restart would not help, and the queue is on disk anyway.
- `/readyz` (readiness) fails until start-up is done, once shutdown began, and while a
  component is refused a permission it needs (a 403 from the API server: the problem names
  the verb, API group, resource and namespace or cluster scope, so a wrong RBAC rule shows
  in `kubectl get pods` and in a GitOps tool's health, not only in the logs); a standby
  discovery replica is ready.
- `/metrics`: the Prometheus text format (`agent.metrics`).

Both checks answer JSON `{"ok": bool, "problems": [...]}` with 200 or 503; `/readyz` adds
`"details"`: what an operator should know that fails no check (objects skipped).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import msgspec
import structlog

from agent.metrics import CONTENT_TYPE

log = structlog.get_logger("agent.health")

Check = Callable[[], list[str]]  # the problems found; none means healthy


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
    ) -> None:
        routes: dict[str, Callable[[], tuple[int, str, bytes]]] = {
            "/healthz": lambda: _check(live),
            "/readyz": lambda: _check(ready, details),
            "/metrics": lambda: (200, CONTENT_TYPE, metrics()),
        }
        # Binding here, not in start(): a taken port stops start-up with a clear error.
        self._server = ThreadingHTTPServer((host, port), _handler(routes))
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="health-server", daemon=True
        )

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

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


def _handler(
    routes: dict[str, Callable[[], tuple[int, str, bytes]]],
) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            route = routes.get(self.path.split("?", 1)[0])
            if route is None:
                status, content_type, body = 404, "text/plain", b"not found\n"
            else:
                status, content_type, body = route()
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            """Probes every few seconds would drown the agent's own logs."""

    return Handler
