"""The small cluster `moonin-agent demo` shows: a few namespaces and Deployments, an HPA, a
crash-looping Pod, a CronJob whose last run failed (with its log), and a Helm release.

The objects look like what a real API server returns for them (owner references, container
statuses, a release Secret encoded the way Helm encodes it), so the agent's collector treats
them exactly as it would in a cluster (`sandbox.objects` builds them). `populate()` loads them
into a `FakeKube`; `namespace` and `deployment` are what the demo adds while the platform is
down.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sandbox import objects
from sandbox.objects import Obj

if TYPE_CHECKING:
    from sandbox.kube.fake import FakeKube

SHOP = "shop"
PAYMENTS = "payments"
BATCH = "batch"
WEB = "web"
"""The Deployment (and its HPA) the demo's scaling window applies to."""
WEB_MIN, WEB_MAX = 2, 10
"""The HPA's bounds before any window."""


def populate(kube: FakeKube) -> dict[str, int]:
    """Create the demo cluster; returns how many objects of each kind were created."""
    created: dict[str, int] = {}

    def create(obj: Obj) -> Obj:
        created[obj["kind"]] = created.get(obj["kind"], 0) + 1
        return kube.create(obj)

    for name in (SHOP, PAYMENTS, BATCH):
        create(namespace(name))
    create(objects.node(name="node-1"))
    create(objects.node(name="node-2"))
    web = create(deployment(WEB, SHOP))
    web_rs = create(objects.replicaset(owner=web))
    create(objects.crash_looping_pod(owner=web_rs))
    web_service = create(objects.service(name=WEB, namespace=SHOP))
    web_hpa = create(objects.hpa(name=WEB, namespace=SHOP, low=WEB_MIN, high=WEB_MAX))
    create(deployment("cart", SHOP))
    create(deployment("api", PAYMENTS, replicas=3))
    create(objects.service(name="api", namespace=PAYMENTS))
    release = objects.helm_release(
        name=SHOP,
        namespace=SHOP,
        # Values never leave the cluster: the collector drops them.
        config={"database": {"password": "not-for-moonin"}},
        manifest=objects.manifest([web, web_service, web_hpa]),
    )
    storage = objects.helm_storage(release)
    create(objects.helm_release_secret(name=SHOP, namespace=SHOP, revision=1, storage=storage))
    report = create(objects.cronjob(name="report", namespace=BATCH))
    job = create(objects.failed_job(owner=report))
    pod = create(objects.failed_job_pod(owner=job))
    kube.set_pod_log(
        BATCH,
        pod["metadata"]["name"],
        "report",
        'connecting to warehouse\nquery failed: relation "sales" does not exist\nexit 2\n',
    )
    return created


def namespace(name: str) -> Obj:
    return objects.namespace(name=name)


def deployment(name: str, ns: str, *, replicas: int = 2) -> Obj:
    """A demo Deployment; its one environment value stays in the cluster (only the name is
    shipped)."""
    return objects.deployment(
        name=name, namespace=ns, replicas=replicas, env={"DATABASE_PASSWORD": "not-for-moonin"}
    )


def failed_job_key() -> str:
    """The record key of the CronJob's failed run (`namespace/job`)."""
    return f"{BATCH}/report-29012345"
