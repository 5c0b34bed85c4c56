"""One small application with every watched kind, as a cluster holds it, for collector tests.

`populate()` creates a Deployment with its ReplicaSet and a crash-looping pod, a Service and
an HPA on it, a CronJob whose last Job failed, a Helm release, RBAC and networking (all
built by `sandbox.objects`), and returns the record (kind, key) each object should produce.
"""

from __future__ import annotations

from typing import Any

from sandbox import objects
from sandbox.objects import Obj

NS = "shop"


def helm_release_secret(release: str = "shop", *, revision: int = 1, ns: str = NS) -> Obj:
    """Revision `revision` of a deployed release whose manifest holds the Deployment `web`."""
    web = objects.deployment(name="web", namespace=ns)
    stored = objects.helm_release(
        name=release, namespace=ns, revision=revision, manifest=objects.manifest([web])
    )
    return objects.helm_release_secret(
        name=release, namespace=ns, revision=revision, storage=objects.helm_storage(stored)
    )


def rbac(ns: str = NS) -> list[Obj]:
    rule = {"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}
    subject = objects.service_account_subject(name="web", namespace=ns)
    return [
        objects.role(name="reader", namespace=ns, rules=[rule]),
        objects.role_binding(name="reader", namespace=ns, role="reader", subjects=[subject]),
        objects.role(name="viewer", namespace=None, rules=[rule]),
        objects.role_binding(name="viewer", namespace=None, role="viewer", subjects=[subject]),
    ]


def populate(kube: Any) -> set[tuple[str, str]]:
    """Create one of everything in a FakeKube; returns the (kind, key) of expected upserts."""
    kube.create(objects.namespace(name=NS))
    dep = kube.create(objects.deployment(name="web", namespace=NS, ready=1))
    rs = kube.create(objects.replicaset(owner=dep))
    kube.create(objects.crash_looping_pod(owner=rs))
    kube.create(objects.service(name="web", namespace=NS))
    kube.create(objects.hpa(name="web", namespace=NS))
    cron = kube.create(objects.cronjob(name="report", namespace=NS))
    job = kube.create(objects.failed_job(owner=cron))
    pod = kube.create(objects.failed_job_pod(owner=job))
    kube.set_pod_log(NS, pod["metadata"]["name"], "report", "starting\nquery failed\nexit 2\n")
    kube.create(objects.node(name="node-1"))
    kube.create(objects.ingress(name="web", namespace=NS, host="shop.example.com", service="web"))
    kube.create(objects.network_policy(name="deny-all", namespace=NS))
    for obj in rbac():
        kube.create(obj)
    kube.create(helm_release_secret())
    db = {"password": b"not-for-the-agent"}
    kube.create(objects.secret(name="db", namespace=NS, data=db))
    return {
        ("namespace", NS),
        ("deployment", f"{NS}/web"),
        ("revision", f"{NS}/{rs['metadata']['name']}"),
        ("service", f"{NS}/web"),
        ("hpa", f"{NS}/web"),
        ("cronjob", f"{NS}/report"),
        ("job_execution", f"{NS}/{job['metadata']['name']}"),
        ("node", "node-1"),
        ("ingress", f"{NS}/web"),
        ("network_policy", f"{NS}/deny-all"),
        ("rbac", f"Role/{NS}/reader"),
        ("rbac", f"RoleBinding/{NS}/reader"),
        ("rbac", "ClusterRole/viewer"),
        ("rbac", "ClusterRoleBinding/viewer"),
        ("helm_release", f"{NS}/shop/v1"),
    }
