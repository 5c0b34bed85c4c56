"""The fake Kubernetes API server's hostile modes, checked on the wire: a 410 for every
watch, lists that never end, streams that end inside a line. Each lasts until the faults are
cleared and touches one resource only."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from sandbox import objects
from sandbox.kube import FakeKube

DEPLOYMENTS = "/apis/apps/v1/deployments"
STREAM = {
    "watch": "1",
    "sendInitialEvents": "true",
    "resourceVersionMatch": "NotOlderThan",
    "allowWatchBookmarks": "true",
}


def _load(kube: FakeKube, count: int) -> None:
    kube.load(objects.deployment(name=f"web-{n}", namespace="shop") for n in range(count))


def _pages(http: httpx.Client, count: int) -> list[dict[str, Any]]:
    """The list metadata of `count` pages of two, each continuing from the one before."""
    metas: list[dict[str, Any]] = []
    token = None
    for _ in range(count):
        params = {"limit": "2", **({"continue": token} if token else {})}
        meta = http.get(DEPLOYMENTS, params=params).json()["metadata"]
        metas.append(meta)
        token = meta.get("continue")
    return metas


@pytest.mark.parametrize("mode", ["event", "http"])
def test_every_watch_from_a_resource_version_answers_410_until_cleared(
    mode: str, kube: FakeKube, http: httpx.Client
) -> None:
    kube.set_watch_expired_mode(mode)
    _load(kube, 1)
    kube.expire_watches("deployments")
    recent = {"watch": "1", "resourceVersion": str(kube.current_rv), "timeoutSeconds": "1"}
    answer = http.get(DEPLOYMENTS, params=recent)
    status = answer.json() if mode == "http" else answer.json()["object"]
    assert (answer.status_code, status["code"]) == ((410, 410) if mode == "http" else (200, 410))
    # Lists, streaming lists and other kinds are served.
    assert http.get(DEPLOYMENTS).status_code == 200
    assert (
        "initial-events-end" in http.get(DEPLOYMENTS, params={**STREAM, "timeoutSeconds": "1"}).text
    )
    assert http.get("/api/v1/pods", params=recent).status_code == 200
    kube.clear_faults()
    assert http.get(DEPLOYMENTS, params=recent).status_code == 200


def test_a_list_that_repeats_its_last_token_never_ends(kube: FakeKube, http: httpx.Client) -> None:
    _load(kube, 5)
    kube.endless_lists("deployments", "repeat")
    tokens = [meta["continue"] for meta in _pages(http, 5)]
    assert len(set(tokens)) == 2 and tokens[2:] == [tokens[1]] * 3


@pytest.mark.parametrize("mode", ["restart", "uncounted"])
def test_a_list_that_starts_over_never_repeats_a_token(
    mode: str, kube: FakeKube, http: httpx.Client
) -> None:
    _load(kube, 5)
    kube.endless_lists("deployments", mode)
    metas = _pages(http, 9)
    assert len({meta["continue"] for meta in metas}) == 9
    counts = [meta.get("remainingItemCount") for meta in metas]
    assert counts == ([3, 1, 0] * 3 if mode == "restart" else [None] * 9)
    kube.clear_faults()
    assert "continue" not in _pages(http, 3)[-1]


def test_a_stream_cut_inside_a_line_ends_cleanly_there(kube: FakeKube, http: httpx.Client) -> None:
    _load(kube, 4)
    kube.cut_streams("deployments", after=2)
    body = http.get(DEPLOYMENTS, params={**STREAM, "timeoutSeconds": "5"}).text
    *whole, half = body.split("\n")
    assert len(whole) == 2 and half.startswith('{"type":"ADDED"') and not half.endswith("}")
