"""Ordering resourceVersions as k8s.io/apimachinery's `CompareResourceVersion` does
(pkg/util/resourceversion/resourceversion.go; KEP-5504, Kubernetes 1.35)."""

from __future__ import annotations

import pytest

from collector.resource_version import compare, is_behind


@pytest.mark.parametrize(
    ("a", "b", "order"),
    [
        ("9", "10", -1),  # as integers, not as text
        ("10", "9", 1),
        ("123", "123", 0),
        ("123", "124", -1),
        ("99999999999999999999999", "100000000000000000000000", -1),  # no length limit
    ],
)
def test_well_formed_versions_compare_as_integers(a: str, b: str, order: int) -> None:
    assert compare(a, b) == order


@pytest.mark.parametrize("odd", ["", "0", "012", "12a", "-1", "١٢", "abc/1"])
def test_versions_that_are_not_positive_integers_cannot_be_ordered(odd: str) -> None:
    assert compare(odd, "5") is None and compare("5", odd) is None


def test_only_an_orderable_older_version_is_behind() -> None:
    assert is_behind("9", "10")
    assert not is_behind("10", "10")
    assert not is_behind("11", "10")
    assert not is_behind("opaque-1", "10")  # the server's own scheme: taken as given
    assert not is_behind("5", "")  # nothing held yet
