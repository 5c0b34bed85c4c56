"""Cluster metadata for the heartbeat: which cloud, where, which cluster, which account.

The platform builds console links from the provider (gke, eks, aks or unknown), region,
zone, cluster name and the cloud's project, account or subscription. The cloud answers
best through its instance metadata endpoint (GCE's metadata server, AWS IMDSv2, Azure
IMDS); the nodes answer the rest through their topology labels, managed-service labels and
`spec.providerID` (`gce://<project>/<zone>/<name>`, `aws:///<zone>/<instance>`,
`azure:///subscriptions/<id>/resourceGroups/<group>/...`).

The endpoints are asked only when `enabled` (the collector enables it in-cluster or when
configured), with short timeouts, without proxies (link-local addresses must never go
through `HTTPS_PROXY`), and once: the answer cannot change while the process lives, so it
is cached. Every failure (blocked, refused, timed out, an answer of the wrong shape)
counts as "no answer": the nodes fill in, and the endpoints are asked again at most every
`retry_seconds`. Nothing here raises.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import httpx
import msgspec
import structlog

log = structlog.get_logger("collector.metadata")

GCE_URL = "http://metadata.google.internal"
AWS_URL = "http://169.254.169.254"
AZURE_URL = "http://169.254.169.254"
TIMEOUT_SECONDS = 1.0
RETRY_SECONDS = 300.0

GKE, EKS, AKS, UNKNOWN = "gke", "eks", "aks", "unknown"

_REGION_LABELS = ("topology.kubernetes.io/region", "failure-domain.beta.kubernetes.io/region")
_ZONE_LABELS = ("topology.kubernetes.io/zone", "failure-domain.beta.kubernetes.io/zone")
_PROVIDER_LABELS = {
    "cloud.google.com/gke-nodepool": GKE,
    "cloud.google.com/gke-os-distribution": GKE,
    "eks.amazonaws.com/nodegroup": EKS,
    "eks.amazonaws.com/compute-type": EKS,
    "alpha.eksctl.io/cluster-name": EKS,
    "kubernetes.azure.com/cluster": AKS,
    "kubernetes.azure.com/agentpool": AKS,
}
_PROVIDER_ID_PREFIXES = {"gce://": GKE, "aws://": EKS, "azure://": AKS}
_AWS_TAGS = "/latest/meta-data/tags/instance"
_EKSCTL_CLUSTER = "alpha.eksctl.io/cluster-name"
_AKS_NODE_GROUP = "kubernetes.azure.com/cluster"


class NodeHint(msgspec.Struct, rename="camel", frozen=True, gc=False):
    """What the metadata needs of a node: its labels and `spec.providerID`."""

    name: str = ""
    labels: dict[str, str] = msgspec.field(default_factory=dict)
    provider_id: str | None = msgspec.field(default=None, name="providerID")


class ClusterMetadata(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """The heartbeat's `metadata` object (see `as_dict`)."""

    provider: str = UNKNOWN
    region: str | None = None
    zone: str | None = None
    cluster_name: str | None = None
    cloud_account: str | None = None
    """GCP project id, AWS account id or Azure subscription id."""
    resource_group: str | None = None
    """Azure only: the resource group of the nodes."""
    kubernetes_version: str | None = None
    node_count: int | None = None
    leader: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return msgspec.structs.asdict(self)


class MetadataProbe:
    """Cloud endpoints (once, cached) merged over what the nodes say. Thread-safe."""

    def __init__(
        self,
        *,
        enabled: bool,
        gce_url: str = GCE_URL,
        aws_url: str = AWS_URL,
        azure_url: str = AZURE_URL,
        timeout: float = TIMEOUT_SECONDS,
        retry_seconds: float = RETRY_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.enabled = enabled
        self._urls = {
            GKE: gce_url.rstrip("/"),
            EKS: aws_url.rstrip("/"),
            AKS: azure_url.rstrip("/"),
        }
        self._timeout = timeout
        self._retry_seconds = retry_seconds
        self._clock = clock
        self._lock = threading.Lock()
        self._cloud: ClusterMetadata | None = None
        self._failed_at: float | None = None

    def probe(
        self,
        nodes: Sequence[NodeHint],
        *,
        kubernetes_version: str | None = None,
        leader: str | None = None,
    ) -> ClusterMetadata:
        from_nodes = metadata_from_nodes(nodes)
        cloud = self._cloud_answer(first=from_nodes.provider) if self.enabled else None
        merged = _merge(cloud, from_nodes) if cloud is not None else from_nodes
        return msgspec.structs.replace(
            merged,
            kubernetes_version=kubernetes_version,
            node_count=len(nodes),
            leader=leader,
        )

    # -- the endpoints ------------------------------------------------------------------

    def _cloud_answer(self, *, first: str) -> ClusterMetadata | None:
        with self._lock:
            if self._cloud is not None:
                return self._cloud
            failed_at = self._failed_at
            if failed_at is not None and self._clock() - failed_at < self._retry_seconds:
                return None
            # The cloud the nodes point at is asked first: the others would only time out.
            order = sorted((GKE, EKS, AKS), key=lambda p: p != first)
            with httpx.Client(
                timeout=httpx.Timeout(self._timeout), trust_env=False, follow_redirects=False
            ) as http:
                for provider in order:
                    answer = _ASKERS[provider](_Endpoint(http, self._urls[provider]))
                    if answer is not None:
                        self._cloud = answer
                        log.info(
                            "cloud_metadata_found",
                            provider=answer.provider,
                            region=answer.region,
                            zone=answer.zone,
                        )
                        return answer
            self._failed_at = self._clock()
            log.info("cloud_metadata_unavailable", retry_in_seconds=self._retry_seconds)
            return None


class _Endpoint:
    """One metadata endpoint; every failure of a request is None, never an exception."""

    def __init__(self, http: httpx.Client, base: str) -> None:
        self._http = http
        self._base = base

    def text(
        self, method: str, path: str, headers: dict[str, str], *, flavor: str | None = None
    ) -> str | None:
        try:
            response = self._http.request(method, f"{self._base}{path}", headers=headers)
        except httpx.HTTPError:
            return None
        if response.status_code != 200:
            return None
        # The metadata server signs its answers; anything else on that name is not it.
        if flavor is not None and response.headers.get("Metadata-Flavor") != flavor:
            return None
        return response.text.strip() or None

    def json(self, path: str, headers: dict[str, str]) -> dict[str, Any] | None:
        text = self.text("GET", path, headers)
        if text is None:
            return None
        try:
            doc = msgspec.json.decode(text)
        except msgspec.DecodeError:
            return None
        return doc if isinstance(doc, dict) else None


def _ask_gce(endpoint: _Endpoint) -> ClusterMetadata | None:
    headers = {"Metadata-Flavor": "Google"}

    def get(path: str) -> str | None:
        return endpoint.text("GET", f"/computeMetadata/v1/{path}", headers, flavor="Google")

    project = get("project/project-id")
    if project is None:
        return None
    zone = _last_segment(get("instance/zone"))  # projects/<number>/zones/<zone>
    location = get("instance/attributes/cluster-location")
    return ClusterMetadata(
        provider=GKE,
        region=_gce_region(zone) or _gce_region(location) or location,
        zone=zone,
        cluster_name=get("instance/attributes/cluster-name"),
        cloud_account=project,
    )


def _ask_aws(endpoint: _Endpoint) -> ClusterMetadata | None:
    token = endpoint.text(
        "PUT", "/latest/api/token", {"X-aws-ec2-metadata-token-ttl-seconds": "60"}
    )
    if token is None:
        return None
    headers = {"X-aws-ec2-metadata-token": token}
    identity = endpoint.json("/latest/dynamic/instance-identity/document", headers) or {}
    region = endpoint.text("GET", "/latest/meta-data/placement/region", headers)
    region = region or _str(identity.get("region"))
    if region is None:
        return None  # a token but no placement: not EC2 (both clouds share the address)
    return ClusterMetadata(
        provider=EKS,
        region=region,
        zone=endpoint.text("GET", "/latest/meta-data/placement/availability-zone", headers)
        or _str(identity.get("availabilityZone")),
        # Readable only when the instance exposes its tags in the metadata.
        cluster_name=endpoint.text("GET", f"{_AWS_TAGS}/eks:cluster-name", headers),
        cloud_account=_str(identity.get("accountId")),
    )


def _ask_azure(endpoint: _Endpoint) -> ClusterMetadata | None:
    doc = endpoint.json("/metadata/instance?api-version=2021-02-01", {"Metadata": "true"})
    compute = doc.get("compute") if doc else None
    if not isinstance(compute, dict) or not _str(compute.get("location")):
        return None
    location = _str(compute.get("location"))
    group = _str(compute.get("resourceGroupName"))
    zone = _str(compute.get("zone"))
    return ClusterMetadata(
        provider=AKS,
        region=location,
        # Kubernetes names Azure zones `<location>-<n>`; IMDS says only `<n>`.
        zone=f"{location}-{zone}" if zone else None,
        cluster_name=_aks_cluster_name(group, location),
        cloud_account=_str(compute.get("subscriptionId")),
        resource_group=group,
    )


_ASKERS: dict[str, Callable[[_Endpoint], ClusterMetadata | None]] = {
    GKE: _ask_gce,
    EKS: _ask_aws,
    AKS: _ask_azure,
}


# -- the nodes --------------------------------------------------------------------------


def metadata_from_nodes(nodes: Iterable[NodeHint]) -> ClusterMetadata:
    """What the nodes say: the most common answer of each, `unknown` when they say nothing."""
    said = [_node_says(node) for node in nodes]
    return ClusterMetadata(
        provider=_most_said(m.provider for m in said if m.provider != UNKNOWN) or UNKNOWN,
        region=_most_said(m.region for m in said),
        zone=_most_said(m.zone for m in said),
        cluster_name=_most_said(m.cluster_name for m in said),
        cloud_account=_most_said(m.cloud_account for m in said),
        resource_group=_most_said(m.resource_group for m in said),
    )


def _node_says(node: NodeHint) -> ClusterMetadata:
    """What one node says, from its labels and its `spec.providerID`."""
    labels = node.labels
    parsed = _parse_provider_id(node.provider_id or "")
    provider = next((p for label, p in _PROVIDER_LABELS.items() if label in labels), None)
    provider = provider or parsed.provider
    zone = _first_label(labels, _ZONE_LABELS) or parsed.zone
    region = _first_label(labels, _REGION_LABELS) or _region_of_zone(provider, zone)
    name = labels.get(_EKSCTL_CLUSTER) or _aks_cluster_name(labels.get(_AKS_NODE_GROUP), region)
    return ClusterMetadata(
        provider=provider,
        region=region,
        zone=zone,
        cluster_name=name,
        cloud_account=parsed.cloud_account,
        resource_group=parsed.resource_group,
    )


def _most_said(answers: Iterable[str | None]) -> str | None:
    """The most common of the answers given; an empty one is none."""
    counts = Counter(answer for answer in answers if answer)
    if not counts:
        return None
    # Ties go to the first in sort order, so the answer does not depend on node order.
    return min(counts, key=lambda v: (-counts[v], v))


def _parse_provider_id(provider_id: str) -> ClusterMetadata:
    """Provider, zone, project or subscription from `spec.providerID`."""
    provider = next(
        (p for prefix, p in _PROVIDER_ID_PREFIXES.items() if provider_id.startswith(prefix)),
        UNKNOWN,
    )
    parts = [p for p in provider_id.partition("://")[2].split("/") if p]
    if provider == GKE and len(parts) >= 2:  # gce://<project>/<zone>/<instance>
        return ClusterMetadata(provider=GKE, cloud_account=parts[0], zone=parts[1])
    if provider == EKS and len(parts) >= 2:  # aws:///<zone>/<instance-id>
        return ClusterMetadata(provider=EKS, zone=parts[0])
    if provider == AKS:  # azure:///subscriptions/<id>/resourceGroups/<group>/...
        lowered = [p.lower() for p in parts]
        return ClusterMetadata(
            provider=AKS,
            cloud_account=_after(parts, lowered, "subscriptions"),
            resource_group=_after(parts, lowered, "resourcegroups"),
        )
    return ClusterMetadata(provider=provider)


def _merge(cloud: ClusterMetadata, nodes: ClusterMetadata) -> ClusterMetadata:
    """The cloud's answer, with the gaps filled from the nodes."""
    fields = ("region", "zone", "cluster_name", "cloud_account", "resource_group")
    return msgspec.structs.replace(
        cloud, **{f: getattr(cloud, f) or getattr(nodes, f) for f in fields}
    )


def _region_of_zone(provider: str, zone: str | None) -> str | None:
    if not zone:
        return None
    if provider == GKE:
        return _gce_region(zone)
    if provider == EKS and zone[-1:].isalpha() and zone[-2:-1].isdigit():
        return zone[:-1]  # eu-west-1a -> eu-west-1
    return None


def _gce_region(zone: str | None) -> str | None:
    """us-central1-a -> us-central1; a region (two parts) gives None."""
    if not zone or zone.count("-") < 2:
        return None
    return zone.rsplit("-", 1)[0]


def _aks_cluster_name(node_group: str | None, location: str | None) -> str | None:
    """The cluster from AKS's node resource group `MC_<group>_<cluster>_<location>`.

    Only when unambiguous: group and cluster names may contain underscores themselves.
    """
    if not node_group or not location or not node_group.upper().startswith("MC_"):
        return None
    suffix = f"_{location}".lower()
    if not node_group.lower().endswith(suffix):
        return None
    inner = node_group[3 : -len(suffix)]
    if inner.count("_") != 1:
        return None
    return inner.split("_")[1] or None


def _after(parts: list[str], lowered: list[str], marker: str) -> str | None:
    if marker in lowered:
        index = lowered.index(marker) + 1
        if index < len(parts):
            return parts[index]
    return None


def _first_label(labels: dict[str, str], names: Iterable[str]) -> str | None:
    return next((labels[n] for n in names if labels.get(n)), None)


def _last_segment(path: str | None) -> str | None:
    if not path:
        return None
    return path.rsplit("/", 1)[-1] or None


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None
