"""Cluster metadata on a real API server: the platform's first `cluster_metadata` record
and first heartbeat already count the Nodes and name the cloud they run on."""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sandbox import objects
from sandbox.controlplane import ControlPlane, ControlPlaneError
from sandbox.platform import FakePlatform
from tests.agent_process import agent_env, start_agent, stop_within
from tests.waiting import wait_until

ZONES = ("us-east-1a", "us-east-1b", "us-east-1a", "us-east-1c", "us-east-1a")


def aws_node(name: str, zone: str, instance: str) -> dict[str, Any]:
    """A Node as EKS registers it: topology and instance-type labels, an AWS providerID."""
    node = objects.node(name=name)
    node["metadata"]["labels"].update(
        {"topology.kubernetes.io/region": "us-east-1", "topology.kubernetes.io/zone": zone}
    )
    node["spec"]["providerID"] = f"aws:///{zone}/{instance}"
    return node


@pytest.fixture
def aws_nodes(control_plane: ControlPlane) -> Iterator[list[str]]:
    """Five AWS Nodes, deleted afterwards (Nodes are the whole session's)."""
    names = []
    for n, zone in enumerate(ZONES):
        node = aws_node(f"ip-10-0-{n}-17.ec2.internal", zone, f"i-0{n}4f1c2d3e5a6b7c8")
        names.append(control_plane.create(node)["metadata"]["name"])
    yield names
    for name in names:
        with contextlib.suppress(ControlPlaneError):
            control_plane.delete("v1", "Node", None, name)


def test_the_first_metadata_the_platform_gets_counts_the_nodes_and_names_their_cloud(
    control_plane: ControlPlane,
    aws_nodes: list[str],
    platform: FakePlatform,
    real_kubeconfig: Path,
    tmp_path: Path,
) -> None:
    nodes = len(control_plane.list("v1", "Node"))  # these five, and any other test's
    env = agent_env(
        platform,
        tmp_path / "queue",
        KUBECONFIG=str(real_kubeconfig),
        LEADER_ELECTION="false",
        CLOUD_METADATA="false",
        # Longer than the warm-up takes here: the first beat waits for the Nodes, not this.
        HEARTBEAT_SECONDS="30",
    )
    agent = start_agent(env)
    try:

        def metadata_records() -> list[dict[str, Any]]:
            return [r for r in platform.received_records() if r["kind"] == "cluster_metadata"]

        wait_until(lambda: bool(metadata_records()), timeout=30)
        wait_until(lambda: any(r.route == "heartbeat" for r in platform.requests))
    finally:
        agent.send_signal(signal.SIGTERM)
        stop_within(agent, 30)
    first = metadata_records()[0]["data"]
    beat = next(r for r in platform.requests if r.route == "heartbeat").json()["metadata"]
    for metadata in (first, beat):
        assert metadata["node_count"] == nodes
        assert (metadata["provider"], metadata["region"], metadata["zone"]) == (
            "eks",
            "us-east-1",
            "us-east-1a",
        )
        assert metadata["kubernetes_version"] == control_plane.version
