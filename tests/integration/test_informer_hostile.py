"""The informer against hostile API servers: a 410 for every watch, a list that never ends,
streams that end inside a line. What is asked of the server stays bounded by the backoff,
and discovery resumes once the server is sane."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import pytest
import structlog.testing

from collector.informer import Informer, InformerSettings
from collector.resources import DEPLOYMENTS
from kube.api import KubeApi
from kube.errors import KubeError
from sandbox.kube import FakeKube
from sandbox.kube.faults import RequestRecord
from tests.informer_harness import FAST, PAGED, RecordingSink, Thing, deployment
from tests.waiting import wait_until

KEYS = frozenset(f"shop/web-{n:02d}" for n in range(25))


def deployment_requests(kube: FakeKube) -> list[RequestRecord]:
    return [r for r in kube.requests if r.path == DEPLOYMENTS.path]


def counted(informer: Informer[Any], name: str) -> int:
    return int(informer.reporter.snapshot().counters.get(name, 0))


def least_wait(settings: InformerSettings) -> float:
    """The shortest pause between two relists once the relist backoff is at its ceiling."""
    return 0.5 * settings.relist_backoff_max_seconds


def at_most(per_cycle: int, cycles_from: list[float], settings: InformerSettings) -> int:
    """Requests allowed from the first to the last of `cycles_from` (times of the request
    opening each cycle, the backoff at its ceiling): `per_cycle` for each cycle that fits
    between them at the backoff's shortest wait, and the last one's."""
    span = cycles_from[-1] - cycles_from[0]
    return per_cycle * (int(span / least_wait(settings)) + 1)


def in_window(records: list[RequestRecord], start: float, end: float) -> list[RequestRecord]:
    return [r for r in records if start <= r.time <= end]


# -- a 410 for every watch -------------------------------------------------------------------


@pytest.mark.parametrize(("settings", "mode"), [(FAST, "event"), (PAGED, "http")])
def test_a_410_for_every_watch_relists_no_faster_than_the_backoff_allows(
    settings: InformerSettings,
    mode: str,
    kube: FakeKube,
    api: KubeApi,
    running: Callable[..., Any],
) -> None:
    kube.set_watch_expired_mode(mode)
    kube.load(deployment(f"web-{n:02d}") for n in range(5))
    kube.expire_watches("deployments")
    informer, sink = running(api, settings=settings)
    # Past the backoff's first doublings (0.05, 0.1, then 0.2 s), a dozen relists.
    wait_until(lambda: counted(informer, "relists") >= 15, timeout=15)
    watches = [
        r.time for r in deployment_requests(kube) if r.watch and "sendInitialEvents" not in r.query
    ]
    # Each relist is one list (one streamed, or one page of five) and one watch.
    relisting = watches[4:]
    window = in_window(deployment_requests(kube), relisting[0], relisting[-1])
    assert len(window) <= at_most(2, relisting, settings)
    assert len(relisting) >= 10  # it does go on relisting
    assert all(keys == frozenset(f"shop/web-{n:02d}" for n in range(5)) for keys in sink.lists)

    kube.clear_faults()  # the server is sane again: the next watch holds
    kube.create(deployment("late"))
    wait_until(lambda: sink.seen(("apply", "shop/late", 1)))
    wait_until(lambda: informer.reporter.health.ok)


def test_a_relist_after_a_healthy_stretch_goes_at_once_and_a_repeated_one_waits(
    kube: FakeKube, api: KubeApi, running: Callable[..., Any]
) -> None:
    # A relist that waits, waits 15-30 s here: far longer than this test takes.
    settings = dataclasses.replace(
        PAGED,
        watch_timeout_seconds=(1, 1),
        backoff_initial_seconds=30.0,
        backoff_max_seconds=30.0,
        relist_backoff_max_seconds=30.0,
        forbidden_retry_seconds=30.0,
        relist_reset_seconds=1.0,
    )
    kube.create(deployment("web"))
    informer, _ = running(api, settings=settings)
    assert informer.wait_synced(10)
    # A healthy stretch: two watches have run their course (1 s each) since the list.
    wait_until(lambda: counted(informer, "watches") >= 3, timeout=10)
    # The next watch answers 410, and so does the one after the relist it makes.
    kube.fail_next(410, 2, resource="deployments", verb="watch")
    wait_until(lambda: counted(informer, "relists") == 2, timeout=10)
    assert counted(informer, "lists") == 2  # the first relist went at once
    expired = max(r.time for r in deployment_requests(kube) if r.status == 410)

    def listed_again() -> bool:
        return any(not r.watch and r.time > expired for r in deployment_requests(kube))

    with pytest.raises(AssertionError):
        wait_until(listed_again, timeout=0.5)
    assert counted(informer, "lists") == 2


# -- lists that never end --------------------------------------------------------------------

# At most 6 pages a list: 6 MiB of 1 MiB pages.
ENDLESS = dataclasses.replace(PAGED, page_size=10, page_bytes=1 << 20, list_bytes=6 << 20)


@pytest.mark.parametrize(
    ("mode", "pages", "why"),
    [
        ("repeat", 3, "a continue token came twice"),
        ("restart", 4, "more pages than remainingItemCount allowed"),
        ("uncounted", 4, "an object came twice"),
    ],
)
def test_a_list_that_never_ends_is_abandoned_counted_logged_once_and_retried_with_backoff(
    mode: str,
    pages: int,
    why: str,
    kube: FakeKube,
    api: KubeApi,
    running: Callable[..., Any],
) -> None:
    kube.load(deployment(f"web-{n:02d}") for n in range(25))
    kube.endless_lists("deployments", mode)
    with structlog.testing.capture_logs() as logs:
        informer, sink = running(api, settings=ENDLESS)
        wait_until(lambda: counted(informer, "lists_abandoned") >= 10, timeout=15)
        health = informer.reporter.health
        assert not health.ok and health.reason == "list abandoned: it does not end"
        assert not informer.wait_synced(0) and not sink.lists  # nothing partial passed as whole

        firsts = [r.time for r in deployment_requests(kube) if "continue" not in r.query]
        attempts = firsts[4:]
        window = in_window(deployment_requests(kube), attempts[0], attempts[-1])
        # Each attempt is `pages` pages: the first without a continue token.
        assert len(window) <= at_most(pages, attempts, ENDLESS)

        kube.clear_faults()
        assert informer.wait_synced(10)
    assert sink.lists == [KEYS]
    failing = [e for e in logs if e["event"] == "informer_failing"]
    assert len(failing) == 1 and why in failing[0]["error"]
    assert informer.reporter.health.ok


def test_a_list_of_more_pages_than_the_byte_budget_allows_is_abandoned(
    kube: FakeKube, api: KubeApi, running: Callable[..., Any]
) -> None:
    kube.load(deployment(f"web-{n:02d}") for n in range(25))
    settings = dataclasses.replace(ENDLESS, page_size=2)  # 13 pages; 6 allowed
    with structlog.testing.capture_logs() as logs:
        informer, sink = running(api, settings=settings)
        wait_until(lambda: counted(informer, "lists_abandoned") >= 2)
    assert not sink.lists
    requests = deployment_requests(kube)
    second = next(n for n, r in enumerate(requests) if n and "continue" not in r.query)
    assert second == 6  # the first attempt: six pages, then given up
    [failing] = [e for e in logs if e["event"] == "informer_failing"]
    assert "no end within the most pages a list may take, after 6 pages" in failing["error"]


def test_a_list_not_done_within_the_warm_up_budget_makes_the_informer_not_ready(
    kube: FakeKube, api: KubeApi
) -> None:
    kube.load(deployment(f"web-{n:02d}") for n in range(25))
    kube.endless_lists("deployments", "repeat")
    sink = RecordingSink()
    informer = Informer(api, DEPLOYMENTS, Thing, sink, settings=ENDLESS, list_budget_seconds=1.0)
    with structlog.testing.capture_logs() as logs:
        informer.start()
        try:
            wait_until(lambda: informer.reporter.health.unready, timeout=10)
            kube.clear_faults()
            assert informer.wait_synced(10)
            wait_until(lambda: informer.reporter.health.ok)
        finally:
            informer.stop()
            api.abort_streams()
            assert informer.join(5)
    said = [e.get("reason") for e in logs if e["event"] == "informer_failing"]
    assert said == [
        "list abandoned: it does not end",
        "list abandoned: it does not end; no complete list for 1 s",
    ]


# -- streams that end inside a line --------------------------------------------------------


def test_a_stream_ending_inside_a_line_is_a_cut_not_a_line(kube: FakeKube, api: KubeApi) -> None:
    kube.load(deployment(f"web-{n:02d}") for n in range(3))
    kube.cut_streams("deployments", after=2)
    params = {"watch": "1", "sendInitialEvents": "true", "resourceVersionMatch": "NotOlderThan"}
    lines = []
    with (
        pytest.raises(KubeError, match="ended inside an event") as cut,
        api.stream_lines(DEPLOYMENTS.path, params, read_timeout=5) as stream,
    ):
        lines.extend(stream)
    assert cut.value.status is None  # as a dropped connection
    assert len(lines) == 2


def test_deployments_are_listed_and_watched_while_the_server_cuts_streams_inside_a_line(
    kube: FakeKube, api: KubeApi, running: Callable[..., Any]
) -> None:
    kube.load(deployment(f"web-{n:02d}") for n in range(25))
    kube.cut_streams("deployments", after=1)  # one whole line a stream, then half of one
    with structlog.testing.capture_logs() as logs:
        informer, sink = running(api)
        assert informer.wait_synced(10)
        assert sink.lists == [KEYS]
        assert counted(informer, "streaming_fallbacks") >= 1
        kube.create(deployment("late"))
        kube.patch("deployments", "shop", "web-00", {"spec": {"replicas": 4}})
        wait_until(lambda: sink.seen(("apply", "shop/late", 1)))
        wait_until(lambda: sink.seen(("apply", "shop/web-00", 4)))
    errors = [e.get("error", "") for e in logs if e["event"] == "informer_failing"]
    assert errors and all("ended inside an event" in error for error in errors)
    assert counted(informer, "lists") == 1
