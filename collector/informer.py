"""An informer: list a resource in pages, then watch it from the list's resourceVersion.

One thread per resource. The list is paginated (`limit`/`continue`; an expired continue
token restarts it); the watch asks for bookmarks and a randomized server timeout, and a
client read timeout ends a stalled stream. The resourceVersion advances on every event,
bookmarks included, so a reconnect replays nothing twice. A 410 (an HTTP answer or an ERROR
event) means the history is gone: the informer lists again and hands the sink the complete
key set, from which it finds the objects that vanished meanwhile (the informer itself keeps
no per-object state). A 403 disables this resource only, with one log line, and is retried
after `forbidden_retry_seconds`; other failures back off with full jitter.

`list_once()` is the same list without the thread or the watch, for one-shot readers
(`moonin-agent preview`): it raises what the list raises, and retries nothing.

Raw JSON is decoded straight into the normalizer's msgspec Struct (any type with a
`metadata: collector.model.ObjectMeta` field). What happens to objects is the sink's
business; the informer only tells it what exists, what changed and what is gone.
"""

from __future__ import annotations

import contextlib
import random
import threading
from collections.abc import Set as AbstractSet
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

import msgspec
import structlog

from collector.kube import Aborted, Forbidden, Gone, KubeApi, KubeError
from collector.model import ObjectMeta
from collector.resources import Resource
from shipper.backoff import Backoff
from shipper.health import Health, HealthReporter
from shipper.records import utc_timestamp

log = structlog.get_logger("collector.informer")

T = TypeVar("T")
T_contra = TypeVar("T_contra", contravariant=True)


class Sink(Protocol[T_contra]):
    """Where an informer reports. Called from the informer's thread only."""

    def apply(self, obj: T_contra) -> None:
        """The object exists as given (a list item, ADDED or MODIFIED)."""

    def remove(self, obj: T_contra) -> None:
        """The object was deleted (a DELETED event; `obj` is its last state)."""

    def listed(self, *, resource_version: str, listed_at: str, keys: AbstractSet[str]) -> None:
        """A full list completed: `keys` is every object of the resource at that point, so
        whatever the sink remembers beyond them was deleted while no watch saw it."""


@dataclass(frozen=True, slots=True, kw_only=True)
class InformerSettings:
    page_size: int = 500
    watch_timeout_seconds: tuple[int, int] = (300, 600)
    """The server ends a watch after a random time in this range; the informer resumes."""
    read_timeout_seconds: float = 75.0
    """Silence longer than this (no event, no bookmark) means a stalled watch."""
    forbidden_retry_seconds: float = 300.0
    backoff_initial_seconds: float = 1.0
    backoff_max_seconds: float = 60.0


class _ListMeta(msgspec.Struct, rename="camel"):
    resource_version: str = ""
    continue_: str | None = msgspec.field(default=None, name="continue")


class _WatchEvent(msgspec.Struct):
    type: str
    object: msgspec.Raw


class _Bookmark(msgspec.Struct):
    metadata: ObjectMeta


class _Status(msgspec.Struct):
    code: int = 0
    reason: str = ""
    message: str = ""


class _Stopping(Exception):
    pass


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
    ) -> None:
        self.api = api
        self.resource = resource
        self.struct = struct
        self.sink = sink
        self.settings = settings or InformerSettings()
        self._page_gate = page_gate or contextlib.nullcontext()
        self.resource_version = ""
        # The longest quiet a working informer has: a pause (forbidden retry or backoff)
        # followed by a watch that hears nothing until its read timeout.
        quiet = self.settings.read_timeout_seconds + max(
            self.settings.forbidden_retry_seconds, self.settings.backoff_max_seconds
        )
        self.reporter = HealthReporter(
            f"informer.{resource.plural}", stalled_after=quiet + self.settings.read_timeout_seconds
        )
        self._page_type: Any = msgspec.defstruct(
            f"{struct.__name__}Page", [("metadata", _ListMeta), ("items", list[struct])]
        )
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
                    self._list()
                    need_list = False
                    self._synced.set()
                self._watch()
            except _Stopping:
                return
            except Gone as exc:
                # The history we would resume from is gone: only a fresh list is complete.
                self.reporter.count("relists")
                log.info("informer_relist", resource=self.resource.plural, reason=str(exc))
                need_list = True
            except Aborted:
                # Ended on purpose (a relist wanted here or elsewhere): resume at once, from
                # the resourceVersion reached, or with a list when one was asked for.
                if self._stopped.is_set():
                    return
            except Forbidden as exc:
                self._degraded(f"forbidden: {self.resource.plural}", exc, level="error")
                need_list = True
                self._pause(self.settings.forbidden_retry_seconds)
            except (KubeError, msgspec.DecodeError) as exc:
                if self._stopped.is_set():
                    return
                if self._relist.is_set():
                    continue  # the watch was aborted on purpose: list again now
                self._degraded(f"failing: {type(exc).__name__}", exc, level="warning")
                retry_after = exc.retry_after if isinstance(exc, KubeError) else None
                self._pause(self._backoff.next_delay(at_least=retry_after))
            except Exception:
                if self._stopped.is_set():
                    return
                log.exception("informer_crashed", resource=self.resource.plural)
                self.reporter.set(Health.failed(f"informer {self.resource.plural} crashed"))
                return

    def _list(self) -> None:
        listed_at = utc_timestamp()
        seen: set[str] = set()
        params = {"limit": str(self.settings.page_size), **self.resource.selectors()}
        token: str | None = None
        while True:
            if token:
                params["continue"] = token
            # Pages are the agent's largest allocations; the gate bounds how many informers
            # hold one at a time (their work is CPU-bound anyway, so little is lost).
            with self._page_gate:
                try:
                    raw = self.api.get(self.resource.path, params)
                except Gone:
                    if token is None:
                        raise
                    # The continue token expired mid-list: start the list over.
                    params.pop("continue", None)
                    token, seen, listed_at = None, set(), utc_timestamp()
                    self.reporter.count("list_restarts")
                    continue
                page = msgspec.json.decode(raw, type=self._page_type)
                del raw
                for item in page.items:
                    self._check_stop()
                    seen.add(item.metadata.key)
                    self.sink.apply(item)
                token, resource_version = page.metadata.continue_, page.metadata.resource_version
                del page
            self.reporter.count("list_pages")
            self.reporter.progress()
            if not token:
                break
        self.resource_version = resource_version
        self.sink.listed(resource_version=self.resource_version, listed_at=listed_at, keys=seen)
        self.reporter.count("lists")
        self._healthy()

    def _watch(self) -> None:
        low, high = self.settings.watch_timeout_seconds
        params = {
            "watch": "1",
            "allowWatchBookmarks": "true",
            "resourceVersion": self.resource_version,
            "timeoutSeconds": str(random.randint(low, high)),
            **self.resource.selectors(),
        }
        self.reporter.count("watches")
        with self.api.stream_lines(
            self.resource.path,
            params,
            read_timeout=self.settings.read_timeout_seconds,
            cancelled=lambda: self._stopped.is_set() or self._relist.is_set(),
        ) as lines:
            for line in lines:
                self._check_stop()
                self._handle(msgspec.json.decode(line, type=_WatchEvent))
                self._healthy()
        # The server's timeout ended the watch cleanly; the loop resumes from our RV.

    def _handle(self, event: _WatchEvent) -> None:
        if event.type == "ERROR":
            status = msgspec.json.decode(event.object, type=_Status)
            error = Gone if status.code == 410 else KubeError
            raise error(
                f"watch {self.resource.path}: {status.code} {status.reason}: {status.message}",
                status=status.code or None,
                reason=status.reason,
            )
        if event.type == "BOOKMARK":
            bookmark = msgspec.json.decode(event.object, type=_Bookmark)
            self.resource_version = bookmark.metadata.resource_version
            self.reporter.count("bookmarks")
            return
        obj = msgspec.json.decode(event.object, type=self.struct)
        meta: ObjectMeta = obj.metadata  # type: ignore[attr-defined]
        self.resource_version = meta.resource_version
        self.reporter.count("events")
        if event.type == "DELETED":
            self.sink.remove(obj)
        else:
            self.sink.apply(obj)

    # -- helpers -----------------------------------------------------------------------

    def _check_stop(self) -> None:
        if self._stopped.is_set():
            raise _Stopping

    def _pause(self, seconds: float) -> None:
        self._stopped.wait(seconds)  # a stop ends the pause; the loop then sees it

    def _healthy(self) -> None:
        self.reporter.progress()
        self._backoff.reset()
        if self.reporter.set(Health.healthy()):
            log.info("informer_healthy", resource=self.resource.plural)

    def _degraded(self, reason: str, exc: Exception, *, level: str) -> None:
        self.reporter.count("failures")
        if self.reporter.set(Health.degraded(reason)):
            getattr(log, level)(
                "informer_failing", resource=self.resource.plural, reason=reason, error=str(exc)
            )
