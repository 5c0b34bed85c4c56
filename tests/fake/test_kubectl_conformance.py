"""Real kubectl 1.37 against the fake Kubernetes API server: what a user sees is what a real
kube-apiserver would make kubectl print and do.

Each test runs a kubectl command as the kubectl reference documents it
(https://kubernetes.io/docs/reference/kubectl/) and asserts kubectl's output, exit status
and the cluster's state afterwards. The tests taking `target` run twice, against the fake
and against a real kube-apiserver (the real tier), and assert the same on both, so an
output of the fake that differs fails; each works in a namespace of its own there. The few
that take `kubectl` and `cluster` run against the fake alone, each saying why.
"""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from sandbox import objects
from sandbox.kube import FakeKube, auth
from tests.kubectl import (
    COMMAND_TIMEOUT,
    PUBLISHED_CONFIG_MAPS,
    ROOT,
    Kubectl,
    Streaming,
    Target,
)
from tests.waiting import wait_until

DNS_SUBDOMAIN_MESSAGE = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, "
    "'-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', "
    "regex used for validation is "
    r"'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
)
# A cascade on a real server waits for its garbage collector.
CASCADE_TIMEOUT = 30.0


@pytest.fixture
def cluster(kubectl_kube: FakeKube, kubectl: Kubectl) -> FakeKube:
    """The fake behind `kubectl`, reset to a fresh cluster by the `kubectl` fixture."""
    return kubectl_kube


def manifest(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return str(path)


def config_map(name: str, namespace: str | None = None, **labels: str) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name, "labels": labels}
    if namespace:
        metadata["namespace"] = namespace
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": metadata,
        "data": {"mode": "fast", "size": "10"},
    }


def deployment(name: str, *, replicas: int = 3, ready: int = 2) -> dict[str, Any]:
    labels = {"app": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": "default", "labels": labels},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "containers": [
                        {"name": "app", "image": "nginx:1.27"},
                        {"name": "sidecar", "image": "envoy:1.30"},
                    ]
                },
            },
        },
        "status": {
            "replicas": replicas,
            "updatedReplicas": replicas,
            "readyReplicas": ready,
            "availableReplicas": ready,
        },
    }


def deployment_with_dependents(target: Target) -> tuple[list[str], list[str]]:
    """Deployment `web`, one ReplicaSet and two Pods, linked by ownerReferences; their
    names. A real server's Deployment and ReplicaSet controllers make them; on the fake,
    which has neither, the test makes them as those controllers would."""
    web = deployment("web", replicas=2)
    del web["metadata"]["namespace"], web["status"]
    owner = target.create(web)
    if target.name == "real":
        wait_until(
            lambda: (
                len(target.names("apps/v1", "ReplicaSet")) == 1
                and len(target.names("v1", "Pod")) == 2
            ),
            timeout=CASCADE_TIMEOUT,
        )
    else:
        replica_set = target.create(
            {
                "apiVersion": "apps/v1",
                "kind": "ReplicaSet",
                "metadata": {
                    "name": "web-5d4f",
                    "labels": {"app": "web"},
                    "ownerReferences": objects.controlled_by(owner, block_deletion=True),
                },
                "spec": {
                    "replicas": 2,
                    "selector": {"matchLabels": {"app": "web"}},
                    "template": owner["spec"]["template"],
                },
            }
        )
        for pod in ("web-5d4f-a", "web-5d4f-b"):
            target.create(
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": {
                        "name": pod,
                        "labels": {"app": "web"},
                        "ownerReferences": objects.controlled_by(replica_set, block_deletion=True),
                    },
                    "spec": {"containers": [{"name": "app", "image": "nginx:1.27"}]},
                }
            )
    return target.names("apps/v1", "ReplicaSet"), target.names("v1", "Pod")


def columns(line: str) -> list[str]:
    return line.split()


def rows(out: str) -> list[str]:
    """kubectl's lines without the rows of the ConfigMaps a real cluster publishes."""
    return [line for line in out.splitlines() if not set(columns(line)) & PUBLISHED_CONFIG_MAPS]


def published(name: str) -> bool:
    return name.split("/")[-1] in PUBLISHED_CONFIG_MAPS


def table(out: str) -> list[dict[str, str]]:
    """kubectl's table as rows by column name, cut where the header's columns start (a
    cell may hold spaces: `cpu: <unknown>/80%`)."""
    header, *lines = out.splitlines()
    starts = [i for i, c in enumerate(header) if c != " " and (i == 0 or header[i - 1] == " ")]
    bounds = list(zip(starts, [*starts[1:], None], strict=True))
    return [{header[a:b].strip(): line[a:b].strip() for a, b in bounds} for line in lines]


# --- version and discovery ----------------------------------------------------------------
# https://kubernetes.io/docs/reference/kubectl/generated/kubectl_version/


def test_kubectl_version_shows_the_server_version(target: Target) -> None:
    out = target.kubectl.ok("version")
    assert "Client Version: v1.37." in out
    assert f"Server Version: {target.version}" in out


def test_get_raw_version_prints_the_servers_version_document(target: Target) -> None:
    # https://kubernetes.io/docs/reference/kubectl/generated/kubectl_get/ (--raw)
    version = json.loads(target.kubectl.ok("get", "--raw", "/version"))
    minor = target.version.split(".")[1]
    assert (version["major"], version["minor"], version["gitVersion"]) == (
        "1",
        minor,
        target.version,
    )


def test_api_resources_lists_the_served_kinds_from_discovery(target: Target) -> None:
    # https://kubernetes.io/docs/reference/kubectl/generated/kubectl_api-resources/
    rows = [columns(line) for line in target.kubectl.ok("api-resources").splitlines()]
    assert rows[0] == ["NAME", "SHORTNAMES", "APIVERSION", "NAMESPACED", "KIND"]
    assert ["deployments", "deploy", "apps/v1", "true", "Deployment"] in rows
    assert ["namespaces", "ns", "v1", "false", "Namespace"] in rows
    assert ["horizontalpodautoscalers", "hpa", "autoscaling/v2", "true",
            "HorizontalPodAutoscaler"] in rows  # fmt: skip


# --- get and list -------------------------------------------------------------------------
# https://kubernetes.io/docs/reference/kubectl/generated/kubectl_get/


def test_get_prints_the_servers_table_columns_for_config_maps(target: Target) -> None:
    # kubectl asks for a Table (as=Table;g=meta.k8s.io) and prints the server's columns:
    # pkg/printers/internalversion/printers.go, configMapColumnDefinitions.
    target.create(config_map("settings"))
    header, row = rows(target.kubectl.ok("get", "configmaps"))
    assert columns(header) == ["NAME", "DATA", "AGE"]
    assert columns(row)[:2] == ["settings", "2"]


def test_get_prints_the_servers_table_columns_for_deployments(target: Target) -> None:
    # pkg/printers/internalversion/printers.go, deploymentColumnDefinitions. The status
    # printed is the Deployment controller's: three replicas made, none ready (no kubelet).
    target.kubectl.ok("create", "deployment", "web", "--image=nginx", "--replicas=3")
    made = {"replicas": 3, "updatedReplicas": 3, "unavailableReplicas": 3}
    if target.name == "fake":  # no Deployment controller: the test writes its status
        target.api.patch("apps/v1", "Deployment", target.namespace, "web", {"status": made})

    def status() -> Any:
        return target.api.get("apps/v1", "Deployment", target.namespace, "web").get("status")

    wait_until(lambda: (status() or {}).get("updatedReplicas") == 3, timeout=CASCADE_TIMEOUT)
    header, row = target.kubectl.ok("get", "deployments").splitlines()
    assert columns(header) == ["NAME", "READY", "UP-TO-DATE", "AVAILABLE", "AGE"]
    assert columns(row)[:4] == ["web", "0/3", "3", "0"]


def test_get_prints_an_hpa_with_the_defaults_the_server_gave_it(
    target: Target, tmp_path: Path
) -> None:
    # minReplicas defaults to 1 and metrics to CPU at 80%:
    # https://kubernetes.io/docs/reference/kubernetes-api/workload-resources/horizontal-pod-autoscaler-v2/
    # Columns: pkg/printers/internalversion/printers.go, horizontalPodAutoscalerColumnDefinitions.
    path = manifest(
        tmp_path,
        "hpa.yaml",
        """\
        apiVersion: autoscaling/v2
        kind: HorizontalPodAutoscaler
        metadata:
          name: web
        spec:
          scaleTargetRef: {apiVersion: apps/v1, kind: Deployment, name: web}
          maxReplicas: 5
        """,
    )
    target.kubectl.ok("apply", "-f", path)
    [row] = table(target.kubectl.ok("get", "hpa"))
    assert list(row) == ["NAME", "REFERENCE", "TARGETS", "MINPODS", "MAXPODS", "REPLICAS", "AGE"]
    assert (row["NAME"], row["REFERENCE"], row["MINPODS"], row["MAXPODS"]) == (
        "web",
        "Deployment/web",
        "1",
        "5",
    )
    assert row["TARGETS"] == "cpu: <unknown>/80%"
    spec = target.kubectl.json("get", "hpa", "web")["spec"]
    assert spec["minReplicas"] == 1
    assert spec["metrics"] == [
        {
            "type": "Resource",
            "resource": {
                "name": "cpu",
                "target": {"type": "Utilization", "averageUtilization": 80},
            },
        }
    ]


def test_get_all_namespaces_adds_a_namespace_column(target: Target) -> None:
    other = target.unique("other")
    target.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": other}})
    try:
        target.create(config_map("a", target.namespace, test=target.namespace))
        target.create(config_map("b", other, test=target.namespace))
        selector = f"test={target.namespace}"
        header, *lines = target.kubectl.ok("get", "configmaps", "-A", "-l", selector).splitlines()
    finally:
        target.kubectl.run("delete", "namespace", other, "--wait=false")
    assert columns(header) == ["NAMESPACE", "NAME", "DATA", "AGE"]
    assert [columns(line)[:2] for line in lines] == [[target.namespace, "a"], [other, "b"]]


def test_get_output_json_prints_a_list_of_the_objects(target: Target) -> None:
    target.create(config_map("a"))
    target.create(config_map("b"))
    listed = target.kubectl.json("get", "configmaps")
    assert listed["kind"] == "List"
    items = [item for item in listed["items"] if not published(item["metadata"]["name"])]
    assert [item["metadata"]["name"] for item in items] == ["a", "b"]
    assert all(item["kind"] == "ConfigMap" for item in items)
    assert items[0]["data"] == {"mode": "fast", "size": "10"}


def test_get_output_name_prints_kind_slash_name(target: Target) -> None:
    target.create(config_map("a"))
    target.kubectl.ok("create", "deployment", "web", "--image=nginx")
    out = target.kubectl.ok("get", "configmaps,deployments", "-o", "name")
    assert [name for name in out.splitlines() if not published(name)] == [
        "configmap/a",
        "deployment.apps/web",
    ]


def test_get_with_label_selectors_lists_only_the_matching_objects(target: Target) -> None:
    # https://kubernetes.io/docs/concepts/overview/working-with-objects/labels/#label-selectors
    target.create(config_map("web", tier="web"))
    target.create(config_map("db", tier="db"))
    target.create(config_map("old", tier="web", legacy="true"))
    assert target.kubectl.ok("get", "cm", "-l", "tier=web", "-o", "name").split() == [
        "configmap/old",
        "configmap/web",
    ]
    set_based = target.kubectl.ok("get", "cm", "-l", "tier in (web,db),!legacy", "-o", "name")
    assert set_based.split() == ["configmap/db", "configmap/web"]


def test_get_with_a_field_selector_lists_only_the_matching_objects(target: Target) -> None:
    # https://kubernetes.io/docs/concepts/overview/working-with-objects/field-selectors/
    target.create(config_map("a"))
    target.create(config_map("b"))
    out = target.kubectl.ok("get", "cm", "--field-selector", "metadata.name!=a", "-o", "name")
    assert [name for name in out.split() if not published(name)] == ["configmap/b"]


def test_get_with_an_unsupported_field_selector_is_refused_by_the_server(
    target: Target,
) -> None:
    # Only the fields each kind registers are selectable; others are 400 BadRequest.
    err = target.kubectl.fails("get", "cm", "--field-selector", "data.mode=fast")
    assert err.strip() == (
        'Error from server (BadRequest): Unable to find "/v1, Resource=configmaps" '
        'that match label selector "", field selector "data.mode=fast": '
        '"data.mode" is not a known field selector: only "metadata.name", "metadata.namespace"'
    )


def test_get_with_a_chunk_size_pages_through_every_object(target: Target) -> None:
    # --chunk-size: https://kubernetes.io/docs/reference/using-api/api-concepts/#retrieving-large-results-sets-in-chunks
    expected = [f"item-{i:02}" for i in range(25)]
    for name in expected:
        target.create(config_map(name))
    target.mark()
    out = target.kubectl.ok("get", "cm", "--chunk-size=10", "-o", "name")
    assert [name for name in out.split() if not published(name)] == [
        f"configmap/{name}" for name in expected
    ]

    def lists() -> list[Any]:
        return [r for r in target.requests() if r.path.endswith("/configmaps")]

    wait_until(lambda: len(lists()) == 3)  # a real server's audit log lags a little
    assert [r.query.get("limit") for r in lists()] == ["10", "10", "10"]
    assert ["continue" in r.query for r in lists()] == [False, True, True]


# --- watch --------------------------------------------------------------------------------
# https://kubernetes.io/docs/reference/kubectl/generated/kubectl_get/ (--watch)


def test_get_watch_prints_the_object_then_each_change_made_to_it(
    target: Target, streaming: Callable[..., Streaming]
) -> None:
    target.create(config_map("settings"))
    target.mark()
    watch = streaming(target.kubectl, "get", "configmap", "settings", "-w", "--output-watch-events")
    assert columns(watch.line())[:2] == ["EVENT", "NAME"]
    assert columns(watch.line())[:2] == ["ADDED", "settings"]
    # kubectl prints the object it got, then watches from its resourceVersion: change it
    # only once watched.
    target.wait_for_watch("configmaps")
    target.api.patch("v1", "ConfigMap", target.namespace, "settings", {"data": {"extra": "1"}})
    assert columns(watch.line())[:2] == ["MODIFIED", "settings"]
    target.kubectl.ok("delete", "configmap", "settings")
    assert columns(watch.line())[:2] == ["DELETED", "settings"]


def test_get_watch_rows_carry_the_servers_table_columns(
    target: Target, streaming: Callable[..., Streaming]
) -> None:
    target.create(config_map("settings"))
    target.mark()
    watch = streaming(target.kubectl, "get", "configmap", "settings", "-w")
    assert columns(watch.line()) == ["NAME", "DATA", "AGE"]
    assert columns(watch.line())[:2] == ["settings", "2"]
    target.wait_for_watch("configmaps")
    target.api.patch("v1", "ConfigMap", target.namespace, "settings", {"data": {"extra": "1"}})
    assert columns(watch.line())[:2] == ["settings", "3"]


# --- create and apply ---------------------------------------------------------------------
# https://kubernetes.io/docs/tasks/manage-kubernetes-objects/declarative-config/

SETTINGS = """\
    apiVersion: v1
    kind: ConfigMap
    metadata:
      name: settings
    data:
      mode: fast
"""


def test_create_from_a_manifest_creates_the_object_once(target: Target, tmp_path: Path) -> None:
    path = manifest(tmp_path, "settings.yaml", SETTINGS)
    assert target.kubectl.ok("create", "-f", path) == "configmap/settings created\n"
    made = target.api.get("v1", "ConfigMap", target.namespace, "settings")
    assert made["data"] == {"mode": "fast"}
    err = target.kubectl.fails("create", "-f", path)
    assert err.strip() == (
        f'Error from server (AlreadyExists): error when creating "{path}": '
        'configmaps "settings" already exists'
    )


def test_create_from_standard_input_takes_a_json_manifest(target: Target) -> None:
    out = target.kubectl.ok("create", "-f", "-", stdin=json.dumps(config_map("settings")))
    assert out == "configmap/settings created\n"
    made = target.api.get("v1", "ConfigMap", target.namespace, "settings")
    assert made["data"]["mode"] == "fast"


def test_apply_creates_then_leaves_unchanged_then_configures(
    target: Target, tmp_path: Path
) -> None:
    kubectl = target.kubectl
    path = manifest(tmp_path, "settings.yaml", SETTINGS)
    assert kubectl.ok("apply", "-f", path) == "configmap/settings created\n"
    assert kubectl.ok("apply", "-f", path) == "configmap/settings unchanged\n"
    manifest(tmp_path, "settings.yaml", SETTINGS.replace("fast", "slow"))
    assert kubectl.ok("apply", "-f", path) == "configmap/settings configured\n"
    applied = target.api.get("v1", "ConfigMap", target.namespace, "settings")
    assert applied["data"] == {"mode": "slow"}
    annotations = applied["metadata"]["annotations"]
    assert '"mode":"slow"' in annotations["kubectl.kubernetes.io/last-applied-configuration"]


def test_apply_of_a_manifest_with_an_unknown_field_is_refused_by_strict_validation(
    target: Target, tmp_path: Path
) -> None:
    # kubectl validates with fieldValidation=Strict (--validate=strict, the default) once
    # /openapi/v3 says the server supports it:
    # https://kubernetes.io/docs/reference/using-api/api-concepts/#field-validation
    path = manifest(tmp_path, "typo.yaml", SETTINGS.replace("\n    data:", "\n    dataa:"))
    target.mark()
    err = target.kubectl.fails("apply", "-f", path)
    assert err.strip() == (
        f'Error from server (BadRequest): error when creating "{path}": ConfigMap in version '
        '"v1" cannot be handled as a ConfigMap: strict decoding error: unknown field "dataa"'
    )
    assert target.names("v1", "ConfigMap") == []
    wait_until(lambda: any(r.method == "POST" for r in target.requests()))
    writes = [r for r in target.requests() if r.method == "POST"]
    assert writes and all(r.query.get("fieldValidation") == "Strict" for r in writes)
    assert any(r.path.startswith("/openapi/v3") for r in target.requests())


def test_apply_with_server_dry_run_stores_nothing(target: Target, tmp_path: Path) -> None:
    # https://kubernetes.io/docs/reference/using-api/api-concepts/#dry-run
    path = manifest(tmp_path, "settings.yaml", SETTINGS)
    target.mark()
    out = target.kubectl.ok("apply", "-f", path, "--dry-run=server")
    assert out == "configmap/settings created (server dry run)\n"
    assert target.names("v1", "ConfigMap") == []

    def dry_runs() -> list[str | None]:
        return [r.query.get("dryRun") for r in target.requests() if r.method == "POST"]

    wait_until(lambda: dry_runs() != [])
    assert dry_runs() == ["All"]


def test_an_invalid_hpa_is_refused_with_every_cause_the_server_gives(
    target: Target, tmp_path: Path
) -> None:
    # 422 Invalid with details.causes, which kubectl prints one per line:
    # https://github.com/kubernetes/community/blob/master/contributors/devel/sig-architecture/api-conventions.md#http-status-codes
    # pkg/apis/autoscaling/validation/validation.go (maxReplicas >= minReplicas).
    path = manifest(
        tmp_path,
        "hpa.yaml",
        """\
        apiVersion: autoscaling/v2
        kind: HorizontalPodAutoscaler
        metadata:
          name: Bad_Name
        spec:
          scaleTargetRef: {apiVersion: apps/v1, kind: Deployment, name: web}
          minReplicas: 7
          maxReplicas: 5
        """,
    )
    err = target.kubectl.fails("create", "-f", path)
    assert err == (
        'The HorizontalPodAutoscaler "Bad_Name" is invalid: \n'
        f'* metadata.name: Invalid value: "Bad_Name": {DNS_SUBDOMAIN_MESSAGE}\n'
        "* spec.maxReplicas: Invalid value: 5: must be greater than or equal to `minReplicas`\n"
    )
    assert target.names("autoscaling/v2", "HorizontalPodAutoscaler") == []


def test_create_into_a_namespace_that_does_not_exist_is_not_found(
    target: Target, tmp_path: Path
) -> None:
    # https://kubernetes.io/docs/concepts/overview/working-with-objects/namespaces/
    nope = target.unique("nope")
    path = manifest(
        tmp_path,
        "nope.yaml",
        SETTINGS.replace("name: settings", f"name: settings\n      namespace: {nope}"),
    )
    err = target.kubectl.fails("create", "-f", path)
    assert err.strip() == (
        f'Error from server (NotFound): error when creating "{path}": namespaces "{nope}" not found'
    )


# --- patch, replace, scale ----------------------------------------------------------------


def test_patch_of_each_type_changes_the_object(target: Target) -> None:
    # https://kubernetes.io/docs/tasks/manage-kubernetes-objects/update-api-object-kubectl-patch/
    web = deployment("web")
    del web["metadata"]["namespace"]
    target.create(web)
    kubectl = target.kubectl
    strategic = '{"spec":{"template":{"spec":{"containers":[{"name":"app","image":"nginx:2"}]}}}}'
    assert kubectl.ok("patch", "deployment", "web", "-p", strategic) == (
        "deployment.apps/web patched\n"
    )
    patched = target.api.get("apps/v1", "Deployment", target.namespace, "web")
    containers = patched["spec"]["template"]["spec"]["containers"]
    # A strategic merge patch merges containers by name: the sidecar stays.
    assert [(c["name"], c["image"]) for c in containers] == [
        ("app", "nginx:2"),
        ("sidecar", "envoy:1.30"),
    ]
    merge = '{"metadata":{"labels":{"tier":"web"}}}'
    kubectl.ok("patch", "deployment", "web", "--type=merge", "-p", merge)
    as_json = '[{"op":"replace","path":"/spec/replicas","value":5}]'
    kubectl.ok("patch", "deployment", "web", "--type=json", "-p", as_json)
    patched = target.api.get("apps/v1", "Deployment", target.namespace, "web")
    assert patched["metadata"]["labels"] == {"app": "web", "tier": "web"}
    assert patched["spec"]["replicas"] == 5


def test_patch_that_changes_nothing_says_no_change(target: Target) -> None:
    target.create(config_map("settings"))
    out = target.kubectl.ok("patch", "cm", "settings", "-p", '{"data":{"mode":"fast"}}')
    assert out == "configmap/settings patched (no change)\n"


def test_label_adds_a_label_and_refuses_to_overwrite_one(target: Target) -> None:
    # https://kubernetes.io/docs/reference/kubectl/generated/kubectl_label/
    target.create(config_map("settings", tier="web"))
    kubectl = target.kubectl
    assert kubectl.ok("label", "cm", "settings", "team=shop") == "configmap/settings labeled\n"
    err = kubectl.fails("label", "cm", "settings", "tier=db")
    assert err == ("error: 'tier' already has a value (web), and --overwrite is false\n")
    made = target.api.get("v1", "ConfigMap", target.namespace, "settings")
    assert made["metadata"]["labels"] == {"tier": "web", "team": "shop"}


def test_replace_with_a_stale_resource_version_is_a_conflict(
    target: Target, tmp_path: Path
) -> None:
    # Optimistic concurrency: https://kubernetes.io/docs/reference/using-api/api-concepts/#resource-versions
    target.create(config_map("settings"))
    stale = target.kubectl.json("get", "cm", "settings")
    target.api.patch("v1", "ConfigMap", target.namespace, "settings", {"data": {"mode": "slow"}})
    stale["data"]["mode"] = "medium"
    path = tmp_path / "stale.json"
    path.write_text(json.dumps(stale))
    err = target.kubectl.fails("replace", "-f", str(path))
    assert err.strip() == (
        f'Error from server (Conflict): error when replacing "{path}": Operation cannot be '
        'fulfilled on configmaps "settings": the object has been modified; please apply '
        "your changes to the latest version and try again"
    )
    made = target.api.get("v1", "ConfigMap", target.namespace, "settings")
    assert made["data"]["mode"] == "slow"


def test_scale_sets_the_replicas_through_the_scale_subresource(target: Target) -> None:
    # https://kubernetes.io/docs/reference/kubectl/generated/kubectl_scale/
    target.kubectl.ok("create", "deployment", "web", "--image=nginx")
    target.mark()
    assert target.kubectl.ok("scale", "deployment", "web", "--replicas=3") == (
        "deployment.apps/web scaled\n"
    )
    made = target.api.get("apps/v1", "Deployment", target.namespace, "web")
    assert made["spec"]["replicas"] == 3

    def writes() -> list[str]:
        # kubectl's own, not a real server's controllers' (which write status and others)
        return [
            r.path
            for r in target.requests()
            if r.method in ("PUT", "PATCH") and "/deployments/" in r.path
            and not r.path.endswith("/status")
        ]  # fmt: skip

    wait_until(lambda: writes() != [])
    assert writes() == [f"/apis/apps/v1/namespaces/{target.namespace}/deployments/web/scale"]


# --- delete -------------------------------------------------------------------------------
# https://kubernetes.io/docs/reference/kubectl/generated/kubectl_delete/


def test_delete_with_server_dry_run_deletes_nothing(target: Target) -> None:
    target.create(config_map("settings"))
    out = target.kubectl.ok("delete", "cm", "settings", "--dry-run=server")
    assert out == (
        f'configmap "settings" deleted from {target.namespace} namespace (server dry run)\n'
    )
    made = target.api.get("v1", "ConfigMap", target.namespace, "settings")
    assert made["data"] == {"mode": "fast", "size": "10"}


def test_delete_of_an_object_with_a_finalizer_waits_for_the_finalizer(target: Target) -> None:
    # https://kubernetes.io/docs/concepts/overview/working-with-objects/finalizers/
    held = config_map("settings")
    held["metadata"]["finalizers"] = ["example.com/keep"]
    target.create(held)
    kubectl = target.kubectl
    out = kubectl.ok("delete", "cm", "settings", "--wait=false")
    assert out == f'configmap "settings" deleted from {target.namespace} namespace\n'
    terminating = kubectl.json("get", "cm", "settings")
    assert terminating["metadata"]["deletionTimestamp"]
    kubectl.ok("patch", "cm", "settings", "--type=merge", "-p", '{"metadata":{"finalizers":null}}')
    err = kubectl.fails("get", "cm", "settings")
    assert err.strip() == 'Error from server (NotFound): configmaps "settings" not found'


def test_delete_of_a_deployment_deletes_its_replica_sets_and_pods(target: Target) -> None:
    # Background cascading deletion by the garbage collector:
    # https://kubernetes.io/docs/concepts/architecture/garbage-collection/#cascading-deletion
    deployment_with_dependents(target)
    out = target.kubectl.ok("delete", "deployment", "web")
    assert out == f'deployment.apps "web" deleted from {target.namespace} namespace\n'
    wait_until(
        lambda: not target.names("apps/v1", "ReplicaSet") and not target.names("v1", "Pod"),
        timeout=CASCADE_TIMEOUT,
    )
    assert target.names("apps/v1", "Deployment") == []


def test_delete_with_cascade_orphan_leaves_the_dependents_without_their_owner(
    target: Target,
) -> None:
    # https://kubernetes.io/docs/tasks/administer-cluster/use-cascading-deletion/#set-orphan-deletion-policy
    replica_sets, pods = deployment_with_dependents(target)
    target.kubectl.ok("delete", "deployment", "web", "--cascade=orphan")
    wait_until(lambda: not target.names("apps/v1", "Deployment"), timeout=CASCADE_TIMEOUT)

    def orphan() -> dict[str, Any]:
        return dict(target.api.get("apps/v1", "ReplicaSet", target.namespace, replica_sets[0]))

    wait_until(lambda: not orphan()["metadata"].get("ownerReferences"), timeout=CASCADE_TIMEOUT)
    assert target.names("apps/v1", "ReplicaSet") == replica_sets
    assert target.names("v1", "Pod") == pods


def test_delete_of_a_namespace_deletes_what_is_in_it(target: Target) -> None:
    # https://kubernetes.io/docs/concepts/overview/working-with-objects/namespaces/
    # kubectl waits (--wait=true) until the namespace is gone, not only Terminating.
    team = target.unique("team")
    target.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": team}})
    target.create(config_map("settings", team))
    assert target.kubectl.ok("delete", "namespace", team) == f'namespace "{team}" deleted\n'
    err = target.kubectl.fails("get", "namespace", team)
    assert err == f'Error from server (NotFound): namespaces "{team}" not found\n'


# --- authentication -----------------------------------------------------------------------
# https://kubernetes.io/docs/reference/access-authn-authz/authentication/


def test_a_wrong_token_is_told_to_log_in(target: Target) -> None:
    # A 401 on discovery, the first request: kubectl prints client-go's message for a 401.
    done = target.kubectl.run("--token=not-a-token", "get", "configmaps")
    assert done.returncode == 1
    assert done.stdout == ""
    assert done.stderr.splitlines()[-1] == (
        "error: You must be logged in to the server "
        "(the server has asked for the client to provide credentials)"
    )


def test_a_token_revoked_after_discovery_is_unauthorized(
    kubectl: Kubectl, cluster: FakeKube
) -> None:
    # Fake only: a real server caches a successful token authentication for 10 s
    # (kubernetes/kubernetes#50258), so a revoked token keeps working there for up to 10 s;
    # the fake refuses it at once.
    # With discovery cached, the list itself gets the 401 Status, whose message kubectl shows.
    kubectl.ok("get", "configmaps")
    cluster.remove_token(cluster.token)
    err = kubectl.fails("get", "configmaps")
    assert err == "error: You must be logged in to the server (Unauthorized)\n"


# --- typed commands, on the fake and on a real server -------------------------------------
# kubectl's typed commands send protobuf (Content-Type: application/vnd.kubernetes.protobuf)
# and do not fall back to JSON on a 415: each runs against both servers, which must print
# the same and leave the same object.
# https://kubernetes.io/docs/reference/using-api/api-concepts/#protobuf-encoding


def as_made(obj: dict[str, Any]) -> dict[str, Any]:
    """An object without what differs between any two servers (its identity, times and
    status) or what the real server's controllers add later; its field managers kept as
    (manager, operation)."""
    metadata = dict(obj["metadata"])
    managers = [
        (m["manager"], m["operation"])
        for m in metadata.pop("managedFields", [])
        if m["manager"] != "kube-controller-manager"
    ]
    for key in ("uid", "resourceVersion", "creationTimestamp", "namespace"):
        metadata.pop(key, None)
    annotations = {
        key: value
        for key, value in metadata.pop("annotations", {}).items()
        if key != "deployment.kubernetes.io/revision"  # the Deployment controller's
    }
    if annotations:
        metadata["annotations"] = annotations
    made = {key: value for key, value in obj.items() if key != "status"}
    return made | {"metadata": metadata, "managers": managers}


def test_create_configmap_from_a_literal_makes_the_same_config_map_on_both_servers(
    target: Target,
) -> None:
    out = target.kubectl.ok("create", "configmap", "settings", "--from-literal=mode=fast")
    assert out == "configmap/settings created\n"
    made = target.api.get("v1", "ConfigMap", target.namespace, "settings")
    assert as_made(made) == {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "settings"},
        "data": {"mode": "fast"},
        "managers": [("kubectl-create", "Update")],
    }


def test_create_secret_generic_makes_the_same_opaque_secret_on_both_servers(
    target: Target,
) -> None:
    out = target.kubectl.ok("create", "secret", "generic", "creds", "--from-literal=key=s3")
    assert out == "secret/creds created\n"
    made = target.api.get("v1", "Secret", target.namespace, "creds")
    assert as_made(made) == {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "creds"},
        "data": {"key": "czM="},  # base64 of s3
        "type": "Opaque",
        "managers": [("kubectl-create", "Update")],
    }


def test_auth_can_i_asks_the_server_and_prints_its_answer_on_both_servers(
    target: Target,
) -> None:
    # A SelfSubjectAccessReview; the fake's RBAC is off and the real tier's user an admin.
    assert target.kubectl.ok("auth", "can-i", "create", "configmaps") == "yes\n"


def test_create_deployment_makes_the_same_defaulted_deployment_on_both_servers(
    target: Target,
) -> None:
    out = target.kubectl.ok("create", "deployment", "web", "--image=nginx")
    assert out == "deployment.apps/web created\n"
    made = target.api.get("apps/v1", "Deployment", target.namespace, "web")
    container = {
        "image": "nginx",
        "imagePullPolicy": "Always",
        "name": "nginx",
        "resources": {},
        "terminationMessagePath": "/dev/termination-log",
        "terminationMessagePolicy": "File",
    }
    assert as_made(made) == {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "labels": {"app": "web"}, "generation": 1},
        "spec": {
            "progressDeadlineSeconds": 600,
            "replicas": 1,
            "revisionHistoryLimit": 10,
            "selector": {"matchLabels": {"app": "web"}},
            "strategy": {
                "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"},
                "type": "RollingUpdate",
            },
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {
                    "containers": [container],
                    "dnsPolicy": "ClusterFirst",
                    "restartPolicy": "Always",
                    "schedulerName": "default-scheduler",
                    "securityContext": {},
                    "terminationGracePeriodSeconds": 30,
                },
            },
        },
        "managers": [("kubectl-create", "Update")],
    }


def test_autoscale_makes_the_same_hpa_on_both_servers(target: Target) -> None:
    target.kubectl.ok("create", "deployment", "web", "--image=nginx")
    out = target.kubectl.ok("autoscale", "deployment", "web", "--min=2", "--max=5")
    assert out == "horizontalpodautoscaler.autoscaling/web autoscaled\n"
    made = target.api.get("autoscaling/v2", "HorizontalPodAutoscaler", target.namespace, "web")
    assert as_made(made) == {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": "web"},
        "spec": {
            "maxReplicas": 5,
            "metrics": [
                {
                    "resource": {
                        "name": "cpu",
                        "target": {"averageUtilization": 80, "type": "Utilization"},
                    },
                    "type": "Resource",
                }
            ],
            "minReplicas": 2,
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
        },
        "managers": [("kubectl-autoscale", "Update")],
    }


def test_create_namespace_makes_the_same_active_namespace_on_both_servers(
    target: Target,
) -> None:
    name = target.unique("made")
    try:
        assert target.kubectl.ok("create", "namespace", name) == f"namespace/{name} created\n"
        made = target.api.get("v1", "Namespace", None, name)
    finally:
        target.kubectl.run("delete", "namespace", name, "--wait=false")
    assert made["status"] == {"phase": "Active"}
    assert as_made(made) == {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": name, "labels": {"kubernetes.io/metadata.name": name}},
        "spec": {"finalizers": ["kubernetes"]},
        "managers": [("kubectl-create", "Update")],
    }


# --- server-side apply, on the fake and on a real server -----------------------------------
# https://kubernetes.io/docs/reference/using-api/server-side-apply/

CONFLICT_ADVICE = """\
Please review the fields above--they currently have other managers. Here
are the ways you can resolve this warning:
* If you intend to manage all of these fields, please re-run the apply
  command with the `--force-conflicts` flag.
* If you do not intend to manage all of the fields, please edit your
  manifest to remove references to the fields that should keep their
  current managers.
* You may co-own fields by updating your manifest to match the existing
  value; in this case, you'll become the manager if the other manager(s)
  stop managing the field (remove it from their configuration).
See https://kubernetes.io/docs/reference/using-api/server-side-apply/#conflicts
"""


def field_managers(obj: dict[str, Any]) -> list[tuple[str, str, Any]]:
    return [(m["manager"], m["operation"], m["fieldsV1"]) for m in obj["metadata"]["managedFields"]]


def test_server_side_apply_conflicts_forces_and_prunes_as_on_a_real_server(
    target: Target, tmp_path: Path
) -> None:
    kubectl = target.kubectl
    mine = manifest(
        tmp_path,
        "mine.yaml",
        SETTINGS.replace("name: settings", "name: settings\n      labels: {team: shop}"),
    )
    theirs = manifest(tmp_path, "theirs.yaml", SETTINGS.replace("fast", "slow"))
    applied = "configmap/settings serverside-applied\n"
    assert kubectl.ok("apply", "--server-side", "-f", mine) == applied
    assert kubectl.ok("apply", "--server-side", "-f", mine) == applied
    other = ("apply", "--server-side", "--field-manager=other", "-f", theirs)
    done = kubectl.run(*other)
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr == (
        'error: Apply failed with 1 conflict: conflict with "kubectl": .data.mode\n'
        + CONFLICT_ADVICE
    )
    assert kubectl.ok(*other, "--force-conflicts") == applied
    # The forced field moved to `other`; `kubectl` no longer applying the label prunes it.
    nothing = SETTINGS.split("    data:")[0]
    kubectl.ok("apply", "--server-side", "-f", manifest(tmp_path, "none.yaml", nothing))
    made = target.api.get("v1", "ConfigMap", target.namespace, "settings")
    assert made["data"] == {"mode": "slow"}
    assert "labels" not in made["metadata"]
    assert field_managers(made) == [
        ("other", "Apply", {"f:data": {"f:mode": {}}}),
    ]


def test_server_side_apply_over_a_created_field_names_the_updater_and_its_version(
    target: Target, tmp_path: Path
) -> None:
    target.kubectl.ok("create", "configmap", "settings", "--from-literal=mode=slow")
    done = target.kubectl.run(
        "apply", "--server-side", "-f", manifest(tmp_path, "s.yaml", SETTINGS)
    )
    assert done.returncode == 1
    assert done.stderr.splitlines()[0] == (
        'error: Apply failed with 1 conflict: conflict with "kubectl-create" using v1: .data.mode'
    )


API = """\
    apiVersion: apps/v1
    kind: Deployment
    metadata: {name: api}
    spec:
      replicas: 0
      selector: {matchLabels: {app: api}}
      template:
        metadata: {labels: {app: api}}
        spec:
          containers: [{name: app, image: "nginx:1"}, {name: side, image: "envoy:1"}]
"""


def test_server_side_apply_of_a_list_conflicts_on_its_item_on_a_real_server_whole_on_the_fake(
    target: Target, tmp_path: Path
) -> None:
    # A documented difference (docs/fake-kube.md): the fake owns a list as one field, where
    # a real server owns each item of an associative list (containers by name).
    mine = manifest(tmp_path, "mine.yaml", API)
    only_app = API.replace(', {name: side, image: "envoy:1"}', "").replace("nginx:1", "nginx:2")
    theirs = manifest(tmp_path, "theirs.yaml", only_app)
    applied = "deployment.apps/api serverside-applied\n"
    assert target.kubectl.ok("apply", "--server-side", "-f", mine) == applied
    done = target.kubectl.run("apply", "--server-side", "--field-manager=other", "-f", theirs)
    assert done.returncode == 1
    field = ".spec.template.spec.containers"
    if target.name == "real":
        field += '[name="app"].image'
    assert done.stderr.splitlines()[0] == (
        f'error: Apply failed with 1 conflict: conflict with "kubectl": {field}'
    )
    made = target.api.get("apps/v1", "Deployment", target.namespace, "api")
    containers = made["spec"]["template"]["spec"]["containers"]
    assert [(c["name"], c["image"]) for c in containers] == [
        ("app", "nginx:1"),
        ("side", "envoy:1"),
    ]


# --- the fake from its command line -------------------------------------------------------


@contextlib.contextmanager
def served(kubectl_binary: Path, tmp_path: Path, *switches: str) -> Iterator[Kubectl]:
    """`python -m sandbox.kube --kubeconfig FILE *switches`, and kubectl with that file."""
    config = tmp_path / "served-kubeconfig"
    command = [sys.executable, "-m", "sandbox.kube", "--kubeconfig", str(config), *switches]
    process = subprocess.Popen(
        command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        assert process.stdout is not None
        assert process.stdout.readline().startswith("URL http://127.0.0.1:")
        yield Kubectl(kubectl_binary, config, tmp_path / "cache")
    finally:
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=COMMAND_TIMEOUT)
    assert process.returncode == 0, stderr


def test_the_command_lines_kubeconfig_gets_kubectl_in_over_tls_as_on_a_cluster(
    kubectl_binary: Path, tmp_path: Path
) -> None:
    switches = ("--user-token", "other-token=alice", "--controller", "horizontal-pod-autoscaler")
    with served(kubectl_binary, tmp_path, *switches) as kubectl:
        cluster = json.loads(kubectl.kubeconfig.read_text())["clusters"][0]["cluster"]
        assert cluster["server"].startswith("https://127.0.0.1:")
        assert "certificate-authority-data" in cluster
        listed = kubectl.ok("get", "namespaces", "-o", "name").split()
        assert listed == ["namespace/default", "namespace/kube-public", "namespace/kube-system"]
        assert kubectl.ok("--token=other-token", "get", "ns", "default", "-o", "name") == (
            "namespace/default\n"
        )
        # The HPA controller runs: an HPA's minimum lifts its Deployment's replicas.
        kubectl.ok("create", "deployment", "web", "--image=nginx")
        kubectl.ok("autoscale", "deployment", "web", "--min=2", "--max=5")
        assert kubectl.ok("get", "deployment", "web", "-o", "jsonpath={.spec.replicas}") == "2"
        # Discovery is cached by now, so the list itself meets the 401.
        err = kubectl.fails("--token=unknown", "get", "ns")
        assert err == "error: You must be logged in to the server (Unauthorized)\n"


def test_the_command_lines_rbac_switch_authorizes_each_token_as_its_user(
    kubectl_binary: Path, tmp_path: Path
) -> None:
    switches = ("--rbac", "--token", "mine", "--user-token", "other-token=alice")
    with served(kubectl_binary, tmp_path, *switches) as kubectl:
        for token, user in (("mine", auth.DEFAULT_USER), ("other-token", "alice")):
            err = kubectl.fails(f"--token={token}", "get", "namespaces")
            assert err == (
                f'Error from server (Forbidden): namespaces is forbidden: User "{user}" '
                'cannot list resource "namespaces" in API group "" at the cluster scope\n'
            )
