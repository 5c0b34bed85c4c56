"""A write's body on its way to the store: decoded, pruned, defaulted and validated as
kube-apiserver does it for every create, update and patch over HTTP.

Order, as upstream: the decoder refuses values of the wrong type (400); fields the schema
lacks, and keys the body gives twice, are handled as the request's `fieldValidation` says
(Strict: 400 naming them all; Warn, the default: unknown ones dropped, each named in a
`Warning` header; Ignore: dropped); the kind's defaults are filled in; validation refuses
what breaks its rules (422 Invalid). For patches this runs on the patched object: the
patch's own problems come first (its duplicate keys; a JSON patch's unknown or duplicate
operation members), then the patched object's unknown fields in key order, and fields the
stored object already carried are not held against the patch. Writes made
through the Python side of the fake skip all of this, so tests can seed any object. Source:
https://kubernetes.io/docs/reference/using-api/api-concepts/#field-validation.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sandbox.kube import decoding, defaulting, schemas, status, validation
from sandbox.kube.resources import Resource

FIELD_VALIDATION = ("Ignore", "Strict", "Warn")
DRY_RUN = ("All",)


@dataclass(frozen=True, slots=True)
class WriteOptions:
    """The query parameters every write takes: `fieldValidation` and `dryRun`."""

    field_validation: str
    dry_run: bool

    @classmethod
    def parse(cls, query: dict[str, str], options_kind: str) -> WriteOptions:
        """`options_kind` names the options in a 422 (CreateOptions, PatchOptions, ...)."""
        errors = []
        chosen = query.get("fieldValidation") or "Warn"
        if chosen not in FIELD_VALIDATION:
            # Upstream lists "" among the supported values (it means the default, Warn).
            supported = ("", *FIELD_VALIDATION)
            errors.append(status.unsupported_field("fieldValidation", chosen, supported))
        dry_run = query.get("dryRun", "")
        if dry_run not in ("", *DRY_RUN):
            errors.append(status.unsupported_field("dryRun", dry_run, DRY_RUN))
        if errors:
            raise status.invalid_options(options_kind, errors)
        return cls(chosen, dry_run == "All")


def admit(
    git_version: str,
    resource: Resource,
    obj: dict[str, Any],
    stored: dict[str, Any] | None,
    options: WriteOptions,
    *,
    duplicates: Sequence[str] = (),
    patch_problems: Sequence[decoding.FieldProblem] | None = None,
) -> list[str]:
    """Make `obj` what the server would store, in place; returns the warnings to send.
    `stored` is the object a PUT or PATCH replaces (None for a create); `duplicates` the
    paths of keys a create or update body gave twice (`decoding.duplicate_fields`);
    `patch_problems`, given for a patch (`obj` is then the patch applied to `stored`), what
    is wrong with the patch document itself."""
    release = schemas.for_version(git_version)
    definition = release.for_kind(resource.group, resource.version, resource.kind)
    warnings: list[str] = []
    if definition is not None:
        warnings = _prune(
            release, definition, resource, obj, stored, options, duplicates, patch_problems
        )
    defaulting.apply(resource.api_version, resource.kind, obj)
    errors = validation.validate(resource.group, resource.kind, obj)
    if errors:
        name = str((obj.get("metadata") or {}).get("name") or "")
        raise status.invalid_object(resource, name, errors)
    return warnings


def _prune(
    release: schemas.Schemas,
    definition: str,
    resource: Resource,
    obj: dict[str, Any],
    stored: dict[str, Any] | None,
    options: WriteOptions,
    duplicates: Sequence[str],
    patch_problems: Sequence[decoding.FieldProblem] | None,
) -> list[str]:
    patched = patch_problems is not None
    problems = list(patch_problems or ())
    try:
        found = decoding.field_problems(
            release, definition, obj, () if patched else duplicates, sort_keys=patched
        )
    except decoding.DecodeError as error:
        raise _cannot_handle(resource, str(error)) from None
    if stored is not None and found:
        try:
            already = {str(f) for f in decoding.field_problems(release, definition, stored)}
        except decoding.DecodeError:
            already = set()
        found = [problem for problem in found if str(problem) not in already]
    problems += found
    if not problems:
        return []
    if options.field_validation == "Strict":
        listed = ", ".join(str(problem) for problem in problems)
        raise _cannot_handle(resource, f"strict decoding error: {listed}")
    for problem in problems:
        problem.prune()
    if options.field_validation == "Ignore":
        return []
    return [str(problem) for problem in problems]


def _cannot_handle(resource: Resource, detail: str) -> status.ApiError:
    kind, version = resource.kind, resource.version
    return status.bad_request(
        f'{kind} in version "{version}" cannot be handled as a {kind}: {detail}'
    )


def warning_headers(warnings: list[str]) -> tuple[tuple[str, str], ...]:
    """`Warning: 299 - "text"` headers, as the real server sends them (RFC 7234 form)."""
    return tuple(("Warning", f'299 - "{_quote(text)}"') for text in warnings)


def _quote(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"')
