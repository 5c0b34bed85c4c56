"""Injected request faults and the request log.

Faults are decided before a request touches the store, so a faulted write changes nothing:
- `fail_next(status, count, resource=..., path_prefix=..., verb=...)`: the next `count`
  matching requests answer `status` (403 Forbidden, 409 Conflict, 429 TooManyRequests with
  Retry-After, 500 InternalError, ...) with the Status body the real server would send;
  `verb` (`get`, `list`, `patch`, ...) lets a test fail a write but not the read before it;
- `forbid(resource)`: every request on that resource answers 403 until `allow(resource)`,
  the way a missing RBAC rule disables one kind while the others keep working.

Every request is logged (method, path, query, status, resource) for assertions; the log is
bounded so a long benchmark cannot grow it without limit.
"""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass

from sandbox.kube import status
from sandbox.kube.resources import Resource
from sandbox.kube.status import ApiError


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


@dataclass(slots=True)
class _Script:
    status: int
    remaining: int
    resource: Resource | None
    path_prefix: str | None
    retry_after: int
    verb: str | None = None

    def matches(self, path: str, resource: Resource | None, verb: str) -> bool:
        if self.resource is not None and resource != self.resource:
            return False
        if self.verb is not None and verb != self.verb:
            return False
        return self.path_prefix is None or path.startswith(self.path_prefix)


class Faults:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._scripts: list[_Script] = []
        self._forbidden: set[Resource] = set()

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
            self._scripts.append(_Script(code, count, resource, path_prefix, retry_after, verb))

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

    def check(
        self, path: str, resource: Resource | None, verb: str, namespace: str | None
    ) -> ApiError | None:
        """The fault this request meets, if any (a scripted one is used up by it)."""
        with self._lock:
            if resource is not None and resource in self._forbidden:
                return status.forbidden(resource, verb, namespace)
            for script in self._scripts:
                if script.matches(path, resource, verb):
                    script.remaining -= 1
                    if script.remaining == 0:
                        self._scripts.remove(script)
                    return status.injected(
                        script.status, resource, verb, namespace, script.retry_after
                    )
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
    ) -> None:
        record = RequestRecord(
            method, path, query, code, resource.qualified if resource else None, watch, arrived
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
