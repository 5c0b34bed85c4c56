"""The synthetic cluster's heavy objects (`SyntheticSpec(heavy=True)`): Helm release Secrets
near the 1 MiB object limit, pods with a ~200 KB last-applied annotation, Deployments of 100
containers. Small clusters, so that a few releases are all that is built."""

from __future__ import annotations

import base64
import dataclasses
import json
import zlib
from collections import Counter
from typing import Any

import msgspec
import pytest

from collector.normalize.helm_release import decode_release
from sandbox.kube import FakeKube, synthetic
from sandbox.kube.synthetic import (
    HEAVY_NAMESPACE,
    LAST_APPLIED,
    WIDE_CONTAINERS,
    SyntheticSpec,
    generate,
    populate,
)

Obj = dict[str, Any]

SPEC = SyntheticSpec(
    namespaces=6,
    deployments=30,
    pods=200,
    nodes=3,
    cronjobs=2,
    services=6,
    helm_releases=3,
    heavy=True,
    heavy_helm_releases=2,
    heavy_helm_revisions=3,
    heavy_pods=5,
    wide_deployments=2,
)
MIB = 1024 * 1024


def plain(spec: SyntheticSpec) -> list[Obj]:
    """The generated objects as the API serves them (shared fragments spliced in)."""
    return [msgspec.json.decode(msgspec.json.encode(obj)) for obj in generate(spec)]


@pytest.fixture(scope="module")
def cluster() -> list[Obj]:
    return plain(SPEC)


def of_kind(objects: list[Obj], kind: str) -> list[Obj]:
    return [obj for obj in objects if obj["kind"] == kind]


def heavy_secrets(objects: list[Obj]) -> list[Obj]:
    return [s for s in of_kind(objects, "Secret") if s["metadata"]["namespace"] == HEAVY_NAMESPACE]


def layers(secret: Obj) -> tuple[bytes, bytes, bytes]:
    """Helm's base64 text (what the Secret stores), its gzip, and the release JSON."""
    helm_text = base64.b64decode(secret["data"]["release"])
    compressed = base64.b64decode(helm_text)
    return helm_text, compressed, zlib.decompress(compressed, wbits=31)


def test_heavy_release_secrets_are_helm_revisions_near_the_object_limit(
    cluster: list[Obj],
) -> None:
    secrets = heavy_secrets(cluster)
    assert len(secrets) == 2 * 3
    by_release: dict[str, list[Obj]] = {}
    for secret in secrets:
        by_release.setdefault(secret["metadata"]["labels"]["name"], []).append(secret)
    assert len(by_release) == 2
    for release, revisions in by_release.items():
        deployed_at = []
        for number, secret in enumerate(revisions, start=1):
            meta, labels = secret["metadata"], secret["metadata"]["labels"]
            newest = number == len(revisions)
            assert secret["type"] == "helm.sh/release.v1"
            assert meta["name"] == f"sh.helm.release.v1.{release}.v{number}"
            assert labels["owner"] == "helm" and labels["version"] == str(number)
            assert labels["status"] == ("deployed" if newest else "superseded")
            assert int(labels["modifiedAt"]) > int(labels["createdAt"])
            if not newest:  # superseded when the next revision was deployed
                next_labels = revisions[number]["metadata"]["labels"]
                assert labels["modifiedAt"] == next_labels["createdAt"]

            decoded = decode_release(secret["data"]["release"])  # as the collector reads it
            assert (decoded["name"], decoded["namespace"]) == (release, HEAVY_NAMESPACE)
            assert (decoded["revision"], decoded["status"]) == (number, labels["status"])
            assert decoded["chart"] == "kube-prometheus-stack"
            kinds = Counter(r["kind"] for r in decoded["resources"])
            assert kinds["ConfigMap"] >= 20 and kinds["PrometheusRule"] >= 10
            assert kinds["Deployment"] == 3 and kinds["ServiceMonitor"] >= 5
            deployed_at.append(decoded["last_deployed"])

            helm_text, compressed, text = layers(secret)
            ratio = len(text) / len(compressed)
            print(
                f"{meta['name']}: {len(helm_text)} bytes stored ({len(helm_text) / 1024:.0f} "
                f"KiB), gzip {len(compressed)}, JSON {len(text)}, ratio {ratio:.2f}, "
                f"{len(secret['data']['release'])} bytes in the API's JSON"
            )
            assert 850 * 1024 <= len(helm_text) <= 950 * 1024 < MIB
            assert 4 <= ratio <= 6
            # Each revision its own values and rendering, the chart shared.
            doc = json.loads(text)
            assert doc["config"]["grafana"]["image"]["tag"] == f"10.4.{number}"
            assert f"grafana/grafana:10.4.{number}" in doc["manifest"]
            assert release in doc["manifest"] and "release-name" not in doc["manifest"]
            assert [hook["events"][0] for hook in doc["hooks"]] == ["pre-install", "post-install"]
        assert deployed_at == sorted(deployed_at) and len(set(deployed_at)) == len(deployed_at)


def test_every_helm_release_secret_decodes_and_is_counted_by_the_spec(
    cluster: list[Obj],
) -> None:
    helm = [s for s in of_kind(cluster, "Secret") if s.get("type") == "helm.sh/release.v1"]
    assert len(helm) == SPEC.helm_release_secrets() == 3 + 2 * 3
    light = [s for s in helm if s["metadata"]["namespace"] != HEAVY_NAMESPACE]
    assert len(light) == 3
    for secret in light:
        decoded = decode_release(secret["data"]["release"])
        assert (decoded["revision"], decoded["status"]) == (3, "deployed")
        assert [r["kind"] for r in decoded["resources"]] == ["Service", "Deployment"]
    namespaces = {n["metadata"]["name"] for n in of_kind(cluster, "Namespace")}
    assert HEAVY_NAMESPACE in namespaces


def test_heavy_pods_carry_a_200_kb_last_applied_configuration_of_themselves(
    cluster: list[Obj],
) -> None:
    pods = of_kind(cluster, "Pod")
    heavy = [p for p in pods if LAST_APPLIED in (p["metadata"].get("annotations") or {})]
    assert len(heavy) == 5
    sizes = [len(p["metadata"]["annotations"][LAST_APPLIED].encode()) for p in heavy]
    print(f"last-applied-configuration sizes: {sizes}")
    assert all(195_000 <= size <= 210_000 for size in sizes)
    for pod in heavy:
        applied = json.loads(pod["metadata"]["annotations"][LAST_APPLIED])
        assert applied["kind"] == "Pod"
        assert applied["metadata"]["name"] == pod["metadata"]["name"]
        assert applied["metadata"]["namespace"] == pod["metadata"]["namespace"]
        assert pod["metadata"]["ownerReferences"][0]["kind"] == "ReplicaSet"
    assert len({p["metadata"]["namespace"] for p in heavy}) > 1


def test_wide_deployments_have_100_containers_down_to_their_pods(cluster: list[Obj]) -> None:
    def containers(spec: Obj) -> list[Obj]:
        return list(spec["containers"])

    wide = [
        d
        for d in of_kind(cluster, "Deployment")
        if len(containers(d["spec"]["template"]["spec"])) == WIDE_CONTAINERS
    ]
    assert len(wide) == 2
    others = [d for d in of_kind(cluster, "Deployment") if d not in wide]
    assert all(len(containers(d["spec"]["template"]["spec"])) <= 2 for d in others)
    for deployment in wide:
        names = [c["name"] for c in containers(deployment["spec"]["template"]["spec"])]
        assert len(set(names)) == WIDE_CONTAINERS
        namespace, name = deployment["metadata"]["namespace"], deployment["metadata"]["name"]
        owned = [
            rs
            for rs in of_kind(cluster, "ReplicaSet")
            if rs["metadata"]["namespace"] == namespace
            and rs["metadata"]["ownerReferences"][0]["name"] == name
        ]
        assert owned
        assert all(len(containers(rs["spec"]["template"]["spec"])) == 100 for rs in owned)
        current = {rs["metadata"]["name"] for rs in owned if rs["spec"]["replicas"]}
        pods = [
            p
            for p in of_kind(cluster, "Pod")
            if p["metadata"]["namespace"] == namespace
            and p["metadata"]["ownerReferences"][0]["name"] in current
        ]
        assert len(pods) == deployment["spec"]["replicas"] > 0
        for pod in pods:
            assert len(containers(pod["spec"])) == WIDE_CONTAINERS
            if pod["status"]["phase"] == "Running":
                assert len(pod["status"]["containerStatuses"]) == WIDE_CONTAINERS
            ports = [p["containerPort"] for c in containers(pod["spec"]) for p in c["ports"]]
            assert len(ports) == len(set(ports))


def test_without_heavy_none_of_it_even_with_heavy_sizes_given() -> None:
    spec = SyntheticSpec(
        namespaces=3,
        deployments=10,
        pods=40,
        nodes=2,
        cronjobs=2,
        services=3,
        heavy_helm_releases=2,
        heavy_pods=5,
        wide_deployments=2,
    )
    objects = plain(spec)
    assert not heavy_secrets(objects)
    assert spec.helm_release_secrets() == 0  # 10 Deployments: no Helm-managed one either
    pods = of_kind(objects, "Pod")
    assert not any(LAST_APPLIED in (p["metadata"].get("annotations") or {}) for p in pods)
    templates = [d["spec"]["template"]["spec"] for d in of_kind(objects, "Deployment")]
    assert max(len(template["containers"]) for template in templates) <= 2
    assert HEAVY_NAMESPACE not in {n["metadata"]["name"] for n in of_kind(objects, "Namespace")}


def test_heavy_objects_are_deterministic_for_a_seed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(synthetic.time, "time", lambda: 1_800_000_000.0)
    spec = SyntheticSpec(
        namespaces=2,
        deployments=4,
        pods=10,
        nodes=1,
        cronjobs=1,
        services=1,
        heavy=True,
        heavy_helm_releases=1,
        heavy_helm_revisions=2,
        heavy_pods=1,
        wide_deployments=1,
    )
    first, again = plain(spec), plain(spec)
    assert first == again
    other = plain(dataclasses.replace(spec, seed=2))
    assert heavy_secrets(other)[0]["data"] != heavy_secrets(first)[0]["data"]


def test_a_heavy_cluster_loads_into_the_fake_and_serves_its_secrets() -> None:
    spec = SyntheticSpec(
        namespaces=2,
        deployments=4,
        pods=10,
        nodes=1,
        cronjobs=1,
        services=1,
        heavy=True,
        heavy_helm_releases=1,
        heavy_helm_revisions=2,
        heavy_pods=2,
        wide_deployments=1,
    )
    with FakeKube() as kube:
        counts = populate(kube, spec)
        assert counts["pods"] == 10 and counts["deployments.apps"] == 4
        served = kube.list("secrets", HEAVY_NAMESPACE)
        assert [s["metadata"]["name"] for s in served] == [
            f"sh.helm.release.v1.payments-monitoring.v{n}" for n in (1, 2)
        ]
        assert decode_release(served[1]["data"]["release"])["status"] == "deployed"
