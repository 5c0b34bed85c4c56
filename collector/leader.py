"""Leader election on a coordination.k8s.io Lease: only one discovery replica collects.

Every `retry_seconds` the elector reads the Lease and either renews it (we hold it), takes
it (nobody holds it, or the holder has not renewed for `lease_seconds` as measured on our
own clock, so clock skew between nodes does not matter), or leaves it alone. Writes carry
the Lease's resourceVersion, so two replicas racing for it cannot both win.

Leadership ends at once when another holder is seen, or when renewing has failed for
`renew_deadline_seconds` (shorter than the lease, so we stop before anyone else may start).
`stop()` releases a held Lease so a successor does not wait out the lease. If the elector's
thread dies, it reports unhealthy and calls `on_stopped` first: a replica that cannot renew
must not keep collecting.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import msgspec
import structlog

from collector.kube import Conflict, KubeApi, KubeError, NotFound
from collector.resources import LEASES
from shipper.health import Health, HealthReporter

log = structlog.get_logger("collector.leader")


@dataclass(frozen=True, slots=True)
class Acquisition:
    """How this replica's current term began. Every change of holder increments the Lease's
    `leaseTransitions`; a replica that wrote `transitions` when it last led and finds the
    same count when it leads again knows nobody else led in between."""

    transitions_before: int | None  # None: there was no Lease
    transitions: int


@dataclass(frozen=True, slots=True, kw_only=True)
class LeaseSettings:
    namespace: str
    identity: str
    name: str = "moonin-discovery-leader"
    lease_seconds: float = 15.0
    renew_deadline_seconds: float = 10.0
    retry_seconds: float = 2.0


class _LeaseSpec(msgspec.Struct, rename="camel"):
    holder_identity: str | None = None
    lease_duration_seconds: int | None = None
    acquire_time: str | None = None
    renew_time: str | None = None
    lease_transitions: int | None = None


class _LeaseMeta(msgspec.Struct, rename="camel"):
    resource_version: str = ""


class _Lease(msgspec.Struct):
    metadata: _LeaseMeta = msgspec.field(default_factory=_LeaseMeta)
    spec: _LeaseSpec = msgspec.field(default_factory=_LeaseSpec)


def _micro_time() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


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
        """Stop electing; a held Lease is released so a successor starts at once."""
        self._stopped.set()
        self._thread.join(self.settings.retry_seconds * 2 + 5)
        self._watchdog.join(2)
        if self._leader:
            self._lose("stopping")
            self._release()

    # -- the loop ----------------------------------------------------------------------

    def _run(self) -> None:
        try:
            while not self._stopped.is_set():
                self._round()
                self._stopped.wait(self.settings.retry_seconds)
        except Exception:
            log.exception("leader_election_crashed")
            self.reporter.set(Health.failed("leader election thread crashed"))
            if self._leader:
                self._lose("leader election crashed")

    def _round(self) -> None:
        self.reporter.progress()
        try:
            held = self._try_acquire_or_renew()
        except KubeError as exc:
            held = False
            if self.reporter.set(Health.degraded(f"cannot reach the lease: {exc}")):
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
        try:
            lease = self._read_lease()
        except NotFound:
            return self._take(None, transitions=0)
        spec = lease.spec
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
        return self._take(lease, transitions=transitions)

    def _read_lease(self) -> _Lease:
        raw = self.api.get(self._path, within=self._request_seconds)
        return msgspec.json.decode(raw, type=_Lease)

    def _take(self, lease: _Lease | None, *, transitions: int) -> bool:
        """Write the Lease; on acquiring (not renewing) note the transitions it had before."""
        written = self._write(lease, transitions=transitions)
        if written and not self._leader:
            before = None if lease is None else (lease.spec.lease_transitions or 0)
            self.acquisition = Acquisition(transitions_before=before, transitions=transitions)
        return written

    def _write(self, lease: _Lease | None, *, transitions: int) -> bool:
        """Create or update the Lease with us as holder; False when another write won."""
        now = _micro_time()
        renewing = lease is not None and lease.spec.holder_identity == self.settings.identity
        body: dict[str, Any] = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": self.settings.name, "namespace": self.settings.namespace},
            "spec": {
                "holderIdentity": self.settings.identity,
                "leaseDurationSeconds": int(self.settings.lease_seconds),
                "acquireTime": lease.spec.acquire_time if renewing and lease else now,
                "renewTime": now,
                "leaseTransitions": transitions,
            },
        }
        try:
            if lease is None:
                self.api.post(
                    LEASES.namespaced_path(self.settings.namespace),
                    body,
                    within=self._request_seconds,
                )
            else:
                body["metadata"]["resourceVersion"] = lease.metadata.resource_version
                self.api.put(self._path, body, within=self._request_seconds)
        except Conflict:
            return False  # someone else wrote first; look again next round
        return True

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
            lease = self._read_lease()
            if lease.spec.holder_identity != self.settings.identity:
                return
            self.api.put(
                self._path,
                {
                    "apiVersion": "coordination.k8s.io/v1",
                    "kind": "Lease",
                    "metadata": {
                        "name": self.settings.name,
                        "namespace": self.settings.namespace,
                        "resourceVersion": lease.metadata.resource_version,
                    },
                    "spec": {
                        "holderIdentity": "",
                        "leaseDurationSeconds": 1,
                        "acquireTime": lease.spec.acquire_time,
                        "renewTime": _micro_time(),
                        "leaseTransitions": lease.spec.lease_transitions or 0,
                    },
                },
                within=self._request_seconds,
            )
            log.info("lease_released", identity=self.settings.identity)
        except KubeError as exc:
            log.warning("lease_release_failed", error=str(exc))
