"""The Helm chart, rendered by Helm's own engine and checked the way a cluster would check it.

Rendering uses helm-python-sdk, which binds Helm's Go SDK from a library inside its wheel:
no helm binary, no download, no cluster. Each variant of the values is rendered once per
module; every object is then validated against the Kubernetes OpenAPI schemas of 1.29, 1.33
and 1.37 shipped by kubernetes-validate, in strict mode (unknown fields are errors). The
other tests read the same rendered objects: RBAC stays as narrow as each role needs, every
container runs locked down, both roles read one credentials Secret, the switches in values
reach RBAC and config.yaml, and the agent's own configuration loader accepts what the chart
gives each container.
"""

from __future__ import annotations

import base64
import copy
import functools
import http.server
import json
import ssl
import threading
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any
from urllib.parse import urlsplit

import helm_python as helm
import kubernetes_validate
import pytest
import trustme
import yaml

from agent import config as agent_config
from tests.chart_render import (
    CA_PEM,
    CHART,
    CREDENTIALS,
    NAMESPACE,
    RELEASE,
    ROOT,
    VARIANTS,
    WORKLOAD_KINDS,
    Rendered,
    chart_values,
    component_of,
    container_environment,
    render,
    rules_of,
)

KUBE_VERSIONS = ("1.29", "1.33", "1.37")
READ_VERBS = frozenset({"get", "list", "watch"})
LIST_WATCH = frozenset({"list", "watch"})
LEASE_NAME = "moonin-discovery-leader"  # collector/leader.py
# Kinds the Kubernetes schemas do not know: custom resources, checked on their own below.
CUSTOM_KINDS = frozenset({"ServiceMonitor"})


@pytest.fixture(scope="module")
def chart() -> Iterator[helm.Chart]:
    with helm.Chart.load(CHART) as loaded:
        yield loaded


@pytest.fixture(scope="module")
def rendered(chart: helm.Chart) -> dict[str, Rendered]:
    return {name: render(chart, values) for name, values in VARIANTS.items()}


@pytest.fixture(scope="module")
def default(rendered: dict[str, Rendered]) -> Rendered:
    return rendered["default"]


def _pod_spec(workload: dict[str, Any]) -> dict[str, Any]:
    return workload["spec"]["template"]["spec"]


def _containers(workload: dict[str, Any]) -> list[dict[str, Any]]:
    spec = _pod_spec(workload)
    return spec.get("initContainers", []) + spec["containers"]


def _env(container: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {item["name"]: item for item in container.get("env", [])}


def _grants(rules: list[dict[str, Any]], group: str, resource: str) -> set[str]:
    return {
        verb
        for rule in rules
        if group in rule["apiGroups"] and resource in rule["resources"]
        for verb in rule["verbs"]
    }


# --- the chart as a whole ---------------------------------------------------------------------


@functools.cache
def _schema_problem(version: str, document: str) -> str | None:
    """Why Kubernetes `version` would refuse the object, if it would. Cached: most objects
    are the same in every variant."""
    obj = json.loads(document)
    try:
        kubernetes_validate.validate(obj, version, strict=True)
    except kubernetes_validate.ValidationError as exc:
        where = "/".join(str(part) for part in exc.path)
        return f"{version} {obj['kind']}/{obj['metadata']['name']}: {where}: {exc.message}"
    return None


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_every_object_is_valid_for_kubernetes_1_29_1_33_and_1_37(
    rendered: dict[str, Rendered], variant: str
) -> None:
    objects = [obj for obj in rendered[variant].objects if obj["kind"] not in CUSTOM_KINDS]
    assert len(objects) >= 8
    problems = [
        problem
        for version in KUBE_VERSIONS
        for obj in objects
        if (problem := _schema_problem(version, json.dumps(obj, sort_keys=True)))
    ]
    assert not problems, "\n".join(problems)


def test_the_strict_validation_would_catch_a_misspelt_field(default: Rendered) -> None:
    deployment = copy.deepcopy(default.workload("discovery"))
    _pod_spec(deployment)["containers"][0]["securityContext"]["readOnlyRootFileSystem"] = True
    for version in KUBE_VERSIONS:
        problem = _schema_problem(version, json.dumps(deployment, sort_keys=True))
        assert problem and "readOnlyRootFileSystem" in problem


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_helm_lint_reports_no_warning_or_error(variant: str) -> None:
    for version in KUBE_VERSIONS:
        report = helm.lint(
            CHART,
            copy.deepcopy(VARIANTS[variant]),
            strict=True,
            namespace=NAMESPACE,
            kube_version=f"v{version}.0",
        )
        findings = [m for m in report["messages"] if m["severity"] >= 2]
        assert not findings and not report["errors"], (version, findings, report["errors"])


def test_the_chart_declares_the_project_version_as_its_app_version(chart: helm.Chart) -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert chart.metadata["appVersion"] == project["version"]
    assert chart.metadata["apiVersion"] == "v2"


def test_the_image_tag_defaults_to_the_app_version(default: Rendered, chart: helm.Chart) -> None:
    images = {c["image"] for w in default.workloads() for c in _containers(w)}
    assert images == {f"ghcr.io/moonin/moonin-agent:{chart.metadata['appVersion']}"}


def test_a_long_release_name_keeps_every_name_and_label_within_kubernetes_limits(
    chart: helm.Chart,
) -> None:
    release = "moonin-agent-production-eu-west-1-cluster-a1-blue"  # 49 characters
    values = chart_values(persistence={"enabled": True})
    manifests = chart.render(copy.deepcopy(values), name=release, namespace=NAMESPACE)
    objects = [
        obj
        for path, text in manifests.items()
        if path.endswith(".yaml")
        for obj in yaml.safe_load_all(text)
        if obj
    ]
    for obj in objects:
        labels = dict(obj["metadata"].get("labels", {}))
        if obj["kind"] in WORKLOAD_KINDS:
            labels.update(obj["spec"]["template"]["metadata"]["labels"])
        assert all(len(value) <= 63 for value in labels.values()), labels
        # DNS labels: a Service's name, and a Job's (its pods get it as a label).
        if obj["kind"] in ("Service", "Job"):
            assert len(obj["metadata"]["name"]) <= 63, obj["metadata"]["name"]
    # A StatefulSet's pods carry controller-revision-hash: <name>-<hash of up to 10>.
    (statefulset,) = [obj for obj in objects if obj["kind"] == "StatefulSet"]
    assert len(statefulset["metadata"]["name"]) <= 52


def test_values_without_credentials_are_refused_naming_what_is_missing(chart: helm.Chart) -> None:
    with pytest.raises(helm.HelmValuesError) as refused:
        chart.render({}, name=RELEASE, namespace=NAMESPACE)
    for key in ("projectId", "clusterId", "clusterToken"):
        assert key in str(refused.value)


@pytest.mark.parametrize(
    ("values", "complaint"),
    [
        (chart_values(bogus=True), "bogus"),
        (chart_values(discovery={"leaderElection": False, "replicaCount": 2}), "replicaCount"),
        (chart_values(config={"extra": {"queue_dir": "/elsewhere"}}), "queue_dir"),
        (chart_values(config={"ignoreResources": ["no-slash"]}), "ignoreResources"),
        (chart_values(config={"logLevel": "chatty"}), "logLevel"),
        (chart_values(image={"tag": 1.2}), "tag"),
        (chart_values(health={"port": 0}), "port"),
        (
            {"global": {"clusterCredentials": CREDENTIALS | {"projectId": "p/1"}}},
            "projectId",
        ),
        (
            {"global": {"clusterCredentials": CREDENTIALS | {"clusterToken": "t0ken-abc"}}},
            "clusterToken",
        ),
        (chart_values(scaling={"reconcileIntervalSeconds": 0.001}), "reconcileIntervalSeconds"),
        (chart_values(scaling={"gitopsConflicts": "fight"}), "gitopsConflicts"),
        (chart_values(queue={"maxBytes": 10**12}), "maxBytes"),
        (chart_values(config={"extra": {"lease_duration_seconds": 1}}), "lease_duration"),
        (chart_values(config={"extra": {"list_page_size": "500"}}), "list_page_size"),
    ],
)
def test_the_schema_refuses_values_the_agent_could_not_run_with(
    chart: helm.Chart, values: dict[str, Any], complaint: str
) -> None:
    with pytest.raises(helm.HelmValuesError) as refused:
        chart.validate_schema(copy.deepcopy(values))
    assert complaint in str(refused.value)


# --- RBAC -------------------------------------------------------------------------------------


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_discovery_may_write_nothing_but_its_lease(
    rendered: dict[str, Rendered], variant: str
) -> None:
    rules = rules_of(rendered[variant], f"{RELEASE}-discovery")
    assert rules
    for rule in rules:
        writes = set(rule["verbs"]) - READ_VERBS
        if writes:
            assert rule["apiGroups"] == ["coordination.k8s.io"], rule
            assert rule["resources"] == ["leases"], rule
            assert writes <= {"create", "update", "patch"}, rule


def test_discovery_leases_are_granted_in_the_release_namespace_only(default: Rendered) -> None:
    cluster_rules = [r for role in default.of_kind("ClusterRole") for r in role["rules"]]
    assert not _grants(cluster_rules, "coordination.k8s.io", "leases")
    (role,) = [r for r in default.of_kind("Role") if component_of(r) == "discovery"]
    assert role["metadata"]["namespace"] == NAMESPACE
    named = [r for r in role["rules"] if r.get("resourceNames")]
    assert named and all(r["resourceNames"] == [LEASE_NAME] for r in named)
    assert _grants(role["rules"], "coordination.k8s.io", "leases") == {"get", "create", "update"}


def test_discovery_lists_and_watches_the_kinds_it_collects_and_reads_nothing_else(
    default: Rendered,
) -> None:
    # What every grant is used for: docs/install.md; that each is used: test_chart_rbac.py.
    rules = rules_of(default, f"{RELEASE}-discovery")
    collected = {
        "": ["namespaces", "nodes", "pods", "services"],
        "apps": ["deployments", "replicasets"],
        "autoscaling": ["horizontalpodautoscalers"],
        "batch": ["jobs", "cronjobs"],
        "networking.k8s.io": ["ingresses", "networkpolicies"],
        "rbac.authorization.k8s.io": [
            "roles",
            "rolebindings",
            "clusterroles",
            "clusterrolebindings",
        ],
    }
    for group, resources in collected.items():
        for resource in resources:
            assert _grants(rules, group, resource) == LIST_WATCH, (group, resource)
    assert _grants(rules, "", "secrets") == LIST_WATCH | {"get"}  # a release's body by name
    assert _grants(rules, "", "pods/log") == {"get"}
    assert _grants(rules, "", "events") == LIST_WATCH  # Warning Events, never written
    granted = {res for rule in rules for res in rule["resources"]}
    assert not granted & {"configmaps", "endpoints"}


def test_switching_collection_off_drops_the_secrets_and_pod_log_rules(
    rendered: dict[str, Rendered],
) -> None:
    off = rules_of(rendered["collection-off"], f"{RELEASE}-discovery")
    assert not _grants(off, "", "secrets")
    assert not _grants(off, "", "pods/log")
    assert _grants(off, "", "pods") == LIST_WATCH
    on = rules_of(rendered["default"], f"{RELEASE}-discovery")
    assert _grants(on, "", "secrets") and _grants(on, "", "pods/log")


def test_switching_events_off_drops_the_events_rule_and_nothing_else(
    rendered: dict[str, Rendered],
) -> None:
    off = rules_of(rendered["events-off"], f"{RELEASE}-discovery")
    on = rules_of(rendered["default"], f"{RELEASE}-discovery")
    assert not _grants(off, "", "events")
    assert [rule for rule in on if "events" not in rule["resources"]] == off


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_scaling_and_the_uninstall_hook_hold_nothing_on_secrets(
    rendered: dict[str, Rendered], variant: str
) -> None:
    for account in (f"{RELEASE}-scaling", f"{RELEASE}-uninstall"):
        rules = rules_of(rendered[variant], account)
        assert not any("secrets" in r["resources"] for r in rules), (account, rules)
        assert not _grants(rules, "coordination.k8s.io", "leases")


def test_scaling_holds_what_applying_and_reverting_windows_needs(default: Rendered) -> None:
    rules = rules_of(default, f"{RELEASE}-scaling")
    assert _grants(rules, "apps", "deployments") == {"get", "list", "patch"}
    assert _grants(rules, "autoscaling", "horizontalpodautoscalers") == {
        "get",
        "list",
        "create",
        "patch",
        "delete",
    }
    assert _grants(rules, "", "events") == {"create"}
    assert {group for rule in rules for group in rule["apiGroups"]} == {"", "apps", "autoscaling"}
    granted = {res for rule in rules for res in rule["resources"]}
    assert granted == {"deployments", "horizontalpodautoscalers", "events"}


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_no_rule_uses_a_wildcard(rendered: dict[str, Rendered], variant: str) -> None:
    for role in rendered[variant].of_kind("Role") + rendered[variant].of_kind("ClusterRole"):
        for rule in role["rules"]:
            for key in ("apiGroups", "resources", "verbs"):
                assert "*" not in rule[key], (role["metadata"]["name"], rule)


def test_scaling_disabled_renders_no_scaling_workload_rbac_or_hook(
    rendered: dict[str, Rendered],
) -> None:
    disabled = rendered["scaling-disabled"]
    assert {component_of(obj) for obj in disabled.objects} <= {None, "discovery"}
    assert not rules_of(disabled, f"{RELEASE}-scaling")
    assert "Scaling:   disabled" in disabled.notes


# --- pods -------------------------------------------------------------------------------------


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_every_container_runs_locked_down_and_only_agents_have_probes(
    rendered: dict[str, Rendered], variant: str
) -> None:
    workloads = rendered[variant].workloads()
    assert workloads
    for workload in workloads:
        pod = _pod_spec(workload)
        assert pod["securityContext"]["runAsNonRoot"] is True
        assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
        for container in _containers(workload):
            context = container["securityContext"]
            assert context["runAsNonRoot"] is True
            assert context["runAsUser"] == context["runAsGroup"] == 10001
            assert context["readOnlyRootFilesystem"] is True
            assert context["allowPrivilegeEscalation"] is False
            assert context["capabilities"] == {"drop": ["ALL"]}
            assert context["seccompProfile"] == {"type": "RuntimeDefault"}
            assert "/tmp" in {m["mountPath"] for m in container["volumeMounts"]}
            probes = {"startupProbe", "livenessProbe", "readinessProbe"} & container.keys()
            if workload["kind"] == "Job":
                assert not probes, container["name"]
                continue
            assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
            assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
            assert container["startupProbe"]["httpGet"]["path"] == "/healthz"
            ports = {p["name"]: p["containerPort"] for p in container["ports"]}
            assert ports == {"http-health": 8080}


def test_agents_get_the_default_resources_and_allocator_setting(default: Rendered) -> None:
    for component in ("discovery", "scaling"):
        (container,) = _pod_spec(default.workload(component))["containers"]
        assert container["resources"] == {
            "requests": {"cpu": "100m", "memory": "128Mi"},
            "limits": {"memory": "256Mi"},
        }
        assert _env(container)["MALLOC_ARENA_MAX"]["value"] == "2"


def test_replicas_leader_election_and_api_urls_per_role(default: Rendered) -> None:
    discovery, scaling = default.workload("discovery"), default.workload("scaling")
    assert discovery["kind"] == "Deployment" and discovery["spec"]["replicas"] == 2
    assert scaling["kind"] == "Deployment" and scaling["spec"]["replicas"] == 1
    d_env, s_env = _env(_containers(discovery)[0]), _env(_containers(scaling)[0])
    assert d_env["API_URL"]["value"] == "https://api-discover.moonin.app"
    assert s_env["API_URL"]["value"] == "https://api-scaling-rules.moonin.app"
    assert d_env["LEADER_ELECTION"]["value"] == "true"
    assert _containers(discovery)[0]["args"] == ["run", "--role", "discovery"]
    assert _containers(scaling)[0]["args"] == ["run", "--role", "scaling"]
    assert _pod_spec(discovery)["serviceAccountName"] != _pod_spec(scaling)["serviceAccountName"]


def test_downward_api_gives_pod_name_and_namespace(default: Rendered) -> None:
    for workload in default.workloads():
        for container in _containers(workload):
            env = _env(container)
            assert env["POD_NAMESPACE"]["valueFrom"]["fieldRef"]["fieldPath"] == (
                "metadata.namespace"
            )
            if container["name"] != "scale-to-zero":
                assert env["POD_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"


@pytest.mark.parametrize("variant", ["default", "existing-secret"])
def test_both_roles_and_the_hook_read_the_same_credentials_secret(
    rendered: dict[str, Rendered], variant: str
) -> None:
    result = rendered[variant]
    expected = result.values["global"].get("credentialsSecretName", "moonin-credentials")
    names = set()
    for workload in result.workloads():
        for container in _containers(workload):
            for item in container.get("env", []):
                ref = item.get("valueFrom", {}).get("secretKeyRef")
                if ref:
                    names.add(ref["name"])
        for volume in _pod_spec(workload)["volumes"]:
            if "secret" in volume:
                names.add(volume["secret"]["secretName"])
    assert names == {expected}
    components = {component_of(w) for w in result.workloads()}
    assert components == {"discovery", "scaling", "uninstall"}
    secrets = result.of_kind("Secret")
    if variant == "existing-secret":
        assert not secrets
        assert "not created by this chart" in result.notes
    else:
        (secret,) = secrets
        assert secret["metadata"]["name"] == expected
        assert set(secret["data"]) == {"PROJECT_ID", "CLUSTER_ID", "CLUSTER_TOKEN"}


def test_numeric_ids_reach_the_secret_whole(chart: helm.Chart) -> None:
    # Helm reads numbers as floats; printed naively 1234567 would become 1.234567e+06.
    values = chart_values()
    values["global"]["clusterCredentials"].update(projectId=1234567, clusterId=42)
    (secret,) = render(chart, values).of_kind("Secret")
    decoded = {k: base64.b64decode(v).decode() for k, v in secret["data"].items()}
    assert decoded == {
        "PROJECT_ID": "1234567",
        "CLUSTER_ID": "42",
        "CLUSTER_TOKEN": "t0ken-abc-7d2e91f4",
    }


def test_the_token_is_also_a_file_so_a_rotation_needs_no_restart(default: Rendered) -> None:
    for component in ("discovery", "scaling"):
        (container,) = _pod_spec(default.workload(component))["containers"]
        path = Path(_env(container)["CLUSTER_TOKEN_FILE"]["value"])
        mount = next(m for m in container["volumeMounts"] if m["mountPath"] == str(path.parent))
        volume = next(
            v
            for v in _pod_spec(default.workload(component))["volumes"]
            if v["name"] == mount["name"]
        )
        assert volume["secret"]["items"] == [{"key": "CLUSTER_TOKEN", "path": path.name}]
        # A subPath mount would freeze the file at its first content.
        assert "subPath" not in mount


def test_pods_roll_when_config_or_credentials_change(chart: helm.Chart) -> None:
    def checksums(values: dict[str, Any]) -> dict[str, str]:
        template = render(chart, values).workload("discovery")["spec"]["template"]
        return {k: v for k, v in template["metadata"]["annotations"].items() if "checksum" in k}

    base = checksums(chart_values())
    assert set(base) == {"checksum/config", "checksum/credentials"}
    changed_config = checksums(chart_values(config={"logLevel": "debug"}))
    assert changed_config["checksum/config"] != base["checksum/config"]
    assert changed_config["checksum/credentials"] == base["checksum/credentials"]
    rotated = chart_values()
    rotated["global"]["clusterCredentials"]["clusterToken"] = "rotated-token-5b09e3"
    assert checksums(rotated)["checksum/credentials"] != base["checksum/credentials"]


def test_scheduling_settings_and_pull_secrets_reach_every_pod(chart: helm.Chart) -> None:
    values = chart_values(
        nodeSelector={"kubernetes.io/os": "linux"},
        tolerations=[{"key": "dedicated", "operator": "Equal", "value": "ops"}],
        affinity={"nodeAffinity": {}},
        imagePullSecrets=[{"name": "registry"}],
        podAnnotations={"example.com/team": "platform"},
        scaling={"extraEnv": [{"name": "HTTPS_PROXY", "value": "http://proxy.internal:3128"}]},
    )
    for workload in render(chart, values).workloads():
        pod = _pod_spec(workload)
        assert pod["nodeSelector"] == {"kubernetes.io/os": "linux"}
        assert pod["tolerations"][0]["key"] == "dedicated"
        assert pod["affinity"] == {"nodeAffinity": {}}
        assert pod["imagePullSecrets"] == [{"name": "registry"}]
        annotations = workload["spec"]["template"]["metadata"]["annotations"]
        assert annotations["example.com/team"] == "platform"
        proxy = _env(pod["containers"][0]).get("HTTPS_PROXY")
        # The uninstall hook runs as the scaling role does, so it gets the proxy too.
        assert (proxy is not None) == (component_of(workload) in ("scaling", "uninstall"))


# --- the queue --------------------------------------------------------------------------------


def _quantity_bytes(text: str) -> int:
    units = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}
    return int(text[:-2]) * units[text[-2:]]


def test_the_queue_is_a_size_limited_empty_dir_by_default(default: Rendered) -> None:
    for component in ("discovery", "scaling"):
        workload = default.workload(component)
        queue = next(v for v in _pod_spec(workload)["volumes"] if v["name"] == "queue")
        limit = queue["emptyDir"]["sizeLimit"]
        config = yaml.safe_load(
            default.one("ConfigMap", f"{RELEASE}-config")["data"]["config.yaml"]
        )
        # The outbox's byte bound must leave room for SQLite's own pages below the limit.
        assert config["queue_max_bytes"] * 2 <= _quantity_bytes(limit)
        env = _env(_containers(workload)[0])
        mounts = {m["name"]: m["mountPath"] for m in _containers(workload)[0]["volumeMounts"]}
        assert env["QUEUE_DIR"]["value"] == mounts["queue"] == agent_config.OutboxSettings.queue_dir
    assert not default.of_kind("PersistentVolumeClaim")
    assert not default.of_kind("StatefulSet")


def test_persistence_gives_each_replica_its_own_claim(rendered: dict[str, Rendered]) -> None:
    persisted = rendered["persistence"]
    discovery = persisted.workload("discovery")
    assert discovery["kind"] == "StatefulSet"
    assert (
        discovery["spec"]["serviceName"]
        == persisted.one("Service", f"{RELEASE}-discovery")["metadata"]["name"]
    )
    (template,) = discovery["spec"]["volumeClaimTemplates"]
    assert template["metadata"]["name"] == "queue"
    assert template["spec"]["storageClassName"] == "fast-ssd"
    assert template["spec"]["resources"]["requests"]["storage"] == "2Gi"
    assert "queue" not in {v["name"] for v in _pod_spec(discovery)["volumes"]}

    scaling = persisted.workload("scaling")
    assert scaling["kind"] == "Deployment"
    assert scaling["spec"]["strategy"] == {"type": "Recreate"}
    (claim,) = persisted.of_kind("PersistentVolumeClaim")
    queue = next(v for v in _pod_spec(scaling)["volumes"] if v["name"] == "queue")
    assert queue["persistentVolumeClaim"]["claimName"] == claim["metadata"]["name"]
    assert claim["spec"]["accessModes"] == ["ReadWriteOnce"]
    assert "statefulset/" in persisted.notes


def test_the_scaling_workload_never_overlaps_itself(default: Rendered) -> None:
    assert default.workload("scaling")["spec"]["strategy"] == {"type": "Recreate"}


# --- config.yaml ------------------------------------------------------------------------------


def _schema() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((CHART / "values.schema.json").read_text())
    return loaded


def test_config_extra_takes_every_file_setting_the_chart_sets_no_other_way(
    rendered: dict[str, Rendered],
) -> None:
    """The keys `config.extra` accepts are the agent's file keys less those the ConfigMap
    writes from values of their own and those whose variable the chart sets (the variable
    would win over the file), each with the bounds the agent checks."""
    written = set(yaml.safe_load(_config_yaml(rendered["default"])))  # its `extra` is empty
    chart_env = {
        name
        for result in rendered.values()
        for workload in result.workloads()
        for container in _containers(workload)
        for name in _env(container)
    }
    expected = {
        s.key: getattr(s.parse, "schema", None)
        for s in agent_config.SETTINGS
        if s.key is not None and s.key not in written and s.env not in chart_env
    }
    extra = _schema()["properties"]["config"]["properties"]["extra"]
    assert extra["propertyNames"]["enum"] == list(expected)
    assert extra["properties"] == expected


def test_the_values_of_their_own_have_the_agents_bounds() -> None:
    declared = {s.env: getattr(s.parse, "schema", None) for s in agent_config.SETTINGS}
    properties = _schema()["properties"]
    scaling = properties["scaling"]["properties"]
    assert scaling["reconcileIntervalSeconds"] == declared["RECONCILE_INTERVAL_SECONDS"]
    assert scaling["gitopsConflicts"] == declared["GITOPS_CONFLICTS"]
    assert scaling["reassertSeconds"] == declared["REASSERT_SECONDS"]
    assert properties["queue"]["properties"]["maxBytes"] == declared["QUEUE_MAX_BYTES"]


def _config_yaml(rendered: Rendered) -> str:
    return rendered.one("ConfigMap", f"{RELEASE}-config")["data"]["config.yaml"]


def test_config_yaml_holds_the_filters_and_switches_given(
    rendered: dict[str, Rendered], tmp_path: Path
) -> None:
    text = _config_yaml(rendered["custom-config"])
    parsed = yaml.safe_load(text)
    assert parsed["log_level"] == "debug"
    assert parsed["ignore_namespaces"] == ["kube-system", "scratch-*"]
    assert parsed["ignore_resources"] == ["job/*", "deployment/shop/canary-*"]
    assert parsed["ignore_node_labels"] == ["example.com/owner"]
    assert parsed["queue_max_bytes"] == 104857600
    # Large whole numbers stay integers (Helm reads values as floats).
    assert parsed["queue_max_records"] == 5000000 and type(parsed["queue_max_records"]) is int
    assert parsed["linger_seconds"] == 0.5
    assert set(parsed) <= agent_config.FILE_KEYS

    path = tmp_path / "config.yaml"
    path.write_text(text)
    settings = agent_config.load_collection_settings({"CONFIG_FILE": str(path)})
    assert settings.collection.filters.ignore_namespaces == ("kube-system", "scratch-*")
    assert settings.collection.filters.ignore_resources == ("job/*", "deployment/shop/canary-*")
    assert settings.collection.filters.ignore_node_labels == ("example.com/owner",)
    assert settings.log_level == "debug"


@pytest.mark.parametrize("variant", ["default", "collection-off", "events-off"])
def test_the_collection_switches_reach_config_yaml(
    rendered: dict[str, Rendered], variant: str, tmp_path: Path
) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(_config_yaml(rendered[variant]))
    settings = agent_config.load_collection_settings({"CONFIG_FILE": str(path)})
    assert settings.collection.collect_helm_releases is (variant != "collection-off")
    assert settings.collection.collect_job_logs is (variant != "collection-off")
    assert settings.collection.collect_events is (variant != "events-off")
    assert settings.collection.filters.ignore_namespaces == ("kube-system",)


@pytest.mark.parametrize("variant", ["default", "custom-config", "no-leader-election"])
def test_the_agent_accepts_the_environment_each_container_gets(
    rendered: dict[str, Rendered], variant: str, tmp_path: Path
) -> None:
    result = rendered[variant]
    checked = []
    for workload in result.workloads():
        container = next(c for c in _containers(workload) if c["name"] != "scale-to-zero")
        role = "discovery" if component_of(workload) == "discovery" else "scaling"
        root = tmp_path / workload["metadata"]["name"]
        environment = container_environment(result, workload, container, root)
        settings = agent_config.load_settings(role, environment)
        assert settings.identity.project_id == "p-1" and settings.identity.cluster_id == "c-1"
        token_file = settings.identity.token_file
        assert token_file and Path(token_file).read_text() == "t0ken-abc-7d2e91f4"
        assert settings.process.health_addr == "0.0.0.0:8080"
        custom = variant == "custom-config"
        assert settings.outbox.bounds.max_bytes == (104857600 if custom else 419430400)
        assert settings.discovery.cloud_metadata is (False if custom else None)
        assert settings.outbox.shipping.batch_max_records == (200 if custom else 500)
        if custom:  # the PEM given, in a file the agent validated
            assert (
                settings.api.client.ca_bundle
                and Path(settings.api.client.ca_bundle).read_text().strip() == CA_PEM
            )
        else:
            assert settings.api.client.ca_bundle is None
        if role == "discovery":
            assert settings.api.discovery_url == "https://api-discover.moonin.app"
            expected = result.values.get("discovery", {}).get("leaderElection", True)
            assert settings.discovery.leader_election is expected
        else:
            assert settings.api.scaling_url == "https://api-scaling-rules.moonin.app"
            assert settings.scaling.reconcile_interval_seconds == 30.0
        checked.append(container["name"])
    assert sorted(checked) == ["agent", "agent", "revert-all"]


# --- disruption budget, metrics ---------------------------------------------------------------


def test_a_disruption_budget_only_guards_more_than_one_discovery_replica(
    rendered: dict[str, Rendered],
) -> None:
    (budget,) = rendered["default"].of_kind("PodDisruptionBudget")
    assert budget["spec"]["minAvailable"] == 1
    selector = budget["spec"]["selector"]["matchLabels"]
    assert selector == rendered["default"].workload("discovery")["spec"]["selector"]["matchLabels"]
    assert not rendered["monitored-single-replica"].of_kind("PodDisruptionBudget")


def test_the_service_monitor_appears_only_when_enabled(rendered: dict[str, Rendered]) -> None:
    for name, result in rendered.items():
        monitors = result.of_kind("ServiceMonitor")
        assert len(monitors) == (1 if name == "monitored-single-replica" else 0), name
    monitored = rendered["monitored-single-replica"]
    (monitor,) = monitored.of_kind("ServiceMonitor")
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert monitor["metadata"]["labels"]["release"] == "prometheus"
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["port"] == "http-health" and endpoint["path"] == "/metrics"
    selector = monitor["spec"]["selector"]["matchLabels"]
    selected = [
        s
        for s in monitored.of_kind("Service")
        if selector.items() <= s["metadata"]["labels"].items()
    ]
    assert {component_of(s) for s in selected} == {"discovery", "scaling"}
    for service in selected:
        assert service["spec"]["ports"][0]["targetPort"] == "http-health"


# --- the uninstall hook -----------------------------------------------------------------------


def _hooks(rendered: Rendered) -> list[dict[str, Any]]:
    return [
        obj for obj in rendered.objects if "helm.sh/hook" in obj["metadata"].get("annotations", {})
    ]


def test_the_uninstall_hook_reverts_after_scaling_to_zero(default: Rendered) -> None:
    hooks = _hooks(default)
    assert {h["metadata"]["annotations"]["helm.sh/hook"] for h in hooks} == {"pre-delete"}
    for hook in hooks:
        policy = hook["metadata"]["annotations"]["helm.sh/hook-delete-policy"]
        assert set(policy.split(",")) == {"before-hook-creation", "hook-succeeded"}
    weights = {h["kind"]: int(h["metadata"]["annotations"]["helm.sh/hook-weight"]) for h in hooks}
    # Helm creates hooks in weight order: the Job comes last, once its rights exist.
    assert all(weight < weights["Job"] for kind, weight in weights.items() if kind != "Job")
    assert weights["ServiceAccount"] < weights["ClusterRoleBinding"]
    assert weights["Role"] < weights["RoleBinding"]

    (job,) = default.of_kind("Job")
    pod = _pod_spec(job)
    assert pod["restartPolicy"] == "Never"
    assert pod["serviceAccountName"] == f"{RELEASE}-uninstall"
    (first,) = pod["initContainers"]
    (revert,) = pod["containers"]
    assert first["command"][0] == "python"
    assert revert["args"] == ["scaling", "revert-all"]
    env = _env(first)
    scaling = default.workload("scaling")
    assert env["SCALING_DEPLOYMENT"]["value"] == scaling["metadata"]["name"]
    selector = dict(pair.split("=") for pair in env["SCALING_SELECTOR"]["value"].split(","))
    assert selector == scaling["spec"]["selector"]["matchLabels"]
    # revert-all runs as the scaling role does, with its own writable queue.
    scaling_env = _env(_containers(scaling)[0])
    for name in ("API_URL", "PROJECT_ID", "CLUSTER_TOKEN", "CONFIG_FILE", "QUEUE_DIR"):
        assert _env(revert)[name] == scaling_env[name], name
    queue = next(v for v in pod["volumes"] if v["name"] == "queue")
    assert "emptyDir" in queue

    (script,) = [c for c in default.of_kind("ConfigMap") if c in hooks]
    shipped = (CHART / "files" / "scale_to_zero.py").read_text()
    assert script["data"]["scale_to_zero.py"].strip() == shipped.strip()


def test_the_uninstall_hook_holds_what_scale_to_zero_and_revert_all_call(
    default: Rendered,
) -> None:
    # In the release namespace: see the scaling pods go.
    (role,) = [r for r in default.of_kind("Role") if component_of(r) == "uninstall"]
    assert role["rules"] == [{"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]}]
    # Cluster-wide: what revert-all calls (scheduler/kubeapi.py); patching Deployments also
    # covers scaling this release's own to zero.
    rules = rules_of(default, f"{RELEASE}-uninstall")
    assert _grants(rules, "autoscaling", "horizontalpodautoscalers") == {
        "get",
        "list",
        "patch",
        "delete",
    }
    assert _grants(rules, "apps", "deployments") == {"get", "list", "patch"}
    assert _grants(rules, "", "events") == {"create"}


# --- the hook's script, against a fake API server -----------------------------------------------


def _load_script() -> ModuleType:
    # Compiled by hand, so no __pycache__ lands inside the chart's files/.
    path = CHART / "files" / "scale_to_zero.py"
    module = ModuleType("scale_to_zero")
    module.__file__ = str(path)
    exec(compile(path.read_text(), str(path), "exec"), module.__dict__)
    return module


@dataclass
class FakeApi:
    """Answers the hook's two calls; `pods_left` lists answers still holding a pod."""

    deployment_status: int = 200
    pods_left: int = 1
    requests: list[tuple[str, str, dict[str, Any] | None]] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)


@pytest.fixture(scope="module")
def tls() -> trustme.CA:
    return trustme.CA()


@pytest.fixture
def fake_api(tls: trustme.CA, tmp_path: Path) -> Iterator[tuple[FakeApi, dict[str, str]]]:
    state = FakeApi()

    class Handler(http.server.BaseHTTPRequestHandler):
        def _answer(self, status: int, body: dict[str, Any]) -> None:
            payload = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def do_PATCH(self) -> None:
            length = int(self.headers["Content-Length"])
            body = json.loads(self.rfile.read(length))
            state.requests.append(("PATCH", self.path, body))
            state.headers.append(dict(self.headers))
            self._answer(state.deployment_status, {"message": "x"})

        def do_GET(self) -> None:
            state.requests.append(("GET", self.path, None))
            state.headers.append(dict(self.headers))
            items = [{"metadata": {"name": "moonin-agent-scaling-0"}}] if state.pods_left else []
            state.pods_left = max(0, state.pods_left - 1)
            self._answer(200, {"items": items})

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.issue_cert("127.0.0.1").configure_cert(context)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    account = tmp_path / "serviceaccount"
    account.mkdir()
    (account / "token").write_text("sa-token\n")
    tls.cert_pem.write_to_path(str(account / "ca.crt"))
    environ = {
        "KUBERNETES_SERVICE_HOST": "127.0.0.1",
        "KUBERNETES_SERVICE_PORT": str(server.server_address[1]),
        "SERVICE_ACCOUNT_DIR": str(account),
        "POD_NAMESPACE": NAMESPACE,
        "SCALING_DEPLOYMENT": f"{RELEASE}-scaling",
        "SCALING_SELECTOR": "app.kubernetes.io/component=scaling",
        "WAIT_SECONDS": "5",
    }
    try:
        yield state, environ
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def script(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    module = _load_script()
    monkeypatch.setattr(module, "POLL_SECONDS", 0.01)
    return module


@pytest.mark.integration
def test_the_hook_script_scales_to_zero_then_waits_for_the_pod_to_go(
    fake_api: tuple[FakeApi, dict[str, str]], script: ModuleType
) -> None:
    state, environ = fake_api
    state.pods_left = 2
    assert script.main(environ) == 0
    method, path, body = state.requests[0]
    assert (method, urlsplit(path).path) == (
        "PATCH",
        f"/apis/apps/v1/namespaces/{NAMESPACE}/deployments/{RELEASE}-scaling",
    )
    assert body == {"spec": {"replicas": 0}}
    assert state.headers[0]["Content-Type"] == "application/merge-patch+json"
    assert {h["Authorization"] for h in state.headers} == {"Bearer sa-token"}
    gets = [r for r in state.requests if r[0] == "GET"]
    assert len(gets) == 3
    assert "labelSelector=app.kubernetes.io%2Fcomponent%3Dscaling" in gets[0][1]


@pytest.mark.integration
def test_the_hook_script_treats_a_missing_deployment_as_scaled_down(
    fake_api: tuple[FakeApi, dict[str, str]], script: ModuleType
) -> None:
    state, environ = fake_api
    state.deployment_status = 404
    state.pods_left = 0
    assert script.main(environ) == 0


@pytest.mark.integration
def test_the_hook_script_fails_when_the_pod_outlives_the_wait(
    fake_api: tuple[FakeApi, dict[str, str]],
    script: ModuleType,
    capsys: pytest.CaptureFixture[str],
) -> None:
    state, environ = fake_api
    state.pods_left = 10**6
    assert script.main(environ | {"WAIT_SECONDS": "0.2"}) == 1
    last = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert last["event"] == "hook_failed" and "still running" in last["reason"]


@pytest.mark.integration
def test_the_hook_script_fails_when_the_patch_is_forbidden(
    fake_api: tuple[FakeApi, dict[str, str]], script: ModuleType
) -> None:
    state, environ = fake_api
    state.deployment_status = 403
    assert script.main(environ) == 1
    assert [r[0] for r in state.requests] == ["PATCH"]
