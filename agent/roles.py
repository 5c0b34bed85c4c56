"""The producers a process runs, by role: discovery (the collector) and scaling (the job).

Each plugs into the process as a `Role`: it starts, stops (what it holds reaches the outbox
first), and reports its health. Both reach the cluster `target` through the one client
(`kube.api`), each with its own connection pool.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable
from typing import Protocol

from agent import exits
from agent.config import ConfigError, Settings
from agent.delivery import Delivery
from agent.discovery import DiscoveryRole
from agent.scaling import ScalingRole
from kube.cluster import KubeTarget
from runtime.health import HealthReporter
from runtime.sqlite_file import UnusableFile
from shipper.records import DISCOVERY, SCALING


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
    dry_run: bool,
) -> list[Role]:
    """The roles of `settings.role` (not started). Raises `exits.Failure`."""
    roles: list[Role] = []
    try:
        if DISCOVERY in settings.streams:
            roles.append(
                DiscoveryRole(
                    settings.discovery,
                    identity=settings.identity,
                    kube=settings.kube,
                    queue_dir=settings.outbox.queue_dir,
                    target=target,
                    outbox=delivery.outbox[DISCOVERY],
                    client=delivery.clients[DISCOVERY],
                )
            )
        if SCALING in settings.streams:
            roles.append(
                ScalingRole(
                    settings.scaling,
                    kube=settings.kube,
                    filters=settings.filters,
                    cluster_id=settings.identity.cluster_id,
                    queue_dir=settings.outbox.queue_dir,
                    target=target,
                    outbox=delivery.outbox[SCALING],
                    api=delivery.clients[SCALING],
                    dry_run=dry_run,
                )
            )
    except (ConfigError, ValueError) as exc:
        # ConfigError names its setting; the scaling role's globs raise plain ValueError.
        where = "" if isinstance(exc, ConfigError) else "IGNORE_RESOURCES: "
        raise exits.Failure(f"{where}{exc}", exits.CANNOT_START) from None
    except UnusableFile as exc:  # a store's file, locked or read-only: it names itself
        raise exits.Failure(str(exc), exits.CANNOT_START) from None
    except sqlite3.Error as exc:  # a store's file once open (its schema): disk full, I/O
        raise exits.Failure(
            f"a store in {settings.outbox.queue_dir}: {exc}", exits.CANNOT_START
        ) from None
    return roles


def leading(roles: Iterable[Role]) -> bool | None:
    """Whether this replica collects (None: no discovery role in this process)."""
    for role in roles:
        if isinstance(role, DiscoveryRole):
            return role.leading
    return None
