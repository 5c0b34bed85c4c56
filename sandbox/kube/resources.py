"""The resource table of the fake API server: which kinds it serves, under which paths, and
how each behaves (scope, field selectors, generation, status subresource, delete answer).

Everything that differs between kinds is data here, so the store and the HTTP layer stay
generic. A name that matches no row (`resolve("widgets")`) raises `KeyError`, which the
Python API lets through and the HTTP layer turns into a 404 like the real server.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

_ALL_VERBS = ("create", "delete", "get", "list", "patch", "update", "watch")
# The kinds upstream puts in the `all` category (`kubectl get all`).
_CATEGORY_ALL = frozenset(
    {
        ("", "pods"),
        ("", "services"),
        ("apps", "deployments"),
        ("apps", "replicasets"),
        ("autoscaling", "horizontalpodautoscalers"),
        ("batch", "jobs"),
        ("batch", "cronjobs"),
    }
)


@dataclass(frozen=True, slots=True)
class Resource:
    """One served collection, e.g. `apps/v1 deployments`."""

    group: str  # "" for the core group
    version: str
    plural: str
    kind: str
    namespaced: bool
    singular: str
    short_names: tuple[str, ...] = ()
    # Field selector label -> dotted path into the object (beyond metadata.name/namespace).
    fields: tuple[tuple[str, str], ...] = ()
    generation: bool = False  # metadata.generation counts spec changes
    status: bool = False  # has a status subresource; main-resource writes keep .status
    returns_deleted: bool = False  # DELETE answers the object instead of a Status
    scale: bool = False  # has a scale subresource (an autoscaling/v1 Scale)
    # An update without a resourceVersion is allowed (AllowUnconditionalUpdate); a Lease's
    # strategy allows none, so a PUT must carry one.
    unconditional_update: bool = True
    # In kube-apiserver's watch cache, whose watches get bookmarks. Events are not (watched
    # straight from etcd): their watches get none but the one ending a streaming list.
    watch_cache: bool = True
    prefix: bytes = field(init=False, repr=False, compare=False)
    field_paths: tuple[tuple[str, tuple[str, ...]], ...] = field(
        init=False, repr=False, compare=False
    )

    def __post_init__(self) -> None:
        # List items are stored without kind/apiVersion (as the real list answer has them);
        # single objects and watch events get this prefix spliced in front.
        head = f'{{"kind":"{self.kind}","apiVersion":"{self.api_version}",'
        object.__setattr__(self, "prefix", head.encode())
        paths = tuple((label, tuple(path.split("."))) for label, path in self.fields)
        object.__setattr__(self, "field_paths", paths)

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def list_kind(self) -> str:
        return f"{self.kind}List"

    @property
    def qualified(self) -> str:
        """`deployments.apps`, `pods`: how the real server names a resource in messages."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    @property
    def internal_type(self) -> str:
        """`*core.Pod`, `*apps.Deployment`: the Go type some real messages name an object by.
        events.k8s.io Events are held as core Events upstream."""
        package = self.group.split(".")[0] if self.group != "events.k8s.io" else ""
        return f"*{package or 'core'}.{self.kind}"

    @property
    def base_path(self) -> str:
        return f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"

    def path(self, namespace: str | None = None, name: str | None = None) -> str:
        """The collection (or object) path; namespace None lists across all namespaces."""
        parts = [self.base_path]
        if self.namespaced and namespace:
            parts.append(f"namespaces/{namespace}")
        parts.append(self.plural)
        if name is not None:
            parts.append(name)
        return "/".join(parts)

    @property
    def field_labels(self) -> frozenset[str]:
        return frozenset(("metadata.name", "metadata.namespace", *(f for f, _ in self.fields)))


_EVENT_FIELDS = (
    ("involvedObject.kind", "involvedObject.kind"),
    ("involvedObject.namespace", "involvedObject.namespace"),
    ("involvedObject.name", "involvedObject.name"),
    ("involvedObject.uid", "involvedObject.uid"),
    ("involvedObject.apiVersion", "involvedObject.apiVersion"),
    ("involvedObject.resourceVersion", "involvedObject.resourceVersion"),
    ("involvedObject.fieldPath", "involvedObject.fieldPath"),
    ("reason", "reason"),
    ("reportingComponent", "reportingComponent"),
    ("source", "source.component"),
    ("type", "type"),
)

RESOURCES: tuple[Resource, ...] = (
    # core/v1
    Resource(
        "",
        "v1",
        "namespaces",
        "Namespace",
        False,
        "namespace",
        ("ns",),
        fields=(("status.phase", "status.phase"),),
        status=True,
    ),
    Resource(
        "",
        "v1",
        "nodes",
        "Node",
        False,
        "node",
        ("no",),
        fields=(("spec.unschedulable", "spec.unschedulable"),),
        status=True,
    ),
    Resource(
        "",
        "v1",
        "pods",
        "Pod",
        True,
        "pod",
        ("po",),
        fields=(
            ("spec.nodeName", "spec.nodeName"),
            ("spec.restartPolicy", "spec.restartPolicy"),
            ("spec.schedulerName", "spec.schedulerName"),
            ("spec.serviceAccountName", "spec.serviceAccountName"),
            ("spec.hostNetwork", "spec.hostNetwork"),
            ("status.phase", "status.phase"),
            ("status.podIP", "status.podIP"),
            ("status.nominatedNodeName", "status.nominatedNodeName"),
        ),
        status=True,
        returns_deleted=True,
    ),
    Resource(
        "",
        "v1",
        "services",
        "Service",
        True,
        "service",
        ("svc",),
        status=True,
        returns_deleted=True,
    ),
    Resource("", "v1", "endpoints", "Endpoints", True, "endpoints", ("ep",)),
    Resource("", "v1", "configmaps", "ConfigMap", True, "configmap", ("cm",)),
    Resource("", "v1", "secrets", "Secret", True, "secret", fields=(("type", "type"),)),
    Resource(
        "", "v1", "events", "Event", True, "event", ("ev",), fields=_EVENT_FIELDS, watch_cache=False
    ),
    Resource(
        "",
        "v1",
        "serviceaccounts",
        "ServiceAccount",
        True,
        "serviceaccount",
        ("sa",),
        returns_deleted=True,
    ),
    # apps/v1
    Resource(
        "apps",
        "v1",
        "deployments",
        "Deployment",
        True,
        "deployment",
        ("deploy",),
        generation=True,
        status=True,
        scale=True,
    ),
    Resource(
        "apps",
        "v1",
        "replicasets",
        "ReplicaSet",
        True,
        "replicaset",
        ("rs",),
        fields=(("status.replicas", "status.replicas"),),
        generation=True,
        status=True,
        scale=True,
    ),
    # autoscaling/v2
    Resource(
        "autoscaling",
        "v2",
        "horizontalpodautoscalers",
        "HorizontalPodAutoscaler",
        True,
        "horizontalpodautoscaler",
        ("hpa",),
        status=True,  # no generation: upstream's HPA strategy never sets one
    ),
    # batch/v1
    Resource(
        "batch",
        "v1",
        "jobs",
        "Job",
        True,
        "job",
        fields=(("status.successful", "status.succeeded"),),
        generation=True,
        status=True,
    ),
    Resource(
        "batch",
        "v1",
        "cronjobs",
        "CronJob",
        True,
        "cronjob",
        ("cj",),
        generation=True,
        status=True,
    ),
    # networking.k8s.io/v1
    Resource(
        "networking.k8s.io",
        "v1",
        "ingresses",
        "Ingress",
        True,
        "ingress",
        ("ing",),
        generation=True,
        status=True,
    ),
    Resource(
        "networking.k8s.io",
        "v1",
        "networkpolicies",
        "NetworkPolicy",
        True,
        "networkpolicy",
        ("netpol",),
        generation=True,
    ),
    # rbac.authorization.k8s.io/v1
    Resource("rbac.authorization.k8s.io", "v1", "roles", "Role", True, "role"),
    Resource("rbac.authorization.k8s.io", "v1", "rolebindings", "RoleBinding", True, "rolebinding"),
    Resource(
        "rbac.authorization.k8s.io", "v1", "clusterroles", "ClusterRole", False, "clusterrole"
    ),
    Resource(
        "rbac.authorization.k8s.io",
        "v1",
        "clusterrolebindings",
        "ClusterRoleBinding",
        False,
        "clusterrolebinding",
    ),
    # coordination.k8s.io/v1
    Resource(
        "coordination.k8s.io", "v1", "leases", "Lease", True, "lease", unconditional_update=False
    ),
    # events.k8s.io/v1: kept apart from core events (the real server shares one storage and
    # converts; nothing here needs both views of the same event).
    Resource(
        "events.k8s.io",
        "v1",
        "events",
        "Event",
        True,
        "event",
        ("ev",),
        fields=(
            ("regarding.kind", "regarding.kind"),
            ("regarding.name", "regarding.name"),
            ("regarding.namespace", "regarding.namespace"),
            ("reason", "reason"),
            ("reportingController", "reportingController"),
            ("type", "type"),
        ),
        watch_cache=False,
    ),
)

_BY_PATH = {(r.group, r.version, r.plural): r for r in RESOURCES}
_BY_GROUP_VERSION: dict[tuple[str, str], list[Resource]] = {}
for _resource in RESOURCES:
    _BY_GROUP_VERSION.setdefault((_resource.group, _resource.version), []).append(_resource)


def _index_names() -> dict[str, Resource]:
    # Core wins on ambiguous names ("events", "Event"); "events.events.k8s.io" reaches the
    # other one, as kubectl spells it.
    names: dict[str, Resource] = {}
    for resource in reversed(RESOURCES):
        for name in (
            resource.plural,
            resource.kind,
            resource.singular,
            *resource.short_names,
            resource.qualified,
            f"{resource.kind}.{resource.group}" if resource.group else resource.kind,
        ):
            names[name.lower()] = resource
    for resource in RESOURCES:
        if resource.group == "":
            for name in (resource.plural, resource.kind, resource.singular):
                names[name.lower()] = resource
    return names


_BY_NAME = _index_names()


def lookup(group: str, version: str, plural: str) -> Resource | None:
    return _BY_PATH.get((group, version, plural))


def resolve(name: str | Resource) -> Resource:
    """A resource by plural, kind, singular, short name or `plural.group` (any case)."""
    if isinstance(name, Resource):
        return name
    try:
        return _BY_NAME[name.lower()]
    except KeyError:
        raise KeyError(f"the fake Kubernetes API does not serve {name!r}") from None


_BY_TYPE = {(r.api_version, r.kind): r for r in reversed(RESOURCES)}  # core events win


def for_object(obj: dict[str, Any]) -> Resource:
    """The resource an object belongs to, from its `apiVersion` and `kind`."""
    api_version, kind = obj.get("apiVersion"), obj.get("kind")
    resource = _BY_TYPE.get((api_version, kind))  # type: ignore[arg-type]
    if resource is None:
        if not isinstance(api_version, str) or not isinstance(kind, str):
            raise KeyError("the object needs apiVersion and kind")
        raise KeyError(f"the fake Kubernetes API does not serve {kind} in {api_version}")
    return resource


def group_versions() -> Iterable[tuple[str, str]]:
    return _BY_GROUP_VERSION.keys()


# --- discovery documents -------------------------------------------------------------------


def api_versions(server_address: str) -> dict[str, Any]:
    return {
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [
            {"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}
        ],
    }


def _group_doc(group: str) -> dict[str, Any]:
    versions = [
        {"groupVersion": f"{group}/{version}", "version": version}
        for g, version in _BY_GROUP_VERSION
        if g == group
    ]
    return {"name": group, "versions": versions, "preferredVersion": versions[0]}


def api_group_list() -> dict[str, Any]:
    groups = sorted({g for g, _ in _BY_GROUP_VERSION if g})
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": [_group_doc(g) for g in groups]}


def api_group(group: str) -> dict[str, Any] | None:
    if not group or all(g != group for g, _ in _BY_GROUP_VERSION):
        return None
    return {"kind": "APIGroup", "apiVersion": "v1", **_group_doc(group)}


def api_resource_list(group: str, version: str) -> dict[str, Any] | None:
    served = _BY_GROUP_VERSION.get((group, version))
    if served is None:
        return None
    resources: list[dict[str, Any]] = []
    for r in served:
        entry = {
            "name": r.plural,
            "singularName": r.singular,
            "namespaced": r.namespaced,
            "kind": r.kind,
            "verbs": list(_ALL_VERBS),
        }
        if r.short_names:
            entry["shortNames"] = list(r.short_names)
        if (r.group, r.plural) in _CATEGORY_ALL:
            entry["categories"] = ["all"]
        resources.append(entry)
        if r.status:
            resources.append(_subresource(r, "status", ("get", "patch", "update")))
        if r.scale:
            resources.append(
                {
                    **_subresource(r, "scale", ("get", "patch", "update")),
                    "group": "autoscaling",
                    "version": "v1",
                    "kind": "Scale",
                }
            )
        if r.plural == "pods":
            resources.append(_subresource(r, "log", ("get",)))
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": f"{group}/{version}" if group else version,
        "resources": resources,
    }


def _subresource(r: Resource, name: str, verbs: tuple[str, ...]) -> dict[str, Any]:
    return {
        "name": f"{r.plural}/{name}",
        "singularName": "",
        "namespaced": r.namespaced,
        "kind": r.kind,
        "verbs": list(verbs),
    }
