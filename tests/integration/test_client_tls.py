"""The Moonin API client over real TLS, against the fake platform with a throw-away CA.

MockTransport never handshakes, so certificate verification, the CA bundle setting and
the message an operator sees for an untrusted certificate are checked here, end to end.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sandbox.platform import Drip, FakePlatform, GzipBomb
from sandbox.tls import TLSAuthority
from shipper.client import ApiClient, ApiSettings
from shipper.errors import AnswerOverLimit, CredentialsRejected, DeadlineExceeded, Misconfigured
from shipper.records import Record, ScalingEvent, encode, new_id, utc_timestamp
from shipper.token import TokenSource

TOKEN = "tls-test-token-7c1d"


@pytest.fixture(autouse=True)
def no_proxies(monkeypatch: pytest.MonkeyPatch) -> None:
    # A proxy in the developer's environment must not carry the test's localhost traffic.
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)
    for name in ("SSL_CERT_FILE", "SSL_CERT_DIR"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture(scope="module")
def authority() -> TLSAuthority:
    return TLSAuthority()


@pytest.fixture
def platform(authority: TLSAuthority) -> Iterator[FakePlatform]:
    with FakePlatform(token=TOKEN, tls=authority) as running:
        yield running


@pytest.fixture
def ca_bundle(authority: TLSAuthority, tmp_path: Path) -> str:
    return str(authority.write_ca_bundle(tmp_path / "moonin-ca.pem"))


def client_for(
    platform: FakePlatform, *, token: TokenSource | None = None, **api: Any
) -> ApiClient:
    return ApiClient(
        base_url=platform.url,
        project_id=platform.project_id,
        cluster_id=platform.cluster_id,
        token=token or TokenSource(value=TOKEN),
        settings=ApiSettings(**{"read_timeout_seconds": 10, **api}),
    )


def deployment(name: str, **data: Any) -> bytes:
    return encode(
        Record(
            id=new_id(),
            kind="deployment",
            op="upsert",
            key=f"shop/{name}",
            namespace="shop",
            name=name,
            uid=new_id(),
            resource_version="4711",
            observed_at=utc_timestamp(),
            data=data,
        )
    )


def test_the_platform_url_is_https(platform: FakePlatform) -> None:
    assert platform.url.startswith("https://")


def test_a_certificate_from_an_unknown_authority_is_refused_with_a_clear_error(
    platform: FakePlatform,
) -> None:
    with client_for(platform) as client, pytest.raises(Misconfigured) as caught:
        client.post_records(new_id(), [deployment("web")])
    message = str(caught.value)
    assert f"POST {platform.url}/v1/clusters/c-1/records" in message
    assert "certificate could not be verified" in message
    assert "configure a CA bundle" in message
    assert TOKEN not in message
    assert caught.value.status is None
    assert platform.received_records() == []


def test_a_ca_bundle_of_another_authority_is_refused_too(
    platform: FakePlatform, tmp_path: Path
) -> None:
    other = TLSAuthority().write_ca_bundle(tmp_path / "other-ca.pem")
    with (
        client_for(platform, ca_bundle=str(other)) as client,
        pytest.raises(Misconfigured, match="certificate could not be verified"),
    ):
        client.get_templates()


def test_the_configured_ca_bundle_is_trusted_and_records_arrive(
    platform: FakePlatform, ca_bundle: str
) -> None:
    records = [deployment("web", replicas=3), deployment("api", replicas=2)]
    with client_for(platform, ca_bundle=ca_bundle) as client:
        client.post_records("01JBATCHTLS", records)
    received = platform.received_records()
    assert [r["key"] for r in received] == ["shop/web", "shop/api"]
    assert received[0]["data"] == {"replicas": 3}
    (request,) = platform.requests
    assert request.status == 200
    assert request.headers["idempotency-key"] == "01JBATCHTLS"
    assert "content-encoding" not in request.headers


def test_a_large_batch_travels_gzipped_and_a_retried_batch_counts_as_delivered(
    platform: FakePlatform, ca_bundle: str
) -> None:
    records = [deployment(f"web-{i}", image="nginx:1.25", port=8080) for i in range(100)]
    with client_for(platform, ca_bundle=ca_bundle) as client:
        client.post_records("01JBIG", records)
        client.post_records("01JBIG", records)  # the platform answers 409: already there
    first, second = platform.requests
    assert first.headers["content-encoding"] == "gzip"
    assert len(first.raw_body) < len(first.body)
    assert (first.status, second.status) == (200, 409)
    assert len(platform.received_records()) == 100


def test_events_heartbeat_templates_and_actions_over_tls(
    platform: FakePlatform, ca_bundle: str
) -> None:
    template = {"id": "t-1", "name": "black friday", "enabled": True, "cron": "0 8 * * 1-5"}
    action = {"id": "a-1", "namespace": "shop", "deployment": "web", "min_replicas": 4}
    platform.set_templates([template])
    platform.set_actions("t-1", [action])
    platform.heartbeat_answer = {"resync": True}
    event = ScalingEvent(id="e" * 32, type="apply", template_id="t-1", occurred_at=utc_timestamp())
    with client_for(platform, ca_bundle=ca_bundle) as client:
        client.post_events(new_id(), [encode(event)])
        assert client.heartbeat({"provider": "unknown", "node_count": 3}) == {"resync": True}
        assert client.get_templates() == [template]
        assert client.get_actions("t-1") == [action]
    assert list(platform.events()) == ["e" * 32]
    heartbeat = platform.last_heartbeat
    assert heartbeat is not None
    assert heartbeat["metadata"] == {"provider": "unknown", "node_count": 3}


def test_a_wrong_token_over_tls_is_rejected_without_showing_it(
    platform: FakePlatform, ca_bundle: str
) -> None:
    wrong = "not-the-right-token-42"
    with (
        client_for(platform, ca_bundle=ca_bundle, token=TokenSource(value=wrong)) as client,
        pytest.raises(CredentialsRejected) as caught,
    ):
        client.get_templates()
    assert caught.value.status == 401
    assert wrong not in str(caught.value) + caught.value.body


@pytest.mark.parametrize(
    "fault", [Drip(every=0.05), Drip(every=0.05, headers=True), GzipBomb(64 << 20)]
)
def test_over_tls_a_dripping_or_bombing_answer_ends_at_its_deadline_or_bound(
    platform: FakePlatform, ca_bundle: str, fault: Drip | GzipBomb
) -> None:
    platform.fail_all("templates", fault)
    with client_for(platform, ca_bundle=ca_bundle, deadline_seconds=0.5) as client:
        expected = AnswerOverLimit if isinstance(fault, GzipBomb) else DeadlineExceeded
        with pytest.raises(expected):
            client.get_templates()
        platform.fail_all("templates", None)
        assert client.get_templates() == []  # the same client goes on working
