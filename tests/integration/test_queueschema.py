"""persist-queue's private table, held to what the outbox expects of it.

The outbox reads and deletes rows in persist-queue's table itself (`shipper.queueschema`
says why). These tests fail when an upgrade changes that table or its status values, and
show that a running agent and the queue commands refuse such a file in one line rather
than delivering nothing.
"""

from __future__ import annotations

import sqlite3
import tomllib
from contextlib import closing
from importlib import metadata
from pathlib import Path

import persistqueue
import pytest
from packaging.requirements import Requirement
from persistqueue.sqlackqueue import AckStatus

from agent.cli import main
from shipper import queueschema
from shipper.outbox import Outbox
from shipper.queuefile import QueueFileError
from shipper.records import DISCOVERY

ROOT = Path(__file__).resolve().parents[2]


def test_the_installed_persist_queue_makes_exactly_the_table_the_outbox_expects(
    tmp_path: Path,
) -> None:
    queue = persistqueue.SQLiteAckQueue(
        str(tmp_path), name=queueschema.QUEUE_NAME, db_file_name="probe.db"
    )
    queue.close()
    with closing(sqlite3.connect(tmp_path / "probe.db")) as conn:
        table = queueschema.tables(conn)[queueschema.QUEUE_TABLE]
        assert table == queueschema.QUEUE_TABLE_SQL
        assert queueschema.mismatch(conn) is None
    assert queueschema.installed_statuses() == queueschema.ACK_STATUSES


def test_persist_queue_is_pinned_to_the_version_these_tests_ran_with() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    (pin,) = [
        Requirement(dependency)
        for dependency in project["dependencies"]
        if Requirement(dependency).name == "persist-queue"
    ]
    installed = metadata.version("persist-queue")
    assert pin.specifier.contains(installed)
    assert installed == queueschema.PERSIST_QUEUE_TESTED
    assert str(pin.specifier) == f"=={queueschema.PERSIST_QUEUE_TESTED}"


def _file_with_other_columns(directory: Path) -> Path:
    """A stream file as a persist-queue that added a column to its table would leave it."""
    path = directory / f"{DISCOVERY}.db"
    with closing(sqlite3.connect(path)) as conn, conn:
        conn.execute(
            f"CREATE TABLE {queueschema.QUEUE_TABLE} (_id INTEGER PRIMARY KEY AUTOINCREMENT,"
            " data BLOB, timestamp FLOAT, status INTEGER, priority INTEGER)"
        )
    return path


def test_the_outbox_refuses_a_file_whose_queue_table_has_other_columns(tmp_path: Path) -> None:
    path = _file_with_other_columns(tmp_path)
    with pytest.raises(QueueFileError) as refused:
        Outbox(tmp_path)
    message = str(refused.value)
    assert "\n" not in message
    version = metadata.version("persist-queue")
    assert message.startswith(f"queue file {path} does not match persist-queue {version}: ")
    assert message.endswith(f"(the outbox is tested with persist-queue {version})")
    assert "priority INTEGER" in message and "the outbox expects" in message
    assert not list(tmp_path.glob("*.corrupt-*"))  # refused, not thrown away


def test_the_outbox_refuses_a_persist_queue_whose_ack_statuses_differ(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(AckStatus, "acked", "6")
    with pytest.raises(QueueFileError, match=r"its ack statuses are .*'acked': 6"):
        Outbox(tmp_path)


def test_the_outbox_refuses_a_persist_queue_that_names_its_table_otherwise(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(persistqueue.SQLiteAckQueue, "_TABLE_NAME", "ack_queue_v2")
    refused = r"has no table ack_queue_outbox \(tables: ack_queue_v2_outbox"
    with pytest.raises(QueueFileError, match=refused):
        Outbox(tmp_path)


@pytest.mark.parametrize("command", ["stats", "peek", "dead-letters"])
def test_the_queue_commands_refuse_a_file_whose_queue_table_has_other_columns(
    tmp_path: Path, command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _file_with_other_columns(tmp_path)
    assert main(["queue", command, "--queue-dir", str(tmp_path)]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.startswith(f"moonin-agent: queue file {path} does not match persist-queue ")
    assert err.count("\n") == 1 and "priority INTEGER" in err
