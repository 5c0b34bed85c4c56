"""The discovery role: leadership, one collector per leadership term, and the heartbeat.

With leader election on (in a pod, or `LEADER_ELECTION=true`) a replica collects only
while it holds the Lease; losing it stops the collector and the heartbeat at once, and a
new term starts from a fresh collector. Without election the term starts right away.

The collector's state store (beside the outbox) carries over into a new term only when it
still describes what the platform has: always without election, and with it only when no
other replica led since this one did (`led_last`). Otherwise the term forgets it and
sends everything, with snapshots. It also names the outbox file its records went into (the
file's epoch): when the outbox is another file now (deleted, emptied or quarantined since),
the records the store says were sent may never have left, and the term resyncs, as the
platform's `resync` request would (`outbox_replaced`).
"""

from __future__ import annotations

import dataclasses
import socket
import threading
import time
from pathlib import Path

import structlog

from agent.config import ConfigError, IdentitySettings, KubeSettings
from collector.collector import Collector
from collector.heartbeat import Heartbeat
from collector.leader import Acquisition, LeaderElector
from collector.metadata import MetadataProbe
from collector.settings import DiscoverySettings
from collector.state import StateStore
from kube.api import KubeApi
from kube.cluster import SERVICE_ACCOUNT_DIR, KubeTarget
from runtime.health import HealthReporter
from shipper.client import ApiClient
from shipper.outbox import StreamOutbox

log = structlog.get_logger("agent.discovery")

# Losing the Lease stops the collector at once; this long without it means it did not.
LOST_LEASE_GRACE_SECONDS = 10.0
LEASE_MARK = "lease_transitions"
OUTBOX_MARK = "outbox_epoch"


def lease_namespace(identity: IdentitySettings, target: KubeTarget) -> str:
    """POD_NAMESPACE, else the namespace of the pod's service account (the one the cluster
    target was read from, in a pod)."""
    if identity.pod_namespace:
        return identity.pod_namespace
    try:
        return ((target.service_account or SERVICE_ACCOUNT_DIR) / "namespace").read_text().strip()
    except OSError:
        raise ConfigError(
            "POD_NAMESPACE: required for leader election (the Lease lives there)"
        ) from None


def led_last(mark: str | None, acquired: Acquisition | None) -> bool:
    """Whether this replica led the cluster last, so its collector's store (which holds
    `mark`: the Lease's transition count when it last began a term) is what the platform
    got from it. Every change of holder increments the count, so finding it unchanged when
    taking the Lease means nobody else led in between."""
    if acquired is None or acquired.transitions_before is None or mark is None:
        return False
    return mark == str(acquired.transitions_before)


class DiscoveryRole:
    def __init__(
        self,
        settings: DiscoverySettings,
        *,
        identity: IdentitySettings,
        kube: KubeSettings,
        queue_dir: str,
        target: KubeTarget,
        outbox: StreamOutbox,
        client: ApiClient,
    ) -> None:
        self.settings = settings
        self.api = KubeApi(target, deadline_seconds=kube.deadline_seconds)
        self.outbox = outbox
        self.client = client
        self.identity = identity.pod_name or socket.gethostname()
        # The collector's per-object state sits beside the outbox, on the same volume.
        self.collector_settings = dataclasses.replace(
            settings.collector, state_file=Path(queue_dir) / "collector-state.sqlite"
        )
        # Cloud metadata endpoints are asked only from inside the cluster, unless configured.
        ask_cloud = settings.cloud_metadata
        self.probe = MetadataProbe(enabled=target.in_cluster if ask_cloud is None else ask_cloud)
        self._term_lock = threading.Lock()
        self._unled_since: float | None = None
        self.collector: Collector | None = None
        self.heartbeat: Heartbeat | None = None
        elect = settings.leader_election
        if elect is None:
            elect = target.in_cluster
        self.elector: LeaderElector | None = None
        if elect:
            self.elector = LeaderElector(
                self.api,
                dataclasses.replace(
                    settings.lease,
                    namespace=lease_namespace(identity, target),
                    identity=self.identity,
                ),
                on_started=self._start_term,
                on_stopped=self._stop_term,
            )

    def start(self) -> None:
        if self.elector is not None:
            log.info("leader_election_started", identity=self.identity)
            self.elector.start()
        else:
            self._start_term()

    def stop(self) -> None:
        """Stop collecting (what is buffered reaches the outbox) and release the Lease."""
        if self.elector is not None:
            self.elector.stop()
        self._stop_term()
        self.api.close()

    @property
    def leading(self) -> bool:
        """Whether this replica collects now (always, without leader election)."""
        return self.elector is None or self.elector.is_leader

    def problems(self) -> list[str]:
        """Beyond component health, what liveness fails on: collecting without the Lease."""
        with self._term_lock:
            collecting = self.collector is not None
        if collecting and not self.leading:
            since = self._unled_since = self._unled_since or time.monotonic()
            if time.monotonic() - since > LOST_LEASE_GRACE_SECONDS:
                return ["discovery: still collecting after losing the Lease"]
        else:
            self._unled_since = None
        return []

    def reporters(self) -> list[HealthReporter]:
        found: list[HealthReporter] = []
        if self.elector is not None:
            found.append(self.elector.reporter)
        with self._term_lock:
            if self.collector is not None:
                found.extend(self.collector.reporters())
            if self.heartbeat is not None:
                found.append(self.heartbeat.reporter)
        return found

    def _start_term(self) -> None:
        with self._term_lock:
            if self.collector is not None:
                return
            collector = Collector(self.api, self.outbox, settings=self.collector_settings)
            carried_over = self._state_carries_over(collector.state)
            if not carried_over:
                collector.state.forget_all()  # this term sends everything, with snapshots
            self._check_outbox(collector.state, carried_over=carried_over)
            heartbeat = Heartbeat(
                self.client,
                lambda: collector.cluster_metadata(self.probe, leader=self.identity),
                collector.resync,
                interval=self.settings.heartbeat_seconds,
                ready=collector.nodes_known,
            )
            self.collector, self.heartbeat = collector, heartbeat
        collector.start()
        heartbeat.start()
        log.info("collection_started", identity=self.identity)

    def _state_carries_over(self, state: StateStore) -> bool:
        if self.elector is None:
            return True  # without election this process is the cluster's only collector
        acquired = self.elector.acquisition
        ours = led_last(state.get_mark(LEASE_MARK), acquired)
        if acquired is not None:
            state.set_mark(LEASE_MARK, str(acquired.transitions))
        log.info("collector_state", carried_over=ours)
        return ours

    def _check_outbox(self, state: StateStore, *, carried_over: bool) -> None:
        """Resync when the store describes what went into another outbox file. The mark
        goes on the outbox first: a crash in between finds it and resyncs all the same."""
        put_into = state.get_mark(OUTBOX_MARK)
        if put_into == self.outbox.epoch:
            return  # nothing to write: a start on a full disk is not made to write
        if carried_over and put_into is not None:
            log.warning("outbox_replaced", stream=self.outbox.stream, resync=True)
            self.outbox.request_resync()
        state.set_mark(OUTBOX_MARK, self.outbox.epoch)

    def _stop_term(self) -> None:
        with self._term_lock:
            collector, heartbeat = self.collector, self.heartbeat
            self.collector = self.heartbeat = None
        if heartbeat is not None:
            heartbeat.stop()
        if collector is not None:
            collector.stop()
            log.info("collection_stopped", identity=self.identity)
