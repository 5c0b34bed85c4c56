"""What kubectl and the HPA controller use beyond plain CRUD: the scale subresource, Table
answers, the media types a body may come in, and the HPA controller's clamping.

Each behaviour cites the Kubernetes documentation or source that says the real server does it.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from kubernetes import client

from kube import cluster
from kube.api import KubeApi
from sandbox.kube import FakeKube, tables

NS = "shop"
DEPLOYMENTS = f"/apis/apps/v1/namespaces/{NS}/deployments"


@pytest.fixture
def kube(kube: FakeKube) -> FakeKube:
    kube.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    return kube


@pytest.fixture(scope="module")
def apps(session_kube: FakeKube) -> Iterator[client.AppsV1Api]:
    with client.ApiClient(session_kube.client_configuration()) as api_client:
        yield client.AppsV1Api(api_client)


def deployment(name: str = "web", replicas: int = 2, **labels: str) -> dict[str, Any]:
    match = labels or {"app": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": match},
            "template": {
                "metadata": {"labels": match},
                "spec": {"containers": [{"name": "app", "image": "nginx"}]},
            },
        },
    }


# --- the scale subresource ---------------------------------------------------------------
# https://kubernetes.io/docs/reference/kubernetes-api/workload-resources/deployment-v1/#get-read-scale-of-the-specified-deployment
# pkg/registry/apps/deployment/storage/storage.go (scaleFromDeployment, scaleUpdatedObjectInfo)


def test_the_scale_of_a_deployment_is_an_autoscaling_v1_scale_with_its_selector_as_a_string(
    kube: FakeKube, http: httpx.Client
) -> None:
    created = kube.create(deployment(tier="web", app="shop"))
    kube.patch("deployments", NS, "web", {"status": {"replicas": 1}})
    scale = http.get(f"{DEPLOYMENTS}/web/scale").json()
    stored = kube.get("deployments", NS, "web")
    assert scale == {
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": {
            "name": "web",
            "namespace": NS,
            "uid": created["metadata"]["uid"],
            "resourceVersion": stored["metadata"]["resourceVersion"],
            "creationTimestamp": created["metadata"]["creationTimestamp"],
        },
        "spec": {"replicas": 2},
        "status": {"replicas": 1, "selector": "app=shop,tier=web"},
    }


def test_match_expressions_print_as_a_label_selector_string_sorted_by_key(
    kube: FakeKube, http: httpx.Client
) -> None:
    obj = deployment()
    obj["spec"]["selector"]["matchExpressions"] = [
        {"key": "zone", "operator": "In", "values": ["b", "a"]},
        {"key": "canary", "operator": "DoesNotExist"},
        {"key": "env", "operator": "NotIn", "values": ["dev"]},
        {"key": "bin", "operator": "Exists"},
    ]
    kube.create(obj)
    selector = http.get(f"{DEPLOYMENTS}/web/scale").json()["status"]["selector"]
    assert selector == "app=web,bin,!canary,env notin (dev),zone in (a,b)"


def test_writing_the_scale_changes_the_deployments_replicas_and_generation(
    kube: FakeKube, apps: client.AppsV1Api
) -> None:
    kube.create(deployment())
    answer = apps.patch_namespaced_deployment_scale("web", NS, {"spec": {"replicas": 5}})
    stored = kube.get("deployments", NS, "web")
    assert (stored["spec"]["replicas"], stored["metadata"]["generation"]) == (5, 2)
    assert answer.spec.replicas == 5
    assert answer.metadata.resource_version == stored["metadata"]["resourceVersion"]
    replaced = apps.replace_namespaced_deployment_scale(
        "web", NS, {"metadata": {"name": "web"}, "spec": {"replicas": 0}}
    )
    assert replaced.spec.replicas == 0
    assert kube.get("deployments", NS, "web")["spec"]["replicas"] == 0


def test_a_replicaset_has_a_scale_subresource_too(kube: FakeKube, http: httpx.Client) -> None:
    obj = deployment("rs")
    obj.update(apiVersion="apps/v1", kind="ReplicaSet")
    kube.create(obj)
    path = f"/apis/apps/v1/namespaces/{NS}/replicasets/rs/scale"
    answer = http.put(
        path, json={"kind": "Scale", "metadata": {"name": "rs"}, "spec": {"replicas": 3}}
    )
    assert answer.status_code == 200, answer.text
    assert kube.get("replicasets", NS, "rs")["spec"]["replicas"] == 3


def test_discovery_puts_workloads_services_and_hpas_in_the_all_category(
    kube: FakeKube, http: httpx.Client
) -> None:
    # https://kubernetes.io/docs/reference/kubectl/generated/kubectl_get/ (`kubectl get all`),
    # the categories of each kind's REST storage (pkg/registry/*/storage: Categories()).
    def in_all(path: str) -> set[str]:
        listed = http.get(path).json()["resources"]
        return {r["name"] for r in listed if "all" in r.get("categories", ())}

    assert in_all("/api/v1") == {"pods", "services"}
    assert in_all("/apis/apps/v1") == {"deployments", "replicasets"}
    assert in_all("/apis/batch/v1") == {"jobs", "cronjobs"}
    assert in_all("/apis/autoscaling/v2") == {"horizontalpodautoscalers"}


def test_discovery_lists_the_scale_subresource_as_autoscaling_v1_scale(
    kube: FakeKube, http: httpx.Client
) -> None:
    listed = http.get("/apis/apps/v1").json()["resources"]
    scales = {r["name"]: r for r in listed if r["name"].endswith("/scale")}
    assert set(scales) == {"deployments/scale", "replicasets/scale"}
    assert scales["deployments/scale"]["group"] == "autoscaling"
    assert scales["deployments/scale"]["kind"] == "Scale"


# --- the HPA controller --------------------------------------------------------------------
# https://kubernetes.io/docs/tasks/run-application/horizontal-pod-autoscale/ (replicas kept
# within minReplicas..maxReplicas), pkg/controller/podautoscaler/horizontal.go (setStatus;
# a target at 0 replicas has autoscaling disabled).

HPAS = f"/apis/autoscaling/v2/namespaces/{NS}/horizontalpodautoscalers"


def hpa(low: int | None, high: int, target: str = "web") -> dict[str, Any]:
    spec: dict[str, Any] = {
        "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": target},
        "maxReplicas": high,
    }
    if low is not None:
        spec["minReplicas"] = low
    return {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": target},
        "spec": spec,
    }


@pytest.fixture
def autoscaled(kube: FakeKube) -> Iterator[FakeKube]:
    kube.enable_controller("horizontal-pod-autoscaler")
    yield kube
    kube.disable_controller("horizontal-pod-autoscaler")


def replicas(http: httpx.Client, name: str = "web") -> int:
    return http.get(f"{DEPLOYMENTS}/{name}").json()["spec"]["replicas"]


def test_an_hpa_created_over_http_scales_its_deployment_into_its_bounds(
    autoscaled: FakeKube, http: httpx.Client
) -> None:
    assert http.post(DEPLOYMENTS, json=deployment(replicas=1)).status_code == 201
    assert http.post(HPAS, json=hpa(3, 6)).status_code == 201
    assert replicas(http) == 3
    reported = http.get(f"{HPAS}/web").json()["status"]
    assert (reported["currentReplicas"], reported["desiredReplicas"]) == (3, 3)
    assert "lastScaleTime" in reported


def test_scaling_a_deployment_past_its_hpas_maximum_is_brought_back(
    autoscaled: FakeKube, http: httpx.Client
) -> None:
    http.post(DEPLOYMENTS, json=deployment(replicas=2))
    http.post(HPAS, json=hpa(None, 4))
    answer = http.patch(
        f"{DEPLOYMENTS}/web/scale",
        json={"spec": {"replicas": 10}},
        headers={"Content-Type": "application/merge-patch+json"},
    )
    assert answer.status_code == 200
    assert replicas(http) == 4
    reported = http.get(f"{HPAS}/web").json()["status"]
    assert (reported["currentReplicas"], reported["desiredReplicas"]) == (4, 4)


def test_changing_the_hpas_bounds_moves_the_deployment_and_min_replicas_defaults_to_1(
    autoscaled: FakeKube, http: httpx.Client
) -> None:
    http.post(DEPLOYMENTS, json=deployment(replicas=5))
    http.post(HPAS, json=hpa(None, 8))
    assert replicas(http) == 5
    # Within bounds only metrics could move it: none here, so nothing is desired yet.
    reported = http.get(f"{HPAS}/web").json()["status"]
    assert (reported["currentReplicas"], reported["desiredReplicas"]) == (5, 0)
    merge = {"Content-Type": "application/merge-patch+json"}
    http.patch(f"{HPAS}/web", json={"spec": {"maxReplicas": 2}}, headers=merge)
    assert replicas(http) == 2
    http.put(
        f"{DEPLOYMENTS}/web/scale", json={"metadata": {"name": "web"}, "spec": {"replicas": 0}}
    )
    assert replicas(http) == 0, "a target at 0 has autoscaling disabled"
    assert http.get(f"{HPAS}/web").json()["status"]["desiredReplicas"] == 0


def test_without_the_controller_an_hpa_changes_nothing(kube: FakeKube, http: httpx.Client) -> None:
    http.post(DEPLOYMENTS, json=deployment(replicas=1))
    http.post(HPAS, json=hpa(3, 6))
    assert replicas(http) == 1
    assert "currentReplicas" not in http.get(f"{HPAS}/web").json()["status"]


# --- the media types of a body ---------------------------------------------------------------
# staging/src/k8s.io/apiserver/pkg/endpoints/handlers/negotiation/negotiate.go
# (NegotiateInputSerializerForMediaType) and errors.go (errUnsupportedMediaType):
# https://kubernetes.io/docs/reference/using-api/api-concepts/#alternate-representations-of-resources

CONFIGMAPS = f"/api/v1/namespaces/{NS}/configmaps"
UNKNOWN_FORMAT = (
    "the body of the request was in an unknown format - accepted media types include: "
    "application/json, application/yaml, application/vnd.kubernetes.protobuf"
)


@pytest.mark.parametrize("content_type", ["text/plain", "application/cbor"])
def test_a_body_in_a_media_type_the_server_does_not_decode_is_415(
    content_type: str, kube: FakeKube, http: httpx.Client
) -> None:
    body = b'{"metadata":{"name":"c"}}'
    for method, path in (("POST", CONFIGMAPS), ("PUT", f"{CONFIGMAPS}/c")):
        answer = http.request(method, path, content=body, headers={"Content-Type": content_type})
        assert answer.status_code == 415, (method, answer.text)
        assert answer.json()["reason"] == "UnsupportedMediaType"
        assert answer.json()["message"] == UNKNOWN_FORMAT
    assert kube.list("configmaps", NS) == []


def test_a_protobuf_body_that_is_no_object_is_400(kube: FakeKube, http: httpx.Client) -> None:
    # The magic alone carries no kind: a real server answers 400 BadRequest.
    kube.create(
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": NS}}
    )
    answer = http.request(
        "DELETE",
        f"{CONFIGMAPS}/c",
        content=b"\x6b\x38\x73\x00",
        headers={"Content-Type": "application/vnd.kubernetes.protobuf"},
    )
    assert (answer.status_code, answer.json()["reason"]) == (400, "BadRequest")
    assert http.delete(f"{CONFIGMAPS}/c").status_code == 200


def test_a_yaml_body_is_decoded_like_json(kube: FakeKube, http: httpx.Client) -> None:
    body = b"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c\ndata:\n  when: 2024-01-01\n"
    answer = http.post(CONFIGMAPS, content=body, headers={"Content-Type": "application/yaml"})
    assert answer.status_code == 201, answer.text
    assert kube.get("configmaps", NS, "c")["data"] == {"when": "2024-01-01"}


def test_a_body_without_a_content_type_is_json(kube: FakeKube, http: httpx.Client) -> None:
    answer = http.post(CONFIGMAPS, content=b'{"metadata":{"name":"c"}}')
    assert answer.status_code == 201, answer.text


# --- Table answers ---------------------------------------------------------------------------
# https://kubernetes.io/docs/reference/using-api/api-concepts/#receiving-resources-as-tables
# Columns: pkg/printers/internalversion/printers.go; kinds without a printer:
# staging/src/k8s.io/apiserver/pkg/registry/rest/table.go (defaultTableConvertor).

TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io"
KUBECTL_ACCEPT = f"{TABLE},application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json"


def names(table: dict[str, Any]) -> list[str]:
    return [column["name"] for column in table["columnDefinitions"] if column["priority"] == 0]


def test_a_list_as_a_table_has_the_printers_columns_and_one_row_per_object(
    kube: FakeKube, http: httpx.Client
) -> None:
    kube.create(deployment("a", replicas=3))
    kube.patch("deployments", NS, "a", {"status": {"readyReplicas": 1, "updatedReplicas": 2}})
    kube.create(deployment("b"))
    table = http.get(DEPLOYMENTS, headers={"Accept": KUBECTL_ACCEPT}).json()
    assert (table["kind"], table["apiVersion"]) == ("Table", "meta.k8s.io/v1")
    assert table["metadata"]["resourceVersion"] == str(kube.current_rv)
    assert names(table) == ["Name", "Ready", "Up-to-date", "Available", "Age"]
    wide = [c["name"] for c in table["columnDefinitions"] if c["priority"] == 1]
    assert wide == ["Containers", "Images", "Selector"]
    first = table["rows"][0]
    assert first["cells"][:4] == ["a", "1/3", 2, 0]
    assert first["cells"][5:] == ["app", "nginx", "app=a"]
    assert first["object"]["kind"] == "PartialObjectMetadata"
    assert first["object"]["metadata"]["name"] == "a"
    assert [row["cells"][0] for row in table["rows"]] == ["a", "b"]


def test_the_columns_of_pods_namespaces_config_maps_replicasets_and_hpas(
    kube: FakeKube, http: httpx.Client
) -> None:
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": NS},
        "spec": {"containers": [{"name": "a", "image": "x"}, {"name": "b", "image": "y"}]},
        "status": {
            "phase": "Running",
            "containerStatuses": [
                {
                    "name": "a",
                    "ready": True,
                    "restartCount": 2,
                    "state": {"running": {}},
                    "lastState": {"terminated": {"finishedAt": "2020-01-01T00:00:00Z"}},
                },
                {
                    "name": "b",
                    "ready": False,
                    "restartCount": 1,
                    "state": {"waiting": {"reason": "CrashLoopBackOff"}},
                },
            ],
        },
    }
    kube.create(pod)
    kube.create(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "c", "namespace": NS},
            "data": {"a": "1", "b": "2"},
            "binaryData": {"c": ""},
        }
    )
    kube.create(hpa(None, 4) | {"metadata": {"name": "h", "namespace": NS}})
    rs = deployment("rs", replicas=3) | {"kind": "ReplicaSet"}
    kube.create(rs)
    expected = {
        f"/api/v1/namespaces/{NS}/pods": (
            ["Name", "Ready", "Status", "Restarts", "Age"],
            ["p", "1/2", "CrashLoopBackOff"],
        ),
        "/api/v1/namespaces": (["Name", "Status", "Age"], None),
        CONFIGMAPS: (["Name", "Data", "Age"], ["c", 3]),
        f"/apis/apps/v1/namespaces/{NS}/replicasets": (
            ["Name", "Desired", "Current", "Ready", "Age"],
            ["rs", 3, 0, 0],
        ),
        HPAS: (
            ["Name", "Reference", "Targets", "MinPods", "MaxPods", "Replicas", "Age"],
            ["h", "Deployment/web", "cpu: <unknown>/80%", "1", 4, 0],
        ),
    }
    for path, (columns, cells) in expected.items():
        table = http.get(path, headers={"Accept": TABLE}).json()
        assert names(table) == columns, path
        if cells is not None:
            assert table["rows"][0]["cells"][: len(cells)] == cells, path
    pods = http.get(f"/api/v1/namespaces/{NS}/pods", headers={"Accept": TABLE}).json()
    assert re.fullmatch(r"3 \(\d+y\d*d? ago\)", pods["rows"][0]["cells"][3])


def test_the_columns_of_secrets_leases_and_services(kube: FakeKube, http: httpx.Client) -> None:
    meta = {"name": "x", "namespace": NS}
    kube.create(
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": meta,
            "type": "Opaque",
            "data": {"a": "MQ==", "b": "Mg=="},
        }
    )
    kube.create(
        {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": meta,
            "spec": {"holderIdentity": "pod-1"},
        }
    )
    ports = [{"port": 80, "protocol": "TCP"}, {"port": 443, "nodePort": 30443, "protocol": "TCP"}]
    kube.create(
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": meta,
            "spec": {
                "type": "NodePort",
                "clusterIP": "10.0.0.7",
                "ports": ports,
                "selector": {"tier": "web", "app": "shop"},
            },
        }
    )
    expected = {
        f"/api/v1/namespaces/{NS}/secrets": (["Name", "Type", "Data", "Age"], ["x", "Opaque", 2]),
        f"/apis/coordination.k8s.io/v1/namespaces/{NS}/leases": (
            ["Name", "Holder", "Age"],
            ["x", "pod-1"],
        ),
        f"/api/v1/namespaces/{NS}/services": (
            ["Name", "Type", "Cluster-IP", "External-IP", "Port(s)", "Age"],
            ["x", "NodePort", "10.0.0.7", "<none>", "80/TCP,443:30443/TCP"],
        ),
    }
    for path, (columns, cells) in expected.items():
        table = http.get(path, headers={"Accept": TABLE}).json()
        assert names(table) == columns, path
        assert table["rows"][0]["cells"][: len(cells)] == cells, path
    service = http.get(f"/api/v1/namespaces/{NS}/services", headers={"Accept": TABLE}).json()
    assert service["rows"][0]["cells"][-1] == "app=shop,tier=web"


def test_a_kind_without_a_printer_gets_the_default_name_and_created_at_columns(
    kube: FakeKube, http: httpx.Client
) -> None:
    role = kube.create(
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": {"name": "l", "namespace": NS},
        }
    )
    path = f"/apis/rbac.authorization.k8s.io/v1/namespaces/{NS}/roles/l"
    table = http.get(path, headers={"Accept": TABLE}).json()
    assert [(c["name"], c["type"]) for c in table["columnDefinitions"]] == [
        ("Name", "string"),
        ("Created At", "date"),
    ]
    assert table["rows"][0]["cells"] == ["l", role["metadata"]["creationTimestamp"]]
    assert table["metadata"]["resourceVersion"] == role["metadata"]["resourceVersion"]


@pytest.mark.parametrize("include", ["None", "Object", "Metadata"])
def test_include_object_says_what_each_row_carries(
    include: str, kube: FakeKube, http: httpx.Client
) -> None:
    kube.create(deployment())
    v1beta1 = "application/json;as=Table;v=v1beta1;g=meta.k8s.io"
    answer = http.get(
        f"{DEPLOYMENTS}/web", params={"includeObject": include}, headers={"Accept": v1beta1}
    ).json()
    assert answer["apiVersion"] == "meta.k8s.io/v1beta1"
    carried = answer["rows"][0]["object"]
    if include == "None":
        assert carried is None
    elif include == "Object":
        assert (carried["kind"], carried["spec"]["replicas"]) == ("Deployment", 2)
    else:
        assert carried["apiVersion"] == "meta.k8s.io/v1beta1"
        assert set(carried) == {"kind", "apiVersion", "metadata"}


def test_an_unknown_include_object_is_400_once_the_object_is_read(
    kube: FakeKube, http: httpx.Client
) -> None:
    # staging/src/k8s.io/apiserver/pkg/endpoints/handlers/response.go (optionsForTransform)
    missing = http.get(
        f"{DEPLOYMENTS}/gone", params={"includeObject": "All"}, headers={"Accept": TABLE}
    )
    assert missing.status_code == 404
    answer = http.get(DEPLOYMENTS, params={"includeObject": "All"}, headers={"Accept": TABLE})
    assert (answer.status_code, answer.json()["message"]) == (
        400,
        'Unable to convert to Table as requested: includeObject: Unsupported value: "All": '
        'supported values: "Metadata", "None", "Object"',
    )


def test_an_empty_list_has_no_rows_as_a_printer_or_the_default_convertor_leaves_them(
    kube: FakeKube, http: httpx.Client
) -> None:
    assert http.get(DEPLOYMENTS, headers={"Accept": TABLE}).json()["rows"] == []
    roles = f"/apis/rbac.authorization.k8s.io/v1/namespaces/{NS}/roles"
    assert http.get(roles, headers={"Accept": TABLE}).json()["rows"] is None


def test_a_table_watch_prints_bookmarks_as_rows_of_an_empty_object(
    kube: FakeKube, http: httpx.Client
) -> None:
    # staging/src/k8s.io/apiserver/pkg/endpoints/handlers/response.go: every event's object,
    # a bookmark's too, goes through asTable.
    kube.create(deployment("a"))
    params = {
        "watch": "1",
        "allowWatchBookmarks": "true",
        "sendInitialEvents": "true",
        "resourceVersionMatch": "NotOlderThan",
        "timeoutSeconds": "5",
    }
    with http.stream("GET", DEPLOYMENTS, params=params, headers={"Accept": TABLE}) as stream:
        lines = stream.iter_lines()
        added, bookmark = json.loads(next(lines)), json.loads(next(lines))
    assert added["type"] == "ADDED"
    assert bookmark["type"] == "BOOKMARK"
    table = bookmark["object"]
    assert (table["kind"], table["columnDefinitions"]) == ("Table", None)
    assert table["metadata"]["resourceVersion"] == str(kube.current_rv)
    row = table["rows"][0]
    assert row["cells"][:2] == ["", "0/0"]
    assert row["object"]["metadata"]["annotations"] == {"k8s.io/initial-events-end": "true"}


def test_a_table_watch_sends_rows_with_the_columns_only_in_its_first_event(
    kube: FakeKube, http: httpx.Client
) -> None:
    kube.create(deployment("a"))
    events: list[dict[str, Any]] = []
    params = {"watch": "1", "timeoutSeconds": "5"}
    with http.stream("GET", DEPLOYMENTS, params=params, headers={"Accept": TABLE}) as stream:
        lines = stream.iter_lines()
        events.append(json.loads(next(lines)))
        kube.patch("deployments", NS, "a", {"spec": {"replicas": 7}})
        events.append(json.loads(next(lines)))
    assert [event["type"] for event in events] == ["ADDED", "MODIFIED"]
    first, second = (event["object"] for event in events)
    assert first["kind"] == second["kind"] == "Table"
    assert names(first)[:2] == ["Name", "Ready"]
    assert second["columnDefinitions"] is None
    assert second["rows"][0]["cells"][:2] == ["a", "0/7"]


@pytest.mark.parametrize(
    ("seconds", "printed"),
    [
        (-5, "<invalid>"),
        (-1, "0s"),
        (59, "59s"),
        (119, "119s"),
        (125, "2m5s"),
        (600, "10m"),
        (3 * 3600, "3h"),
        (3 * 3600 + 60, "3h1m"),
        (50 * 3600, "2d2h"),
        (400 * 86400, "400d"),
        (3 * 365 * 86400 + 86400, "3y1d"),
        (9 * 365 * 86400, "9y"),
    ],
)
def test_ages_print_as_human_durations(seconds: int, printed: str) -> None:
    # k8s.io/apimachinery/pkg/util/duration/duration.go (HumanDuration)
    assert tables.human_duration(seconds) == printed


# --- the agent over https ------------------------------------------------------------------
# kubectl and client-go send a bearer token only over TLS with a verified server:
# https://kubernetes.io/docs/reference/access-authn-authz/authentication/#putting-a-bearer-token-in-a-request


def test_the_agents_client_reaches_the_fake_over_https_with_its_ca(
    kube: FakeKube, tmp_path: Path
) -> None:
    path = kube.kubeconfig(tmp_path / "kubeconfig", tls=True)
    target = cluster.load_target({}, kubeconfig=str(path))
    assert target.server == kube.https_url
    answer = httpx.get(
        f"{target.server}/api/v1/namespaces",
        headers={"Authorization": f"Bearer {target.token()}"},
        verify=target.verify,
        trust_env=False,
    )
    assert [n["metadata"]["name"] for n in answer.json()["items"]] == [NS]
    api = KubeApi(target)
    try:
        listed = json.loads(api.get("/api/v1/namespaces"))
    finally:
        api.close()
    assert [n["metadata"]["name"] for n in listed["items"]] == [NS]
    assert kube.requests[-1].user == "system:serviceaccount:moonin:moonin-agent"


# --- with a real kubectl -------------------------------------------------------------------
# https://kubernetes.io/docs/reference/kubectl/generated/kubectl_get/ (server-side printing)
# https://kubernetes.io/docs/reference/kubectl/generated/kubectl_scale/


def kubectl(path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    binary = shutil.which("kubectl", path=str(Path(sys.executable).parent))
    if binary is None:
        pytest.skip("kubectl is not installed (python scripts/install_kubectl.py)")
    return subprocess.run(
        [binary, "--kubeconfig", str(path), *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": os.environ.get("PATH", ""), "HOME": str(path.parent)},
    )


def test_kubectl_get_prints_the_servers_table_and_kubectl_scale_writes_the_scale(
    kube: FakeKube, tmp_path: Path
) -> None:
    kube.create(deployment("web", replicas=2))
    path = kube.kubeconfig(tmp_path / "kubeconfig", tls=True, namespace=NS)
    listed = kubectl(path, "get", "deployments", "-o", "wide")
    assert listed.returncode == 0, listed.stderr
    head, row = listed.stdout.splitlines()
    assert head.split() == [
        "NAME",
        "READY",
        "UP-TO-DATE",
        "AVAILABLE",
        "AGE",
        "CONTAINERS",
        "IMAGES",
        "SELECTOR",
    ]
    assert row.split()[:3] == ["web", "0/2", "0"]
    assert row.split()[-3:] == ["app", "nginx", "app=web"]
    scaled = kubectl(path, "scale", "deployment/web", "--replicas=4")
    assert scaled.returncode == 0, scaled.stderr
    assert kube.get("deployments", NS, "web")["spec"]["replicas"] == 4
    assert any(r.path.endswith("/deployments/web/scale") for r in kube.requests)


def test_a_client_configuration_with_a_ca_bundle_speaks_verified_https(
    kube: FakeKube, tmp_path: Path
) -> None:
    configuration = kube.client_configuration(ca_bundle=tmp_path / "ca.pem")
    assert configuration.host == kube.https_url
    assert configuration.ssl_ca_cert == str(tmp_path / "ca.pem")
    with client.ApiClient(configuration) as api:
        names = [n.metadata.name for n in client.CoreV1Api(api).list_namespace().items]
    assert names == [NS]


def _field(number: int, value: bytes) -> bytes:
    """A length-delimited protobuf field (lengths below 128 here)."""
    return bytes([number << 3 | 2, len(value)]) + value


def _protobuf_config_map(*data_entries: bytes) -> bytes:
    type_meta = _field(1, b"v1") + _field(2, b"ConfigMap")
    obj = _field(1, _field(1, b"c")) + b"".join(data_entries)
    return b"k8s\x00" + _field(1, type_meta) + _field(2, obj)


def test_a_protobuf_config_map_is_created_as_its_json_would_be(
    kube: FakeKube, http: httpx.Client
) -> None:
    # k8s.io/api core/v1 generated.proto: ConfigMap 1 metadata, 2 data (key 1, value 2).
    body = _protobuf_config_map(_field(2, _field(1, b"mode") + _field(2, b"fast")))
    headers = {"Content-Type": "application/vnd.kubernetes.protobuf"}
    answer = http.post(CONFIGMAPS, content=body, headers=headers)
    assert answer.status_code == 201, answer.text
    assert kube.get("configmaps", NS, "c")["data"] == {"mode": "fast"}


def test_a_protobuf_field_the_fake_does_not_read_is_415_not_dropped(
    kube: FakeKube, http: httpx.Client
) -> None:
    body = _protobuf_config_map(_field(9, b"unknown"))
    headers = {"Content-Type": "application/vnd.kubernetes.protobuf"}
    answer = http.post(CONFIGMAPS, content=body, headers=headers)
    assert (answer.status_code, answer.json()["message"]) == (415, UNKNOWN_FORMAT)
    assert kube.list("configmaps", NS) == []
