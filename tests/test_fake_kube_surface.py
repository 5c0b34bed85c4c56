"""What kubectl and the HPA controller use beyond plain CRUD: the scale subresource, Table
answers, the media types a body may come in, and the HPA controller's clamping.

Each behaviour cites the Kubernetes documentation or source that says the real server does it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from sandbox.kube import FakeKube

NS = "shop"
DEPLOYMENTS = f"/apis/apps/v1/namespaces/{NS}/deployments"


@pytest.fixture(scope="module")
def server() -> Iterator[FakeKube]:
    with FakeKube() as kube:
        yield kube


@pytest.fixture
def kube(server: FakeKube) -> FakeKube:
    server.reset()
    server.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    return server


@pytest.fixture(scope="module")
def http(server: FakeKube) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url, headers=server.headers, trust_env=False) as session:
        yield session


@pytest.fixture(scope="module")
def apps(server: FakeKube) -> Iterator[client.AppsV1Api]:
    with client.ApiClient(server.client_configuration()) as api_client:
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
    answer = http.put(path, json={"kind": "Scale", "spec": {"replicas": 3}})
    assert answer.status_code == 200, answer.text
    assert kube.get("replicasets", NS, "rs")["spec"]["replicas"] == 3


def test_a_scale_write_with_a_stale_resource_version_is_409_conflict(
    kube: FakeKube, http: httpx.Client
) -> None:
    created = kube.create(deployment())
    kube.patch("deployments", NS, "web", {"metadata": {"labels": {"touched": "yes"}}})
    stale = {"metadata": {"resourceVersion": created["metadata"]["resourceVersion"]}}
    answer = http.put(f"{DEPLOYMENTS}/web/scale", json={**stale, "spec": {"replicas": 9}})
    assert (answer.status_code, answer.json()["reason"]) == (409, "Conflict")
    assert kube.get("deployments", NS, "web")["spec"]["replicas"] == 2


def test_negative_replicas_are_422_invalid_on_the_scale(
    kube: FakeKube, apps: client.AppsV1Api
) -> None:
    kube.create(deployment())
    with pytest.raises(ApiException) as raised:
        apps.patch_namespaced_deployment_scale("web", NS, {"spec": {"replicas": -1}})
    assert raised.value.status == 422
    assert '"Scale.autoscaling \\"web\\" is invalid: spec.replicas: Invalid value: -1: must be' in (
        raised.value.body
    )


def test_the_scale_of_a_missing_deployment_is_404(kube: FakeKube, http: httpx.Client) -> None:
    answer = http.get(f"{DEPLOYMENTS}/gone/scale")
    assert (answer.status_code, answer.json()["reason"]) == (404, "NotFound")


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
    assert (reported["currentReplicas"], reported["desiredReplicas"]) == (1, 3)
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
    assert (reported["currentReplicas"], reported["desiredReplicas"]) == (10, 4)


def test_changing_the_hpas_bounds_moves_the_deployment_and_min_replicas_defaults_to_1(
    autoscaled: FakeKube, http: httpx.Client
) -> None:
    http.post(DEPLOYMENTS, json=deployment(replicas=5))
    http.post(HPAS, json=hpa(None, 8))
    assert replicas(http) == 5
    merge = {"Content-Type": "application/merge-patch+json"}
    http.patch(f"{HPAS}/web", json={"spec": {"maxReplicas": 2}}, headers=merge)
    assert replicas(http) == 2
    http.put(f"{DEPLOYMENTS}/web/scale", json={"spec": {"replicas": 0}})
    assert replicas(http) == 0, "a target at 0 has autoscaling disabled"
    assert http.get(f"{HPAS}/web").json()["status"]["desiredReplicas"] == 0


def test_without_the_controller_an_hpa_changes_nothing(kube: FakeKube, http: httpx.Client) -> None:
    http.post(DEPLOYMENTS, json=deployment(replicas=1))
    http.post(HPAS, json=hpa(3, 6))
    assert replicas(http) == 1
    assert http.get(f"{HPAS}/web").json()["status"] == {}


# --- the media types of a body ---------------------------------------------------------------
# staging/src/k8s.io/apiserver/pkg/endpoints/handlers/negotiation/negotiate.go
# (NegotiateInputSerializerForMediaType) and errors.go (errUnsupportedMediaType); the
# fake decodes no protobuf, as a custom resource's endpoint:
# https://kubernetes.io/docs/reference/using-api/api-concepts/#alternate-representations-of-resources

CONFIGMAPS = f"/api/v1/namespaces/{NS}/configmaps"
UNKNOWN_FORMAT = (
    "the body of the request was in an unknown format - accepted media types include: "
    "application/json, application/yaml"
)


@pytest.mark.parametrize(
    "content_type", ["application/vnd.kubernetes.protobuf", "text/plain", "application/cbor"]
)
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


def test_a_yaml_body_is_decoded_like_json(kube: FakeKube, http: httpx.Client) -> None:
    body = b"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c\ndata:\n  when: 2024-01-01\n"
    answer = http.post(CONFIGMAPS, content=body, headers={"Content-Type": "application/yaml"})
    assert answer.status_code == 201, answer.text
    assert kube.get("configmaps", NS, "c")["data"] == {"when": "2024-01-01"}


def test_a_body_without_a_content_type_is_json(kube: FakeKube, http: httpx.Client) -> None:
    answer = http.post(CONFIGMAPS, content=b'{"metadata":{"name":"c"}}')
    assert answer.status_code == 201, answer.text


def test_a_patch_in_a_type_that_is_no_patch_is_415_listing_the_patch_types(
    kube: FakeKube, http: httpx.Client
) -> None:
    kube.create(
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": NS}}
    )
    answer = http.patch(f"{CONFIGMAPS}/c", json={}, headers={"Content-Type": "application/json"})
    assert answer.status_code == 415
    assert answer.json()["message"] == (
        "the body of the request was in an unknown format - accepted media types include: "
        "application/json-patch+json, application/merge-patch+json, "
        "application/strategic-merge-patch+json"
    )


def test_an_unknown_path_is_404_not_found(kube: FakeKube, http: httpx.Client) -> None:
    for path in ("/apis/apps/v1/namespaces/shop/widgets", "/nothing", f"{DEPLOYMENTS}/web/bogus"):
        answer = http.get(path)
        assert (answer.status_code, answer.json()["reason"]) == (404, "NotFound"), path
