"""Cloud metadata: fake GCE, AWS (IMDSv2) and Azure endpoints on 127.0.0.1, node fallbacks.

Every probe here is built with local URLs or `enabled=False`: the real metadata endpoints
are never contacted.
"""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest

from collector.metadata import ClusterMetadata, MetadataProbe, NodeHint

Answer = tuple[int, dict[str, str], bytes]
Route = Callable[[str, str, dict[str, str]], Answer]


class FakeEndpoint:
    """A metadata endpoint on 127.0.0.1 answering through `route`, recording each request."""

    def __init__(self, route: Route) -> None:
        self.requests: list[tuple[str, str, dict[str, str]]] = []
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            def _serve(self) -> None:
                headers = {k.lower(): v for k, v in self.headers.items()}
                endpoint.requests.append((self.command, self.path, headers))
                status, extra, body = route(self.command, self.path, headers)
                self.send_response(status)
                for name, value in extra.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_PUT = _serve

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True
        )
        self._thread.start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def text(body: str, **headers: str) -> Answer:
    return 200, headers, body.encode()


NOT_FOUND: Answer = (404, {}, b"not found")


def gce_route(method: str, path: str, headers: dict[str, str]) -> Answer:
    if headers.get("metadata-flavor") != "Google":
        return 403, {}, b"Missing Metadata-Flavor:Google header."
    answers = {
        "/computeMetadata/v1/project/project-id": "acme-prod-123",
        "/computeMetadata/v1/instance/zone": "projects/812345678901/zones/europe-west1-b",
        "/computeMetadata/v1/instance/attributes/cluster-name": "prod-eu",
        "/computeMetadata/v1/instance/attributes/cluster-location": "europe-west1",
    }
    if method != "GET" or path not in answers:
        return NOT_FOUND
    return text(answers[path], **{"Metadata-Flavor": "Google"})


AWS_TOKEN = "AQAEAFaketokenvalue=="


def aws_route(*, tags: bool) -> Route:
    def route(method: str, path: str, headers: dict[str, str]) -> Answer:
        if path == "/latest/api/token":
            if method != "PUT" or "x-aws-ec2-metadata-token-ttl-seconds" not in headers:
                return 400, {}, b""
            return text(AWS_TOKEN)
        # IMDSv2 only: a request without the session token is refused.
        if headers.get("x-aws-ec2-metadata-token") != AWS_TOKEN:
            return 401, {}, b""
        document = {
            "accountId": "123456789012",
            "architecture": "x86_64",
            "availabilityZone": "eu-central-1b",
            "instanceId": "i-0a1b2c3d4e5f60718",
            "instanceType": "m6i.large",
            "region": "eu-central-1",
        }
        answers = {
            "/latest/meta-data/placement/region": "eu-central-1",
            "/latest/meta-data/placement/availability-zone": "eu-central-1b",
            "/latest/dynamic/instance-identity/document": json.dumps(document),
        }
        if tags:
            answers["/latest/meta-data/tags/instance/eks:cluster-name"] = "prod-frankfurt"
        return text(answers[path]) if path in answers else NOT_FOUND

    return route


def azure_route(method: str, path: str, headers: dict[str, str]) -> Answer:
    if path != "/metadata/instance?api-version=2021-02-01":
        return 400, {}, b'{"error": "Bad request"}'
    if headers.get("metadata") != "true":
        return 400, {}, b'{"error": "Bad request. Required metadata header not specified"}'
    doc = {
        "compute": {
            "location": "westeurope",
            "zone": "2",
            "name": "aks-nodepool1-12345678-vmss_0",
            "subscriptionId": "0f1e2d3c-4b5a-6978-8a9b-0c1d2e3f4a5b",
            "resourceGroupName": "MC_shop-rg_prod-aks_westeurope",
            "vmSize": "Standard_D4s_v5",
            "tagsList": [{"name": "aks-managed-poolName", "value": "nodepool1"}],
        },
        "network": {"interface": []},
    }
    return 200, {"Content-Type": "application/json"}, json.dumps(doc).encode()


def not_found_route(method: str, path: str, headers: dict[str, str]) -> Answer:
    return NOT_FOUND


@pytest.fixture
def endpoints() -> Iterator[Callable[[Route], FakeEndpoint]]:
    started: list[FakeEndpoint] = []

    def start(route: Route) -> FakeEndpoint:
        endpoint = FakeEndpoint(route)
        started.append(endpoint)
        return endpoint

    yield start
    for endpoint in started:
        endpoint.close()


@pytest.fixture
def refused() -> str:
    """A local URL where nothing listens: connection refused at once."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"


GKE_NODES = [
    NodeHint(
        name=f"gke-prod-eu-pool-1-8c2f-{i}",
        labels={
            "cloud.google.com/gke-nodepool": "pool-1",
            "topology.kubernetes.io/region": "europe-west1",
            "topology.kubernetes.io/zone": zone,
        },
        provider_id=f"gce://acme-prod-123/{zone}/gke-prod-eu-pool-1-8c2f-{i}",
    )
    for i, zone in enumerate(["europe-west1-b", "europe-west1-b", "europe-west1-c"])
]
EKS_NODES = [
    NodeHint(
        name="ip-10-0-12-34.eu-central-1.compute.internal",
        labels={
            "eks.amazonaws.com/nodegroup": "general",
            "alpha.eksctl.io/cluster-name": "prod-frankfurt-labels",
            "topology.kubernetes.io/region": "eu-central-1",
            "topology.kubernetes.io/zone": "eu-central-1b",
        },
        provider_id="aws:///eu-central-1b/i-0a1b2c3d4e5f60718",
    )
]
AKS_NODES = [
    NodeHint(
        name="aks-nodepool1-12345678-vmss000000",
        labels={
            "kubernetes.azure.com/cluster": "MC_shop-rg_prod-aks_westeurope",
            "kubernetes.azure.com/agentpool": "nodepool1",
            "topology.kubernetes.io/region": "westeurope",
            "topology.kubernetes.io/zone": "westeurope-2",
        },
        provider_id=(
            "azure:///subscriptions/0f1e2d3c-4b5a-6978-8a9b-0c1d2e3f4a5b/resourceGroups/"
            "mc_shop-rg_prod-aks_westeurope/providers/Microsoft.Compute/virtualMachineScaleSets/"
            "aks-nodepool1-12345678-vmss/virtualMachines/0"
        ),
    )
]


def test_gke_from_the_metadata_server(
    endpoints: Callable[[Route], FakeEndpoint], refused: str
) -> None:
    gce = endpoints(gce_route)
    probe = MetadataProbe(
        enabled=True, gce_url=gce.url, aws_url=refused, azure_url=refused, timeout=0.5
    )
    meta = probe.probe(GKE_NODES, kubernetes_version="v1.30.2-gke.1587003", leader="agent-0")
    assert meta == ClusterMetadata(
        provider="gke",
        region="europe-west1",
        zone="europe-west1-b",
        cluster_name="prod-eu",
        cloud_account="acme-prod-123",
        kubernetes_version="v1.30.2-gke.1587003",
        node_count=3,
        leader="agent-0",
    )
    assert meta.as_dict()["cloud_account"] == "acme-prod-123"
    asked = len(gce.requests)
    probe.probe(GKE_NODES)
    assert len(gce.requests) == asked  # the cloud's answer is cached


def test_eks_through_imdsv2(endpoints: Callable[[Route], FakeEndpoint], refused: str) -> None:
    aws = endpoints(aws_route(tags=True))
    # The fake enforces IMDSv2: without a session token it refuses.
    assert (
        httpx.get(f"{aws.url}/latest/meta-data/placement/region", trust_env=False).status_code
        == 401
    )
    aws.requests.clear()
    probe = MetadataProbe(
        enabled=True, gce_url=refused, aws_url=aws.url, azure_url=refused, timeout=0.5
    )
    meta = probe.probe(EKS_NODES)
    assert (meta.provider, meta.region, meta.zone) == ("eks", "eu-central-1", "eu-central-1b")
    assert meta.cloud_account == "123456789012"
    assert meta.cluster_name == "prod-frankfurt"  # the instance tag wins over the label
    assert aws.requests[0][:2] == ("PUT", "/latest/api/token")
    assert all(h.get("x-aws-ec2-metadata-token") == AWS_TOKEN for _, _, h in aws.requests[1:])


def test_eks_cluster_name_from_node_labels_without_instance_tags(
    endpoints: Callable[[Route], FakeEndpoint], refused: str
) -> None:
    aws = endpoints(aws_route(tags=False))
    probe = MetadataProbe(
        enabled=True, gce_url=refused, aws_url=aws.url, azure_url=refused, timeout=0.5
    )
    meta = probe.probe(EKS_NODES)
    assert meta.provider == "eks"
    assert meta.cloud_account == "123456789012"
    assert meta.cluster_name == "prod-frankfurt-labels"


def test_aks_from_azure_imds(endpoints: Callable[[Route], FakeEndpoint], refused: str) -> None:
    azure = endpoints(azure_route)
    probe = MetadataProbe(
        enabled=True, gce_url=refused, aws_url=refused, azure_url=azure.url, timeout=0.5
    )
    meta = probe.probe(AKS_NODES)
    assert meta.provider == "aks"
    assert (meta.region, meta.zone) == ("westeurope", "westeurope-2")
    assert meta.cloud_account == "0f1e2d3c-4b5a-6978-8a9b-0c1d2e3f4a5b"
    assert meta.resource_group == "MC_shop-rg_prod-aks_westeurope"
    assert meta.cluster_name == "prod-aks"


def test_clouds_that_do_not_match_are_not_mistaken(
    endpoints: Callable[[Route], FakeEndpoint],
) -> None:
    # On Azure the shared link-local address answers AWS's token request with an error.
    azure = endpoints(azure_route)
    gce = endpoints(not_found_route)  # a name that answers, but not as Google's server
    probe = MetadataProbe(
        enabled=True, gce_url=gce.url, aws_url=azure.url, azure_url=azure.url, timeout=0.5
    )
    assert probe.probe([]).provider == "aks"


@pytest.mark.parametrize(
    ("nodes", "expected"),
    [
        (
            GKE_NODES,
            ("gke", "europe-west1", "europe-west1-b", None, "acme-prod-123", None),
        ),
        (
            EKS_NODES,
            ("eks", "eu-central-1", "eu-central-1b", "prod-frankfurt-labels", None, None),
        ),
        (
            AKS_NODES,
            (
                "aks",
                "westeurope",
                "westeurope-2",
                "prod-aks",
                "0f1e2d3c-4b5a-6978-8a9b-0c1d2e3f4a5b",
                "mc_shop-rg_prod-aks_westeurope",
            ),
        ),
    ],
    ids=["gke", "eks", "aks"],
)
def test_blocked_endpoints_fall_back_to_the_nodes(
    refused: str, nodes: list[NodeHint], expected: tuple[Any, ...]
) -> None:
    probe = MetadataProbe(
        enabled=True, gce_url=refused, aws_url=refused, azure_url=refused, timeout=0.5
    )
    meta = probe.probe(nodes)
    assert (
        meta.provider,
        meta.region,
        meta.zone,
        meta.cluster_name,
        meta.cloud_account,
        meta.resource_group,
    ) == expected
    assert meta.node_count == len(nodes)


def test_provider_ids_alone_are_enough() -> None:
    nodes = [
        NodeHint(name="n1", provider_id="aws:///us-east-1a/i-0123456789abcdef0"),
        NodeHint(name="n2", provider_id="aws:///us-east-1a/i-0fedcba9876543210"),
    ]
    meta = MetadataProbe(enabled=False).probe(nodes)
    assert (meta.provider, meta.region, meta.zone) == ("eks", "us-east-1", "us-east-1a")


@pytest.mark.parametrize("order", [1, -1], ids=["as listed", "reversed"])
def test_the_most_said_answer_wins_a_tie_goes_the_same_way_and_silence_never_wins(
    order: int,
) -> None:
    zones = ["us-east-1b", "us-east-1a", "us-east-1b", "us-east-1a"]
    nodes = [
        NodeHint(name=f"n{i}", provider_id=f"aws:///{zone}/i-{i:017x}")
        for i, zone in enumerate(zones)
    ]
    nodes += [NodeHint(name=f"metal-{i}") for i in range(5)]  # outnumber the rest, say nothing
    meta = MetadataProbe(enabled=False).probe(nodes[::order])
    assert (meta.provider, meta.region, meta.zone) == ("eks", "us-east-1", "us-east-1a")


def test_when_disabled_no_request_is_made(endpoints: Callable[[Route], FakeEndpoint]) -> None:
    gce, aws, azure = endpoints(gce_route), endpoints(aws_route(tags=True)), endpoints(azure_route)
    probe = MetadataProbe(enabled=False, gce_url=gce.url, aws_url=aws.url, azure_url=azure.url)
    meta = probe.probe(GKE_NODES)
    assert meta.provider == "gke"
    assert meta.cluster_name is None
    assert gce.requests == aws.requests == azure.requests == []


def test_unknown_when_nothing_says_anything() -> None:
    nodes = [NodeHint(name="metal-1", labels={"kubernetes.io/hostname": "metal-1"})]
    meta = MetadataProbe(enabled=False).probe(nodes, kubernetes_version="v1.29.4")
    assert meta.as_dict() == {
        "provider": "unknown",
        "region": None,
        "zone": None,
        "cluster_name": None,
        "cloud_account": None,
        "resource_group": None,
        "kubernetes_version": "v1.29.4",
        "node_count": 1,
        "leader": None,
    }


def test_a_failed_lookup_is_retried_only_after_the_retry_interval(
    endpoints: Callable[[Route], FakeEndpoint],
) -> None:
    nowhere = endpoints(not_found_route)
    now = [1000.0]
    probe = MetadataProbe(
        enabled=True,
        gce_url=nowhere.url,
        aws_url=nowhere.url,
        azure_url=nowhere.url,
        timeout=0.5,
        retry_seconds=300,
        clock=lambda: now[0],
    )
    assert probe.probe([]).provider == "unknown"
    asked = len(nowhere.requests)
    assert asked > 0
    now[0] += 299
    probe.probe([])
    assert len(nowhere.requests) == asked
    now[0] += 2
    probe.probe([])
    assert len(nowhere.requests) == 2 * asked
