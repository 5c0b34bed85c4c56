"""Container logs served by `pods/{name}/log`, set per pod and container by tests.

The real kubelet streams logs; here a log is a text set in advance (`set`), and a request
reads it with the query options the agent uses: `container`, `previous`, `tailLines`,
`limitBytes`. A pod whose log was never set has an empty log; a pod on no node yet has
none at all (204, as kube-apiserver answers when there is no kubelet to ask).
"""

from __future__ import annotations

import threading


class PodLogs:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._logs: dict[tuple[str, str, str, bool], str] = {}

    def set(self, namespace: str, pod: str, container: str, text: str, previous: bool) -> None:
        with self._lock:
            self._logs[(namespace, pod, container, previous)] = text

    def get(self, namespace: str, pod: str, container: str, previous: bool) -> str | None:
        with self._lock:
            return self._logs.get((namespace, pod, container, previous))

    def clear(self) -> None:
        with self._lock:
            self._logs.clear()


def tail(text: str, lines: int | None) -> str:
    """The last `lines` lines (all of them for None), line endings kept."""
    if lines is None:
        return text
    if lines <= 0:
        return ""
    return "".join(text.splitlines(keepends=True)[-lines:])
