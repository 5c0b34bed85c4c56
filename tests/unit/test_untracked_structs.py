"""Every Struct of the agent's packages is declared `gc=False`, but for those that may sit in
a reference cycle.

Nearly every Struct here is a value: decoded from the API server's JSON or the state store's
msgpack, or built from such values (records, memos, deltas, plans). It holds strings,
numbers, lists and dicts of them and other values, never a reference back to what holds
it, so it can never be part of a reference cycle, the only garbage the collector exists to
find. A tracked Struct carries the collector's header and is walked by every collection
while it lives; a warm-up decodes millions of them (one pod is a dozen), and untracked ones
took 1.1% off a one-shot listing's instructions (`bench/instructions.py --small`). A
Struct that may hold what holds it (a callable, a handle) stays tracked and is listed in
`TRACKED` with why.
"""

from __future__ import annotations

import gc
import importlib
import pkgutil

import msgspec

from collector.deltas import Call
from collector.model import ObjectMeta
from tests.conftest import PRODUCTION_PACKAGES

TRACKED = {Call: "its work is a closure, which may reach the queue that holds the delta"}


def _structs_of_the_agent() -> list[type[msgspec.Struct]]:
    for name in PRODUCTION_PACKAGES:
        package = importlib.import_module(name)
        for module in pkgutil.walk_packages(package.__path__, name + "."):
            importlib.import_module(module.name)
    found, waiting = [], list(msgspec.Struct.__subclasses__())
    while waiting:
        struct = waiting.pop()
        waiting.extend(struct.__subclasses__())
        if struct.__module__.partition(".")[0] in PRODUCTION_PACKAGES:
            found.append(struct)
    return found


def test_every_struct_of_the_agent_is_untracked_but_the_listed_ones() -> None:
    structs = _structs_of_the_agent()
    assert len(structs) > 100  # the walk found them (about 150)
    tracked = {struct for struct in structs if struct.__struct_config__.gc}
    assert tracked == set(TRACKED), "declare it gc=False, or list it here with why"


def test_a_decoded_value_is_untracked_and_a_listed_struct_is_tracked() -> None:
    meta = msgspec.json.decode(
        b'{"name": "a", "ownerReferences": [{"kind": "ReplicaSet", "name": "b"}]}', type=ObjectMeta
    )
    assert not gc.is_tracked(meta)
    assert not gc.is_tracked(meta.owner_references[0])
    assert gc.is_tracked(meta.owner_references)  # a list it holds is the collector's as before
    assert gc.is_tracked(Call(lambda: None))
