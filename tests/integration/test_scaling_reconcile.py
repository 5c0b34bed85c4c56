"""The reconcile cycle against the fake Kubernetes API: applies, guards, reverts, crash
discipline and the events each step puts into a real outbox."""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import msgspec
import pytest
import structlog

from kube.api import KubeApi
from kube.cluster import KubeTarget
from kube.errors import Conflict, KubeError
from kube.workloads import Hpa
from sandbox.kube import FakeKube
from sandbox.platform import FakePlatform
from scheduler import annotations as notes
from scheduler import restores, view
from scheduler.events import event_id
from scheduler.kubeapi import Obj, ScalingKube
from scheduler.revertall import revert_all
from scheduler.store import Store
from scheduler.templates import MalformedTemplate, Template, decode_template
from shipper.client import ApiClient, ApiSettings
from shipper.outbox import Bounds, Outbox
from shipper.records import SCALING
from shipper.token import TokenSource
from tests.conftest import TOKEN
from tests.scaling_harness import (
    CLUSTER,
    NS,
    RUN_UNTIL,
    WINDOW,
    Harness,
    action,
    at,
    deployment,
    failing_replica_writes,
    hpa,
    make_harness,
    ours,
    template,
)

APPLY_4_20 = event_id(CLUSTER, "t-1", "a-1", WINDOW, "apply", "4:20")
REVERT = event_id(CLUSTER, "t-1", "a-1", WINDOW, "revert", "")


def types(events: list[dict[str, Any]]) -> list[tuple[str, str | None]]:
    return [(event["type"], event["reason"]) for event in events]


# --- apply and revert ------------------------------------------------------------------------


def test_a_pre_existing_hpa_gets_the_window_and_its_own_spec_back_when_the_window_ends(
    h: Harness,
) -> None:
    h.kube.create(deployment(replicas=3))
    h.kube.create(hpa(low=2, high=5))

    report = h.run(at(9))

    assert (report.applies, report.reverts, report.errors) == (1, 0, 0)
    scaled = h.hpa()
    assert (scaled["spec"]["minReplicas"], scaled["spec"]["maxReplicas"]) == (4, 20)
    assert scaled["spec"]["metrics"][0]["resource"]["name"] == "memory"  # untouched
    annotations = ours(scaled)
    assert annotations == {
        notes.MANAGED: "true",
        notes.TEMPLATE_ID: "t-1",
        notes.ACTION_ID: "a-1",
        notes.TEMPLATE_NAME: "black friday",
        notes.WINDOW_START: WINDOW,
        notes.RUN_UNTIL: RUN_UNTIL,
        notes.PRIORITY_UP: "1",
        notes.PRIORITY_DOWN: "1",
        notes.PROVISIONAL: "false",
        notes.ORIGINAL_SPEC: annotations[notes.ORIGINAL_SPEC],
        notes.ORIGINAL_REPLICAS: "3",
        notes.ORIGINAL_MIN: "2",
        notes.ORIGINAL_MAX: "5",
        notes.ORIGINAL_MANAGERS: "{}",  # made through the fake's Python side: no owner
        notes.MANAGED_HASH: notes.managed_hash("t-1", "a-1", WINDOW, 4, 20),
    }
    original = json.loads(annotations[notes.ORIGINAL_SPEC])
    assert (original["minReplicas"], original["maxReplicas"]) == (2, 5)
    assert original["metrics"] == hpa()["spec"]["metrics"]
    assert h.deployment()["spec"]["replicas"] == 4  # raised to the new minimum at once
    [applied] = h.kube_events("MooninScalingApplied")
    assert applied["involvedObject"]["kind"] == "HorizontalPodAutoscaler"
    assert applied["involvedObject"]["name"] == "web"
    assert "min 4, max 20" in applied["message"]
    [event] = h.events()
    assert event == {
        "id": APPLY_4_20,
        "type": "apply",
        "template_id": "t-1",
        "action_id": "a-1",
        "namespace": NS,
        "deployment": "web",
        "min_replicas": 4,
        "max_replicas": 20,
        "window_start": WINDOW,
        "run_until": RUN_UNTIL,
        "provisional": False,
        "reason": None,
        "message": None,
        "occurred_at": "2026-12-02T09:00:00.000Z",
        # The tool that deploys the target: none (made through the fake's Python side).
        "details": {"managed_by": {"tool": "unmanaged", "managers": []}},
    }

    report = h.run(at(18, 1))

    assert report.reverts == 1
    restored = h.hpa()
    assert (restored["spec"]["minReplicas"], restored["spec"]["maxReplicas"]) == (2, 5)
    assert ours(restored) == {}
    assert restored["metadata"]["annotations"] == {"team": "shop"}
    assert len(h.kube_events("MooninScalingReverted")) == 1
    [revert] = h.events()
    assert revert["id"] == REVERT
    assert (revert["type"], revert["reason"], revert["provisional"]) == ("revert", "expired", False)
    assert (revert["min_replicas"], revert["max_replicas"]) == (4, 20)


def test_a_pre_existing_hpa_whose_min_was_defaulted_gets_the_default_back(h: Harness) -> None:
    # The API server defaults an absent minReplicas to 1 (pkg/apis/autoscaling/v2
    # defaults.go), so the HPA never reads back without one.
    h.kube.create(deployment())
    h.kube.create(hpa(low=None, high=5))
    h.run(at(9))
    assert (ours(h.hpa())[notes.ORIGINAL_MIN], ours(h.hpa())[notes.ORIGINAL_MAX]) == ("1", "5")
    h.run(at(18, 1))
    assert (h.hpa()["spec"]["minReplicas"], h.hpa()["spec"]["maxReplicas"]) == (1, 5)
    assert ours(h.hpa()) == {}


def test_without_an_hpa_a_provisional_one_is_created_then_deleted_and_the_replicas_restored(
    h: Harness,
) -> None:
    h.kube.create(deployment(replicas=2))

    h.run(at(9))

    created = h.hpa()
    assert created["spec"]["scaleTargetRef"] == {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "name": "web",
    }
    assert (created["spec"]["minReplicas"], created["spec"]["maxReplicas"]) == (4, 20)
    assert ours(created)[notes.PROVISIONAL] == "true"
    assert ours(created)[notes.ORIGINAL_REPLICAS] == "2"
    assert notes.ORIGINAL_SPEC not in ours(created)
    assert h.deployment()["spec"]["replicas"] == 4
    [applied] = h.events()
    assert (applied["id"], applied["provisional"]) == (APPLY_4_20, True)

    h.kube.patch("deployments", NS, "web", {"spec": {"replicas": 9}})  # the HPA at work
    h.run(at(18, 1))

    assert h.kube.list("horizontalpodautoscalers") == []
    assert h.deployment()["spec"]["replicas"] == 2
    assert h.store.restores() == []
    [revert] = h.events()
    assert (revert["id"], revert["reason"], revert["provisional"]) == (REVERT, "expired", True)
    [reverted] = h.kube_events("MooninScalingReverted")
    assert reverted["involvedObject"]["kind"] == "Deployment"


def test_a_provisional_hpa_takes_another_name_when_the_deployments_name_is_taken(
    h: Harness,
) -> None:
    h.kube.create(deployment("web"))
    h.kube.create(deployment("api"))
    h.kube.create(hpa("web", target="api"))
    h.run(at(9))
    assert ours(h.hpa("web-moonin"))[notes.PROVISIONAL] == "true"
    assert ours(h.hpa("web")) == {}  # the other Deployment's HPA is not ours to touch


def test_a_deployment_without_replicas_counts_as_one(h: Harness) -> None:
    h.kube.create(deployment(replicas=None))
    h.run(at(9))
    assert ours(h.hpa())[notes.ORIGINAL_REPLICAS] == "1"
    h.run(at(18, 1))
    assert h.deployment()["spec"]["replicas"] == 1


# --- re-apply ----------------------------------------------------------------------------------


def test_reapplying_the_same_window_writes_nothing_and_enqueues_nothing(h: Harness) -> None:
    h.kube.create(deployment())
    h.kube.create(hpa())
    h.run(at(9))
    h.events()
    version = h.hpa()["metadata"]["resourceVersion"]
    h.kube.clear_requests()

    report = h.run(at(9, 30))

    assert (report.applies, report.reverts, report.errors) == (0, 0, 0)
    assert h.writes() == []
    assert h.events() == []
    assert h.hpa()["metadata"]["resourceVersion"] == version


def test_a_changed_action_mid_window_is_applied_again_with_a_new_apply_event(h: Harness) -> None:
    h.kube.create(deployment())
    h.kube.create(hpa(low=2, high=5))
    h.run(at(9))
    h.events()
    h.api.actions = {"t-1": [action(high=30)]}

    report = h.run(at(10))

    assert report.applies == 1
    assert h.hpa()["spec"]["maxReplicas"] == 30
    assert ours(h.hpa())[notes.ORIGINAL_MAX] == "5"  # the originals stay those before any window
    [event] = h.events()
    assert event["id"] == event_id(CLUSTER, "t-1", "a-1", WINDOW, "apply", "4:30")
    assert event["id"] != APPLY_4_20
    assert len(h.kube_events("MooninScalingApplied")) == 2
    h.run(at(18, 1))
    assert (h.hpa()["spec"]["minReplicas"], h.hpa()["spec"]["maxReplicas"]) == (2, 5)


def test_an_extended_run_until_updates_the_annotation_and_keeps_the_window_on(
    h: Harness,
) -> None:
    execution = {
        "id": "x-1",
        "status": "running",
        "started_at": "2026-12-02T08:30:00Z",
        "run_until": "2026-12-02T12:00:00Z",
    }
    h.api.templates = [template(cron=None, execution=execution)]
    h.kube.create(deployment())
    h.run(at(9))
    assert ours(h.hpa())[notes.RUN_UNTIL] == "2026-12-02T12:00:00Z"
    [applied] = h.events()
    assert applied["window_start"] == "2026-12-02T08:30:00Z"

    h.api.templates = [
        template(cron=None, execution={**execution, "run_until": "2026-12-02T14:00:00Z"})
    ]
    h.run(at(10))
    assert ours(h.hpa())[notes.RUN_UNTIL] == "2026-12-02T14:00:00Z"
    assert h.events() == []  # the same apply: same id, nothing new

    h.run(at(13))
    assert ours(h.hpa())[notes.MANAGED] == "true"
    h.run(at(14, 1))
    assert h.kube.list("horizontalpodautoscalers") == []
    assert types(h.events()) == [("revert", "expired")]


# --- guards ------------------------------------------------------------------------------------


def test_an_hpa_managed_by_another_active_template_is_not_taken_over(h: Harness) -> None:
    h.api.templates = [template("t-1"), template("t-2")]
    h.api.actions = {"t-1": [action("a-1", up=1)], "t-2": [action("a-2", high=50, up=2)]}
    h.kube.create(deployment())
    h.kube.create(hpa())

    h.run(at(9))

    assert ours(h.hpa())[notes.TEMPLATE_ID] == "t-1"
    assert h.hpa()["spec"]["maxReplicas"] == 20
    events = h.events()
    assert types(events) == [("apply", None), ("error", "conflict")]
    conflict = events[1]
    assert conflict["id"] == event_id(CLUSTER, "t-2", "a-2", WINDOW, "error", "conflict")
    assert (conflict["template_id"], conflict["action_id"]) == ("t-2", "a-2")
    assert "t-1" in conflict["message"]

    h.kube.clear_requests()
    report = h.run(at(10))
    assert report.errors == 0 and h.events() == []  # reported once per window
    assert h.writes() == []


def test_applies_follow_priority_up_across_templates(h: Harness) -> None:
    # The second template in the list comes first: its priority_up is lower.
    h.api.templates = [template("t-1"), template("t-2")]
    h.api.actions = {
        "t-1": [action("a-1", "web", up=5)],
        "t-2": [action("a-2", "web", high=50, up=1), action("a-3", "api", up=9)],
    }
    h.kube.create(deployment("web"))
    h.kube.create(deployment("api"))
    h.run(at(9))
    assert ours(h.hpa("web"))[notes.TEMPLATE_ID] == "t-2"
    events = h.events()
    assert [(e["type"], e["action_id"]) for e in events] == [
        ("apply", "a-2"),
        ("error", "a-1"),
        ("apply", "a-3"),
    ]


def test_reverts_follow_priority_down(h: Harness) -> None:
    h.api.actions = {
        "t-1": [
            action("a-1", "web", down=7),
            action("a-2", "api", down=2),
            action("a-3", "db", down=5),
        ]
    }
    for name in ("web", "api", "db"):
        h.kube.create(deployment(name))
    h.run(at(9))
    h.events()
    h.run(at(18, 1))
    assert [(e["type"], e["action_id"]) for e in h.events()] == [
        ("revert", "a-2"),
        ("revert", "a-3"),
        ("revert", "a-1"),
    ]


def test_a_deployment_annotated_ignore_is_reported_once_per_window_and_never_touched(
    h: Harness,
) -> None:
    h.kube.create(deployment(annotations={notes.IGNORE: "true"}))
    h.run(at(9))
    h.run(at(10))
    [ignored] = h.events()
    assert ignored["id"] == event_id(CLUSTER, "t-1", "a-1", WINDOW, "error", "ignored")
    assert (ignored["type"], ignored["reason"]) == ("error", "ignored")
    assert h.kube.list("horizontalpodautoscalers") == []
    assert h.deployment()["spec"]["replicas"] == 2

    h.run(at(9, days=1))  # the next window is reported again
    [again] = h.events()
    assert again["window_start"] == "2026-12-03T08:00:00Z"


@pytest.mark.parametrize(
    ("globs", "ignored"),
    [
        (["deployment/shop/we*"], True),
        (["deployment/w?b"], True),
        (["*/shop/web"], True),
        (["hpa/*/web"], True),
        (["horizontalpodautoscaler/shop/*"], True),
        (["deployment/other/*", "pod/*", "namespace/shop"], False),
    ],
)
def test_ignore_resources_globs_keep_deployments_and_hpas_out(
    h: Harness, globs: list[str], ignored: bool
) -> None:
    h.kube.create(deployment())
    h.kube.create(hpa())
    h.reconciler = h.make_reconciler(ignore=globs)
    h.run(at(9))
    h.run(at(9, 30))
    if ignored:
        assert types(h.events()) == [("error", "ignored")]
        assert ours(h.hpa()) == {}
    else:
        assert types(h.events()) == [("apply", None)]


def test_a_missing_deployment_is_reported_once_and_applied_when_it_appears(h: Harness) -> None:
    h.run(at(9))
    h.run(at(9, 30))
    [missing] = h.events()
    assert missing["reason"] == "deployment_not_found"
    assert (missing["namespace"], missing["deployment"]) == (NS, "web")
    h.kube.create(deployment())
    h.run(at(10))
    assert types(h.events()) == [("apply", None)]


def test_a_forbidden_namespace_is_reported_and_the_other_actions_still_apply(h: Harness) -> None:
    h.api.actions = {"t-1": [action("a-1", "web", ns="locked", up=1), action("a-2", "web", up=2)]}
    h.kube.create(deployment(ns="locked"))
    h.kube.create(deployment())
    h.kube.fail_next(403, 1, path_prefix="/apis/apps/v1/namespaces/locked/")
    h.run(at(9))
    events = h.events()
    assert types(events) == [("error", "forbidden"), ("apply", None)]
    assert events[0]["id"] == event_id(CLUSTER, "t-1", "a-1", WINDOW, "error", "forbidden")
    assert events[0]["message"].startswith(
        'get deployment locked/web: forbidden: cannot get resource "deployments" in API group '
        '"apps" in the namespace "locked" (403 '
    )


def test_a_forbidden_hpa_patch_fails_that_action_alone_and_the_other_template_runs_its_window(
    h: Harness,
) -> None:
    h.api.templates = [template("t-1"), template("t-2", name="cyber monday")]
    h.api.actions = {"t-1": [action("a-1", ns="locked")], "t-2": [action("a-2")]}
    for ns in ("locked", NS):
        h.kube.create(deployment(ns=ns))
        h.kube.create(hpa(ns=ns))
    prefix = "/apis/autoscaling/v2/namespaces/locked/"
    h.kube.fail_next(403, 1000, path_prefix=prefix, verb="patch")
    with structlog.testing.capture_logs() as logs:
        h.run(at(9))
        h.run(at(9, 30))  # tried again, reported once per window

    events = h.events()
    assert [(e["type"], e["reason"], e["template_id"]) for e in events] == [
        ("error", "forbidden", "t-1"),
        ("apply", None, "t-2"),
    ]
    assert (events[0]["action_id"], events[0]["namespace"]) == ("a-1", "locked")
    missing = (
        'cannot patch resource "horizontalpodautoscalers" in API group "autoscaling" '
        'in the namespace "locked"'
    )
    assert missing in events[0]["message"]
    said = [e for e in logs if e["event"] == "scaling_action_error"]
    assert len(said) == 1 and missing in said[0]["message"]
    assert ours(h.hpa(ns="locked")) == {}
    assert h.hpa()["spec"]["minReplicas"] == 4

    h.run(at(18, 1))
    assert [(e["type"], e["template_id"]) for e in h.events()] == [("revert", "t-2")]
    assert (h.hpa()["spec"]["minReplicas"], ours(h.hpa())) == (2, {})


def test_forbidden_kubernetes_events_cost_neither_the_apply_nor_the_revert(h: Harness) -> None:
    h.kube.create(deployment())
    h.kube.create(hpa())
    h.kube.forbid("events")
    with structlog.testing.capture_logs() as logs:
        report = h.run(at(9))
        assert report.applies == 1
        assert h.hpa()["spec"]["minReplicas"] == 4
        assert [e["id"] for e in h.events()] == [APPLY_4_20]
        report = h.run(at(18, 1))
        assert report.reverts == 1
        assert [e["id"] for e in h.events()] == [REVERT]
    assert h.hpa()["spec"]["minReplicas"] == 2
    assert h.kube_events() == []
    missing = 'forbidden: cannot create resource "events" in API group "" in the namespace "shop"'
    said = [(e["event"], e["permission"]) for e in logs if e["event"] == "kube_event_forbidden"]
    assert said == [("kube_event_forbidden", missing)] * 2
    assert h.reconciler.reporter.snapshot().counters["kube_events_forbidden"] == 2


def test_a_forbidden_cluster_wide_hpa_list_names_the_permission_and_applies_go_on(
    h: Harness,
) -> None:
    h.kube.create(deployment())
    h.kube.create(hpa())
    h.kube.fail_next(403, 1000, path_prefix="/apis/autoscaling/v2/horizontalpodautoscalers")
    with structlog.testing.capture_logs() as logs:
        first = h.run(at(9))
        second = h.run(at(9, 30))
    assert (first.applies, first.kube_reachable, second.kube_reachable) == (1, False, False)
    assert [e["id"] for e in h.events()] == [APPLY_4_20]
    health = h.reconciler.reporter.health
    assert health.reason == (
        'kubernetes: forbidden: cannot list resource "horizontalpodautoscalers" in API group '
        '"autoscaling" at the cluster scope: reverts are waiting'
    )
    assert health.unready
    # One line for the change, not one per cycle.
    said = [e for e in logs if e["event"] == "scaling_hpa_list_failed"]
    assert [e["log_level"] for e in said] == ["warning", "debug"]

    h.kube.clear_faults()
    h.run(at(18, 1))
    assert [e["id"] for e in h.events()] == [REVERT]
    assert h.reconciler.reporter.health.ok


def test_invalid_actions_are_reported_and_the_valid_ones_still_apply(h: Harness) -> None:
    h.api.actions = {
        "t-1": [
            action("a-zero", low=0),
            action("a-upside-down", low=9, high=3),
            {"id": "a-partial", "namespace": NS, "min_replicas": 1, "max_replicas": 2},
            action("a-1"),
        ]
    }
    h.kube.create(deployment())
    h.run(at(9))
    h.run(at(9, 30))
    events = h.events()
    assert [(e["type"], e["reason"], e["action_id"]) for e in events] == [
        ("error", "invalid_action", "a-zero"),
        ("error", "invalid_action", "a-upside-down"),
        ("error", "invalid_action", "a-partial"),
        ("apply", None, "a-1"),
    ]
    assert "min_replicas must be at least 1" in events[0]["message"]
    assert "below min_replicas" in events[1]["message"]
    assert "deployment is missing" in events[2]["message"]


# --- invalid templates -------------------------------------------------------------------------


def test_an_invalid_template_is_reported_once_per_distinct_invalid_value(h: Harness) -> None:
    h.api.templates = [template(cron="61 8 * * *")]
    h.run(at(9))
    h.run(at(9, 30))
    [error] = h.events()
    assert error["id"] == "6e0cf4034ac25523597c9af5ca525ac1"  # sha256, computed by hand
    assert error["id"] == event_id(
        CLUSTER, "t-1", None, None, "error", "invalid_cron:61 8 * * *|UTC|600"
    )
    assert (error["type"], error["reason"]) == ("error", "invalid_cron")
    assert error["action_id"] is None and error["window_start"] is None
    assert error["namespace"] is None and error["min_replicas"] is None
    assert "minute" in error["message"]

    h.api.templates = [template(cron="0 8 * * *", timezone="Mars/Olympus")]
    h.run(at(10))
    h.api.templates = [template(cron="62 8 * * *")]  # still invalid, another value
    h.run(at(10, 30))
    h.run(at(11))
    assert types(h.events()) == [("error", "invalid_timezone"), ("error", "invalid_cron")]

    h.api.templates = [template(enabled="yes")]  # malformed: reported with what was sent
    h.run(at(11, 30))
    [malformed] = h.events()
    assert malformed["reason"] == "invalid_template"
    assert malformed["id"] == event_id(
        CLUSTER, "t-1", None, None, "error", "invalid_template:0 8 * * *|UTC|600"
    )


def test_a_template_that_turns_invalid_reverts_its_windows_as_disabled(h: Harness) -> None:
    h.kube.create(deployment())
    h.run(at(9))
    h.events()
    h.api.templates = [template(duration_minutes=0)]
    h.run(at(10))
    assert types(h.events()) == [("error", "invalid_template"), ("revert", "disabled")]


# --- reverts for other reasons -----------------------------------------------------------------


def test_an_hpa_changed_by_someone_else_is_released_as_overridden_and_not_applied_again(
    h: Harness,
) -> None:
    h.kube.create(deployment())
    h.kube.create(hpa(low=2, high=5))
    h.run(at(9))
    h.events()
    h.kube.patch("horizontalpodautoscalers", NS, "web", {"spec": {"minReplicas": 7}})

    report = h.run(at(10))

    assert report.reverts == 1
    left = h.hpa()
    assert (left["spec"]["minReplicas"], left["spec"]["maxReplicas"]) == (7, 20)
    assert ours(left) == {notes.RELEASED: f"t-1/a-1/{WINDOW}"}
    [revert] = h.events()
    assert (revert["id"], revert["reason"]) == (REVERT, "overridden")
    assert revert["min_replicas"] is None and "7:20" in revert["message"]

    h.kube.clear_requests()
    with structlog.testing.capture_logs() as logs:
        h.run(at(11))
        h.run(at(12))
    assert h.writes() == [] and h.events() == []  # the same window stays released
    skipped = [line for line in logs if line["event"] == "scaling_window_released"]
    assert [(line["action"], line["window_start"]) for line in skipped] == [("a-1", WINDOW)]

    h.run(at(9, days=1))  # the next window applies, on top of what they set
    again = h.hpa()
    assert (again["spec"]["minReplicas"], again["spec"]["maxReplicas"]) == (4, 20)
    assert (ours(again)[notes.ORIGINAL_MIN], ours(again)[notes.ORIGINAL_MAX]) == ("7", "20")
    assert types(h.events()) == [("apply", None)]


@pytest.mark.parametrize(
    "change",
    ["disabled", "missing", "cancelled", "finished", "action removed"],
)
def test_a_window_whose_template_stops_is_reverted_as_disabled(h: Harness, change: str) -> None:
    execution = {"id": "x-1", "status": "running", "started_at": "2026-12-02T08:30:00Z"}
    h.api.templates = [template(cron=None, execution=execution)]
    h.kube.create(deployment())
    h.kube.create(hpa())
    h.run(at(9))
    h.events()
    if change == "disabled":
        h.api.templates = [template(cron=None, execution=execution, enabled=False)]
    elif change == "missing":
        h.api.templates = []
    elif change == "action removed":
        h.api.actions = {"t-1": []}
    else:
        h.api.templates = [template(cron=None, execution={**execution, "status": change})]

    h.run(at(10))

    [revert] = h.events()
    assert (revert["type"], revert["reason"], revert["id"]) == (
        "revert",
        "disabled",
        event_id(CLUSTER, "t-1", "a-1", "2026-12-02T08:30:00Z", "revert", ""),
    )
    assert ours(h.hpa()) == {}
    assert h.hpa()["spec"]["maxReplicas"] == 5


def test_a_window_cut_short_by_valid_until_is_reverted_as_expired(h: Harness) -> None:
    h.kube.create(deployment())
    h.run(at(9))
    h.events()
    h.api.templates = [template(valid_until="2026-12-02T09:30:00Z")]
    h.run(at(10))
    assert types(h.events()) == [("revert", "expired")]


def test_windows_that_follow_each_other_hand_the_hpa_over_keeping_the_originals(
    h: Harness,
) -> None:
    h.api.templates = [
        template("t-1", duration_minutes=120),  # 08:00-10:00
        template("t-2", cron="0 10 * * *", duration_minutes=120),  # 10:00-12:00
    ]
    h.api.actions = {"t-1": [action("a-1", high=20)], "t-2": [action("a-2", high=30)]}
    h.kube.create(deployment())
    h.kube.create(hpa(low=2, high=5))
    h.run(at(9))
    h.events()

    h.run(at(10, 1))

    taken = h.hpa()
    assert (ours(taken)[notes.TEMPLATE_ID], taken["spec"]["maxReplicas"]) == ("t-2", 30)
    assert (ours(taken)[notes.ORIGINAL_MIN], ours(taken)[notes.ORIGINAL_MAX]) == ("2", "5")
    events = h.events()
    assert [(e["type"], e["template_id"], e["reason"]) for e in events] == [
        ("revert", "t-1", "expired"),
        ("apply", "t-2", None),
    ]
    h.run(at(12, 1))
    assert (h.hpa()["spec"]["minReplicas"], h.hpa()["spec"]["maxReplicas"]) == (2, 5)
    assert types(h.events()) == [("revert", "expired")]


# --- Moonin down, outbox full ------------------------------------------------------------------


def test_while_moonin_is_down_nothing_new_is_applied_but_expired_windows_are_reverted(
    h: Harness,
) -> None:
    h.api.templates = [template("t-1"), template("t-2", duration_minutes=120)]
    h.api.actions = {"t-1": [action("a-1", "web")], "t-2": [action("a-2", "api")]}
    h.kube.create(deployment("web"))
    h.kube.create(deployment("api"))
    h.run(at(9))
    h.events()
    h.api.down = True
    h.api.actions["t-1"].append(action("a-3", "db"))
    h.kube.create(deployment("db"))

    report = h.run(at(10, 1))

    assert report.moonin_reachable is False
    assert h.reconciler.reporter.health.ok is False
    assert [(e["type"], e["action_id"], e["reason"]) for e in h.events()] == [
        ("revert", "a-2", "expired")
    ]
    assert [x["metadata"]["name"] for x in h.kube.list("horizontalpodautoscalers")] == ["web"]
    assert h.deployment("api")["spec"]["replicas"] == 2

    h.api.down = False
    h.run(at(10, 2))
    assert h.reconciler.reporter.health.ok is True
    assert [(e["type"], e["action_id"]) for e in h.events()] == [("apply", "a-3")]


def test_while_the_outbox_is_at_its_bound_nothing_new_is_applied_but_reverts_go_on(
    kube: FakeKube, tmp_path: Path
) -> None:
    h = make_harness(kube, tmp_path, bounds=Bounds(max_records=1))
    try:
        h.api.templates = [template("t-1"), template("t-2", duration_minutes=120)]
        h.api.actions = {"t-1": [action("a-1", "web")]}
        h.kube.create(deployment("web"))
        h.kube.create(deployment("api"))
        h.run(at(9))  # one apply event: the stream is now at its bound
        h.api.actions["t-2"] = [action("a-2", "api")]
        h.run(at(9, 30))
        assert [x["metadata"]["name"] for x in h.kube.list("horizontalpodautoscalers")] == ["web"]
        assert h.reconciler.reporter.health.ok is False
        h.run(at(18, 1))
        assert h.kube.list("horizontalpodautoscalers") == []
    finally:
        h.close()


def test_templates_come_from_the_platform_and_an_unreachable_platform_still_lets_windows_end(
    kube: FakeKube, tmp_path: Path, platform: FakePlatform
) -> None:
    h = make_harness(kube, tmp_path)
    client = ApiClient(
        base_url=platform.url,
        project_id="p-1",
        cluster_id=CLUSTER,
        token=TokenSource(TOKEN),
        settings=ApiSettings(insecure_http=True, read_timeout_seconds=2.0),
    )
    try:
        platform.set_templates([template()])
        platform.set_actions("t-1", [action()])
        h.reconciler = h.make_reconciler(api=client)
        h.kube.create(deployment())
        platform.set_templates([template(), template("t-bad", cron="* * *")])
        platform.set_actions("t-1", [action(), action("a-2", "missing", low=3, high=2)])
        h.run(at(9))
        events = h.events()
        assert [e["type"] for e in events] == ["error", "error", "apply"]
        # The platform accepts each of them as the contract describes.
        client.post_events("batch-1", [msgspec.json.encode(e) for e in events])
        assert set(platform.events()) == {e["id"] for e in events}
        platform.down()
        report = h.run(at(18, 1))
        assert report.moonin_reachable is False
        assert h.kube.list("horizontalpodautoscalers") == []
        assert types(h.events()) == [("revert", "expired")]
    finally:
        client.close()
        h.close()


# --- conflicts and crash discipline -------------------------------------------------------------


def test_a_409_on_the_patch_loses_nothing_and_the_next_cycle_applies(h: Harness) -> None:
    h.kube.create(deployment())
    h.kube.create(hpa(low=2, high=5))
    h.kube.fail_next(409, resource="horizontalpodautoscalers", verb="patch")

    report = h.run(at(9))

    assert (report.applies, report.conflicts) == (0, 1)
    assert h.hpa()["spec"]["minReplicas"] == 2 and ours(h.hpa()) == {}
    assert h.events() == []
    h.run(at(9, 1))
    assert h.hpa()["spec"]["minReplicas"] == 4
    assert [e["id"] for e in h.events()] == [APPLY_4_20]


class ChangesBeforeTheWrite(ScalingKube):
    """Someone else edits the HPA between the reconciler's read and its write, once."""

    def __init__(self, kube: FakeKube, inner: ScalingKube) -> None:
        super().__init__(inner.api)
        self.fake = kube
        self.armed = True

    def _someone_writes(self, namespace: str, name: str) -> None:
        if self.armed:
            self.armed = False
            self.fake.patch(
                "horizontalpodautoscalers", namespace, name, {"metadata": {"labels": {"x": "1"}}}
            )

    def apply_hpa(self, namespace: str, name: str, config: Obj) -> Hpa:
        self._someone_writes(namespace, name)
        return super().apply_hpa(namespace, name, config)

    def patch_hpa(self, namespace: str, name: str, patch: Obj) -> Hpa:
        self._someone_writes(namespace, name)
        return super().patch_hpa(namespace, name, patch)


def test_an_hpa_changed_between_read_and_write_is_not_overwritten(h: Harness) -> None:
    h.kube.create(deployment())
    h.kube.create(hpa(low=2, high=5))
    h.reconciler = h.make_reconciler(kube=ChangesBeforeTheWrite(h.kube, h.kube_api))
    assert h.run(at(9)).conflicts == 1
    assert h.hpa()["metadata"]["labels"] == {"x": "1"} and ours(h.hpa()) == {}
    h.run(at(9, 1))
    assert h.hpa()["metadata"]["labels"] == {"x": "1"}
    assert h.hpa()["spec"]["minReplicas"] == 4


def test_an_apply_event_the_store_does_not_know_is_enqueued_again(
    h: Harness, tmp_path: Path
) -> None:
    h.kube.create(deployment())
    h.run(at(9))
    assert [e["id"] for e in h.events()] == [APPLY_4_20]
    # A crash after the write, before the event was noted: a store without the id.
    forgetful = Store(tmp_path / "other-state.db")
    try:
        h.reconciler = h.make_reconciler(store=forgetful)
        h.run(at(9, 1))
        assert [e["id"] for e in h.events()] == [APPLY_4_20]
        h.run(at(9, 2))
        assert h.events() == []
    finally:
        forgetful.close()


def test_the_store_remembers_enqueued_events_across_a_restart(h: Harness) -> None:
    h.kube.create(deployment())
    h.run(at(9))
    h.events()
    h.store.close()
    h.store = Store(h.store.path)
    h.reconciler = h.make_reconciler()
    h.run(at(9, 1))
    assert h.events() == []


def test_a_revert_event_is_enqueued_before_the_write_and_a_failed_revert_is_retried(
    h: Harness,
) -> None:
    h.kube.create(deployment())
    h.kube.create(hpa(low=2, high=5))
    h.run(at(9))
    h.events()
    h.kube.fail_next(500, resource="horizontalpodautoscalers", verb="patch")

    report = h.run(at(18, 1))

    assert report.failures == 1
    assert ours(h.hpa())[notes.MANAGED] == "true"  # not reverted yet...
    assert [e["id"] for e in h.events()] == [REVERT]  # ...but its event is already queued

    h.run(at(18, 2))
    assert ours(h.hpa()) == {} and h.hpa()["spec"]["minReplicas"] == 2
    assert h.events() == []  # the retry makes no second event


def test_a_restore_that_meets_the_deployment_controllers_write_reads_again_and_goes_through(
    h: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    h.kube.create(deployment(replicas=2))
    h.run(at(9))
    h.events()
    read = h.kube_api.get_deployment
    raced: list[str] = []

    def read_then_the_controller_writes(*args: Any, **kwargs: Any) -> Any:
        found = read(*args, **kwargs)
        if len(raced) < 2:  # twice: the third read is the last the restore makes
            raced.append(found.metadata.resource_version)
            h.kube.patch(
                "deployments", NS, "web", {"metadata": {"labels": {"seen": str(len(raced))}}}
            )
        return found

    monkeypatch.setattr(h.kube_api, "get_deployment", read_then_the_controller_writes)
    h.run(at(18, 1))
    assert len(raced) == 2
    assert h.kube.list("horizontalpodautoscalers") == []
    assert h.deployment()["spec"]["replicas"] == 2  # in this cycle, not the next
    assert h.store.restores() == []
    assert [e["id"] for e in h.events()] == [REVERT]


def test_a_failed_delete_of_a_provisional_hpa_is_retried_without_touching_replicas(
    h: Harness,
) -> None:
    h.kube.create(deployment(replicas=2))
    h.run(at(9))
    h.events()
    h.kube.fail_next(500, resource="horizontalpodautoscalers", verb="delete")
    h.run(at(18, 1))
    assert ours(h.hpa())[notes.MANAGED] == "true"
    assert h.deployment()["spec"]["replicas"] == 4  # not restored under a live HPA
    assert h.store.restores() == []
    assert [e["id"] for e in h.events()] == [REVERT]
    h.run(at(18, 2))
    assert h.kube.list("horizontalpodautoscalers") == []
    assert h.deployment()["spec"]["replicas"] == 2
    assert h.events() == []


def test_a_delete_that_went_through_but_failed_to_answer_still_restores_the_replicas(
    h: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    h.kube.create(deployment(replicas=2))
    h.run(at(9))
    delete = h.kube_api.delete_hpa

    def deleted_then_timed_out(*args: Any, **kwargs: Any) -> None:
        delete(*args, **kwargs)
        raise KubeError("delete horizontalpodautoscaler shop/web: read timed out", status=None)

    monkeypatch.setattr(h.kube_api, "delete_hpa", deleted_then_timed_out)
    h.run(at(18, 1))
    # The journal entry outlived the failed call; this cycle saw the HPA gone and restored.
    assert h.kube.list("horizontalpodautoscalers") == []
    assert h.deployment()["spec"]["replicas"] == 2
    assert h.store.restores() == []


def test_replicas_left_unrestored_after_the_delete_are_restored_by_the_next_cycle(
    h: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    h.kube.create(deployment(replicas=2))
    h.run(at(9))
    h.events()
    # Every attempt of the revert's restore and of the same cycle's retry of it meets a 409.
    conflict = functools.partial(Conflict, "patch deployment shop/web: 409", status=409)
    conflicts = 2 * restores.RESTORE_ATTEMPTS
    monkeypatch.setattr(
        h.kube_api, "patch_deployment", failing_replica_writes(h.kube_api, conflict, conflicts)
    )
    h.run(at(18, 1))
    assert h.kube.list("horizontalpodautoscalers") == []
    assert h.deployment()["spec"]["replicas"] == 4
    [pending] = h.store.restores()
    assert (pending.namespace, pending.deployment, pending.replicas) == (NS, "web", 2)
    h.run(at(18, 2))
    assert h.deployment()["spec"]["replicas"] == 2
    assert h.store.restores() == []
    assert [e["reason"] for e in h.events()] == ["expired"]


# --- revert-all ----------------------------------------------------------------------------------


def test_revert_all_reverts_every_managed_hpa_and_the_same_windows_are_not_applied_again(
    h: Harness,
) -> None:
    h.api.actions = {"t-1": [action("a-1", "web"), action("a-2", "api")]}
    h.kube.create(deployment("web"))
    h.kube.create(hpa("web", low=2, high=5))
    h.kube.create(deployment("api", replicas=3))
    h.run(at(9))
    h.events()

    report = revert_all(
        kube=h.kube_api, outbox=h.stream, store=h.store, cluster_id=CLUSTER, now=at(10)
    )

    assert report.ok and sorted(report.reverted) == [f"{NS}/api", f"{NS}/web"]
    assert (h.hpa()["spec"]["minReplicas"], h.hpa()["spec"]["maxReplicas"]) == (2, 5)
    assert ours(h.hpa()) == {notes.RELEASED: f"t-1/a-1/{WINDOW}"}
    assert [x["metadata"]["name"] for x in h.kube.list("horizontalpodautoscalers")] == ["web"]
    assert h.deployment("api")["spec"]["replicas"] == 3
    assert ours(h.deployment("api")) == {notes.RELEASED: f"t-1/a-2/{WINDOW}"}
    assert sorted((e["type"], e["reason"]) for e in h.events()) == [("revert", "manual")] * 2

    h.run(at(10, 1))
    assert h.events() == []
    assert [x["metadata"]["name"] for x in h.kube.list("horizontalpodautoscalers")] == ["web"]


def test_revert_all_retries_a_409_at_once(h: Harness) -> None:
    h.kube.create(deployment())
    h.kube.create(hpa(low=2, high=5))
    h.run(at(9))
    h.kube.fail_next(409, resource="horizontalpodautoscalers", verb="patch")
    report = revert_all(kube=h.kube_api, outbox=h.stream, store=h.store, cluster_id=CLUSTER)
    assert report.ok and report.reverted == [f"{NS}/web"]
    assert h.hpa()["spec"]["minReplicas"] == 2


def test_revert_all_reports_a_forbidden_revert_by_its_permission_and_reverts_the_rest(
    h: Harness,
) -> None:
    h.api.actions = {"t-1": [action("a-1", ns="locked"), action("a-2")]}
    for ns in ("locked", NS):
        h.kube.create(deployment(ns=ns))
        h.kube.create(hpa(ns=ns))
    h.run(at(9))
    h.events()
    h.kube.fail_next(403, 10, path_prefix="/apis/autoscaling/v2/namespaces/locked/", verb="patch")
    report = revert_all(kube=h.kube_api, outbox=h.stream, store=h.store, cluster_id=CLUSTER)
    assert report.reverted == [f"{NS}/web"]
    assert list(report.failed) == ["locked/web"]
    assert (
        'cannot patch resource "horizontalpodautoscalers" in API group "autoscaling" '
        'in the namespace "locked"'
    ) in report.failed["locked/web"]
    assert ours(h.hpa(ns="locked"))[notes.MANAGED] == "true"
    assert set(ours(h.hpa())) == {notes.RELEASED}  # reverted, this window marked released
    assert h.hpa()["spec"]["minReplicas"] == 2


def test_an_unreachable_kubernetes_api_fails_nothing_but_the_cycles_health(h: Harness) -> None:
    nowhere = ScalingKube(
        KubeApi(KubeTarget(server="http://127.0.0.1:1", verify=False, token=lambda: None))
    )
    h.reconciler = h.make_reconciler(kube=nowhere)
    report = h.run(at(9))
    assert (report.kube_reachable, report.failures, report.applies) == (False, 1, 0)
    reason = "kubernetes: cannot list HPAs: reverts are waiting"
    assert h.reconciler.reporter.health.reason == reason
    assert h.events() == []


def test_a_damaged_scaling_queue_gets_the_apply_events_of_open_windows_again(
    kube: FakeKube, tmp_path: Path
) -> None:
    h = make_harness(kube, tmp_path)
    h.api.templates = [template()]
    h.api.actions = {"t-1": [action()]}
    h.kube.create(deployment(replicas=3))
    h.kube.create(hpa(low=2, high=5))
    h.run(at(9))
    assert [e["id"] for e in h.events()] == [APPLY_4_20]
    h.run(at(10))
    assert h.events() == []  # the store knows the apply event is enqueued
    h.outbox.close()

    (tmp_path / "queue" / "scaling.db").write_bytes(b"garbage" * 1000)
    h.outbox = Outbox(tmp_path / "queue", streams=[SCALING])  # quarantines the file
    h.reconciler = h.make_reconciler()
    assert h.stream.resync_needed
    h.run(at(11))
    assert [e["id"] for e in h.events()] == [APPLY_4_20]
    assert not h.stream.resync_needed  # handled: no alert firing forever
    h.close()


def test_every_write_names_the_agent_as_its_field_manager(h: Harness) -> None:
    h.kube.create(deployment(name="solo", replicas=1))  # no HPA: one is created
    h.kube.create(hpa(low=2, high=5))
    h.kube.create(deployment(replicas=3))
    h.api.actions = {"t-1": [action(), action("a-2", "solo")]}
    h.kube.clear_requests()
    h.run(at(9))
    writes = [r for r in h.kube.requests if r.method in ("POST", "PATCH")]
    assert {r.method for r in writes} == {"POST", "PATCH"}
    assert all(r.query.get("fieldManager") == "moonin-agent" for r in writes)


# --- bad data in one place does not stop the rest ----------------------------------------------


def _applied_on_a_pre_existing_hpa(h: Harness) -> None:
    h.kube.create(deployment(replicas=3))
    h.kube.create(hpa(low=2, high=5))
    h.run(at(9))
    h.events()


@pytest.mark.parametrize(
    ("bad", "reported"),
    [
        pytest.param(
            template("t-bad", cron="0 0 * * " + "1" * 5000),
            [("error", "invalid_cron")],
            id="5000-digit cron",
        ),
        pytest.param(
            template(
                "t-bad",
                cron=None,
                execution={
                    "id": "x-1",
                    "status": "running",
                    "started_at": "0001-01-01T00:30:00+01:00",  # year 0 in UTC
                    "run_until": "2099-01-01T00:00:00Z",
                },
            ),
            [("error", "invalid_template")],
            id="started_at before year 1 in UTC",
        ),
        pytest.param(None, [], id="null in the templates list"),
    ],
)
def test_a_template_that_cannot_be_evaluated_does_not_stop_the_others(
    h: Harness, bad: Any, reported: list[tuple[str, str]]
) -> None:
    _applied_on_a_pre_existing_hpa(h)
    h.api.templates = [bad, template()]
    h.api.actions["t-bad"] = [action("a-9", "other")]
    # 12:00: t-1's window stays; 19:00: it has ended and is reverted.
    assert h.run(at(12)).failures == 0
    assert ours(h.hpa())[notes.MANAGED] == "true"
    report = h.run(at(19))
    assert (report.reverts, report.failures) == (1, 0)
    assert ours(h.hpa()) == {}
    assert types(h.events()) == [*reported, ("revert", "expired")]


@pytest.mark.parametrize(
    "value",
    ["--1", "\u00b2", "1_000", "9" * 5000],
    ids=["double minus", "superscript two", "underscore", "5000 digits"],
)
def test_an_unreadable_priority_annotation_does_not_stop_the_revert_scan(
    h: Harness, value: str
) -> None:
    _applied_on_a_pre_existing_hpa(h)
    h.kube.create(deployment("api", replicas=1))
    other = hpa("api", "api")
    other["metadata"]["annotations"] = {
        notes.MANAGED: "true",
        notes.TEMPLATE_ID: "t-x",
        notes.ACTION_ID: "a-x",
        notes.PRIORITY_DOWN: value,
    }
    h.kube.create(other)
    report = h.run(at(19))
    assert report.reverts >= 1
    assert ours(h.hpa()) == {}  # t-1's window on web was reverted


@pytest.mark.parametrize(
    ("template_id", "action_id"), [("t,1", "a-1"), ("t-1", "a,1"), ("t/1", "a/1"), ("t%2C1", "a")]
)
def test_ids_with_separators_keep_their_window_released(
    h: Harness, template_id: str, action_id: str
) -> None:
    h.api.templates = [template(template_id)]
    h.api.actions = {template_id: [action(action_id)]}
    h.kube.create(deployment(replicas=3))
    h.kube.create(hpa(low=2, high=5))
    h.run(at(9))
    h.kube.patch("horizontalpodautoscalers", NS, "web", {"spec": {"minReplicas": 7}})
    h.run(at(10))  # released as overridden
    h.run(at(11))  # and left as they set it
    spec = h.hpa()["spec"]
    assert (spec["minReplicas"], spec["maxReplicas"]) == (7, 20)
    assert notes.MANAGED not in ours(h.hpa())


def test_a_template_whose_planning_crashes_is_logged_and_the_others_still_apply(
    h: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    h.kube.create(deployment(replicas=3))
    h.kube.create(hpa(low=2, high=5))
    h.api.templates = [template("t-bug"), template()]
    get_actions = h.api.get_actions

    def a_bug_for_one(template_id: str) -> list[dict[str, Any]]:
        if template_id == "t-bug":
            raise RuntimeError("a bug, not an API failure")
        return get_actions(template_id)

    monkeypatch.setattr(h.api, "get_actions", a_bug_for_one)
    with structlog.testing.capture_logs() as logs:
        report = h.run(at(9))
    assert (report.applies, report.failures) == (1, 1)
    assert ours(h.hpa())[notes.TEMPLATE_ID] == "t-1"
    assert [line["template"] for line in logs if line["event"] == "scaling_plan_crashed"] == [
        "t-bug"
    ]


def test_a_template_without_a_readable_id_or_with_a_taken_one_is_logged_by_its_place(
    h: Harness,
) -> None:
    h.kube.create(deployment(replicas=3))
    h.kube.create(hpa(low=2, high=5))
    h.api.templates = [5, template(), template(name="again")]
    with structlog.testing.capture_logs() as logs:
        assert h.run(at(9)).applies == 1  # the readable ones still apply
    assert [line["problem"] for line in logs if line["event"] == "scaling_template_unreadable"] == [
        "templates[0]: no readable id: Expected `object`, got `int`",
        "templates[2]: duplicate id 't-1'",
    ]


def test_the_templates_are_decoded_once_per_answer(
    h: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    decoded: list[Any] = []

    def counting(index: int, raw: Any) -> Template | MalformedTemplate:
        decoded.append(raw)
        return decode_template(index, raw)

    monkeypatch.setattr(view, "decode_template", counting)
    h.api.templates = [template("t-1"), template("t-2", name="cyber monday")]
    h.kube.create(deployment())
    h.reconciler = h.make_reconciler(clock=lambda: at(9))
    # Without a fixed instant, the answer is evaluated again when the writes may start.
    assert h.reconciler.apply_cycle().applies == 1
    assert len(decoded) == 2  # one a template, for the whole cycle
    h.reconciler.revert_scan()  # judged on the last answer, decoded already
    assert len(decoded) == 2
