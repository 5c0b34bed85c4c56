"""A damaged outbox forces a resync: `discovery.db` truncated, overwritten, emptied or
deleted while the agent was stopped, with the platform away, so every record it held was
lost although the collector's state says they were sent. The next agent says so in its log
and sends every object again, with snapshots."""

from __future__ import annotations

import signal
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from sandbox.kube import FakeKube
from sandbox.platform import FakePlatform
from tests.agent_process import log_events, queued, stop_within
from tests.conftest import view
from tests.e2e.test_restarts_e2e import populate_with_a_second_namespace
from tests.waiting import wait_until

PAGE = 4096


def truncate(db: Path) -> None:
    with db.open("r+b") as file:
        file.truncate(db.stat().st_size // 2)


def overwrite_pages(db: Path) -> None:
    """Every page after the first two: garbage (the header still says SQLite)."""
    size = db.stat().st_size
    with db.open("r+b") as file:
        file.seek(2 * PAGE)
        file.write(b"\xa5" * (size - 2 * PAGE))


def empty(db: Path) -> None:
    db.write_bytes(b"")


def delete(db: Path) -> None:
    for path in (db, db.with_name(db.name + "-wal"), db.with_name(db.name + "-shm")):
        path.unlink(missing_ok=True)


DAMAGE: dict[str, Callable[[Path], None]] = {
    "truncated": truncate,
    "pages overwritten": overwrite_pages,
    "zero length": empty,
    "deleted": delete,
}
SAID = {
    "truncated": "queue_file_quarantined",
    "pages overwritten": "queue_file_quarantined",
    "zero length": "queue_file_empty",
    "deleted": "outbox_replaced",
}


def queued_slots(queue: Path) -> set[tuple[str, str]]:
    return {(r["kind"], r["key"]) for r in queued(queue) if r["op"] == "upsert"}


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_every_object_reaches_the_platform_after_the_outbox_was_damaged(
    damage: str,
    kube: FakeKube,
    platform: FakePlatform,
    discovery_agents: Callable[[], subprocess.Popen[str]],
    discovery_env: dict[str, str],
) -> None:
    expected = populate_with_a_second_namespace(kube)
    queue = Path(discovery_env["QUEUE_DIR"])
    discovery_env["SHUTDOWN_SHIP_SECONDS"] = "0"  # the platform is away: no need to try
    platform.down()
    agent = discovery_agents()
    # Every object is queued, and the collector's state says so; none reached the platform.
    wait_until(lambda: expected <= queued_slots(queue), timeout=30)
    agent.send_signal(signal.SIGTERM)
    stop_within(agent, 30)
    DAMAGE[damage](queue / "discovery.db")

    platform.up()
    agent = discovery_agents()
    wait_until(lambda: set(view(platform)) == expected, timeout=30)
    agent.send_signal(signal.SIGTERM)
    events = {str(line["event"]): line for line in log_events(stop_within(agent, 30))}
    assert SAID[damage] in events
    assert "outbox_replaced" in events  # the state described another file: resync
    if SAID[damage] == "queue_file_quarantined":
        assert isinstance(events["queue_file_quarantined"]["records_lost"], int)
