"""`moonin-agent preview` as a real process: what it prints, what it honours, how it fails.

Preview must print exactly what `run` would queue (the outbox's bytes), and nothing else may
happen: no watch, no file, no request to a platform, even one the environment points at.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import msgspec
import pytest

from sandbox import objects
from sandbox.kube import FakeKube
from sandbox.platform import FakePlatform
from shipper.records import Record, encode
from tests.agent_process import preview_env
from tests.conftest import TOKEN


def run_preview(
    *args: str, cwd: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[bytes]:
    cwd.mkdir(parents=True, exist_ok=True)
    return subprocess.run(
        [sys.executable, "-m", "agent.cli", "preview", *args],
        cwd=cwd,
        env=env if env is not None else preview_env(),
        capture_output=True,
        timeout=30,
    )


def records_of(stdout: bytes) -> list[Record]:
    return [msgspec.json.decode(line, type=Record) for line in stdout.splitlines()]


def slots(records: list[Record]) -> set[tuple[str, str]]:
    """The objects printed (snapshot records aside)."""
    return {(record.kind, record.key) for record in records if record.kind != "snapshot"}


def snapshots(records: list[Record]) -> dict[str, list[str]]:
    """Record kind -> the keys its snapshot lists (every part, in order)."""
    found: dict[str, list[str]] = {}
    for record in records:
        if record.kind == "snapshot":
            found.setdefault(record.data["of"], []).extend(record.data["keys"])
    return found


def log_events(stderr: bytes) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stderr.splitlines() if line.startswith(b"{")]


# -- the cluster ------------------------------------------------------------------------------


def deployment(name: str, ns: str = "shop") -> dict[str, Any]:
    return objects.deployment(name=name, namespace=ns, revision=3)


def helm_release(name: str, ns: str = "shop") -> dict[str, Any]:
    release = objects.helm_release(name=name, namespace=ns, chart_version="2.1.0")
    storage = objects.helm_storage(release)
    return objects.helm_release_secret(name=name, namespace=ns, revision=1, storage=storage)


@pytest.fixture
def cluster(kube: FakeKube, kubeconfig: Path) -> FakeKube:
    for ns in ("shop", "staging", "kube-system"):
        kube.create(objects.namespace(name=ns))
    web = kube.create(deployment("web"))
    kube.create(objects.replicaset(owner=web, template_hash="5d9f"))
    kube.create(deployment("worker-1"))
    kube.create(deployment("api", "staging"))
    kube.create(deployment("coredns", "kube-system"))
    kube.create(objects.service(name="web", namespace="shop"))
    kube.create(objects.cronjob(name="nightly", namespace="shop"))
    kube.create(objects.node(name="node-1"))
    kube.create(helm_release("shop"))
    kube.clear_requests()
    return kube


EVERYTHING = {
    ("namespace", "shop"),
    ("namespace", "staging"),
    ("deployment", "shop/web"),
    ("deployment", "shop/worker-1"),
    ("deployment", "staging/api"),
    ("revision", "shop/web-5d9f"),
    ("service", "shop/web"),
    ("cronjob", "shop/nightly"),
    ("node", "node-1"),
    ("helm_release", "shop/shop/v1"),
    ("cluster_metadata", "cluster"),
}


# -- the tests --------------------------------------------------------------------------------


def test_preview_prints_every_record_once_as_the_outbox_would_hold_it(
    cluster: FakeKube, kubeconfig: Path, platform: FakePlatform, tmp_path: Path
) -> None:
    # A platform and credentials in the environment change nothing: preview never sends.
    env = preview_env(
        KUBECONFIG=str(kubeconfig),
        PROJECT_ID="p-1",
        CLUSTER_ID="c-1",
        CLUSTER_TOKEN=TOKEN,
        API_URL=platform.url,
        MOONIN_INSECURE_HTTP="true",
        QUEUE_DIR=str(tmp_path / "queue"),
    )
    result = run_preview(cwd=tmp_path / "cwd", env=env)
    assert result.returncode == 0, result.stderr.decode()
    lines = result.stdout.splitlines()
    records = records_of(result.stdout)
    assert [encode(record) for record in records] == lines  # byte for byte, one per line
    assert slots(records) == EVERYTHING  # kube-system is ignored by default
    assert len([r for r in records if r.kind != "snapshot"]) == len(EVERYTHING)
    # After each list, the complete key set of its kind, so the platform forgets the rest;
    # kinds with no objects say so with an empty set.
    listed_kinds = {"hpa", "ingress", "network_policy", "rbac", "job_execution"}
    listed_kinds |= {kind for kind, _ in EVERYTHING} - {"cluster_metadata"}
    assert snapshots(records) == {
        kind: sorted(key for k, key in EVERYTHING if k == kind) for kind in listed_kinds
    }
    last_upsert = max(i for i, r in enumerate(records) if r.kind == "deployment")
    first_snapshot = min(
        i for i, r in enumerate(records) if r.kind == "snapshot" and r.data["of"] == "deployment"
    )
    assert first_snapshot > last_upsert

    by_slot = {(r.kind, r.key): r for r in records}
    web = by_slot[("deployment", "shop/web")]
    assert web.op == "upsert" and web.namespace == "shop" and web.uid
    # Relations are resolved as `run` resolves them: the ReplicaSet and Service came later.
    assert web.data["current_replicaset"] == "web-5d9f"
    assert web.data["services"] == ["web"]
    assert by_slot[("helm_release", "shop/shop/v1")].data["chart_version"] == "2.1.0"
    metadata = by_slot[("cluster_metadata", "cluster")].data
    assert metadata["kubernetes_version"] == "v1.37.1"
    assert metadata["node_count"] == 1 and metadata["leader"] is None

    # Listed once, never watched: a watch only to stream the list, ended with its initial events.
    watches = [request for request in cluster.requests if request.watch]
    assert all(request.query.get("sendInitialEvents") == "true" for request in watches)
    assert platform.requests == []
    assert not (tmp_path / "queue").exists()
    assert list((tmp_path / "cwd").iterdir()) == []
    assert list(tmp_path.rglob("*.db")) == []
    assert any(event["event"] == "preview_done" for event in log_events(result.stderr))


def test_preview_shows_the_errors_only_warning_events_tell(
    cluster: FakeKube, kubeconfig: Path, tmp_path: Path
) -> None:
    rs = cluster.get("replicasets", "shop", "web-5d9f")
    stuck = cluster.create(objects.creating_pod(owner=rs))
    failing = "Readiness probe failed: HTTP probe failed with statuscode: 503"
    probe = objects.event(
        involved=stuck,
        reason="Unhealthy",
        message=failing,
        field_path="spec.containers{app}",
        count=6,
    )
    cluster.create(probe)
    env = preview_env(KUBECONFIG=str(kubeconfig))
    result = run_preview(cwd=tmp_path / "cwd", env=env)
    assert result.returncode == 0, result.stderr.decode()
    [error] = [r for r in records_of(result.stdout) if r.kind == "pod_error"]
    assert error.op == "event" and error.name == stuck["metadata"]["name"]
    assert (error.data["reason"], error.data["message"]) == ("ReadinessProbeFailed", failing)
    details = error.data["details"]
    assert (details["source"], details["event_reason"], details["count"]) == (
        "event",
        "Unhealthy",
        6,
    )
    assert (details["container"], error.data["workload"]["name"]) == ("app", "web")
    # Switched off, the Events are not even read.
    off = run_preview(cwd=tmp_path / "cwd", env=env | {"COLLECT_EVENTS": "false"})
    assert off.returncode == 0, off.stderr.decode()
    assert not [r for r in records_of(off.stdout) if r.kind == "pod_error"]


def test_filters_and_switches_from_config_and_environment_are_honoured(
    cluster: FakeKube, kubeconfig: Path, tmp_path: Path
) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(
        "ignore_namespaces: [staging]\n"  # replaces the default: kube-system is watched now
        "collect_helm_releases: false\n"
        "queue_dir: /nonexistent/queue\n"  # run's settings are accepted and not used
    )
    env = preview_env(KUBECONFIG=str(kubeconfig), IGNORE_RESOURCES="deployment/shop/worker-*")
    result = run_preview("--config", str(config), cwd=tmp_path / "cwd", env=env)
    assert result.returncode == 0, result.stderr.decode()
    found = slots(records_of(result.stdout))
    assert found == (
        EVERYTHING
        - {
            ("namespace", "staging"),
            ("deployment", "staging/api"),
            ("deployment", "shop/worker-1"),
            ("helm_release", "shop/shop/v1"),
        }
    ) | {("namespace", "kube-system"), ("deployment", "kube-system/coredns")}
    assert not any(request.resource == "secrets" for request in cluster.requests)


def test_a_forbidden_resource_is_a_warning_and_the_rest_is_printed(
    cluster: FakeKube, kubeconfig: Path, tmp_path: Path
) -> None:
    cluster.forbid("services")
    result = run_preview(cwd=tmp_path, env=preview_env(KUBECONFIG=str(kubeconfig)))
    assert result.returncode == 0, result.stderr.decode()
    records = records_of(result.stdout)
    assert slots(records) == EVERYTHING - {("service", "shop/web")}
    assert "service" not in snapshots(records)  # no list, no claim about what exists
    warnings = [e for e in log_events(result.stderr) if e["level"] == "warning"]
    assert [(e["event"], e["resource"]) for e in warnings] == [("resource_forbidden", "services")]
    # The fake streams lists, and a streamed list is a watch as RBAC sees it.
    assert warnings[0]["permission"] == (
        'forbidden: cannot watch resource "services" in API group "" at the cluster scope'
    )


def test_a_cluster_that_fails_otherwise_prints_nothing_and_exits_1(
    cluster: FakeKube, kubeconfig: Path, tmp_path: Path
) -> None:
    cluster.fail_next(500, resource="cronjobs")
    result = run_preview(cwd=tmp_path, env=preview_env(KUBECONFIG=str(kubeconfig)))
    assert result.returncode == 1
    assert result.stdout == b""
    errors = [line for line in result.stderr.splitlines() if not line.startswith(b"{")]
    assert len(errors) == 1 and b"cronjobs" in errors[0]


def test_without_a_cluster_it_is_one_line_and_exit_code_2(tmp_path: Path) -> None:
    result = run_preview(cwd=tmp_path / "cwd", env=preview_env(HOME=str(tmp_path)))
    assert result.returncode == 2
    assert result.stdout == b""
    assert len(result.stderr.strip().splitlines()) == 1
    assert b"no cluster to talk to" in result.stderr


@pytest.mark.parametrize(
    ("config_text", "named"),
    [
        ("collect_job_logs: maybe\n", b"collect_job_logs"),
        ("ignore_resources: [widget/*]\n", b"widget"),
        ("cluster_token: abc\n", b"CLUSTER_TOKEN"),
    ],
)
def test_bad_configuration_is_one_line_and_exit_code_2(
    config_text: str, named: bytes, kubeconfig: Path, tmp_path: Path
) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(config_text)
    env = preview_env(KUBECONFIG=str(kubeconfig))
    result = run_preview("--config", str(config), cwd=tmp_path / "cwd", env=env)
    assert result.returncode == 2
    assert result.stdout == b""
    assert len(result.stderr.strip().splitlines()) == 1
    assert named in result.stderr
