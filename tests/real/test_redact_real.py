"""The redactor against what a real API server stores and serves: a kubelet's waiting message
written through `pods/status`, an annotation and an admission denial in an Event, read back
by `moonin-agent preview` as a security reviewer would run it."""

from __future__ import annotations

import json
from pathlib import Path

from sandbox import objects
from sandbox.controlplane import ControlPlane
from tests.agent_process import preview_env, run_cli
from tests.real_cluster import NewNamespace

DB_PASSWORD = "Db-Pa55-c0ffee-7e1"
URL_PASSWORD = "Url-Pa55-c0ffee-7e2"
DENIED_VALUE = "Denied-c0ffee-7e3"


def test_preview_of_a_real_cluster_masks_credentials_in_messages_and_annotations(
    control_plane: ControlPlane, real_namespace: NewNamespace, real_kubeconfig: Path
) -> None:
    ns = real_namespace("vault")
    service = objects.service(name="edge", namespace=ns)
    service["metadata"]["annotations"] = {
        "example.com/database": f"postgres://admin:{URL_PASSWORD}@db:5432/shop"
    }
    control_plane.create(service)
    pod = control_plane.create(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "api", "namespace": ns},
            "spec": {"containers": [{"name": "app", "image": "registry.example/shop/api:2.0"}]},
        }
    )
    waiting = {
        "reason": "CreateContainerError",
        "message": f'exec: "/bin/api --db-password={DB_PASSWORD}": permission denied',
    }
    control_plane.patch(
        "v1",
        "Pod",
        ns,
        "api",
        {
            "status": {
                "phase": "Pending",
                "containerStatuses": [
                    {
                        "name": "app",
                        "image": "registry.example/shop/api:2.0",
                        "imageID": "",
                        "ready": False,
                        "restartCount": 0,
                        "state": {"waiting": waiting},
                    }
                ],
            }
        },
        content_type="application/strategic-merge-patch+json",
        subresource="status",
    )
    control_plane.create(
        objects.event(
            involved=pod,
            reason="FailedCreatePodSandBox",
            message="Failed to create pod sandbox: admission webhook"
            f' "deny.example.com" denied the request: value {DENIED_VALUE} is not allowed',
        )
    )

    preview = run_cli("preview", env=preview_env(KUBECONFIG=str(real_kubeconfig)))
    assert preview.returncode == 0, preview.stderr[-3000:]
    for secret in (DB_PASSWORD, URL_PASSWORD, DENIED_VALUE):
        assert secret not in preview.stdout + preview.stderr
    records = [json.loads(line) for line in preview.stdout.splitlines()]
    mine = [r for r in records if r.get("namespace") == ns]
    [edge] = [r["data"] for r in mine if r["kind"] == "service"]
    assert edge["annotations"]["example.com/database"] == "postgres://[REDACTED]@db:5432/shop"
    messages = {r["data"]["reason"]: r["data"]["message"] for r in mine if r["kind"] == "pod_error"}
    assert messages["CreateContainerError"] == (
        'Container "app" is waiting: CreateContainerError: exec: "/bin/api'
        ' --db-password=[REDACTED]": permission denied'
    )
    assert messages["CreatePodSandboxError"] == (
        "Failed to create pod sandbox: admission webhook [REDACTED]"
    )
