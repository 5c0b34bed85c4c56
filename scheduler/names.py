"""Names the scaling role gives the objects it creates: provisional HPAs and Events.

Both must be DNS-1123 subdomains (at most 253 characters of lowercase letters, digits, `-`
and `.`, each dot-separated part starting and ending with a letter or digit), or the API
server refuses the create with 422. A Deployment's name is one already, but a suffix can
push it past 253 characters, and cutting it to fit can leave a `-` or `.` at the end. A
name that does not fit as it is becomes the base made valid and cut, a `-`, and 8 hex
digits of SHA-256 over the whole wanted name, then the suffix: deterministic (a restarted
agent finds the same name), and two long names cut to the same prefix still differ.
"""

from __future__ import annotations

import hashlib
import itertools
import re
from collections.abc import Container

LIMIT = 253
_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_SUBDOMAIN = re.compile(rf"{_LABEL}(\.{_LABEL})*", re.ASCII)
_NOT_ALLOWED = re.compile(r"[^a-z0-9.-]+", re.ASCII)
# A run of separators holding a dot ends one part and starts the next: one dot.
_DOTTED_RUN = re.compile(r"[-.]*\.[-.]*")
HPA_SUFFIX = "-moonin"


def is_subdomain(name: str) -> bool:
    return len(name) <= LIMIT and _SUBDOMAIN.fullmatch(name) is not None


def subdomain(base: str, suffix: str = "") -> str:
    """`base + suffix` when that is a valid name, else `<base cut>-<hash><suffix>`.
    `suffix` must be empty or a valid name's tail (`-moonin`, `.17f3a...`)."""
    wanted = base + suffix
    if is_subdomain(wanted):
        return wanted
    digest = hashlib.sha256(wanted.encode()).hexdigest()[:8]
    tail = f"{digest}{suffix}"
    cleaned = _DOTTED_RUN.sub(".", _NOT_ALLOWED.sub("-", base.lower()))
    cut = cleaned[: LIMIT - len(tail) - 1].strip("-.")
    return f"{cut}-{tail}" if cut else tail


def provisional_hpa_name(deployment: str, taken: Container[str]) -> str:
    """The Deployment's name; when an HPA of that name scales something else,
    `<name>-moonin`, then `<name>-moonin-<n>` for the first free n."""
    for suffix in itertools.chain(
        ("", HPA_SUFFIX), (f"{HPA_SUFFIX}-{n}" for n in itertools.count(2))
    ):
        candidate = subdomain(deployment, suffix)
        if candidate not in taken:
            return candidate
    raise AssertionError("unreachable: the suffixes never end")


def event_name(involved: str, nanoseconds: int) -> str:
    """client-go's Event name (`record/event.go`: the object's name, a dot, a nanosecond
    clock in hex), kept a valid name however long the object's."""
    return subdomain(involved, f".{nanoseconds:x}")
