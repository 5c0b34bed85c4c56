"""A list read page by page (`limit` and `continue`), for the calls that need all of it.

The API server cuts a large list into pages; the continue token of each asks for the next.
Each item is handed to the caller's decoder as its own JSON (`kube.workloads`), so a page is
never held as plain dicts. Items of a list come without `apiVersion` and `kind` (the list
carries them); a typed item knows its resource.

Informers page on their own (they also keep the list's resourceVersion to watch from); this
is for the calls that only want the items.

How it fails: each page is one `KubeApi.get`, so `kube.errors` as it raises them: a 410 `Gone`
when a continue token expired between two pages (the caller lists again later), an
`AnswerTooLarge` for a page past its bound; a page or an item that cannot be decoded is a
`KubeError` naming the call.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import TypeVar

import msgspec

from kube.api import KubeApi, decoded
from kube.resources import Resource

PAGE_SIZE = 500
T = TypeVar("T")


class _ListMeta(msgspec.Struct, gc=False):
    continue_: str = msgspec.field(default="", name="continue")


class _Page(msgspec.Struct, gc=False):
    items: list[msgspec.Raw] | None = None
    metadata: _ListMeta = msgspec.field(default_factory=_ListMeta)


_decode_page = msgspec.json.Decoder(_Page).decode


def list_all(
    api: KubeApi,
    resource: Resource,
    decode: Callable[[msgspec.Raw], T],
    *,
    namespace: str | None = None,
    params: Mapping[str, str] | None = None,
    page_size: int | None = None,
    what: str,
) -> Iterator[T]:
    """Every item of `resource` (in `namespace`, or across the cluster) as `decode` reads it,
    page by page of `page_size` (default PAGE_SIZE); `what` names the call in errors."""
    token = ""
    while True:
        query = {**(params or {}), "limit": str(page_size or PAGE_SIZE)}
        if token:
            query["continue"] = token
        page = decoded(_decode_page, api.get(resource.path(namespace), query, what=what), what)
        for item in page.items or ():
            yield decoded(decode, item, what)
        token = page.metadata.continue_
        if not token:
            return
