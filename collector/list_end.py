"""Whether a paged list is on its way to an end.

The server decides when a list ends: its last page is the one without a continue token. A
broken or hostile server may never send that page, and a client that follows its tokens
then lists forever, one request after another, without ever having a complete list. A list
is given up (`EndlessList`; the informer retries it later, with backoff) as soon as one of
these shows it will not end:
- a continue token given before in the same list, or an object listed before in it (the
  pages of one list are cut from one snapshot, so none holds an object an earlier one
  held): its pages go round in a circle;
- more pages than an earlier page's `remainingItemCount` allows: every page but the last
  carries at least one of the objects it counted, so after a page saying N remain, at most
  N more follow (one more is let through: the field is documented as an estimate);
- more pages than `max_pages` in all, whatever the server says (a backstop for a server
  that makes up new objects without end); the informer derives it from its byte budget.

Pages read before the list started over (an expired continue token) still count towards
`max_pages`, so a server that expires every token cannot keep a list going either.
"""

from __future__ import annotations

import hashlib
from typing import NoReturn

from kube.errors import KubeError


class EndlessList(KubeError):
    """The list will not end; the message says what showed it."""


class ListEnd:
    """One paged list's pages so far, checked after each page."""

    def __init__(self, path: str, *, max_pages: int) -> None:
        if max_pages < 1:
            raise ValueError("a list may take at least one page")
        self._path = path
        self._max_pages = max_pages
        self._pages = 0
        self._tokens: set[bytes] = set()  # digests: a token may be long
        self._last_allowed: int | None = None  # the last page's number, by remainingItemCount

    def restarted(self) -> None:
        """The list starts over (its continue token expired)."""
        self._tokens.clear()
        self._last_allowed = None

    def page(self, *, token: str | None, remaining: int | None, objects: int, new: int) -> None:
        """A page of `objects` objects, `new` of them not listed before, was read; it
        continues with `token` (None: it was the last), saying `remaining` objects follow.
        Raises `EndlessList` when the list will not end."""
        self._pages += 1
        if token is None:
            return
        digest = hashlib.blake2b(token.encode(), digest_size=16).digest()
        if digest in self._tokens:
            self._endless("a continue token came twice")
        if self._last_allowed is not None and self._pages >= self._last_allowed:
            self._endless("more pages than remainingItemCount allowed")
        if new < objects:
            self._endless("an object came twice")
        if self._pages >= self._max_pages:
            self._endless("no end within the most pages a list may take")
        self._tokens.add(digest)
        if remaining is not None:
            last = self._pages + max(remaining, 0) + 1
            if self._last_allowed is None or last < self._last_allowed:
                self._last_allowed = last

    def _endless(self, why: str) -> NoReturn:
        raise EndlessList(f"list {self._path}: {why}, after {self._pages} pages")
