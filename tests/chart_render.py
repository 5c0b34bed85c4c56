"""The chart rendered by Helm's own engine, for the tests that read it.

Rendering uses helm-python-sdk, which binds Helm's Go SDK from a library inside its wheel:
no helm binary, no download, no cluster. `VARIANTS` are the values the tests render: the
defaults and each switch that changes what the chart installs.
"""

from __future__ import annotations

import base64
import copy
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import helm_python as helm
import trustme
import yaml

ROOT = Path(__file__).resolve().parent.parent
CHART = ROOT / "helm" / "moonin-agent"
RELEASE = "moonin-agent"
NAMESPACE = "moonin"
CREDENTIALS = {"projectId": "p-1", "clusterId": "c-1", "clusterToken": "t0ken-abc-7d2e91f4"}
WORKLOAD_KINDS = ("Deployment", "StatefulSet", "Job")
# A private CA's certificate, as an operator behind a TLS-inspecting proxy gives it.
CA_PEM = trustme.CA().cert_pem.bytes().decode().strip()


def chart_values(**sections: Any) -> dict[str, Any]:
    """Values with working credentials, and the given top-level sections on top."""
    values: dict[str, Any] = {"global": {"clusterCredentials": dict(CREDENTIALS)}}
    values.update(sections)
    return values


CUSTOM_CONFIG = {
    "logLevel": "debug",
    "ignoreNamespaces": ["kube-system", "scratch-*"],
    "ignoreResources": ["job/*", "deployment/shop/canary-*"],
    "ignoreNodeLabels": ["example.com/owner"],
    "collectHelmReleases": True,
    "collectJobLogs": True,
    "collectEvents": True,
    "cloudMetadata": False,
    "extra": {"batch_max_records": 200, "linger_seconds": 0.5, "queue_max_records": 5000000},
    "caBundle": CA_PEM,
}

VARIANTS: dict[str, dict[str, Any]] = {
    "default": chart_values(),
    "scaling-disabled": chart_values(scaling={"enabled": False}),
    "persistence": chart_values(
        persistence={"enabled": True, "storageClassName": "fast-ssd", "size": "2Gi"}
    ),
    "existing-secret": {
        "global": {
            "credentialsSecretName": "moonin-credentials-external",
            "clusterCredentials": {"create": False},
        }
    },
    "collection-off": chart_values(config={"collectHelmReleases": False, "collectJobLogs": False}),
    "events-off": chart_values(config={"collectEvents": False}),
    "custom-config": chart_values(config=CUSTOM_CONFIG, queue={"maxBytes": 104857600}),
    "monitored-single-replica": chart_values(
        metrics={"serviceMonitor": {"enabled": True, "labels": {"release": "prometheus"}}},
        discovery={"replicaCount": 1},
    ),
    "no-leader-election": chart_values(discovery={"leaderElection": False, "replicaCount": 1}),
}


@dataclass(frozen=True)
class Rendered:
    """One rendering of the chart: its manifests by template, parsed into objects."""

    values: dict[str, Any]
    manifests: dict[str, str]
    objects: list[dict[str, Any]] = field(default_factory=list)

    def of_kind(self, kind: str) -> list[dict[str, Any]]:
        return [obj for obj in self.objects if obj["kind"] == kind]

    def one(self, kind: str, name: str) -> dict[str, Any]:
        found = [obj for obj in self.of_kind(kind) if obj["metadata"]["name"] == name]
        assert len(found) == 1, f"expected one {kind} {name}, found {len(found)}"
        return found[0]

    @property
    def notes(self) -> str:
        return next(text for path, text in self.manifests.items() if path.endswith("NOTES.txt"))

    def workloads(self) -> list[dict[str, Any]]:
        return [obj for obj in self.objects if obj["kind"] in WORKLOAD_KINDS]

    def workload(self, component: str) -> dict[str, Any]:
        found = [obj for obj in self.workloads() if component_of(obj) == component]
        assert len(found) == 1, f"expected one {component} workload, found {len(found)}"
        return found[0]


def component_of(obj: dict[str, Any]) -> str | None:
    return obj["metadata"].get("labels", {}).get("app.kubernetes.io/component")


def render(chart: helm.Chart, values: dict[str, Any]) -> Rendered:
    manifests = chart.render(copy.deepcopy(values), name=RELEASE, namespace=NAMESPACE)
    objects = [
        obj
        for path, text in sorted(manifests.items())
        if path.endswith((".yaml", ".yml"))
        for obj in yaml.safe_load_all(text)
        if obj
    ]
    return Rendered(values=values, manifests=manifests, objects=objects)


def bindings_of(
    rendered: Rendered, service_account: str
) -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
    """(binding, the role it refers to) for each binding of a ServiceAccount of the release."""
    for binding in rendered.of_kind("RoleBinding") + rendered.of_kind("ClusterRoleBinding"):
        subjects = {(s["kind"], s["name"]) for s in binding["subjects"]}
        if ("ServiceAccount", service_account) not in subjects:
            continue
        ref = binding["roleRef"]
        role = rendered.one(ref["kind"], ref["name"])
        if ref["kind"] == "Role":
            assert role["metadata"]["namespace"] == NAMESPACE
        yield binding, role


def rules_of(rendered: Rendered, service_account: str) -> list[dict[str, Any]]:
    """Every RBAC rule granted to a ServiceAccount of the release, through any binding."""
    return [rule for _, role in bindings_of(rendered, service_account) for rule in role["rules"]]


def container_environment(
    rendered: Rendered,
    workload: dict[str, Any],
    container: dict[str, Any],
    root: Path,
    downward: dict[str, str] | None = None,
) -> dict[str, str]:
    """The environment the kubelet would give the container, its mounts laid under root
    (paths in values moved along); `downward`: the pod's fields by path
    (`metadata.name`), a placeholder for each when not given."""
    secret = rendered.one("Secret", "moonin-credentials")
    secret_data = {k: base64.b64decode(v).decode() for k, v in secret["data"].items()}
    volumes = {v["name"]: v for v in workload["spec"]["template"]["spec"]["volumes"]}
    moved = {}
    for mount in container["volumeMounts"]:
        target = root / mount["name"]
        target.mkdir(parents=True, exist_ok=True)
        volume = volumes[mount["name"]]
        if "configMap" in volume:
            config_map = rendered.one("ConfigMap", volume["configMap"]["name"])
            for key, text in config_map["data"].items():
                (target / key).write_text(text)
        elif "secret" in volume:
            for item in volume["secret"]["items"]:
                (target / item["path"]).write_text(secret_data[item["key"]])
        moved[mount["mountPath"]] = str(target)
    environment = {}
    for item in container["env"]:
        if "value" in item:
            value = item["value"]
            for mount_path, local in sorted(moved.items(), key=lambda m: -len(m[0])):
                if value == mount_path or value.startswith(mount_path + "/"):
                    value = local + value[len(mount_path) :]
                    break
            environment[item["name"]] = value
        elif "secretKeyRef" in item["valueFrom"]:
            environment[item["name"]] = secret_data[item["valueFrom"]["secretKeyRef"]["key"]]
        else:
            path = item["valueFrom"]["fieldRef"]["fieldPath"]
            environment[item["name"]] = (downward or {}).get(path, "from-the-downward-api")
    return environment
