"""The real tier: one real control plane for the whole test session.

`control_plane` starts etcd, kube-apiserver and kube-controller-manager once (about 8 s)
and stops them when the session ends; every test of the tier carries the `real` marker
(`pytest -m real` runs exactly them) and works in namespaces of its own (`real_namespace`
makes a fresh one and deletes it afterwards). Where the control plane cannot run, each such
test skips with one line saying why.
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from sandbox import controlplane
from sandbox.controlplane import ControlPlane, ControlPlaneError
from sandbox.kube.auth import service_account
from sandbox.platform import FakePlatform
from tests.chart_install import Installed, accounts, rbac_objects
from tests.chart_render import NAMESPACE, Rendered

_names = itertools.count(1)
WRITES = frozenset({"create", "update", "patch", "delete", "deletecollection"})


@pytest.fixture(scope="session")
def control_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    reason = controlplane.absent()
    if reason:
        pytest.skip(reason)
    with ControlPlane.up(tmp_path_factory.mktemp("control-plane")) as plane:
        yield plane


NewNamespace = Callable[..., str]


@pytest.fixture
def real_namespace(control_plane: ControlPlane) -> Iterator[NewNamespace]:
    """Make namespaces of this test's own (`real_namespace("shop")` -> `shop-7`), deleted
    when it ends (without waiting for the namespace controller)."""
    made: list[str] = []

    def make(prefix: str = "t", **labels: str) -> str:
        name = f"{prefix}-{next(_names)}"
        meta: dict[str, object] = {"name": name}
        if labels:
            meta["labels"] = labels
        control_plane.create({"apiVersion": "v1", "kind": "Namespace", "metadata": meta})
        made.append(name)
        return name

    yield make
    for name in made:
        if control_plane.exists("v1", "Namespace", None, name):
            control_plane.delete("v1", "Namespace", None, name)


@pytest.fixture
def real_kubeconfig(control_plane: ControlPlane, tmp_path: Path) -> Path:
    """The admin's kubeconfig for the real server."""
    return control_plane.kubeconfig(tmp_path / "real-kubeconfig")


RealInstall = Callable[[Rendered], Installed]


@pytest.fixture
def real_install(
    control_plane: ControlPlane, platform: FakePlatform, tmp_path: Path
) -> Iterator[RealInstall]:
    """Apply a rendering's ServiceAccounts and RBAC to the real server in the chart's
    namespace (server-side, as Helm 4 installs), each account with a token from the
    TokenRequest API; what the accounts do from then on is read back from the audit log.
    The objects are deleted when the test ends, so the next rendering starts clean."""
    installs: list[Installed] = []
    applied: list[dict[str, Any]] = []

    def install(rendered: Rendered) -> Installed:
        if not control_plane.exists("v1", "Namespace", None, NAMESPACE):
            namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}
            control_plane.create(namespace)
        for obj in rbac_objects(rendered):
            applied.append(control_plane.apply(obj, manager="helm", force=True))
        mark = control_plane.audit_mark()
        installed = Installed(
            rendered,
            platform,
            tmp_path,
            tokens={name: control_plane.token(NAMESPACE, name) for name in accounts(rendered)},
            kubeconfig=lambda path, token: control_plane.kubeconfig(path, token=token),
            records=lambda: control_plane.requests(mark),
        )
        installs.append(installed)
        return installed

    yield install
    for installed in installs:
        installed.stop_all()
    for obj in reversed(applied):
        meta = obj["metadata"]
        with contextlib.suppress(ControlPlaneError):  # already gone
            control_plane.delete(
                obj["apiVersion"], obj["kind"], meta.get("namespace"), meta["name"]
            )
    for lease in control_plane.list("coordination.k8s.io/v1", "Lease", NAMESPACE):
        control_plane.delete(
            "coordination.k8s.io/v1", "Lease", NAMESPACE, lease["metadata"]["name"]
        )


def writes_since(
    plane: ControlPlane, mark: int, account: str, *, dry_run: bool = False
) -> list[str]:
    """The writes `account` (a ServiceAccount of the chart's namespace) made after the audit
    log's `mark`, as verb and path: those the server stored, or with `dry_run` those sent
    as a dry run (validated, never stored)."""
    made = plane.requests(mark, user=service_account(NAMESPACE, account))
    return [
        f"{r.info.verb} {r.path}"
        for r in made
        if r.info and r.info.verb in WRITES and (r.query.get("dryRun") == "All") == dry_run
    ]
