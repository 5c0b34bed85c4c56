"""The Kubernetes resources the collector lists and watches, and their URL paths."""

from __future__ import annotations

from dataclasses import dataclass, field

# What kube-apiserver answers with metadata only (names, labels, versions; no spec, status or
# data): a list asks for the list form, a watch and a GET for the object form.
METADATA_LIST = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"
METADATA_OBJECT = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1"


@dataclass(frozen=True, slots=True)
class Resource:
    """One API resource, watched across all namespaces."""

    plural: str
    group_version: str  # "v1" for the core group, else "group/version"
    namespaced: bool = True
    label_selector: str | None = None
    field_selector: str | None = None
    metadata_only: bool = False
    """Listed and watched as PartialObjectMetadata: bodies are fetched one at a time."""
    bookmarks: bool = True
    """Its watches get bookmarks. kube-apiserver serves them from its watch cache, which
    sends one about once a minute; Events are kept out of that cache and watched straight
    from etcd, which sends none (only the one ending a streaming list's initial events)."""
    _hash: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        # Every delta looks its resource up in a few maps: hashed once, not each time.
        identity = (self.plural, self.group_version, self.label_selector, self.field_selector)
        object.__setattr__(self, "_hash", hash(identity))

    def __hash__(self) -> int:
        return self._hash

    @property
    def list_accept(self) -> str | None:
        return METADATA_LIST if self.metadata_only else None

    @property
    def watch_accept(self) -> str | None:
        """For watches (streaming lists included) and single GETs."""
        return METADATA_OBJECT if self.metadata_only else None

    @property
    def path(self) -> str:
        """The collection across all namespaces (or the cluster-scoped collection)."""
        root = "/api/v1" if self.group_version == "v1" else f"/apis/{self.group_version}"
        return f"{root}/{self.plural}"

    def namespaced_path(self, namespace: str, name: str | None = None) -> str:
        root = "/api/v1" if self.group_version == "v1" else f"/apis/{self.group_version}"
        path = f"{root}/namespaces/{namespace}/{self.plural}"
        return f"{path}/{name}" if name else path

    def selectors(self) -> dict[str, str]:
        params: dict[str, str] = {}
        if self.label_selector:
            params["labelSelector"] = self.label_selector
        if self.field_selector:
            params["fieldSelector"] = self.field_selector
        return params


NAMESPACES = Resource("namespaces", "v1", namespaced=False)
NODES = Resource("nodes", "v1", namespaced=False)
PODS = Resource("pods", "v1")
SERVICES = Resource("services", "v1")
# Helm keeps releases in Secrets labelled owner=helm; no other Secret is ever read. Each can
# weigh close to 1 MiB, so they are listed as metadata and a body is read only when needed.
HELM_RELEASE_SECRETS = Resource(
    "secrets",
    "v1",
    label_selector="owner=helm",
    field_selector="type=helm.sh/release.v1",
    metadata_only=True,
)
# Only Warnings: Normal Events are most of an Event stream and never become records.
EVENTS = Resource("events", "v1", field_selector="type=Warning", bookmarks=False)
DEPLOYMENTS = Resource("deployments", "apps/v1")
REPLICASETS = Resource("replicasets", "apps/v1")
HPAS = Resource("horizontalpodautoscalers", "autoscaling/v2")
JOBS = Resource("jobs", "batch/v1")
CRONJOBS = Resource("cronjobs", "batch/v1")
INGRESSES = Resource("ingresses", "networking.k8s.io/v1")
NETWORK_POLICIES = Resource("networkpolicies", "networking.k8s.io/v1")
ROLES = Resource("roles", "rbac.authorization.k8s.io/v1")
ROLE_BINDINGS = Resource("rolebindings", "rbac.authorization.k8s.io/v1")
CLUSTER_ROLES = Resource("clusterroles", "rbac.authorization.k8s.io/v1", namespaced=False)
CLUSTER_ROLE_BINDINGS = Resource(
    "clusterrolebindings", "rbac.authorization.k8s.io/v1", namespaced=False
)
LEASES = Resource("leases", "coordination.k8s.io/v1")
