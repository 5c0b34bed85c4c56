"""What the platform says: each template's activation and its actions' ids, and from that,
whether the window a managed HPA is in is still on. The revert scan judges on the last good
answer evaluated at its own moment (`Answer.view_at`), so a platform that stops answering
well cannot keep a window open past the end that answer gives it. An answer is decoded once
(`decode_answer`), when it arrives; evaluating it at another instant decodes nothing again.

`revert_reason` is the one rule for ending a window, used by the revert scan and by a
takeover alike, in this order:
1. min or max changed by someone else during the window: `overridden`;
2. no answer from the platform yet (no view: the process has just started and the
   platform has not answered): `expired` once the `run-until` annotation has passed,
   otherwise the window stays;
3. the template is active with the same window start and still has the action (or its
   actions could not be read this cycle): the window stays, whatever `run-until` says (the
   apply step keeps that annotation current);
4. the window's `run-until` has passed, or the template expired (`valid_until` cut it
   short): `expired`;
5. anything else (disabled, missing from the list, invalid, another window of the same
   template, a manual execution finished or cancelled, the action removed): `disabled`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from scheduler import window
from scheduler.annotations import Window
from scheduler.events import RevertReason
from scheduler.templates import (
    MalformedTemplate,
    Template,
    TemplatesError,
    decode_template,
)


@dataclass(frozen=True, slots=True)
class TemplateState:
    raw: dict[str, Any]
    template: Template | MalformedTemplate
    activation: window.Activation
    action_ids: frozenset[str] | None  # None: not read this cycle

    @property
    def name(self) -> str:
        template = self.template
        return (template.name if isinstance(template, Template) else None) or ""


@dataclass(slots=True)
class TemplateView:
    """The templates in the platform's order, by id (the first of duplicate ids wins)."""

    templates: dict[str, TemplateState] = field(default_factory=dict)

    def still_on(self, window: Window) -> bool:
        """Whether `window`'s template is active in that same window and still has its
        action (or its actions could not be read this cycle)."""
        state = self.templates.get(window.template_id)
        if state is None:
            return False
        active = state.activation.window
        if active is None or active.start_text != window.window_start:
            return False
        return state.action_ids is None or window.action_id in state.action_ids


@dataclass(frozen=True, slots=True)
class Decoded:
    """One template as sent and as decoded."""

    raw: dict[str, Any]
    template: Template | MalformedTemplate


@dataclass(frozen=True, slots=True)
class Answer:
    """The platform's last good answer, decoded: its templates (the first of duplicate ids),
    what could not be read of it, and the action ids of each template whose actions were
    read with it."""

    templates: tuple[Decoded, ...]
    unreadable: tuple[str, ...] = ()
    action_ids: dict[str, frozenset[str]] = field(default_factory=dict)

    def view_at(self, now: datetime) -> TemplateView:
        """The answer evaluated at `now`: a window that has ended since is over."""
        view = TemplateView()
        for decoded in self.templates:
            template = decoded.template
            activation = window.evaluate(template, now)
            ids = self.action_ids.get(template.id)
            view.templates[template.id] = TemplateState(decoded.raw, template, activation, ids)
        return view


def decode_answer(raw_templates: list[Any]) -> Answer:
    """Decode each template on its own, so one that cannot be read does not hide the
    others."""
    decoded: dict[str, Decoded] = {}
    unreadable: list[str] = []
    for index, raw in enumerate(raw_templates):
        try:
            template = decode_template(index, raw)
        except TemplatesError as exc:
            unreadable.append(str(exc))
            continue
        if template.id in decoded:
            unreadable.append(f"templates[{index}]: duplicate id {template.id!r}")
            continue
        decoded[template.id] = Decoded(raw, template)
    return Answer(tuple(decoded.values()), tuple(unreadable))


def revert_reason(
    window: Window, now: datetime, view: TemplateView | None, *, synced: bool = False
) -> RevertReason | None:
    """Why `window` (as read from its HPA) is over, or None while it is on. `synced`: its
    bounds were changed by a GitOps sync that the window re-asserts (`scheduler.gitops`),
    which does not end it."""
    if window.overridden and not synced:
        return "overridden"
    if view is None:
        return "expired" if window.ended(now) else None
    if view.still_on(window):
        return None
    state = view.templates.get(window.template_id)
    if window.ended(now) or (state is not None and state.activation.reason == "expired"):
        return "expired"
    return "disabled"
