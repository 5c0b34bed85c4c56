"""Failed Jobs' logs on a real API server whose kubelet does not answer: no other Job's
record waits for them, and they follow once the kubelet answers."""

from __future__ import annotations

import contextlib
import dataclasses
import ssl
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from collector.collector import Collector
from collector.job_logs import JobLogSettings
from kube.api import KubeApi
from kube.cluster import KubeTarget
from sandbox import objects
from sandbox.controlplane import ControlPlane, ControlPlaneError
from shipper.outbox import Outbox
from shipper.records import DISCOVERY
from tests.integration.test_collector import SETTINGS, Received
from tests.kubelet import Kubelet, node_at
from tests.real_cluster import NewNamespace
from tests.waiting import wait_until

CONTAINER = "report"


@pytest.fixture
def silent_kubelet(control_plane: ControlPlane) -> Iterator[tuple[Kubelet, str]]:
    """A kubelet that says nothing yet and the Node it serves (deleted afterwards: Nodes
    are the whole session's)."""
    with Kubelet() as kubelet:
        node = node_at(f"kubelet-{kubelet.port}", kubelet.port)
        control_plane.create(node)
        name = node["metadata"]["name"]
        control_plane.patch(
            "v1", "Node", None, name, {"status": node["status"]}, subresource="status"
        )
        yield kubelet, name
        with contextlib.suppress(ControlPlaneError):
            control_plane.delete("v1", "Node", None, name)


def run(plane: ControlPlane, cron: dict[str, Any], name: str, node: str) -> dict[str, Any]:
    """A run of `cron` whose pod the Job controller binds to `node`."""
    meta = cron["metadata"]
    return plane.create(
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {
                "name": name,
                "namespace": meta["namespace"],
                "ownerReferences": objects.controlled_by(cron),
            },
            "spec": {
                "backoffLimit": 0,
                "template": {
                    "spec": {
                        "nodeName": node,
                        "restartPolicy": "Never",
                        "containers": [{"name": CONTAINER, "image": "report:2"}],
                    }
                },
            },
        }
    )


def exit_pod(plane: ControlPlane, job: dict[str, Any], code: int) -> str:
    """Write the status of the Job's pod as its kubelet would once the container exited
    with `code`; returns the pod's name."""
    namespace, name = job["metadata"]["namespace"], job["metadata"]["name"]
    pods: list[dict[str, Any]] = []

    def created() -> bool:
        pods[:] = plane.list("v1", "Pod", namespace, labelSelector=f"job-name={name}")
        return bool(pods)

    wait_until(created)
    pod = pods[0]["metadata"]["name"]
    terminated = {
        "exitCode": code,
        "reason": "Error" if code else "Completed",
        "startedAt": "2026-12-02T03:00:10Z",
        "finishedAt": "2026-12-02T03:00:38Z",
    }
    status = {
        "phase": "Failed" if code else "Succeeded",
        "containerStatuses": [
            {
                "name": CONTAINER,
                "image": "report:2",
                "imageID": "",
                "ready": False,
                "restartCount": 0,
                "state": {"terminated": terminated},
            }
        ],
    }
    plane.patch("v1", "Pod", namespace, pod, {"status": status}, subresource="status")
    return pod


def test_a_silent_kubelet_holds_back_no_other_jobs_record_and_its_logs_follow_once_it_answers(
    control_plane: ControlPlane,
    real_namespace: NewNamespace,
    silent_kubelet: tuple[Kubelet, str],
    tmp_path: Path,
) -> None:
    kubelet, node = silent_kubelet
    ns = real_namespace("job-logs")
    cron = objects.cronjob(name="report", namespace=ns)
    # Suspended: only this test's runs; a history long enough to keep them all.
    cron["spec"] |= {"suspend": True, "failedJobsHistoryLimit": 5}
    cron = control_plane.create(cron)
    failed = [run(control_plane, cron, f"report-{n}", node) for n in (1, 2)]
    for job in failed:
        pod = exit_pod(control_plane, job, 1)
        kubelet.logs[f"/containerLogs/{ns}/{pod}/{CONTAINER}"] = f"starting {pod}\nexit 1\n"

    api = KubeApi(
        KubeTarget(
            server=control_plane.url,
            verify=ssl.create_default_context(cafile=str(control_plane.ca_file)),
            token=lambda: control_plane.admin_token,
        )
    )
    # Its own deadline past the API server's 10 s: the server's 500 is what ends a read.
    # A failed run's record waits 2 s for its log, then goes without.
    job_logs = JobLogSettings(read_seconds=30, hold_seconds=2)
    settings = dataclasses.replace(SETTINGS, job_logs=job_logs)
    with Outbox(tmp_path, streams=(DISCOVERY,)) as box:
        collector = Collector(api, box[DISCOVERY], settings=settings)
        received = Received(box[DISCOVERY])

        def execution(job: str) -> dict[str, Any]:
            """The Job's record as the platform keeps it ({} before any)."""
            record = received.latest().get(("job_execution", f"{ns}/{job}"))
            return {} if record is None else dict(record["data"])

        collector.start()
        try:
            wait_until(lambda: kubelet.counts()["accepted"] >= 1)  # a read waits on the kubelet
            succeeded = run(control_plane, cron, "report-3", node)
            exit_pod(control_plane, succeeded, 0)
            wait_until(lambda: execution("report-3").get("status") == "succeeded")
            # ... while that read is still pending: no answer from the API server yet.
            counters = collector.reporter.snapshot().counters
            assert counters.get("job_log_reads_failed", 0) == 0
            assert counters.get("job_logs_read", 0) == 0
            assert kubelet.counts()["answered"] == 0
            # The failed runs' records, done waiting for their logs, go without them.
            wait_until(
                lambda: all(
                    execution(j).get("status") == "failed" for j in ("report-1", "report-2")
                )
            )
            assert [execution(j)["logs"] for j in ("report-1", "report-2")] == [None, None]

            kubelet.answer()
            wait_until(lambda: all(execution(j).get("logs") for j in ("report-1", "report-2")))
        finally:
            collector.stop()
            api.close()
    for job in ("report-1", "report-2"):
        data = execution(job)
        assert data["logs"] == [f"starting {data['pod']}", "exit 1"]
        assert (data["exit_code"], data["container"]) == (1, CONTAINER)
        sent = [r["data"]["logs"] for r in received.records if r["key"] == f"{ns}/{job}"]
        assert sent[0] is None and sent[-1] == data["logs"]
