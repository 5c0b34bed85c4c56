"""Leader election on a coordination.k8s.io Lease: only one discovery replica collects.

Every `retry_seconds` the elector reads the Lease and either renews it (we hold it), takes
it (nobody holds it, or the holder has not renewed for `lease_seconds` as measured on our
own clock, so clock skew between nodes does not matter), or leaves it alone. Writes carry
the Lease's resourceVersion, so two replicas racing for it cannot both win.

Leadership ends at once when another holder is seen, or when renewing has failed for
`renew_deadline_seconds` (shorter than the lease, so we stop before anyone else may start).
`stop()` releases a held Lease so a successor does not wait out the lease. If the elector's
thread dies, it reports unhealthy and calls `on_stopped` first: a replica that cannot renew
must not keep collecting. A 403 on the Lease (RBAC or a policy refuses its get, create or
update) degrades the elector with the refused permission as its reason, logged once.

As client-go's elector does (`tools/leaderelection/leaderelection.go`): an update sends the
Lease as read with only the election fields changed, so labels, annotations and fields this
code does not know (`spec.strategy`, `spec.preferredHolder`) survive; a 409 reads the Lease
again and tries once more; a replica that does not lead waits the retry period with a jitter
factor of 1.2 (`wait.JitterUntil`), so replicas started together do not race in step; a
release clears the holder, sets `leaseDurationSeconds` to 1 and both times to now. Times are
MicroTime (`2026-12-04T12:00:00.000000Z`): a real server refuses them without microseconds.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import msgspec
import structlog

from collector.resources import LEASES
from kube.api import KubeApi
from kube.errors import Conflict, Forbidden, KubeError, NotFound
from runtime.health import Health, HealthReporter

log = structlog.get_logger("collector.leader")


@dataclass(frozen=True, slots=True)
class Acquisition:
    """How this replica's current term began. Every change of holder increments the Lease's
    `leaseTransitions`; a replica that wrote `transitions` when it last led and finds the
    same count when it leads again knows nobody else led in between."""

    transitions_before: int | None  # None: there was no Lease
    transitions: int


class NamespaceMissing(KubeError):
    """The Lease cannot be created: its namespace does not exist."""


@dataclass(frozen=True, slots=True, kw_only=True)
class LeaseSettings:
    namespace: str = ""
    """Where the Lease lives; filled in by the discovery role."""
    identity: str = ""
    """This replica's name in the Lease; filled in by the discovery role."""
    name: str = "moonin-discovery-leader"
    lease_seconds: float = 15.0
    renew_deadline_seconds: float = 10.0
    retry_seconds: float = 2.0


class _LeaseSpec(msgspec.Struct, rename="camel", gc=False):
    holder_identity: str | None = None
    lease_duration_seconds: int | None = None
    acquire_time: str | None = None
    renew_time: str | None = None
    lease_transitions: int | None = None


class _LeaseMeta(msgspec.Struct, rename="camel", gc=False):
    resource_version: str = ""


class _Lease(msgspec.Struct, gc=False):
    metadata: _LeaseMeta = msgspec.field(default_factory=_LeaseMeta)
    spec: _LeaseSpec = msgspec.field(default_factory=_LeaseSpec)


@dataclass(frozen=True, slots=True)
class _ReadLease:
    """A Lease as the server sent it (`raw`, written back with only the election fields
    changed) and the election fields read from it."""

    raw: dict[str, Any]
    lease: _Lease

    @property
    def spec(self) -> _LeaseSpec:
        return self.lease.spec


# client-go's `JitterFactor`: a replica that does not lead waits up to 2.2 retry periods.
JITTER_FACTOR = 1.2


def micro_time(moment: datetime | None = None) -> str:
    """A Kubernetes MicroTime: UTC, always six fractional digits, `Z`."""
    return (moment or datetime.now(UTC)).astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def lease_duration_seconds(seconds: float) -> int:
    """Whole seconds as client-go writes them (`LeaseDuration / time.Second`), at least 1:
    the API refuses 0."""
    return max(1, int(seconds))


class LeaderElector:
    def __init__(
        self,
        api: KubeApi,
        settings: LeaseSettings,
        *,
        on_started: Callable[[], None],
        on_stopped: Callable[[], None],
    ) -> None:
        self.api = api
        self.settings = settings
        # A Lease request that has not ended by the renew deadline is no use any more:
        # leadership would be lost by then anyway.
        self._request_seconds = settings.renew_deadline_seconds
        # A round is a request or two, each within the renew deadline, every retry period.
        self.reporter = HealthReporter("leader", stalled_after=60 + settings.lease_seconds * 2)
        self._on_started = on_started
        self._on_stopped = on_stopped
        self._path = LEASES.namespaced_path(settings.namespace, settings.name)
        self._leader = False
        self.acquisition: Acquisition | None = None
        self._last_renewed = 0.0
        self._observed: tuple[str | None, str | None] | None = None
        self._observed_at = 0.0
        self._stopped = threading.Event()
        self._state_lock = threading.Lock()  # leadership changes: the round and the watchdog
        self._thread = threading.Thread(target=self._run, name="leader-election", daemon=True)
        # A round of two requests can take up to twice the renew deadline: the watchdog
        # ends leadership on time whatever the round is waiting for.
        self._watchdog = threading.Thread(
            target=self._watch_deadline, name="leader-deadline", daemon=True
        )

    @property
    def is_leader(self) -> bool:
        return self._leader

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def start(self) -> None:
        self._thread.start()
        self._watchdog.start()

    def stop(self) -> None:
        """Stop electing; a held Lease is released so a successor starts at once. Safe
        before `start()` too (start-up failed part way)."""
        self._stopped.set()
        if self._thread.ident is not None:
            self._thread.join(self.settings.retry_seconds * (2 + JITTER_FACTOR) + 5)
            self._watchdog.join(2)
        if self._leader:
            self._lose("stopping")
            self._release()

    # -- the loop ----------------------------------------------------------------------

    def _run(self) -> None:
        try:
            while not self._stopped.is_set():
                self._round()
                self._stopped.wait(self._retry_delay())
        except Exception:
            log.exception("leader_election_crashed")
            self.reporter.set(Health.failed("leader election thread crashed"))
            if self._leader:
                self._lose("leader election crashed")

    def _round(self) -> None:
        self.reporter.progress()
        try:
            held = self._try_acquire_or_renew()
        except Forbidden as exc:
            # RBAC (or a policy) refuses the Lease: the reason names the rule to add.
            held = False
            if self.reporter.set(Health.forbidden(exc.denied)):
                log.error("lease_forbidden", permission=exc.denied, error=str(exc))
        except KubeError as exc:
            held = False
            if exc.status in (400, 422) or isinstance(exc, NamespaceMissing):
                # The server refused what we wrote (a field it does not know, a bad value,
                # a namespace that does not exist): not an outage; waiting will not fix it.
                if self.reporter.set(Health.degraded(f"the lease write was refused: {exc}")):
                    log.error("lease_write_refused", status=exc.status, error=str(exc))
            elif self.reporter.set(Health.degraded(f"cannot reach the lease: {exc}")):
                log.warning("lease_unreachable", error=str(exc))
        else:
            self.reporter.set(Health.healthy())
        if held:
            with self._state_lock:
                self._last_renewed = time.monotonic()
                acquired = not self._leader
                self._leader = True
            if acquired:
                self.reporter.count("leadership_acquired")
                log.info("leadership_acquired", identity=self.settings.identity)
                self._on_started()
        elif self._overdue():
            self._lose("renew deadline passed")

    def _retry_delay(self) -> float:
        """The renewing leader keeps the plain period; the others add jitter."""
        period = self.settings.retry_seconds
        if self._leader:
            return period
        return period * (1 + random.random() * JITTER_FACTOR)

    def _watch_deadline(self) -> None:
        period = min(1.0, self.settings.renew_deadline_seconds / 10)
        while not self._stopped.wait(period):
            if self._overdue():
                self._lose("renew deadline passed")

    def _overdue(self) -> bool:
        """Leading, but not renewed within the renew deadline (shorter than the lease, so
        this replica stops before another may take over)."""
        with self._state_lock:
            since = time.monotonic() - self._last_renewed
            return self._leader and since > self.settings.renew_deadline_seconds

    def _try_acquire_or_renew(self) -> bool:
        """One attempt, and one more on fresh state when another write won the race."""
        try:
            return self._attempt()
        except Conflict:
            self.reporter.count("lease_conflicts")
        try:
            return self._attempt()
        except Conflict:
            return False  # someone else keeps writing; look again next round

    def _attempt(self) -> bool:
        try:
            read = self._read_lease()
        except NotFound:
            return self._take(None, transitions=0)
        spec = read.spec
        me = self.settings.identity
        record = (spec.holder_identity, spec.renew_time)
        if record != self._observed:
            self._observed, self._observed_at = record, time.monotonic()
        held_by_other = bool(spec.holder_identity) and spec.holder_identity != me
        duration = spec.lease_duration_seconds or self.settings.lease_seconds
        if held_by_other and time.monotonic() - self._observed_at < duration:
            if self._leader:
                self._lose(f"the lease is held by {spec.holder_identity}")
            return False
        transitions = (spec.lease_transitions or 0) + (0 if spec.holder_identity == me else 1)
        return self._take(read, transitions=transitions)

    def _read_lease(self) -> _ReadLease:
        raw = msgspec.json.decode(self.api.get(self._path, within=self._request_seconds))
        if not isinstance(raw, dict):
            raise KubeError(f"GET {self._path}: the answer is not an object")
        return _ReadLease(raw=raw, lease=msgspec.convert(raw, _Lease))

    def _take(self, read: _ReadLease | None, *, transitions: int) -> bool:
        """Write the Lease; on acquiring (not renewing) note the transitions it had before.
        Raises `Conflict` when another write won."""
        self._write(read, transitions=transitions)
        if not self._leader:
            before = None if read is None else (read.spec.lease_transitions or 0)
            self.acquisition = Acquisition(transitions_before=before, transitions=transitions)
        return True

    def _write(self, read: _ReadLease | None, *, transitions: int) -> None:
        """Create the Lease, or update it as read, with us as holder."""
        now = micro_time()
        renewing = read is not None and read.spec.holder_identity == self.settings.identity
        election = {
            "holderIdentity": self.settings.identity,
            "leaseDurationSeconds": lease_duration_seconds(self.settings.lease_seconds),
            "acquireTime": read.spec.acquire_time if renewing and read else now,
            "renewTime": now,
            "leaseTransitions": transitions,
        }
        if read is None:
            body: dict[str, Any] = {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": self.settings.name, "namespace": self.settings.namespace},
                "spec": election,
            }
            try:
                self.api.post(
                    LEASES.namespaced_path(self.settings.namespace),
                    body,
                    within=self._request_seconds,
                )
            except NotFound as exc:
                # A create is a 404 only when its namespace does not exist.
                raise NamespaceMissing(
                    f"namespace {self.settings.namespace!r} not found (is POD_NAMESPACE "
                    f"right?): {exc}",
                    status=404,
                ) from exc
        else:
            self.api.put(self._path, _changed(read, election), within=self._request_seconds)

    def _lose(self, why: str) -> None:
        with self._state_lock:
            if not self._leader:
                return  # the round and the watchdog may both find it lost
            self._leader = False
        self.reporter.count("leadership_lost")
        log.warning("leadership_lost", identity=self.settings.identity, reason=why)
        self._on_stopped()

    def _release(self) -> None:
        try:
            read = self._read_lease()
            if read.spec.holder_identity != self.settings.identity:
                return
            now = micro_time()
            released = {
                "holderIdentity": "",
                "leaseDurationSeconds": 1,
                "acquireTime": now,
                "renewTime": now,
                "leaseTransitions": read.spec.lease_transitions or 0,
            }
            self.api.put(self._path, _changed(read, released), within=self._request_seconds)
            log.info("lease_released", identity=self.settings.identity)
        except KubeError as exc:
            denied = exc.denied if isinstance(exc, Forbidden) else None
            log.warning("lease_release_failed", error=str(exc), permission=denied)


def _changed(read: _ReadLease, election: dict[str, Any]) -> dict[str, Any]:
    """The Lease as read (its resourceVersion included, so a stale write is a 409) with the
    election fields replaced and everything else as it was."""
    body = dict(read.raw)
    body["apiVersion"] = "coordination.k8s.io/v1"
    body["kind"] = "Lease"
    spec = body.get("spec")
    body["spec"] = {**(spec if isinstance(spec, dict) else {}), **election}
    return body
