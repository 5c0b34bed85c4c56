"""Scale the scaling agent's Deployment to zero and wait until its pods have exited.

Runs in the chart's pre-delete hook, before `moonin-agent scaling revert-all`: a scaling
agent still running could apply a window again right after it was reverted. It runs with the
agent image's Python, so it reaches the cluster through the agent's own Kubernetes layer
(`kube`): the cluster found by the rule every command follows (in the hook's pod, its
service account) and the same client, deadlines and errors.

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
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from kube.api import KubeApi
from kube.cluster import KubeConfigError, load_target
from kube.errors import KubeError, NotFound

POLL_SECONDS = 2.0
REQUEST_TIMEOUT_SECONDS = 10.0
# Worth another try before the deadline: no answer, the API server restarting, throttling us.
RETRIED_STATUSES = frozenset({None, 429, 500, 502, 503, 504})


class HookError(Exception):
    """The hook cannot finish; the message is logged as the reason."""


def log(event: str, **fields: object) -> None:
    print(json.dumps({"event": event, **fields}), flush=True)


def call(what: str, deadline: float, request: Callable[[], bytes | bytearray]) -> bytes:
    """One API call, retried on transport errors and transient statuses until the deadline."""
    while True:
        try:
            return bytes(request())
        except KubeError as error:
            if error.status not in RETRIED_STATUSES:
                raise
            if time.monotonic() >= deadline:
                raise HookError(f"{what} failed: {error}") from None
            log("api_retry", call=what, status=error.status, reason=str(error))
        time.sleep(POLL_SECONDS)


def scale_to_zero(api: KubeApi, namespace: str, deployment: str, deadline: float) -> None:
    path = f"/apis/apps/v1/namespaces/{namespace}/deployments/{deployment}"
    try:
        call(
            f"scaling {deployment} to zero",
            deadline,
            lambda: api.patch(path, {"spec": {"replicas": 0}}),
        )
    except NotFound:
        log("deployment_absent", deployment=deployment)
    except KubeError as error:
        raise HookError(f"scaling {deployment} to zero was refused: {error}") from None
    else:
        log("deployment_scaled_to_zero", deployment=deployment)


def wait_for_pods_gone(api: KubeApi, namespace: str, selector: str, deadline: float) -> None:
    path = f"/api/v1/namespaces/{namespace}/pods"
    while True:
        try:
            body = call(
                "listing the scaling pods",
                deadline,
                lambda: api.get(path, {"labelSelector": selector}),
            )
        except KubeError as error:
            raise HookError(f"listing the scaling pods was refused: {error}") from None
        items = json.loads(body).get("items") or []
        names = [item.get("metadata", {}).get("name") for item in items]
        if not names:
            log("scaling_pods_gone")
            return
        if time.monotonic() >= deadline:
            raise HookError(f"scaling pods still running after the wait: {', '.join(names)}")
        log("waiting_for_scaling_pods", pods=names)
        time.sleep(POLL_SECONDS)


def main(environ: Mapping[str, str]) -> int:
    try:
        namespace = environ["POD_NAMESPACE"]
        deployment = environ["SCALING_DEPLOYMENT"]
        selector = environ["SCALING_SELECTOR"]
        deadline = time.monotonic() + float(environ.get("WAIT_SECONDS", "120"))
        account = environ.get("SERVICE_ACCOUNT_DIR")
        target = load_target(environ, service_account=Path(account) if account else None)
        api = KubeApi(target, deadline_seconds=REQUEST_TIMEOUT_SECONDS)
        try:
            scale_to_zero(api, namespace, deployment, deadline)
            wait_for_pods_gone(api, namespace, selector, deadline)
        finally:
            api.close()
    except KeyError as error:
        log("hook_failed", reason=f"{error.args[0]} is not set")
        return 1
    except (HookError, KubeConfigError, OSError, ValueError) as error:
        log("hook_failed", reason=str(error))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(os.environ))
