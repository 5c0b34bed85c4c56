"""How many project functions a template's window passes through, from the platform's
templates GET to the HPA's write (its server-side apply): one apply cycle against the fake
Kubernetes API and the fake platform, under `sys.setprofile`, counting each distinct
function of the agent's packages (and the files they live in) entered until that write is
sent.

    python -m bench.scaling_hops [--list]

Prints one JSON object: `functions` and `files` for every package, and the same for
`scheduler` alone; `--list` prints each function entered first, as `file qualified.name`.
Runs in about a second; nothing here is a test.
"""

from __future__ import annotations

import sys
import tempfile
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import FrameType
from typing import Any

import msgspec

from kube.api import KubeApi
from kube.cluster import KubeTarget
from sandbox import objects
from sandbox.kube import FakeKube
from sandbox.platform import FakePlatform
from sandbox.scaling import action, manual_template
from scheduler.kubeapi import ScalingKube
from scheduler.reconcile import Reconciler
from scheduler.store import Store
from shipper.client import ApiClient, ApiSettings
from shipper.outbox import Outbox
from shipper.records import SCALING
from shipper.token import TokenSource

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("agent", "collector", "kube", "runtime", "scheduler", "shipper")
TOKEN = "bench-token-0123456789"


def main() -> None:
    with (
        FakeKube() as kube,
        FakePlatform(token=TOKEN) as platform,
        tempfile.TemporaryDirectory() as tmp,
    ):
        kube.create(objects.namespace(name="shop"))
        kube.create(objects.deployment(name="web", namespace="shop", replicas=2))
        kube.create(objects.hpa(name="web", namespace="shop", target="web", low=2, high=5))
        now = datetime.now(UTC)
        platform.set_templates([manual_template(now, now + timedelta(hours=1))])
        platform.set_actions("t-1", [action(low=4, high=20)])
        api = ApiClient(
            base_url=platform.url,
            project_id="p-1",
            cluster_id="c-1",
            token=TokenSource(value=TOKEN),
            settings=ApiSettings(insecure_http=True),
        )
        outbox = Outbox(Path(tmp) / "queue", streams=[SCALING])
        store = Store(Path(tmp) / "queue" / "scaling-state.db")
        target = KubeTarget(server=kube.url, verify=False, token=lambda: kube.token)
        reconciler = Reconciler(
            kube=ScalingKube(KubeApi(target)),
            api=api,
            outbox=outbox[SCALING],
            store=store,
            cluster_id="c-1",
        )
        entered = _trace(reconciler, now)
        outbox.close()
        store.close()
    if "--list" in sys.argv[1:]:
        for file, function in sorted(entered):
            print(file, function)
    scheduler = {key for key in entered if key[0].startswith("scheduler/")}
    figures = {
        "functions": len(entered),
        "files": len({file for file, _ in entered}),
        "scheduler_functions": len(scheduler),
        "scheduler_files": len({file for file, _ in scheduler}),
    }
    print(msgspec.json.encode(figures).decode())


def _trace(reconciler: Reconciler, now: datetime) -> set[tuple[str, str]]:
    """The (file, function) pairs entered from the templates GET until the HPA's write."""
    entered: set[tuple[str, str]] = set()
    state = {"on": False, "done": False}

    def profile(frame: FrameType, event: str, arg: Any) -> None:
        if event != "call" or state["done"]:
            return
        code = frame.f_code
        file = _project_file(code.co_filename)
        if file is None:
            return
        if code.co_name == "get_templates" and file.startswith("shipper/"):
            state["on"] = True
        if not state["on"]:
            return
        entered.add((file, code.co_qualname))
        path = str(frame.f_locals.get("path", ""))
        writes = code.co_name in ("patch", "apply")
        if file == "kube/api.py" and writes and "horizontalpodautoscalers" in path:
            state["done"] = True

    sys.setprofile(profile)
    try:
        reconciler.apply_cycle(now)
    finally:
        sys.setprofile(None)
    if not state["done"]:
        raise SystemExit("the cycle never wrote the HPA")
    return entered


def _project_file(filename: str) -> str | None:
    try:
        relative = Path(filename).resolve().relative_to(ROOT)
    except ValueError:
        return None
    return relative.as_posix() if relative.parts[0] in PACKAGES else None


if __name__ == "__main__":
    main()
