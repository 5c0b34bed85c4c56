"""Reading an answer within a byte bound: whatever the compression ratio, no more than the
bound (plus one byte) is ever inflated, and the rest of the answer is not even read."""

from __future__ import annotations

import zlib
from collections.abc import Iterator

import httpx
import pytest

from runtime.bounded import AnswerTooLarge, UndecodableAnswer, describe_size, read_bounded

LIMIT = 64 * 1024


class CountingStream(httpx.SyncByteStream):
    """Raw body bytes handed out in 16 KiB pieces, counting how many were taken."""

    def __init__(self, raw: bytes) -> None:
        self.raw = raw
        self.taken = 0

    def __iter__(self) -> Iterator[bytes]:
        for start in range(0, len(self.raw), 16 * 1024):
            piece = self.raw[start : start + 16 * 1024]
            self.taken += len(piece)
            yield piece


def answer(raw: bytes, encoding: str | None = None) -> tuple[httpx.Response, CountingStream]:
    stream = CountingStream(raw)
    headers = {"Content-Encoding": encoding} if encoding else {}
    return httpx.Response(200, headers=headers, stream=stream), stream


def gzip(data: bytes) -> bytes:
    return zlib.compress(data, 9, wbits=31)


def bomb(inflated: int) -> bytes:
    """A gzip body of `inflated` zero bytes, built without holding them."""
    packer = zlib.compressobj(9, zlib.DEFLATED, 31)
    block = bytes(1 << 20)
    parts = [packer.compress(block) for _ in range(inflated >> 20)]
    return b"".join(parts) + packer.flush()


def test_a_gzip_answer_within_the_bound_is_inflated_whole() -> None:
    body = b'{"templates": []}' * 100
    response, _ = answer(gzip(body), "gzip")
    assert read_bounded(response, LIMIT) == body


def test_a_gzip_bomb_stops_after_the_bound_and_most_of_it_is_never_read() -> None:
    raw = bomb(256 << 20)  # 256 MiB of zeros in ~250 KB
    response, stream = answer(raw, "gzip")
    with pytest.raises(AnswerTooLarge) as caught:
        read_bounded(response, LIMIT)
    assert caught.value.limit == LIMIT
    assert str(caught.value) == "the answer is over 64 KiB"
    # One 16 KiB piece of the bomb already inflates past 64 KiB: reading stops there.
    assert stream.taken <= 16 * 1024 < len(raw)


def test_a_plain_answer_over_the_bound_is_refused_and_cut_gives_its_start() -> None:
    body = b"x" * (LIMIT * 4)
    response, stream = answer(body)
    with pytest.raises(AnswerTooLarge):
        read_bounded(response, LIMIT)
    assert stream.taken < len(body)
    response, _ = answer(body)
    assert read_bounded(response, 10, cut=True) == b"x" * 10


def test_cut_reads_only_the_start_of_a_bomb() -> None:
    response, stream = answer(bomb(64 << 20), "gzip")
    assert read_bounded(response, 100, cut=True) == bytes(100)
    assert stream.taken == 16 * 1024


def test_deflate_is_read_with_or_without_its_zlib_wrapper() -> None:
    body = b'{"resync": true}' * 50
    wrapped = zlib.compress(body)
    packer = zlib.compressobj(6, zlib.DEFLATED, -zlib.MAX_WBITS)
    raw = packer.compress(body) + packer.flush()
    for encoded in (wrapped, raw):
        response, _ = answer(encoded, "deflate")
        assert read_bounded(response, LIMIT) == body


@pytest.mark.parametrize("encoding", ["", "identity", "GZIP", "x-gzip"])
def test_encodings_are_named_as_http_allows(encoding: str) -> None:
    body = b"{}"
    raw = gzip(body) if "gzip" in encoding.lower() else body
    response, _ = answer(raw, encoding or None)
    assert read_bounded(response, LIMIT) == body


def test_an_unknown_encoding_a_corrupt_or_cut_gzip_body_is_undecodable() -> None:
    response, _ = answer(b"whatever", "br")
    with pytest.raises(UndecodableAnswer, match="unsupported Content-Encoding 'br'"):
        read_bounded(response, LIMIT)
    response, _ = answer(b"\x1f\x8b not gzip at all", "gzip")
    with pytest.raises(UndecodableAnswer, match="corrupt"):
        read_bounded(response, LIMIT)
    response, _ = answer(gzip(b"{}" * 1000)[:-12], "gzip")
    with pytest.raises(UndecodableAnswer, match="ends before"):
        read_bounded(response, LIMIT)


def test_bytes_after_a_complete_gzip_member_are_not_part_of_the_answer() -> None:
    response, _ = answer(gzip(b"{}") + b"trailing garbage", "gzip")
    assert read_bounded(response, LIMIT) == b"{}"


def test_an_empty_body_is_empty_whatever_its_encoding_says() -> None:
    response, _ = answer(b"", "gzip")
    assert read_bounded(response, LIMIT) == b""


def test_an_answer_already_in_memory_is_held_to_the_same_bound() -> None:
    response = httpx.Response(200, content=b"y" * 100)  # what a test transport builds
    with pytest.raises(AnswerTooLarge):
        read_bounded(response, 99)
    assert read_bounded(httpx.Response(200, content=b"y" * 100), 99, cut=True) == b"y" * 99


@pytest.mark.parametrize(
    ("size", "shown"),
    [(8 << 20, "8 MiB"), (64 << 10, "64 KiB"), (1536, "1536 bytes"), (100, "100 bytes")],
)
def test_sizes_are_described_in_the_unit_they_are_whole_in(size: int, shown: str) -> None:
    assert describe_size(size) == shown
