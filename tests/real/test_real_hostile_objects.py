"""What a tenant can write that the agent cannot use, on the real kube-apiserver.

The real server takes a ReplicaSet annotated `deployment.kubernetes.io/revision` with 20
digits (a legal string); it refuses an integer past 32 bits in `spec.replicas` and JSON
nested 10,000 deep (so from it, those two reach the agent only in custom resources, which
it does not read). The annotation is the way in, and the agent reads it as the Deployment
controller does: no revision.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from collector.collector import Collector
from kube.api import KubeApi
from kube.cluster import load_target
from sandbox import objects
from sandbox.controlplane import ControlPlane, ControlPlaneError
from shipper.outbox import Outbox
from shipper.records import DISCOVERY
from tests.integration.test_collector import SETTINGS, Received
from tests.real_cluster import NewNamespace
from tests.waiting import wait_until

REVISION = "deployment.kubernetes.io/revision"


def test_a_replicaset_with_a_20_digit_revision_is_sent_without_one_and_stops_no_informer(
    control_plane: ControlPlane,
    real_namespace: NewNamespace,
    real_kubeconfig: Path,
    tmp_path: Path,
) -> None:
    ns = real_namespace("forged")
    web = control_plane.create(objects.deployment(name="web", namespace=ns, replicas=0))
    # Controlled by the Deployment, another template: to its controller, an old ReplicaSet.
    forged = objects.replicaset(owner=web, template_hash="f0rged")
    forged["metadata"]["annotations"][REVISION] = "9" * 20
    forged["spec"]["replicas"] = 0
    forged["spec"]["template"]["spec"]["containers"][0]["image"] = "forged:1"
    del forged["status"]
    forged = control_plane.create(forged)
    assert forged["metadata"]["annotations"][REVISION] == "9" * 20
    too_big = objects.deployment(name="big", namespace=ns, replicas=0)
    too_big["spec"]["replicas"] = 2**70
    with pytest.raises(ControlPlaneError) as refused:
        control_plane.create(too_big)
    assert refused.value.status == 400
    current = f"{ns}/web-"
    settings = dataclasses.replace(SETTINGS, state_file=tmp_path / "collector-state.sqlite")
    api = KubeApi(load_target({}, kubeconfig=str(real_kubeconfig)))
    with Outbox(tmp_path / "queue", streams=(DISCOVERY,)) as box:
        collector = Collector(api, box[DISCOVERY], settings=settings)
        collector.start()
        try:
            received = Received(box[DISCOVERY])

            def revisions() -> dict[str, object]:
                return {
                    key: record["data"]["number"]
                    for (kind, key), record in received.latest().items()
                    if kind == "revision" and key.startswith(current) and record["op"] == "upsert"
                }

            # The controller's own ReplicaSet (revision 1) and the forged one.
            wait_until(lambda: len(revisions()) == 2, timeout=30)
            assert sorted(revisions().values(), key=str) == [1, None]
            assert revisions()[f"{ns}/{forged['metadata']['name']}"] is None
            # Informers start in phases, and a busy cluster holds the later ones back.
            wait_until(lambda: all(informer.alive for informer in collector.informers))
            snapshots = [reporter.snapshot() for reporter in collector.reporters()]
            assert not any(snap.health.fatal for snap in snapshots)
        finally:
            collector.stop()
            api.close()
