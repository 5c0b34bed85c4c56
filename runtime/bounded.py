"""Reading an HTTP answer into a fixed number of bytes, counted after decompression.

httpx inflates a gzip answer one network chunk at a time, and one 64 KiB chunk of a gzip
bomb inflates to 64 MiB; its `read()` then keeps all of it. Here the raw bytes are inflated
with an output cap per call (`zlib`'s `max_length`, a slice at a time), so no more than
`limit` + 1 bytes of answer (and one slice) exist at any moment, whatever the compression
ratio.

Encodings understood: none (`identity`), `gzip` (and `x-gzip`), `deflate` (zlib-wrapped, or
raw as some servers send it). The client asks for `gzip` only, so anything else is the
server's mistake.

How it fails: `AnswerTooLarge` past the limit (unless `cut`, which returns the first `limit`
bytes instead), `UndecodableAnswer` for an unknown encoding or a compressed body that is
corrupt or ends early; httpx's own errors (a timeout, a dropped connection) pass through.
"""

from __future__ import annotations

import zlib

import httpx

ACCEPT_ENCODING = "gzip"
_GZIP_WBITS = 16 + zlib.MAX_WBITS
_RAW_DEFLATE_WBITS = -zlib.MAX_WBITS
_SLICE = 256 * 1024


class AnswerTooLarge(Exception):
    def __init__(self, limit: int) -> None:
        super().__init__(f"the answer is over {describe_size(limit)}")
        self.limit = limit


class UndecodableAnswer(Exception):
    pass


def read_bounded(response: httpx.Response, limit: int, *, cut: bool = False) -> bytes | bytearray:
    """The answer's body, decoded, if it is at most `limit` bytes; with `cut`, its first
    `limit` bytes (the rest is not read). The buffer it was read into is returned as it is:
    a copy would hold the answer twice."""
    if response.is_stream_consumed:
        # Built around bytes already in memory (httpx does so for a test transport's
        # answers) and decoded then: only the limit is left to apply.
        return _within(response.content, limit, cut=cut)
    inflater = _Inflater.for_encoding(response.headers.get("Content-Encoding", ""))
    body = bytearray()
    received = False
    for raw in response.iter_raw():
        received = received or bool(raw)
        if _add(body, raw, inflater, limit, cut=cut):
            return body
        if inflater is not None and inflater.ended:
            break  # whatever follows a complete gzip member is not part of the answer
    if inflater is not None and received and not cut:
        inflater.check_ended()
    return body


def _within(content: bytes, limit: int, *, cut: bool) -> bytes:
    """A body already in memory, held to `limit` bytes."""
    if len(content) > limit and not cut:
        raise AnswerTooLarge(limit)
    return content[:limit]


def _add(body: bytearray, raw: bytes, inflater: _Inflater | None, limit: int, *, cut: bool) -> bool:
    """One chunk of the raw answer, decoded, onto `body`; True once `cut` stopped `body`
    at `limit` bytes. Raises `AnswerTooLarge` past the limit without `cut`."""
    pending = raw
    while pending:
        room = limit - len(body)
        if inflater is None:
            piece, pending = pending[: room + 1], b""
        else:
            # In slices: inflating all the room at once would hold it twice.
            piece, pending = inflater.inflate(pending, min(room + 1, _SLICE))
        body += piece
        if len(body) > limit:
            if cut:
                del body[limit:]
                return True
            raise AnswerTooLarge(limit)
    return False


def describe_size(size: int) -> str:
    """`8388608` -> `8 MiB`; sizes that are not whole KiB or MiB in bytes."""
    for unit, scale in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size >= scale and size % scale == 0:
            return f"{size // scale} {unit}"
    return f"{size} bytes"


class _Inflater:
    def __init__(self, wbits: int, *, raw_fallback: bool) -> None:
        self._inflate = zlib.decompressobj(wbits)
        self._raw_fallback = raw_fallback
        self._started = False

    @classmethod
    def for_encoding(cls, header: str) -> _Inflater | None:
        encoding = header.strip().lower()
        if encoding in ("", "identity"):
            return None
        if encoding in ("gzip", "x-gzip"):
            return cls(_GZIP_WBITS, raw_fallback=False)
        if encoding == "deflate":
            return cls(zlib.MAX_WBITS, raw_fallback=True)
        raise UndecodableAnswer(f"unsupported Content-Encoding {header.strip()[:40]!r}")

    @property
    def ended(self) -> bool:
        return self._inflate.eof

    def check_ended(self) -> None:
        """Raises `UndecodableAnswer` unless the compressed answer reached its end marker."""
        if not self._inflate.eof:
            raise UndecodableAnswer("the compressed answer ends before its end marker")

    def inflate(self, data: bytes, most: int) -> tuple[bytes, bytes]:
        """At most `most` bytes inflated from `data`, and the input not used yet."""
        if self._inflate.eof:
            return b"", b""
        try:
            out = self._inflate.decompress(data, most)
        except zlib.error as exc:
            if self._raw_fallback and not self._started:
                # "deflate" without its zlib wrapper: start over as raw deflate.
                self._inflate = zlib.decompressobj(_RAW_DEFLATE_WBITS)
                self._raw_fallback = False
                return self.inflate(data, most)
            raise UndecodableAnswer(f"the compressed answer is corrupt ({exc})") from None
        self._started = True
        return out, self._inflate.unconsumed_tail
