"""Scaling templates and actions as the fake platform serves them (docs/protocol.md).

One builder for the demo, the tests and the benchmarks. A template defaults to a daily
window 08:00-18:00 UTC; `manual_execution` makes it run now instead, until a given end.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any


def stamp(moment: datetime) -> str:
    """An instant as the contract writes it: RFC 3339 in UTC with a `Z`."""
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


def template(template_id: str = "t-1", **changes: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "id": template_id,
        "name": "black friday",
        "enabled": True,
        "valid_until": None,
        "timezone": "UTC",
        "cron": "0 8 * * *",
        "duration_minutes": 600,
        "execution": None,
    }
    return {**base, **changes}


def manual_execution(
    started: datetime | str, ends: datetime, *, execution_id: str = "x-1"
) -> dict[str, Any]:
    """A running manual execution from `started` (an instant, or its text as sent before)
    until `ends`."""
    return {
        "id": execution_id,
        "status": "running",
        "started_at": started if isinstance(started, str) else stamp(started),
        "run_until": stamp(ends),
    }


def manual_template(
    started: datetime | str, ends: datetime, template_id: str = "t-1", **changes: Any
) -> dict[str, Any]:
    """A template whose manual execution runs from `started` until `ends`."""
    execution = manual_execution(started, ends)
    return template(template_id, cron=None, execution=execution, **changes)


def action(
    action_id: str = "a-1",
    deployment: str = "web",
    low: int = 4,
    high: int = 20,
    *,
    up: int = 1,
    down: int = 1,
    ns: str = "shop",
) -> dict[str, Any]:
    return {
        "id": action_id,
        "namespace": ns,
        "deployment": deployment,
        "min_replicas": low,
        "max_replicas": high,
        "priority_up": up,
        "priority_down": down,
    }
