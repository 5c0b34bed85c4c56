"""A scaling window (`Window`, the one type for it) and what a managed HPA carries for it
under `scaling.moonin.app/`, read and written in one place: a window parses from the
annotations (`read_window`) and renders to them (`Window.annotations`), and its RELEASED
marker is spelt here (`release_marker`).

The annotations are the whole state of a scaling window: reverts read them alone, so an
expired window is reverted on time even while Moonin is unreachable, and a restarted agent
needs nothing else to pick up where it stopped. What each key holds is listed in
docs/scaling.md ("Reconcile").

How it fails: never for annotations it cannot read. `read_window` returns None for an HPA
without `managed: "true"`; a managed HPA whose other annotations were edited into
something unreadable still parses: an unreadable `run-until` reads as already passed (the
window cannot be trusted to still be on), unreadable priorities as 0, unreadable originals
as absent.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from urllib.parse import quote

from kube.workloads import Hpa
from scheduler.actions import Action
from scheduler.ownership import Owners, holds_entry
from scheduler.window import ActiveWindow

PREFIX = "scaling.moonin.app/"
MANAGED = PREFIX + "managed"
TEMPLATE_ID = PREFIX + "template-id"
ACTION_ID = PREFIX + "action-id"
TEMPLATE_NAME = PREFIX + "template-name"
WINDOW_START = PREFIX + "window-start"
RUN_UNTIL = PREFIX + "run-until"
PRIORITY_UP = PREFIX + "priority-up"
PRIORITY_DOWN = PREFIX + "priority-down"
PROVISIONAL = PREFIX + "provisional"
ORIGINAL_SPEC = PREFIX + "original-spec"
ORIGINAL_REPLICAS = PREFIX + "original-replicas"
ORIGINAL_MIN = PREFIX + "original-min"
ORIGINAL_MAX = PREFIX + "original-max"
MANAGED_HASH = PREFIX + "managed-hash"
# Who owned min and max before the first window took them (`scheduler.ownership.Owners`).
# A revert removes it last, with the write that hands the bounds back: found on an HPA no
# longer managed, it says that write is still to be made.
ORIGINAL_MANAGERS = PREFIX + "original-managers"
# When a GitOps sync's undoing of the window was last undone (`scheduler.gitops`).
REASSERTED_AT = PREFIX + "reasserted-at"
# Set on a Deployment by its owner: the scaling role never touches it.
IGNORE = PREFIX + "ignore"
# Left behind by an `overridden` or `manual` revert: these windows are not applied again.
RELEASED = PREFIX + "released"
# A label, on a Deployment whose provisional HPA is being deleted: the replicas to restore.
# The cluster's copy of the local store's journal, found by a label selector once the store
# is lost (`scheduler.restores.read_restore_journal`).
RESTORE_REPLICAS = PREFIX + "restore-replicas"

# Everything a revert's first write removes (RELEASED stays: it outlives the window on
# purpose; ORIGINAL_MANAGERS goes with the hand-back that follows).
WINDOW_KEYS = (
    MANAGED,
    TEMPLATE_ID,
    ACTION_ID,
    TEMPLATE_NAME,
    WINDOW_START,
    RUN_UNTIL,
    PRIORITY_UP,
    PRIORITY_DOWN,
    PROVISIONAL,
    ORIGINAL_SPEC,
    ORIGINAL_REPLICAS,
    ORIGINAL_MIN,
    ORIGINAL_MAX,
    MANAGED_HASH,
    REASSERTED_AT,
)
# Released windows kept per object: enough for the few templates that can share an HPA.
RELEASED_KEPT = 8
_INTEGER = re.compile(r"-?[0-9]{1,18}", re.ASCII)
TRUE = "true"


@dataclass(frozen=True, slots=True, kw_only=True)
class Originals:
    """The state before the first window touched the object; what a revert restores."""

    provisional: bool
    replicas: int | None  # the Deployment's spec.replicas (provisional HPAs)
    min_replicas: int | None  # the HPA's spec (pre-existing HPAs); None: the field was absent
    max_replicas: int | None
    spec: str | None  # the HPA's whole spec as JSON (pre-existing HPAs), for an operator
    owners: Owners | None = None  # who owned min and max (pre-existing HPAs); None: unknown


@dataclass(frozen=True, slots=True, kw_only=True)
class Window:
    """One action's window on one Deployment's HPA: as planned from the platform's template
    and action (`planned`), as a managed HPA's annotations and bounds say (`read_window`),
    and as every event about it reports it.

    `min_replicas` and `max_replicas` are what the window asks for when planned, and the
    HPA's bounds as read otherwise (`overridden` tells whether those are still the window's).
    `originals` is None only for a planned window that is on no HPA yet."""

    template_id: str
    action_id: str
    template_name: str
    window_start: str  # as formatted into event ids (`ActiveWindow.start_text`), verbatim
    run_until: str  # verbatim too (`ActiveWindow.until_text`); `ended` reads it
    namespace: str
    deployment: str  # the target Deployment; "" for an HPA without one
    min_replicas: int
    max_replicas: int | None
    priority_up: int
    priority_down: int
    managed_hash: str  # planned: of its own bounds; read: as the annotation says
    originals: Originals | None = None

    @classmethod
    def planned(
        cls,
        *,
        template_id: str,
        template_name: str,
        window: ActiveWindow,
        action: Action,
    ) -> Window:
        """The window `action` asks for while its template is active in `window`."""
        window_start = window.start_text
        return cls(
            template_id=template_id,
            action_id=action.id,
            template_name=template_name,
            window_start=window_start,
            run_until=window.until_text,
            namespace=action.namespace,
            deployment=action.deployment,
            min_replicas=action.min_replicas,
            max_replicas=action.max_replicas,
            priority_up=action.priority_up,
            priority_down=action.priority_down,
            managed_hash=managed_hash(
                template_id, action.id, window_start, action.min_replicas, action.max_replicas
            ),
        )

    @property
    def target(self) -> str:
        return f"{self.namespace}/{self.deployment}"

    @property
    def release_marker(self) -> str:
        return release_marker(self.template_id, self.action_id, self.window_start)

    @property
    def kept(self) -> Originals:
        """The originals of a window read from an HPA (every managed HPA has them)."""
        if self.originals is None:
            raise ValueError("a planned window keeps no originals yet")
        return self.originals

    @property
    def overridden(self) -> bool:
        """Whether min or max differ from what the window set (its managed hash says what)."""
        expected = managed_hash(
            self.template_id,
            self.action_id,
            self.window_start,
            self.min_replicas,
            self.max_replicas or 0,
        )
        return expected != self.managed_hash

    def same_window(self, other: Window) -> bool:
        """The same template, action and window start: the same window, whatever its bounds."""
        return self.release_marker == other.release_marker

    def ended(self, now: datetime) -> bool:
        """Whether `run_until` has passed; an unreadable one has (it cannot be trusted)."""
        end = instant(self.run_until)
        return end is None or now >= end

    def annotations(self, originals: Originals) -> dict[str, str | None]:
        """The annotations of an HPA this window manages, keeping `originals`; None values
        remove a key in a merge patch."""
        return {
            MANAGED: TRUE,
            TEMPLATE_ID: self.template_id,
            ACTION_ID: self.action_id,
            TEMPLATE_NAME: self.template_name,
            WINDOW_START: self.window_start,
            RUN_UNTIL: self.run_until,
            PRIORITY_UP: str(self.priority_up),
            PRIORITY_DOWN: str(self.priority_down),
            PROVISIONAL: TRUE if originals.provisional else "false",
            ORIGINAL_SPEC: originals.spec,
            ORIGINAL_REPLICAS: _text(originals.replicas),
            ORIGINAL_MIN: _text(originals.min_replicas),
            ORIGINAL_MAX: _text(originals.max_replicas),
            ORIGINAL_MANAGERS: None if originals.owners is None else originals.owners.note(),
            MANAGED_HASH: self.managed_hash,
        }


def read_window(hpa: Hpa) -> Window | None:
    """The window a managed HPA is in, from its annotations and its bounds as read; None when
    it is not managed."""
    notes = hpa.metadata.annotations
    if notes.get(MANAGED) != TRUE:
        return None
    low, high = hpa.spec.bounds
    return Window(
        template_id=notes.get(TEMPLATE_ID, ""),
        action_id=notes.get(ACTION_ID, ""),
        template_name=notes.get(TEMPLATE_NAME, ""),
        window_start=notes.get(WINDOW_START, ""),
        run_until=notes.get(RUN_UNTIL, ""),
        namespace=hpa.metadata.namespace,
        deployment=hpa.spec.scale_target_ref.name,
        min_replicas=low,
        max_replicas=high,
        priority_up=_int(notes.get(PRIORITY_UP)) or 0,
        priority_down=_int(notes.get(PRIORITY_DOWN)) or 0,
        managed_hash=notes.get(MANAGED_HASH, ""),
        originals=Originals(
            provisional=notes.get(PROVISIONAL) == TRUE,
            replicas=_int(notes.get(ORIGINAL_REPLICAS)),
            min_replicas=_int(notes.get(ORIGINAL_MIN)),
            max_replicas=_int(notes.get(ORIGINAL_MAX)),
            spec=notes.get(ORIGINAL_SPEC) or None,
            owners=Owners.read(notes.get(ORIGINAL_MANAGERS)),
        ),
    )


def hand_back_pending(hpa: Hpa) -> bool:
    """Whether a revert restored the HPA but has yet to hand its bounds back: it is no
    longer managed, and still carries ORIGINAL_MANAGERS or a managedFields entry of ours
    (as agents before the hand-back left every HPA they reverted)."""
    meta = hpa.metadata
    if meta.annotations.get(MANAGED) == TRUE:
        return False
    return holds_entry(meta) or ORIGINAL_MANAGERS in meta.annotations


def managed_hash(template_id: str, action_id: str, window_start: str, low: int, high: int) -> str:
    """Fingerprint of what a window asks for; equal fingerprints make a re-apply a no-op."""
    text = f"{template_id}|{action_id}|{window_start}|{low}:{high}"
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def release_marker(template_id: str, action_id: str, window_start: str) -> str:
    """`<template>/<action>/<window_start>`; ids are free text, so `%`, `,` (which
    separates markers) and `/` in them are percent-encoded."""
    return "/".join(quote(part, safe=":") for part in (template_id, action_id, window_start))


def removal() -> dict[str, None]:
    """A merge-patch annotations map that removes every window key."""
    return dict.fromkeys(WINDOW_KEYS)


def released(notes: Mapping[str, str]) -> list[str]:
    """The markers of the windows released on an object with these annotations."""
    value = notes.get(RELEASED, "")
    return [item for item in value.split(",") if item]


def with_released(notes: Mapping[str, str], marker: str) -> str:
    """The RELEASED value after adding `marker` to an object with these annotations: newest
    last, the oldest dropped past the cap.

    With one released window this is exactly `<template>/<action>/<window_start>`."""
    kept = [item for item in released(notes) if item != marker]
    return ",".join([*kept, marker][-RELEASED_KEPT:])


def journalled_replicas(labels: Mapping[str, str]) -> int | None:
    """The replicas a Deployment's RESTORE_REPLICAS label journals; None without a usable one."""
    replicas = _int(labels.get(RESTORE_REPLICAS))
    return replicas if replicas is not None and replicas >= 0 else None


def instant(text: str) -> datetime | None:
    """An RFC 3339 instant with its offset; None for text that is not one."""
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        return None
    return moment if moment.utcoffset() is not None else None


def _int(text: str | None) -> int | None:
    # A pattern, not `int()` alone: `int` takes "1_000" and non-ASCII digits too, and
    # raises on what `isdigit` lets through ("²").
    if text is None or not _INTEGER.fullmatch(text.strip()):
        return None
    return int(text)


def _text(value: int | None) -> str | None:
    return None if value is None else str(value)
