"""One contract suite for every implementation of the producers' two interfaces.

`collector.coalesce.Destination` (the discovery outbox stream, the preview printer) and
`scheduler.cycle.EventSink` (the scaling outbox stream, the dry run) promise the same
things to their callers: a put hands over records in order, a fresh one is below its bound
and asks for no resync. Each test here runs against every implementation, so a new one (or
a change to one) is held to what the others do.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec
import pytest
import structlog

from agent.preview import PrintedRecords
from scheduler.dryrun import DryRunEvents
from shipper import queuefile
from shipper.outbox import Outbox
from shipper.records import (
    DISCOVERY,
    SCALING,
    Outgoing,
    Record,
    ScalingEvent,
    as_entry,
    utc_timestamp,
)


@dataclass
class Subject:
    """An implementation, what it is given, and what it has done with what it was given."""

    sink: Any  # a Destination or an EventSink: each test uses only what both declare
    make: Callable[[str], Outgoing]
    handed_over: Callable[[], list[str]]  # ids, in the order they were committed or shown
    put: Callable[[Iterable[Any]], None]  # the sink's put, of what `make` makes


def destination_put(sink: Any) -> Callable[[Iterable[Any]], None]:
    """A destination is handed records encoded, as the coalescer hands them."""
    return lambda records: sink.put_entries([as_entry(record) for record in records])


def record(ident: str) -> Record:
    return Record(
        id=ident,
        kind="deployment",
        op="upsert",
        key=f"default/{ident}",
        observed_at=utc_timestamp(),
    )


def event(ident: str) -> ScalingEvent:
    return ScalingEvent(id=ident, type="apply", template_id="t-1", occurred_at=utc_timestamp())


@contextmanager
def outbox_stream(directory: Path, stream: str) -> Iterator[Subject]:
    def queued() -> list[str]:
        conn = queuefile.open_readonly(queuefile.stream_path(directory, stream))
        try:
            return [
                msgspec.json.decode(entry.body)["id"]
                for stored in queuefile.scan_chunks(conn)
                for entry in (stored.chunk.entries if stored.chunk else ())
            ]
        finally:
            conn.close()

    with Outbox(directory, streams=(stream,)) as outbox:
        sink = outbox[stream]
        if stream == DISCOVERY:
            yield Subject(sink, record, queued, destination_put(sink))
        else:
            yield Subject(sink, event, queued, sink.put)


@contextmanager
def discovery_outbox(directory: Path) -> Iterator[Subject]:
    with outbox_stream(directory, DISCOVERY) as subject:
        yield subject


@contextmanager
def scaling_outbox(directory: Path) -> Iterator[Subject]:
    with outbox_stream(directory, SCALING) as subject:
        yield subject


@contextmanager
def preview_printer(directory: Path) -> Iterator[Subject]:
    out = io.BytesIO()

    def printed() -> list[str]:
        return [msgspec.json.decode(line)["id"] for line in out.getvalue().splitlines()]

    printer = PrintedRecords(out)
    yield Subject(printer, record, printed, destination_put(printer))


@contextmanager
def dry_run(directory: Path) -> Iterator[Subject]:
    with structlog.testing.capture_logs() as logs:
        sink = DryRunEvents()
        yield Subject(
            sink,
            event,
            lambda: [line["id"] for line in logs if line["event"] == "dry_run_event"],
            sink.put,
        )


Implementation = Callable[[Path], AbstractContextManager[Subject]]
DESTINATIONS: dict[str, Implementation] = {
    "discovery outbox": discovery_outbox,
    "preview printer": preview_printer,
}
EVENT_SINKS: dict[str, Implementation] = {
    "scaling outbox": scaling_outbox,
    "dry run": dry_run,
}


@pytest.fixture(params=[*DESTINATIONS, *EVENT_SINKS])
def subject(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Subject]:
    with {**DESTINATIONS, **EVENT_SINKS}[request.param](tmp_path) as subject:
        yield subject


@pytest.fixture(params=list(DESTINATIONS))
def destination(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Subject]:
    with DESTINATIONS[request.param](tmp_path) as subject:
        yield subject


def test_puts_hand_records_over_in_order_across_puts(subject: Subject) -> None:
    subject.put([subject.make("a"), subject.make("b")])
    subject.put([subject.make("c")])
    assert subject.handed_over() == ["a", "b", "c"]


def test_a_put_takes_any_iterable_and_reads_it_once(subject: Subject) -> None:
    subject.put(subject.make(ident) for ident in ("a", "b"))
    assert subject.handed_over() == ["a", "b"]


def test_an_empty_put_hands_over_nothing(subject: Subject) -> None:
    subject.put([])
    assert subject.handed_over() == []


def test_a_fresh_one_is_below_its_bound_and_asks_for_no_resync(subject: Subject) -> None:
    assert subject.sink.at_bound is False
    assert subject.sink.resync_needed is False


def test_clearing_the_resync_mark_leaves_it_cleared_and_puts_working(subject: Subject) -> None:
    subject.sink.clear_resync_needed()
    assert subject.sink.resync_needed is False
    subject.put([subject.make("a")])
    assert subject.handed_over() == ["a"]
    assert subject.sink.at_bound is False


def test_a_destination_reports_a_fill_between_empty_and_its_bound(destination: Subject) -> None:
    assert destination.sink.fill == 0.0
    destination.put([destination.make("a")])
    assert 0.0 <= destination.sink.fill < 1.0
