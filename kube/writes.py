"""How a write to the API server is asked for: its query options and its preconditions.

Every write is strictly validated (`fieldValidation=Strict`): a field the server does not know
(a typo in a body built here) is a 400 `BadRequest` naming it, not silently dropped. On top of
that a caller may write under its own name in managedFields (`fieldManager`, so GitOps tools
can tell our changes apart) or ask the server to validate without persisting (`dryRun=All`).
A server-side apply (`APPLY_PATCH`) may take fields another manager owns (`force`); without
it, applying a value other than the one such a field holds is a `Conflict` naming the
manager.

A write that must not overwrite a change made since its read carries a precondition: the
resourceVersion in a patch's metadata, or `Preconditions` (uid and resourceVersion) on a
delete. The server answers a `Conflict` when the object moved on.

How it fails: nothing here fails; the server's refusals come back as `kube.errors`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

MERGE_PATCH = "application/merge-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"  # JSON is YAML: the body is sent as JSON


@dataclass(frozen=True, slots=True, kw_only=True)
class WriteOptions:
    """The query options of one write."""

    field_manager: str | None = None
    dry_run: bool = False
    """Validated and admitted by the server, answered with the object as it would be, never
    stored."""
    force: bool = False
    """A server-side apply takes the fields it sets from whoever owns them (the server
    refuses `force` on any other write)."""

    def params(self) -> dict[str, str]:
        params = {"fieldValidation": "Strict"}
        if self.field_manager:
            params["fieldManager"] = self.field_manager
        if self.dry_run:
            params["dryRun"] = "All"
        if self.force:
            params["force"] = "true"
        return params

    def delete_params(self) -> dict[str, str]:
        """A delete sends no object: nothing to validate or to own, only a dry run to ask."""
        return {"dryRun": "All"} if self.dry_run else {}

    def delete_body(self, preconditions: Preconditions | None) -> dict[str, Any] | None:
        """A delete's DeleteOptions. The server reads them from the body alone once there is
        one (the query is then ignored), so a dry run is said there too, not only in the
        query (where logs and audits see it)."""
        body: dict[str, Any] = {}
        if preconditions is not None:
            body["preconditions"] = {
                "uid": preconditions.uid,
                "resourceVersion": preconditions.resource_version,
            }
        if self.dry_run:
            body["dryRun"] = ["All"]
        return body or None


STRICT = WriteOptions()


@dataclass(frozen=True, slots=True)
class Preconditions:
    """Delete only the very object that was read: same uid (not a namesake created since),
    same resourceVersion (not changed since)."""

    uid: str
    resource_version: str
