"""/healthz, /readyz and /metrics: the server, the metrics, and a running agent serving them."""

from __future__ import annotations

import itertools
import select
import signal
import socket
import struct
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import msgspec
import pytest
from prometheus_client.parser import text_string_to_metric_families

from agent.health_server import HealthServer
from agent.health_watch import HealthWatch
from agent.metrics import AgentMetrics
from runtime.health import Health, HealthReporter
from sandbox import objects
from sandbox.kube import FakeKube
from sandbox.platform import FakePlatform
from sandbox.serving import free_port
from shipper.queuefile import StreamStats
from tests import cluster_objects
from tests.agent_process import agent_env, start_agent, stop_within
from tests.waiting import wait_until


@pytest.fixture
def serve() -> Iterator[Callable[..., str]]:
    servers: list[HealthServer] = []

    def make(**checks: object) -> str:
        server = HealthServer("127.0.0.1", 0, **checks)  # type: ignore[arg-type]
        server.start()
        servers.append(server)
        return f"http://127.0.0.1:{server.port}"

    yield make
    for server in servers:
        server.stop()


def test_checks_answer_json_with_200_or_503_and_metrics_are_served(
    serve: Callable[..., str],
) -> None:
    problems: list[str] = []
    url = serve(live=lambda: list(problems), ready=lambda: [], metrics=lambda: b"m 1\n")
    live = httpx.get(f"{url}/healthz")
    assert (live.status_code, live.json()) == (200, {"ok": True, "problems": []})
    problems.append("informer.pods: informer pods crashed")
    live = httpx.get(f"{url}/healthz")
    assert live.status_code == 503
    assert live.json() == {"ok": False, "problems": ["informer.pods: informer pods crashed"]}
    assert httpx.get(f"{url}/readyz").status_code == 200
    metrics = httpx.get(f"{url}/metrics")
    assert metrics.text == "m 1\n" and metrics.headers["content-type"].startswith("text/plain")
    assert httpx.get(f"{url}/nothing").status_code == 404


def test_a_check_that_raises_fails_the_probe(serve: Callable[..., str]) -> None:
    def broken() -> list[str]:
        raise RuntimeError("lock poisoned")

    url = serve(live=lambda: [], ready=broken, metrics=lambda: b"")
    ready = httpx.get(f"{url}/readyz")
    assert ready.status_code == 503
    assert ready.json()["problems"] == ["health check failed: lock poisoned"]


def test_a_taken_port_is_an_error_at_construction() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        with pytest.raises(OSError):
            HealthServer("127.0.0.1", taken.getsockname()[1], live=list, ready=list, metrics=bytes)


# --- connections: none may be held -------------------------------------------------------------


@pytest.fixture
def started() -> Iterator[Callable[..., HealthServer]]:
    servers: list[HealthServer] = []

    def make(**options: Any) -> HealthServer:
        checks: dict[str, Any] = {"live": list, "ready": list, "metrics": bytes}
        server = HealthServer("127.0.0.1", 0, **(checks | options))
        server.start()
        servers.append(server)
        return server

    yield make
    for server in servers:
        server.stop()


def connect(server: HealthServer) -> socket.socket:
    connection = socket.create_connection(("127.0.0.1", server.port))
    connection.settimeout(10)  # a server that holds the connection fails the test here
    return connection


def closed_by_server(connection: socket.socket) -> bool:
    try:
        return connection.recv(4096) == b""
    except ConnectionResetError:
        return True


def probe(server: HealthServer) -> int | None:
    try:
        return httpx.get(f"http://127.0.0.1:{server.port}/healthz", timeout=5).status_code
    except httpx.TransportError:
        return None


def test_an_idle_connection_is_closed_at_its_deadline(
    started: Callable[..., HealthServer],
) -> None:
    server = started(request_seconds=0.3)
    with connect(server) as idle:
        assert closed_by_server(idle)
    assert probe(server) == 200


def test_a_request_trickled_a_byte_at_a_time_is_cut_off_at_its_deadline(
    started: Callable[..., HealthServer],
) -> None:
    server = started(request_seconds=0.5)
    with connect(server) as slow:
        slow.sendall(b"GET /healthz HTTP/1.1\r\n")
        # A header byte whenever the server stayed quiet for 50 ms: every read gets its byte
        # in time, so only a deadline for the whole request can end this.
        header = itertools.cycle(b"X-Slow: a\r\n")
        for _ in range(400):
            if select.select([slow], [], [], 0.05)[0]:
                break
            try:
                slow.sendall(bytes([next(header)]))
            except (BrokenPipeError, ConnectionResetError):
                break
        assert closed_by_server(slow)


def test_a_crowd_of_idle_connections_gets_few_threads_and_cannot_keep_a_probe_out(
    started: Callable[..., HealthServer],
) -> None:
    server = started(max_connections=4, request_seconds=60)
    threads = threading.active_count()
    crowd = [connect(server) for _ in range(4)]
    try:
        assert probe(server) == 200  # displaces the oldest of the crowd
        assert closed_by_server(crowd[0])
        crowd += [connect(server) for _ in range(20)]
        assert probe(server) == 200
        assert threading.active_count() <= threads + 2 * 4
    finally:
        for connection in crowd:
            connection.close()


def test_a_client_that_leaves_before_its_answer_is_not_an_error(
    started: Callable[..., HealthServer], capsys: pytest.CaptureFixture[str]
) -> None:
    left = threading.Event()

    def live() -> list[str]:
        left.wait(10)  # answers only once the client is gone
        return []

    server = started(live=live)
    with connect(server) as client:
        client.sendall(b"GET /healthz HTTP/1.1\r\nHost: probe\r\n\r\n")
        # Closing with a zero linger resets the connection, as a killed prober does.
        client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    left.set()
    wait_until(lambda: server.clients_gone == 1)
    assert probe(server) == 200
    assert capsys.readouterr().err == ""


def test_liveness_fails_for_a_failed_or_stalled_component_not_a_degraded_one() -> None:
    degraded, failed, stalled = (HealthReporter(n) for n in ("shipper.x", "informer.a", "leader"))
    degraded.set(Health.degraded("platform unreachable"))
    failed.set(Health.failed("informer a crashed"))
    watch = HealthWatch(lambda: [degraded, failed, stalled])
    assert watch.problems() == ["informer.a: informer a crashed"]
    stalled.stalled_after = 0.0  # it promised progress at once and made none since
    assert watch.problems() == ["informer.a: informer a crashed", "leader: no progress"]
    stalled.progress()
    stalled.stalled_after = 60.0
    assert watch.problems() == ["informer.a: informer a crashed"]


def test_readiness_names_a_refused_permission_but_not_a_passing_failure() -> None:
    transient, refused = (HealthReporter(n) for n in ("shipper.x", "informer.nodes"))
    transient.set(Health.degraded("platform unreachable"))
    denied = 'forbidden: cannot list resource "nodes" in API group "" at the cluster scope'
    refused.set(Health.forbidden(denied))
    watch = HealthWatch(lambda: [transient, refused])
    assert watch.not_ready() == [f"informer.nodes: {denied}"]
    assert watch.problems() == []  # a restart would not fix RBAC: liveness stays
    refused.set(Health.healthy())
    assert watch.not_ready() == []


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def test_metrics_name_counters_by_component_with_their_labels() -> None:
    informer, shipper, scheduler = (
        HealthReporter(n) for n in ("informer.pods", "shipper.discovery", "scheduler")
    )
    informer.count("relists", 2)
    informer.count("objects_skipped/unstorable", 3)
    informer.count("objects_skipped/nested_too_deep")
    shipper.count("records_shipped", 500)
    scheduler.count("applies")
    scheduler.set(Health.degraded("scaling API unreachable"))
    queue = StreamStats(
        records=7, bytes=900, oldest_age_seconds=3.5, dead_letters=1, dropped=0,
        resync_needed=True,
    )  # fmt: skip
    metrics = AgentMetrics()
    metrics.read_from(
        lambda: [informer, shipper, scheduler],
        queues=lambda: {"discovery": queue},
        leader=lambda: True,
    )
    metrics.observe_request("records", "2xx", 0.02)
    metrics.observe_request("records", "error", 30.0)
    found = samples(metrics.exposition().decode())
    assert found[("moonin_agent_informer_relists_total", (("resource", "pods"),))] == 2
    skipped = "moonin_agent_objects_skipped_total"
    assert found[(skipped, (("reason", "unstorable"), ("resource", "pods")))] == 3
    assert found[(skipped, (("reason", "nested_too_deep"), ("resource", "pods")))] == 1
    shipped = ("moonin_agent_shipper_records_shipped_total", (("stream", "discovery"),))
    assert found[shipped] == 500
    assert found[("moonin_agent_scheduler_applies_total", ())] == 1
    assert found[("moonin_agent_component_healthy", (("component", "scheduler"),))] == 0
    assert found[("moonin_agent_component_healthy", (("component", "informer.pods"),))] == 1
    assert found[("moonin_agent_queue_records", (("stream", "discovery"),))] == 7
    assert found[("moonin_agent_queue_oldest_age_seconds", (("stream", "discovery"),))] == 3.5
    assert found[("moonin_agent_queue_resync_needed", (("stream", "discovery"),))] == 1
    assert found[("moonin_agent_leader", ())] == 1
    count = "moonin_agent_http_request_duration_seconds_count"
    assert found[(count, (("endpoint", "records"), ("status_class", "error")))] == 1
    assert found[(count, (("endpoint", "records"), ("status_class", "2xx")))] == 1


@pytest.mark.e2e
def test_a_running_agent_serves_probes_and_its_queue_depth_follows_an_outage(
    kube: FakeKube, kubeconfig: Path, platform: FakePlatform, tmp_path: Path
) -> None:
    cluster_objects.populate(kube)
    port = free_port()
    env = agent_env(
        platform,
        tmp_path / "queue",
        KUBECONFIG=str(kubeconfig),
        LEADER_ELECTION="false",
        HEALTH_ADDR=f"127.0.0.1:{port}",
        DISCOVERY_API_URL=platform.url,
        SCALING_API_URL=platform.url,
    )
    del env["API_URL"]  # role all reads one URL per API
    agent = start_agent(env, role="all")
    base = f"http://127.0.0.1:{port}"

    def metric(name: str, **labels: str) -> float:
        found = samples(httpx.get(f"{base}/metrics").text)
        return found.get((name, tuple(sorted(labels.items()))), 0.0)

    def answers(path: str) -> int:
        try:
            return httpx.get(f"{base}{path}").status_code
        except httpx.TransportError:
            return 0

    depth = "moonin_agent_queue_records"
    try:
        wait_until(lambda: answers("/readyz") == 200)
        assert msgspec.json.decode(httpx.get(f"{base}/healthz").content)["ok"] is True
        wait_until(
            lambda: metric("moonin_agent_shipper_records_shipped_total", stream="discovery") > 0
        )
        wait_until(lambda: metric(depth, stream="discovery") == 0)

        platform.down()
        for n in range(3):
            kube.create(objects.namespace(name=f"outage-{n}"))
        wait_until(lambda: metric(depth, stream="discovery") >= 3)
        assert answers("/healthz") == 200  # an unreachable platform is no reason to restart
        failed = metric(
            "moonin_agent_http_request_duration_seconds_count",
            endpoint="records",
            status_class="error",
        )
        assert failed >= 1

        platform.up()
        wait_until(lambda: metric(depth, stream="discovery") == 0)
        assert {("namespace", f"outage-{n}") for n in range(3)} <= set(platform.view())
        assert metric("moonin_agent_leader") == 1
        assert metric("moonin_agent_informer_lists_total", resource="namespaces") >= 1
    finally:
        agent.send_signal(signal.SIGTERM)
        stop_within(agent, 30)


@pytest.mark.e2e
def test_a_forbidden_kind_makes_the_agent_unready_naming_it_while_the_rest_ships(
    kube: FakeKube, kubeconfig: Path, platform: FakePlatform, tmp_path: Path
) -> None:
    cluster_objects.populate(kube)
    kube.forbid("nodes")
    port = free_port()
    env = agent_env(
        platform,
        tmp_path / "queue",
        KUBECONFIG=str(kubeconfig),
        LEADER_ELECTION="false",
        HEALTH_ADDR=f"127.0.0.1:{port}",
    )
    agent = start_agent(env)
    ready = f"http://127.0.0.1:{port}/readyz"

    def readiness() -> tuple[int, list[str]]:
        try:
            answer = httpx.get(ready)
        except httpx.TransportError:
            return 0, []
        return answer.status_code, answer.json()["problems"]

    # Streamed lists are watches, so the verb refused is `watch`.
    denied = (
        'informer.nodes: forbidden: cannot watch resource "nodes" in API group "" '
        "at the cluster scope"
    )
    try:
        wait_until(lambda: readiness() == (503, [denied]))
        wait_until(lambda: ("deployment", "shop/web") in platform.view())
        assert ("node", "node-1") not in platform.view()
        assert httpx.get(f"http://127.0.0.1:{port}/healthz").status_code == 200

        kube.allow("nodes")  # RBAC fixed: the backoff is still short, well under 5 minutes
        wait_until(lambda: ("node", "node-1") in platform.view(), timeout=60)
        wait_until(lambda: readiness() == (200, []))
    finally:
        agent.send_signal(signal.SIGTERM)
        stop_within(agent, 30)
