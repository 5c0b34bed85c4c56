"""The collector's Kubernetes client holds no answer, and no watch event, past its bound."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from kube import api as kube_module
from kube.api import KubeApi
from kube.cluster import KubeTarget
from kube.errors import AnswerTooLarge
from sandbox.kube import FakeKube


@pytest.fixture
def api(kube: FakeKube) -> Iterator[KubeApi]:
    client = KubeApi(KubeTarget(server=kube.url, verify=False, token=lambda: kube.token))
    yield client
    client.close()


def config_map(name: str, size: int) -> dict[str, object]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": "shop"},
        "data": {"blob": "x" * size},
    }


def test_an_answer_past_its_bound_fails_clearly_and_a_smaller_one_is_read(
    kube: FakeKube, api: KubeApi
) -> None:
    kube.create(config_map("big", 200_000))
    with pytest.raises(AnswerTooLarge, match="over 64 KiB") as caught:
        api.get("/api/v1/configmaps", max_bytes=64 * 1024)
    assert caught.value.limit == 64 * 1024
    assert len(api.get("/api/v1/configmaps", max_bytes=1024 * 1024)) > 200_000


def test_a_watch_event_past_the_answer_limit_ends_the_watch(
    kube: FakeKube, api: KubeApi, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(kube_module, "ANSWER_LIMIT", 100_000)
    kube.create(config_map("a-small", 10))
    kube.create(config_map("z-big", 200_000))
    seen: list[bytes] = []
    with (
        pytest.raises(AnswerTooLarge, match="a watch event over"),
        api.stream_lines(
            "/api/v1/configmaps", {"watch": "1", "resourceVersion": "0"}, read_timeout=5
        ) as lines,
    ):
        seen.extend(lines)
    assert len(seen) == 1 and b'"a-small"' in seen[0]
