"""The outbox of a process and the shippers that empty it, one per stream of its role.

`open_delivery` opens the queue directory (owned by this process alone) and builds an API
client and a shipper per stream, from the settings' groups as they are; nothing runs until
`Delivery.start`. `Delivery.stop` drains every stream in parallel for a bounded time: what
is still queued then waits on disk for the next start.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

import structlog

from agent.config import Settings, api_url_for
from runtime.health import HealthReporter
from shipper.client import ApiClient, RequestObserver
from shipper.outbox import Outbox
from shipper.queuefile import StreamStats
from shipper.records import DISCOVERY
from shipper.shipper import StreamShipper
from shipper.token import TokenSource

log = structlog.get_logger("agent")


@dataclass
class Delivery:
    """The outbox of a process and the shippers that empty it, one per stream."""

    outbox: Outbox
    shippers: dict[str, StreamShipper]
    clients: dict[str, ApiClient] = field(default_factory=dict)

    def start(self) -> None:
        for shipper in self.shippers.values():
            shipper.start()

    def stop(self, *, drain_seconds: float) -> None:
        """Drain every stream in parallel for at most `drain_seconds`, then close."""
        deadline = time.monotonic() + drain_seconds
        stoppers = [
            threading.Thread(
                target=shipper.stop, kwargs={"drain_seconds": drain_seconds}, daemon=True
            )
            for shipper in self.shippers.values()
        ]
        for stopper in stoppers:
            stopper.start()
        for stopper in stoppers:
            stopper.join(max(0.0, deadline - time.monotonic()) + 2)
        busy = [name for name, shipper in self.shippers.items() if shipper.alive]
        if busy:
            # A request is still in flight: its batch stays unacked and goes out next start.
            log.warning("shutdown_with_request_in_flight", streams=busy)
            return
        for client in self.clients.values():
            client.close()
        self.outbox.close()

    def reporters(self) -> list[HealthReporter]:
        return [
            *(stream.reporter for stream in self.outbox.streams.values()),
            *(shipper.reporter for shipper in self.shippers.values()),
        ]

    def queues(self) -> dict[str, StreamStats]:
        return {name: stream.stats() for name, stream in self.outbox.streams.items()}


def open_delivery(
    settings: Settings, token: TokenSource, *, observe: RequestObserver | None = None
) -> Delivery:
    """Open the queue directory and build a shipper per stream of the role (not started).

    Raises `QueueDirectoryBusy` or `QueueFileError` when the directory cannot be owned.
    """
    outbox = Outbox(
        settings.outbox.queue_dir, streams=settings.streams, bounds=settings.outbox.bounds
    )
    delivery = Delivery(outbox=outbox, shippers={})
    for stream in settings.streams:
        client = ApiClient(
            base_url=api_url_for(settings, stream),
            project_id=settings.identity.project_id,
            cluster_id=settings.identity.cluster_id,
            token=token,
            settings=settings.api.client,
            observe=observe,
        )
        delivery.clients[stream] = client
        post = client.post_records if stream == DISCOVERY else client.post_events
        delivery.shippers[stream] = StreamShipper(
            outbox[stream], post, settings=settings.outbox.shipping
        )
    return delivery
