"""The scaling role's small parts on their own: event ids, annotations, actions, ignore
globs, the local store, and the Kubernetes client's settings and error translation."""

from __future__ import annotations

import hashlib
import sqlite3
from datetime import UTC, datetime
from pathlib import Path

import msgspec
import pytest

from kube import errors, pages
from kube.api import KubeApi
from kube.cluster import KubeConfigError, load_target
from kube.globs import DEPLOYMENT, HPA, SCALED_KINDS, ResourceGlobs
from kube.workloads import decode_deployment, decode_hpa
from sandbox.kube import FakeKube
from scheduler import actions, events, kubeapi
from scheduler import annotations as notes
from scheduler.store import PendingRestore, Store
from shipper.records import ScalingEvent
from tests.scaling_harness import deployment, hpa, kube_client, namespace

NOW = datetime(2026, 12, 2, 9, tzinfo=UTC)


# --- event ids -----------------------------------------------------------------------------------


def test_event_ids_are_the_first_32_hex_digits_of_sha256_over_the_contracts_fields() -> None:
    assert (
        events.event_id("c-1", "t-1", "a-1", "2026-12-02T08:00:00Z", "apply", "4:20")
        == "e2743121c4ce2e227e5cb2651a85c684"
    )
    text = "c-1|t-1|a-1|2026-12-02T08:00:00Z|revert|"
    assert (
        events.event_id("c-1", "t-1", "a-1", "2026-12-02T08:00:00Z", "revert", "")
        == (hashlib.sha256(text.encode()).hexdigest()[:32])
    )


def _window(low: int, high: int, *, run_until: str) -> notes.Window:
    return notes.Window(
        template_id="t-1",
        action_id="a-1",
        template_name="",
        namespace="shop",
        deployment="web",
        min_replicas=low,
        max_replicas=high,
        window_start="2026-12-02T08:00:00Z",
        run_until=run_until,
        priority_up=0,
        priority_down=0,
        managed_hash="",
        originals=notes.Originals(
            provisional=False, replicas=None, min_replicas=None, max_replicas=None, spec=None
        ),
    )


def test_an_apply_id_changes_with_min_and_max_and_a_revert_id_never_does() -> None:
    def apply(low: int, high: int) -> str:
        return events.apply_event(
            cluster_id="c-1",
            window=_window(low, high, run_until="2026-12-02T18:00:00Z"),
            provisional=False,
            now=NOW,
        ).id

    assert apply(4, 20) == apply(4, 20) != apply(4, 30)
    reverts = {
        events.revert_event(
            cluster_id="c-1",
            window=_window(4, 20, run_until=""),
            reason=reason,
            now=NOW,
        ).id
        for reason in ("expired", "disabled", "overridden", "manual")
    }
    assert len(reverts) == 1


def test_a_template_error_id_holds_the_values_as_given_and_nulls_as_nothing() -> None:
    event = events.template_error(
        cluster_id="c-1",
        template_id="t-1",
        reason="invalid_template",
        cron="0 8 * * *",
        timezone=None,
        duration_minutes=0,
        message="duration_minutes must be positive, got 0",
        now=NOW,
    )
    assert (
        event.id
        == hashlib.sha256(b"c-1|t-1|||error|invalid_template:0 8 * * *||0").hexdigest()[:32]
    )
    assert (event.action_id, event.window_start, event.min_replicas) == (None, None, None)


# --- annotations -------------------------------------------------------------------------------


def test_unreadable_annotations_of_a_managed_hpa_still_parse_and_end_the_window() -> None:
    def read(annotations: dict[str, str]) -> notes.Window | None:
        obj = hpa()
        obj["metadata"]["annotations"] = annotations
        return notes.read_window(decode_hpa(msgspec.json.encode(obj)))

    managed = read(
        {
            notes.MANAGED: "true",
            notes.RUN_UNTIL: "tomorrow",
            notes.PRIORITY_DOWN: "high",
            notes.ORIGINAL_MAX: "x",
        }
    )
    assert managed is not None
    assert managed.ended(NOW)
    assert managed.priority_down == 0 and managed.kept.max_replicas is None
    assert read({notes.MANAGED: "yes"}) is None


def test_the_released_marker_keeps_the_newest_windows() -> None:
    annotations: dict[str, str] = {}
    assert notes.with_released(annotations, "t/a/w0") == "t/a/w0"
    for index in range(12):
        annotations[notes.RELEASED] = notes.with_released(annotations, f"t/a/w{index}")
    kept = notes.released(annotations)
    assert kept == [f"t/a/w{index}" for index in range(4, 12)]
    assert notes.with_released(annotations, "t/a/w5").split(",")[-1] == "t/a/w5"


# --- actions -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "problem"),
    [
        ({"min_replicas": 0}, "min_replicas must be at least 1, got 0"),
        ({"min_replicas": 5, "max_replicas": 4}, "max_replicas (4) is below min_replicas (5)"),
        ({"deployment": None}, "deployment is missing"),
        ({"namespace": ""}, "namespace is not a non-empty string"),
        ({"max_replicas": True}, "max_replicas is not a whole number"),
        ({"priority_up": "1"}, "priority_up is not a whole number"),
    ],
)
def test_invalid_actions_name_what_is_wrong(raw: dict, problem: str) -> None:
    base = {"id": "a-1", "namespace": "shop", "deployment": "web"}
    base |= {"min_replicas": 1, "max_replicas": 2} | raw
    parsed = actions.parse(base)
    assert isinstance(parsed, actions.InvalidAction)
    assert problem in parsed.message


def test_an_action_without_priorities_reads_them_as_zero() -> None:
    parsed = actions.parse(
        {
            "id": "a-1",
            "namespace": "shop",
            "deployment": "web",
            "min_replicas": 1,
            "max_replicas": 1,
        }
    )
    assert isinstance(parsed, actions.Action)
    assert (parsed.priority_up, parsed.priority_down) == (0, 0)
    assert isinstance(actions.parse(["not", "an", "object"]), actions.InvalidAction)


# --- ignore globs ------------------------------------------------------------------------------


def test_ignore_globs_match_deployments_and_hpas_by_namespace_and_name() -> None:
    rules = ResourceGlobs(
        ["deployment/kube-*/*", "hpa/legacy-*", "*/shop/canary", "pod/*"], kinds=SCALED_KINDS
    )
    assert rules.matches(DEPLOYMENT, "kube-system", "coredns")
    assert not rules.matches(DEPLOYMENT, "shop", "coredns")
    assert rules.matches(HPA, "any", "legacy-web")
    assert not rules.matches(DEPLOYMENT, "any", "legacy-web")
    assert rules.matches(DEPLOYMENT, "shop", "canary") and rules.matches(HPA, "shop", "canary")
    assert not rules.matches(DEPLOYMENT, "Shop", "canary")  # case-sensitive, as names are
    assert not ResourceGlobs(["pod/*"], kinds=SCALED_KINDS)
    with pytest.raises(ValueError, match="expected <kind>/<glob>"):
        ResourceGlobs(["deployment"])


# --- the local store -----------------------------------------------------------------------------


def noted(event_id: str) -> ScalingEvent:
    return ScalingEvent(
        id=event_id, type="error", template_id="t-1", occurred_at="2026-12-02T09:00:00Z"
    )


def test_the_store_keeps_ids_once_committed_and_pending_restores_at_once(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    store = Store(path)
    store.note_enqueued([noted("e-1")])
    assert store.enqueued("e-1")
    store.add_restore(PendingRestore("shop", "web", 3, None))
    store.close()  # without a commit: the id is not kept, the restore is

    store = Store(path)
    assert not store.enqueued("e-1")
    assert store.restores() == [PendingRestore("shop", "web", 3, None)]
    store.note_enqueued([noted("e-1"), noted("e-2")])
    store.commit()
    store.drop_restore("shop", "web")
    store.close()

    store = Store(path)
    assert store.enqueued("e-1") and store.enqueued("e-2")
    assert store.restores() == []
    store.close()


def test_a_corrupt_store_is_moved_aside_and_a_fresh_one_started(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    path.write_bytes(b"this is not a database" * 100)
    store = Store(path)
    assert not store.enqueued("e-1")
    store.close()
    assert len(list(tmp_path.glob("state.db.corrupt-*"))) == 1
    with sqlite3.connect(path) as db:
        assert db.execute("SELECT count(*) FROM enqueued").fetchone() == (0,)


# --- the Kubernetes client -----------------------------------------------------------------------


def test_the_client_reads_the_resolved_kubeconfig_and_does_not_retry_a_429(
    kube: FakeKube, kubeconfig: Path
) -> None:
    api = kubeapi.ScalingKube(KubeApi(load_target({}, kubeconfig=str(kubeconfig))))
    kube.create(namespace())
    kube.create(deployment())
    assert api.get_deployment("shop", "web").metadata.name == "web"
    kube.clear_requests()
    kube.fail_next(429, resource="deployments", retry_after=0)
    with pytest.raises(errors.KubeError) as caught:
        api.get_deployment("shop", "web")
    assert caught.value.status == 429
    assert [r.status for r in kube.requests] == [429]  # one request, no hidden retry


def test_the_client_names_a_kubeconfig_it_cannot_load(tmp_path: Path, kubeconfig: Path) -> None:
    copy = tmp_path / "config"
    copy.write_bytes(kubeconfig.read_bytes() + b"\n  : [unclosed")
    with pytest.raises(KubeConfigError, match="cannot load the cluster configuration"):
        load_target({}, kubeconfig=str(copy))


def test_kubernetes_errors_are_translated_into_one_tree(kube: FakeKube) -> None:
    api = kubeapi.ScalingKube(kube_client(kube))
    kube.create(namespace())
    with pytest.raises(errors.NotFound, match="get deployment shop/web: 404"):
        api.get_deployment("shop", "web")
    kube.create(deployment())
    stale = api.get_deployment("shop", "web").metadata.resource_version
    kube.patch("deployments", "shop", "web", {"spec": {"replicas": 3}})
    with pytest.raises(errors.Conflict):
        api.patch_deployment("shop", "web", {"metadata": {"resourceVersion": stale}})
    kube.forbid("deployments")
    with pytest.raises(errors.Forbidden):
        api.get_deployment("shop", "web")
    kube.allow("deployments")
    kube.fail_next(500, resource="deployments")
    with pytest.raises(errors.KubeError) as caught:
        api.get_deployment("shop", "web")
    assert type(caught.value) is errors.KubeError and caught.value.status == 500


def test_merge_patches_remove_keys_given_as_null(kube: FakeKube) -> None:
    api = kubeapi.ScalingKube(kube_client(kube))
    kube.create(namespace())
    kube.create(hpa())
    api.patch_hpa("shop", "web", {"metadata": {"annotations": {"team": None, "new": "1"}}})
    assert kube.get("hpa", "shop", "web")["metadata"]["annotations"] == {"new": "1"}
    assert kube.requests[-1].method == "PATCH"


def test_hpas_are_listed_across_pages_and_carry_their_type(
    kube: FakeKube, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(pages, "PAGE_SIZE", 2)
    api = kubeapi.ScalingKube(kube_client(kube))
    kube.create(namespace())
    kube.create(namespace("other"))
    for name in ("a", "b", "c"):
        kube.create(hpa(name, target=name))
    kube.create(hpa("d", target="d", ns="other"))
    kube.clear_requests()
    listed = api.list_hpas()
    assert sorted(h.metadata.name for h in listed) == ["a", "b", "c", "d"]
    assert [r.query.get("limit") for r in kube.requests] == ["2", "2"]
    # A listed item comes without its type; an Event about it still names it.
    api.record_event(listed[0], reason="Checked", message="listed")
    (event,) = kube.list("events")
    involved = event["involvedObject"]
    assert (involved["apiVersion"], involved["kind"]) == (
        "autoscaling/v2",
        "HorizontalPodAutoscaler",
    )
    assert [h.metadata.name for h in api.list_hpas("other")] == ["d"]


def test_a_delete_goes_through_only_for_the_very_hpa_that_was_read(kube: FakeKube) -> None:
    api = kubeapi.ScalingKube(kube_client(kube))
    kube.create(namespace())
    read = kube.create(hpa())["metadata"]
    kube.patch("horizontalpodautoscalers", "shop", "web", {"spec": {"maxReplicas": 6}})
    with pytest.raises(errors.Conflict):  # changed since the read
        api.delete_hpa("shop", "web", uid=read["uid"], resource_version=read["resourceVersion"])
    now = kube.get("hpa", "shop", "web")["metadata"]
    with pytest.raises(errors.Conflict):  # a namesake, not the object read
        api.delete_hpa("shop", "web", uid="another-uid", resource_version=now["resourceVersion"])
    api.delete_hpa("shop", "web", uid=now["uid"], resource_version=now["resourceVersion"])
    assert kube.list("horizontalpodautoscalers") == []
    assert kube.requests[-1].method == "DELETE"


def test_an_object_read_without_optional_fields_reads_as_the_apis_defaults() -> None:
    bare = {"metadata": {"name": "web", "namespace": "shop"}}
    deployment = decode_deployment(msgspec.json.encode(bare))
    assert deployment.spec.replicas == 1 and deployment.metadata.annotations == {}
    hpa = decode_hpa(msgspec.json.encode({**bare, "spec": {"maxReplicas": 5, "behavior": {}}}))
    assert (hpa.spec.min_replicas, hpa.spec.max_replicas) == (None, 5)
    assert not hpa.metadata.terminating
    # The whole spec is kept as sent, fields scaling never reads included.
    assert msgspec.json.decode(hpa.spec_json) == {"maxReplicas": 5, "behavior": {}}


def test_an_answer_that_is_not_the_object_asked_for_names_the_call(kube: FakeKube) -> None:
    api = kubeapi.ScalingKube(kube_client(kube))
    kube.create(namespace())
    kube.create(hpa())
    kube.patch("horizontalpodautoscalers", "shop", "web", {"spec": {"minReplicas": "two"}})
    with pytest.raises(errors.KubeError, match="get horizontalpodautoscaler shop/web: an answer"):
        api.get_hpa("shop", "web")
