"""The garbage collector's thresholds the agent sets for itself once configured."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from agent import heap


@pytest.fixture
def restored_collector() -> Iterator[None]:
    thresholds = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*thresholds)


@pytest.mark.usefixtures("restored_collector")
def test_tuning_moves_what_lives_now_out_of_the_generations_and_sets_the_thresholds() -> None:
    heap.tune()
    assert gc.get_threshold() == (heap.YOUNG_THRESHOLD, heap.OLDER_THRESHOLD, heap.OLDER_THRESHOLD)
    assert gc.get_freeze_count() > 0


def test_preview_sets_the_thresholds_before_it_lists(monkeypatch: pytest.MonkeyPatch) -> None:
    from agent import cli, preview

    calls: list[str] = []
    monkeypatch.setattr(heap, "tune", lambda: calls.append("tune"))
    monkeypatch.setattr(preview, "preview", lambda *args, **kwargs: calls.append("list") or 0)
    monkeypatch.delenv("CONFIG_FILE", raising=False)
    assert cli.main(["preview", "--kubeconfig", "unused"]) == 0
    assert calls == ["tune", "list"]
