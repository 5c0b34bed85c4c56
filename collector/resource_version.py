"""Ordering resourceVersions, so an informer's never moves backwards.

resourceVersions are opaque strings to clients, except that since Kubernetes 1.35
(KEP-5504) those of etcd-backed resources are positive decimal integers without leading
zeros, ordered as integers. This is k8s.io/apimachinery's
`pkg/util/resourceversion.CompareResourceVersion`: the longer string is the greater,
equal lengths compare lexically. Anything else (an aggregated API's own scheme, "0", "")
cannot be ordered, and `compare` says so with None rather than guessing.
"""

from __future__ import annotations


def compare(a: str, b: str) -> int | None:
    """-1, 0 or 1 as `a` is older than, the same as or newer than `b`; None when either
    is not a well-formed resourceVersion."""
    if not (_well_formed(a) and _well_formed(b)):
        return None
    if len(a) != len(b):
        return -1 if len(a) < len(b) else 1
    return (a > b) - (a < b)


def is_behind(candidate: str, held: str) -> bool:
    """Whether moving from `held` to `candidate` would go back in time. Versions that
    cannot be ordered are taken as given: the server is the authority on its own scheme."""
    order = compare(candidate, held)
    return order is not None and order < 0


def _well_formed(rv: str) -> bool:
    return rv.isascii() and rv.isdigit() and not rv.startswith("0")
