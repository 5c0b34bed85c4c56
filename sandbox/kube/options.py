"""The list options of a list or watch request, as kube-apiserver reads and checks them.

A boolean query parameter is read as the real server converts it: absent is unset, `0` and
`false` (any case) are false, anything else (an empty value too) is true. `sendInitialEvents`
keeps the difference between unset and false, since the checks below depend on it.

What the server makes of the WatchList parameters (`sendInitialEvents`,
`resourceVersionMatch`) depends on its mode, one of `STREAMING_LIST_MODES`:
- "serve", the WatchList feature on: a watch with neither parameter and resourceVersion ""
  or "0" is defaulted to `sendInitialEvents=true&resourceVersionMatch=NotOlderThan`, then
  the options are checked: `sendInitialEvents` needs `resourceVersionMatch=NotOlderThan`,
  `resourceVersionMatch` needs `sendInitialEvents` and no `continue`, and is `NotOlderThan`
  or nothing (`allowWatchBookmarks` is not required: without it the initial events simply
  have no end marker);
- "refuse", the feature off: the same checks, and `sendInitialEvents` on a watch is refused
  whatever its value;
- "ignore", a server that predates or ignores the parameters: they are dropped unread.
A list with `sendInitialEvents` is refused (except by "ignore"); a list's
`resourceVersionMatch` is checked as upstream in every mode. Refusals are one 422 Invalid
listing every complaint. Unlike upstream, where only `watch=true` makes options a watch's,
a watch on the legacy `/watch/` path is checked and defaulted as one too.

A `resourceVersion` that is not a number is refused where upstream's storage parses it,
with the unclassified 500 it gives (`resource_version_number`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from sandbox.kube import status
from sandbox.kube.status import FieldError, forbidden_field, unsupported_field

STREAMING_LIST_MODES = ("serve", "refuse", "ignore")
NOT_OLDER_THAN = "NotOlderThan"
EXACT = "Exact"


def flag(query: dict[str, str], name: str) -> bool | None:
    """A boolean query parameter: None when absent."""
    value = query.get(name)
    if value is None:
        return None
    return value != "0" and value.lower() != "false"


@dataclass(frozen=True, slots=True)
class ListOptions:
    watch: bool
    resource_version: str
    resource_version_match: str
    send_initial_events: bool | None
    allow_bookmarks: bool
    continue_token: str

    @classmethod
    def parse(cls, query: dict[str, str], *, watch: bool) -> ListOptions:
        return cls(
            watch,
            query.get("resourceVersion", ""),
            query.get("resourceVersionMatch", ""),
            flag(query, "sendInitialEvents"),
            bool(flag(query, "allowWatchBookmarks")),
            query.get("continue", ""),
        )

    @property
    def resource_version_number(self) -> int:
        """The resourceVersion as a number, 0 when unset; a value that is not one is 400 for
        a list and 500 for a watch (`status.invalid_resource_version`)."""
        text = self.resource_version
        if text in ("", "0"):
            return 0
        if not (text.isascii() and text.isdigit()):
            raise status.invalid_resource_version(text, watch=self.watch)
        return int(text)

    @property
    def ends_initial_events(self) -> bool:
        """A streaming list whose initial events end with the annotated bookmark."""
        return bool(self.send_initial_events) and self.allow_bookmarks

    def as_served(self, mode: str) -> ListOptions:
        """These options as a server in `mode` takes them; ApiError 422 when it refuses them."""
        options = self
        if mode == "ignore":
            match = "" if self.watch else self.resource_version_match
            options = dataclasses.replace(
                self, send_initial_events=None, resource_version_match=match
            )
        elif (
            mode == "serve"
            and self.watch
            and self.send_initial_events is None
            and not self.resource_version_match
            and self.resource_version in ("", "0")
        ):
            options = dataclasses.replace(
                self, send_initial_events=True, resource_version_match=NOT_OLDER_THAN
            )
        errors = options._errors(watch_list=mode != "refuse")
        if errors:
            raise status.invalid_list_options(errors)
        return options

    def _errors(self, *, watch_list: bool) -> list[FieldError]:
        errors: list[FieldError] = []
        match = self.resource_version_match
        if self.watch:
            if self.send_initial_events is not None:
                if match != NOT_OLDER_THAN:
                    errors.append(
                        forbidden_field(
                            "resourceVersionMatch",
                            f"sendInitialEvents requires setting resourceVersionMatch to "
                            f"{NOT_OLDER_THAN}",
                        )
                    )
                if not watch_list:
                    errors.append(
                        forbidden_field(
                            "sendInitialEvents",
                            "sendInitialEvents is forbidden for watch unless the WatchList "
                            "feature gate is enabled",
                        )
                    )
            if match:
                if self.send_initial_events is None:
                    errors.append(
                        forbidden_field(
                            "resourceVersionMatch",
                            "resourceVersionMatch is forbidden for watch unless "
                            "sendInitialEvents is provided",
                        )
                    )
                if match != NOT_OLDER_THAN:
                    errors.append(
                        unsupported_field("resourceVersionMatch", match, (NOT_OLDER_THAN,))
                    )
                if self.continue_token:
                    errors.append(self._match_with_continue())
            return errors
        if match:
            if not self.resource_version:
                errors.append(
                    forbidden_field(
                        "resourceVersionMatch",
                        "resourceVersionMatch is forbidden unless resourceVersion is provided",
                    )
                )
            if self.continue_token:
                errors.append(self._match_with_continue())
            if match not in (EXACT, NOT_OLDER_THAN):
                errors.append(
                    unsupported_field("resourceVersionMatch", match, (EXACT, NOT_OLDER_THAN, ""))
                )
            if match == EXACT and self.resource_version == "0":
                errors.append(
                    forbidden_field(
                        "resourceVersionMatch",
                        'resourceVersionMatch "exact" is forbidden for resourceVersion "0"',
                    )
                )
        if self.send_initial_events is not None:
            errors.append(
                forbidden_field("sendInitialEvents", "sendInitialEvents is forbidden for list")
            )
        return errors

    @staticmethod
    def _match_with_continue() -> FieldError:
        return forbidden_field(
            "resourceVersionMatch", "resourceVersionMatch is forbidden when continue is provided"
        )
