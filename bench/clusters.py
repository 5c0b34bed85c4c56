"""The two Kubernetes API servers discovery's bench runs against, behind one face.

`FakeCluster`: the fake API (`python -m sandbox.kube --synthetic`) in a process of its own,
generating the synthetic cluster itself. `RealCluster`: a real control plane (etcd,
kube-apiserver, kube-controller-manager) loaded with the same synthetic cluster through its
API (`bench.real_cluster`). Each gives a kubeconfig for the agent, authenticated clients for
the bench's own changes, the processes whose CPU serves them, and how many objects of each
kind the agent lists (outside the namespaces it ignores by default).
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Protocol

import httpx
import msgspec
import real_cluster  # beside this file: the bench runs as a script

from sandbox.controlplane import ControlPlane
from sandbox.kube import auth
from sandbox.kube.synthetic import SyntheticSpec

KUBE_AUTH = {"Authorization": f"Bearer {auth.DEFAULT_TOKEN}"}  # what the fake accepts
IGNORED_NAMESPACE = "kube-system"  # the agent's default ignore_namespaces
HELM_RELEASES = "helm release secrets"
# Paths of the kinds the bench counts, by the names the fake's stats give them.
COUNTED = {
    "namespaces": "/api/v1/namespaces",
    "nodes": "/api/v1/nodes",
    "services": "/api/v1/services",
    "pods": "/api/v1/pods",
    "deployments.apps": "/apis/apps/v1/deployments",
    "replicasets.apps": "/apis/apps/v1/replicasets",
    "horizontalpodautoscalers.autoscaling": "/apis/autoscaling/v2/horizontalpodautoscalers",
    "jobs.batch": "/apis/batch/v1/jobs",
    "cronjobs.batch": "/apis/batch/v1/cronjobs",
    "ingresses.networking.k8s.io": "/apis/networking.k8s.io/v1/ingresses",
    "networkpolicies.networking.k8s.io": "/apis/networking.k8s.io/v1/networkpolicies",
    "roles.rbac.authorization.k8s.io": "/apis/rbac.authorization.k8s.io/v1/roles",
    "rolebindings.rbac.authorization.k8s.io": "/apis/rbac.authorization.k8s.io/v1/rolebindings",
    "clusterroles.rbac.authorization.k8s.io": "/apis/rbac.authorization.k8s.io/v1/clusterroles",
    "clusterrolebindings.rbac.authorization.k8s.io": (
        "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings"
    ),
}
_METADATA = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"


class Cluster(Protocol):
    name: str
    kubeconfig: Path

    def client(self) -> httpx.Client:
        """A new authenticated client (the bench's changes run on threads of their own)."""

    def pids(self) -> list[int]:
        """The processes serving the API (their CPU is the server's side of the bench)."""

    def counts(self) -> dict[str, int]:
        """Objects by kind (the fake's names: `deployments.apps`), and `HELM_RELEASES`."""

    def close(self) -> None: ...


class FakeCluster:
    """The fake API in its own process; it prints `URL <url>` once it serves."""

    name = "fake"

    def __init__(self, spec: SyntheticSpec, scratch: Path, env: dict[str, str]) -> None:
        self.spec = spec
        self.kubeconfig = scratch / "kubeconfig"
        self.log = scratch / "kube.log"
        argv = [sys.executable, "-m", "sandbox.kube", "--synthetic"]
        argv += ["--kubeconfig", str(self.kubeconfig)]
        for name in ("namespaces", "deployments", "pods", "nodes", "cronjobs", "services"):
            argv += [f"--{name}", str(getattr(spec, name))]
        if spec.heavy:
            argv.append("--heavy")
        with self.log.open("wb") as stderr:
            self.proc = subprocess.Popen(
                argv,
                stdout=subprocess.PIPE,
                stderr=stderr,
                stdin=subprocess.DEVNULL,
                text=True,
                env=env,
            )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().split()  # EOF (an empty line) if it died
        if len(line) != 2 or line[0] != "URL":
            self.close()
            raise RuntimeError(f"the fake API did not start:\n{tail(self.log)}")
        self.url = line[1]

    def client(self) -> httpx.Client:
        return httpx.Client(base_url=self.url, headers=KUBE_AUTH, trust_env=False, timeout=30)

    def pids(self) -> list[int]:
        return [self.proc.pid]

    def counts(self) -> dict[str, int]:
        with self.client() as client:
            counts: dict[str, int] = client.get("/_sandbox/stats").json()["objects"]
        return counts | {HELM_RELEASES: self.spec.helm_release_secrets()}

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


class RealCluster:
    """A real control plane in a directory of its own, loaded with the spec's cluster."""

    name = "real"

    def __init__(self, spec: SyntheticSpec, scratch: Path, report: Any) -> None:
        self._directory = tempfile.TemporaryDirectory(prefix="control-plane-", dir=scratch)
        self.plane = ControlPlane.up(Path(self._directory.name))
        try:
            self.loaded = real_cluster.load(self.plane, spec, report=report)
        except BaseException:
            self.close()
            raise
        self.kubeconfig = self.plane.kubeconfig(scratch / "real-kubeconfig")

    def client(self) -> httpx.Client:
        return self.plane.client()

    def pids(self) -> list[int]:
        return list(self.plane.pids.values())

    def counts(self) -> dict[str, int]:
        with self.client() as client:
            counts = {name: _count(client, path) for name, path in COUNTED.items()}
            releases = {"fieldSelector": "type=helm.sh/release.v1"}
            counts[HELM_RELEASES] = _count(client, "/api/v1/secrets", releases)
        return counts

    def close(self) -> None:
        self.plane.down()
        self._directory.cleanup()


class _Meta(msgspec.Struct):
    name: str = ""
    namespace: str = ""


class _Item(msgspec.Struct):
    metadata: _Meta


class _ListMeta(msgspec.Struct):
    continue_: str = msgspec.field(default="", name="continue")


class _List(msgspec.Struct):
    metadata: _ListMeta
    items: list[_Item]


def _count(client: httpx.Client, path: str, params: dict[str, str] | None = None) -> int:
    """Objects at `path` outside the ignored namespace (the namespace itself left out too)."""
    query = {"limit": "5000", **(params or {})}
    counted = 0
    while True:
        answer = client.get(path, params=query, headers={"Accept": _METADATA})
        answer.raise_for_status()
        page = msgspec.json.decode(answer.content, type=_List)
        counted += sum(
            IGNORED_NAMESPACE not in (item.metadata.namespace, item.metadata.name)
            for item in page.items
        )
        if not page.metadata.continue_:
            return counted
        query["continue"] = page.metadata.continue_


def tail(path: Path, lines: int = 20) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""
