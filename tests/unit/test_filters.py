"""The user's filters: ignored namespaces, resource globs, node label keys."""

from __future__ import annotations

import pytest

from collector.filters import Filters, without_keys
from kube.globs import ACCEPTED_KINDS, canonical_kind


def test_ignored_namespaces_exact_and_glob() -> None:
    filters = Filters(ignore_namespaces=("kube-system", "team-*"))
    assert filters.skip("deployment", "kube-system", "coredns")
    assert filters.skip("service", "team-a", "web")
    assert not filters.skip("deployment", "shop", "web")
    assert not filters.skip("deployment", "kube-system-extra", "x")
    # Cluster-scoped objects have no namespace to ignore...
    assert not filters.skip("node", None, "kube-system")
    # ...but the ignored namespace itself is left out of the inventory.
    assert filters.skip("namespace", None, "kube-system")
    assert filters.skip("namespace", None, "team-b")
    assert not filters.skip("namespace", None, "shop")


def test_namespace_judgements_stay_right_past_the_number_remembered(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each namespace's judgement is remembered, a bounded number of them: asked for more
    namespaces than that, and again, every answer is still the globs' own."""
    monkeypatch.setattr("collector.filters._NAMESPACES_JUDGED", 8)
    filters = Filters(ignore_namespaces=("kube-*", "team-?"))
    names = [f"team-{n}" for n in range(12)] + [f"kube-{n}" for n in range(12)] + ["shop"]
    for _ in range(3):
        for name in names:
            expected = name.startswith("kube-") or len(name) == len("team-0")
            assert filters.skip("deployment", name, "web") is expected, name
            assert filters.skip("namespace", None, name) is expected, name
    assert len(filters._judged) <= 8


def test_kind_and_name_glob_matches_any_namespace_and_cluster_scope() -> None:
    filters = Filters(ignore_resources=("deployment/canary-*", "node/spot-*"))
    assert filters.skip("deployment", "shop", "canary-web")
    assert filters.skip("deployment", "other", "canary-api")
    assert not filters.skip("deployment", "shop", "web")
    assert not filters.skip("service", "shop", "canary-web")  # another kind
    assert filters.skip("node", None, "spot-1")
    assert not filters.skip("node", None, "on-demand-1")


def test_kind_namespace_and_name_globs() -> None:
    filters = Filters(ignore_resources=("deployment/shop/*", "service/team-*/internal-?"))
    assert filters.skip("deployment", "shop", "web")
    assert not filters.skip("deployment", "shop-2", "web")
    assert filters.skip("service", "team-a", "internal-1")
    assert not filters.skip("service", "team-a", "internal-10")
    # A namespaced rule never matches a cluster-scoped object.
    assert not Filters(ignore_resources=("node/*/x",)).skip("node", None, "x")


def test_star_kind_and_case_sensitivity() -> None:
    filters = Filters(ignore_resources=("*/debug-*",))
    assert filters.skip("deployment", "shop", "debug-web")
    assert filters.skip("cronjob", "shop", "debug-nightly")
    assert filters.skip("rbac", None, "debug-role")
    assert not filters.skip("deployment", "shop", "Debug-web")


@pytest.mark.parametrize(
    ("written", "record_kind", "name"),
    [
        ("job", "job_execution", "nightly-28491230"),
        ("job_execution", "job_execution", "nightly-28491230"),
        ("replicaset", "revision", "web-7d9c8b6f5"),
        ("pod", "pod_error", "web-7d9c8b6f5-abcde"),
        ("networkpolicy", "network_policy", "deny-all"),
        ("network_policy", "network_policy", "deny-all"),
        ("helm", "helm_release", "shop"),
        ("helmrelease", "helm_release", "shop"),
        ("horizontalpodautoscaler", "hpa", "web"),
    ],
)
def test_kubernetes_style_kind_names(written: str, record_kind: str, name: str) -> None:
    filters = Filters(ignore_resources=(f"{written}/*",))
    assert filters.skip(record_kind, "shop", name)
    assert not filters.skip("deployment", "shop", name)


def test_unknown_kinds_and_malformed_entries_are_refused() -> None:
    with pytest.raises(ValueError, match="unknown kind 'deploy'"):
        Filters(ignore_resources=("deploy/*",))
    with pytest.raises(ValueError, match="expected <kind>/<glob>"):
        Filters(ignore_resources=("deployment",))
    with pytest.raises(ValueError, match="expected <kind>/<glob>"):
        Filters(ignore_resources=("deployment/a/b/c",))
    with pytest.raises(ValueError, match="expected <kind>/<glob>"):
        Filters(ignore_resources=("deployment//x",))
    assert canonical_kind("job") == "job_execution"
    assert canonical_kind("*") == "*"
    assert {"deployment", "rbac", "job", "*"} <= ACCEPTED_KINDS


def test_node_labels_drop_exact_keys_and_globs() -> None:
    filters = Filters(ignore_node_labels=("kubernetes.io/hostname", "example.com/*"))
    labels = {
        "kubernetes.io/hostname": "node-1",
        "example.com/team": "a",
        "example.com/cost-center": "42",
        "topology.kubernetes.io/zone": "eu-west-1a",
        "kubernetes.io/arch": "amd64",
    }
    assert without_keys(labels, filters.ignored_node_labels) == {
        "kubernetes.io/arch": "amd64",
        "topology.kubernetes.io/zone": "eu-west-1a",
    }
    assert list(without_keys(labels, filters.ignored_node_labels)) == [
        "kubernetes.io/arch",
        "topology.kubernetes.io/zone",
    ]
    assert without_keys(labels, ()) == dict(sorted(labels.items()))


def test_nothing_configured_skips_nothing() -> None:
    filters = Filters()
    assert not filters.skip("deployment", "kube-system", "coredns")
    assert not filters.skip("namespace", None, "kube-system")
