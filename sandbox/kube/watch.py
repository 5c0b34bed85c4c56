"""Serving one watch stream: replay, live changes, bookmarks, timeouts and injected faults.

The stream writes newline-delimited JSON events (`{"type": ..., "object": ...}`) through a
`StreamWriter` (one HTTP chunk per burst, flushed at once), each object as the request's
`View` writes it (as stored, or its metadata alone). Objects come from the store's
pre-encoded bytes; only a MODIFIED that makes an object stop matching the watch's
selectors is re-encoded (it becomes a DELETED carrying the previous state, as upstream).
A watch that starts with the current objects (initial events) ends them with a BOOKMARK
annotated `k8s.io/initial-events-end` at the RV they were taken at, when it asked for
`sendInitialEvents` and allows bookmarks.

Like the watch cache (staging/src/k8s.io/apiserver/pkg/storage/cacher), a stream never
sends anything at or below the resourceVersion it started from, nor a bookmark that does
not move past what it already told the client: a watch from a resourceVersion ahead of the
server stays silent until the server passes it. Bookmarks go to watches that allow them,
every `bookmark_interval` (when the RV moved) and once `bookmark_before_timeout` seconds
before the watch's timeout, so a client can resume from a fresh resourceVersion; except on
a resource kube-apiserver keeps out of its watch cache (Events), whose watches it serves
from etcd with no bookmark but the one ending the initial events.

It ends in one of these ways, each meant to be observable by a client under test:
- `timeoutSeconds` elapsed, or the server stops: the chunked body ends cleanly;
- an event its `View` cannot write: the chunked body ends cleanly there, as upstream;
- `DROP` (a fault): the connection is shut down mid-stream, no terminating chunk;
- `cut_after` (a fault): the same, after that many initial events, before the bookmark;
- `cut_line_after` (a fault): after that many whole lines, half of the next one, then the
  chunked body ends cleanly, inside that line;
- `EXPIRE` (a fault): an ERROR event with a 410 Expired Status mid-stream, then the chunked
  body ends cleanly, as a watch served from etcd ends when a compaction passes it;
- a `Stall` (a fault): nothing more is written, the connection stays open until the fault
  is released (then dropped) or the client gives up and closes it;
- the client went away: noticed on the next write or within a fraction of a second while
  idle, and the subscription is released.
"""

from __future__ import annotations

import contextlib
import threading
import time
import traceback
from dataclasses import dataclass
from queue import Empty
from typing import Protocol

from sandbox.kube import empty_objects, status
from sandbox.kube.lists import Matcher
from sandbox.kube.negotiation import Unencodable, View
from sandbox.kube.resources import Resource
from sandbox.kube.store import Bookmark, Change, Entry, Store, Subscription

_IDLE_CHECK_SECONDS = 0.25  # how soon an idle stream notices a vanished client
_BURST_BYTES = 64 * 1024  # replayed events are batched into chunks of about this size


class _Drop:
    __slots__ = ()


class _Stop:
    __slots__ = ()


class _Expire:
    __slots__ = ()


DROP = _Drop()
STOP = _Stop()
EXPIRE = _Expire()


class Stall:
    """A queue item: stop writing until `release` is set (then drop the connection)."""

    __slots__ = ("release",)

    def __init__(self, release: threading.Event) -> None:
        self.release = release


class _EndedInLine(Exception):
    """The stream's `cut_line_after` was reached: it ends inside the line it was writing."""


class StreamWriter(Protocol):
    def write(self, data: bytes) -> None: ...  # one chunk, flushed; OSError if the client left

    def end(self) -> None: ...  # terminating chunk: a clean end of the response

    def abort(self) -> None: ...  # shut the connection down mid-stream

    def client_gone(self) -> bool: ...


def event_line(event_type: str, obj: bytes) -> bytes:
    return b'{"type":"%s","object":%s}\n' % (event_type.encode(), obj)


def bookmark_object(
    view: View, resource: Resource, rv: int, *, initial_events_end: bool = False
) -> bytes:
    metadata: dict[str, object] = {"resourceVersion": str(rv)}
    if initial_events_end:
        metadata["annotations"] = {"k8s.io/initial-events-end": "true"}
    return view.decoded(resource, {"metadata": metadata, **empty_objects.empty(resource)})


@dataclass(slots=True)
class WatchSpec:
    resource: Resource
    namespace: str | None
    match: Matcher | None
    timeout: float | None  # timeoutSeconds, or the server's own limit
    bookmark_interval: float  # 0 disables periodic bookmarks
    bookmark_before_timeout: float  # the last bookmark, this long before the timeout
    initial_events_end: bool  # sendInitialEvents: a bookmark marks the end of the replay
    view: View
    cut_after: int | None  # drop the connection after this many initial events
    cut_line_after: int | None = None  # end cleanly inside the line after this many


class WatchStream:
    """Runs in the connection's thread until the stream ends; returns how it ended."""

    def __init__(
        self, store: Store, spec: WatchSpec, subscription: Subscription, writer: StreamWriter
    ) -> None:
        self._store = store
        self._spec = spec
        self._subscription = subscription
        self._writer = writer
        self._buffer: list[bytes] = []
        self._buffered = 0
        self._told = 0  # the highest resourceVersion the client has learnt from this stream
        self._lines = 0  # lines written or buffered

    def run(self, backlog: list[Change], initial: list[Entry] | None, start_rv: int) -> str:
        """Stream from `start_rv`: the RV of the `initial` objects, or the one to resume
        after."""
        try:
            return self._run(backlog, initial, start_rv)
        except OSError:
            return "client gone"
        except _EndedInLine:
            with contextlib.suppress(OSError):
                self._writer.end()
            return "ended inside a line"
        except Unencodable:
            # Nothing is written for the event; the body ends there (the buffer holds nothing
            # either: the view refuses every object).
            with contextlib.suppress(OSError):
                self._writer.end()
            return "unencodable event"
        except Exception:
            # A bug in the fake: loud on stderr, and the half-written stream is cut rather
            # than followed by an error answer on the same connection.
            traceback.print_exc()
            self._writer.abort()
            return "failed"
        finally:
            self._store.unsubscribe(self._subscription)

    def _run(self, backlog: list[Change], initial: list[Entry] | None, start_rv: int) -> str:
        spec, subscription = self._spec, self._subscription
        self._told = start_rv
        started = time.monotonic()
        deadline = started + spec.timeout if spec.timeout else None
        visible = [entry for entry in initial or () if self._visible(entry)]
        for entry in visible[: spec.cut_after]:
            self._add(event_line("ADDED", spec.view.entry(spec.resource, entry)))
        if spec.cut_after is not None:
            self._flush()
            self._writer.abort()
            return "dropped before the initial events ended"
        if initial is not None and spec.initial_events_end and subscription.bookmarks:
            obj = bookmark_object(spec.view, spec.resource, start_rv, initial_events_end=True)
            self._add(event_line("BOOKMARK", obj))
        for change in backlog:
            self._change(change)
        self._flush()

        progress = subscription.bookmarks and spec.resource.watch_cache
        periodic = progress and spec.bookmark_interval > 0
        next_bookmark = started + spec.bookmark_interval if periodic else None
        last_bookmark = None
        if progress and deadline is not None:
            last_bookmark = deadline - spec.bookmark_before_timeout
            if last_bookmark <= started:
                last_bookmark = None  # too late already, as upstream
        while True:
            now = time.monotonic()
            if deadline is not None and now >= deadline:
                self._flush()
                self._writer.end()
                return "timeout"
            if next_bookmark is not None and now >= next_bookmark:
                self._store.request_bookmark(subscription)
                next_bookmark = now + spec.bookmark_interval
            if last_bookmark is not None and now >= last_bookmark:
                self._store.request_bookmark(subscription)
                last_bookmark = None
            wait = _IDLE_CHECK_SECONDS
            for moment in (deadline, next_bookmark, last_bookmark):
                if moment is not None:
                    wait = min(wait, max(moment - now, 0.0))
            try:
                item = subscription.queue.get(timeout=wait)
            except Empty:
                if self._writer.client_gone():
                    return "client gone"
                continue
            ended = self._item(item)
            # Drain what is already queued into the same chunk before flushing.
            while ended is None and self._buffered < _BURST_BYTES:
                try:
                    item = subscription.queue.get_nowait()
                except Empty:
                    break
                ended = self._item(item)
            if ended is not None:
                return ended
            self._flush()

    def _item(self, item: object) -> str | None:
        """Handle one queue item; a string means the stream is over (how it ended)."""
        if isinstance(item, Change):
            self._change(item)
        elif isinstance(item, Bookmark):
            if item.rv > self._told:
                self._told = item.rv
                obj = bookmark_object(self._spec.view, self._spec.resource, item.rv)
                self._add(event_line("BOOKMARK", obj))
        elif item is STOP:
            self._flush()
            self._writer.end()
            return "stopped"
        elif item is DROP:
            self._flush()  # changes queued before the fault still go out, then the cut
            self._writer.abort()
            return "dropped"
        elif item is EXPIRE:
            # Changes queued before the fault still go out, then the ERROR.
            self._add(event_line("ERROR", status.watch_compacted().body()))
            self._flush()
            self._writer.end()
            return "expired"
        elif isinstance(item, Stall):
            self._flush()  # what came before the stall was sent; nothing after it will be
            while not item.release.wait(_IDLE_CHECK_SECONDS):
                if self._writer.client_gone():
                    return "client gave up on a stalled stream"
            self._writer.abort()
            return "stalled, then dropped"
        return None

    def _visible(self, entry: Entry) -> bool:
        namespace = self._spec.namespace
        if namespace and entry.namespace != namespace:
            return False
        match = self._spec.match
        return match is None or match(entry)

    def _change(self, change: Change) -> None:
        spec = self._spec
        entry = change.entry
        if change.rv <= self._told or (spec.namespace and entry.namespace != spec.namespace):
            return
        match = spec.match
        if match is None:
            self._event(change.rv, change.type, spec.view.entry(spec.resource, entry))
            return
        now_matches = match(entry)
        if change.type != "MODIFIED" or change.prev is None:
            if now_matches:
                self._event(change.rv, change.type, spec.view.entry(spec.resource, entry))
            return
        before_matched = match(change.prev)
        if now_matches:
            kind = "MODIFIED" if before_matched else "ADDED"
            self._event(change.rv, kind, spec.view.entry(spec.resource, entry))
        elif before_matched:
            # Left the selection: DELETED with the previous state at this change's RV.
            previous = change.prev.decode()
            previous["metadata"]["resourceVersion"] = str(change.rv)
            self._event(change.rv, "DELETED", spec.view.decoded(spec.resource, previous))

    def _event(self, rv: int, event_type: str, obj: bytes) -> None:
        self._told = rv
        self._add(event_line(event_type, obj))

    def _add(self, line: bytes) -> None:
        cut = self._spec.cut_line_after
        if cut is not None and self._lines >= cut:
            self._buffer.append(line[: len(line) // 2])
            self._flush()
            raise _EndedInLine
        self._lines += 1
        self._buffer.append(line)
        self._buffered += len(line)
        if self._buffered >= _BURST_BYTES:
            self._flush()

    def _flush(self) -> None:
        if self._buffer:
            data = b"".join(self._buffer)
            self._buffer.clear()
            self._buffered = 0
            self._writer.write(data)
