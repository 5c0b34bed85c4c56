"""How many objects to ask for in the next list page, so that a page stays under a byte bound.

Kubernetes lists have an object `limit` and no byte limit, and objects of one resource can
weigh 1 KiB or 1 MiB each (a Pod with a large last-applied annotation, a Helm release
Secret). So each informer adapts its `limit` to the bytes of the pages it has just read:
down at once to what fits in `page_bytes` at the last page's bytes per object, back up by a
quarter per page at most, never above `ceiling`. A page that still goes past the bound
(the objects grew heavier from one page to the next) is given up while it is read and asked
again with an eighth of the limit; at a limit of one the object is read alone, whatever it
weighs (up to `kube.api.ANSWER_LIMIT`).
"""

from __future__ import annotations

import math


class PageSize:
    """The `limit` of one resource's list pages, adapted to their bytes."""

    def __init__(self, *, ceiling: int, page_bytes: int) -> None:
        if ceiling < 1 or page_bytes < 1:
            raise ValueError("a page holds at least one object and one byte")
        self.ceiling = ceiling
        self.page_bytes = page_bytes
        self.limit = ceiling

    @property
    def byte_bound(self) -> int | None:
        """What the next page may hold: None at a limit of one (that object is read alone,
        whatever it weighs)."""
        return self.page_bytes if self.limit > 1 else None

    def read(self, *, objects: int, size: int) -> None:
        """A page of `objects` objects and `size` bytes was read."""
        if objects < 1:
            return
        fits = max(1, math.floor(self.page_bytes * objects / max(size, 1)))
        if fits < self.limit:
            self.limit = fits
        else:
            self.limit = min(fits, self.ceiling, self.limit + max(1, self.limit // 4))

    def overflowed(self) -> None:
        """A page went past `page_bytes` before its end: ask for far fewer objects."""
        self.limit = max(1, self.limit // 8)
