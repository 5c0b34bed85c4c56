"""Injected request faults and the request log.

Faults are decided before a request touches the store, so a faulted write changes nothing:
- `fail_next(status, count, resource=..., path_prefix=..., verb=...)`: the next `count`
  matching requests answer `status` (403 Forbidden, 409 Conflict, 429 TooManyRequests with
  Retry-After, 500 InternalError, ...) with the Status body the real server would send;
  `verb` (`get`, `list`, `patch`, ...) lets a test fail a write but not the read before it;
- `forbid(resource)`: every request on that resource answers 403 until `allow(resource)`,
  the way a missing RBAC rule disables one kind while the others keep working.

One fault is decided there but acts on the answer instead: `drip_next(count, resource=...,
path_prefix=..., verb=..., every=..., headers=...)` makes the next `count` matching
requests (watches excepted: they have their own stall faults) be handled as usual, the store
changing as they say, and then answered one byte every `every` seconds: a hung API server,
or a proxy trickling bytes, which only a total deadline on the client's side can end. With
`headers=False` the status line and headers leave at once and only the body drips. A
request that meets a failure above fails as usual and does not use the drip up. Clearing
the faults (or resetting or stopping the fake) ends every drip in progress: the connection
is shut down mid-answer.

Another acts on a watch's stream: `drop_initial_events(resource, after)` makes the next
streaming list of that resource (a watch whose initial events end with the annotated
bookmark) send `after` initial events and then lose its connection, before that bookmark.

Three hostile servers last until cleared, for one resource each:
- `expire_watches(resource)`: every watch from a resourceVersion answers 410 Expired,
  however recent the resourceVersion (a history always gone); streaming lists are served;
- `endless_lists(resource, mode)`: a list's last page carries a continue token all the same,
  so the list never ends (`ENDLESS_LIST_MODES`: the token just given again, or one that
  starts the list over, with or without `remainingItemCount`);
- `cut_streams(resource, after)`: every watch stream (streaming lists included) sends
  `after` whole lines, then half of the next one, and ends its body cleanly there.

Every request is logged (method, path, query, status, resource, Accept header) for
assertions; the log is bounded so a long benchmark cannot grow it without limit.
"""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass

from sandbox.kube import status
from sandbox.kube.requestinfo import RequestInfo, forbidden
from sandbox.kube.resources import Resource
from sandbox.kube.status import ApiError

ENDLESS_LIST_MODES = ("repeat", "restart", "uncounted")
"""How a list never ends: its last page answers with the continue token it was asked with
(`repeat`), or with one that starts the list over, from a new snapshot each time, so no token
comes twice (`restart`; `uncounted`: the same without `remainingItemCount`, as for a list
with selectors)."""


@dataclass(frozen=True, slots=True)
class RequestRecord:
    """One request as the fake answered it. `status` is the HTTP status sent (200 for a watch
    that started streaming). `time` is `time.monotonic()` on arrival."""

    method: str
    path: str
    query: dict[str, str]
    status: int
    resource: str | None  # `pods`, `deployments.apps`, ... or None for other paths
    watch: bool
    time: float
    accept: str  # the Accept header, "" when there was none
    user: str = ""  # who the request authenticated as; "" when it did not
    # What authorization saw: verb, group, resource, subresource, namespace, name.
    info: RequestInfo | None = None


@dataclass(frozen=True, slots=True)
class _Match:
    """Which requests a scripted fault applies to (None: any)."""

    resource: Resource | None
    path_prefix: str | None
    verb: str | None

    def __call__(self, path: str, resource: Resource | None, verb: str) -> bool:
        if self.resource is not None and resource != self.resource:
            return False
        if self.verb is not None and verb != self.verb:
            return False
        return self.path_prefix is None or path.startswith(self.path_prefix)


@dataclass(slots=True)
class _Script:
    status: int
    remaining: int
    matches: _Match
    retry_after: int


@dataclass(frozen=True, slots=True)
class Drip:
    """How to answer one request: a byte every `every` seconds (the status line and headers
    too when `headers`), until done or `cancelled` is set."""

    every: float
    headers: bool
    cancelled: threading.Event


@dataclass(slots=True)
class _DripScript:
    remaining: int
    matches: _Match
    every: float
    headers: bool


class Faults:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._scripts: list[_Script] = []
        self._forbidden: set[Resource] = set()
        self._drips: list[_DripScript] = []
        self._initial_cuts: dict[Resource, list[int]] = {}
        self._expired_watches: set[Resource] = set()
        self._endless_lists: dict[Resource, str] = {}
        self._line_cuts: dict[Resource, int] = {}
        # Set to end the drips in progress; replaced so that later drips start afresh.
        self._drips_cancelled = threading.Event()

    def fail_next(
        self,
        code: int,
        count: int,
        resource: Resource | None,
        path_prefix: str | None,
        retry_after: int,
        verb: str | None = None,
    ) -> None:
        if count < 1:
            raise ValueError("count must be at least 1")
        with self._lock:
            self._scripts.append(
                _Script(code, count, _Match(resource, path_prefix, verb), retry_after)
            )

    def drip_next(
        self,
        count: int,
        resource: Resource | None,
        path_prefix: str | None,
        verb: str | None,
        every: float,
        headers: bool,
    ) -> None:
        if count < 1:
            raise ValueError("count must be at least 1")
        if every < 0:
            raise ValueError("every must not be negative")
        if verb == "watch":
            raise ValueError("watches are not dripped; stall_watches() hangs them")
        with self._lock:
            self._drips.append(
                _DripScript(count, _Match(resource, path_prefix, verb), every, headers)
            )

    def drop_initial_events(self, resource: Resource, after: int) -> None:
        if after < 0:
            raise ValueError("after must not be negative")
        with self._lock:
            self._initial_cuts.setdefault(resource, []).append(after)

    def initial_events_cut(self, resource: Resource) -> int | None:
        """After how many initial events this streaming list of `resource` is to lose its
        connection, if a fault says so (the fault is used up)."""
        with self._lock:
            cuts = self._initial_cuts.get(resource)
            if not cuts:
                return None
            return cuts.pop(0)

    def expire_watches(self, resource: Resource) -> None:
        with self._lock:
            self._expired_watches.add(resource)

    def watches_expired(self, resource: Resource) -> bool:
        """Whether every watch of `resource` from a resourceVersion is to answer 410."""
        with self._lock:
            return resource in self._expired_watches

    def endless_lists(self, resource: Resource, mode: str) -> None:
        if mode not in ENDLESS_LIST_MODES:
            raise ValueError(f"mode must be one of {', '.join(ENDLESS_LIST_MODES)}")
        with self._lock:
            self._endless_lists[resource] = mode

    def endless_list_mode(self, resource: Resource) -> str | None:
        """How lists of `resource` never end (`ENDLESS_LIST_MODES`), if a fault says so."""
        with self._lock:
            return self._endless_lists.get(resource)

    def cut_streams(self, resource: Resource, after: int) -> None:
        if after < 0:
            raise ValueError("after must not be negative")
        with self._lock:
            self._line_cuts[resource] = after

    def stream_line_cut(self, resource: Resource) -> int | None:
        """After how many whole lines every watch stream of `resource` is to end inside the
        next one, if a fault says so."""
        with self._lock:
            return self._line_cuts.get(resource)

    def forbid(self, resource: Resource) -> None:
        with self._lock:
            self._forbidden.add(resource)

    def allow(self, resource: Resource) -> None:
        with self._lock:
            self._forbidden.discard(resource)

    def clear(self) -> None:
        with self._lock:
            self._scripts.clear()
            self._forbidden.clear()
            self._drips.clear()
            self._initial_cuts.clear()
            self._expired_watches.clear()
            self._endless_lists.clear()
            self._line_cuts.clear()
        self.end_drips()

    def end_drips(self) -> None:
        """End every drip in progress (scripted ones not yet met stay)."""
        with self._lock:
            cancelled, self._drips_cancelled = self._drips_cancelled, threading.Event()
        cancelled.set()

    def check(self, resource: Resource | None, info: RequestInfo, user: str) -> ApiError | None:
        """The fault this request meets, if any (a scripted one is used up by it); a 403 is
        worded as the API server's authorization filter words it for `user`."""
        with self._lock:
            if resource is not None and resource in self._forbidden:
                return forbidden(info, user)
            for script in self._scripts:
                if script.matches(info.path, resource, info.verb):
                    script.remaining -= 1
                    if script.remaining == 0:
                        self._scripts.remove(script)
                    if script.status == 403:
                        return forbidden(info, user)
                    return status.injected(script.status, resource, script.retry_after)
        return None

    def drip(self, path: str, resource: Resource | None, verb: str) -> Drip | None:
        """How to drip this (non-watch) request's answer, if at all (a script is used up)."""
        with self._lock:
            for script in self._drips:
                if script.matches(path, resource, verb):
                    script.remaining -= 1
                    if script.remaining == 0:
                        self._drips.remove(script)
                    return Drip(script.every, script.headers, self._drips_cancelled)
        return None


class RequestLog:
    def __init__(self, limit: int = 100_000) -> None:
        self._lock = threading.Lock()
        self._records: deque[RequestRecord] = deque(maxlen=limit)
        self._count = 0

    def add(
        self,
        method: str,
        path: str,
        query: dict[str, str],
        code: int,
        resource: Resource | None,
        watch: bool,
        arrived: float,
        accept: str,
        user: str,
        info: RequestInfo,
    ) -> None:
        qualified = resource.qualified if resource else None
        record = RequestRecord(
            method, path, query, code, qualified, watch, arrived, accept, user, info
        )
        with self._lock:
            self._records.append(record)
            self._count += 1

    def records(self) -> list[RequestRecord]:
        with self._lock:
            return list(self._records)

    @property
    def count(self) -> int:
        return self._count

    def clear(self) -> None:
        with self._lock:
            self._records.clear()
