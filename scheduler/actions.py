"""The actions of a template, as the scaling API sends them, checked before anything is
written to a cluster.

An action needs an `id`, a `namespace`, a `deployment`, and whole numbers `min_replicas >=
1` and `max_replicas >= min_replicas` (booleans are not numbers here). The priorities
order applies and reverts; a missing or null priority reads as 0, so an action the
platform sends without one still applies, first among equals. Unknown fields are ignored.

How it fails: never raises. An action that breaks a rule becomes an `InvalidAction` whose
message names the field, which the reconciler reports as an `invalid_action` error event.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True, kw_only=True)
class Action:
    id: str
    namespace: str
    deployment: str
    min_replicas: int
    max_replicas: int
    priority_up: int
    priority_down: int

    @property
    def target(self) -> str:
        return f"{self.namespace}/{self.deployment}"


@dataclass(frozen=True, slots=True, kw_only=True)
class InvalidAction:
    """What could be read of a broken action (for the error event) and what is wrong."""

    message: str
    id: str | None = None
    namespace: str | None = None
    deployment: str | None = None
    min_replicas: int | None = None
    max_replicas: int | None = None
    priority_up: int = 0


def parse(raw: Any) -> Action | InvalidAction:
    if not isinstance(raw, Mapping):
        return InvalidAction(message=f"an action must be an object, got {type(raw).__name__}")
    problems: list[str] = []
    action_id = _text(raw, "id", problems)
    namespace = _text(raw, "namespace", problems)
    deployment = _text(raw, "deployment", problems)
    low = _count(raw, "min_replicas", problems)
    high = _count(raw, "max_replicas", problems)
    priority_up = _priority(raw, "priority_up", problems)
    priority_down = _priority(raw, "priority_down", problems)
    if low is not None and low < 1:
        problems.append(f"min_replicas must be at least 1, got {low}")
    if low is not None and high is not None and high < low:
        problems.append(f"max_replicas ({high}) is below min_replicas ({low})")
    if problems:
        return InvalidAction(
            id=action_id,
            namespace=namespace,
            deployment=deployment,
            min_replicas=low,
            max_replicas=high,
            priority_up=priority_up,
            message="; ".join(problems),
        )
    assert action_id and namespace and deployment and low is not None and high is not None
    return Action(
        id=action_id,
        namespace=namespace,
        deployment=deployment,
        min_replicas=low,
        max_replicas=high,
        priority_up=priority_up,
        priority_down=priority_down,
    )


def _text(raw: Mapping[str, Any], name: str, problems: list[str]) -> str | None:
    value = raw.get(name)
    if isinstance(value, str) and value:
        return value
    problems.append(f"{name} is {'missing' if value is None else 'not a non-empty string'}")
    return None


def _count(raw: Mapping[str, Any], name: str, problems: list[str]) -> int | None:
    value = raw.get(name)
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    problems.append(f"{name} is {'missing' if value is None else 'not a whole number'}")
    return None


def _priority(raw: Mapping[str, Any], name: str, problems: list[str]) -> int:
    value = raw.get(name)
    if value is None:
        return 0
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    problems.append(f"{name} is not a whole number")
    return 0
