"""A bare TCP server on 127.0.0.1 for answers no HTTP server library would write: each
connection is handed to `answer` on its own thread; `stop` is set when the test ends."""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Callable, Iterator


@contextlib.contextmanager
def serving(answer: Callable[[socket.socket, threading.Event], None]) -> Iterator[str]:
    """The server's `http://` URL while the block runs."""
    listener = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def answer_one(conn: socket.socket) -> None:
        with conn, contextlib.suppress(OSError):  # the client leaves when it has seen enough
            answer(conn, stop)

    def serve() -> None:
        with contextlib.suppress(OSError):  # the listener closed
            while True:
                conn, _ = listener.accept()
                threading.Thread(target=answer_one, args=(conn,), daemon=True).start()

    threading.Thread(target=serve, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        stop.set()
        listener.close()
