"""One reconcile cycle of the scaling role: templates, activations, applies, the revert scan.

`Reconciler.run_once` does, in order:
1. GET the templates and evaluate each (`scheduler.window`); an invalid one is reported
   once per distinct invalid value (a template-level error event).
2. For each active template, GET its actions; an invalid action is an `invalid_action`
   error. Valid actions of all active templates are applied in `priority_up` order (then
   template order, then action order), so when two windows want the same Deployment the
   lower `priority_up` wins and the other reports a `conflict`.
3. List every HPA of the cluster; for each managed one, in `priority_down` order: put its
   apply event into the outbox again unless the local store has it (crash recovery), then
   revert it if its window is over (`scheduler.view.revert_reason`).
4. Finish Deployment restores a crash or a 409 left half done; commit the store.

While the scaling API is unreachable (any `shipper.errors` failure on the templates GET)
nothing new is applied, and only windows whose `run-until` has passed are reverted (and
HPAs someone else changed are released). While the scaling outbox is at its bound nothing
new is applied either, and no error events are put, but reverts go on.

How it fails: `run_once` never raises for a Kubernetes or Moonin failure of one action or
one HPA: it logs it, counts it on the reporter, and carries on with the next; the next
cycle retries. It raises only for a programming error or a local store it cannot write.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

import structlog
from kubernetes import client

from scheduler import actions as action_rules
from scheduler import annotations as notes
from scheduler import events
from scheduler.apply import Planned, action_error, apply_action
from scheduler.cycle import Cycle, EventSink
from scheduler.ignore import IgnoreRules
from scheduler.kubeapi import Conflict, KubeApi, KubeError, Obj
from scheduler.revert import bounds, finish_restores, is_overridden, revert, target_name
from scheduler.store import Store
from scheduler.templates import Template
from scheduler.view import TemplateState, TemplateView, read_templates, revert_reason
from shipper.errors import MooninAPIError
from shipper.health import Health, HealthReporter

log = structlog.get_logger("scheduler")

COMPONENT = "scheduler"


class TemplateSource(Protocol):
    """What the reconciler needs of `shipper.client.ApiClient`."""

    def get_templates(self) -> list[Any]: ...

    def get_actions(self, template_id: str) -> list[Any]: ...


@dataclass(frozen=True, slots=True)
class CycleReport:
    """What one cycle did. `applies`/`reverts` count windows newly applied or reverted,
    `errors` error events newly reported, `failures` Kubernetes calls that failed (409s
    are `conflicts`, retried next cycle)."""

    applies: int
    reverts: int
    errors: int
    failures: int
    conflicts: int
    moonin_reachable: bool
    kube_reachable: bool


class Reconciler:
    def __init__(
        self,
        *,
        kube: KubeApi | client.ApiClient,
        api: TemplateSource,
        outbox: EventSink,
        store: Store,
        cluster_id: str,
        ignore: IgnoreRules | Iterable[str] = (),
        reporter: HealthReporter | None = None,
    ) -> None:
        self.kube = kube if isinstance(kube, KubeApi) else KubeApi(kube)
        self.api = api
        self.outbox = outbox
        self.store = store
        self.cluster_id = cluster_id
        self.ignore = ignore if isinstance(ignore, IgnoreRules) else IgnoreRules(ignore)
        self.reporter = reporter or HealthReporter(COMPONENT)
        # Windows skipped for their released marker that this process has logged: the
        # marker skips them on every cycle, the log says so once.
        self._released_noted: set[tuple[str, str, str]] = set()

    def run_once(self, now: datetime | None = None) -> CycleReport:
        """One full cycle at `now` (an aware datetime; default: the current time)."""
        now = datetime.now(UTC) if now is None else now
        if now.utcoffset() is None:
            raise ValueError("now must be an aware datetime")
        cycle = Cycle(
            kube=self.kube,
            outbox=self.outbox,
            store=self.store,
            cluster_id=self.cluster_id,
            now=now.astimezone(UTC),
            reporter=self.reporter,
        )
        cycle.count("cycles")
        if self.outbox.resync_needed:
            # The scaling queue file was damaged and set aside: events the store counts as
            # enqueued may be gone. Forgetting them re-enqueues every managed window's apply
            # event this cycle (the platform de-duplicates by id).
            log.warning("scaling_queue_lost_events", action="re-enqueueing apply events")
            self.store.forget_enqueued()
            self.outbox.clear_resync_needed()
        at_bound = self.outbox.at_bound
        view = self._read_templates(cycle, report=not at_bound)
        if view is not None and not at_bound:
            for planned in self._plan(cycle, view):
                self._apply(cycle, planned, view)
        elif view is not None:
            log.warning("scaling_outbox_at_bound", applying=False)
        kube_ok = self._scan(cycle, view)
        self.store.commit()
        self._report_health(moonin_ok=view is not None, kube_ok=kube_ok, at_bound=at_bound)
        tally = cycle.tally
        return CycleReport(
            applies=tally["applies"],
            reverts=tally["reverts"],
            errors=tally["errors"],
            failures=tally["apply_failures"] + tally["revert_failures"],
            conflicts=tally["conflicts"],
            moonin_reachable=view is not None,
            kube_reachable=kube_ok,
        )

    # 1. templates ---------------------------------------------------------------------------

    def _read_templates(self, cycle: Cycle, *, report: bool) -> TemplateView | None:
        try:
            raw = self.api.get_templates()
        except MooninAPIError as exc:
            cycle.count("moonin_failures")
            log.warning("scaling_templates_unavailable", status=exc.status, error=str(exc))
            return None
        view = read_templates(raw, cycle.now)
        for problem in view.unreadable:
            log.error("scaling_template_unreadable", problem=problem)
        if report:
            for state in view.templates.values():
                if state.activation.reason == "invalid":
                    self._template_error(cycle, state)
        return view

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
        if cycle.emit(event):
            cycle.count("errors")
            log.warning(
                "scaling_template_invalid",
                template=activation.template_id,
                reason=event.reason,
                message=event.message,
            )

    # 2. actions and applies -------------------------------------------------------------------

    def _plan(self, cycle: Cycle, view: TemplateView) -> list[Planned]:
        ranked: list[tuple[tuple[int, int, int], Planned]] = []
        for rank, state in enumerate(view.templates.values()):
            template = state.template
            if not state.activation.active or not isinstance(template, Template):
                continue
            try:
                planned = self._plan_template(cycle, state, template)
            except Exception:
                # A bug must not keep the other templates from running; loud in the log.
                cycle.count("apply_failures")
                log.exception("scaling_plan_crashed", template=template.id)
                continue
            ranked.extend(
                ((item.action.priority_up, rank, position), item)
                for position, item in enumerate(planned)
            )
        ranked.sort(key=lambda item: item[0])
        return [planned for _, planned in ranked]

    def _plan_template(
        self, cycle: Cycle, state: TemplateState, template: Template
    ) -> list[Planned]:
        """The valid actions of one active template (`state.template`), in its order; an
        `error` event for each invalid one."""
        try:
            raw_actions = self.api.get_actions(template.id)
        except MooninAPIError as exc:
            # Its windows stay as they are (see TemplateView.owner_active).
            cycle.count("moonin_failures")
            log.warning(
                "scaling_actions_unavailable",
                template=template.id,
                status=exc.status,
                error=str(exc),
            )
            return []
        window_start, run_until = state.window_start or "", state.run_until or ""
        ids: set[str] = set()
        planned: list[Planned] = []
        for raw in raw_actions:
            parsed = action_rules.parse(raw)
            if parsed.id is not None:
                ids.add(parsed.id)
            if isinstance(parsed, action_rules.InvalidAction):
                action_error(
                    cycle,
                    template_id=template.id,
                    window_start=window_start,
                    run_until=run_until,
                    action=parsed,
                    reason="invalid_action",
                    message=parsed.message,
                )
                continue
            planned.append(
                Planned(
                    template_id=template.id,
                    template_name=state.name,
                    window_start=window_start,
                    run_until=run_until,
                    action=parsed,
                )
            )
        state.action_ids = frozenset(ids)
        return planned

    def _apply(self, cycle: Cycle, planned: Planned, view: TemplateView) -> None:
        def reason_for(hpa: Obj, managed: notes.Managed) -> events.RevertReason | None:
            return revert_reason(hpa, managed, cycle.now, view)

        try:
            outcome = apply_action(cycle, planned, ignore=self.ignore, reason_for=reason_for)
        except Exception:
            # A bug must not stop the other actions; it is loud in the log.
            cycle.count("apply_failures")
            log.exception(
                "scaling_apply_crashed", template=planned.template_id, action=planned.action.id
            )
            return
        if outcome == "released" and planned.owner not in self._released_noted:
            self._released_noted.add(planned.owner)
            log.info(
                "scaling_window_released",
                template=planned.template_id,
                action=planned.action.id,
                window_start=planned.window_start,
                target=planned.action.target,
                hint=f"{notes.RELEASED} keeps this window from being applied again",
            )

    # 3. the revert scan -------------------------------------------------------------------------

    def _scan(self, cycle: Cycle, view: TemplateView | None) -> bool:
        try:
            hpas = self.kube.list_hpas()
        except KubeError as exc:
            cycle.count("kube_failures")
            log.warning("scaling_hpa_list_failed", status=exc.status, error=str(exc))
            return False
        for hpa, managed in managed_hpas(hpas):
            metadata = hpa["metadata"]
            where = {"namespace": metadata["namespace"], "hpa": metadata["name"]}
            try:
                reenqueue_apply(cycle, hpa, managed)
                reason = revert_reason(hpa, managed, cycle.now, view)
                if reason is None:
                    continue
                revert(cycle, hpa, managed, reason)
            except Conflict as exc:
                cycle.count("conflicts")
                log.info("scaling_revert_conflict", error=str(exc), **where)
            except KubeError as exc:
                cycle.count("revert_failures")
                log.warning("scaling_revert_failed", status=exc.status, error=str(exc), **where)
            except Exception:
                cycle.count("revert_failures")
                log.exception("scaling_revert_crashed", **where)
        finish_restores(cycle)
        return True

    def _report_health(self, *, moonin_ok: bool, kube_ok: bool, at_bound: bool) -> None:
        if not moonin_ok:
            health = Health.degraded("scaling API unreachable: applying nothing new")
        elif not kube_ok:
            health = Health.degraded("cannot list HPAs: reverts are waiting")
        elif at_bound:
            health = Health.degraded("scaling outbox at its bound: applying nothing new")
        else:
            health = Health.healthy()
        if self.reporter.set(health):
            log.info("scheduler_health", ok=health.ok, reason=health.reason)


def managed_hpas(hpas: Iterable[Obj]) -> list[tuple[Obj, notes.Managed]]:
    """The managed HPAs, in revert order: `priority_down`, then namespace and name."""
    found = [(hpa, managed) for hpa in hpas if (managed := notes.read_managed(hpa)) is not None]
    found.sort(
        key=lambda pair: (
            pair[1].priority_down,
            pair[0]["metadata"]["namespace"],
            pair[0]["metadata"]["name"],
        )
    )
    return found


def reenqueue_apply(cycle: Cycle, hpa: Obj, managed: notes.Managed) -> None:
    """Put the window's apply event again unless the store says it is in the outbox: the
    apply write may have committed just before a crash that took the event with it."""
    if is_overridden(hpa, managed):
        return  # what the window applied is no longer on the HPA to tell
    low, high = bounds(hpa)
    if high is None:
        return
    cycle.emit(
        events.apply_event(
            cluster_id=cycle.cluster_id,
            template_id=managed.template_id,
            action_id=managed.action_id,
            namespace=hpa["metadata"]["namespace"],
            deployment=target_name(hpa) or "",
            min_replicas=low,
            max_replicas=high,
            window_start=managed.window_start,
            run_until=managed.run_until,
            provisional=managed.originals.provisional,
            now=cycle.now,
        )
    )
