"""The chart's workloads run as processes on this machine, each as its own ServiceAccount,
against a Kubernetes API server (the fake or the real control plane).

`Installed` is one rendering of the chart whose ServiceAccounts and RBAC objects were
loaded into a server: it gives each container the environment the chart renders for it,
resolved as a kubelet would (Secrets, ConfigMaps and the downward API, mounts moved
under `tmp`), with a kubeconfig holding that container's ServiceAccount token; it starts
agents and the uninstall hook with it, and holds every request each account made against
the RBAC the chart rendered for it (`tests.rbac_guard`).
"""

from __future__ import annotations

import copy
import os
import subprocess
import sys
import threading
from collections.abc import Callable, Collection, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import helm_python as helm

from sandbox.kube.faults import RequestRecord
from sandbox.platform import FakePlatform
from tests import rbac_guard as guard
from tests.agent_process import TOKEN
from tests.chart_render import (
    CHART,
    NAMESPACE,
    RELEASE,
    VARIANTS,
    Rendered,
    container_environment,
    render,
)
from tests.rbac_guard import Answer

DISCOVERY = f"{RELEASE}-discovery"
SCALING = f"{RELEASE}-scaling"
UNINSTALL = f"{RELEASE}-uninstall"
LEASE = "moonin-discovery-leader"
HOOK_SCRIPT = CHART / "files" / "scale_to_zero.py"
RBAC_KINDS = ("ServiceAccount", "ClusterRole", "Role", "ClusterRoleBinding", "RoleBinding")
# Settings of the agent's environment that point at this machine instead of a pod's.
KEPT_FROM_HOST = ("PATH", "PYTHONPATH", "HOME", "LANG", "LC_ALL", "VIRTUAL_ENV", "TMPDIR")


def rendered_variants(variants: Iterable[str]) -> dict[str, Rendered]:
    """The chart rendered with each variant's values and the fake platform's token."""
    rendered = {}
    with helm.Chart.load(CHART) as chart:
        for variant in variants:
            values = copy.deepcopy(VARIANTS[variant])
            values["global"]["clusterCredentials"]["clusterToken"] = TOKEN  # the platform's
            rendered[variant] = render(chart, values)
    return rendered


def rbac_objects(rendered: Rendered) -> Iterator[dict[str, Any]]:
    """The rendering's ServiceAccounts, roles and bindings, in an order a server takes."""
    for kind in RBAC_KINDS:
        yield from rendered.of_kind(kind)


def accounts(rendered: Rendered) -> list[str]:
    return [account["metadata"]["name"] for account in rendered.of_kind("ServiceAccount")]


@dataclass
class Installed:
    """One rendering of the chart installed into a server and run from `tmp`.

    `tokens`: each ServiceAccount's token; `kubeconfig(path, token)` writes a kubeconfig for
    the server; `records()` is every request the server saw so far (for the RBAC check)."""

    rendered: Rendered
    platform: FakePlatform
    tmp: Path
    tokens: dict[str, str]
    kubeconfig: Callable[[Path, str], Path]
    records: Callable[[], list[RequestRecord]]
    agents: list[subprocess.Popen[str]] = field(default_factory=list)

    def container(self, component: str, name: str) -> dict[str, Any]:
        spec = self.rendered.workload(component)["spec"]["template"]["spec"]
        containers = spec.get("initContainers", []) + spec["containers"]
        return next(c for c in containers if c["name"] == name)

    def account_of(self, component: str) -> str:
        spec = self.rendered.workload(component)["spec"]["template"]["spec"]
        return str(spec["serviceAccountName"])

    def env(self, component: str, container: str, pod: str) -> dict[str, str]:
        """The container's environment as the chart renders it, resolved as the kubelet
        would, with the paths and addresses of a pod moved to this machine."""
        home = self.tmp / pod
        downward = {"metadata.name": pod, "metadata.namespace": NAMESPACE}
        workload = self.rendered.workload(component)
        env = {key: os.environ[key] for key in KEPT_FROM_HOST if key in os.environ}
        env |= container_environment(
            self.rendered, workload, self.container(component, container), home, downward
        )
        moved = {
            "API_URL": self.platform.url,
            "HEALTH_ADDR": "127.0.0.1:0",
            "RECONCILE_INTERVAL_SECONDS": "0.5",
        }
        env.update({key: value for key, value in moved.items() if key in env})
        # What this machine adds: the cluster by kubeconfig with the account's token, plain
        # HTTP to the fake platform, short timings.
        token = self.tokens[self.account_of(component)]
        env.update(
            KUBECONFIG=str(self.kubeconfig(home / "kubeconfig", token)),
            MOONIN_INSECURE_HTTP="true",
            HEARTBEAT_SECONDS="1",
            LINGER_SECONDS="0.01",
            SHUTDOWN_SHIP_SECONDS="2",
        )
        return env

    def start(self, env: dict[str, str], *args: str) -> subprocess.Popen[str]:
        agent = subprocess.Popen(
            [sys.executable, "-X", "faulthandler", "-m", "agent.cli", *args],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.agents.append(agent)
        return agent

    def stop_all(self) -> None:
        for agent in self.agents:
            if agent.poll() is None:
                agent.kill()
            agent.communicate()

    def scale_to_zero_hook(
        self, *, ca_pem: bytes, port: int, on_scaled_down: Callable[[], None]
    ) -> subprocess.CompletedProcess[str]:
        """The hook's first step as its pod runs it: the script from the chart, its
        container's environment, the uninstall ServiceAccount's token and the API server's
        CA, the server on 127.0.0.1:`port`. `on_scaled_down` runs beside it, doing what the
        Deployment controller and the kubelet would (the pod goes once its Deployment is at
        zero)."""
        account = self.tmp / "uninstall-serviceaccount"
        account.mkdir(exist_ok=True)
        (account / "token").write_text(self.tokens[UNINSTALL])
        (account / "ca.crt").write_bytes(ca_pem)
        env = self.env("uninstall", "scale-to-zero", "uninstall-hook") | {
            "KUBERNETES_SERVICE_HOST": "127.0.0.1",
            "KUBERNETES_SERVICE_PORT": str(port),
            "SERVICE_ACCOUNT_DIR": str(account),
        }
        watcher = threading.Thread(target=on_scaled_down, daemon=True)
        watcher.start()
        result = subprocess.run(
            [sys.executable, str(HOOK_SCRIPT)], env=env, capture_output=True, text=True, timeout=60
        )
        watcher.join(30)
        return result

    def check_requests(
        self, *accounts: str, provoked: Collection[Answer] = (), every_rule_used: bool = True
    ) -> None:
        """Every request of these accounts allowed by their rendered RBAC, every rule they
        hold used by one of them (unless `every_rule_used` is false: a test of one part of
        a workload) and covered by no other, and no request answered with an error but those
        the test `provoked` (verb, resource with subresource, status)."""
        records = self.records()
        problems = []
        for account in accounts:
            grants = guard.grants_of(self.rendered, account)
            made = guard.requests_of(records, account)
            assert made, f"{account} made no request"
            problems += [f"{account} was refused {r}" for r in guard.refused(made, grants)]
            if every_rule_used:
                problems += [f"{account} never used {g}" for g in guard.unused(made, grants)]
            problems += [f"{account} holds twice {g}" for g in guard.redundant(grants)]
            problems += [f"{account} met {r}" for r in guard.failed(made, provoked)]
        assert not problems, "\n".join(problems)
