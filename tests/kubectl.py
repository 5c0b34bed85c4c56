"""Real kubectl against the fake Kubernetes API server: the conformance tests' fixtures.

The fake is only as true as a real client finds it, so these fixtures run the kubectl of
the version the project targets (`scripts/install_kubectl.py` installs it into the venv)
against a FakeKube shared by a test module, over https with the fake's CA and a bearer
token, as a user's kubeconfig would. A kubectl of another version is not accepted: its
output and the requests it sends differ. Without one, the tests that need it skip and say
how to install it; everything else still runs.

`target` runs a test twice, against the fake and against the real control plane (the real
tier), each time in a namespace of the test's own, so kubectl's output and the objects it
leaves can be held to be the same on both.
"""

from __future__ import annotations

import importlib.util
import itertools
import json
import os
import queue
import shutil
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, Protocol

import pytest

from sandbox.controlplane import ControlPlane
from sandbox.kube import FakeKube, RequestRecord, resources
from tests.waiting import wait_until

ROOT = Path(__file__).resolve().parent.parent
INSTALLER = ROOT / "scripts" / "install_kubectl.py"
# Long enough for a loaded CI machine, short enough that a hung kubectl fails the test.
COMMAND_TIMEOUT = 60.0
# Namespaces every real cluster starts with.
STARTING_NAMESPACES = ("default", "kube-system", "kube-public")


def load_installer() -> ModuleType:
    """scripts/install_kubectl.py as a module (scripts/ is not a package)."""
    spec = importlib.util.spec_from_file_location("install_kubectl", INSTALLER)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _candidates() -> Iterator[Path]:
    if os.environ.get("KUBECTL"):
        yield Path(os.environ["KUBECTL"])
    yield Path(sys.prefix) / "bin" / "kubectl"
    on_path = shutil.which("kubectl")
    if on_path:
        yield Path(on_path)


def find_kubectl() -> tuple[Path | None, list[str]]:
    """The first kubectl of the targeted minor version, and what was seen on the way."""
    installer = load_installer()
    seen: list[str] = []
    for candidate in _candidates():
        if not candidate.exists():
            seen.append(f"{candidate}: absent")
            continue
        minor = installer.client_minor(candidate)
        if minor == installer.MINOR:
            return candidate, seen
        seen.append(f"{candidate}: {'not runnable' if minor is None else f'1.{minor}'}")
    return None, seen


@pytest.fixture(scope="session")
def kubectl_binary() -> Path:
    found, seen = find_kubectl()
    if found is None:
        pytest.skip(
            "kubectl 1.37 not found ($KUBECTL, the venv's bin, PATH: "
            f"{'; '.join(seen) or 'none'}); run `python scripts/install_kubectl.py`"
        )
    return found


@pytest.fixture(scope="module")
def kubectl_kube() -> Iterator[FakeKube]:
    # The garbage collector runs, as in every cluster.
    with FakeKube(controllers=["garbage-collector"]) as kube:
        yield kube


@dataclass
class Kubectl:
    """Runs kubectl with a kubeconfig for the fake; output captured, time bounded."""

    binary: Path
    kubeconfig: Path
    # Discovery and HTTP caches of this test alone (kubectl's default is under $HOME).
    cache: Path

    def command(self, *args: str) -> list[str]:
        config = ("--kubeconfig", str(self.kubeconfig), "--cache-dir", str(self.cache))
        return [str(self.binary), *config, *args]

    def run(self, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            self.command(*args),
            input=stdin,
            capture_output=True,
            text=True,
            timeout=COMMAND_TIMEOUT,
            check=False,
        )

    def ok(self, *args: str, stdin: str | None = None) -> str:
        """stdout of a command that must succeed (its stderr in the failure message)."""
        done = self.run(*args, stdin=stdin)
        assert done.returncode == 0, f"kubectl {' '.join(args)}: {done.stderr}"
        return done.stdout

    def fails(self, *args: str) -> str:
        """stderr of a command that must fail."""
        done = self.run(*args)
        assert done.returncode != 0, f"kubectl {' '.join(args)} succeeded: {done.stdout}"
        return done.stderr

    def json(self, *args: str) -> Any:
        return json.loads(self.ok(*args, "-o", "json"))

    def with_token(self, token: str, kube: FakeKube) -> Kubectl:
        config = kube.kubeconfig(self.kubeconfig.with_name(f"token-{token}"), token=token, tls=True)
        return Kubectl(self.binary, config, self.cache)


class Streaming:
    """A long-running kubectl (`get -w`): its stdout read line by line, with a deadline."""

    def __init__(self, command: list[str]) -> None:
        self._process = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        self._lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self._process.stdout is not None
        for line in self._process.stdout:
            self._lines.put(line.rstrip("\n"))
        self._lines.put(None)

    def line(self) -> str:
        """The next line of output; AssertionError if none comes in time or kubectl ended."""
        try:
            line = self._lines.get(timeout=COMMAND_TIMEOUT)
        except queue.Empty:
            raise AssertionError("kubectl printed nothing in time") from None
        if line is None:
            assert self._process.stderr is not None
            raise AssertionError(f"kubectl ended: {self._process.stderr.read()}")
        return line

    def stop(self) -> None:
        self._process.kill()
        self._process.communicate()


@pytest.fixture
def kubectl(kubectl_binary: Path, kubectl_kube: FakeKube, tmp_path: Path) -> Iterator[Kubectl]:
    """kubectl for an empty cluster holding only the namespaces a real one starts with."""
    kubectl_kube.reset()
    for name in STARTING_NAMESPACES:
        kubectl_kube.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    config = kubectl_kube.kubeconfig(tmp_path / "kubeconfig", tls=True)
    yield Kubectl(kubectl_binary, config, tmp_path / "cache")


@pytest.fixture
def streaming() -> Iterator[Callable[..., Streaming]]:
    """Start a long-running kubectl (`start(kubectl, *args)`); killed when the test ends."""
    started: list[Streaming] = []

    def start(kubectl: Kubectl, *args: str) -> Streaming:
        started.append(Streaming(kubectl.command(*args)))
        return started[-1]

    yield start
    for process in started:
        process.stop()


class Api(Protocol):
    """What a test reads and writes on either server, in `ControlPlane`'s terms."""

    def create(self, obj: dict[str, Any]) -> dict[str, Any]: ...

    def get(self, api_version: str, kind: str, namespace: str | None, name: str) -> Any: ...

    def list(self, api_version: str, kind: str, namespace: str | None = None) -> Any: ...

    def patch(
        self, api_version: str, kind: str, namespace: str | None, name: str, patch: Any
    ) -> Any: ...


@dataclass
class FakeApi:
    """FakeKube in `ControlPlane`'s terms (objects named by apiVersion and kind)."""

    kube: FakeKube

    def create(self, obj: dict[str, Any]) -> dict[str, Any]:
        return self.kube.create(obj)

    def get(self, api_version: str, kind: str, namespace: str | None, name: str) -> Any:
        return self.kube.get(_resource(api_version, kind), namespace, name)

    def list(self, api_version: str, kind: str, namespace: str | None = None) -> Any:
        return self.kube.list(_resource(api_version, kind), namespace)

    def patch(
        self, api_version: str, kind: str, namespace: str | None, name: str, patch: Any
    ) -> Any:
        return self.kube.patch(_resource(api_version, kind), namespace, name, patch)


def _resource(api_version: str, kind: str) -> resources.Resource:
    return resources.for_object({"apiVersion": api_version, "kind": kind})


# ConfigMaps a real cluster's controllers put in every namespace: the root CA publisher's
# (upstream), and one the real tier's OpenShift-derived build adds. The fake has neither.
PUBLISHED_CONFIG_MAPS = frozenset({"kube-root-ca.crt", "openshift-service-ca.crt"})


@dataclass
class Target:
    """kubectl pointed at one server, in a fresh namespace of the test's own (the context's
    namespace), that server's API as the admin, and the requests it saw from the mark on."""

    name: str  # "fake" or "real"
    kubectl: Kubectl
    namespace: str
    api: Api
    version: str  # the server's gitVersion
    requests: Callable[[], list[RequestRecord]]  # kubectl's own, since the mark
    mark: Callable[[], None]  # forget the requests seen so far

    def unique(self, prefix: str) -> str:
        """A cluster-wide name no other test uses (for cluster-scoped objects)."""
        return f"{prefix}-{self.namespace}"

    def create(self, obj: dict[str, Any]) -> dict[str, Any]:
        """Create `obj` in the test's namespace (unless it names one or is cluster-wide)."""
        if resources.for_object(obj).namespaced:
            obj = {**obj, "metadata": {"namespace": self.namespace, **obj["metadata"]}}
        return self.api.create(obj)

    def names(self, api_version: str, kind: str) -> list[str]:
        """The names in the test's namespace, without the servers' published ConfigMaps."""
        listed = self.api.list(api_version, kind, self.namespace)
        return sorted(
            name
            for name in (obj["metadata"]["name"] for obj in listed)
            if name not in PUBLISHED_CONFIG_MAPS
        )

    def wait_for_watch(self, resource: str) -> None:
        """Until a watch on `resource` (plural) is open on the server."""
        wait_until(
            lambda: any(
                r.path.endswith(f"/{resource}") and r.query.get("watch") in ("true", "1")
                for r in self.requests()
            )
        )


_namespaces = itertools.count(1)


@pytest.fixture(params=["fake", pytest.param("real", marks=pytest.mark.real)])
def target(
    request: pytest.FixtureRequest,
    kubectl_binary: Path,
    kubectl_kube: FakeKube,
    tmp_path: Path,
) -> Target:
    """The test once against the fake (reset, with the namespaces a cluster starts with)
    and once against the session's real control plane."""
    config = tmp_path / "kubeconfig"
    if request.param == "fake":
        kube = kubectl_kube
        kube.reset()
        namespace = f"k-{next(_namespaces)}"
        for name in (*STARTING_NAMESPACES, namespace):
            kube.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
        kube.kubeconfig(config, namespace=namespace, tls=True)
        kubectl = Kubectl(kubectl_binary, config, tmp_path / "cache")
        return Target(
            "fake",
            kubectl,
            namespace,
            FakeApi(kube),
            kube.git_version,
            lambda: kube.requests,  # only kubectl's: the test's own writes are Python-side
            kube.clear_requests,
        )
    plane: ControlPlane = request.getfixturevalue("control_plane")
    namespace = request.getfixturevalue("real_namespace")("k")
    plane.kubeconfig(config, namespace=namespace)
    kubectl = Kubectl(kubectl_binary, config, tmp_path / "cache")
    since = [plane.audit_mark()]

    def mark() -> None:
        since[0] = plane.audit_mark()

    return Target(
        "real",
        kubectl,
        namespace,
        plane,
        plane.version,
        lambda: plane.requests(since[0], agent="kubectl/"),
        mark,
    )
