"""An informer: list a resource, then watch it from the list's resourceVersion.

One thread per resource. The list is streamed where the server offers it: a watch with
`sendInitialEvents=true` sends every object as an ADDED event, one at a time, then a bookmark
annotated `k8s.io/initial-events-end` carrying the list's resourceVersion; the informer ends
that request there and watches from the bookmark. A server that refuses the parameters (4xx)
or ignores them (a plain bookmark or another event type before the end, or silence for
`initial_events_quiet_seconds`) is listed in pages from then on; a stream cut before its end
is listed in pages this once, so nothing half-listed is ever taken for complete. Pages
(`limit`/`continue`; an expired continue token restarts the list) are bounded by bytes
(`collector.paging`). The watch asks for bookmarks and a randomized server timeout, and a
client read timeout ends a silent stream: a quiet watch, not a failure (a resource can be
quiet for long, and a real server sends bookmarks only about once a minute), so it is
counted (`quiet_watches`) and the watch resumes at once from the same resourceVersion,
without backoff or degraded health. The resourceVersion advances on every event,
bookmarks included, so a reconnect replays nothing twice. A resource whose watches get no
bookmarks at all (`Resource.bookmarks`: Events, which kube-apiserver watches straight from
etcd) asks for a server timeout shorter than the read timeout, so its quiet watches end
cleanly, and keeps its resourceVersion younger than etcd's compaction: once it has not
moved for `progress_probe_seconds`, the next watch reads the resource's current
resourceVersion with a one-object list as it opens, and resumes from there if that watch
then ran its whole course (it started before the read, so everything up to it came
through). Without that, each compaction would answer the quiet watch with a 410 and a
full relist. The resourceVersion never moves backwards: an
event or bookmark older than the version held (a lagging server) leaves it as it is
(`collector.resource_version`; counted as `stale_resource_versions`). A list sets it
outright: the sink's state is then the list's. A 410 (an HTTP answer or an ERROR
event) means the history is gone: the informer lists again and hands the sink the complete
key set, from which it finds the objects that vanished meanwhile (the informer itself keeps
no per-object state). Relists are paced as client-go's reflector paces them: one after a
healthy stretch (`relist_reset_seconds` since the last complete list) goes at once, one
sooner waits, longer each time (a ceiling doubling from `backoff_initial_seconds` up to
`relist_backoff_max_seconds`, the wait drawn between its half and itself), so a server that
answers every watch with a 410 gets a list every 15-30 s, not hundreds a second. A paged list
that will not end (`collector.list_end`: a continue token or an object given twice, more
pages than `remainingItemCount` allowed, or more than `InformerSettings.max_list_pages`) is
abandoned, counted (`lists_abandoned`) and retried with the same backoff. A list that has
not completed within `list_budget_seconds` of being wanted (the collector gives its warm-up
timeout) makes the informer's health not ready (`Health.not_ready`) while it keeps failing.

A stream that ends inside a line (`kube.api` raises a `KubeError` without a status, as for
a dropped connection) is a cut stream, never a bad object: a watch resumes from the
resourceVersion held, a streaming list is listed in pages this once.

A 403 disables this resource only: its health (`Health.forbidden`) and one log line name
the permission the request needed (`kube.permission`: verb, group, resource, namespace or
cluster scope); it is retried with full-jitter backoff up to `forbidden_retry_seconds`,
from the start again once a list or watch works, so a fixed RBAC rule is picked up soon.
Other failures back off with full jitter up to `backoff_max_seconds`.

`list_once()` is the same list without the thread or the watch, for one-shot readers
(`moonin-agent preview`): it raises what the list raises, and retries nothing.

Raw JSON is decoded straight into the normalizer's msgspec Struct (any type with a
`metadata: collector.model.ObjectMeta` field). An object that cannot be used is skipped,
not its page nor its informer (`collector.skips`): one that does not decode (a number past
64 bits, JSON nested past the decoder's limit) is cut out of its list page or event
(`collector.raw_json`) and the others decode on their own; one the sink cannot normalize or
store raises `SkippedObject`. A skipped object's key still counts as listed, so what the
platform had of it before stays; a page or an event that is not well-formed JSON remains an
error of the answer, retried. What happens to objects is the sink's
business; the informer only tells it what exists, what changed and what is gone.

A full or failing disk under what the sink stores (`runtime.storage_errors`) is no crash
either: the informer is not ready, backs off as for other failures, and lists again.
"""

from __future__ import annotations

import contextlib
import enum
import math
import random
import threading
import time
import types
from collections.abc import Callable, Container
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

import msgspec
import structlog

from collector import raw_json, skips
from collector.list_end import EndlessList, ListEnd
from collector.listed_keys import ListedKeys
from collector.model import ObjectMeta
from collector.paging import PageSize
from collector.resource_version import is_behind
from collector.resources import METADATA_LIST, Resource
from collector.skips import Identity, SkippedObject, Skips
from kube.api import ANSWER_LIMIT, KubeApi
from kube.errors import MESSAGE_LIMIT, Aborted, AnswerTooLarge, Forbidden, Gone, KubeError, TimedOut
from runtime.backoff import Backoff
from runtime.health import Health, HealthReporter
from runtime.storage_errors import is_passing_storage_error
from shipper.records import utc_timestamp

log = structlog.get_logger("collector.informer")

T = TypeVar("T")
R = TypeVar("R")
T_contra = TypeVar("T_contra", contravariant=True)


class Sink(Protocol[T_contra]):
    """Where an informer reports. Called from the informer's thread only."""

    def apply(self, obj: T_contra) -> None:
        """The object exists as given (a list item, ADDED or MODIFIED). Raises
        `collector.skips.SkippedObject` for one it cannot normalize or store."""

    def remove(self, obj: T_contra) -> None:
        """The object was deleted (a DELETED event; `obj` is its last state). Raises
        `collector.skips.SkippedObject` like `apply`."""

    def listed(self, *, resource_version: str, listed_at: str, keys: Container[str]) -> None:
        """A full list completed: `keys` is every object of the resource at that point, so
        whatever the sink remembers beyond them was deleted while no watch saw it."""


@dataclass(frozen=True, slots=True, kw_only=True)
class InformerSettings:
    page_size: int = 500
    """The most objects a list page asks for."""
    page_bytes: int = 4 * 1024 * 1024
    """What one list page may hold (decompressed); the page size adapts to stay under it."""
    streaming_lists: bool = True
    """List by a watch with `sendInitialEvents` where the server offers it."""
    initial_events_quiet_seconds: float = 10.0
    """Silence this long before the end of the initial events: the server ignored the
    request for them."""
    watch_timeout_seconds: tuple[int, int] = (300, 600)
    """The server ends a watch after a random time in this range; the informer resumes."""
    read_timeout_seconds: float = 75.0
    """Silence longer than this (no event, no bookmark) means a stalled watch."""
    progress_probe_seconds: float = 60.0
    """On a resource whose watches get no bookmarks (`Resource.bookmarks`): a
    resourceVersion held this long without moving is brought forward by a one-object list
    read while a watch is open. kube-apiserver's compactor keeps 5 minutes of etcd's
    history; a watch from an older resourceVersion answers 410, which only a full list
    answers. With the watches' 45-60 s, what is held is never more than ~4 minutes old."""
    forbidden_retry_seconds: float = 300.0
    """The longest pause between two retries of a forbidden resource."""
    backoff_initial_seconds: float = 1.0
    backoff_max_seconds: float = 60.0
    relist_backoff_max_seconds: float = 30.0
    """The longest wait before a relist that follows a list at once, or a list abandoned
    (client-go's reflector: 30 s); the wait is at least half the backoff's ceiling."""
    relist_reset_seconds: float = 120.0
    """A relist this long after the last complete list goes at once; a sooner one waits
    (client-go's reflector: 2 minutes)."""
    list_bytes: int = 8 * 1024 * 1024 * 1024
    """The most one list can hold: etcd's largest recommended database (8 GiB)."""

    @property
    def max_list_pages(self) -> int:
        """Pages of `page_bytes` that hold `list_bytes`: past these, a list is taken not to
        end (2,048 by default: also more than a million objects at `page_size`)."""
        return max(1, -(-self.list_bytes // self.page_bytes))


class _ListMeta(msgspec.Struct, rename="camel", gc=False):
    resource_version: str = ""
    continue_: str | None = msgspec.field(default=None, name="continue")
    remaining_item_count: int | None = None


class _WatchEvent(msgspec.Struct, gc=False):
    type: str
    object: msgspec.Raw


class _DecodedEvent(msgspec.Struct, gc=False):
    """An event about an object, the object decoded already (`Informer._event`). Each
    informer decodes into a subclass whose `object` is its own struct, and hands that on as
    it is: wrapping it again cost each of a list's objects one more allocation."""

    type: str
    object: Any


_OBJECT_EVENTS = frozenset({"ADDED", "MODIFIED", "DELETED"})


class _Bookmark(msgspec.Struct, gc=False):
    metadata: ObjectMeta


class _ListHead(msgspec.Struct, gc=False):
    metadata: _ListMeta


_decode_event = msgspec.json.Decoder(_WatchEvent).decode
_decode_bookmark = msgspec.json.Decoder(_Bookmark).decode
_decode_list_head = msgspec.json.Decoder(_ListHead).decode
_decode_list_meta = msgspec.json.Decoder(_ListMeta).decode
_decode_meta = msgspec.json.Decoder(ObjectMeta).decode
_decode_text = msgspec.json.Decoder(str).decode
# What fails to decode one object (`RecursionError`: nested past the interpreter's limit).
_UNDECODABLE = (msgspec.DecodeError, RecursionError)


@dataclass(frozen=True, slots=True)
class _RawPage:
    """A list page that did not decode whole: its objects still raw, to decode one by one."""

    metadata: _ListMeta
    items: list[msgspec.Raw]


class _Status(msgspec.Struct, gc=False):
    code: int = 0
    reason: str = ""
    message: str = ""


_decode_status = msgspec.json.Decoder(_Status).decode


class _Stopping(Exception):
    pass


class _Turn(enum.Enum):
    """What the loop does after a failed list or watch."""

    ON = "on"  # go on: watch from the resourceVersion held, or list if a list was wanted
    LIST = "list"  # list before the next watch
    END = "end"  # the informer ends


class _StreamingUnavailable(Exception):
    """The server does not stream lists: refused or ignored the request (the message says)."""


class _StreamCut(Exception):
    """A streaming list ended before its initial events did: the state it gave is partial."""


INITIAL_EVENTS_END = "k8s.io/initial-events-end"


class Informer(Generic[T]):
    def __init__(
        self,
        api: KubeApi,
        resource: Resource,
        struct: type[T],
        sink: Sink[T],
        *,
        settings: InformerSettings | None = None,
        page_gate: AbstractContextManager[Any] | None = None,
        list_budget_seconds: float | None = None,
    ) -> None:
        """`list_budget_seconds`: how long a list may be wanted without completing before
        the informer reports not ready (None: never)."""
        self.api = api
        self.resource = resource
        self.struct = struct
        self.sink = sink
        self.settings = settings or InformerSettings()
        self._page_gate = page_gate or contextlib.nullcontext()
        self.resource_version = ""
        self._moved_at = time.monotonic()  # when the resourceVersion held last changed
        # The longest quiet a working informer has: a pause (forbidden retry or backoff)
        # followed by a watch that hears nothing until its read timeout.
        quiet = self.settings.read_timeout_seconds + max(
            self.settings.forbidden_retry_seconds,
            self.settings.backoff_max_seconds,
            self.settings.relist_backoff_max_seconds,
        )
        self.reporter = HealthReporter(
            f"informer.{resource.plural}", stalled_after=quiet + self.settings.read_timeout_seconds
        )
        self.skips = Skips(resource.plural, self.reporter)
        page_type: Any = msgspec.defstruct(
            f"{struct.__name__}Page",
            [("metadata", _ListMeta), ("items", types.GenericAlias(list, (struct,)))],
        )
        # Decoders made once: a call with `type=` looks the type up again every time, which
        # shows when a streamed list decodes its objects one by one.
        self._decode_page = msgspec.json.Decoder(page_type).decode
        self._decode_object = msgspec.json.Decoder(struct).decode
        event_type: Any = msgspec.defstruct(
            f"{struct.__name__}Event", [("object", struct)], bases=(_DecodedEvent,)
        )
        self._decode_object_event: Callable[[bytes], _DecodedEvent] = msgspec.json.Decoder(
            event_type
        ).decode
        self._pages = PageSize(ceiling=self.settings.page_size, page_bytes=self.settings.page_bytes)
        self._streaming = self.settings.streaming_lists
        self._synced = threading.Event()
        self._stopped = threading.Event()
        self._relist = threading.Event()
        self._thread = threading.Thread(
            target=self._run, name=f"informer-{resource.plural}", daemon=True
        )
        self._backoff = Backoff(
            initial=self.settings.backoff_initial_seconds,
            maximum=self.settings.backoff_max_seconds,
        )
        # Its own ceiling: a forbidden resource waits for someone to change a rule, which
        # retries every few seconds would only flood the audit log about.
        self._forbidden_backoff = Backoff(
            initial=self.settings.backoff_initial_seconds,
            maximum=self.settings.forbidden_retry_seconds,
        )
        # Not reset by a healthy moment: a list that completes only to expire again at once
        # is the loop it paces (`_relist_delay`).
        self._relist_backoff = Backoff(
            initial=self.settings.backoff_initial_seconds,
            maximum=self.settings.relist_backoff_max_seconds,
            least=0.5,
        )
        self._listed_at = -math.inf  # when the last list completed
        self.lists_completed = 0
        """Full lists handed on so far (read by other threads: one int, never torn)."""
        self.failing = False
        """Whether its last list, watch or object failed (forbidden included) and nothing has
        worked since: what the warm-up, snapshots and a resync stop waiting for."""
        self._list_budget = list_budget_seconds
        self._unlisted_since: float | None = None  # since when a list is wanted, not done

    # -- lifecycle ---------------------------------------------------------------------

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Ask the loop to end; the caller also aborts open watches (`KubeApi.abort_streams`)."""
        self._stopped.set()

    def join(self, timeout: float | None = None) -> bool:
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def wait_synced(self, timeout: float | None = None) -> bool:
        """True once the first full list went through the sink."""
        return self._synced.wait(timeout)

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def list_once(self) -> None:
        """One full list through the sink on the caller's thread; no watch follows.

        Raises `KubeError` (`Forbidden` included) or `msgspec.DecodeError` as the list does.
        """
        self._list()
        self._synced.set()

    # -- what the processor reports of its objects ----------------------------------

    def object_failed(self, exc: KubeError) -> float:
        """A read its object needed failed (`collector.processor`): said as a failure of
        this resource; returns how long to wait before trying the object again."""
        if isinstance(exc, Forbidden):
            self._forbidden(exc)
            return self._forbidden_backoff.next_delay()
        self._degraded(f"failing: {type(exc).__name__}", exc)
        return self._backoff.next_delay(at_least=exc.retry_after)

    def object_recovered(self) -> None:
        """The object that failed went through."""
        self._healthy()

    def storage_failing(self, exc: Exception) -> None:
        """Its objects cannot be stored (a full or failing disk)."""
        self._storage_failing(exc)

    # -- the loop ----------------------------------------------------------------------

    def request_relist(self) -> None:
        """List again at the next turn (the caller aborts the open watch to make it now)."""
        self._relist.set()

    def _run(self) -> None:
        need_list = True
        while not self._stopped.is_set():
            self.reporter.progress()
            if self._relist.is_set():
                self._relist.clear()
                need_list = True
            try:
                if need_list:
                    self._list_wanted()
                    need_list = False
                self._watch()
            except _Stopping:
                return
            except Exception as exc:
                turn = self._after_failure(exc)
                if turn is _Turn.END:
                    return
                if turn is _Turn.LIST:
                    need_list = True

    def _list_wanted(self) -> None:
        """The list the loop wants before it watches; once through, the informer is synced."""
        if self._unlisted_since is None:
            self._unlisted_since = time.monotonic()
        self._list()
        self._synced.set()

    def _after_failure(self, exc: Exception) -> _Turn:
        """What a failed list or watch leads to; waits here first when it asks for a pause."""
        if isinstance(exc, Gone):
            # The history we would resume from is gone: only a fresh list is complete.
            self.reporter.count("relists")
            log.info("informer_relist", resource=self.resource.plural, reason=str(exc))
            self._pause(self._relist_delay())
            return _Turn.LIST
        if isinstance(exc, EndlessList):
            self.reporter.count("lists_abandoned")
            self._degraded("list abandoned: it does not end", exc)
            self._pause(self._relist_backoff.next_delay())
            return _Turn.ON
        if isinstance(exc, Aborted):
            # Ended on purpose (a relist wanted here or elsewhere): resume at once, from
            # the resourceVersion reached, or with a list when one was asked for.
            return _Turn.END if self._stopped.is_set() else _Turn.ON
        if isinstance(exc, Forbidden):
            self._forbidden(exc)
            self._pause(self._forbidden_backoff.next_delay())
            return _Turn.LIST
        if self._stopped.is_set():
            return _Turn.END
        if isinstance(exc, (KubeError, msgspec.DecodeError)):
            return self._after_request_failure(exc)
        return self._after_crash(exc)

    def _after_request_failure(self, exc: KubeError | msgspec.DecodeError) -> _Turn:
        if self._relist.is_set():
            return _Turn.ON  # the watch was aborted on purpose: list again now
        self._degraded(f"failing: {type(exc).__name__}", exc)
        retry_after = exc.retry_after if isinstance(exc, KubeError) else None
        self._pause(self._backoff.next_delay(at_least=retry_after))
        return _Turn.ON

    def _after_crash(self, exc: Exception) -> _Turn:
        if is_passing_storage_error(exc):
            # A full or failing disk under what the sink writes: hold the place and
            # list again once it may have passed (the sink's writes were rolled back).
            self._storage_failing(exc)
            self._pause(self._backoff.next_delay())
            return _Turn.LIST
        log.exception("informer_crashed", resource=self.resource.plural)
        self.failing = True
        self.reporter.set(Health.failed(f"informer {self.resource.plural} crashed"))
        return _Turn.END

    def _list(self) -> None:
        if self._streaming:
            try:
                self._stream_list()
                return
            except _StreamingUnavailable as exc:
                self._streaming = False
                self.reporter.count("streaming_fallbacks")
                log.info(
                    "informer_streaming_lists_unavailable",
                    resource=self.resource.plural,
                    reason=str(exc),
                )
            except _StreamCut as exc:
                self.reporter.count("streaming_fallbacks")
                log.info(
                    "informer_streaming_list_cut", resource=self.resource.plural, reason=str(exc)
                )
        self._list_pages()

    def _stream_list(self) -> None:
        """The list as a watch's initial events; returns once they have all gone through."""
        listed_at = utc_timestamp()
        seen = ListedKeys()
        quiet = self.settings.initial_events_quiet_seconds
        params = {
            "watch": "1",
            "sendInitialEvents": "true",
            "resourceVersionMatch": "NotOlderThan",
            "allowWatchBookmarks": "true",
            "timeoutSeconds": str(random.randint(*self.settings.watch_timeout_seconds)),
            **self.resource.selectors(),
        }
        self.reporter.count("streaming_lists")
        try:
            with self.api.stream_lines(
                self.resource.path,
                params,
                read_timeout=quiet,
                cancelled=lambda: self._stopped.is_set() or self._relist.is_set(),
                accept=self.resource.watch_accept,
            ) as lines:
                for line in lines:
                    self._check_stop()
                    if self._initial_event(line, seen, listed_at):
                        return  # ends this request; the watch resumes from the bookmark
        except TimedOut as exc:
            raise _StreamingUnavailable(
                f"the initial events did not end within {quiet:g} s of silence"
            ) from exc
        except (Aborted, Forbidden, Gone):
            raise
        except KubeError as exc:
            if exc.status in (400, 422):
                raise _StreamingUnavailable(str(exc)) from exc
            if exc.status is None:  # the connection failed under the stream
                raise _StreamCut(str(exc)) from exc
            raise
        raise _StreamCut("the stream ended before the initial events did")

    def _initial_event(self, line: bytes, seen: ListedKeys, listed_at: str) -> bool:
        """One event of a streaming list; True once it was the end of the initial events."""
        event = self._event(line)
        if event.type == "ADDED":  # all but the last: asked first
            self._list_item(event.object, seen)
            return False
        if event.type == "ERROR":
            raise self._status_error(event)
        if event.type == "BOOKMARK":
            meta = _strict(_decode_bookmark, event.object).metadata
            if meta.annotations.get(INITIAL_EVENTS_END) != "true":
                raise _StreamingUnavailable("a plain bookmark came first")
            self._listed(meta.resource_version, listed_at, seen)
            return True
        raise _StreamingUnavailable(f"a {event.type} event among the initial ones")

    def _list_pages(self) -> None:
        listed_at = utc_timestamp()
        seen = ListedKeys()
        token: str | None = None
        end = ListEnd(self.resource.path, max_pages=self.settings.max_list_pages)
        while True:
            params = {"limit": str(self._pages.limit), **self.resource.selectors()}
            if token:
                params["continue"] = token
            # Pages are the agent's largest allocations; the gate bounds how many informers
            # hold one at a time (their work is CPU-bound anyway, so little is lost).
            with self._page_gate:
                try:
                    raw = self.api.get(
                        self.resource.path,
                        params,
                        accept=self.resource.list_accept,
                        max_bytes=self._pages.byte_bound or ANSWER_LIMIT,
                    )
                except AnswerTooLarge:
                    if self._pages.byte_bound is None:
                        raise  # one object alone is past ANSWER_LIMIT: a broken server
                    # Heavier objects than the last page's: the same page, far fewer objects.
                    self._pages.overflowed()
                    self.reporter.count("pages_refetched")
                    continue
                except Gone:
                    if token is None:
                        raise
                    # The continue token expired mid-list: start the list over.
                    token, seen, listed_at = None, ListedKeys(), utc_timestamp()
                    end.restarted()
                    self.reporter.count("list_restarts")
                    continue
                page = self._page(raw)
                self._pages.read(objects=len(page.items), size=len(raw))
                del raw
                token, resource_version = page.metadata.continue_, page.metadata.resource_version
                remaining = page.metadata.remaining_item_count
                items = page.items
                del page
                objects, known = len(items), len(seen)
                items.reverse()
                while items:  # each object is let go of once the sink has it
                    item = items.pop()
                    self._check_stop()
                    if not self._list_item(item, seen):
                        objects -= 1  # no key to tell whether it came before
            self.reporter.count("list_pages")
            self.reporter.progress()
            end.page(token=token, remaining=remaining, objects=objects, new=len(seen) - known)
            if not token:
                break
        self._listed(resource_version, listed_at, seen)

    def _listed(self, resource_version: str, listed_at: str, keys: ListedKeys) -> None:
        self._hold(resource_version)
        self.skips.listed(keys)
        self.sink.listed(resource_version=resource_version, listed_at=listed_at, keys=keys)
        self.reporter.count("lists")
        self.lists_completed += 1
        self._listed_at = time.monotonic()
        self._unlisted_since = None
        self._healthy()

    def _relist_delay(self) -> float:
        """How long to wait before a relist: nothing after a healthy stretch (and the
        backoff starts over), else the relist backoff's next step."""
        if time.monotonic() - self._listed_at >= self.settings.relist_reset_seconds:
            self._relist_backoff.reset()
            return 0.0
        return self._relist_backoff.next_delay()

    def _watch(self) -> None:
        timeout = self._watch_timeout()
        params = {
            "watch": "1",
            "allowWatchBookmarks": "true",
            "resourceVersion": self.resource_version,
            "timeoutSeconds": str(timeout),
            **self.resource.selectors(),
        }
        self.reporter.count("watches")
        started = time.monotonic()
        with self.api.stream_lines(
            self.resource.path,
            params,
            read_timeout=self.settings.read_timeout_seconds,
            cancelled=lambda: self._stopped.is_set() or self._relist.is_set(),
            accept=self.resource.watch_accept,
        ) as lines:
            probed = self._progress_probe()
            try:
                for line in lines:
                    self._check_stop()
                    self._handle(self._event(line))
                    self._healthy()
            except TimedOut:
                # Nothing, not even a bookmark, until the read timeout: a quiet resource.
                # The server took the watch, so it is reachable; resume from our RV.
                self.reporter.count("quiet_watches")
                self._healthy()
        # The server's timeout ended the watch cleanly; the loop resumes from our RV.
        ran_its_course = time.monotonic() - started >= timeout
        if probed is not None and ran_its_course and is_behind(self.resource_version, probed):
            # This watch, from the RV held before the probe, stayed open its whole time
            # after it: every change up to the probe's RV has come through it, so the
            # next one resumes there (a bookmark of the client's own).
            self._hold(probed)

    def _watch_timeout(self) -> int:
        """The server's timeout for the next watch, at random within the settings' range.
        Where no bookmark comes, it ends the watch before the client's read timeout would:
        a quiet resource then ends its watches cleanly, keeping the connection."""
        low, high = self.settings.watch_timeout_seconds
        if not self.resource.bookmarks:
            read = self.settings.read_timeout_seconds
            low = min(low, max(1, int(read * 0.6)))
            high = max(low, min(high, int(read * 0.8)))
        return random.randint(low, high)

    def _progress_probe(self) -> str | None:
        """The resource's resourceVersion now, read while a watch is open, where no bookmark
        moves the one held and it has not moved for `progress_probe_seconds`. One object's
        metadata without selectors: the cheapest read the server has (a selector would
        have it scan etcd for a match), and nothing of a Normal Event's contents."""
        if self.resource.bookmarks:
            return None
        if time.monotonic() - self._moved_at < self.settings.progress_probe_seconds:
            return None
        self.reporter.count("progress_probes")
        raw = self.api.get(self.resource.path, {"limit": "1"}, accept=METADATA_LIST)
        return _strict(_decode_list_head, raw).metadata.resource_version

    def _status_error(self, event: _WatchEvent | _DecodedEvent) -> KubeError:
        """What an ERROR event means (410: the history to resume from is gone)."""
        status = _strict(_decode_status, event.object)
        error = Gone if status.code == 410 else KubeError
        message = status.message[:MESSAGE_LIMIT]
        return error(
            f"watch {self.resource.path}: {status.code} {status.reason}: {message}",
            status=status.code or None,
            reason=status.reason,
        )

    def _handle(self, event: _WatchEvent | _DecodedEvent) -> None:
        if event.type == "ERROR":
            raise self._status_error(event)
        if event.type == "BOOKMARK":
            bookmark = _strict(_decode_bookmark, event.object)
            self._advance(bookmark.metadata.resource_version)
            self.reporter.count("bookmarks")
            return
        self.reporter.count("events")
        who = self._give_item(event.object, deleted=event.type == "DELETED")
        # Only once the sink has it (or skipped it): an event it failed on is replayed when
        # the watch resumes.
        if who is not None:
            self._advance(who.resource_version)

    def _event(self, line: bytes) -> _WatchEvent | _DecodedEvent:
        """A watch event, its object decoded in the same pass when the event is about one:
        read with its object raw, the object's bytes were scanned once to skip them and
        again to decode them, the larger part of a streamed list's decoding. Any other
        event (ERROR, BOOKMARK) and any object that does not decode are read as before."""
        try:
            event = self._decode_object_event(line)
        except _UNDECODABLE:
            return _event(line)
        if event.type not in _OBJECT_EVENTS:
            return _event(line)  # its object is a Status or a bookmark's, not a `T`
        return event

    # -- one object ----------------------------------------------------------------------

    def _page(self, raw: bytes | bytearray) -> Any:
        """A list page, decoded whole, or else cut into its objects (`collector.raw_json`)
        so that one object that does not decode costs only itself."""
        try:
            return self._decode_page(raw)
        except _UNDECODABLE as exc:
            try:
                parts = raw_json.members(bytes(raw), ("metadata", "items"))
                metadata = _decode_list_meta(parts.get("metadata", b"{}"))
                items = raw_json.elements(parts.get("items", b"[]"))
            except (raw_json.Unreadable, msgspec.DecodeError):
                raise _broken(exc) from None  # the page itself is broken, not one object
            self.reporter.count("pages_decoded_per_object")
            return _RawPage(metadata, [msgspec.Raw(item) for item in items])

    def _list_item(self, item: Any, seen: ListedKeys) -> bool:
        """One object of a list. False when not even its key could be read."""
        if isinstance(item, msgspec.Raw):
            who = self._give_raw(item)
            key = None if who is None else who.key
        else:
            key = self._give(item)  # the common case: no `Identity` made only to be read
        if key is None:
            return False
        seen.add(key)  # even if skipped, it exists: what it was before is not deleted
        return True

    def _give_item(self, item: Any, *, deleted: bool = False) -> Identity | None:
        """`_give_raw` for an object still raw (`msgspec.Raw`), `_give` for one decoded
        (`T`); its identity as `_give_raw` says it."""
        if isinstance(item, msgspec.Raw):
            return self._give_raw(item, deleted=deleted)
        return Identity(self._give(item, deleted=deleted), item.metadata.resource_version)

    def _give_raw(self, raw: msgspec.Raw, *, deleted: bool = False) -> Identity | None:
        """Decode one object and hand it to the sink, or skip it; its key and
        resourceVersion, unless not even its metadata could be read."""
        try:
            obj = self._decode_object(raw)
        except _UNDECODABLE as exc:
            who, bare = _identify(bytes(raw))
            if deleted and bare is not None:
                # Gone, however it read: what it produced goes too, by its metadata alone.
                with contextlib.suppress(*_UNDECODABLE):
                    self._give(self._decode_object(bare), deleted=True)
                    return who
            self.skips.skipped(who, skips.undecodable(exc))
            return who if who.key is not None else None
        return self._give_item(obj, deleted=deleted)

    def _give(self, obj: Any, *, deleted: bool = False) -> str:
        """Hand a decoded object to the sink; one it cannot normalize or store is skipped.
        Its key (worked out once here: each `ObjectMeta.key` builds a new string)."""
        meta: ObjectMeta = obj.metadata
        key = meta.key
        try:
            if deleted:
                self.sink.remove(obj)
            else:
                self.sink.apply(obj)
        except SkippedObject as skip:
            self.skips.skipped(Identity(key, meta.resource_version), skip)
            return key
        self.skips.passed(key)
        return key

    def _advance(self, resource_version: str) -> None:
        """Hold `resource_version` unless it is older than the one held."""
        if is_behind(resource_version, self.resource_version):
            self.reporter.count("stale_resource_versions")
            return
        self._hold(resource_version)

    def _hold(self, resource_version: str) -> None:
        if resource_version != self.resource_version:
            self.resource_version = resource_version
            self._moved_at = time.monotonic()

    # -- helpers -----------------------------------------------------------------------

    def _check_stop(self) -> None:
        if self._stopped.is_set():
            raise _Stopping

    def _pause(self, seconds: float) -> None:
        self._stopped.wait(seconds)  # a stop ends the pause; the loop then sees it

    def _healthy(self) -> None:
        self.reporter.progress()
        self._backoff.reset()
        self._forbidden_backoff.reset()
        self.failing = False
        if self.reporter.set(Health.healthy()):
            log.info("informer_healthy", resource=self.resource.plural)

    def _storage_failing(self, exc: Exception) -> None:
        self.reporter.count("failures")
        self.failing = True
        if self.reporter.set(Health.not_ready("disk full or failing: cannot store its objects")):
            log.error("informer_storage_failing", resource=self.resource.plural, error=str(exc))

    def _degraded(self, reason: str, exc: Exception) -> None:
        self.reporter.count("failures")
        health = self._failing(reason)
        self.failing = True
        if self.reporter.set(health):
            log.warning(
                "informer_failing",
                resource=self.resource.plural,
                reason=health.reason,
                error=str(exc),
            )

    def _failing(self, reason: str) -> Health:
        """Degraded; not ready too while a list wanted for longer than the budget is not
        done (discovery of this kind is then not merely late but missing)."""
        since, budget = self._unlisted_since, self._list_budget
        if since is not None and budget is not None and time.monotonic() - since > budget:
            return Health.not_ready(f"{reason}; no complete list for {budget:g} s")
        return Health.degraded(reason)

    def _forbidden(self, exc: Forbidden) -> None:
        self.reporter.count("failures")
        self.reporter.count("forbidden")
        self.failing = True
        if self.reporter.set(Health.forbidden(exc.denied)):
            log.error(
                "informer_forbidden",
                resource=self.resource.plural,
                permission=exc.denied,
                error=str(exc),
            )


def _event(line: bytes) -> _WatchEvent:
    """A watch event. One whose object will not decode is cut apart instead, so that the
    object alone is skipped: a line that is not a whole event is what fails here."""
    try:
        return _decode_event(line)
    except _UNDECODABLE as exc:
        try:
            parts = raw_json.members(line, ("type", "object"))
            return _WatchEvent(_decode_text(parts["type"]), msgspec.Raw(parts["object"]))
        except (raw_json.Unreadable, KeyError, msgspec.DecodeError):
            raise _broken(exc) from None


def _strict(decode: Callable[[bytes | bytearray], R], raw: bytes | bytearray) -> R:
    """`decode(raw)`, where JSON nested past the decoder's limit is a decode error too (a
    broken answer, retried), not an exception that would end the informer."""
    try:
        return decode(raw)
    except RecursionError as exc:
        raise _broken(exc) from None


def _broken(exc: BaseException) -> msgspec.DecodeError:
    """A document that is not well-formed, as the decode error the informer retries."""
    if isinstance(exc, msgspec.DecodeError):
        return exc
    return msgspec.DecodeError("JSON nested too deeply, and not well-formed")


def _identify(raw: bytes) -> tuple[Identity, bytes | None]:
    """Who an object that will not decode is, from its metadata alone; with the object
    reduced to that metadata (None when not even that reads)."""
    try:
        metadata = raw_json.members(raw, ("metadata",))["metadata"]
        meta = _decode_meta(metadata)
    except (raw_json.Unreadable, KeyError, *_UNDECODABLE):
        return Identity.unknown(raw), None
    return Identity(meta.key, meta.resource_version), b'{"metadata":' + metadata + b"}"
