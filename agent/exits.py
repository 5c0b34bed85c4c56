"""Exit codes of `moonin-agent`, and the error that ends a command with one of them.

Scripts and the chart's probes read them: 2 is the user's to fix (bad input or
configuration), 1 is a failure outside the configuration (the queue directory is owned by
another process, locked or unreadable; the cluster or stdout failed).
"""

from __future__ import annotations

import os
import sys

OK = 0
FAILED = 1
BAD_CONFIGURATION = 2


class Failure(Exception):
    """The command cannot go on. `str()` is the one line printed on stderr; `code` the exit code."""

    def __init__(self, message: object, code: int) -> None:
        super().__init__(" ".join(str(message).splitlines()))
        self.code = code

    def report(self) -> int:
        """Print the line and return the exit code."""
        print(f"moonin-agent: {self}", file=sys.stderr)
        return self.code


def unusable_queue(exc: Exception) -> Failure:
    """Exit 1, in one line, for a queue directory the agent cannot use: taken by another
    process, or a file in it that cannot be opened (a directory where `disk-reserve` or a
    state file belongs). An OSError names the file, not the whole path."""
    if isinstance(exc, OSError) and exc.filename:
        name = os.path.basename(exc.filename)
        return Failure(f"QUEUE_DIR: cannot use {name}: {exc.strerror or exc}", FAILED)
    return Failure(exc, FAILED)
