"""One read of a socket that also takes what has already arrived behind it.

A TLS socket gives one record per `recv`: at most 16 KiB, whatever the size asked for. The
HTTP stack parses every piece a read returns as one event (the chunked body's framing, its
buffers, its timeouts), so a list streamed at full speed (hundreds of MB in a warm-up) paid
that parsing once per record. After a read that returned data, `arrived` takes the records
already waiting on the socket, without waiting for more, and hands them on as one piece of
at most `GATHERED_BYTES`: reading the default bench cluster's 494 MB of pods fell from
1.6-1.7 s of CPU to 1.0-1.1 s (in pieces of 64 KiB; 32 KiB keeps most of that).

Only bytes that have arrived are taken: the socket is put in non-blocking mode for them and
given back its timeout. A read that would wait, the end of the stream or an error ends the
gathering, and what was gathered is returned: the next read, which the caller makes as
before, meets the end, or the error (or the end a broken connection leaves).
"""

from __future__ import annotations

import socket

# Two records. Larger pieces saved little more CPU, and the HTTP stack's buffers of every
# connection grow to the size of the pieces: at 64 KiB the bench's peak RSS rose ~2.5 MiB.
GATHERED_BYTES = 32 * 1024


def arrived(sock: socket.socket, first: bytes, max_bytes: int) -> bytes:
    """`first` (what a read of `sock` just returned), then whatever already waits on the
    socket behind it, up to `max_bytes` (and `GATHERED_BYTES`) in all."""
    max_bytes = min(max_bytes, GATHERED_BYTES)
    if not first or len(first) >= max_bytes:
        return first
    parts = [first]
    size = len(first)
    waiting = sock.gettimeout()
    sock.settimeout(0)
    try:
        while size < max_bytes:
            try:
                more = sock.recv(max_bytes - size)
            except OSError:  # nothing more yet (would block), or what the next read meets
                break
            if not more:
                break
            parts.append(more)
            size += len(more)
    finally:
        sock.settimeout(waiting)
    return first if len(parts) == 1 else b"".join(parts)
