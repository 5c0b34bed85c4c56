"""The fake platform's side of a scaling test against a running agent: a window opened
now, the events the platform received, and the scaling role started from the chart."""

from __future__ import annotations

import subprocess
from datetime import UTC, datetime, timedelta
from typing import Any

from sandbox.platform import FakePlatform
from sandbox.scaling import manual_template
from tests.chart_install import Installed


def window(
    platform: FakePlatform, template_id: str, seconds: float, *actions: dict[str, Any]
) -> None:
    """Template `template_id` alone on the platform, a manual window from now on for
    `seconds`, with `actions`."""
    started = datetime.now(UTC)
    platform.set_templates(
        [manual_template(started, started + timedelta(seconds=seconds), template_id)]
    )
    platform.set_actions(template_id, list(actions))


def events_of(platform: FakePlatform, kind: str) -> list[dict[str, Any]]:
    """The scaling events of `kind` (apply, revert, error) the platform received."""
    return [event for event in platform.events().values() if event["type"] == kind]


def start_scaling(installed: Installed, pod: str, *options: str) -> subprocess.Popen[str]:
    """The chart's scaling workload as the pod `pod` runs it."""
    env = installed.env("scaling", "agent", pod)
    return installed.start(env, "run", "--role", "scaling", *options)
