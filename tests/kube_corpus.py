"""One corpus of Kubernetes API requests, played against the fake and the real API server
alike (`tests/real/test_fake_matches_real.py`): every request shape the agent sends, and the
error cases the fake claims to model (docs/fake-kube.md).

A case is data: setup requests (made as the admin; each must succeed), then the requests
whose answers are compared. Paths, queries and bodies may name `{ns}` (the case's own
namespace, of the same name on both servers), `{rv}` (the resourceVersion of the last
answer that had one), `{first_rv}`, `{future_rv}` (far ahead of the server), `{uid}` and
`{continue}` (the last list's continue token). `COMPACT` in either list drops the
server's history up to that point (on the real server: etcd compacted and the API server
restarted, so that its watch cache, which outlives a compaction, starts over). Tokens:
`admin`, `nobody` (a ServiceAccount of the namespace bound to nothing), `unknown` (a token
no server issued) and `none`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sandbox import objects

MERGE = "application/merge-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"
JSON_PATCH = "application/json-patch+json"
TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io"
PARTIAL_LIST = "application/json;as=PartialObjectMetadataList;v=v1;g=meta.k8s.io"
PARTIAL = "application/json;as=PartialObjectMetadata;v=v1;g=meta.k8s.io"

CORE = "/api/v1/namespaces/{ns}"
DEPLOYMENTS = "/apis/apps/v1/namespaces/{ns}/deployments"
HPAS = "/apis/autoscaling/v2/namespaces/{ns}/horizontalpodautoscalers"
LEASES = "/apis/coordination.k8s.io/v1/namespaces/{ns}/leases"
SECRETS = f"{CORE}/secrets"
CONFIGMAPS = f"{CORE}/configmaps"
EVENTS = f"{CORE}/events"
PODS = f"{CORE}/pods"
STRICT = {"fieldValidation": "Strict"}
HELM = "helm.sh/release.v1"
# How discovery selects Helm's release Secrets (collector/resources.py).
HELM_RELEASES = {"labelSelector": "owner=helm", "fieldSelector": f"type={HELM}"}
# What a real control plane's controllers write on their own (Deployment and HPA status,
# managed fields of their status writes): not an answer to the request.
CONTROLLED = ("status", "metadata.managedFields")
# Read back after a create, also the resourceVersion those writes move on.
CONTROLLED_READ = (
    *CONTROLLED,
    "metadata.resourceVersion",
    "items.status",
    "items.metadata.managedFields",
    "items.metadata.resourceVersion",
)
# A Scale's resourceVersion is its Deployment's, which the real controller moves on.
SCALE_CONTROLLED = ("status", "metadata.resourceVersion")


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    query: dict[str, str] = field(default_factory=dict)
    body: Any = None  # a dict or list is sent as JSON, a str as it is
    content_type: str | None = "application/json"
    accept: str | None = None
    token: str = "admin"
    # A watch: how many of its compared events to read (0: until the stream ends).
    watch_events: int | None = None
    # Dotted paths of the answer left out of the comparison.
    ignore: tuple[str, ...] = ()
    # Compare only the top-level keys of the answer (its values are the server's own).
    keys_only: bool = False


@dataclass(frozen=True)
class Case:
    name: str
    requests: tuple[Request, ...]
    setup: tuple[Request, ...] = ()
    cleanup: tuple[str, ...] = ()  # paths of cluster-scoped objects the case made

    @property
    def tokens(self) -> set[str]:
        return {request.token for request in (*self.setup, *self.requests)}


COMPACT = Request("COMPACT", "")


def get(path: str, **options: Any) -> Request:
    return Request("GET", path, **options)


def post(path: str, body: Any, **options: Any) -> Request:
    return Request("POST", path, body=body, **options)


def put(path: str, body: Any, **options: Any) -> Request:
    return Request("PUT", path, body=body, **options)


def patch(path: str, body: Any, content_type: str = MERGE, **options: Any) -> Request:
    return Request("PATCH", path, body=body, content_type=content_type, **options)


def delete(path: str, body: Any = None, **options: Any) -> Request:
    return Request("DELETE", path, body=body, **options)


def watch(
    path: str, events: int, token: str = "admin", accept: str | None = None, **query: str
) -> Request:
    """A watch ending after `timeoutSeconds` (2 unless given) or `events` compared events."""
    query = {"watch": "true", "timeoutSeconds": "2", **query}
    return get(path, query=query, watch_events=events, token=token, accept=accept)


def secret(name: str, kind: str = "Opaque") -> dict[str, Any]:
    return objects.secret(name=name, namespace="{ns}", data={"k": b"v"}, type=kind)


def helm_secret(name: str) -> dict[str, Any]:
    """A Secret as Helm stores a release: labelled `owner: helm`, of its type."""
    obj = secret(name, HELM)
    obj["metadata"]["labels"] = {"owner": "helm", "name": name}
    return obj


def configmap(name: str, **metadata: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, **metadata},
        "data": {"k": "v"},
    }


def lease(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": name},
        "spec": {"holderIdentity": "pod-a", "leaseDurationSeconds": 15, **spec},
    }


def deployment(name: str = "web") -> dict[str, Any]:
    obj = objects.deployment(name=name, namespace="{ns}", replicas=2)
    del obj["status"]
    return obj


def hpa(name: str = "web", **options: Any) -> dict[str, Any]:
    return objects.hpa(name=name, namespace="{ns}", **options)


def event(name: str, kind: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": name, "namespace": "{ns}"},
        "involvedObject": {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "name": "c",
            "namespace": "{ns}",
        },
        "reason": "Tested",
        "message": "a test event",
        "type": kind,
        "source": {"component": "moonin-agent", "host": "pod-a"},
        "reportingComponent": "moonin-agent",
        "reportingInstance": "pod-a",
        "firstTimestamp": "2026-12-04T10:00:00Z",
        "lastTimestamp": "2026-12-04T10:00:00Z",
        "count": 1,
    }


def two_container_deployment() -> dict[str, Any]:
    """A Deployment of `app` (with one env var) and a `proxy`, for patches to merge into."""
    obj = deployment()
    obj["spec"]["template"]["spec"]["containers"] = [
        {"name": "app", "image": "shop/web:1", "env": [{"name": "A", "value": "1"}]},
        {"name": "proxy", "image": "envoy:1"},
    ]
    return obj


SECRETS_SEEDED = (
    post(SECRETS, secret("a", "helm.sh/release.v1")),
    post(SECRETS, secret("b")),
    post(SECRETS, secret("c", "helm.sh/release.v1")),
)
LEASE_SEEDED = (post(LEASES, lease("l")),)
HPA_SEEDED = (post(HPAS, hpa()),)
DEPLOYMENT_SEEDED = (post(DEPLOYMENTS, deployment()),)
CONFIGMAP_SEEDED = (post(CONFIGMAPS, configmap("c")),)

# -- what the agent sends ----------------------------------------------------------------------

AGENT = [
    Case("version is served to an admin", (get("/version", keys_only=True),)),
    Case(
        "a secret list pages by limit and continue",
        (
            get(SECRETS, query={"limit": "2"}),
            get(SECRETS, query={"limit": "2", "continue": "{continue}"}),
        ),
        setup=SECRETS_SEEDED,
    ),
    Case(
        "secrets narrowed to helm releases by type",
        (get(SECRETS, query={"fieldSelector": "type=helm.sh/release.v1", "limit": "500"}),),
        setup=SECRETS_SEEDED,
    ),
    Case(
        "secrets narrowed by metadata.name",
        (get(SECRETS, query={"fieldSelector": "metadata.name=b"}),),
        setup=SECRETS_SEEDED,
    ),
    Case(
        "events narrowed to warnings by type",
        (get(EVENTS, query={"fieldSelector": "type=Warning", "limit": "500"}),),
        setup=(post(EVENTS, event("w", "Warning")), post(EVENTS, event("n", "Normal"))),
    ),
    Case(
        "helm releases are listed, streamed and watched as metadata, then read one by one",
        (
            get(SECRETS, query={**HELM_RELEASES, "limit": "500"}, accept=PARTIAL_LIST),
            watch(
                SECRETS,
                2,
                accept=PARTIAL,
                sendInitialEvents="true",
                resourceVersionMatch="NotOlderThan",
                allowWatchBookmarks="true",
                **HELM_RELEASES,
            ),
            post(SECRETS, helm_secret("r2")),
            watch(SECRETS, 1, accept=PARTIAL, resourceVersion="{first_rv}", **HELM_RELEASES),
            get(f"{SECRETS}/r1"),
        ),
        setup=(
            post(SECRETS, helm_secret("r1")),
            post(SECRETS, secret("unlabelled", HELM)),
            post(SECRETS, secret("opaque")),
        ),
    ),
    Case(
        "a streaming list sends each object then the initial-events-end bookmark",
        (
            watch(
                SECRETS,
                3,
                sendInitialEvents="true",
                resourceVersionMatch="NotOlderThan",
                allowWatchBookmarks="true",
                fieldSelector="type=helm.sh/release.v1",
            ),
        ),
        setup=SECRETS_SEEDED,
    ),
    Case(
        "warning events come by a streaming list narrowed by type",
        (
            watch(
                EVENTS,
                2,
                sendInitialEvents="true",
                resourceVersionMatch="NotOlderThan",
                allowWatchBookmarks="true",
                fieldSelector="type=Warning",
            ),
        ),
        setup=(post(EVENTS, event("w", "Warning")), post(EVENTS, event("n", "Normal"))),
    ),
    Case(
        "a watch from a resourceVersion sends the changes after it",
        (watch(LEASES, 2, resourceVersion="{first_rv}", allowWatchBookmarks="true"),),
        setup=(
            post(LEASES, lease("a")),
            post(LEASES, lease("b")),
            patch(f"{LEASES}/a", {"spec": {"holderIdentity": "pod-b"}}),
            delete(f"{LEASES}/b"),
        ),
    ),
    Case(
        "a lease is created, read and renewed with its resourceVersion",
        (
            post(LEASES, lease("l", renewTime="2026-12-04T10:00:00.000000Z"), query=STRICT),
            get(f"{LEASES}/l"),
            put(
                f"{LEASES}/l",
                {
                    **lease("l", holderIdentity="pod-b"),
                    "metadata": {"name": "l", "resourceVersion": "{rv}"},
                },
                query=STRICT,
            ),
        ),
    ),
    Case(
        "a lease renewed with a stale resourceVersion conflicts",
        (
            put(
                f"{LEASES}/l",
                {**lease("l"), "metadata": {"name": "l", "resourceVersion": "{first_rv}"}},
                query=STRICT,
            ),
        ),
        setup=(*LEASE_SEEDED, patch(f"{LEASES}/l", {"spec": {"holderIdentity": "pod-c"}})),
    ),
    Case(
        "a lease renewTime needs six fractional digits and may carry an offset",
        (
            post(LEASES, lease("l", renewTime="2026-12-04T10:00:00Z"), query=STRICT),
            post(LEASES, lease("l", renewTime="2026-12-04T10:00:00.123Z"), query=STRICT),
            post(LEASES, lease("l", renewTime="2026-12-04T10:00:00.123456+00:00"), query=STRICT),
        ),
    ),
    Case(
        "an hpa is created with the autoscaling v2 defaults",
        (post(HPAS, hpa(low=None, metric="memory"), query=STRICT),),
    ),
    Case(
        "an hpa without metrics defaults to cpu at 80 percent",
        (post(HPAS, {**hpa(), "spec": {**hpa()["spec"], "metrics": []}}, query=STRICT),),
    ),
    Case(
        "hpas list in pages of 500, in a namespace and across all",
        (
            get(HPAS, query={"limit": "500"}, ignore=CONTROLLED_READ),
            get(
                "/apis/autoscaling/v2/horizontalpodautoscalers",
                query={"limit": "500", "fieldSelector": "metadata.namespace={ns}"},
                ignore=CONTROLLED_READ,
            ),
            get(f"{HPAS}/web", ignore=CONTROLLED_READ),
        ),
        setup=HPA_SEEDED,
    ),
    Case(
        "an hpa merge patch with a stale resourceVersion conflicts",
        (
            patch(
                f"{HPAS}/web",
                {"metadata": {"resourceVersion": "{first_rv}", "annotations": {"a": "1"}}},
                query=STRICT,
            ),
        ),
        setup=(*HPA_SEEDED, patch(f"{HPAS}/web", {"spec": {"maxReplicas": 11}})),
    ),
    Case(
        "an hpa merge patch sets bounds and annotations",
        (
            patch(
                f"{HPAS}/web",
                {
                    "metadata": {"annotations": {"moonin.app/x": "1"}},
                    "spec": {"minReplicas": 3, "maxReplicas": 12},
                },
                query={**STRICT, "fieldManager": "moonin-agent"},
                ignore=CONTROLLED,
            ),
        ),
        setup=HPA_SEEDED,
    ),
    Case(
        "an hpa strategic merge patch and a json patch",
        (
            patch(f"{HPAS}/web", {"spec": {"maxReplicas": 9}}, STRATEGIC, ignore=CONTROLLED),
            patch(
                f"{HPAS}/web",
                [{"op": "replace", "path": "/spec/minReplicas", "value": 4}],
                JSON_PATCH,
                ignore=CONTROLLED,
            ),
        ),
        setup=HPA_SEEDED,
    ),
    Case(
        "an hpa is deleted with uid and resourceVersion preconditions",
        (
            delete(
                f"{HPAS}/web",
                {
                    "apiVersion": "v1",
                    "kind": "DeleteOptions",
                    "preconditions": {"uid": "{uid}", "resourceVersion": "{rv}"},
                },
            ),
            get(f"{HPAS}/web"),
        ),
        setup=(*HPA_SEEDED, patch(f"{HPAS}/web", {"metadata": {"labels": {"x": "y"}}})),
    ),
    Case(
        "an hpa delete with a stale resourceVersion precondition conflicts",
        (delete(f"{HPAS}/web", {"preconditions": {"resourceVersion": "{first_rv}"}}),),
        setup=(*HPA_SEEDED, patch(f"{HPAS}/web", {"metadata": {"labels": {"x": "y"}}})),
    ),
    Case(
        "a deployment is created with the apps v1 defaults and patched",
        (
            post(DEPLOYMENTS, deployment(), query=STRICT, ignore=CONTROLLED),
            patch(
                f"{DEPLOYMENTS}/web",
                {"spec": {"replicas": 3}},
                query={**STRICT, "fieldManager": "moonin-agent"},
                ignore=(*CONTROLLED, "metadata.annotations"),
            ),
            get(f"{DEPLOYMENTS}/web", ignore=(*CONTROLLED_READ, "metadata.annotations")),
        ),
    ),
    Case(
        "a deployment's scale is read and patched",
        (
            get(f"{DEPLOYMENTS}/web/scale", ignore=SCALE_CONTROLLED),
            patch(f"{DEPLOYMENTS}/web/scale", {"spec": {"replicas": 1}}, ignore=SCALE_CONTROLLED),
            patch(f"{DEPLOYMENTS}/web/scale", {"spec": {"replicas": -1}}),
            put(f"{DEPLOYMENTS}/web/scale", {"spec": {"replicas": 9}}),
            put(
                f"{DEPLOYMENTS}/web/scale",
                {
                    "metadata": {"name": "web", "resourceVersion": "{first_rv}"},
                    "spec": {"replicas": 9},
                },
            ),
            put(
                f"{DEPLOYMENTS}/web/scale",
                {"metadata": {"name": "web"}, "spec": {"replicas": 6}},
                query={"dryRun": "All"},
                ignore=SCALE_CONTROLLED,
            ),
            get(f"{DEPLOYMENTS}/web", ignore=(*CONTROLLED_READ, "metadata.annotations")),
            get(f"{DEPLOYMENTS}/gone/scale"),
        ),
        setup=(
            *DEPLOYMENT_SEEDED,
            patch(f"{DEPLOYMENTS}/web", {"metadata": {"labels": {"touched": "yes"}}}),
        ),
    ),
    Case(
        "a pod's log is asked for its last lines",
        (get(f"{PODS}/p/log", query={"container": "app", "tailLines": "10"}),),
        setup=(post(PODS, objects.pod(name="p", namespace="{ns}")),),
    ),
    Case(
        "an event is created as the scaling role records one",
        (post(EVENTS, event("web.1", "Normal"), query={**STRICT, "fieldManager": "moonin-agent"}),),
    ),
]

# -- what the fake claims to model ---------------------------------------------------------------

BAD_BODIES = [
    Case(
        "a value of the wrong type is a bad request and nothing is stored",
        (
            post(
                DEPLOYMENTS, {**deployment(), "spec": {**deployment()["spec"], "replicas": "two"}}
            ),
            post(HPAS, {**hpa(), "spec": {**hpa()["spec"], "maxReplicas": 2**31}}),
            get(DEPLOYMENTS),
            get(HPAS),
        ),
    ),
    Case(
        "unknown and duplicate fields under strict validation are named in document order",
        (
            post(
                DEPLOYMENTS,
                '{"apiVersion": "apps/v1", "kind": "Deployment",'
                ' "metadata": {"name": "web", "name": "web", "unknownMeta": 1},'
                ' "spec": {"foo": 1, "dupe": 1, "dupe": 2, "paused": true, "paused": false,'
                ' "selector": {"matchLabels": {"app": "web"}}, "template": {"metadata":'
                ' {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "app",'
                ' "image": "web:1", "nested": 1, "imagePullPolicy": "Always",'
                ' "imagePullPolicy": "Never"}]}}}}',
                query=STRICT,
            ),
            get(DEPLOYMENTS),
        ),
    ),
    Case(
        "unknown fields are dropped with a warning by default",
        (
            post(DEPLOYMENTS, {**deployment(), "spec": {**deployment()["spec"], "foo": "bar"}}),
            get(f"{DEPLOYMENTS}/web", ignore=CONTROLLED_READ),
        ),
    ),
    Case(
        "unknown fields under strict field validation are a bad request",
        (post(CONFIGMAPS, {**configmap("c"), "spec": {"foo": 1}, "extra": True}, query=STRICT),),
    ),
    Case(
        "unknown fields under warn field validation are dropped with warnings",
        (post(CONFIGMAPS, {**configmap("c"), "extra": True}, query={"fieldValidation": "Warn"}),),
    ),
    Case(
        "unknown fields under ignore field validation are dropped silently",
        (
            post(
                CONFIGMAPS, {**configmap("c"), "extra": True}, query={"fieldValidation": "Ignore"}
            ),
            get(f"{CONFIGMAPS}/c"),
        ),
    ),
    Case(
        "duplicate keys under strict field validation are a bad request",
        (
            post(
                CONFIGMAPS,
                '{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c","name":"d"},"data":{}}',
                query=STRICT,
            ),
        ),
    ),
    Case(
        "a body that is not json or not an object is a bad request worded as go words it",
        (
            post(CONFIGMAPS, "xyz"),
            post(DEPLOYMENTS, '{"metadata": x}'),
            post(DEPLOYMENTS, '{"metadata": {'),
            post(DEPLOYMENTS, "kind: Deployment"),
            post(DEPLOYMENTS, "[1]"),
            post(DEPLOYMENTS, {"metadata": "web"}),
        ),
    ),
    Case(
        "an invalid object name is invalid and nothing is stored",
        (post(CONFIGMAPS, configmap("Not_Valid")), post(HPAS, hpa("Bad_Name")), get(HPAS)),
    ),
    Case(
        "an invalid label is invalid",
        (post(CONFIGMAPS, configmap("c", labels={"bad key!": "bad value!"})),),
    ),
    Case(
        "a create carrying a resourceVersion is refused",
        (post(CONFIGMAPS, configmap("c", resourceVersion="5")),),
    ),
    Case(
        "a field validation value that is not one of three is invalid",
        (post(CONFIGMAPS, configmap("c"), query={"fieldValidation": "Loose"}),),
    ),
    Case(
        "hpa bounds are held on create and on patch",
        (
            post(HPAS, hpa(low=7, high=5)),
            post(HPAS, hpa(low=0, high=0)),
            post(HPAS, hpa(low=2, high=5), ignore=CONTROLLED),
            patch(f"{HPAS}/web", {"spec": {"minReplicas": 9}}),
            get(f"{HPAS}/web", ignore=CONTROLLED_READ),
        ),
    ),
    Case(
        "a body in an unknown media type is unsupported",
        (post(CONFIGMAPS, "a: b", content_type="text/plain"),),
    ),
]

WRITES = [
    Case(
        "an update must name the object of its path and carry its uid",
        (
            put(f"{CONFIGMAPS}/c", {"data": {"k": "w"}}),
            put(f"{CONFIGMAPS}/c", configmap("d", resourceVersion="{first_rv}")),
            put(f"{CONFIGMAPS}/c", configmap("c", uid="not-its-uid")),
        ),
        setup=CONFIGMAP_SEEDED,
    ),
    Case(
        "an update with a stale resourceVersion conflicts",
        (put(f"{CONFIGMAPS}/c", configmap("c", resourceVersion="{first_rv}")),),
        setup=(*CONFIGMAP_SEEDED, patch(f"{CONFIGMAPS}/c", {"data": {"k": "w"}})),
    ),
    Case(
        "a json patch whose test op fails is invalid",
        (
            patch(
                f"{CONFIGMAPS}/c", [{"op": "test", "path": "/data/k", "value": "other"}], JSON_PATCH
            ),
        ),
        setup=CONFIGMAP_SEEDED,
    ),
    Case(
        "a json patch on a missing path is invalid",
        (
            patch(
                f"{CONFIGMAPS}/c",
                [{"op": "replace", "path": "/data/missing/deeper", "value": "x"}],
                JSON_PATCH,
            ),
        ),
        setup=CONFIGMAP_SEEDED,
    ),
    Case(
        "a strategic merge patch merges containers by name and deletes by directive",
        (
            patch(
                f"{DEPLOYMENTS}/web",
                {
                    "spec": {
                        "template": {
                            "spec": {
                                "containers": [
                                    {
                                        "name": "app",
                                        "image": "shop/web:2",
                                        "env": [{"name": "B", "value": "2"}],
                                    },
                                    {"name": "new", "image": "sidecar:1"},
                                    {"name": "proxy", "$patch": "delete"},
                                ]
                            }
                        }
                    }
                },
                STRATEGIC,
                ignore=(*CONTROLLED, "metadata.annotations"),
            ),
        ),
        setup=(post(DEPLOYMENTS, two_container_deployment()),),
    ),
    Case(
        "a merge patch replaces lists and removes what is null",
        (
            patch(
                f"{DEPLOYMENTS}/web",
                {
                    "metadata": {"labels": {"app": None, "team": "shop"}},
                    "spec": {
                        "template": {"spec": {"containers": [{"name": "only", "image": "x:1"}]}}
                    },
                },
                ignore=(*CONTROLLED, "metadata.annotations"),
            ),
        ),
        setup=(post(DEPLOYMENTS, two_container_deployment()),),
    ),
    Case(
        "a json patch applies its operations and a failed test changes nothing",
        (
            patch(
                f"{DEPLOYMENTS}/web",
                [
                    {"op": "test", "path": "/spec/replicas", "value": 2},
                    {"op": "replace", "path": "/spec/replicas", "value": 4},
                    {"op": "add", "path": "/metadata/annotations/a~1b", "value": "1"},
                    {
                        "op": "copy",
                        "from": "/metadata/annotations/a~1b",
                        "path": "/metadata/labels/copied",
                    },
                    {
                        "op": "move",
                        "from": "/metadata/labels/app",
                        "path": "/metadata/labels/moved",
                    },
                    {"op": "remove", "path": "/spec/template/spec/containers/1"},
                ],
                JSON_PATCH,
                ignore=CONTROLLED,
            ),
            patch(
                f"{DEPLOYMENTS}/web",
                [
                    {"op": "test", "path": "/spec/replicas", "value": 2},
                    {"op": "replace", "path": "/spec/replicas", "value": 9},
                ],
                JSON_PATCH,
            ),
            get(f"{DEPLOYMENTS}/web", ignore=CONTROLLED_READ),
        ),
        setup=(post(DEPLOYMENTS, two_container_deployment()),),
    ),
    Case(
        "a patch of any type carrying a stale resourceVersion conflicts",
        (
            patch(
                f"{DEPLOYMENTS}/web",
                {"metadata": {"resourceVersion": "{first_rv}"}, "spec": {"replicas": 9}},
                STRATEGIC,
            ),
            patch(
                f"{DEPLOYMENTS}/web",
                {"metadata": {"resourceVersion": "{first_rv}"}, "spec": {"replicas": 9}},
            ),
            patch(
                f"{DEPLOYMENTS}/web",
                [{"op": "replace", "path": "/metadata/resourceVersion", "value": "{first_rv}"}],
                JSON_PATCH,
            ),
        ),
        setup=(*DEPLOYMENT_SEEDED, patch(f"{DEPLOYMENTS}/web", {"spec": {"replicas": 3}})),
    ),
    Case(
        "a merge patch that is not json is a bad request",
        (patch(f"{CONFIGMAPS}/c", "{not json"),),
        setup=CONFIGMAP_SEEDED,
    ),
    Case(
        "a strategic merge patch that is not an object is a bad request",
        (patch(f"{CONFIGMAPS}/c", "[1]", STRATEGIC),),
        setup=CONFIGMAP_SEEDED,
    ),
    Case(
        "a patch in a media type that is no patch type is unsupported",
        (patch(f"{CONFIGMAPS}/c", {"data": {}}, "application/json"),),
        setup=CONFIGMAP_SEEDED,
    ),
    Case(
        "a missing object is not found, to read, patch and delete",
        (
            get(f"{CONFIGMAPS}/nothing"),
            patch(f"{CONFIGMAPS}/nothing", {"data": {}}),
            delete(f"{CONFIGMAPS}/nothing"),
        ),
    ),
    Case(
        "an unknown resource is not found",
        (
            get(f"{CORE}/gizmos"),
            get("/apis/nothing.example/v1/things"),
            get("/nothing"),
            get(f"{DEPLOYMENTS}/web/bogus"),
        ),
        setup=DEPLOYMENT_SEEDED,
    ),
    Case(
        "a method a path does not allow is not allowed",
        (put(CONFIGMAPS, configmap("c")), post(f"{CONFIGMAPS}/c", configmap("c"))),
    ),
    Case(
        "a create into a missing namespace is not found",
        (
            post("/api/v1/namespaces/{ns}-missing/configmaps", configmap("c")),
            get("/api/v1/namespaces/{ns}-missing/configmaps"),
        ),
    ),
    Case(
        "a generated name is the prefix and five characters",
        (post(CONFIGMAPS, {**configmap(""), "metadata": {"generateName": "job-"}}),),
    ),
    Case(
        "dry runs answer what would be stored and store nothing",
        (
            post(CONFIGMAPS, configmap("d"), query={"dryRun": "All"}),
            get(f"{CONFIGMAPS}/d"),
            patch(f"{CONFIGMAPS}/c", {"data": {"k": "dry"}}, query={"dryRun": "All"}),
            delete(f"{CONFIGMAPS}/c", query={"dryRun": "All"}),
            get(f"{CONFIGMAPS}/c"),
        ),
        setup=CONFIGMAP_SEEDED,
    ),
    Case(
        "a dry-run delete, by query or by body, answers as a delete would and keeps all",
        (
            delete(f"{CONFIGMAPS}/c", query={"dryRun": "All"}),
            delete(f"{CONFIGMAPS}/held", {"dryRun": ["All"]}),
            get(f"{CONFIGMAPS}/c"),
            get(f"{CONFIGMAPS}/held"),
        ),
        setup=(
            *CONFIGMAP_SEEDED,
            post(CONFIGMAPS, configmap("held", finalizers=["example.com/a"])),
        ),
    ),
    Case(
        "delete options come from the body or else the query and must hold",
        (
            delete(f"{CONFIGMAPS}/c", query={"dryRun": "Some"}),
            delete(f"{CONFIGMAPS}/c", {"propagationPolicy": "Sideways"}),
            delete(f"{CONFIGMAPS}/c", {"propagationPolicy": "Orphan", "orphanDependents": True}),
            get(f"{CONFIGMAPS}/c"),
            # A body's options are the options: the query's are not read at all.
            delete(f"{CONFIGMAPS}/c", {"dryRun": ["All"]}, query={"dryRun": "Some"}),
            get(f"{CONFIGMAPS}/c"),
        ),
        setup=CONFIGMAP_SEEDED,
    ),
    Case(
        "a delete that waits on a finalizer and said orphanDependents false is accepted",
        (delete(f"{CONFIGMAPS}/held", {"orphanDependents": False}),),
        setup=(post(CONFIGMAPS, configmap("held", finalizers=["example.com/a"])),),
    ),
    Case(
        "an object with a finalizer is marked on delete and goes when it is removed",
        (
            delete(f"{CONFIGMAPS}/c"),
            delete(f"{CONFIGMAPS}/c"),
            get(f"{CONFIGMAPS}/c"),
            patch(f"{CONFIGMAPS}/c", {"metadata": {"finalizers": None}}),
            get(f"{CONFIGMAPS}/c"),
            watch(CONFIGMAPS, 2, resourceVersion="{first_rv}", fieldSelector="metadata.name=c"),
        ),
        setup=(post(CONFIGMAPS, configmap("c", finalizers=["example.com/hold"])),),
    ),
    Case(
        "an object held by two finalizers goes with the update that removes the last",
        (
            delete(f"{CONFIGMAPS}/c"),
            patch(f"{CONFIGMAPS}/c", {"metadata": {"finalizers": ["example.com/b"]}}),
            put(f"{CONFIGMAPS}/c", configmap("c", finalizers=[])),
            get(f"{CONFIGMAPS}/c"),
            watch(CONFIGMAPS, 3, resourceVersion="{first_rv}", fieldSelector="metadata.name=c"),
        ),
        setup=(post(CONFIGMAPS, configmap("c", finalizers=["example.com/a", "example.com/b"])),),
    ),
    Case(
        "a deleted namespace answers terminating",
        (
            post(
                "/api/v1/namespaces",
                {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "{ns}-gone"}},
            ),
            delete("/api/v1/namespaces/{ns}-gone", ignore=("status.conditions",)),
        ),
        cleanup=("/api/v1/namespaces/{ns}-gone",),
    ),
]

AUTH = [
    Case(
        "a request without a token is anonymous, allowed only the public paths",
        (
            get(CONFIGMAPS, token="none"),
            get("/apis", token="none"),
            get("/version", token="none", keys_only=True),
            get("/healthz", token="none"),
        ),
    ),
    Case(
        "an unknown token is unauthorized everywhere",
        tuple(
            get(path, token="unknown") for path in (CONFIGMAPS, "/api/v1", "/version", "/healthz")
        ),
    ),
    Case(
        "a service account without rights is forbidden",
        (
            get(CONFIGMAPS, token="nobody"),
            get(f"{CONFIGMAPS}/c", token="nobody"),
            get("/api/v1/nodes", token="nobody"),
            watch(CONFIGMAPS, 0, token="nobody"),
        ),
    ),
]

NEGOTIATION = [
    Case(
        "a list as a table",
        (get(LEASES, accept=TABLE), get(f"{LEASES}/l", accept=TABLE)),
        setup=LEASE_SEEDED,
    ),
    Case(
        "a list and a get as partial object metadata",
        (get(SECRETS, accept=PARTIAL_LIST), get(f"{SECRETS}/a", accept=PARTIAL)),
        setup=SECRETS_SEEDED,
    ),
]

VERSIONS = [
    Case(
        "a watch from an old resourceVersion replays what followed",
        (watch(SECRETS, 3, resourceVersion="{first_rv}"),),
        setup=(*SECRETS_SEEDED, delete(f"{SECRETS}/a"), post(SECRETS, secret("d"))),
    ),
    Case(
        "a watch from the current resourceVersion sends only what follows",
        (watch(SECRETS, 0, resourceVersion="{rv}", timeoutSeconds="1"),),
        setup=SECRETS_SEEDED,
    ),
    Case(
        "a watch from a future resourceVersion stays silent",
        (watch(SECRETS, 0, resourceVersion="{future_rv}", timeoutSeconds="1"),),
        setup=SECRETS_SEEDED,
    ),
    Case(
        "a watch from resourceVersion 0 starts with the current objects",
        (watch(SECRETS, 3, resourceVersion="0"),),
        setup=SECRETS_SEEDED,
    ),
    Case(
        "a watch, an exact list and a continue token from before a compaction are expired",
        (
            get(SECRETS, query={"limit": "1"}),
            post(SECRETS, secret("d")),  # so the compaction passes the continue token's version
            COMPACT,
            watch(SECRETS, 1, resourceVersion="{first_rv}"),
            get(SECRETS, query={"resourceVersion": "{first_rv}", "resourceVersionMatch": "Exact"}),
            get(SECRETS, query={"limit": "1", "continue": "{continue}"}),
        ),
        setup=SECRETS_SEEDED,
    ),
    Case(
        "an exact list and a not-older-than list at a resourceVersion",
        (
            get(SECRETS, query={"resourceVersion": "{first_rv}", "resourceVersionMatch": "Exact"}),
            get(
                SECRETS,
                query={"resourceVersion": "{first_rv}", "resourceVersionMatch": "NotOlderThan"},
            ),
        ),
        setup=SECRETS_SEEDED,
    ),
    Case(
        "resourceVersionMatch combinations the server refuses",
        (
            get(SECRETS, query={"resourceVersionMatch": "NotOlderThan"}),
            get(SECRETS, query={"resourceVersion": "0", "resourceVersionMatch": "Exact"}),
            get(SECRETS, query={"resourceVersion": "{rv}", "resourceVersionMatch": "Newest"}),
            get(SECRETS, query={"resourceVersion": "{rv}", "continue": "{continue}"}),
            get(SECRETS, query={"resourceVersion": "0", "continue": "{continue}", "limit": "1"}),
            get(SECRETS, query={"resourceVersion": "abc"}),
            get(SECRETS, query={"resourceVersion": "abc", "watch": "true"}),
        ),
        setup=(*SECRETS_SEEDED, get(SECRETS, query={"limit": "1"})),
    ),
    Case(
        "a list at a resourceVersion the server has not reached times out",
        (get(SECRETS, query={"resourceVersion": "{future_rv}"}),),
        setup=SECRETS_SEEDED,
    ),
    Case(
        "a list at resourceVersion 0 is served whole",
        (get(SECRETS, query={"resourceVersion": "0", "limit": "1"}),),
        # Any resourceVersion is served from the watch cache as it stands, which may not hold
        # the seeds yet; a consistent list waits until the cache does.
        setup=(*SECRETS_SEEDED, get(SECRETS)),
    ),
]

CASES = [*AGENT, *BAD_BODIES, *WRITES, *AUTH, *NEGOTIATION, *VERSIONS]
