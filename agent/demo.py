"""`moonin-agent demo`: the whole agent against the sandbox fakes, in under half a minute.

No cluster and no account. The fake Kubernetes API (loaded with `sandbox.demo_cluster`) and
the fake Moonin platform run in this process, on 127.0.0.1 only; the agent runs as
`moonin-agent run --role all` in one child process, configured by its environment alone, as
in a pod. The demo then walks through what the agent is for: every object reaches the
platform; the platform goes down for a few seconds while the cluster changes, the records
wait in the outbox and are replayed when it is back; a manual scaling execution is applied
to an HPA and reverted when it ends. It prints what it saw as it goes, then a summary.

It ends by itself (usually after 20-30 s; if what it waits for has not happened 60 s after
the start, it says what is missing and exits 1) and leaves nothing running: the child gets
SIGTERM (and SIGKILL if it has not stopped 15 s later), the fakes are stopped and the
temporary directory is removed, whether the demo succeeded, timed out or was interrupted.

The fakes come with the `sandbox` extra; without it the demo prints one line naming the
extra and exits 2.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, TextIO

import httpx
from prometheus_client.parser import text_string_to_metric_families

from agent import config, queue_inspect
from shipper.records import DISCOVERY, STREAMS

if TYPE_CHECKING:
    from sandbox.kube import FakeKube
    from sandbox.platform import FakePlatform

EXIT_FAILED = 1
EXIT_NO_SANDBOX = 2
EXIT_INTERRUPTED = 130  # what a shell reports for a command ended by Ctrl-C
NO_SANDBOX = "moonin-agent: the demo needs the sandbox extra: pip install 'moonin-agent[sandbox]'"

PROJECT_ID, CLUSTER_ID, TOKEN = "demo-project", "demo-cluster", "demo-token-0c5f9e2a"
TEMPLATE_ID, ACTION_ID = "t-1", "a-1"
WINDOW_MIN, WINDOW_MAX = 4, 20
WINDOW_SECONDS = 20
"""The manual execution ends this long after the demo starts..."""
MIN_WINDOW_LEFT_SECONDS = 12
"""...but no sooner than this after the agent is ready, so a slow start cannot miss it."""
OUTAGE_SECONDS = 4.0
OUTAGE_CHANGES = 3
"""Records the cluster changes made during the outage yield at least: a Deployment scaled,
a namespace and a Deployment created."""
DEADLINE_SECONDS = 60.0
"""Every wait ends by then; a normal run is done after 20-30 s, a slow CI machine's later."""
STOP_SECONDS = 15.0
"""How long the agent may take to stop after SIGTERM before it is killed."""
POLL_SECONDS = 0.1

QUEUE_DEPTH = "moonin_agent_queue_records"

# Inherited variables that would point the agent elsewhere or change what it shows: its
# own settings, its cluster's kubeconfig, proxies (a proxy cannot reach this machine's
# 127.0.0.1), and the pod's cluster (run in a pod, the agent would otherwise take the real
# API server over the fake one).
_DROPPED_NAMES = config.ENVIRONMENT | {"KUBECONFIG"}
_DROPPED_PREFIXES = ("KUBERNETES_",)
_DROPPED_SUFFIXES = ("_PROXY",)


class DemoFailed(Exception):
    """Something the demo waited for did not happen; `str()` says what was missing."""


def main(out: TextIO = sys.stdout) -> int:
    try:
        sandbox = _import_sandbox()
    except ImportError:
        print(NO_SANDBOX, file=sys.stderr)
        return EXIT_NO_SANDBOX
    demo = Demo(sandbox, out)
    previous = _interrupt_on_sigterm()
    try:
        demo.run()
    except DemoFailed as exc:
        demo.close()  # first, so the agent's last log lines are in the tail
        print(f"moonin-agent demo: {exc}", file=sys.stderr)
        for line in demo.log_tail:
            print(f"  agent: {line}", file=sys.stderr)
        return EXIT_FAILED
    except KeyboardInterrupt:
        demo.close()
        print("moonin-agent demo: interrupted; everything stopped", file=sys.stderr)
        return EXIT_INTERRUPTED
    finally:
        demo.close()  # whatever else happened; a second call does nothing
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
    demo.print_summary()
    return 0


def _interrupt_on_sigterm() -> Any:
    """SIGTERM ends the demo like Ctrl-C, so the agent and the files are cleaned up too.
    Returns the previous handler (None where signals cannot be set: not the main thread)."""

    def interrupt(_signum: int, _frame: object) -> None:
        raise KeyboardInterrupt

    try:
        return signal.signal(signal.SIGTERM, interrupt)
    except ValueError:
        return None


@dataclass(frozen=True)
class _Sandbox:
    """The fakes, imported only when the demo runs (the sandbox extra installs them, as the
    moonin-agent-sandbox distribution; the agent's wheel and image hold none of them)."""

    fake_kube: type[FakeKube]
    fake_platform: type[FakePlatform]
    cluster: ModuleType
    scaling: ModuleType


def _import_sandbox() -> _Sandbox:
    # The fakes are the moonin-agent-sandbox distribution the extra installs; trustme, one of
    # its dependencies, is asked for too, so a sandbox/ folder merely on the path (a checkout
    # without the extra) is as missing as in the image, which holds neither.
    import trustme  # noqa: F401

    from sandbox import demo_cluster, scaling
    from sandbox.kube import FakeKube
    from sandbox.platform import FakePlatform

    return _Sandbox(FakeKube, FakePlatform, demo_cluster, scaling)


@dataclass
class Observed:
    """What the demo saw, for the summary; times are seconds since the demo started."""

    objects: dict[str, int] = field(default_factory=dict)
    delivered: Counter[str] = field(default_factory=Counter)
    down_at: float | None = None
    up_at: float | None = None
    queued_peak: int = 0
    oldest_age_peak: float = 0.0
    replayed_at: float | None = None
    replayed_records: int = 0
    applied_at: float | None = None
    replicas_before: int | None = None
    replicas_during: int | None = None
    reverted_at: float | None = None
    revert_reason: str | None = None
    hpa_after: tuple[int, int] | None = None
    agent_exit: int | None = None
    killed: bool = False
    queue_left: dict[str, int] = field(default_factory=dict)
    dead_letters: int = 0
    finished_at: float | None = None


class Demo:
    def __init__(self, sandbox: _Sandbox, out: TextIO) -> None:
        self._sandbox = sandbox
        self._cluster = sandbox.cluster
        self._out = out
        self._started = time.monotonic()
        self._deadline = self._started + DEADLINE_SECONDS
        self._window_ends = self._deadline  # set when the execution starts
        self._tmp = Path(tempfile.mkdtemp(prefix="moonin-demo-"))
        self._log_path = self._tmp / "agent.log"
        self._kube: FakeKube | None = None
        self._platform: FakePlatform | None = None
        self._agent: subprocess.Popen[bytes] | None = None
        self._health = ""
        self._http = httpx.Client(timeout=5.0, trust_env=False)
        self.seen = Observed()
        self.log_tail: list[str] = []
        self._closed = False

    # -- the story ----------------------------------------------------------------------

    def run(self) -> None:
        self._start_fakes()
        self._start_agent()
        self._wait("the agent to be ready (/readyz)", self._not_ready)
        self._say(f"agent running (moonin-agent run --role all, pid {self.agent.pid})")
        self._start_window()
        self._wait("the discovery records at the platform", self._discovery_missing)
        self._say(f"discovery: {len(self.platform.view())} objects at the platform")
        # Past the window's end nothing will be applied: say so rather than wait for nothing.
        self._wait("the scaling apply", self._apply_missing, by=self._window_ends)
        self.seen.applied_at = self._elapsed()
        self._say(
            f"scaling: window applied to HPA {self._web} (min {WINDOW_MIN}, max {WINDOW_MAX})"
        )
        self._outage()
        self._wait("the scaling revert", self._revert_missing)
        self.seen.reverted_at = self._elapsed()
        self._say(f"scaling: window reverted ({self.seen.revert_reason})")
        self._wait("an empty queue", self._queue_not_empty)
        self._stop_agent()
        self._read_queue_files()

    def _outage(self) -> None:
        cluster = self._cluster
        self.platform.down()
        self.seen.down_at = self._elapsed()
        self._say("platform down; changing the cluster meanwhile")
        self.kube.patch("deployments", cluster.SHOP, "cart", {"spec": {"replicas": 5}})
        self.kube.create(cluster.namespace("promo"))
        self.kube.create(cluster.deployment("banner", "promo", replicas=1))
        self._wait("the changes to queue up in the outbox", self._changes_not_queued)
        self._say(
            f"{self.seen.queued_peak} records waiting in the outbox "
            f'({QUEUE_DEPTH}{{stream="{DISCOVERY}"}})'
        )
        back = self._started + self.seen.down_at + OUTAGE_SECONDS
        while time.monotonic() < back:
            self._changes_not_queued()  # keeps the peak depth and age current
            time.sleep(POLL_SECONDS)
        before = len(self.platform.received_records())
        self.platform.up()
        self.seen.up_at = self._elapsed()
        self._say(f"platform back up ({self.seen.queued_peak} records were waiting)")
        self._wait("the replay of the queued records", self._replay_missing)
        self.seen.replayed_at = self._elapsed()
        self.seen.replayed_records = len(self.platform.received_records()) - before
        self._say(f"replayed: {self.seen.replayed_records} records delivered, queue empty")

    # -- what each step waits for (each returns what is still missing) ------------------

    def _not_ready(self) -> list[str]:
        try:
            answer = self._http.get(f"{self._health}/readyz")
        except httpx.TransportError:
            return ["no answer on HEALTH_ADDR"]
        return [] if answer.status_code == 200 else [answer.text.strip()]

    def _discovery_missing(self) -> list[str]:
        cluster = self._cluster
        view = self.platform.view()
        wanted = [
            *(("namespace", name) for name in (cluster.SHOP, cluster.PAYMENTS, cluster.BATCH)),
            ("deployment", self._web),
            ("deployment", f"{cluster.SHOP}/cart"),
            ("deployment", f"{cluster.PAYMENTS}/api"),
            ("hpa", self._web),
            ("cronjob", f"{cluster.BATCH}/report"),
            ("job_execution", cluster.failed_job_key()),
            ("helm_release", f"{cluster.SHOP}/{cluster.SHOP}/v1"),
        ]
        missing = [f"{kind} {key}" for kind, key in wanted if (kind, key) not in view]
        if not any(r["kind"] == "pod_error" for r in self.platform.received_records()):
            missing.append("pod_error (the crash-looping pod)")
        return missing

    def _apply_missing(self) -> list[str]:
        missing = []
        spec = self._web_hpa()["spec"]
        if (spec.get("minReplicas"), spec.get("maxReplicas")) != (WINDOW_MIN, WINDOW_MAX):
            missing.append(f"HPA {self._web} at min {WINDOW_MIN} max {WINDOW_MAX}")
        if not self._events("apply"):
            missing.append("the apply event at the platform")
        if not missing:
            self.seen.replicas_during = self._web_replicas()
        return missing

    def _changes_not_queued(self) -> list[str]:
        depth = self._metric(QUEUE_DEPTH, stream=DISCOVERY) or 0
        self.seen.queued_peak = max(self.seen.queued_peak, int(depth))
        age = self._metric("moonin_agent_queue_oldest_age_seconds", stream=DISCOVERY) or 0.0
        self.seen.oldest_age_peak = max(self.seen.oldest_age_peak, age)
        if depth >= OUTAGE_CHANGES:
            return []
        return [f"{OUTAGE_CHANGES} records queued (now {int(depth)})"]

    def _replay_missing(self) -> list[str]:
        cluster = self._cluster
        view = self.platform.view()
        missing = []
        depth = self._metric(QUEUE_DEPTH, stream=DISCOVERY)
        if depth is None or depth > 0:
            missing.append(f"an empty discovery queue (now {depth})")
        for slot in (("namespace", "promo"), ("deployment", "promo/banner")):
            if slot not in view:
                missing.append(" ".join(slot))
        cart = view.get(("deployment", f"{cluster.SHOP}/cart"), {})
        if cart.get("data", {}).get("desired_replicas") != 5:
            missing.append(f"deployment {cluster.SHOP}/cart at 5 replicas")
        return missing

    def _revert_missing(self) -> list[str]:
        missing = []
        cluster = self._cluster
        spec = self._web_hpa()["spec"]
        bounds = (spec.get("minReplicas"), spec.get("maxReplicas"))
        if bounds != (cluster.WEB_MIN, cluster.WEB_MAX):
            missing.append(f"HPA {self._web} back at min {cluster.WEB_MIN} max {cluster.WEB_MAX}")
        reverts = self._events("revert")
        if not reverts:
            missing.append("the revert event at the platform")
        if not missing:
            self.seen.hpa_after = (cluster.WEB_MIN, cluster.WEB_MAX)
            self.seen.revert_reason = reverts[0].get("reason")
        return missing

    def _queue_not_empty(self) -> list[str]:
        missing = []
        for stream in STREAMS:
            depth = self._metric(QUEUE_DEPTH, stream=stream)
            if depth != 0:
                missing.append(f"{stream} queue empty (now {depth})")
        return missing

    # -- the fakes and the agent --------------------------------------------------------

    def _start_fakes(self) -> None:
        kube = self._kube = self._sandbox.fake_kube().start()
        self.seen.objects = self._cluster.populate(kube)
        self.seen.replicas_before = self._web_replicas()
        platform = self._platform = self._sandbox.fake_platform(
            token=TOKEN, project_id=PROJECT_ID, cluster_id=CLUSTER_ID
        ).start()
        objects = ", ".join(f"{count} {kind}" for kind, count in self.seen.objects.items())
        self._say(f"fake Kubernetes API at {kube.url}: {objects}")
        self._say(f"fake Moonin platform at {platform.url}")

    def _start_window(self) -> None:
        """Start the manual execution: it ends WINDOW_SECONDS after the demo started, or
        later on a machine so slow that the agent would otherwise miss it."""
        now = datetime.now(UTC)
        ends = max(
            now + timedelta(seconds=WINDOW_SECONDS - self._elapsed()),
            now + timedelta(seconds=MIN_WINDOW_LEFT_SECONDS),
        ).replace(microsecond=0)
        self._window_ends = time.monotonic() + (ends - now).total_seconds()
        scaling = self._sandbox.scaling
        template = scaling.manual_template(
            now.replace(microsecond=0), ends, TEMPLATE_ID, name="demo: flash sale"
        )
        action = scaling.action(
            ACTION_ID, self._cluster.WEB, WINDOW_MIN, WINDOW_MAX, ns=self._cluster.SHOP
        )
        self.platform.set_templates([template])
        self.platform.set_actions(TEMPLATE_ID, [action])
        self._say(
            f"manual execution of template {TEMPLATE_ID} started: {WINDOW_MIN}-{WINDOW_MAX} "
            f"replicas for {self._web} until {ends.strftime('%H:%M:%S')} UTC "
            f"(+{self._window_ends - self._started:.0f} s)"
        )

    def _start_agent(self) -> None:
        port = _free_port()
        self._health = f"http://127.0.0.1:{port}"
        kubeconfig = self.kube.kubeconfig(self._tmp / "kubeconfig")
        env = agent_environment(
            os.environ,
            platform_url=self.platform.url,
            queue_dir=self._tmp / "queue",
            kubeconfig=kubeconfig,
            health_port=port,
        )
        with open(self._log_path, "wb") as log:
            # The child inherits the file; this process needs no handle of its own.
            self._agent = subprocess.Popen(
                # --kubeconfig too: a kubeconfig given on the command line wins over a
                # service account, wherever the demo runs.
                [
                    sys.executable,
                    "-m",
                    "agent.cli",
                    "run",
                    "--role",
                    "all",
                    "--kubeconfig",
                    str(kubeconfig),
                ],
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
            )

    def _stop_agent(self) -> None:
        self.seen.agent_exit, self.seen.killed = _terminate(self.agent)
        outcome = "killed after 15 s" if self.seen.killed else f"exit {self.seen.agent_exit}"
        self._say(f"agent stopped on SIGTERM ({outcome})")
        self.seen.delivered = Counter(r["kind"] for r in self.platform.received_records())
        self.seen.finished_at = self._elapsed()

    def _read_queue_files(self) -> None:
        """The outbox as the agent left it, read the way `moonin-agent queue stats` does."""
        stats = queue_inspect.stats(self._tmp / "queue")
        self.seen.queue_left = {stream: figures.records for stream, figures in stats.items()}
        self.seen.dead_letters = sum(figures.dead_letters for figures in stats.values())

    def close(self) -> None:
        """Stop everything this demo started and remove its files; safe to call twice."""
        if self._closed:
            return
        self._closed = True
        if self._agent is not None and self._agent.poll() is None:
            _terminate(self._agent)
        self.log_tail = _tail(self._log_path, 10)
        self._http.close()
        for fake in (self._platform, self._kube):
            if fake is not None:
                with contextlib.suppress(Exception):
                    fake.stop()
        shutil.rmtree(self._tmp, ignore_errors=True)

    # -- the summary --------------------------------------------------------------------

    def print_summary(self) -> None:
        for line in summary_lines(self.seen, web=self._web):
            print(line, file=self._out)
        self._out.flush()

    # -- helpers ------------------------------------------------------------------------

    @property
    def kube(self) -> FakeKube:
        assert self._kube is not None
        return self._kube

    @property
    def platform(self) -> FakePlatform:
        assert self._platform is not None
        return self._platform

    @property
    def agent(self) -> subprocess.Popen[bytes]:
        assert self._agent is not None
        return self._agent

    @property
    def _web(self) -> str:
        return f"{self._cluster.SHOP}/{self._cluster.WEB}"

    def _web_hpa(self) -> dict[str, Any]:
        return self.kube.get("horizontalpodautoscalers", self._cluster.SHOP, self._cluster.WEB)

    def _web_replicas(self) -> int | None:
        spec = self.kube.get("deployments", self._cluster.SHOP, self._cluster.WEB)["spec"]
        replicas: int | None = spec.get("replicas")
        return replicas

    def _events(self, kind: str) -> list[dict[str, Any]]:
        return [e for e in self.platform.events().values() if e["type"] == kind]

    def _metric(self, name: str, **labels: str) -> float | None:
        try:
            text = self._http.get(f"{self._health}/metrics").text
        except httpx.TransportError:
            return None
        return metric_value(text, name, labels)

    def _wait(
        self, what: str, missing: Callable[[], list[str]], *, by: float | None = None
    ) -> None:
        """Poll `missing` until it finds nothing missing; DemoFailed when the agent exits or
        the deadline (`by`, a monotonic time, or the demo's own) passes first."""
        deadline = self._deadline if by is None else min(by, self._deadline)
        while True:
            still = missing()
            if not still:
                return
            code = self.agent.poll()
            if code is not None:
                raise DemoFailed(f"the agent exited with status {code} while waiting for {what}")
            if time.monotonic() > deadline:
                raise DemoFailed(
                    f"gave up after {self._elapsed():.0f} s waiting for {what}; "
                    f"missing: {', '.join(still)}"
                )
            time.sleep(POLL_SECONDS)

    def _elapsed(self) -> float:
        return time.monotonic() - self._started

    def _say(self, text: str) -> None:
        print(f"[{self._elapsed():5.1f}s] {text}", file=self._out, flush=True)


def agent_environment(
    inherited: Mapping[str, str],
    *,
    platform_url: str,
    queue_dir: Path,
    kubeconfig: Path,
    health_port: int,
) -> dict[str, str]:
    """The child's environment: this one without the agent's own settings, plus the demo's."""
    env = {name: value for name, value in inherited.items() if not _dropped(name)}
    env.update(
        PROJECT_ID=PROJECT_ID,
        CLUSTER_ID=CLUSTER_ID,
        CLUSTER_TOKEN=TOKEN,
        DISCOVERY_API_URL=platform_url,
        SCALING_API_URL=platform_url,
        MOONIN_INSECURE_HTTP="true",  # the fake platform speaks plain HTTP on 127.0.0.1
        QUEUE_DIR=str(queue_dir),
        KUBECONFIG=str(kubeconfig),
        LEADER_ELECTION="false",
        CLOUD_METADATA="false",  # nothing leaves 127.0.0.1
        HEALTH_ADDR=f"127.0.0.1:{health_port}",
        RECONCILE_INTERVAL_SECONDS="1",
        HEARTBEAT_SECONDS="2",
        LINGER_SECONDS="0.05",
        SHUTDOWN_SHIP_SECONDS="5",
        LOG_LEVEL="warning",
    )
    return env


def _dropped(name: str) -> bool:
    upper = name.upper()
    return (
        upper in _DROPPED_NAMES
        or upper.startswith(_DROPPED_PREFIXES)
        or upper.endswith(_DROPPED_SUFFIXES)
    )


def metric_value(text: str, name: str, labels: Mapping[str, str]) -> float | None:
    """One sample of the Prometheus text `text`; None when it is not there."""
    wanted = dict(labels)
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and sample.labels == wanted:
                return float(sample.value)
    return None


def summary_lines(seen: Observed, *, web: str) -> list[str]:
    delivered = sum(seen.delivered.values())
    kinds = ", ".join(f"{kind} {count}" for kind, count in seen.delivered.most_common())
    lines = ["", "summary", f"  records delivered: {delivered} ({kinds})"]
    if seen.down_at is not None and seen.up_at is not None and seen.replayed_at is not None:
        lines.append(
            f"  outage: platform down {seen.up_at - seen.down_at:.1f} s; "
            f"{seen.queued_peak} records queued meanwhile (oldest {seen.oldest_age_peak:.1f} s), "
            f"replayed {seen.replayed_at - seen.up_at:.1f} s after it came back"
        )
    if seen.applied_at is not None:
        replicas = ""
        if seen.replicas_during != seen.replicas_before:
            replicas = f"; Deployment raised {seen.replicas_before} -> {seen.replicas_during}"
        lines.append(
            f"  scaling: applied {TEMPLATE_ID}/{ACTION_ID} to {web} "
            f"(min {WINDOW_MIN}, max {WINDOW_MAX}{replicas}) at +{seen.applied_at:.1f} s"
        )
    if seen.reverted_at is not None and seen.hpa_after is not None:
        low, high = seen.hpa_after
        lines.append(
            f"           reverted ({seen.revert_reason}) at +{seen.reverted_at:.1f} s: "
            f"back to min {low}, max {high}"
        )
    lines.append(f"  queue: {_queue_words(seen.queue_left, seen.dead_letters)}")
    stopped = "killed" if seen.killed else f"exit {seen.agent_exit}"
    took = f"{seen.finished_at:.1f} s" if seen.finished_at is not None else "?"
    lines.append(f"  agent: stopped on SIGTERM ({stopped}); nothing left running; took {took}")
    return lines


def _queue_words(left: Mapping[str, int], dead_letters: int) -> str:
    if not any(left.values()) and not dead_letters:
        return "empty (" + ", ".join(f"{s} 0" for s in left) + " records; no dead letters)"
    figures = ", ".join(f"{stream} {count}" for stream, count in left.items())
    return f"not empty: {figures} records, {dead_letters} dead letters"


def _free_port() -> int:
    # Closed before the agent binds it; another process taking it in between makes the
    # agent exit at start-up, which the demo reports.
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _terminate(process: subprocess.Popen[bytes]) -> tuple[int, bool]:
    """SIGTERM, then SIGKILL after STOP_SECONDS; (exit status, whether it was killed)."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
    try:
        return process.wait(timeout=STOP_SECONDS), False
    except subprocess.TimeoutExpired:
        process.kill()
        return process.wait(), True


def _tail(path: Path, lines: int) -> list[str]:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return []
    return text.splitlines()[-lines:]
