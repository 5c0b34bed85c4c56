"""How an informer lists: streamed where the server offers it, else in pages bounded by bytes."""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable
from typing import Any

import pytest
import structlog.testing

from collector.informer import InformerSettings
from collector.resources import DEPLOYMENTS
from kube.api import KubeApi
from sandbox.kube import FakeKube
from sandbox.kube.faults import RequestRecord

# `api` and `running` are the informer tests' fixtures.
from tests.informer_harness import FAST, PAGED, deployment
from tests.waiting import wait_until

KEYS = frozenset(f"shop/web-{n:02d}" for n in range(25))


def heavy(name: str, size: int) -> dict[str, Any]:
    """A Deployment carrying about `size` bytes in one annotation."""
    obj = deployment(name)
    obj["metadata"]["annotations"] = {"note": "x" * size}
    return obj


def lists(kube: FakeKube) -> list[RequestRecord]:
    return [r for r in kube.requests if r.path == DEPLOYMENTS.path and not r.watch]


def streamed(kube: FakeKube) -> list[RequestRecord]:
    return [r for r in kube.requests if r.watch and r.query.get("sendInitialEvents") == "true"]


# -- streaming lists -----------------------------------------------------------------------


def test_a_served_streaming_list_is_the_list_and_no_page_is_asked_for(
    kube: FakeKube, api: KubeApi, running: Callable[..., Any]
) -> None:
    kube.load(deployment(f"web-{n:02d}") for n in range(25))
    informer, sink = running(api)
    assert informer.wait_synced(10)
    assert sink.lists == [KEYS]
    assert informer.resource_version == str(kube.current_rv)
    [request] = streamed(kube)
    assert request.query["resourceVersionMatch"] == "NotOlderThan"
    assert request.query["allowWatchBookmarks"] == "true"
    assert not lists(kube)
    # The watch that follows resumes from the bookmark and hears later changes.
    kube.create(deployment("late"))
    wait_until(lambda: sink.seen(("apply", "shop/late", 1)))


@pytest.mark.parametrize("mode", ["refuse", "ignore"])
def test_a_server_that_refuses_or_ignores_streaming_is_listed_in_pages_from_then_on(
    mode: str, kube: FakeKube, api: KubeApi, running: Callable[..., Any]
) -> None:
    kube.set_streaming_lists(mode)
    kube.load(deployment(f"web-{n:02d}") for n in range(25))
    # A server that ignores the parameters sends no bookmark while nothing changes, so
    # silence is what tells the informer.
    settings = dataclasses.replace(FAST, initial_events_quiet_seconds=0.5)
    with structlog.testing.capture_logs() as logs:
        informer, sink = running(api, settings=settings)
        assert informer.wait_synced(10)
    assert sink.lists[-1] == KEYS
    assert [e["event"] for e in logs].count("informer_streaming_lists_unavailable") == 1
    assert len(lists(kube)) == 3  # 25 objects, 10 a page
    # A relist asks in pages again, not for a stream.
    informer.request_relist()
    api.abort_streams()
    wait_until(lambda: informer.reporter.snapshot().counters.get("lists", 0) == 2)
    assert len(streamed(kube)) == 1
    assert informer.reporter.snapshot().counters["streaming_fallbacks"] == 1


def test_a_streaming_list_cut_before_its_end_is_listed_in_pages_and_nothing_is_lost(
    kube: FakeKube, api: KubeApi, running: Callable[..., Any]
) -> None:
    kube.load(deployment(f"web-{n:02d}") for n in range(25))
    kube.drop_initial_events("deployments", after=7)
    informer, sink = running(api)
    assert informer.wait_synced(10)
    # Seven objects were seen before the cut; only the complete list counts as one.
    assert sink.lists == [KEYS]
    assert {key for _, key, _ in sink.calls} == KEYS
    assert len(lists(kube)) == 3
    counters = informer.reporter.snapshot().counters
    assert counters["streaming_fallbacks"] == 1 and counters["lists"] == 1
    # The cut was the stream's, not the server's refusal: the next list streams again.
    informer.request_relist()
    api.abort_streams()
    wait_until(lambda: informer.reporter.snapshot().counters.get("lists", 0) == 2)
    assert len(streamed(kube)) == 2
    assert sink.lists[-1] == KEYS


def test_a_server_silent_before_the_end_of_the_initial_events_is_taken_not_to_stream(
    kube: FakeKube, api: KubeApi, running: Callable[..., Any]
) -> None:
    # Ignored parameters and no bookmarks at all: only silence tells.
    kube.set_streaming_lists("ignore")
    kube.bookmark_interval = 0
    kube.load(deployment(f"web-{n:02d}") for n in range(5))
    settings = dataclasses.replace(FAST, initial_events_quiet_seconds=0.3)
    informer, sink = running(api, settings=settings)
    assert informer.wait_synced(10)
    assert sink.lists == [frozenset(f"shop/web-{n:02d}" for n in range(5))]
    assert len(streamed(kube)) == 1 and lists(kube)


# -- pages bounded by bytes ------------------------------------------------------------------


def test_a_page_of_heavy_objects_makes_the_next_page_ask_for_fewer(
    kube: FakeKube, api: KubeApi, running: Callable[..., Any]
) -> None:
    kube.load(heavy(f"web-{n:02d}", 2_000) for n in range(25))
    settings = dataclasses.replace(PAGED, page_size=10, page_bytes=10_000)
    informer, sink = running(api, settings=settings)
    assert informer.wait_synced(10)
    assert sink.lists == [KEYS]
    limits = [int(r.query["limit"]) for r in lists(kube)]
    # The first page asked for 10 and held more than 10,000 bytes: it was given up while
    # read and asked again for fewer, then every page stayed within what fits.
    assert limits[0] == 10
    assert all(limit <= 4 for limit in limits[1:])
    assert informer.reporter.snapshot().counters["pages_refetched"] >= 1


def test_light_pages_let_the_page_size_grow_back_slowly(
    kube: FakeKube, api: KubeApi, running: Callable[..., Any]
) -> None:
    kube.load(heavy(f"web-{n:02d}", 3_000) for n in range(4))
    kube.load(deployment(f"zz-{n:03d}") for n in range(200))
    settings = dataclasses.replace(PAGED, page_size=40, page_bytes=12_000)
    informer, _ = running(api, settings=settings)
    assert informer.wait_synced(10)
    limits = [int(r.query["limit"]) for r in lists(kube)]
    grown = limits[limits.index(min(limits)) :]
    assert min(limits) < 10
    # Back up by at most a quarter (or one) per page, never above the ceiling.
    assert all(b <= max(a + 1, a + a // 4) for a, b in itertools.pairwise(grown))
    assert max(grown) > min(limits) and max(limits) <= 40


def test_one_object_larger_than_the_bound_is_still_listed_alone(
    kube: FakeKube, api: KubeApi, running: Callable[..., Any]
) -> None:
    kube.load(deployment(f"web-{n:02d}") for n in range(3))
    kube.create(heavy("web-huge", 50_000))
    settings = dataclasses.replace(PAGED, page_size=10, page_bytes=5_000)
    informer, sink = running(api, settings=settings)
    assert informer.wait_synced(10)
    assert sink.lists == [frozenset({"shop/web-00", "shop/web-01", "shop/web-02", "shop/web-huge"})]
    assert int(lists(kube)[-1].query["limit"]) == 1


def test_the_informer_settings_default_to_pages_of_at_most_four_mib() -> None:
    settings = InformerSettings()
    assert settings.page_bytes == 4 * 1024 * 1024
    assert settings.streaming_lists
