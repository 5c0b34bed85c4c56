"""Scale the scaling agent's Deployment to zero and wait until its pods have exited.

Runs in the chart's pre-delete hook, before `moonin-agent scaling revert-all`: a scaling
agent still running could apply a window again right after it was reverted. It uses the
agent image's Python and the standard library alone, so the hook needs no other image.

Environment: POD_NAMESPACE, SCALING_DEPLOYMENT, SCALING_SELECTOR (a label selector),
WAIT_SECONDS; the API server and credentials of the pod's service account
(KUBERNETES_SERVICE_HOST/PORT, SERVICE_ACCOUNT_DIR to read them from elsewhere).

How it fails: exit status 1, with one JSON line on stdout saying why, when the API refuses
the patch or the pods are still there after WAIT_SECONDS; a Deployment that no longer
exists counts as scaled down. Transient API errors are retried until the deadline.
"""

from __future__ import annotations

import json
import os
import ssl
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

DEFAULT_SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
POLL_SECONDS = 2.0
REQUEST_TIMEOUT_SECONDS = 10.0
# Worth another try before the deadline: the API server restarting, throttling us.
RETRIED_STATUSES = frozenset({429, 500, 502, 503, 504})


class HookError(Exception):
    """The hook cannot finish; the message is logged as the reason."""


class Api:
    """The few calls the hook makes, authenticated as the pod's service account."""

    def __init__(self, environ: dict[str, str]) -> None:
        host = environ["KUBERNETES_SERVICE_HOST"]
        port = environ.get("KUBERNETES_SERVICE_PORT", "443")
        if ":" in host:
            host = f"[{host}]"
        self.base = f"https://{host}:{port}"
        self.account_dir = Path(environ.get("SERVICE_ACCOUNT_DIR", DEFAULT_SERVICE_ACCOUNT_DIR))
        self.tls = ssl.create_default_context(cafile=str(self.account_dir / "ca.crt"))

    def request(
        self, method: str, path: str, body: object = None, content_type: str | None = None
    ) -> tuple[int, dict]:
        # Projected service account tokens rotate: read it for every request.
        token = (self.account_dir / "token").read_text().strip()
        headers = {"Authorization": f"Bearer {token}", "Accept": "application/json"}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = content_type or "application/json"
        request = urllib.request.Request(self.base + path, data, headers, method=method)
        try:
            with urllib.request.urlopen(
                request, timeout=REQUEST_TIMEOUT_SECONDS, context=self.tls
            ) as response:
                return response.status, json.loads(response.read() or b"{}")
        except urllib.error.HTTPError as error:
            return error.code, _json_or_empty(error.read())


def _json_or_empty(payload: bytes) -> dict:
    try:
        decoded = json.loads(payload)
    except ValueError:
        return {}
    return decoded if isinstance(decoded, dict) else {}


def log(event: str, **fields: object) -> None:
    print(json.dumps({"event": event, **fields}), flush=True)


def call(
    api: Api,
    deadline: float,
    method: str,
    path: str,
    body: object = None,
    content_type: str | None = None,
) -> tuple[int, dict]:
    """One API call, retried on network errors and transient statuses until the deadline."""
    while True:
        try:
            status, answer = api.request(method, path, body, content_type)
        except (OSError, ValueError) as error:
            status, reason = 0, str(error)
        else:
            reason = str(answer.get("message", ""))
            if status not in RETRIED_STATUSES:
                return status, answer
        if time.monotonic() >= deadline:
            raise HookError(f"{method} {path} failed: {status or 'no answer'} {reason}".strip())
        log("api_retry", method=method, path=path, status=status, reason=reason)
        time.sleep(POLL_SECONDS)


def scale_to_zero(api: Api, namespace: str, deployment: str, deadline: float) -> None:
    path = f"/apis/apps/v1/namespaces/{namespace}/deployments/{deployment}"
    status, body = call(
        api,
        deadline,
        "PATCH",
        path,
        body={"spec": {"replicas": 0}},
        content_type="application/merge-patch+json",
    )
    if status == 404:
        log("deployment_absent", deployment=deployment)
    elif status != 200:
        raise HookError(f"scaling {deployment} to zero was refused: {status} {body.get('message')}")
    else:
        log("deployment_scaled_to_zero", deployment=deployment)


def wait_for_pods_gone(api: Api, namespace: str, selector: str, deadline: float) -> None:
    query = urllib.parse.urlencode({"labelSelector": selector})
    path = f"/api/v1/namespaces/{namespace}/pods?{query}"
    while True:
        status, body = call(api, deadline, "GET", path)
        if status != 200:
            raise HookError(f"listing the scaling pods was refused: {status} {body.get('message')}")
        names = [item.get("metadata", {}).get("name") for item in body.get("items", [])]
        if not names:
            log("scaling_pods_gone")
            return
        if time.monotonic() >= deadline:
            raise HookError(f"scaling pods still running after the wait: {', '.join(names)}")
        log("waiting_for_scaling_pods", pods=names)
        time.sleep(POLL_SECONDS)


def main(environ: dict[str, str]) -> int:
    try:
        namespace = environ["POD_NAMESPACE"]
        deployment = environ["SCALING_DEPLOYMENT"]
        selector = environ["SCALING_SELECTOR"]
        deadline = time.monotonic() + float(environ.get("WAIT_SECONDS", "120"))
        api = Api(environ)
        scale_to_zero(api, namespace, deployment, deadline)
        wait_for_pods_gone(api, namespace, selector, deadline)
    except KeyError as error:
        log("hook_failed", reason=f"{error.args[0]} is not set")
        return 1
    except (HookError, OSError, ValueError) as error:
        log("hook_failed", reason=str(error))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(dict(os.environ)))
