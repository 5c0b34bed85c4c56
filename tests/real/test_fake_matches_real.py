"""The fake Kubernetes API server checked against kube-apiserver, request by request.

Each case of `tests.kube_corpus` is played against the session's real control plane and
the fake, each in a fresh namespace of the same name, and the normalised answers must be
equal.
"""

from __future__ import annotations

import ssl
from collections.abc import Iterator

import httpx
import pytest

from sandbox.controlplane import ControlPlane
from sandbox.kube import FakeKube
from tests.kube_corpus import CASES, Case
from tests.kube_differential import Server, cleanup, differences, play
from tests.real_cluster import NewNamespace

ADMIN = "admin"
NOBODY = "nobody"  # a ServiceAccount of the case's namespace, bound to nothing
UNKNOWN = "not-a-token-any-server-issued"
ADMIN_RULES = [
    {"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]},
    {"nonResourceURLs": ["*"], "verbs": ["*"]},
]


@pytest.fixture(scope="module")
def real_client(control_plane: ControlPlane) -> Iterator[httpx.Client]:
    verify = ssl.create_default_context(cafile=str(control_plane.ca_file))
    with httpx.Client(
        base_url=control_plane.url, verify=verify, trust_env=False, timeout=15
    ) as client:
        yield client


@pytest.fixture(scope="module")
def fake_client(session_kube: FakeKube) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=session_kube.url, trust_env=False, timeout=15) as client:
        yield client


def _service_account(namespace: str) -> dict[str, object]:
    return {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": {"name": NOBODY, "namespace": namespace},
    }


def real_server(
    control_plane: ControlPlane, client: httpx.Client, case: Case, namespace: str
) -> Server:
    nobody = None
    if NOBODY in case.tokens:
        control_plane.create(_service_account(namespace))
        nobody = control_plane.token(namespace, NOBODY)
    tokens = {
        "admin": control_plane.admin_token,
        "nobody": nobody,
        "unknown": UNKNOWN,
        "none": None,
    }
    return Server("real", client, tokens, lambda: compact_and_restart(control_plane))


def compact_and_restart(control_plane: ControlPlane) -> None:
    control_plane.compact()
    control_plane.restart_apiserver()


def fake_server(kube: FakeKube, client: httpx.Client, case: Case, namespace: str) -> Server:
    """The fake with RBAC on, as a cluster is: the admin through a `*` ClusterRole (the
    fake has no `system:masters`), the ServiceAccount `nobody` through nothing."""
    kube.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    if NOBODY in case.tokens:
        kube.create(_service_account(namespace))
    role = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole"}
    kube.create({**role, "metadata": {"name": "admin"}, "rules": ADMIN_RULES})
    binding = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding"}
    kube.create(
        {
            **binding,
            "metadata": {"name": "admin"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": "admin",
            },
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": ADMIN}],
        }
    )
    kube.enable_rbac()
    kube.add_token("admin-token", ADMIN)
    kube.add_token("nobody-token", f"system:serviceaccount:{namespace}:{NOBODY}")
    tokens = {"admin": "admin-token", "nobody": "nobody-token", "unknown": UNKNOWN, "none": None}
    return Server("fake", client, tokens, kube.compact)


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_the_fake_answers_as_kube_apiserver(
    case: Case,
    control_plane: ControlPlane,
    real_namespace: NewNamespace,
    real_client: httpx.Client,
    kube: FakeKube,
    fake_client: httpx.Client,
) -> None:
    namespace = real_namespace("diff")
    real = real_server(control_plane, real_client, case, namespace)
    fake = fake_server(kube, fake_client, case, namespace)
    try:
        real_answers = play(real, case, namespace)
    finally:
        cleanup(real, case, namespace)
    fake_answers = play(fake, case, namespace)
    pairs = enumerate(zip(real_answers, fake_answers, strict=True), start=1)
    found = [
        f"request {i}: {line}"
        for i, (real_answer, fake_answer) in pairs
        for line in differences(vars(real_answer), vars(fake_answer))
    ]
    assert not found, "\n".join(found)
