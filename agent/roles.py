"""The producers a process runs, by role: discovery (the collector) and scaling (the job).

Each plugs into the process as a `Role`: it starts, stops (what it holds reaches the outbox
first), and reports its health. The scaling role is imported only by a process that
scales: the kubernetes client it needs costs ~45 MiB (see docs/collector.md).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable
from typing import TYPE_CHECKING, Protocol

from agent import exits
from agent.config import ConfigError, Settings
from agent.delivery import Delivery
from agent.discovery import DiscoveryRole
from kube.cluster import KubeTarget
from runtime.health import HealthReporter
from runtime.sqlite_file import UnusableFile
from shipper.records import DISCOVERY, SCALING

if TYPE_CHECKING:
    from kubernetes import client


class Role(Protocol):
    """A producer of records or events the process runs (discovery, scaling)."""

    def start(self) -> None: ...

    def stop(self) -> None:
        """Stop producing; what it holds reaches the outbox before this returns."""

    def reporters(self) -> list[HealthReporter]: ...

    def problems(self) -> list[str]:
        """What liveness should fail on beyond its components' health."""


def build_roles(
    settings: Settings,
    delivery: Delivery,
    *,
    target: KubeTarget,
    kube: client.ApiClient | None,
    dry_run: bool,
) -> list[Role]:
    """The roles of `settings.role` (not started); `kube` is the scaling role's client, None
    when the process does not scale. Raises `exits.Failure`."""
    roles: list[Role] = []
    try:
        if DISCOVERY in settings.streams:
            roles.append(
                DiscoveryRole(
                    settings,
                    target=target,
                    outbox=delivery.outbox[DISCOVERY],
                    client=delivery.clients[DISCOVERY],
                )
            )
        if kube is not None:
            from agent.scaling import ScalingRole

            roles.append(
                ScalingRole(
                    settings,
                    kube=kube,
                    outbox=delivery.outbox[SCALING],
                    api=delivery.clients[SCALING],
                    dry_run=dry_run,
                )
            )
    except (ConfigError, ValueError) as exc:
        # ConfigError names its setting; the scaling role's globs raise plain ValueError.
        where = "" if isinstance(exc, ConfigError) else "IGNORE_RESOURCES: "
        raise exits.Failure(f"{where}{exc}", exits.CANNOT_START) from None
    except (sqlite3.Error, UnusableFile) as exc:  # the scaling store: locked, read-only, disk full
        raise exits.Failure(
            f"scaling store in {settings.queue_dir}: {exc}", exits.CANNOT_START
        ) from None
    return roles


def leading(roles: Iterable[Role]) -> bool | None:
    """Whether this replica collects (None: no discovery role in this process)."""
    for role in roles:
        if isinstance(role, DiscoveryRole):
            return role.leading
    return None
