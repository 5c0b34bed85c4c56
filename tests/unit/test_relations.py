"""Relations: the in-memory indexes behind `Lookups`, and what each change affects."""

from __future__ import annotations

import random
import sqlite3
from pathlib import Path
from typing import Any

import msgspec
import pytest

from collector.model import ObjectMeta
from collector.normalize.base import HpaRef, Lookups, RevisionRef
from collector.normalize.deployment import Deployment
from collector.normalize.hpa import HorizontalPodAutoscaler
from collector.normalize.revision import ReplicaSet
from collector.normalize.service import Service
from collector.relations import CURRENT_REVISION, Relations
from collector.state import RELATION_TABLES, StateStore


class Job(msgspec.Struct):
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)


def decode(raw: dict[str, Any], struct: type) -> Any:
    return msgspec.json.decode(msgspec.json.encode(raw), type=struct)


def deployment(name: str, labels: dict[str, str], ns: str = "shop") -> Deployment:
    return decode(
        {
            "metadata": {"name": name, "namespace": ns, "resourceVersion": "1"},
            "spec": {"template": {"metadata": {"labels": labels}, "spec": {"containers": []}}},
        },
        Deployment,
    )


def service(name: str, selector: dict[str, str] | None, ns: str = "shop") -> Service:
    return decode(
        {"metadata": {"name": name, "namespace": ns}, "spec": {"selector": selector}}, Service
    )


def hpa(name: str, target: str, low: int | None, high: int, kind: str = "Deployment") -> Any:
    spec: dict[str, Any] = {
        "scaleTargetRef": {"apiVersion": "apps/v1", "kind": kind, "name": target},
        "maxReplicas": high,
    }
    if low is not None:
        spec["minReplicas"] = low
    return decode(
        {"metadata": {"name": name, "namespace": "shop"}, "spec": spec, "status": {}},
        HorizontalPodAutoscaler,
    )


def replicaset(name: str, owner: str | None, revision: str | None, ns: str = "shop") -> ReplicaSet:
    meta: dict[str, Any] = {"name": name, "namespace": ns, "annotations": {}}
    if revision is not None:
        meta["annotations"]["deployment.kubernetes.io/revision"] = revision
    if owner is not None:
        meta["ownerReferences"] = [
            {
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "name": owner,
                "uid": "u",
                "controller": True,
            }
        ]
    return decode({"metadata": meta, "spec": {"replicas": 1}}, ReplicaSet)


def gone(name: str, ns: str = "shop") -> Job:
    """What a vanished object looks like: nothing but its metadata."""
    return Job(metadata=ObjectMeta(name=name, namespace=ns))


def test_it_satisfies_lookups() -> None:
    lookups: Lookups = Relations()
    assert lookups.current_revision("shop", "web") is None


def test_services_selecting_and_affected_deployments() -> None:
    rel = Relations()
    assert rel.observe("Deployment", deployment("web", {"app": "web", "tier": "front"})) == set()
    assert rel.observe("Deployment", deployment("api", {"app": "api"})) == set()
    assert rel.observe("Deployment", deployment("web", {"app": "web"}, ns="other")) == set()

    assert rel.observe("Service", service("web", {"app": "web"})) == {"shop/web"}
    assert rel.observe("Service", service("front", {"tier": "front"})) == {"shop/web"}
    assert rel.services_selecting("shop", {"app": "web", "tier": "front", "x": "y"}) == [
        "front",
        "web",
    ]
    assert rel.services_selecting("shop", {"app": "api"}) == []
    assert rel.services_selecting("other", {"app": "web"}) == []

    # Unchanged selector: nothing to rebuild; a selector moved: both sides are affected.
    assert rel.observe("Service", service("web", {"app": "web"})) == set()
    assert rel.observe("Service", service("web", {"app": "api"})) == {"shop/web", "shop/api"}
    assert rel.services_selecting("shop", {"app": "api"}) == ["web"]

    # A Service without a selector selects nothing (it is not "select all").
    assert rel.observe("Service", service("external", None)) == set()
    assert rel.observe("Service", service("empty", {})) == set()
    assert rel.services_selecting("shop", {"app": "api"}) == ["web"]

    assert rel.forget("Service", gone("web")) == {"shop/api"}
    assert rel.services_selecting("shop", {"app": "api"}) == []
    assert rel.forget("Service", gone("never-seen")) == set()


def test_hpa_for_and_affected_deployments() -> None:
    rel = Relations()
    assert rel.observe("HorizontalPodAutoscaler", hpa("web", "web", 2, 10)) == {"shop/web"}
    assert rel.hpa_for("shop", "web") == HpaRef(name="web", min_replicas=2, max_replicas=10)
    assert rel.hpa_for("shop", "api") is None
    # Status-only updates leave the link alone.
    assert rel.observe("HorizontalPodAutoscaler", hpa("web", "web", 2, 10)) == set()
    assert rel.observe("HorizontalPodAutoscaler", hpa("web", "web", 3, 10)) == {"shop/web"}
    # Retargeted: the old and the new Deployment change.
    assert rel.observe("HorizontalPodAutoscaler", hpa("web", "api", None, 5)) == {
        "shop/web",
        "shop/api",
    }
    assert rel.hpa_for("shop", "web") is None
    assert rel.hpa_for("shop", "api") == HpaRef(name="web", min_replicas=1, max_replicas=5)
    # An HPA scaling something other than a Deployment links to no Deployment.
    assert (
        rel.observe("HorizontalPodAutoscaler", hpa("sts", "db", 1, 3, kind="StatefulSet")) == set()
    )
    assert rel.hpa_for("shop", "db") is None
    assert rel.forget("HorizontalPodAutoscaler", gone("web")) == {"shop/api"}
    assert rel.hpa_for("shop", "api") is None


def test_several_hpas_on_one_deployment_answer_deterministically() -> None:
    rel = Relations()
    rel.observe("HorizontalPodAutoscaler", hpa("b", "web", 1, 4))
    rel.observe("HorizontalPodAutoscaler", hpa("a", "web", 2, 8))
    assert rel.hpa_for("shop", "web") == HpaRef(name="a", min_replicas=2, max_replicas=8)
    assert rel.forget("HorizontalPodAutoscaler", gone("a")) == {"shop/web"}
    assert rel.hpa_for("shop", "web") == HpaRef(name="b", min_replicas=1, max_replicas=4)


def test_the_current_revision_carries_its_replicasets_creation_time() -> None:
    rel = Relations()
    created = replicaset("web-2", "web", "2")
    meta = msgspec.structs.replace(created.metadata, creation_timestamp="2026-12-01T09:00:00Z")
    rel.observe("ReplicaSet", msgspec.structs.replace(created, metadata=meta))
    assert rel.current_revision("shop", "web") == RevisionRef(
        replicaset="web-2", number=2, created_at="2026-12-01T09:00:00Z"
    )


def test_current_revision_follows_the_highest_revision_number() -> None:
    rel = Relations()
    assert rel.observe("ReplicaSet", replicaset("web-1", "web", "1")) == {"shop/web"}
    assert rel.current_revision("shop", "web") == RevisionRef(replicaset="web-1", number=1)
    # A status change of the current ReplicaSet changes nothing indexed.
    assert rel.observe("ReplicaSet", replicaset("web-1", "web", "1")) == set()
    # Revision 10 beats 9 numerically, not as text.
    assert rel.observe("ReplicaSet", replicaset("web-10", "web", "10")) == {"shop/web"}
    assert rel.observe("ReplicaSet", replicaset("web-9", "web", "9")) == set()
    assert rel.current_revision("shop", "web") == RevisionRef(replicaset="web-10", number=10)
    # A rollback takes an old ReplicaSet's revision to the top.
    assert rel.observe("ReplicaSet", replicaset("web-1", "web", "11")) == {"shop/web"}
    assert rel.current_revision("shop", "web") == RevisionRef(replicaset="web-1", number=11)
    assert rel.replicasets_of("shop", "web") == ["web-1", "web-10", "web-9"]
    assert rel.deployment_of_replicaset("shop", "web-9") == "web"

    assert rel.forget("ReplicaSet", gone("web-9")) == set()
    assert rel.forget("ReplicaSet", gone("web-1")) == {"shop/web"}
    assert rel.current_revision("shop", "web") == RevisionRef(replicaset="web-10", number=10)
    assert rel.forget("ReplicaSet", gone("web-10")) == {"shop/web"}
    assert rel.current_revision("shop", "web") is None
    assert rel.replicasets_of("shop", "web") == []


def test_the_current_revision_is_read_from_an_index_among_many_replicasets() -> None:
    """Asked once per ReplicaSet of a list page: it must not read the whole namespace and
    sort it, and it still ranks unnumbered ReplicaSets below numbered ones, ties by name."""
    store = StateStore()
    rel = Relations(store)
    for d in range(30):
        for r in range(5):
            rel.observe("ReplicaSet", replicaset(f"app{d}-{r}", f"app{d}", str(r + 1)))
    rel.observe("ReplicaSet", replicaset("app7-x", "app7", None))
    rel.observe("ReplicaSet", replicaset("app7-z", "app7", "5"))
    assert rel.current_revision("shop", "app7") == RevisionRef(replicaset="app7-z", number=5)
    rel.observe("ReplicaSet", replicaset("lone-b", "lone", None))
    rel.observe("ReplicaSet", replicaset("lone-a", "lone", None))
    assert rel.current_revision("shop", "lone") == RevisionRef(replicaset="lone-b", number=0)

    plan = " ".join(
        str(step[-1]) for step in store.rows(f"EXPLAIN QUERY PLAN {CURRENT_REVISION}", ("s", "d"))
    )
    assert "replicasets_by_revision (namespace=? AND deployment=?)" in plan
    assert "TEMP B-TREE" not in plan


def test_replicasets_without_a_deployment_are_not_revisions() -> None:
    rel = Relations()
    assert rel.observe("ReplicaSet", replicaset("orphan", None, "1")) == set()
    assert rel.deployment_of_replicaset("shop", "orphan") is None
    # Adopted later: now it counts; released again: it no longer does.
    assert rel.observe("ReplicaSet", replicaset("orphan", "web", "1")) == {"shop/web"}
    assert rel.observe("ReplicaSet", replicaset("orphan", None, "1")) == {"shop/web"}
    assert rel.current_revision("shop", "web") is None
    # Without a revision annotation it still belongs to its Deployment, ranked lowest.
    rel.observe("ReplicaSet", replicaset("web-x", "web", None))
    rel.observe("ReplicaSet", replicaset("web-2", "web", "2"))
    assert rel.current_revision("shop", "web") == RevisionRef(replicaset="web-2", number=2)


def test_cronjob_of_job() -> None:
    rel = Relations()
    owned = decode(
        {
            "metadata": {
                "name": "nightly-28491230",
                "namespace": "shop",
                "ownerReferences": [
                    {"kind": "CronJob", "name": "nightly", "uid": "u", "controller": True}
                ],
            },
            "spec": {"template": {}},
        },
        Job,
    )
    plain = decode({"metadata": {"name": "once", "namespace": "shop"}}, Job)
    assert rel.observe("Job", owned) == set()
    assert rel.observe("Job", plain) == set()
    assert rel.cronjob_of_job("shop", "nightly-28491230") == "nightly"
    assert rel.cronjob_of_job("shop", "once") is None
    assert rel.forget("Job", gone("nightly-28491230")) == set()
    assert rel.cronjob_of_job("shop", "nightly-28491230") is None


def test_other_kinds_are_ignored_and_forgetting_is_complete() -> None:
    store = StateStore()
    rel = Relations(store)
    assert rel.observe("ConfigMap", gone("x")) == set()
    assert rel.forget("ConfigMap", gone("x")) == set()
    rel.observe("Deployment", deployment("web", {"app": "web"}))
    rel.forget("Deployment", gone("web"))
    # Its template is gone: a new Service selecting it affects no Deployment.
    assert rel.observe("Service", service("web", {"app": "web"})) == set()
    rel.forget("Service", gone("web"))
    rel.observe("HorizontalPodAutoscaler", hpa("web", "web", 1, 2))
    rel.forget("HorizontalPodAutoscaler", gone("web"))
    rel.observe("ReplicaSet", replicaset("web-1", "web", "1"))
    rel.forget("ReplicaSet", gone("web-1"))
    # No empty buckets are left behind by churn.
    # The current revisions remembered are a few at most, whatever the churn.
    kept = ("_lock", "_observers", "_store", "_currents")
    assert not any(vars(rel)[name] for name in vars(rel) if name not in kept)
    assert not any(store.rows(f"SELECT 1 FROM {table}") for table in RELATION_TABLES)


def test_a_new_term_starts_from_empty_indexes_in_a_store_that_outlived_the_last() -> None:
    store = StateStore()
    first = Relations(store)
    first.observe("ReplicaSet", replicaset("web-1", "web", "1"))
    first.observe("Deployment", deployment("web", {"app": "web"}))
    # Deleted while no agent watched: the next term must not find it in the store.
    second = Relations(store)
    assert second.current_revision("shop", "web") is None
    assert second.deployment_of_replicaset("shop", "web-1") is None
    assert second.observe("Service", service("web", {"app": "web"})) == set()


def _current_in_table(store: StateStore, deployment: str) -> RevisionRef | None:
    found = store.rows(CURRENT_REVISION, ("shop", deployment))
    if not found:
        return None
    ((name, number, created),) = found
    return RevisionRef(replicaset=str(name), number=int(number or 0), created_at=created)  # type: ignore[call-overload,arg-type]


def test_the_remembered_current_revision_always_says_what_the_table_says() -> None:
    """Current revisions are remembered for the Deployments asked last (and for those whose
    ReplicaSets were asked for): after every change (new, renumbered, adopted, orphaned and
    gone ReplicaSets, more Deployments than are remembered) each answer still equals the
    table's, and a change reports exactly the Deployments whose answer it changed."""
    rng = random.Random(26)
    store = StateStore()
    rel = Relations(store)
    deployments = [f"app{n}" for n in range(90)]
    for _ in range(3000):
        name = f"rs{rng.randrange(300)}"
        owned = store.rows(
            "SELECT deployment FROM replicasets WHERE namespace = 'shop' AND name = ?", (name,)
        )
        owner = rng.choice([*deployments, None])
        involved = {str(d) for d in (*(row[0] for row in owned), owner) if d is not None}
        before = {d: _current_in_table(store, d) for d in involved}
        if rng.random() < 0.2:
            affected = rel.forget("ReplicaSet", gone(name))
        else:
            revision = rng.choice([None, *(str(n) for n in range(1, 8))])
            affected = rel.observe("ReplicaSet", replicaset(name, owner, revision))
        assert affected == {
            f"shop/{d}" for d in involved if _current_in_table(store, d) != before[d]
        }
        for deployment in rng.sample(deployments, 3):
            if rng.random() < 0.3:
                rel.replicasets_of("shop", deployment)
            assert rel.current_revision("shop", deployment) == _current_in_table(store, deployment)


def test_a_rolled_back_store_is_asked_again_for_current_revisions(tmp_path: Path) -> None:
    """A full disk rolls the store's uncommitted writes back: what was remembered of them
    goes too."""
    store = StateStore(tmp_path / "state.sqlite")
    rel = Relations(store)
    store.commit()
    rel.observe("ReplicaSet", replicaset("web-1", "web", "1"))
    assert rel.current_revision("shop", "web") == RevisionRef(replicaset="web-1", number=1)
    (pages,) = store.rows("PRAGMA page_count")[0]
    store.execute(f"PRAGMA max_page_count = {pages}")  # the file may not grow: SQLITE_FULL
    with pytest.raises(sqlite3.OperationalError, match="full"):
        for number in range(500):
            rel.observe("ReplicaSet", replicaset(f"other-{number}-{'x' * 200}", "other", "1"))
    assert store.rolled_back
    assert rel.current_revision("shop", "web") is None
