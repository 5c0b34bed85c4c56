"""Exit codes of `moonin-agent`, and the error that ends a command with one of them.

Scripts and the chart's probes read them: 2 is a command that could not start, which is the
user's to fix (bad input or configuration, or what it was given and cannot use: a queue
directory owned by another process, a file in it that cannot be opened, a taken health
port); 1 is a failure once it ran (the cluster or stdout failed, a revert that did not go
through).
"""

from __future__ import annotations

import os
import sys

OK = 0
FAILED = 1
CANNOT_START = 2


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
    """Exit 2, in one line, for a queue directory the agent cannot use: taken by another
    process, or a file in it that cannot be opened (a directory where `disk-reserve` or a
    state file belongs). An OSError names the file, not the whole path."""
    if isinstance(exc, OSError) and exc.filename:
        name = os.path.basename(exc.filename)
        return Failure(f"QUEUE_DIR: cannot use {name}: {exc.strerror or exc}", CANNOT_START)
    return Failure(exc, CANNOT_START)
