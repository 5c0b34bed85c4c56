"""managedFields in the fake as kube-apiserver keeps them: a client rewriting the list in an
update or patch, the resets `[]` and `[{}]` and what follows them, lists that do not decode,
the order and times of the entries, and server-side apply's resourceVersion precondition.

What each test asserts was seen on a real kube-apiserver v1.36 first; the cases that can be
compared request by request are also played against one
(tests/real/test_fake_matches_real.py). Upstream: k8s.io/apimachinery/pkg/util/managedfields.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from sandbox import objects
from sandbox.kube import FakeKube
from tests import cluster_objects

NS = cluster_objects.NS
HPAS = f"/apis/autoscaling/v2/namespaces/{NS}/horizontalpodautoscalers"
HPA = f"{HPAS}/web"
LEASES = f"/apis/coordination.k8s.io/v1/namespaces/{NS}/leases"
CONFIGMAPS = f"/api/v1/namespaces/{NS}/configmaps"
MERGE = "application/merge-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"
JSON_PATCH = "application/json-patch+json"
APPLY = "application/apply-patch+yaml"
OLD = "2020-01-02T03:04:05Z"  # a time no write of the test makes
STALE = (
    'Operation cannot be fulfilled on horizontalpodautoscalers.autoscaling "web": the object '
    "has been modified; please apply your changes to the latest version and try again"
)


@pytest.fixture
def hpa(kube: FakeKube, http: httpx.Client) -> dict[str, Any]:
    """HPA `web`, created by `deployer` with an annotation, its maxReplicas then raised by
    `tuner`: two Update entries."""
    kube.create(objects.namespace(name=NS))
    made = objects.hpa(name="web", namespace=NS, annotations={"note": "x"})
    assert http.post(HPAS, params={"fieldManager": "deployer"}, json=made).status_code == 201
    tuned: dict[str, Any] = patch(http, "tuner", {"spec": {"maxReplicas": 12}}).json()
    return tuned


def patch(
    http: httpx.Client, manager: str, body: Any, kind: str = MERGE, path: str = HPA
) -> httpx.Response:
    return http.patch(
        path, params={"fieldManager": manager}, json=body, headers={"Content-Type": kind}
    )


def apply(http: httpx.Client, manager: str, config: dict[str, Any], **query: str) -> httpx.Response:
    return http.patch(
        HPA,
        params={"fieldManager": manager, **query},
        json=config,
        headers={"Content-Type": APPLY},
    )


def hpa_config(**spec: Any) -> dict[str, Any]:
    """An apply configuration of HPA `web` setting `spec`."""
    return {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": "web"},
        "spec": spec,
    }


def managed(obj: dict[str, Any]) -> list[dict[str, Any]]:
    return list(obj["metadata"].get("managedFields") or [])


def by_manager(obj: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {entry["manager"]: entry for entry in managed(obj)}


def rv(obj: dict[str, Any]) -> str:
    return str(obj["metadata"]["resourceVersion"])


def edited(obj: dict[str, Any]) -> list[dict[str, Any]]:
    """The object's list with tuner's entry dropped and two more spec fields handed to
    deployer (one the object has, one it has not)."""
    entries = [copy.deepcopy(e) for e in managed(obj) if e["manager"] != "tuner"]
    [deployer] = entries
    deployer["fieldsV1"]["f:spec"] |= {"f:maxReplicas": {}, "f:behavior": {}}
    return entries


def aged(obj: dict[str, Any]) -> list[dict[str, Any]]:
    """The object's list with every time made OLD and one more entry, `keeper`, owning a
    label the object has not (a write changing only times would change nothing)."""
    keeper = {
        "manager": "keeper",
        "operation": "Update",
        "apiVersion": "autoscaling/v2",
        "time": OLD,
        "fieldsType": "FieldsV1",
        "fieldsV1": {"f:metadata": {"f:labels": {"f:team": {}}}},
    }
    return [*({**e, "time": OLD} for e in managed(obj)), keeper]


# --- a client rewriting the list -----------------------------------------------------------


def _put(http: httpx.Client, obj: dict[str, Any], entries: list[dict[str, Any]]) -> httpx.Response:
    body = copy.deepcopy(obj)
    body["metadata"]["managedFields"] = entries
    return http.put(HPA, params={"fieldManager": "editor"}, json=body)


REWRITES: dict[str, Callable[[httpx.Client, dict[str, Any], list[Any]], httpx.Response]] = {
    "merge": lambda h, _, e: patch(h, "editor", {"metadata": {"managedFields": e}}),
    "strategic": lambda h, _, e: patch(h, "editor", {"metadata": {"managedFields": e}}, STRATEGIC),
    "json": lambda h, _, e: patch(
        h, "editor", [{"op": "replace", "path": "/metadata/managedFields", "value": e}], JSON_PATCH
    ),
    "put": _put,
}


@pytest.mark.parametrize("how", list(REWRITES))
def test_a_write_that_only_rewrites_managed_fields_keeps_the_list_it_sent(
    how: str, hpa: dict[str, Any], http: httpx.Client
) -> None:
    """FieldManager.Update (decodeLiveOrNew): a list the request leaves in the object is the
    base instead of the stored one; nothing else changed, so its manager gets no entry."""
    sent = edited(hpa)
    answer = REWRITES[how](http, hpa, sent)
    assert answer.status_code == 200
    written = answer.json()
    assert managed(written) == sent
    assert rv(written) != rv(hpa)  # a write of its own
    assert managed(http.get(HPA).json()) == sent


def test_a_patch_that_rewrites_managed_fields_and_changes_a_field_gives_it_to_its_manager(
    hpa: dict[str, Any], http: httpx.Client
) -> None:
    answer = patch(
        http, "editor", {"metadata": {"managedFields": edited(hpa)}, "spec": {"minReplicas": 3}}
    )
    entries = by_manager(answer.json())
    assert set(entries) == {"deployer", "editor"}
    assert entries["editor"]["operation"] == "Update"
    assert entries["editor"]["fieldsV1"] == {"f:spec": {"f:minReplicas": {}}}
    assert "f:minReplicas" not in entries["deployer"]["fieldsV1"]["f:spec"]
    assert {"f:maxReplicas", "f:behavior"} <= set(entries["deployer"]["fieldsV1"]["f:spec"])


def test_a_patch_that_rewrites_managed_fields_and_removes_a_field_gives_its_manager_nothing(
    hpa: dict[str, Any], http: httpx.Client
) -> None:
    """A removed field is taken from every manager; the remover took none, so no entry."""
    body = {"metadata": {"managedFields": edited(hpa), "annotations": {"note": None}}}
    written = patch(http, "remover", body).json()
    assert "annotations" not in written["metadata"]
    [deployer] = managed(written)
    assert deployer["manager"] == "deployer"
    assert "f:metadata" not in deployer["fieldsV1"]


def test_a_status_write_keeps_the_objects_managed_fields_whatever_it_sends(
    hpa: dict[str, Any], http: httpx.Client
) -> None:
    """A subresource write starts from the stored list always (decodeLiveOrNew)."""
    body = {"metadata": {"managedFields": edited(hpa)}, "status": {"desiredReplicas": 4}}
    written = patch(http, "controller", body, path=f"{HPA}/status").json()
    assert {(e["manager"], e.get("subresource")) for e in managed(written)} == {
        ("deployer", None),
        ("tuner", None),
        ("controller", "status"),
    }
    assert by_manager(written)["controller"]["fieldsV1"] == {"f:status": {"f:desiredReplicas": {}}}


# --- resets and lists that do not decode ---------------------------------------------------


@pytest.mark.parametrize("reset", [[], [{}], [{"manager": "", "time": None}]])
def test_an_empty_list_or_one_empty_entry_strips_managed_fields_and_later_updates_record_nothing(
    reset: list[Any], hpa: dict[str, Any], http: httpx.Client
) -> None:
    """isResetManagedFields; then skipNonAppliedManager: an object without managedFields is
    not tracked by updates, this one's included."""
    written = patch(http, "editor", {"metadata": {"managedFields": reset}}).json()
    assert "managedFields" not in written["metadata"]
    later = patch(http, "later", {"spec": {"minReplicas": 3}}).json()
    assert later["spec"]["minReplicas"] == 3
    assert "managedFields" not in later["metadata"]
    assert (
        "managedFields"
        not in patch(
            http, "again", {"metadata": {"managedFields": reset}, "spec": {"minReplicas": 4}}
        ).json()["metadata"]
    )


def test_a_server_side_apply_after_a_reset_conflicts_with_before_first_apply(
    hpa: dict[str, Any], http: httpx.Client
) -> None:
    """skipNonAppliedManager gives an untracked object's fields to `before-first-apply` (an
    Update) before the first apply; a forced apply takes them, and updates are tracked again."""
    patch(http, "editor", {"metadata": {"managedFields": [{}]}})
    refused = apply(http, "applier", hpa_config(minReplicas=5))
    assert refused.status_code == 409
    assert refused.json()["message"] == (
        'Apply failed with 1 conflict: conflict with "before-first-apply" using autoscaling/v2: '
        ".spec.minReplicas"
    )
    forced = apply(http, "applier", hpa_config(minReplicas=5), force="true").json()
    entries = by_manager(forced)
    assert [(e["manager"], e["operation"]) for e in managed(forced)] == [
        ("applier", "Apply"),
        ("before-first-apply", "Update"),
    ]
    assert entries["applier"]["fieldsV1"] == {"f:spec": {"f:minReplicas": {}}}
    assert "f:minReplicas" not in entries["before-first-apply"]["fieldsV1"]["f:spec"]
    tracked = patch(http, "later", {"spec": {"maxReplicas": 20}}).json()
    assert "later" in by_manager(tracked)


def test_an_object_created_with_no_field_is_never_tracked_by_updates(
    kube: FakeKube, http: httpx.Client
) -> None:
    """Its create leaves managedFields empty, which skipNonAppliedManager does not track."""
    kube.create(objects.namespace(name=NS))
    made = http.post(CONFIGMAPS, json={"metadata": {"name": "bare"}}).json()
    assert "managedFields" not in made["metadata"]
    changed = patch(http, "later", {"data": {"a": "1"}}, path=f"{CONFIGMAPS}/bare").json()
    assert changed["data"] == {"a": "1"}
    assert "managedFields" not in changed["metadata"]


@pytest.mark.parametrize(
    "spoil",
    [
        {"operation": "Bogus"},
        {"fieldsType": None},
        {"fieldsType": "FieldsV2"},
        {"apiVersion": ""},
        {"fieldsV1": {"spec": {}}},
        {"fieldsV1": {"f:spec": {"k:{oops": {}}}},
    ],
    ids=["operation", "no-fieldsType", "fieldsType", "apiVersion", "no-prefix", "bad-key"],
)
def test_a_managed_fields_list_that_does_not_decode_is_ignored(
    spoil: dict[str, Any], hpa: dict[str, Any], http: httpx.Client
) -> None:
    """No error: the stored list is the base, as when none was sent."""
    sent = [{**managed(hpa)[0], **spoil}]
    answer = patch(http, "editor", {"metadata": {"managedFields": sent}})
    assert answer.status_code == 200
    assert managed(answer.json()) == managed(hpa)
    assert rv(answer.json()) == rv(hpa)
    changed = patch(
        http, "editor", {"metadata": {"managedFields": sent}, "spec": {"minReplicas": 3}}
    ).json()
    assert [e["manager"] for e in managed(changed)] == ["deployer", "editor", "tuner"]


def test_a_create_may_carry_a_list_the_creator_takes_its_fields_from(
    kube: FakeKube, http: httpx.Client
) -> None:
    kube.create(objects.namespace(name=NS))
    earlier = {
        "manager": "earlier",
        "operation": "Update",
        "apiVersion": "v1",
        "time": OLD,
        "fieldsType": "FieldsV1",
        "fieldsV1": {"f:data": {"f:a": {}, "f:b": {}}},
    }
    body = {"metadata": {"name": "c", "managedFields": [earlier]}, "data": {"a": "1"}}
    made = http.post(CONFIGMAPS, params={"fieldManager": "creator"}, json=body).json()
    assert [(e["manager"], e["fieldsV1"]) for e in managed(made)] == [
        ("earlier", {"f:data": {"f:b": {}}}),
        ("creator", {"f:data": {"f:a": {}}}),
    ]


# --- order and times -----------------------------------------------------------------------


def test_an_entry_keeps_its_time_unless_its_manager_changes_a_field(
    hpa: dict[str, Any], http: httpx.Client
) -> None:
    """managedFieldsUpdater stamps only the entry of the manager whose write took fields;
    one that loses fields, or whose own write only removes, keeps its time."""
    patch(http, "editor", {"metadata": {"managedFields": aged(hpa)}})
    taken = patch(http, "other", {"spec": {"minReplicas": 3}}).json()
    times = {e["manager"]: e["time"] for e in managed(taken)}
    assert times["deployer"] == times["tuner"] == times["keeper"] == OLD
    assert times["other"] != OLD
    removed = patch(http, "deployer", {"metadata": {"annotations": {"note": None}}}).json()
    assert by_manager(removed)["deployer"]["time"] == OLD
    changed = patch(http, "tuner", {"spec": {"maxReplicas": 15}}).json()
    assert by_manager(changed)["tuner"]["time"] != OLD


def test_entries_are_ordered_as_upstream_encodes_them(
    hpa: dict[str, Any], http: httpx.Client
) -> None:
    """sortEncodedManagedFields: Apply first, then by time (none first), then manager; a
    time is written in whole seconds UTC."""

    def made(manager: str, operation: str, time: str | None, field: str) -> dict[str, Any]:
        entry: dict[str, Any] = {
            "manager": manager,
            "operation": operation,
            "apiVersion": "autoscaling/v2",
            "time": time,
            "fieldsType": "FieldsV1",
            "fieldsV1": {"f:spec": {f"f:{field}": {}}},
        }
        return {key: value for key, value in entry.items() if value is not None}

    sent = [
        made("b", "Update", "2021-01-01T00:00:00.750+02:00", "minReplicas"),
        made("a", "Update", "2020-12-31T22:00:00Z", "maxReplicas"),
        made("z", "Update", None, "metrics"),
        made("y", "Apply", "2030-01-01T00:00:00Z", "scaleTargetRef"),
    ]
    written = patch(http, "editor", {"metadata": {"managedFields": sent}}).json()
    assert [(e["manager"], e.get("time")) for e in managed(written)] == [
        ("y", "2030-01-01T00:00:00Z"),
        ("z", None),
        ("a", "2020-12-31T22:00:00Z"),
        ("b", "2020-12-31T22:00:00Z"),
    ]


def test_a_write_that_only_changes_the_times_of_entries_changes_nothing(
    hpa: dict[str, Any], http: httpx.Client
) -> None:
    """IgnoreManagedFieldsTimestampsTransformer: the stored times stay, nothing is written."""
    older = [{**e, "time": OLD} for e in managed(hpa)]
    answer = patch(http, "editor", {"metadata": {"managedFields": older}}).json()
    assert managed(answer) == managed(hpa)
    assert rv(answer) == rv(hpa)


# --- server-side apply ----------------------------------------------------------------------


def test_a_server_side_apply_that_carries_a_resource_version_holds_it_as_a_precondition(
    hpa: dict[str, Any], http: httpx.Client
) -> None:
    """409 Conflict when stale, whether the apply changes anything, is forced or a dry run;
    a conflict between field managers is answered first."""
    config = hpa_config(maxReplicas=12)
    config["metadata"]["resourceVersion"] = rv(apply(http, "applier", config).json())
    assert apply(http, "applier", config).status_code == 200
    patch(http, "tuner", {"spec": {"minReplicas": 3}})
    for query in ({}, {"force": "true"}, {"dryRun": "All"}):
        stale = apply(http, "applier", config, **query)
        assert (stale.status_code, stale.json()["reason"]) == (409, "Conflict")
        assert stale.json()["message"] == STALE
    config["spec"]["minReplicas"] = 5
    fields = apply(http, "applier", config).json()
    assert fields["message"].startswith('Apply failed with 1 conflict: conflict with "tuner"')


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("abc", 'strconv.ParseUint: parsing "abc": invalid syntax'),
        ("-1", 'strconv.ParseUint: parsing "-1": invalid syntax'),
        (
            "99999999999999999999",
            'strconv.ParseUint: parsing "99999999999999999999": value out of range',
        ),
    ],
)
def test_a_resource_version_that_is_not_a_number_is_a_500(
    value: str, message: str, hpa: dict[str, Any], http: httpx.Client
) -> None:
    """The registry parses it with Go's ParseUint; the API layer does not classify that."""
    config = hpa_config(maxReplicas=12)
    config["metadata"]["resourceVersion"] = value
    for answer in (
        apply(http, "tuner-applier", config, force="true"),
        patch(http, "tuner", {"metadata": {"resourceVersion": value}}),
    ):
        assert answer.status_code == 500
        assert answer.json() == {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": message,
            "code": 500,
        }


def test_a_resource_version_of_0_is_none_and_a_lease_needs_one(
    hpa: dict[str, Any], http: httpx.Client
) -> None:
    """0 reads as no resourceVersion: an unconditional update, which a Lease's strategy does
    not allow (AllowUnconditionalUpdate), so there it is a 422 naming the resource."""
    assert patch(http, "tuner", {"metadata": {"resourceVersion": "0"}}).status_code == 200
    lease = {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": "l"},
        "spec": {"holderIdentity": "a"},
    }
    made = http.post(LEASES, json=lease).json()
    assert (
        patch(http, "p", {"spec": {"holderIdentity": "b"}}, path=f"{LEASES}/l").status_code == 200
    )
    del made["metadata"]["resourceVersion"]
    for answer in (
        http.put(f"{LEASES}/l", json=made),
        patch(http, "p", {"metadata": {"resourceVersion": "0"}}, path=f"{LEASES}/l"),
    ):
        assert answer.status_code == 422
        assert answer.json()["message"] == (
            'leases.coordination.k8s.io "l" is invalid: metadata.resourceVersion: Invalid '
            "value: 0: must be specified for an update"
        )
        assert answer.json()["details"] == {
            "name": "l",
            "group": "coordination.k8s.io",
            "kind": "leases",
            "causes": [
                {
                    "reason": "FieldValueInvalid",
                    "message": "Invalid value: 0: must be specified for an update",
                    "field": "metadata.resourceVersion",
                }
            ],
        }


@pytest.mark.parametrize("entries", [[], [{"manager": "x"}]])
def test_a_server_side_apply_may_not_carry_managed_fields(
    entries: list[Any], hpa: dict[str, Any], http: httpx.Client
) -> None:
    config = hpa_config(maxReplicas=12)
    config["metadata"]["managedFields"] = entries
    answer = apply(http, "applier", config)
    assert (answer.status_code, answer.json()["message"]) == (
        400,
        "metadata.managedFields must be nil",
    )


def test_an_apply_entry_has_the_time_of_the_last_apply_that_changed_the_object(
    hpa: dict[str, Any], http: httpx.Client
) -> None:
    """managedFieldsUpdater.Apply stamps the applier's entry only when the object changed:
    one that shares a value it did not change keeps its time, and a new one gets none."""
    apply(http, "applier", hpa_config(maxReplicas=12), force="true")
    patch(http, "editor", {"metadata": {"managedFields": aged(http.get(HPA).json())}})
    same = apply(http, "applier", hpa_config(maxReplicas=12, minReplicas=2)).json()
    assert by_manager(same)["applier"]["time"] == OLD
    assert by_manager(same)["applier"]["fieldsV1"]["f:spec"].keys() == {
        "f:maxReplicas",
        "f:minReplicas",
    }
    newcomer = apply(http, "newcomer", hpa_config(maxReplicas=12)).json()
    assert "time" not in by_manager(newcomer)["newcomer"]
    moved = apply(http, "applier", hpa_config(maxReplicas=13, minReplicas=2), force="true")
    assert by_manager(moved.json())["applier"]["time"] != OLD
