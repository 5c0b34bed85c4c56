"""One CPU for every thread of the process while a burst lasts, then the CPUs it had."""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest
import structlog.testing

from collector.resources import NAMESPACES, PODS
from collector.warmup import Listings, WarmUp
from runtime import cpu_affinity
from runtime.cpu_affinity import OneCpu
from tests.waiting import wait_until

pytestmark = pytest.mark.skipif(
    not hasattr(os, "sched_setaffinity") or len(os.sched_getaffinity(0)) < 2,
    reason="needs CPU affinity (Linux) and two CPUs",
)


def every_threads_cpus() -> dict[int, frozenset[int]]:
    masks = {}
    for name in os.listdir("/proc/self/task"):
        with contextlib.suppress(ProcessLookupError):  # ended while listed
            masks[int(name)] = frozenset(os.sched_getaffinity(int(name)))
    return masks


@pytest.fixture
def allowed() -> Iterator[frozenset[int]]:
    """The process's CPUs now, given back to every thread whatever the test did."""
    cpus = frozenset(os.sched_getaffinity(0))
    yield cpus
    for task in every_threads_cpus():
        with contextlib.suppress(ProcessLookupError):
            os.sched_setaffinity(task, cpus)


class Parked:
    """A thread that waits until told to end, and can say which CPUs it may run on."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.started = threading.Event()
        self.tid = 0
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()
        self.started.wait(5)

    def _run(self) -> None:
        self.tid = threading.get_native_id()
        self.started.set()
        self.release.wait(30)

    def cpus(self) -> frozenset[int]:
        return frozenset(os.sched_getaffinity(self.tid))

    def end(self) -> None:
        self.release.set()
        self.thread.join(5)


def test_every_thread_goes_to_one_cpu_of_its_set_and_back_and_so_do_those_started_meanwhile(
    allowed: frozenset[int],
) -> None:
    before = Parked()
    meanwhile: Parked | None = None
    one_cpu = OneCpu()
    try:
        with structlog.testing.capture_logs() as logs:
            one_cpu.narrow()
            assert one_cpu.narrowed
            narrowed = every_threads_cpus()
            cpus = set(narrowed.values())
            assert len(cpus) == 1 and len(next(iter(cpus))) == 1, narrowed
            assert next(iter(cpus)) <= allowed
            meanwhile = Parked()  # started by a narrowed thread: narrowed too
            assert meanwhile.cpus() == next(iter(cpus))
            one_cpu.widen()
        assert not one_cpu.narrowed
        assert set(every_threads_cpus().values()) == {allowed}
        assert before.cpus() == allowed and meanwhile.cpus() == allowed
        events = [(line["event"], line.get("allowed")) for line in logs]
        assert events == [
            ("cpu_affinity_narrowed", len(allowed)),
            ("cpu_affinity_restored", len(allowed)),
        ]
        # One burst each: narrowing again after the widening does nothing.
        one_cpu.narrow()
        assert not one_cpu.narrowed and set(every_threads_cpus().values()) == {allowed}
    finally:
        before.end()
        if meanwhile is not None:
            meanwhile.end()


def test_widened_before_it_narrowed_it_never_narrows(allowed: frozenset[int]) -> None:
    one_cpu = OneCpu()
    one_cpu.widen()  # the term ended before its warm-up began
    one_cpu.narrow()
    assert not one_cpu.narrowed
    assert set(every_threads_cpus().values()) == {allowed}


def test_a_refusal_is_logged_and_leaves_every_thread_where_it_was(
    allowed: frozenset[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    real = os.sched_setaffinity
    calls: list[frozenset[int]] = []

    def refuse_the_second(task: int, cpus: Any) -> None:
        calls.append(frozenset(cpus))
        if len(calls) == 2:
            raise PermissionError(1, "Operation not permitted")
        real(task, cpus)

    monkeypatch.setattr(cpu_affinity.os, "sched_setaffinity", refuse_the_second)
    extra = Parked()  # so that there are two threads at least
    try:
        with structlog.testing.capture_logs() as logs:
            one_cpu = OneCpu()
            one_cpu.narrow()
            one_cpu.widen()
        assert not one_cpu.narrowed
        refused = [line for line in logs if line["event"] == "cpu_affinity_refused"]
        assert len(refused) == 1 and "not permitted" in refused[0]["error"]
        assert not [line for line in logs if line["event"] == "cpu_affinity_narrowed"]
        # The thread narrowed before the refusal was given its CPUs back at once.
        assert set(every_threads_cpus().values()) == {allowed}
    finally:
        extra.end()


def _warm_up(one_cpu: bool, timeout: float = 60) -> tuple[WarmUp, Listings, list[Any], list[str]]:
    """A warm-up of two resources, the second listed after the first, over stand-ins that
    record which informers were started."""
    started: list[str] = []
    first, second = NAMESPACES, PODS
    informers: dict[Any, Any] = {
        resource: SimpleNamespace(failing=False, start=lambda r=resource: started.append(r.plural))
        for resource in (first, second)
    }
    sources = [
        SimpleNamespace(resource=first, starts_after=frozenset()),
        SimpleNamespace(resource=second, starts_after=frozenset({first})),
    ]
    listings = Listings(informers)
    warm_up = WarmUp(sources, informers, listings, timeout=timeout, one_cpu=one_cpu)  # type: ignore[arg-type]
    return warm_up, listings, [first, second], started


def test_the_warm_up_keeps_one_cpu_until_every_resource_has_listed(
    allowed: frozenset[int],
) -> None:
    warm_up, listings, resources, started = _warm_up(one_cpu=True)
    warm_up.begin()
    warm_up.advance()
    assert started == ["namespaces"]
    assert len(set().union(*every_threads_cpus().values())) == 1
    listings.took(resources[0])
    warm_up.advance()
    assert started == ["namespaces", "pods"]
    warm_up.advance()  # every informer started, one list still running
    assert len(set().union(*every_threads_cpus().values())) == 1
    listings.took(resources[1])
    warm_up.advance()
    assert set(every_threads_cpus().values()) == {allowed}


def test_a_warm_up_ended_early_gives_the_cpus_back_and_one_switched_off_never_takes_them(
    allowed: frozenset[int],
) -> None:
    warm_up, _, _, _ = _warm_up(one_cpu=True)
    warm_up.begin()
    warm_up.end()  # the term ended during its warm-up
    assert set(every_threads_cpus().values()) == {allowed}
    warm_up, _, _, started = _warm_up(one_cpu=False)
    warm_up.begin()
    warm_up.advance()
    assert started == ["namespaces"]
    assert set(every_threads_cpus().values()) == {allowed}


def test_a_list_that_never_ends_gives_the_cpus_back_once_the_warm_up_timeout_passed(
    allowed: frozenset[int],
) -> None:
    warm_up, listings, resources, started = _warm_up(one_cpu=True, timeout=1.0)
    warm_up.begin()
    warm_up.advance()
    listings.took(resources[0])
    warm_up.advance()
    assert started == ["namespaces", "pods"]  # the pods' list never ends

    def given_back() -> bool:
        warm_up.advance()  # as the processor does after each drain
        return set(every_threads_cpus().values()) == {allowed}

    assert not given_back()
    wait_until(given_back, timeout=5)
