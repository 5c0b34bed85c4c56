"""A validating admission webhook on 127.0.0.1 for the real API server, to run a test's own
step inside the admission of a request: after the server has read the object the request
changes and before it writes it back. A write made there by someone else is exactly one
made between a client's read and its write, so a request carrying the resourceVersion it
read then fails with the server's own 409.

`AdmissionWebhook(on_request)` serves HTTPS with a throw-away CA; `configuration(...)` is
the ValidatingWebhookConfiguration that sends it the UPDATEs (patches included) of one
resource in one namespace. It allows every request; `on_request` sees each one first.
"""

from __future__ import annotations

import base64
import json
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler
from typing import Any

from sandbox.serving import LoopbackServer, read_request_body
from sandbox.tls import TLSAuthority

Request = dict[str, Any]


class AdmissionWebhook:
    def __init__(self, on_request: Callable[[Request], None]) -> None:
        self.on_request = on_request
        self.requests: list[Request] = []
        self._tls = TLSAuthority()
        self._server = LoopbackServer(0, _Handler)
        self._server.webhook = self  # type: ignore[attr-defined]  # read by the handler
        self._server.socket = self._tls.server_context().wrap_socket(
            self._server.socket, server_side=True
        )
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self._server.server_port}/"

    def configuration(self, name: str, *, group: str, resource: str, namespace: str) -> Request:
        """A ValidatingWebhookConfiguration sending this webhook every UPDATE of `resource`
        (not its subresources) in `namespace`; a webhook that does not answer is ignored."""
        return {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingWebhookConfiguration",
            "metadata": {"name": name},
            "webhooks": [
                {
                    "name": f"{name}.webhooks.test",
                    "clientConfig": {
                        "url": self.url,
                        "caBundle": base64.b64encode(self._tls.ca_pem).decode("ascii"),
                    },
                    "rules": [
                        {
                            "apiGroups": [group],
                            "apiVersions": ["*"],
                            "operations": ["UPDATE"],
                            "resources": [resource],
                            "scope": "Namespaced",
                        }
                    ],
                    "namespaceSelector": {
                        "matchLabels": {"kubernetes.io/metadata.name": namespace}
                    },
                    "sideEffects": "None",
                    "admissionReviewVersions": ["v1"],
                    "failurePolicy": "Ignore",
                    "timeoutSeconds": 10,
                }
            ],
        }

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()


class _Handler(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        webhook: AdmissionWebhook = self.server.webhook  # type: ignore[attr-defined]
        request = json.loads(read_request_body(self))["request"]
        webhook.on_request(request)
        webhook.requests.append(request)
        review = {
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "response": {"uid": request["uid"], "allowed": True},
        }
        body = json.dumps(review).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass  # the test's output is not the place for the webhook's access log
