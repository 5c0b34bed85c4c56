"""The lines of a watch stream (`kube.api._split_lines`): whole events only, wherever the
network cut them, blank and whitespace-only lines left out, a cut last event an error."""

from __future__ import annotations

import pytest

from kube.api import _split_lines
from kube.errors import KubeError


def lines(*chunks: bytes) -> list[bytes]:
    return list(_split_lines(iter(chunks), "/api/v1/pods"))


def test_events_come_whole_wherever_the_chunks_are_cut() -> None:
    stream = b'{"type":"ADDED"}\n{"type":"MODIFIED"}\n{"type":"BOOKMARK"}\n'
    expected = [b'{"type":"ADDED"}', b'{"type":"MODIFIED"}', b'{"type":"BOOKMARK"}']
    for cut in range(len(stream) + 1):
        assert lines(stream[:cut], stream[cut:]) == expected
    assert lines(*(stream[i : i + 1] for i in range(len(stream)))) == expected


def test_blank_and_whitespace_only_lines_are_left_out() -> None:
    assert lines(b'\n\r\n  \t\n{"a":1}\n \n{"b":2}\r\n', b"\n") == [b'{"a":1}', b'{"b":2}\r']
    assert lines(b"  \n", b"\t") == []  # a tail of whitespace is no event cut short


def test_a_stream_that_ends_inside_an_event_is_an_error() -> None:
    with pytest.raises(KubeError, match="ended inside an event"):
        lines(b'{"type":"ADDED"}\n{"type":"MOD')
