"""How a write is asked for (`kube.writes`): what reaches the server's query and body."""

from __future__ import annotations

import pytest

from kube.writes import Preconditions, WriteOptions


@pytest.mark.parametrize(
    ("options", "params"),
    [
        (WriteOptions(), {"fieldValidation": "Strict"}),
        (
            WriteOptions(field_manager="moonin-agent", dry_run=True),
            {"fieldValidation": "Strict", "fieldManager": "moonin-agent", "dryRun": "All"},
        ),
    ],
)
def test_every_write_is_strict_and_carries_what_was_asked(
    options: WriteOptions, params: dict[str, str]
) -> None:
    assert options.params() == params


def test_a_dry_run_delete_says_so_in_the_body_the_server_reads() -> None:
    # With a body, kube-apiserver takes a delete's options from it alone: a dryRun only in
    # the query would delete for real.
    dry = WriteOptions(dry_run=True)
    assert dry.delete_body(Preconditions("u-1", "7")) == {
        "preconditions": {"uid": "u-1", "resourceVersion": "7"},
        "dryRun": ["All"],
    }
    assert dry.delete_params() == {"dryRun": "All"}
    assert WriteOptions().delete_body(None) is None
    assert WriteOptions().delete_params() == {}
