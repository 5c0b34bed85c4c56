"""A node's kubelet as a real API server reaches it for `pods/log`, and the Node that
points there.

The API server reads a container's log from `https://<node address>:<kubeletEndpoint
port>/containerLogs/{namespace}/{pod}/{container}`. With no kubelet CA configured (as the
real tier's control plane runs) it verifies no kubelet certificate, so any self-signed one
will do. Until `answer()` the kubelet accepts connections and says nothing, as a kubelet
behind a dead node's address would: the API server then waits for its TLS handshake and
answers 500 after its own timeout (10 s).
"""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler
from types import TracebackType
from typing import Any
from urllib.parse import urlsplit

from sandbox.serving import HOST, LoopbackServer
from sandbox.tls import TLSAuthority

SILENCE_LIMIT_SECONDS = 60.0  # a held connection is let go after this, answered or not


class _Logs(BaseHTTPRequestHandler):
    server: _KubeletServer

    def do_GET(self) -> None:
        kubelet = self.server.kubelet
        text = kubelet.logs.get(urlsplit(self.path).path)
        body = (text or "").encode()
        self.send_response(200 if text is not None else 404)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
        kubelet.count("answered")

    def log_message(self, format: str, *args: Any) -> None:
        return None


class _KubeletServer(LoopbackServer):
    def __init__(self, kubelet: Kubelet) -> None:
        self.kubelet = kubelet
        self._tls = TLSAuthority().server_context()
        super().__init__(0, _Logs)

    def finish_request(self, request: Any, client_address: Any) -> None:
        self.kubelet.count("accepted")
        if not self.kubelet.answering.wait(SILENCE_LIMIT_SECONDS):
            return
        with self._tls.wrap_socket(request, server_side=True) as tls:
            self.RequestHandlerClass(tls, client_address, self)


class Kubelet:
    """`logs`: URL path (`/containerLogs/ns/pod/container`) -> the log's text."""

    def __init__(self) -> None:
        self.logs: dict[str, str] = {}
        self.answering = threading.Event()
        self._counts = {"accepted": 0, "answered": 0}
        self._lock = threading.Lock()
        self._server = _KubeletServer(self)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def count(self, what: str) -> None:
        with self._lock:
            self._counts[what] += 1

    def counts(self) -> dict[str, int]:
        """Connections accepted and log reads answered so far."""
        with self._lock:
            return dict(self._counts)

    def answer(self) -> None:
        """From now on (held connections included) the kubelet answers."""
        self.answering.set()

    def __enter__(self) -> Kubelet:
        self._thread.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.answering.set()  # held connections end
        self._server.shutdown()
        self._server.cut_connections()
        self._server.server_close()


def node_at(name: str, port: int, **labels: str) -> dict[str, Any]:
    """A Node whose kubelet listens on 127.0.0.1:`port` (its status: write it through
    `nodes/status`, as a kubelet registers)."""
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **labels}},
        "status": {
            "addresses": [{"type": "InternalIP", "address": HOST}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": port}},
        },
    }
