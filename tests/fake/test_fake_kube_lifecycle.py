"""Objects live and die in the fake as in kube-apiserver: namespaces that must exist and
terminate, finalizers that hold a deletion, the garbage collector's cascades, generations
counted by each kind's rules, and deletes that only pretend under dryRun.

Each test cites the documentation or upstream source of the behaviour it checks.
"""

from __future__ import annotations

from typing import Any

import httpx
import msgspec
import pytest

from sandbox import objects
from sandbox.kube import ApiError, FakeKube
from tests import cluster_objects

NS = "shop"
CONFIGMAPS = f"/api/v1/namespaces/{NS}/configmaps"
DEPLOYMENTS = f"/apis/apps/v1/namespaces/{NS}/deployments"
NAMESPACES = "/api/v1/namespaces"
Change = tuple[str, str, str, dict[str, Any]]


def configmap(name: str = "settings", **metadata: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, **metadata}}


def delete(http: httpx.Client, path: str, **options: Any) -> httpx.Response:
    body = msgspec.json.encode(options) if options else b""
    return http.request("DELETE", path, content=body)


def events(kube: FakeKube, since: int, counts: dict[str, int]) -> list[Change]:
    """(type, kind, name, object) of the first `counts[path]` changes after `since` on each
    watched path, in resourceVersion order across them (the fake replays its history)."""
    seen: list[tuple[int, Change]] = []
    query = {"watch": "1", "resourceVersion": str(since)}
    with httpx.Client(base_url=kube.url, headers=kube.headers, trust_env=False) as client:
        for path, count in counts.items():
            if not count:
                continue
            with client.stream("GET", path, params=query) as answer:
                for line in answer.iter_lines():
                    event = msgspec.json.decode(line)
                    obj = event["object"]
                    rv = int(obj["metadata"]["resourceVersion"])
                    change = (event["type"], obj["kind"], obj["metadata"]["name"], obj)
                    seen.append((rv, change))
                    count -= 1
                    if not count:
                        break
    return [change for _, change in sorted(seen, key=lambda pair: pair[0])]


def summary(changes: list[Change]) -> list[tuple[str, str, str]]:
    return [(kind_of_change, kind, name) for kind_of_change, kind, name, _ in changes]


# --- namespaces ----------------------------------------------------------------------------


def test_a_python_side_create_may_seed_into_a_namespace_that_does_not_exist(
    kube: FakeKube,
) -> None:
    """Seeding skips admission (documented on FakeKube.create), so tests stay fast."""
    assert kube.create(configmap(namespace=NS))["metadata"]["namespace"] == NS


@pytest.mark.parametrize("how", ["http", "python"])
def test_a_namespace_starts_active_with_the_kubernetes_finalizer(
    how: str, kube: FakeKube, http: httpx.Client
) -> None:
    """pkg/registry/core/namespace/strategy.go PrepareForCreate: phase Active and the
    `kubernetes` finalizer in spec.finalizers
    (https://kubernetes.io/docs/concepts/overview/working-with-objects/namespaces/)."""
    if how == "http":
        made = http.post(NAMESPACES, json={"metadata": {"name": NS}}).json()
    else:
        made = kube.create(objects.namespace(name=cluster_objects.NS))
    assert made["status"] == {"phase": "Active"}
    assert made["spec"] == {"finalizers": ["kubernetes"]}


def test_deleting_a_namespace_terminates_it_deletes_its_contents_and_then_removes_it(
    kube: FakeKube, http: httpx.Client
) -> None:
    """The namespace goes Terminating (deletionTimestamp, phase), the namespace controller
    deletes its content, records its conditions, drops the `kubernetes` finalizer, and the
    namespace is deleted: pkg/registry/core/namespace/storage/storage.go (Delete) and
    pkg/controller/namespace/deletion/namespaced_resources_deleter.go."""
    kube.create(objects.namespace(name=cluster_objects.NS))
    kube.create(configmap(namespace=NS))
    since = kube.current_rv
    answer = delete(http, f"{NAMESPACES}/{NS}")
    assert answer.status_code == 200
    body = answer.json()
    assert body["kind"] == "Namespace"
    assert body["status"] == {"phase": "Terminating"}
    assert body["spec"] == {"finalizers": ["kubernetes"]}
    assert "deletionTimestamp" in body["metadata"]
    changes = events(kube, since, {NAMESPACES: 4, "/api/v1/configmaps": 1})
    assert summary(changes) == [
        ("MODIFIED", "Namespace", NS),
        ("DELETED", "ConfigMap", "settings"),
        ("MODIFIED", "Namespace", NS),  # the controller's conditions
        ("MODIFIED", "Namespace", NS),  # the `kubernetes` finalizer removed
        ("DELETED", "Namespace", NS),
    ]
    conditions = {c["type"]: c for c in changes[2][3]["status"]["conditions"]}
    assert conditions["NamespaceContentRemaining"]["status"] == "False"
    assert conditions["NamespaceContentRemaining"]["reason"] == "ContentRemoved"
    assert "finalizers" not in changes[3][3]["spec"]
    assert http.get(f"{NAMESPACES}/{NS}").status_code == 404


def test_content_with_finalizers_keeps_a_namespace_terminating_and_new_content_out(
    kube: FakeKube, http: httpx.Client
) -> None:
    """While content waits for its finalizers the namespace stays Terminating with
    NamespaceFinalizersRemaining; a create there is 403 with a NamespaceTerminating cause
    (plugin/pkg/admission/namespace/lifecycle/admission.go); the namespace goes with its
    last content (https://kubernetes.io/docs/concepts/overview/working-with-objects/finalizers/)."""
    kube.create(objects.namespace(name=cluster_objects.NS))
    kube.create(configmap(namespace=NS, finalizers=["example.com/hold"]))
    delete(http, f"{NAMESPACES}/{NS}")

    terminating = kube.get("namespaces", None, NS)
    assert terminating["status"]["phase"] == "Terminating"
    conditions = {c["type"]: c for c in terminating["status"]["conditions"]}
    assert conditions["NamespaceContentRemaining"] == {
        "type": "NamespaceContentRemaining",
        "status": "True",
        "reason": "SomeResourcesRemain",
        "message": "Some resources are remaining: configmaps has 1 resource instances",
        "lastTransitionTime": conditions["NamespaceContentRemaining"]["lastTransitionTime"],
    }
    assert conditions["NamespaceFinalizersRemaining"]["message"] == (
        "Some content in the namespace has finalizers remaining: example.com/hold in 1 "
        "resource instances"
    )

    refused = http.post(CONFIGMAPS, json=configmap("more"))
    assert refused.status_code == 403
    assert refused.json()["message"] == (
        'configmaps "more" is forbidden: unable to create new content in namespace shop '
        "because it is being terminated"
    )
    assert refused.json()["details"]["causes"] == [
        {
            "reason": "NamespaceTerminating",
            "message": "namespace shop is being terminated",
            "field": "metadata.namespace",
        }
    ]

    released = http.patch(
        f"{CONFIGMAPS}/settings",
        json={"metadata": {"finalizers": None}},
        headers={"Content-Type": "application/merge-patch+json"},
    )
    assert released.status_code == 200
    assert kube.list("namespaces") == []


@pytest.mark.parametrize("name", ["default", "kube-system", "kube-public"])
def test_the_system_namespaces_may_not_be_deleted(
    name: str, kube: FakeKube, http: httpx.Client
) -> None:
    """NamespaceLifecycle refuses to delete its immortal namespaces with a 403."""
    kube.create(objects.namespace(name=name))
    answer = delete(http, f"{NAMESPACES}/{name}")
    assert answer.status_code == 403
    assert answer.json()["reason"] == "Forbidden"
    assert answer.json()["message"] == (
        f'namespaces "{name}" is forbidden: this namespace may not be deleted'
    )
    assert kube.get("namespaces", None, name)["status"]["phase"] == "Active"


def test_system_namespaces_exist_from_the_start_and_after_a_reset_when_asked() -> None:
    """A cluster always has default, kube-system and kube-public (namespaces docs)."""
    with FakeKube(system_namespaces=True) as kube:
        names = ["default", "kube-public", "kube-system"]
        assert [n["metadata"]["name"] for n in kube.list("namespaces")] == names
        kube.reset()
        assert [n["metadata"]["name"] for n in kube.list("namespaces")] == names
        answer = httpx.post(
            kube.url + "/api/v1/namespaces/default/configmaps",
            json=configmap(),
            headers=kube.headers,
            trust_env=False,
        )
        assert answer.status_code == 201


# --- finalizers ----------------------------------------------------------------------------


def test_no_finalizer_may_be_added_and_the_deletion_may_not_be_undone_once_deleting(
    kube: FakeKube, http: httpx.Client
) -> None:
    """staging/src/k8s.io/apimachinery/pkg/api/validation/objectmeta.go: "no new finalizers
    can be added if the object is being deleted"; rest.BeforeUpdate keeps the
    deletionTimestamp whatever an update says."""
    kube.create(configmap(namespace=NS, finalizers=["example.com/a"]))
    marked = delete(http, f"{CONFIGMAPS}/settings").json()
    merge = {"Content-Type": "application/merge-patch+json"}
    added = http.patch(
        f"{CONFIGMAPS}/settings",
        json={"metadata": {"finalizers": ["example.com/a", "example.com/b"]}},
        headers=merge,
    )
    assert added.status_code == 422
    assert added.json()["message"] == (
        'ConfigMap "settings" is invalid: metadata.finalizers: Forbidden: no new finalizers '
        "can be added if the object is being deleted, found new finalizers "
        '[]string{"example.com/b"}'
    )
    undone = http.patch(
        f"{CONFIGMAPS}/settings",
        json={"metadata": {"deletionTimestamp": None, "labels": {"x": "1"}}},
        headers=merge,
    )
    assert undone.status_code == 200
    assert undone.json()["metadata"]["deletionTimestamp"] == marked["metadata"]["deletionTimestamp"]


def test_marking_a_kind_with_a_generation_for_deletion_bumps_its_generation(
    kube: FakeKube, http: httpx.Client
) -> None:
    """markAsDeleting bumps the generation of objects that have one, so their controllers
    see the deletion as a change of desired state."""
    made = kube.create(
        {
            **objects.deployment(name="web", namespace=cluster_objects.NS),
            "metadata": {
                **objects.deployment(name="web", namespace=cluster_objects.NS)["metadata"],
                "finalizers": ["example.com/a"],
            },
        }
    )
    assert made["metadata"]["generation"] == 1
    assert delete(http, f"{DEPLOYMENTS}/web").json()["metadata"]["generation"] == 2


# --- garbage collection --------------------------------------------------------------------


def owner_reference(owner: dict[str, Any], *, block: bool = True) -> dict[str, Any]:
    return {
        "apiVersion": owner["apiVersion"],
        "kind": owner["kind"],
        "name": owner["metadata"]["name"],
        "uid": owner["metadata"]["uid"],
        "controller": True,
        "blockOwnerDeletion": block,
    }


def application(kube: FakeKube, pods: int = 2) -> tuple[dict[str, Any], dict[str, Any]]:
    """A Deployment, its ReplicaSet and its Pods, as the Deployment controller makes them."""
    kube.create(objects.namespace(name=cluster_objects.NS))
    web = kube.create(objects.deployment(name="web", namespace=cluster_objects.NS))
    replicaset = objects.replicaset(owner=web)
    replicaset["metadata"]["ownerReferences"] = [owner_reference(web)]
    rs = kube.create(replicaset)
    for index in range(pods):
        pod = objects.crash_looping_pod(owner=rs)
        pod["metadata"]["name"] += str(index)
        pod["metadata"]["ownerReferences"] = [owner_reference(rs)]
        kube.create(pod)
    return web, rs


def watched(deployments: int, replicasets: int, pods: int) -> dict[str, int]:
    return {
        DEPLOYMENTS: deployments,
        f"/apis/apps/v1/namespaces/{NS}/replicasets": replicasets,
        f"/api/v1/namespaces/{NS}/pods": pods,
    }


@pytest.mark.parametrize("how", ["default", "Background"])
def test_background_deletion_of_a_deployment_deletes_its_replicasets_then_their_pods(
    how: str, kube: FakeKube, http: httpx.Client
) -> None:
    """https://kubernetes.io/docs/concepts/architecture/garbage-collection/#background-deletion:
    the owner goes at once, the collector deletes the dependents after it."""
    kube.enable_controller("garbage-collector")
    application(kube)
    since = kube.current_rv
    options = {} if how == "default" else {"propagationPolicy": how}
    answer = delete(http, f"{DEPLOYMENTS}/web", **options)
    assert (answer.status_code, answer.json()["status"]) == (200, "Success")
    assert summary(events(kube, since, watched(1, 1, 2))) == [
        ("DELETED", "Deployment", "web"),
        ("DELETED", "ReplicaSet", "web-5d8f7c9b6"),
        ("DELETED", "Pod", "web-5d8f7c9b6-x2x9k0"),
        ("DELETED", "Pod", "web-5d8f7c9b6-x2x9k1"),
    ]


def test_foreground_deletion_deletes_the_dependents_first_and_the_owner_last(
    kube: FakeKube, http: httpx.Client
) -> None:
    """https://kubernetes.io/docs/concepts/architecture/garbage-collection/#foreground-deletion:
    the owner is marked with the foregroundDeletion finalizer, dependents that block it
    are deleted (a dependent with dependents of its own in the foreground too), then it."""
    kube.enable_controller("garbage-collector")
    application(kube)
    since = kube.current_rv
    answer = http.request(
        "DELETE", f"{DEPLOYMENTS}/web", params={"propagationPolicy": "Foreground"}
    )
    assert answer.status_code == 200
    assert answer.json()["metadata"]["finalizers"] == ["foregroundDeletion"]
    changes = events(kube, since, watched(2, 2, 2))
    assert summary(changes) == [
        ("MODIFIED", "Deployment", "web"),
        ("MODIFIED", "ReplicaSet", "web-5d8f7c9b6"),
        ("DELETED", "Pod", "web-5d8f7c9b6-x2x9k0"),
        ("DELETED", "Pod", "web-5d8f7c9b6-x2x9k1"),
        ("DELETED", "ReplicaSet", "web-5d8f7c9b6"),
        ("DELETED", "Deployment", "web"),
    ]
    assert changes[1][3]["metadata"]["finalizers"] == ["foregroundDeletion"]


def test_orphan_deletion_leaves_the_dependents_without_their_owner_reference(
    kube: FakeKube, http: httpx.Client
) -> None:
    """https://kubernetes.io/docs/concepts/architecture/garbage-collection/#orphaned-dependents:
    the `orphan` finalizer holds the owner until its dependents' references to it are
    removed; the legacy orphanDependents=true means the same."""
    kube.enable_controller("garbage-collector")
    application(kube)
    since = kube.current_rv
    answer = delete(http, f"{DEPLOYMENTS}/web", orphanDependents=True)
    assert answer.json()["metadata"]["finalizers"] == ["orphan"]
    changes = events(kube, since, watched(2, 1, 0))
    assert summary(changes) == [
        ("MODIFIED", "Deployment", "web"),
        ("MODIFIED", "ReplicaSet", "web-5d8f7c9b6"),
        ("DELETED", "Deployment", "web"),
    ]
    assert "ownerReferences" not in changes[1][3]["metadata"]
    assert len(kube.list("pods", NS)) == 2


def test_a_dependent_with_another_living_owner_survives_and_forgets_the_gone_one(
    kube: FakeKube, http: httpx.Client
) -> None:
    """owners-dependents docs: an object is collected only once it has no owner left; the
    collector removes references to owners that are gone (attemptToDeleteItem)."""
    kube.enable_controller("garbage-collector")
    kube.create(objects.namespace(name=cluster_objects.NS))
    first = kube.create(configmap("first", namespace=NS))
    second = kube.create(configmap("second", namespace=NS))
    both = [owner_reference(first), {**owner_reference(second), "controller": False}]
    kube.create(configmap("shared", namespace=NS, ownerReferences=both))
    delete(http, f"{CONFIGMAPS}/first")
    shared = kube.get("configmaps", NS, "shared")
    assert [r["name"] for r in shared["metadata"]["ownerReferences"]] == ["second"]
    delete(http, f"{CONFIGMAPS}/second")
    with pytest.raises(ApiError) as gone:
        kube.get("configmaps", NS, "shared")
    assert gone.value.code == 404


def test_a_dependent_whose_owner_never_existed_is_collected(kube: FakeKube) -> None:
    """The collector deletes an object whose owner's uid does not exist (owners-dependents:
    "dangling" references are resolved by deleting the dependent)."""
    kube.enable_controller("garbage-collector")
    ghost = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "ghost", "uid": "0"}}
    kube.create(configmap("orphaned", namespace=NS, ownerReferences=[owner_reference(ghost)]))
    assert kube.list("configmaps", NS) == []


def test_without_the_collector_dependents_survive_their_owner(
    kube: FakeKube, http: httpx.Client
) -> None:
    """The collector is opt-in per test (sandbox/kube/controllers.py), so a test that does
    not ask sees exactly the writes it made."""
    application(kube)
    delete(http, f"{DEPLOYMENTS}/web")
    assert len(kube.list("replicasets", NS)) == 1
    assert len(kube.list("pods", NS)) == 2


def test_deleting_a_namespace_with_the_collector_running_empties_it_once(
    kube: FakeKube, http: httpx.Client
) -> None:
    """The namespace controller and the collector both delete the same objects; each
    object is deleted once (the namespace and garbage-collection docs)."""
    kube.enable_controller("garbage-collector")
    application(kube)
    since = kube.current_rv
    delete(http, f"{NAMESPACES}/{NS}")
    deleted = [c for c in events(kube, since, watched(1, 1, 2)) if c[0] == "DELETED"]
    assert len(deleted) == 4
    assert kube.stats()["objects"] == {}


def test_without_the_collector_a_foreground_delete_leaves_the_owner_waiting(
    kube: FakeKube, http: httpx.Client
) -> None:
    """The foregroundDeletion finalizer is the collector's to remove (garbage-collection
    docs); with no collector running, nothing removes it."""
    application(kube)
    delete(http, f"{DEPLOYMENTS}/web", propagationPolicy="Foreground")
    waiting = kube.get("deployments", NS, "web")["metadata"]
    assert (waiting["finalizers"], waiting["deletionGracePeriodSeconds"]) == (
        ["foregroundDeletion"],
        0,
    )
    assert len(kube.list("pods", NS)) == 2


# --- generation ----------------------------------------------------------------------------


def test_a_deployment_generation_counts_spec_and_annotation_changes_not_labels(
    kube: FakeKube, http: httpx.Client
) -> None:
    """pkg/registry/apps/deployment/strategy.go PrepareForUpdate: spec or annotation
    changes bump the generation ("annotations are copied from deployments to their
    replica sets"); metadata.generation in the body is ignored."""
    kube.create(objects.namespace(name=cluster_objects.NS))
    http.post(DEPLOYMENTS, json=objects.deployment(name="web", namespace=cluster_objects.NS))
    merge = {"Content-Type": "application/merge-patch+json"}

    def patch(body: dict[str, Any]) -> int:
        answer = http.patch(f"{DEPLOYMENTS}/web", json=body, headers=merge)
        assert answer.status_code == 200, answer.text
        generation: int = answer.json()["metadata"]["generation"]
        return generation

    assert patch({"metadata": {"labels": {"tier": "front"}}}) == 1
    assert patch({"metadata": {"annotations": {"note": "x"}}}) == 2
    assert patch({"spec": {"replicas": 5}}) == 3
    assert patch({"metadata": {"generation": 40}}) == 3


def test_a_replicaset_generation_counts_only_spec_changes(kube: FakeKube) -> None:
    """pkg/registry/apps/replicaset/strategy.go: only spec changes bump the generation."""
    web = objects.deployment(name="web", namespace=NS)
    rs = kube.create(objects.replicaset(owner=objects.with_uid(web, "uid-1")))
    name = rs["metadata"]["name"]
    annotated = kube.patch("replicasets", NS, name, {"metadata": {"annotations": {"a": "b"}}})
    assert annotated["metadata"]["generation"] == 1
    scaled = kube.patch("replicasets", NS, name, {"spec": {"replicas": 3}})
    assert scaled["metadata"]["generation"] == 2


def test_kinds_without_a_generation_never_get_one(kube: FakeKube) -> None:
    """Only kinds whose strategy sets it have metadata.generation (ConfigMap has none)."""
    kube.create(configmap(namespace=NS))
    changed = kube.patch("configmaps", NS, "settings", {"data": {"a": "b"}})
    assert "generation" not in changed["metadata"]


# --- managed fields ------------------------------------------------------------------------


def managers(obj: dict[str, Any]) -> dict[tuple[str, str | None], dict[str, Any]]:
    return {
        (entry["manager"], entry.get("subresource")): entry["fieldsV1"]
        for entry in obj["metadata"]["managedFields"]
    }


def test_a_create_gives_its_field_manager_every_field_it_set(
    kube: FakeKube, http: httpx.Client
) -> None:
    """https://kubernetes.io/docs/reference/using-api/server-side-apply/#field-management:
    managedFields name the manager (the `fieldManager` parameter), the operation, the
    apiVersion, the time and the fields (FieldsV1)."""
    kube.create(objects.namespace(name=cluster_objects.NS))
    made = http.post(
        CONFIGMAPS,
        params={"fieldManager": "seeder"},
        json={**configmap(labels={"app": "web"}), "data": {"mode": "fast"}},
    ).json()
    [entry] = made["metadata"]["managedFields"]
    assert entry == {
        "manager": "seeder",
        "operation": "Update",
        "apiVersion": "v1",
        "time": entry["time"],
        "fieldsType": "FieldsV1",
        "fieldsV1": {"f:data": {"f:mode": {}}, "f:metadata": {"f:labels": {"f:app": {}}}},
    }


def test_an_update_moves_the_fields_it_changed_to_its_manager(
    kube: FakeKube, http: httpx.Client
) -> None:
    """Field management: a manager that changes a field takes it over from the one that
    set it; without `fieldManager` the manager is the User-Agent up to its first "/"."""
    kube.create(objects.namespace(name=cluster_objects.NS))
    http.post(
        CONFIGMAPS, params={"fieldManager": "seeder"}, json={**configmap(), "data": {"a": "1"}}
    )
    changed = http.patch(
        f"{CONFIGMAPS}/settings",
        json={"data": {"a": "2", "b": "1"}},
        headers={"Content-Type": "application/merge-patch+json", "User-Agent": "tuner/1.0 (linux)"},
    ).json()
    assert managers(changed) == {("tuner", None): {"f:data": {"f:a": {}, "f:b": {}}}}
    same = http.patch(
        f"{CONFIGMAPS}/settings",
        json={"data": {"a": "2"}},
        headers={"Content-Type": "application/merge-patch+json", "User-Agent": "other/2"},
    ).json()
    assert same["metadata"]["resourceVersion"] == changed["metadata"]["resourceVersion"]


def test_status_writes_are_managed_apart_as_the_status_subresource(
    kube: FakeKube, http: httpx.Client
) -> None:
    """Field management records the subresource a manager wrote through."""
    kube.create(objects.namespace(name=cluster_objects.NS))
    http.post(
        DEPLOYMENTS,
        params={"fieldManager": "deployer"},
        json=objects.deployment(name="web", namespace=cluster_objects.NS),
    )
    written = http.patch(
        f"{DEPLOYMENTS}/web/status",
        params={"fieldManager": "controller"},
        json={"status": {"replicas": 2}},
        headers={"Content-Type": "application/merge-patch+json"},
    ).json()
    status_fields = managers(written)[("controller", "status")]
    assert status_fields["f:status"]["f:replicas"] == {}
    assert "f:spec" in managers(written)[("deployer", None)]
