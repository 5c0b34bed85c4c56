"""The fake Kubernetes API decodes, defaults and validates writes as kube-apiserver does, so a
misspelled field, a value of the wrong type, a timestamp Go cannot parse or an invalid name
in the agent's writes fails here as it would in a cluster. Each test names the Kubernetes
documentation or source that says the real server behaves so. Requests go over plain httpx:
headers (Warning) and raw bodies (duplicate keys, broken JSON) matter."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from sandbox.kube import FakeKube

NS = "shop"
DEPLOYMENTS = f"/apis/apps/v1/namespaces/{NS}/deployments"
HPAS = f"/apis/autoscaling/v2/namespaces/{NS}/horizontalpodautoscalers"
LEASES = f"/apis/coordination.k8s.io/v1/namespaces/{NS}/leases"
EVENTS = f"/api/v1/namespaces/{NS}/events"
MERGE = {"Content-Type": "application/merge-patch+json"}
STRATEGIC = {"Content-Type": "application/strategic-merge-patch+json"}


@pytest.fixture
def kube(kube: FakeKube) -> FakeKube:
    kube.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    return kube


def deployment(name: str = "web", **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "app", "image": "web:1.2"}]},
            },
            **spec,
        },
    }


def hpa(name: str = "web", **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": name},
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
            "maxReplicas": 5,
            **spec,
        },
    }


def lease(renew_time: str) -> dict[str, Any]:
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": "moonin-discovery"},
        "spec": {"holderIdentity": "pod-a", "leaseDurationSeconds": 15, "renewTime": renew_time},
    }


def post(http: httpx.Client, path: str, body: Any, **params: str) -> httpx.Response:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    return http.post(path, content=raw, params=params)


def refusal(answer: httpx.Response, code: int, reason: str) -> dict[str, Any]:
    assert answer.status_code == code, answer.text
    status = answer.json()
    assert (status["kind"], status["status"], status["reason"], status["code"]) == (
        "Status",
        "Failure",
        reason,
        code,
    )
    return status


# --- decoding: what Go's decoder refuses -----------------------------------------------------


def test_a_time_is_rfc3339_to_the_second_with_or_without_a_fraction(http: httpx.Client) -> None:
    """metav1.Time parses with RFC3339 (staging/src/k8s.io/apimachinery/pkg/apis/meta/v1/
    time.go): seconds are required, a fraction and an offset are optional."""
    event = {
        "metadata": {"name": "web.1"},
        "involvedObject": {"kind": "Deployment", "name": "web", "namespace": NS},
        "reason": "Scaled",
        "firstTimestamp": "2026-12-04T10:00",
    }
    status = refusal(post(http, EVENTS, event), 400, "BadRequest")
    assert 'as "2006-01-02T15:04:05Z07:00"' in status["message"]
    for stamp in ("2026-12-04T10:00:00Z", "2026-12-04T10:00:00.5+01:00"):
        event["metadata"]["name"] = f"web.{len(stamp)}"
        event["firstTimestamp"] = stamp
        assert post(http, EVENTS, event).status_code == 201


# --- fieldValidation: unknown and duplicate fields -------------------------------------------


def test_a_patch_is_held_to_field_validation_after_it_is_applied(
    http: httpx.Client, kube: FakeKube
) -> None:
    """field_validation_test.go (merge-patch and SMP cases): the patch's duplicate keys come
    first, then the patched object's unknown fields, walked in key order."""
    assert post(http, DEPLOYMENTS, deployment()).status_code == 201
    patch = b'{"spec": {"zeta": 1, "paused": true, "paused": false, "alpha": 1}}'
    for headers in (MERGE, STRATEGIC):
        answer = http.patch(
            f"{DEPLOYMENTS}/web",
            content=patch,
            headers=headers,
            params={"fieldValidation": "Strict"},
        )
        status = refusal(answer, 400, "BadRequest")
        assert status["message"].endswith(
            'strict decoding error: duplicate field "spec.paused", unknown field "spec.alpha", '
            'unknown field "spec.zeta"'
        )
    answer = http.patch(f"{DEPLOYMENTS}/web", content=b'{"spec": {"zeta": 1}}', headers=MERGE)
    assert answer.status_code == 200
    assert answer.headers.get_list("Warning") == ['299 - "unknown field \\"spec.zeta\\""']
    assert "zeta" not in kube.get("deployments", NS, "web")["spec"]


def test_a_json_patch_names_its_operations_own_problems_first(http: httpx.Client) -> None:
    """field_validation_test.go (json-patch cases): unknown or duplicate members of an
    operation are "json patch" problems, listed before the patched object's unknown fields."""
    assert post(http, DEPLOYMENTS, deployment()).status_code == 201
    patch = (
        b'[{"op": "add", "path": "/spec/unknown1", "value": 1, "foo": "bar"},'
        b' {"op": "add", "path": "/spec/unknown2", "path": "/spec/unknown3", "value": 1}]'
    )
    answer = http.patch(
        f"{DEPLOYMENTS}/web",
        content=patch,
        headers={"Content-Type": "application/json-patch+json"},
        params={"fieldValidation": "Strict"},
    )
    assert refusal(answer, 400, "BadRequest")["message"].endswith(
        'strict decoding error: json patch unknown field "[0].foo", json patch duplicate field '
        '"[1].path", unknown field "spec.unknown1", unknown field "spec.unknown3"'
    )


def test_a_wrong_type_in_a_patch_is_refused_before_anything_is_stored(
    http: httpx.Client, kube: FakeKube
) -> None:
    """The patched object is decoded like any body (handlers/patch.go): a wrong type is 400."""
    assert post(http, DEPLOYMENTS, deployment(replicas=2)).status_code == 201
    before = kube.get("deployments", NS, "web")
    answer = http.patch(
        f"{DEPLOYMENTS}/web", content=b'{"spec": {"replicas": "three"}}', headers=MERGE
    )
    assert (
        "DeploymentSpec.spec.replicas of type int32"
        in refusal(answer, 400, "BadRequest")["message"]
    )
    assert kube.get("deployments", NS, "web") == before


def test_a_patch_that_is_not_json_or_not_the_right_shape_is_refused_in_go_words(
    http: httpx.Client,
) -> None:
    """k8s.io/apiserver/pkg/endpoints/handlers/patch.go: the patch is decoded before it is
    applied (a merge patch's error reads "error decoding patch: ..."); a JSON patch must be a
    list of operations (jsonpatch.Patch)."""
    assert post(http, DEPLOYMENTS, deployment()).status_code == 201
    answer = http.patch(f"{DEPLOYMENTS}/web", content=b'{"spec": x}', headers=MERGE)
    assert refusal(answer, 400, "BadRequest")["message"] == (
        "error decoding patch: invalid character 'x' looking for beginning of value"
    )
    answer = http.patch(
        f"{DEPLOYMENTS}/web",
        content=b'{"op": "add"}',
        headers={"Content-Type": "application/json-patch+json"},
    )
    assert refusal(answer, 400, "BadRequest")["message"] == (
        "json: cannot unmarshal object into Go value of type jsonpatch.Patch"
    )


# --- defaulting -------------------------------------------------------------------------------


def test_an_hpa_behavior_gets_its_gaps_filled_per_direction(http: httpx.Client) -> None:
    """defaults.go SetDefaults_HorizontalPodAutoscalerBehavior: scale up 0 s window, Max of
    4 Pods or 100 Percent per 15 s; scale down Max of 100 Percent per 15 s (its window 300 s);
    a value given is kept."""
    body = hpa(behavior={"scaleDown": {"stabilizationWindowSeconds": 60}})
    behavior = post(http, HPAS, body).json()["spec"]["behavior"]
    assert behavior["scaleUp"] == {
        "stabilizationWindowSeconds": 0,
        "selectPolicy": "Max",
        "policies": [
            {"type": "Pods", "value": 4, "periodSeconds": 15},
            {"type": "Percent", "value": 100, "periodSeconds": 15},
        ],
    }
    assert behavior["scaleDown"] == {
        "stabilizationWindowSeconds": 60,
        "selectPolicy": "Max",
        "policies": [{"type": "Percent", "value": 100, "periodSeconds": 15}],
    }


def test_a_deployment_and_its_pod_template_get_the_api_defaults(http: httpx.Client) -> None:
    """pkg/apis/apps/v1/defaults.go SetDefaults_Deployment and pkg/apis/core/v1/defaults.go
    (pod spec and containers: imagePullPolicy Always only for :latest or no tag)."""
    body = deployment()
    body["spec"]["template"]["spec"]["containers"].append({"name": "side", "image": "side"})
    spec = post(http, DEPLOYMENTS, body).json()["spec"]
    assert (spec["replicas"], spec["revisionHistoryLimit"], spec["progressDeadlineSeconds"]) == (
        1,
        10,
        600,
    )
    assert spec["strategy"] == {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxUnavailable": "25%", "maxSurge": "25%"},
    }
    pod = spec["template"]["spec"]
    assert {k: pod[k] for k in ("restartPolicy", "dnsPolicy", "schedulerName")} == {
        "restartPolicy": "Always",
        "dnsPolicy": "ClusterFirst",
        "schedulerName": "default-scheduler",
    }
    assert (pod["terminationGracePeriodSeconds"], pod["securityContext"]) == (30, {})
    app, side = pod["containers"]
    assert (app["terminationMessagePath"], app["terminationMessagePolicy"]) == (
        "/dev/termination-log",
        "File",
    )
    assert (app["imagePullPolicy"], side["imagePullPolicy"]) == ("IfNotPresent", "Always")


def test_a_service_and_a_namespace_get_their_defaults(http: httpx.Client) -> None:
    """core/v1 defaults.go SetDefaults_Service (ClusterIP, sessionAffinity None, port
    protocol TCP, targetPort = port) and SetDefaults_Namespace (the name label)."""
    service = {
        "metadata": {"name": "web"},
        "spec": {"selector": {"app": "web"}, "ports": [{"port": 80}]},
    }
    spec = post(http, f"/api/v1/namespaces/{NS}/services", service).json()["spec"]
    assert (spec["type"], spec["sessionAffinity"]) == ("ClusterIP", "None")
    assert spec["ports"] == [{"port": 80, "protocol": "TCP", "targetPort": 80}]
    namespace = post(http, "/api/v1/namespaces", {"metadata": {"name": "blue"}}).json()
    assert namespace["metadata"]["labels"] == {"kubernetes.io/metadata.name": "blue"}


# --- validation: 422 Invalid with causes ------------------------------------------------------


def test_namespaces_and_services_are_named_by_dns_labels(http: httpx.Client) -> None:
    """pkg/apis/core/validation: ValidateNamespaceName and ValidateServiceName are
    IsDNS1123Label (no dots), where most kinds take a subdomain."""
    status = refusal(
        post(http, "/api/v1/namespaces", {"metadata": {"name": "a.b"}}), 422, "Invalid"
    )
    assert "a lowercase RFC 1123 label must consist of" in status["message"]
    service = {"metadata": {"name": "a.b"}, "spec": {"ports": [{"port": 80}]}}
    refusal(post(http, f"/api/v1/namespaces/{NS}/services", service), 422, "Invalid")
    assert post(http, DEPLOYMENTS, deployment("a.b")).status_code == 201


def test_a_generate_name_is_checked_as_a_prefix(http: httpx.Client) -> None:
    """objectmeta.go ValidateObjectMeta: generateName is validated with its trailing dash
    masked, since the server appends five characters."""
    body = {"metadata": {"generateName": "job-"}, "data": {}}
    assert post(http, f"/api/v1/namespaces/{NS}/configmaps", body).status_code == 201
    body["metadata"]["generateName"] = "Job-"
    status = refusal(post(http, f"/api/v1/namespaces/{NS}/configmaps", body), 422, "Invalid")
    assert status["details"]["causes"][0]["field"] == "metadata.generateName"


def test_label_and_annotation_keys_and_values_are_checked(http: httpx.Client) -> None:
    """objectmeta.go ValidateLabels (qualified names, values of at most 63 characters) and
    ValidateAnnotations (qualified keys, 256 KiB in all: TotalAnnotationSizeLimitB)."""
    body = deployment()
    body["metadata"]["labels"] = {"bad key!": "ok", "fine": "-bad-value"}
    causes = refusal(post(http, DEPLOYMENTS, body), 422, "Invalid")["details"]["causes"]
    assert [(c["field"], c["reason"]) for c in causes] == [
        ("metadata.labels", "FieldValueInvalid"),
        ("metadata.labels", "FieldValueInvalid"),
    ]
    assert causes[0]["message"].startswith('Invalid value: "bad key!": name part must consist')
    body = deployment()
    body["metadata"]["annotations"] = {"big": "x" * (256 * 1024)}
    causes = refusal(post(http, DEPLOYMENTS, body), 422, "Invalid")["details"]["causes"]
    assert causes == [
        {
            "reason": "FieldValueTooLong",
            "message": "Too long: must have at most 262144 bytes",
            "field": "metadata.annotations",
        }
    ]


def test_an_hpa_without_a_target_name_is_missing_a_required_value(http: httpx.Client) -> None:
    """validation.go ValidateCrossVersionObjectReference: kind and name are required."""
    body = hpa()
    body["spec"]["scaleTargetRef"] = {"kind": "Deployment"}
    causes = refusal(post(http, HPAS, body), 422, "Invalid")["details"]["causes"]
    assert causes == [
        {
            "reason": "FieldValueRequired",
            "message": "Required value",
            "field": "spec.scaleTargetRef.name",
        }
    ]


def test_a_deployment_selector_must_match_its_template_labels(http: httpx.Client) -> None:
    """pkg/apis/apps/validation/validation.go ValidateDeploymentSpec: the template's labels
    must be selected by spec.selector."""
    body = deployment()
    body["spec"]["template"]["metadata"]["labels"] = {"app": "other"}
    status = refusal(post(http, DEPLOYMENTS, body), 422, "Invalid")
    assert status["details"]["causes"] == [
        {
            "reason": "FieldValueInvalid",
            "message": 'Invalid value: map[string]string{"app":"other"}: '
            "`selector` does not match template `labels`",
            "field": "spec.template.metadata.labels",
        }
    ]


def test_a_lease_duration_must_be_positive_and_a_preferred_holder_needs_a_strategy(
    http: httpx.Client,
) -> None:
    """pkg/apis/coordination/validation/validation.go ValidateLeaseSpec."""
    body = lease("2026-12-04T10:00:00.123456Z")
    body["spec"] |= {"leaseDurationSeconds": 0, "preferredHolder": "pod-b"}
    causes = refusal(post(http, LEASES, body), 422, "Invalid")["details"]["causes"]
    assert causes == [
        {
            "reason": "FieldValueInvalid",
            "message": "Invalid value: 0: must be greater than 0",
            "field": "spec.leaseDurationSeconds",
        },
        {
            "reason": "FieldValueForbidden",
            "message": "Forbidden: may only be specified if `strategy` is defined",
            "field": "spec.preferredHolder",
        },
    ]


def test_a_core_event_about_an_object_in_another_namespace_is_invalid(
    http: httpx.Client,
) -> None:
    """pkg/apis/core/validation/events.go legacyValidateEvent: involvedObject.namespace must
    match the Event's namespace."""
    event = {
        "metadata": {"name": "web.1"},
        "involvedObject": {"kind": "Deployment", "name": "web", "namespace": "other"},
        "reason": "Scaled",
    }
    causes = refusal(post(http, EVENTS, event), 422, "Invalid")["details"]["causes"]
    assert causes == [
        {
            "reason": "FieldValueInvalid",
            "message": 'Invalid value: "other": does not match event.namespace',
            "field": "involvedObject.namespace",
        }
    ]


# --- /openapi/v3 ------------------------------------------------------------------------------


def test_openapi_v3_lists_each_group_version_and_serves_its_schemas(
    http: httpx.Client,
) -> None:
    """https://kubernetes.io/docs/concepts/overview/kubernetes-api/#openapi-v3: the index
    maps `apis/GROUP/VERSION` to a document whose components.schemas carry
    x-kubernetes-group-version-kind; writes take fieldValidation."""
    paths = http.get("/openapi/v3").json()["paths"]
    assert {"api/v1", "apis/apps/v1", "apis/autoscaling/v2"} <= set(paths)
    assert paths["apis/apps/v1"]["serverRelativeURL"].startswith("/openapi/v3/apis/apps/v1?hash=")
    doc = http.get(paths["apis/apps/v1"]["serverRelativeURL"]).json()
    deployment_schema = doc["components"]["schemas"]["io.k8s.api.apps.v1.Deployment"]
    assert deployment_schema["x-kubernetes-group-version-kind"] == [
        {"group": "apps", "kind": "Deployment", "version": "v1"}
    ]
    post_op = doc["paths"]["/apis/apps/v1/namespaces/{namespace}/deployments"]["post"]
    assert "fieldValidation" in {p["name"] for p in post_op["parameters"]}
    core = http.get("/openapi/v3/api/v1").json()
    assert "io.k8s.api.core.v1.Pod" in core["components"]["schemas"]
    assert http.get("/openapi/v3/apis/nothing/v1").status_code == 404


def _kubectl() -> str | None:
    return shutil.which("kubectl", path=str(Path(sys.prefix) / "bin")) or shutil.which("kubectl")


@pytest.mark.skipif(_kubectl() is None, reason="no kubectl: scripts/install_kubectl.py installs it")
def test_kubectl_apply_is_strict_about_a_misspelled_field_and_applies_a_valid_manifest(
    kube: FakeKube, tmp_path: Path
) -> None:
    """kubectl apply reads /openapi/v3, then sends fieldValidation=Strict
    (https://kubernetes.io/docs/reference/using-api/api-concepts/#setting-the-field-validation-level)."""
    config = kube.kubeconfig(tmp_path / "config", namespace=NS, tls=True)
    manifest = tmp_path / "hpa.json"

    def apply(body: dict[str, Any]) -> subprocess.CompletedProcess[str]:
        manifest.write_text(json.dumps(body))
        command = [str(_kubectl()), "--kubeconfig", str(config), "apply", "-f", str(manifest)]
        return subprocess.run(command, capture_output=True, text=True, timeout=60)

    typo = apply(hpa(maxReplica=5))
    assert typo.returncode != 0
    assert 'strict decoding error: unknown field "spec.maxReplica"' in typo.stderr
    done = apply(hpa(minReplicas=2))
    assert done.returncode == 0, done.stderr
    stored = kube.get("horizontalpodautoscalers", NS, "web")
    assert (stored["spec"]["minReplicas"], stored["spec"]["maxReplicas"]) == (2, 5)
    assert any(r.query.get("fieldValidation") == "Strict" for r in kube.requests)
    again = apply(hpa(minReplicas=3, maxReplica=6))  # a second apply patches (SMP)
    assert again.returncode != 0
    assert 'strict decoding error: unknown field "spec.maxReplica"' in again.stderr
    assert kube.get("horizontalpodautoscalers", NS, "web")["spec"]["minReplicas"] == 2


def test_an_hpa_resource_metric_needs_a_name_and_a_target_it_can_use(http: httpx.Client) -> None:
    """validation.go validateMetricSpec, validateResourceSource and validateMetricTarget: a
    Resource metric names its resource and sets a utilization above 0 or a raw value."""
    metric = {"type": "Resource", "resource": {"target": {"type": "Percent"}}}
    causes = refusal(post(http, HPAS, hpa(metrics=[metric])), 422, "Invalid")["details"]["causes"]
    assert [(c["field"], c["message"]) for c in causes] == [
        ("spec.metrics[0].resource.name", "Required value: must specify a resource name"),
        (
            "spec.metrics[0].resource.target.type",
            'Invalid value: "Percent": must be either Utilization, Value, or AverageValue',
        ),
        (
            "spec.metrics[0].resource.target.averageUtilization",
            "Required value: must set either a target raw value or a target utilization",
        ),
    ]
    metric = {"type": "Pods", "resource": {"name": "cpu", "target": {"type": "Utilization"}}}
    causes = refusal(post(http, HPAS, hpa(metrics=[metric])), 422, "Invalid")["details"]["causes"]
    assert ("spec.metrics[0].pods", "FieldValueRequired") in {
        (c["field"], c["reason"]) for c in causes
    }
    metric["pods"] = {"metric": {"name": "qps"}, "target": {"type": "AverageValue"}}
    causes = refusal(post(http, HPAS, hpa(metrics=[metric])), 422, "Invalid")["details"]["causes"]
    assert causes[-1] == {
        "reason": "FieldValueForbidden",
        "message": "Forbidden: must populate the given metric source only",
        "field": "spec.metrics[0].resource",
    }


def test_a_pod_template_container_needs_a_name_and_an_image(http: httpx.Client) -> None:
    """pkg/apis/core/validation/validation.go validateContainers: name (a DNS-1123 label)
    and, in a workload's template, image are required."""
    body = deployment()
    body["spec"]["template"]["spec"]["containers"] = [{"name": "App_1"}]
    causes = refusal(post(http, DEPLOYMENTS, body), 422, "Invalid")["details"]["causes"]
    assert [(c["field"], c["reason"]) for c in causes] == [
        ("spec.template.spec.containers[0].name", "FieldValueInvalid"),
        ("spec.template.spec.containers[0].image", "FieldValueRequired"),
    ]
