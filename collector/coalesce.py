"""Coalescing: only records that say something new reach the outbox, once per flush window.

Normalizers produce a record for every change the API reports, most of them noise for the
platform (a status heartbeat, a resourceVersion bump). The coalescer keeps, per (kind, key),
a fingerprint of the last record it enqueued (op, uid and the normalized data) and drops a
record whose fingerprint is unchanged. Within one flush window (about a second) a burst of
changes to one object collapses into its last state. Event records (pod errors, snapshots)
are never coalesced away.

Every window its owner (the collector's processor, `collector.processor`) has the buffered
records committed to the outbox in one `put`, so a record is durable within about a second
of being observed; a burst that fills the buffer (`max_pending` records, e.g. a list page,
or `max_pending_bytes` of data offered encoded) is committed at once, within the `offer` of
the last record, which bounds the memory the buffer takes. The coalescer calls nothing of
its owner's.

Offers and flushes come from the one owner's thread, so the outbox receives a slot's
states in order, and the state store (`collector.state`: fingerprints, what each object
produced, pod error memos) is committed right after the put, holding exactly the state of
what was put: after a crash, the store never claims a record the outbox does not hold.
Fingerprints move only after the put, so a failed put is retried with the next window
rather than forgotten.

A full or failing disk (`runtime.storage_errors`) under the outbox or the state store is
waited out, not a crash: the records stay buffered for the next window and the coalescer
says it is not ready (disk full) until a put and its commit go through again; a state
store that rolled back is the collector's to repair (`collector.resync.AfterRollback`).

The outbox is anything that can `put` records and keeps a `resync_needed` mark (the
`Destination` protocol): the discovery `StreamOutbox` when running, a printer for
`moonin-agent preview`, which shows the same records without queueing them.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Collection, Sequence
from typing import Protocol

import msgspec
import structlog

from collector.model import decoded_data
from collector.state import Slot, StateStore
from runtime.health import Health, HealthReporter
from runtime.storage_errors import is_passing_storage_error
from shipper.records import Entry, Record, as_entry

_Slot = Slot | tuple[str, int]  # a record's place in the window; an event's is its number

log = structlog.get_logger("collector.coalesce")

RESYNC_BELOW_FILL = 0.5


class Destination(Protocol):
    """Where the coalescer commits records (`shipper.outbox.StreamOutbox` is one)."""

    def put_entries(self, entries: Sequence[Entry]) -> None:
        """Commit the records, encoded, in order; raise if they were not committed."""

    @property
    def at_bound(self) -> bool:
        """True while the destination is full (producers that can wait, wait)."""

    @property
    def fill(self) -> float:
        """How full the destination is against its bounds (0 empty, 1 at the bound)."""

    @property
    def resync_needed(self) -> bool:
        """True while the destination lost records and asks for full state again."""

    def clear_resync_needed(self) -> None:
        """Full state was sent again."""


_encode = msgspec.json.Encoder().encode
_encode_sorted = msgspec.json.Encoder(order="sorted").encode
# A fingerprint is this byte and a 16-byte hash. A stored one of 16 bytes alone was made by
# the earlier definition (`legacy_fingerprint`), which sorted every key first.
_VERSION = b"\x01"
_LEGACY_LENGTH = 16


def fingerprinted(record: Record) -> tuple[msgspec.Raw, bytes]:
    """The record's data encoded, and the record's fingerprint: what makes two records of
    one object equal for the platform (op, uid and data; not ids or times), the hash of
    `[op, uid, data]` encoded. The data is encoded once, for both the fingerprint and the
    entry (`entry_of`), or not at all when the record carries its JSON already (a kept
    record's: `collector.sink`). Keys are taken in the order the data holds them: a
    normalizer builds its dicts in one order, and sorts those it copies from the object
    (labels, annotations), so equal data encodes alike."""
    data = record.data
    if not isinstance(data, msgspec.Raw):
        data = msgspec.Raw(_encode(data))
    identity = _encode((record.op, record.uid, data))
    return data, _VERSION + hashlib.blake2b(identity, digest_size=16).digest()


def legacy_fingerprint(record: Record) -> bytes:
    """The fingerprint as state files written before `_VERSION` hold it: the hash of
    `[op, uid, data]` encoded with every key sorted."""
    identity = _encode_sorted((record.op, record.uid, decoded_data(record.data)))
    return hashlib.blake2b(identity, digest_size=16).digest()


def entry_of(record: Record, data: msgspec.Raw) -> Entry:
    """The record as the outbox keeps it, its data spliced in as `fingerprinted` encoded it
    (only for a record worth sending: a restart's unchanged records are never encoded)."""
    if record.data is not data:
        record = msgspec.structs.replace(record, data=data)
    return as_entry(record)


class _Worth(msgspec.Struct, frozen=True, gc=False):
    """A record worth enqueueing, as the flush keeps it until its put went through (a
    Struct: built in C, one per record, where a NamedTuple's constructor is Python)."""

    op: str
    slot: Slot
    entry: Entry
    mark: bytes


_decode_record = msgspec.json.Decoder(Record).decode


class Coalescer:
    """Offered to and flushed by one owner's thread; `empty` may be read from any."""

    def __init__(
        self,
        outbox: Destination,
        *,
        state: StateStore | None = None,
        max_pending: int = 1000,
        max_pending_bytes: int = 512 * 1024,
    ) -> None:
        """`max_pending_bytes` counts only data offered encoded (`msgspec.Raw`: a kept
        record's JSON, a few KiB each and its own, where dicts share the containers rendered
        once): a thousand Deployments' worth in the buffer raised the warm-up's peak RSS."""
        self.outbox = outbox
        self.max_pending = max_pending
        self.max_pending_bytes = max_pending_bytes
        self.reporter = HealthReporter("collector.coalesce")
        self._state = state if state is not None else StateStore()
        self._lock = threading.Lock()  # the buffer, against readers of `empty`
        self._pending: dict[_Slot, Record] = {}
        self._pending_bytes = 0
        self._event_seq = 0

    # -- producers ---------------------------------------------------------------------

    def offer(self, record: Record) -> None:
        with self._lock:
            if record.op == "event":
                self._event_seq += 1
                self._pending[("event", self._event_seq)] = record
            else:
                self._pending[(record.kind, record.key)] = record
            if isinstance(record.data, msgspec.Raw):
                self._pending_bytes += len(record.data)
            full = len(self._pending) >= self.max_pending
            full = full or self._pending_bytes >= self.max_pending_bytes
        if full:
            self.flush()

    @property
    def empty(self) -> bool:
        """Nothing buffered: every record offered so far was committed (or coalesced away)."""
        with self._lock:
            return not self._pending

    def forget_all(self) -> None:
        """Forget what was sent, so the next state of every object is enqueued (resync)."""
        with self._lock:
            self._state.sent.clear()

    # -- committing --------------------------------------------------------------------

    def flush(self) -> int:
        """Commit the buffered records worth sending; returns how many were enqueued (none
        while the disk is full or failing: they wait for the next window)."""
        try:
            return self._flush()
        except Exception as exc:
            if not is_passing_storage_error(exc):
                raise
            self.cannot_write(exc)
            return 0

    def _flush(self) -> int:
        with self._lock:
            pending, self._pending = self._pending, {}
            self._pending_bytes = 0
            try:
                worth = self._changed(pending)
            except BaseException:
                self._requeue(pending)
                raise
        self.reporter.count("records_coalesced", len(pending) - len(worth))
        pending.clear()  # encoded in `worth`: their data's dicts go before the put
        if not worth:
            return 0
        try:
            self.outbox.put_entries([kept.entry for kept in worth.values()])
        except Exception as exc:
            with self._lock:  # as they were offered (a put that fails is rare: decoded again)
                self._requeue(
                    {slot: _decode_record(kept.entry.body) for slot, kept in worth.items()}
                )
            self.cannot_write(exc)
            return 0
        with self._lock:
            self._remember(worth.values())
        self.reporter.count("records_enqueued", len(worth))
        if self.reporter.set(Health.healthy()):
            log.info("outbox_writable")
        return len(worth)

    def _changed(self, pending: dict[_Slot, Record]) -> dict[_Slot, _Worth]:
        """(`_lock` held.) The records worth sending, each with its fingerprint: every
        event, and every other record whose fingerprint is not the one last enqueued."""
        # One read for the window's records, not one per record.
        known = self._state.sent.get_many(
            (record.kind, record.key) for record in pending.values() if record.op != "event"
        )
        worth: dict[_Slot, _Worth] = {}
        renewed: list[tuple[Slot, bytes]] = []
        for slot, record in pending.items():
            data, mark = fingerprinted(record)
            record_slot = (record.kind, record.key)
            if record.op != "event":
                sent = known.get(record_slot)
                if sent == mark:
                    continue
                if (
                    sent is not None
                    and len(sent) == _LEGACY_LENGTH
                    and sent == legacy_fingerprint(record)
                ):
                    # Sent before an upgrade and unchanged since: stored anew, not re-sent.
                    renewed.append((record_slot, mark))
                    continue
            worth[slot] = _Worth(record.op, record_slot, entry_of(record, data), mark)
        if renewed:
            self._state.sent.set_many(renewed)
        return worth

    def _remember(self, enqueued: Collection[_Worth]) -> None:
        """(`_lock` held.) Commit, with the state, what was enqueued: an upsert's
        fingerprint is kept, a deleted record's forgotten."""
        sent = self._state.sent
        sent.set_many((kept.slot, kept.mark) for kept in enqueued if kept.op == "upsert")
        sent.discard_many(kept.slot for kept in enqueued if kept.op == "delete")
        self._state.commit()

    def _requeue(self, records: dict[_Slot, Record]) -> None:
        """(`_lock` held.) Keep records for the next window; a newer state of a slot wins."""
        records.update(self._pending)
        self._pending = records

    def cannot_write(self, exc: Exception) -> None:
        """Say that records could not be committed (kept for the next window)."""
        if is_passing_storage_error(exc):
            health = Health.not_ready(f"disk full or failing: {exc}")
        else:
            health = Health.degraded(f"cannot write to the outbox: {exc}")
        if self.reporter.set(health):
            log.error("outbox_write_failed", error=str(exc))

    def resync_due(self) -> bool:
        """Whether the outbox asks for a resync and has room for it: while the platform is
        away, a re-send would only overflow the bound and ask again."""
        return self.outbox.resync_needed and self.outbox.fill < RESYNC_BELOW_FILL
