"""The fake Kubernetes API server checked against kube-apiserver, request by request.

Each case of `tests.kube_corpus` is played against the session's real control plane and
the fake, each in a fresh namespace of the same name, and the normalised answers must be
equal.
"""

from __future__ import annotations

import json
import ssl
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from sandbox.controlplane import ControlPlane
from sandbox.kube import FakeKube
from tests.kube_corpus import (
    CASES,
    JSON_PATCH,
    STRATEGIC,
    Case,
    Request,
    get,
    patch,
    post,
    put,
)
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


# --- managedFields, compared whole ---------------------------------------------------------
# The corpus compares managedFields entries by manager and operation only: its normalising
# hides their fields and times. These cases are about those: a client rewriting the list,
# resets and untracked objects, server-side apply's resourceVersion precondition, the order
# and times of the entries. They are played on Leases, which no controller writes, and each
# answer is kept as its status (a Status whole), the ordinal of its resourceVersion (so
# whether it wrote) and its entries: each with its fields as dotted paths (upstream's `.`
# markers aside, and a list with keyed items as one field: the fake writes neither), and
# its time when a case sent it (else whether it has one).

MF_LEASES = "/apis/coordination.k8s.io/v1/namespaces/{ns}/leases"
MF_LEASE = f"{MF_LEASES}/l"
APPLY = "application/apply-patch+yaml"
OLD = "2020-01-02T03:04:05Z"
OLDER = "2019-01-02T03:04:05Z"
OLDEST = "2018-01-02T03:04:05Z"
# The times the cases send, as a server writes them back (UTC, whole seconds).
SENT_TIMES = frozenset({OLD, OLDER, OLDEST, "2020-12-31T22:00:00Z", "2030-01-01T00:00:00Z"})
T1 = "2026-12-04T10:00:00.000000Z"
T2 = "2026-12-04T11:00:00.000000Z"


def _fields(*paths: str) -> dict[str, Any]:
    tree: dict[str, Any] = {}
    for path in paths:
        node = tree
        for key in path.split("."):
            node = node.setdefault(f"f:{key}", {})
    return tree


def _entry(
    manager: str, *paths: str, operation: str = "Update", time: str | None = OLD
) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "manager": manager,
        "operation": operation,
        "apiVersion": "coordination.k8s.io/v1",
        "time": time,
        "fieldsType": "FieldsV1",
        "fieldsV1": _fields(*paths),
    }
    return {key: value for key, value in entry.items() if value is not None}


def _lease(name: str = "l", **metadata: Any) -> dict[str, Any]:
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": name, "labels": {"a": "1"}, **metadata},
        "spec": {"holderIdentity": "pod-a", "leaseDurationSeconds": 15},
    }


def _as(manager: str) -> dict[str, str]:
    return {"fieldManager": manager}


def _apply(manager: str, version: str | None = None, fields: Any = None, **spec: Any) -> Request:
    """`manager` applies `spec` to Lease `l`, the config carrying resourceVersion `version`
    and managedFields `fields` when given."""
    metadata: dict[str, Any] = {"name": "l"}
    if version is not None:
        metadata["resourceVersion"] = version
    if fields is not None:
        metadata["managedFields"] = fields
    config = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": metadata}
    return patch(MF_LEASE, {**config, "spec": spec}, APPLY, query=_as(manager))


def _forced(request: Request, **query: str) -> Request:
    return Request(**{**vars(request), "query": {**request.query, **query}})


def _rewrite(
    entries: list[Any],
    manager: str = "editor",
    *,
    labels: dict[str, Any] | None = None,
    spec: dict[str, Any] | None = None,
) -> Request:
    """A merge patch sending `entries` as the list, with `labels` and `spec` changes."""
    metadata: dict[str, Any] = {"managedFields": entries}
    if labels is not None:
        metadata["labels"] = labels
    body: dict[str, Any] = {"metadata": metadata}
    if spec is not None:
        body["spec"] = spec
    return patch(MF_LEASE, body, query=_as(manager))


def _update(manager: str, **spec: Any) -> Request:
    return patch(MF_LEASE, {"spec": spec}, query=_as(manager))


# Lease `l` made by `creator`, its leaseTransitions then set by `tuner`.
MF_SEEDED = (post(MF_LEASES, _lease(), query=_as("creator")), _update("tuner", leaseTransitions=3))
CREATOR = ("metadata.labels.a", "spec.holderIdentity", "spec.leaseDurationSeconds")
# The list with tuner's entry dropped and two more spec fields given to creator.
REWRITTEN = [_entry("creator", *CREATOR, "spec.leaseTransitions", "spec.renewTime")]
KEEPER = _entry("keeper", "metadata.labels.team")  # owns a label the Lease has not
# A list of entries with times of their own: whose time a write keeps, whose it renews.
TIMED = [_entry("creator", *CREATOR), _entry("tuner", "spec.leaseTransitions", time=OLDER), KEEPER]

MANAGED_FIELDS_CASES = [
    Case(
        "managed fields rewritten by a merge patch",
        (_rewrite(REWRITTEN), get(MF_LEASE)),
        MF_SEEDED,
    ),
    Case(
        "managed fields rewritten by a strategic merge patch",
        (patch(MF_LEASE, {"metadata": {"managedFields": REWRITTEN}}, STRATEGIC),),
        MF_SEEDED,
    ),
    Case(
        "managed fields rewritten by a JSON patch",
        (
            patch(
                MF_LEASE,
                [{"op": "replace", "path": "/metadata/managedFields", "value": REWRITTEN}],
                JSON_PATCH,
            ),
        ),
        MF_SEEDED,
    ),
    Case(
        "managed fields rewritten by a PUT",
        (put(MF_LEASE, _lease(resourceVersion="{rv}", managedFields=REWRITTEN)),),
        MF_SEEDED,
    ),
    Case(
        "managed fields rewritten with a field changed",
        (_rewrite(REWRITTEN, spec={"holderIdentity": "pod-b"}),),
        MF_SEEDED,
    ),
    Case(
        "managed fields rewritten with a label removed",
        (_rewrite([*REWRITTEN, KEEPER], "remover", labels={"a": None}),),
        MF_SEEDED,
    ),
    Case(
        "managed fields reset by an empty list, then untracked until an apply",
        (
            _rewrite([]),
            _update("later", holderIdentity="pod-b"),
            _apply("applier", holderIdentity="pod-c"),
            _apply("sharer", holderIdentity="pod-b", leaseTransitions=3),
            _forced(_apply("applier", holderIdentity="pod-c"), force="true"),
            _update("later", leaseDurationSeconds=20),
        ),
        MF_SEEDED,
    ),
    Case(
        "managed fields reset by one empty entry, with a change no one is given",
        (_rewrite([{}], spec={"holderIdentity": "pod-b"}), get(MF_LEASE)),
        MF_SEEDED,
    ),
    Case(
        "a managed fields list that does not decode is ignored",
        (
            _rewrite([{**REWRITTEN[0], "operation": "Bogus"}]),
            _rewrite([{**REWRITTEN[0], "fieldsType": "FieldsV2"}]),
            _rewrite([{**REWRITTEN[0], "fieldsV1": {"spec": {}}}]),
            _rewrite([{**REWRITTEN[0], "operation": "Bogus"}], spec={"holderIdentity": "pod-b"}),
        ),
        MF_SEEDED,
    ),
    Case(
        "entries keep their times unless their manager changes a field",
        (
            _rewrite(TIMED),
            _update("other", holderIdentity="pod-b"),
            patch(MF_LEASE, {"metadata": {"labels": {"a": None}}}, query=_as("creator")),
            _update("tuner", leaseTransitions=4),
        ),
        MF_SEEDED,
    ),
    Case(
        "a write changing only the times of the entries changes nothing",
        (
            _rewrite(TIMED),
            _rewrite(
                [
                    _entry("creator", *CREATOR, time=OLDER),
                    _entry("tuner", "spec.leaseTransitions", time=OLDEST),
                    {**KEEPER, "time": OLDER},
                ]
            ),
        ),
        MF_SEEDED,
    ),
    Case(
        "entries are ordered as upstream encodes them",
        (
            _rewrite(
                [
                    _entry("b", "spec.holderIdentity", time="2021-01-01T00:00:00.750+02:00"),
                    _entry("a", "spec.leaseTransitions", time="2020-12-31T22:00:00Z"),
                    _entry("z", "metadata.labels.a", time=None),
                    _entry("y", "spec.renewTime", operation="Apply", time="2030-01-01T00:00:00Z"),
                ]
            ),
        ),
        MF_SEEDED,
    ),
    Case(
        "a create may carry managed fields, and one with no field is untracked",
        (
            post(
                MF_LEASES,
                _lease(managedFields=[_entry("earlier", "spec.holderIdentity", "spec.renewTime")]),
                query=_as("creator"),
            ),
            post(MF_LEASES, {"metadata": {"name": "bare"}}, query=_as("creator")),
            patch(f"{MF_LEASES}/bare", {"spec": {"holderIdentity": "pod-b"}}, query=_as("later")),
        ),
    ),
    Case(
        "a server-side apply holds the resourceVersion it carries as a precondition",
        (
            _apply("applier", "{rv}", acquireTime=T1),
            _apply("applier", "{first_rv}", acquireTime=T2),
            _apply("applier", "{first_rv}", acquireTime=T1),
            _forced(_apply("applier", "{first_rv}", acquireTime=T2), force="true"),
            _forced(_apply("applier", "{first_rv}", acquireTime=T2), dryRun="All"),
            _apply("applier", "{first_rv}", holderIdentity="pod-b"),
            _apply("applier", "abc", acquireTime=T2),
            _apply("applier", "0", acquireTime=T2),
            _apply("applier", "{rv}", acquireTime=T2),
            patch(MF_LEASE, {"metadata": {"resourceVersion": "abc"}}),
            put(MF_LEASE, _lease()),
        ),
        MF_SEEDED,
    ),
    Case(
        "a server-side apply may not carry managed fields",
        (
            _apply("applier", fields=[], holderIdentity="pod-a"),
            _apply("applier", fields=REWRITTEN, holderIdentity="pod-a"),
        ),
        MF_SEEDED,
    ),
    Case(
        "an apply entry has the time of the last apply that changed the object",
        (
            _rewrite(
                [
                    _entry("creator", *CREATOR),
                    _entry("tuner", "spec.leaseTransitions"),
                    _entry("applier", "spec.holderIdentity", operation="Apply"),
                ]
            ),
            _apply("applier", holderIdentity="pod-a", leaseTransitions=3),
            _apply("newcomer", holderIdentity="pod-a"),
            _forced(_apply("applier", holderIdentity="pod-b", leaseTransitions=3), force="true"),
        ),
        MF_SEEDED,
    ),
]


def _filled(value: Any, values: dict[str, str]) -> Any:
    if isinstance(value, str):
        for name, text in values.items():
            value = value.replace(f"{{{name}}}", text)
        return value
    if isinstance(value, dict):
        return {key: _filled(item, values) for key, item in value.items()}
    if isinstance(value, list):
        return [_filled(item, values) for item in value]
    return value


def _field_paths(tree: dict[str, Any], prefix: str = "") -> list[str]:
    """The fields a FieldsV1 set names, as dotted paths: a member with named fields under it
    stands for them (its `.` aside), any other member for itself."""
    found: list[str] = []
    for key, child in tree.items():
        if not key.startswith("f:"):
            continue
        path = f"{prefix}.{key[2:]}" if prefix else key[2:]
        named = any(name.startswith("f:") for name in child)
        found += _field_paths(child, path) if named else [path]
    return sorted(found)


def _managed_view(answer: httpx.Response, ordinals: dict[str, str]) -> dict[str, Any]:
    body = answer.json()
    if body.get("kind") == "Status":
        return {"code": answer.status_code, **body}
    metadata = body["metadata"]
    version = str(metadata["resourceVersion"])
    # In the order of their identities: the servers sort entries by time in whole seconds,
    # and two writes a second boundary apart on one server may share a second on the other.
    # (tests/fake holds the fake to upstream's order.)
    ordered = sorted(
        metadata.get("managedFields") or (),
        key=lambda entry: tuple(
            str(entry.get(key) or "") for key in ("operation", "manager", "subresource")
        ),
    )
    entries = [
        {
            "manager": entry.get("manager"),
            "operation": entry.get("operation"),
            "apiVersion": entry.get("apiVersion"),
            "subresource": entry.get("subresource"),
            "fieldsType": entry.get("fieldsType"),
            "time": entry["time"] if entry.get("time") in SENT_TIMES else "time" in entry,
            "fields": _field_paths(entry.get("fieldsV1") or {}),
        }
        for entry in ordered
    ]
    return {
        "code": answer.status_code,
        "resourceVersion": ordinals.setdefault(version, f"rv{len(ordinals) + 1}"),
        "managedFields": entries,
    }


def _play_keeping_managed_fields(
    server: Server, case: Case, namespace: str
) -> list[dict[str, Any]]:
    """`play` with each answer kept as `_managed_view` sees it: `{rv}` is the last
    resourceVersion an object answered had, `{first_rv}` the first."""
    values = {"ns": namespace}
    ordinals: dict[str, str] = {}

    def send(request: Request) -> tuple[int, dict[str, Any]]:
        token = server.tokens[request.token]
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        if request.content_type:
            headers["Content-Type"] = request.content_type
        body = None if request.body is None else json.dumps(_filled(request.body, values))
        answer = server.client.request(
            request.method,
            _filled(request.path, values),
            params=_filled(dict(request.query), values),
            content=body,
            headers=headers,
        )
        view = _managed_view(answer, ordinals)
        version = (answer.json().get("metadata") or {}).get("resourceVersion")
        if version and "managedFields" in view:
            values.setdefault("first_rv", str(version))
            values["rv"] = str(version)
        return answer.status_code, view

    for step in case.setup:
        status, view = send(step)
        assert status < 300, f"{server.name}: setup {step.method} {step.path}: {view}"
    return [send(request)[1] for request in case.requests]


@pytest.mark.parametrize(
    "case", MANAGED_FIELDS_CASES, ids=[case.name for case in MANAGED_FIELDS_CASES]
)
def test_the_fake_keeps_managed_fields_as_kube_apiserver(
    case: Case,
    control_plane: ControlPlane,
    real_namespace: NewNamespace,
    real_client: httpx.Client,
    kube: FakeKube,
    fake_client: httpx.Client,
) -> None:
    namespace = real_namespace("fields")
    real = real_server(control_plane, real_client, case, namespace)
    fake = fake_server(kube, fake_client, case, namespace)
    real_views = _play_keeping_managed_fields(real, case, namespace)
    fake_views = _play_keeping_managed_fields(fake, case, namespace)
    pairs = enumerate(zip(real_views, fake_views, strict=True), start=1)
    found = [
        f"request {i}: {line}"
        for i, (real_view, fake_view) in pairs
        for line in differences(real_view, fake_view)
    ]
    assert not found, "\n".join(found)
