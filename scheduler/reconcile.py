"""The scaling role's two loops: applying what the platform says, and reverting what is over.

They are separate on purpose. Applying needs the platform; reverting must not: a platform that
hangs, drips its answer or sends a gzip bomb must never keep a window open past its end.

`Reconciler.apply_cycle` (the platform part):
1. GET the templates and evaluate each (`scheduler.window`); for each active one GET its
   actions. These calls are made before anything is written, outside the write lock, so a
   slow platform delays only this loop. The answer is kept as the last good one.
2. Report invalid templates and actions once per distinct value (error events), and apply
   the valid actions of all active templates in `priority_up` order (then template order,
   then action order), so when two windows want the same Deployment the lower
   `priority_up` wins and the other reports a `conflict`.

`Reconciler.revert_scan` (Kubernetes and the local store only, never the platform): list
every HPA of the cluster; for each managed one, in `priority_down` order, put its apply event
into the outbox again unless the local store has it (crash recovery), then revert it if its
window is over (`scheduler.view.revert_reason`), judged on the platform's last good answer
evaluated now, or, before any answer (a process just started), on the annotations alone;
then finish Deployment restores a crash or a 409 left half done.

`run_once` runs both, one after the other; the scaling job runs each on its own schedule,
the revert scan first at start-up. Their writes (Kubernetes and the local store) never
interleave: a lock covers the writing half of each.

While the platform answers nothing usable (any `shipper.errors` failure on the templates
GET: down, an error status, an answer over its byte limit, a deadline passed) nothing new
is applied; reverts go on. While the scaling outbox is at its bound nothing new is applied
either, and no error events are put, but reverts go on.

A full or failing disk (the outbox or the local store cannot be written:
`runtime.storage_errors`) is a pause, not a failure: the part stops where it is (an event not
yet put means its write was not made either, so nothing applied or reverted goes
unreported), readiness fails (`Health.not_ready`), and both parts wait out a backoff before
they try again; once writes go through again they catch up, without a restart.

How it fails: neither part raises for a Kubernetes or Moonin failure of one action or one
HPA: it logs it, counts it on the reporter, and carries on with the next; the next run
retries. They raise only for a programming error or a local store that is damaged under
them.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from operator import attrgetter
from typing import Any, Protocol

import structlog

from kube.errors import BadRequest, Forbidden, Invalid, KubeError
from kube.globs import SCALED_KINDS, ResourceGlobs
from kube.workloads import Hpa
from runtime import deadline
from runtime.backoff import Backoff
from runtime.health import Health, HealthReporter
from runtime.storage_errors import is_passing_storage_error
from scheduler import actions as action_rules
from scheduler import annotations as notes
from scheduler import events, gitops, ownership
from scheduler.annotations import Window
from scheduler.apply import apply_action, invalid_action_error
from scheduler.cycle import Cycle, EventSink
from scheduler.gitops import YIELD, GitopsPolicy
from scheduler.kubeapi import ScalingKube
from scheduler.restores import finish_restores, read_restore_journal
from scheduler.revert import finish_hand_backs, revert
from scheduler.store import Store
from scheduler.templates import Template
from scheduler.view import Answer, TemplateState, TemplateView, decode_answer, revert_reason
from scheduler.window import ActiveWindow
from shipper.errors import CallCancelled, MooninAPIError

log = structlog.get_logger("scheduler")

COMPONENT = "scheduler"
APPLY = "apply"
REVERTS = "reverts"
BUDGET_SECONDS = 300.0


def _utc_now() -> datetime:
    return datetime.now(UTC)


ParsedActions = dict[str, list[action_rules.Action | action_rules.InvalidAction]]


class TemplateSource(Protocol):
    """What the reconciler needs of `shipper.client.ApiClient`."""

    def get_templates(self) -> list[Any]: ...

    def get_actions(self, template_id: str) -> list[Any]: ...


@dataclass(frozen=True, slots=True)
class CycleReport:
    """What one run did. `applies`/`reverts` count windows newly applied or reverted,
    `errors` error events newly reported, `failures` Kubernetes calls that failed (409s
    are `conflicts`, retried next run). `moonin_reachable` (the apply part) and
    `kube_reachable` (the revert scan: HPAs could be listed) are None for a part not run."""

    applies: int
    reverts: int
    errors: int
    failures: int
    conflicts: int
    moonin_reachable: bool | None
    kube_reachable: bool | None

    @classmethod
    def of(
        cls,
        tally: Counter[str],
        *,
        moonin_reachable: bool | None = None,
        kube_reachable: bool | None = None,
    ) -> CycleReport:
        return cls(
            applies=tally["applies"],
            reverts=tally["reverts"],
            errors=tally["errors"],
            failures=tally["apply_failures"] + tally["revert_failures"],
            conflicts=tally["conflicts"],
            moonin_reachable=moonin_reachable,
            kube_reachable=kube_reachable,
        )

    def then(self, other: CycleReport) -> CycleReport:
        """This part's report followed by `other`'s (what `run_once` returns)."""
        return CycleReport(
            applies=self.applies + other.applies,
            reverts=self.reverts + other.reverts,
            errors=self.errors + other.errors,
            failures=self.failures + other.failures,
            conflicts=self.conflicts + other.conflicts,
            moonin_reachable=_known(self.moonin_reachable, other.moonin_reachable),
            kube_reachable=_known(self.kube_reachable, other.kube_reachable),
        )


def _known(first: bool | None, second: bool | None) -> bool | None:
    return first if second is None else second


class Reconciler:
    def __init__(
        self,
        *,
        kube: ScalingKube,
        api: TemplateSource,
        outbox: EventSink,
        store: Store,
        cluster_id: str,
        ignore: ResourceGlobs | Iterable[str] = (),
        reporter: HealthReporter | None = None,
        budget_seconds: float = BUDGET_SECONDS,
        clock: Callable[[], datetime] = _utc_now,
        storage_backoff: Backoff | None = None,
        gitops_policy: GitopsPolicy = YIELD,
    ) -> None:
        self.kube = kube
        self.gitops = gitops_policy  # what a GitOps tool syncing the bounds back does
        # The most one run of either loop waits on the network, however many calls hang.
        self.budget_seconds = budget_seconds
        self._clock = clock
        self.api = api
        self.outbox = outbox
        self.store = store
        self.cluster_id = cluster_id
        self.ignore = (
            ignore
            if isinstance(ignore, ResourceGlobs)
            else ResourceGlobs(ignore, kinds=SCALED_KINDS)
        )
        self.reporter = reporter or HealthReporter(COMPONENT)
        # Kubernetes writes and the store, one part at a time; platform calls stay outside.
        self._writing = threading.Lock()
        self._answer: Answer | None = None  # the platform's last good answer
        self._stopping = threading.Event()
        # The apply cycle's platform calls, which `stop()` cancels.
        self._calls: deadline.Deadline | None = None
        self._calls_lock = threading.Lock()
        self._health_lock = threading.Lock()
        # Part -> its problem (None: fine) and whether readiness fails for it.
        self._problems: dict[str, tuple[str, bool] | None] = {APPLY: None, REVERTS: None}
        # The parts a full or failing disk holds; both wait (until time.monotonic() reaches
        # `_storage_retry_at`) before writing again, and the backoff grows until none is held.
        self._storage_held: set[str] = set()
        self._storage_backoff = storage_backoff or Backoff(initial=1.0, maximum=300.0)
        self._storage_retry_at = float("-inf")
        self._failing: dict[str, str] = {}  # platform or kube call -> how it last failed
        # Whether this process has read the restores journalled on Deployments (once).
        self._journal_read = False
        # Windows skipped for their released marker that this process has logged: the
        # marker skips them on every cycle, the log says so once.
        self._released_noted: set[str] = set()  # their release markers
        # Targets deployed by a GitOps tool whose first window this process advised on.
        self._advised: set[str] = set()

    def stop(self) -> None:
        """End a running apply cycle's platform call now and skip the ones not made yet:
        a stopping process does not wait out a slow platform."""
        with self._calls_lock:
            self._stopping.set()
            if self._calls is not None:
                self._calls.cancel()

    def run_once(self, now: datetime | None = None) -> CycleReport:
        """Both parts at `now` (an aware datetime; default: the current time), applies first."""
        moment = self._clock() if now is None else _instant(now)
        return self.apply_cycle(moment).then(self.revert_scan(moment))

    # 1. and 2. the platform part ----------------------------------------------------------

    def apply_cycle(self, now: datetime | None = None) -> CycleReport:
        """Read the templates and actions, then report errors and apply (see the module).

        `now` fixes the instant of the whole cycle. Without it the templates are evaluated
        when read, and again with the time at which the writes may start: a window that
        ended while the platform was slow to answer must not be applied again after the
        revert scan has ended it."""
        cycle = self._cycle(now)
        if self._storage_waiting():
            return CycleReport.of(cycle.tally)
        cycle.count("cycles")
        at_bound = self.outbox.at_bound
        try:
            with self._cancellable_calls():
                decoded = decode_answer(self.api.get_templates())
                parsed = {} if at_bound else self._read_actions(cycle, decoded.view_at(cycle.now))
        except MooninAPIError as exc:
            if self._stopping.is_set():
                log.debug("scaling_apply_given_up", error=str(exc))
                return CycleReport.of(cycle.tally)
            cycle.count("moonin_failures")
            self._failed("templates", "scaling_templates_unavailable", exc)
            self._set_problem(APPLY, f"platform: {_summary(exc)}: applying nothing new")
            return CycleReport.of(cycle.tally, moonin_reachable=False)
        self._answered("templates")
        for problem in decoded.unreadable:
            log.error("scaling_template_unreadable", problem=problem)
        answer = replace(decoded, action_ids={key: _ids(found) for key, found in parsed.items()})
        self._answer = answer
        with self._writing, self._storage(APPLY) as attempt:
            if now is None:
                cycle.now = self._clock()
            view = answer.view_at(cycle.now)
            if at_bound:
                log.warning("scaling_outbox_at_bound", applying=False)
            else:
                for state in view.templates.values():
                    if state.activation.reason == "invalid":
                        self._template_error(cycle, state)
                for planned in self._plan(cycle, view, parsed):
                    self._apply(cycle, planned, view)
            self.store.commit()
        if attempt.held:
            return CycleReport.of(cycle.tally, moonin_reachable=True)
        self._set_problem(
            APPLY, "scaling outbox at its bound: applying nothing new" if at_bound else None
        )
        return CycleReport.of(cycle.tally, moonin_reachable=True)

    @contextlib.contextmanager
    def _cancellable_calls(self) -> Iterator[None]:
        """Platform calls inside this block end together within the cycle's budget, and at
        once when `stop()` is called."""
        with deadline.within(self.budget_seconds) as calls:
            with self._calls_lock:
                if self._stopping.is_set():
                    calls.cancel()
                self._calls = calls
            try:
                yield
            finally:
                with self._calls_lock:
                    self._calls = None

    def _read_actions(self, cycle: Cycle, view: TemplateView) -> ParsedActions:
        """The parsed actions of each active template whose actions could be read."""
        found: ParsedActions = {}
        for state in view.templates.values():
            template = state.template
            if not state.activation.active or not isinstance(template, Template):
                continue
            if self._stopping.is_set():
                break
            try:
                found[template.id] = [
                    action_rules.parse(raw) for raw in self.api.get_actions(template.id)
                ]
            except CallCancelled:
                break
            except MooninAPIError as exc:
                # Its windows stay as they are (see TemplateView.still_on).
                cycle.count("moonin_failures")
                self._failed(
                    f"actions/{template.id}",
                    "scaling_actions_unavailable",
                    exc,
                    template=template.id,
                )
            except Exception:
                # A bug must not keep the other templates from running; loud in the log.
                cycle.count("apply_failures")
                log.exception("scaling_plan_crashed", template=template.id)
            else:
                self._answered(f"actions/{template.id}")
        return found

    def _template_error(self, cycle: Cycle, state: TemplateState) -> None:
        activation = state.activation
        raw = state.raw
        event = events.template_error(
            cluster_id=cycle.cluster_id,
            template_id=activation.template_id,
            reason=activation.error_code or "invalid_template",
            cron=raw.get("cron"),
            timezone=raw.get("timezone"),
            duration_minutes=raw.get("duration_minutes"),
            message=activation.error or "invalid template",
            now=cycle.now,
        )
        cycle.emit_error(event, log, "scaling_template_invalid")

    # 2. actions and applies -------------------------------------------------------------------

    def _plan(self, cycle: Cycle, view: TemplateView, parsed: ParsedActions) -> list[Window]:
        """The windows to apply, by `priority_up`; equal ones in template, then action order
        (the sort is stable)."""
        planned: list[Window] = []
        for state in view.templates.values():
            template, active = state.template, state.activation.window
            found = parsed.get(template.id)
            if found is None or active is None or not isinstance(template, Template):
                continue
            try:
                planned.extend(self._plan_template(cycle, state, active, found))
            except Exception:
                # A bug must not keep the other templates from running; loud in the log.
                cycle.count("apply_failures")
                log.exception("scaling_plan_crashed", template=template.id)
        planned.sort(key=attrgetter("priority_up"))
        return planned

    def _plan_template(
        self,
        cycle: Cycle,
        state: TemplateState,
        active: ActiveWindow,
        parsed: list[action_rules.Action | action_rules.InvalidAction],
    ) -> list[Window]:
        """The valid actions of one template active in `active`, in its order; an `error`
        event for each invalid one."""
        template_id = state.template.id
        planned: list[Window] = []
        for action in parsed:
            if isinstance(action, action_rules.InvalidAction):
                invalid_action_error(cycle, template_id, active, action)
                continue
            planned.append(
                Window.planned(
                    template_id=template_id,
                    template_name=state.name,
                    window=active,
                    action=action,
                )
            )
        return planned

    def _apply(self, cycle: Cycle, planned: Window, view: TemplateView) -> None:
        def reason_for(window: Window) -> events.RevertReason | None:
            return revert_reason(window, cycle.now, view)

        try:
            outcome = apply_action(
                cycle, planned, ignore=self.ignore, reason_for=reason_for, gitops=self.gitops
            )
        except Exception as exc:
            if is_passing_storage_error(exc):
                raise  # the cycle holds its place (`_storage`)
            # A bug must not stop the other actions; it is loud in the log.
            cycle.count("apply_failures")
            log.exception(
                "scaling_apply_crashed", template=planned.template_id, action=planned.action_id
            )
            return
        if outcome == "released" and planned.release_marker not in self._released_noted:
            self._released_noted.add(planned.release_marker)
            log.info(
                "scaling_window_released",
                template=planned.template_id,
                action=planned.action_id,
                window_start=planned.window_start,
                target=planned.target,
                hint=f"{notes.RELEASED} keeps this window from being applied again",
            )

    # 3. the revert scan -----------------------------------------------------------------------

    def revert_scan(self, now: datetime | None = None) -> CycleReport:
        """Revert every managed HPA whose window is over (see the module); never asks the
        platform."""
        cycle = self._cycle(now)
        if self._storage_waiting():
            return CycleReport.of(cycle.tally)
        cycle.count("revert_scans")
        answer = self._answer
        view = None if answer is None else answer.view_at(cycle.now)
        unlisted: KubeError | None = None
        with self._writing, self._storage(REVERTS) as attempt:
            self._follow_outbox(cycle)
            with deadline.within(self.budget_seconds):  # however many calls hang
                unlisted = self._scan(cycle, view)
            self.store.commit()
        if attempt.held:
            return CycleReport.of(cycle.tally)
        if unlisted is None:
            self._set_problem(REVERTS, None)
        elif isinstance(unlisted, Forbidden):
            problem = f"kubernetes: {unlisted.denied}: reverts are waiting"
            self._set_problem(REVERTS, problem, unready=True)
        else:
            self._set_problem(REVERTS, "kubernetes: cannot list HPAs: reverts are waiting")
        return CycleReport.of(cycle.tally, kube_reachable=unlisted is None)

    def _follow_outbox(self, cycle: Cycle) -> None:
        """When the outbox file is not the one the store's events went into (it was
        quarantined, emptied or deleted), put every event the store holds into it again:
        the platform de-duplicates the ones it already had."""
        epoch = self.outbox.epoch
        known = self.store.outbox_epoch
        if self.outbox.resync_needed or known not in (None, epoch):
            events, unrecoverable = self.store.events()
            self.outbox.put(events)
            cycle.count("events_replayed", len(events))
            cycle.count("events_unrecoverable", unrecoverable)
            # An error only when events are lost: ids an earlier version kept without them.
            (log.error if unrecoverable else log.warning)(
                "scaling_outbox_replaced", replayed=len(events), unrecoverable=unrecoverable
            )
            self.outbox.clear_resync_needed()
        if known != epoch:
            self.store.follow_outbox(epoch)

    def _scan(self, cycle: Cycle, view: TemplateView | None) -> KubeError | None:
        """The scan; returns why the HPAs could not be listed, if they could not."""
        try:
            hpas = self.kube.list_hpas()
        except KubeError as exc:
            cycle.count("kube_failures")
            self._failed("hpa_list", "scaling_hpa_list_failed", exc)
            return exc
        self._answered("hpa_list")
        for hpa, managed in managed_hpas(hpas):
            read = hpa.metadata
            where = {"namespace": read.namespace, "hpa": read.name}
            try:
                reenqueue_apply(cycle, hpa, managed)
                synced = self.gitops.reasserts and gitops.synced_back(hpa, managed) is not None
                reason = revert_reason(managed, cycle.now, view, synced=synced)
                if reason is None:
                    continue
                if revert(cycle, hpa, managed, reason) is None:
                    self._answered(f"revert {read.key}")
            except (BadRequest, Invalid) as exc:
                # The server refused what we wrote: a bug here, which retrying will not fix.
                cycle.count("revert_failures")
                log.error("scaling_write_refused", status=exc.status, error=str(exc), **where)
            except KubeError as exc:
                # A 403 names the permission; retried every cycle, logged once per change.
                cycle.count("revert_failures")
                call = f"revert {read.key}"
                self._failed(call, "scaling_revert_failed", exc, **where)
            except Exception as exc:
                if is_passing_storage_error(exc):
                    raise  # the scan holds its place (`_storage`)
                cycle.count("revert_failures")
                log.exception("scaling_revert_crashed", **where)
        for key, failure in finish_hand_backs(cycle, hpas).items():
            cycle.count("revert_failures")
            self._failed(f"hand back {key}", "scaling_hand_back_failed", failure, hpa=key)
        if not self._journal_read:
            try:
                read_restore_journal(cycle)
            except KubeError as exc:  # the next scan tries again
                self._failed("restore_journal", "restore_journal_unread", exc)
            else:
                self._journal_read = True
                self._answered("restore_journal")
        finish_restores(cycle)
        return None

    # shared -----------------------------------------------------------------------------------

    def _storage_waiting(self) -> bool:
        """Whether a full or failing disk's backoff is still running (the part skips this run)."""
        with self._health_lock:
            return time.monotonic() < self._storage_retry_at

    @contextlib.contextmanager
    def _storage(self, part: str) -> Iterator[_Attempt]:
        """Hold `part`'s place when the block meets a full or failing disk: the error is
        counted, readiness fails, and both parts wait out a backoff. Logged once when the
        first part is held and once when the last one writes again: a part with nothing to
        write proves nothing about the disk."""
        attempt = _Attempt()
        try:
            yield attempt
        except Exception as exc:
            if not is_passing_storage_error(exc):
                raise
            attempt.held = True
            self.reporter.count("storage_errors")
            with self._health_lock:
                first = not self._storage_held
                self._storage_held.add(part)
                delay = self._storage_backoff.next_delay()
                self._storage_retry_at = time.monotonic() + delay
            if first:
                log.error("scaling_storage_unavailable", part=part, error=str(exc))
            self._set_problem(
                part, f"storage: {exc}: holding its place until it can write", unready=True
            )
            return
        with self._health_lock:
            recovered = part in self._storage_held and len(self._storage_held) == 1
            self._storage_held.discard(part)
            if recovered:
                self._storage_backoff.reset()
        if recovered:
            log.info("scaling_storage_writable", part=part)

    def _cycle(self, now: datetime | None) -> Cycle:
        return Cycle(
            kube=self.kube,
            outbox=self.outbox,
            store=self.store,
            cluster_id=self.cluster_id,
            now=self._clock() if now is None else _instant(now),
            reporter=self.reporter,
            advised=self._advised,
        )

    def _failed(
        self, call: str, event: str, exc: MooninAPIError | KubeError, **fields: object
    ) -> None:
        """Log a failed platform or Kubernetes call at warning once per change of how it
        fails; the same failure again, every cycle of an outage, only at debug."""
        error = str(exc)
        with self._health_lock:
            repeated = self._failing.get(call) == error
            self._failing[call] = error
        (log.debug if repeated else log.warning)(event, status=exc.status, error=error, **fields)

    def _answered(self, call: str) -> None:
        with self._health_lock:
            self._failing.pop(call, None)

    def _set_problem(self, part: str, problem: str | None, *, unready: bool = False) -> None:
        """One part's problem (None: fine); the component's health says every part's.
        `unready`: readiness fails for it (a permission the API server refuses, a full disk)."""
        with self._health_lock:
            self._problems[part] = None if problem is None else (problem, unready)
            problems = [found for found in self._problems.values() if found is not None]
            reason = "; ".join(text for text, _ in problems)
            if any(fails for _, fails in problems):
                health = Health.not_ready(reason)
            else:
                health = Health.degraded(reason) if problems else Health.healthy()
            if self.reporter.set(health):
                log.info("scheduler_health", ok=health.ok, reason=health.reason)


@dataclass(slots=True)
class _Attempt:
    """A block of writes; `held` once it met a full or failing disk and stopped there."""

    held: bool = False


def _instant(now: datetime) -> datetime:
    if now.utcoffset() is None:
        raise ValueError("now must be an aware datetime")
    return now.astimezone(UTC)


def _summary(exc: MooninAPIError) -> str:
    """What health says of a failed platform call: `answer over 8 MiB`, `deadline
    exceeded`, `answered 503`, `unreachable`."""
    summary = getattr(exc, "summary", None)
    if isinstance(summary, str):
        return summary
    return f"answered {exc.status}" if exc.status is not None else "unreachable"


def _ids(parsed: Iterable[action_rules.Action | action_rules.InvalidAction]) -> frozenset[str]:
    """The ids of the actions read, invalid ones too: their windows are still the template's."""
    return frozenset(action.id for action in parsed if action.id is not None)


def managed_hpas(hpas: Iterable[Hpa]) -> list[tuple[Hpa, Window]]:
    """The managed HPAs and their windows, in revert order: `priority_down`, then namespace
    and name. One being deleted is left out: nothing is written to an object on its way
    out."""
    found = [
        (hpa, window)
        for hpa in hpas
        if (window := notes.read_window(hpa)) is not None and not hpa.metadata.terminating
    ]
    found.sort(key=lambda pair: (pair[1].priority_down, pair[1].namespace, pair[0].metadata.name))
    return found


def reenqueue_apply(cycle: Cycle, hpa: Hpa, window: Window) -> None:
    """Put the window's apply event again unless the store says it is in the outbox: the
    apply write may have committed just before a crash that took the event with it."""
    if window.overridden or window.max_replicas is None:
        return  # what the window applied is no longer on the HPA to tell
    originals = window.kept
    managed_by = ownership.target_managed_by(
        hpa.metadata, None, provisional=originals.provisional, noted=originals.owners
    )
    cycle.emit(
        events.apply_event(
            cluster_id=cycle.cluster_id,
            window=window,
            provisional=originals.provisional,
            managed_by=managed_by,
            now=cycle.now,
        )
    )
