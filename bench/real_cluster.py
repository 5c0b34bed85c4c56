"""The benchmark's synthetic cluster, loaded into a real control plane through its API.

The same generator as the fake's (`sandbox.kube.synthetic`), so both servers hold the same
cluster for a spec, with what real controllers make left to them: the Deployment
controller creates one ReplicaSet per Deployment and the ReplicaSet controller its Pods;
the Job controller creates the Pods of the CronJobs' Jobs; the endpoints controller the
Endpoints. What a kubelet and a scheduler would write is then written as they write it:
each Pod is bound to the generator's node for it (`pods/binding`) and given the
generator's status (`pods/status`: running, crash-looping, OOMKilled, pending, ...), so the
mix of healthy pods and pods in trouble is the fake's. Everything else the generator makes
is created as it is, less what a server assigns (uids, resourceVersions, timestamps,
managedFields, status, cluster IPs and node ports) and with its owners' new uids.

Two things differ from the fake on purpose: CronJobs are created suspended (no kubelet
would ever finish the Jobs their schedules start), and only the current ReplicaSet of a
Deployment exists (the real controller has no history to rebuild). The controller manager
is restarted with a higher client rate for the load (its default of 20 requests a second
would take most of an hour for 20,000 Pods), without the node lifecycle controller (no
kubelet renews the nodes' leases, so it would taint every node and evict every Pod) and
without the HPA controller (no metrics server answers it, so it would write a Warning Event
about every HPA at every period, which no real cluster does): the generator's status is
written to each Node and HPA instead, as their kubelet and controller would.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import httpx
import msgspec

from sandbox.controlplane import ControlPlane
from sandbox.kube.synthetic import SyntheticSpec, generate

Obj = dict[str, Any]

WORKERS = 16
CONTROLLER_FLAGS = (
    "--kube-api-qps=1000",
    "--kube-api-burst=2000",
    "--concurrent-deployment-syncs=20",
    "--concurrent-replicaset-syncs=20",
    "--controllers=*,-node-lifecycle-controller,-horizontal-pod-autoscaler-controller",
)
# Made by controllers on a real server: the generator's are left out.
LEFT_TO_CONTROLLERS = frozenset({"ReplicaSet", "Pod", "Endpoints"})
# Created by the server itself in every namespace; the generator's copy is a duplicate.
SERVER_MADE = frozenset({("ConfigMap", "kube-root-ca.crt"), ("ServiceAccount", "default")})
_ASSIGNED = ("uid", "resourceVersion", "creationTimestamp", "managedFields", "generation")
# Labels the Job controller sets from the Job's own uid (it refuses a selector it did not make).
_JOB_LABELS = (
    "controller-uid",
    "job-name",
    "batch.kubernetes.io/controller-uid",
    "batch.kubernetes.io/job-name",
)
PAGE = 2000
BACKGROUND_WRITES = 10
MERGE = {"Content-Type": "application/merge-patch+json"}


@dataclass
class _PodPlan:
    """What the kubelet and the scheduler would write for the pods of one owner."""

    node: str
    status: Obj


@dataclass
class Loaded:
    """What the load made, and how long each step took."""

    created: int = 0
    pods: int = 0
    seconds: dict[str, float] = field(default_factory=dict)


def _stripped(obj: Obj) -> Obj:
    meta = {k: v for k, v in obj["metadata"].items() if k not in _ASSIGNED}
    meta.pop("ownerReferences", None)
    return {k: v for k, v in obj.items() if k != "status"} | {"metadata": meta}


def _left_out(obj: Obj) -> bool:
    """Made by a controller or by the server on a real cluster."""
    kind = obj["kind"]
    return kind in LEFT_TO_CONTROLLERS or (kind, obj["metadata"]["name"]) in SERVER_MADE


def _prepared(obj: Obj, uids: dict[tuple[str, str, str], str]) -> Obj:
    """The object as a client would create it on the real server."""
    kind, meta = obj["kind"], obj["metadata"]
    created = _stripped(obj)
    spec = created.get("spec")
    if kind == "Service":
        spec = {k: v for k, v in spec.items() if k not in ("clusterIP", "clusterIPs")}
        spec["ports"] = [{k: v for k, v in p.items() if k != "nodePort"} for p in spec["ports"]]
        created["spec"] = spec
    elif kind == "CronJob":
        created["spec"] = spec | {"suspend": True}
    elif kind == "Job":
        owner = meta["ownerReferences"][0]
        uid = uids[("CronJob", meta["namespace"], owner["name"])]
        created["metadata"] = created["metadata"] | {
            "ownerReferences": [owner | {"uid": uid}],
            "labels": _without(meta.get("labels", {}), _JOB_LABELS),
        }
        template = spec["template"]
        labels = _without(template["metadata"].get("labels", {}), _JOB_LABELS)
        created["spec"] = {k: v for k, v in spec.items() if k != "selector"} | {
            "template": template | {"metadata": template["metadata"] | {"labels": labels}}
        }
    return created


def _without(labels: Obj, names: Iterable[str]) -> Obj:
    return {k: v for k, v in labels.items() if k not in names}


class _Writer:
    """Requests in parallel on a pool of keep-alive connections, failing loudly."""

    def __init__(self, plane: ControlPlane) -> None:
        self.plane = plane
        self._clients = [plane.client(timeout=120) for _ in range(WORKERS)]
        self._pool = ThreadPoolExecutor(WORKERS)

    def run(self, calls: Iterable[Callable[[httpx.Client], None]]) -> int:
        done = 0
        futures = []
        for index, call in enumerate(calls):
            client = self._clients[index % WORKERS]
            futures.append(self._pool.submit(call, client))
        for future in futures:
            future.result()
            done += 1
        return done

    def close(self) -> None:
        self._pool.shutdown()
        for client in self._clients:
            client.close()


def _checked(answer: httpx.Response, *, allow: tuple[int, ...] = ()) -> httpx.Response:
    if answer.status_code >= 400 and answer.status_code not in allow:
        raise RuntimeError(
            f"{answer.request.method} {answer.request.url.path}: {answer.status_code} "
            f"{answer.text[:300]}"
        )
    return answer


def load(plane: ControlPlane, spec: SyntheticSpec, *, report: Callable[[str], None]) -> Loaded:
    """Fill the control plane with the spec's cluster; returns once the controllers are done."""
    loaded = Loaded()
    started = time.monotonic()
    plane.restart_controller_manager(*CONTROLLER_FLAGS)
    plan = _plan(spec)
    writer = _Writer(plane)
    try:
        uids: dict[tuple[str, str, str], str] = {}
        for phase in sorted(plan.phases):
            loaded.created += writer.run(_create(obj, uids) for obj in plan.phases[phase])
            report(f"created {loaded.created} objects")
        writer.run(_status_patch(path, status) for path, status in plan.statuses)
        loaded.seconds["create"] = time.monotonic() - started
        wanted = sum(len(p) for p in plan.pods.values()) + len(plan.job_pods)
        pods = _wait_for_pods(plane, wanted, report)
        loaded.seconds["controllers"] = time.monotonic() - started
        loaded.pods = writer.run(_kubelet_calls(pods, plan))
        report(f"bound and wrote the status of {loaded.pods} pods")
        loaded.seconds["kubelet"] = time.monotonic() - started
        _wait_quiet(plane, report)
        loaded.seconds["settled"] = time.monotonic() - started
    finally:
        writer.close()
    return loaded


@dataclass
class _Plan:
    """The generator's cluster sorted for the load."""

    phases: dict[int, list[Obj]] = field(default_factory=lambda: defaultdict(list))
    # The generator's pods of each Deployment's current ReplicaSet, and of each Job.
    pods: dict[tuple[str, str], list[_PodPlan]] = field(default_factory=lambda: defaultdict(list))
    job_pods: dict[tuple[str, str], _PodPlan] = field(default_factory=dict)
    # Status subresources to write once the objects exist (Nodes, HPAs).
    statuses: list[tuple[str, Obj]] = field(default_factory=list)


def _plan(spec: SyntheticSpec) -> _Plan:
    plan = _Plan()
    owners: dict[tuple[str, str], str] = {}  # a current ReplicaSet -> its Deployment
    for shared in generate(spec):
        # The generator shares pre-encoded parts (msgspec.Raw) between objects: plain dicts.
        obj = msgspec.json.decode(msgspec.json.encode(shared))
        kind, meta = obj["kind"], obj["metadata"]
        if kind == "ReplicaSet" and obj["spec"].get("replicas"):
            owners[(meta["namespace"], meta["name"])] = meta["ownerReferences"][0]["name"]
        elif kind == "Pod":
            owner = meta["ownerReferences"][0]
            pod = _PodPlan(node=obj["spec"].get("nodeName", ""), status=obj["status"])
            if owner["kind"] == "Job":
                plan.job_pods[(meta["namespace"], owner["name"])] = pod
            elif (meta["namespace"], owner["name"]) in owners:
                deployment = owners[(meta["namespace"], owner["name"])]
                plan.pods[(meta["namespace"], deployment)].append(pod)
        if _left_out(obj):
            continue
        if kind in ("Node", "HorizontalPodAutoscaler") and obj.get("status"):
            plan.statuses.append((_collection(obj) + f"/{meta['name']}/status", obj["status"]))
        # Namespaces and Nodes first, CronJobs before their Jobs (which need their uids).
        plan.phases[{"Namespace": 0, "Node": 0, "CronJob": 1, "Job": 3}.get(kind, 2)].append(obj)
    return plan


def _create(obj: Obj, uids: dict[tuple[str, str, str], str]) -> Callable[[httpx.Client], None]:
    def create(client: httpx.Client) -> None:
        prepared = _prepared(obj, uids)
        meta = prepared["metadata"]
        answer = _checked(client.post(_collection(prepared), json=prepared), allow=(409,))
        if answer.status_code != 409:
            made = answer.json()["metadata"]
            uids[(prepared["kind"], meta.get("namespace", ""), meta["name"])] = made["uid"]

    return create


def _status_patch(path: str, status: Obj) -> Callable[[httpx.Client], None]:
    def write(client: httpx.Client) -> None:
        _checked(client.patch(path, content=msgspec.json.encode({"status": status}), headers=MERGE))

    return write


_PATHS: dict[str, str] = {}


def _collection(obj: Obj) -> str:
    """The collection path of an object of a kind the generator makes."""
    api_version, kind, meta = obj["apiVersion"], obj["kind"], obj["metadata"]
    base = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
    plural = _PATHS.get(kind) or _plural(kind)
    namespace = meta.get("namespace")
    return f"{base}/namespaces/{namespace}/{plural}" if namespace else f"{base}/{plural}"


def _plural(kind: str) -> str:
    special = {"Endpoints": "endpoints", "NetworkPolicy": "networkpolicies", "Ingress": "ingresses"}
    plural = special.get(kind) or (kind.lower() + ("es" if kind.endswith("s") else "s"))
    _PATHS[kind] = plural
    return plural


class _Meta(msgspec.Struct):
    name: str
    namespace: str = ""
    owner_references: list[dict[str, Any]] = msgspec.field(
        default_factory=list, name="ownerReferences"
    )
    labels: dict[str, str] = msgspec.field(default_factory=dict)


class _Container(msgspec.Struct):
    name: str


class _Spec(msgspec.Struct, rename="camel"):
    containers: list[_Container]
    node_name: str = ""


class _Pod(msgspec.Struct):
    metadata: _Meta
    spec: _Spec


class _ListMeta(msgspec.Struct):
    continue_: str = msgspec.field(default="", name="continue")


class _PodList(msgspec.Struct):
    metadata: _ListMeta
    items: list[_Pod]


def _all_pods(plane: ControlPlane) -> list[_Pod]:
    found: list[_Pod] = []
    params = {"limit": str(PAGE)}
    with plane.client(timeout=120) as client:
        while True:
            page = msgspec.json.decode(
                _checked(client.get("/api/v1/pods", params=params)).content, type=_PodList
            )
            found += page.items
            if not page.metadata.continue_:
                return found
            params["continue"] = page.metadata.continue_


def _wait_for_pods(plane: ControlPlane, wanted: int, report: Callable[[str], None]) -> list[_Pod]:
    deadline = time.monotonic() + 1800
    with plane.client() as client:
        while (made := _pod_count(client)) < wanted:
            report(f"controllers made {made} of {wanted} pods")
            if time.monotonic() > deadline:
                raise RuntimeError(f"the controllers made {made} of {wanted} pods in 30 min")
            time.sleep(5)
    return [p for p in _all_pods(plane) if p.metadata.namespace != "kube-system"]


def _pod_count(client: httpx.Client) -> int:
    """How many pods exist, from a one-item page (the list's remaining count; a full list
    every few seconds would cost the server more than the controllers' work)."""
    meta = _checked(client.get("/api/v1/pods", params={"limit": "1"})).json()["metadata"]
    return int(meta.get("remainingItemCount", 0)) + 1


def _deployment_of(pod: _Pod) -> str | None:
    """The Deployment a ReplicaSet's pod belongs to: the ReplicaSet's name less its hash."""
    for owner in pod.metadata.owner_references:
        if owner["kind"] == "ReplicaSet":
            hash_ = pod.metadata.labels.get("pod-template-hash", "")
            name = str(owner["name"])
            return name[: -len(hash_) - 1] if hash_ and name.endswith(hash_) else name
    return None


def _kubelet_calls(pods: list[_Pod], plan: _Plan) -> Iterable[Callable[[httpx.Client], None]]:
    taken: dict[tuple[str, str], int] = defaultdict(int)
    for pod in pods:
        meta = pod.metadata
        deployment = _deployment_of(pod)
        if deployment is not None:
            owned = plan.pods.get((meta.namespace, deployment), [])
            index = taken[(meta.namespace, deployment)]
            taken[(meta.namespace, deployment)] += 1
            if index >= len(owned):
                continue  # more replicas than the generator made pods: left Pending
            yield _kubelet(pod, owned[index])
        else:
            jobs = [o["name"] for o in meta.owner_references if o["kind"] == "Job"]
            if jobs and (meta.namespace, jobs[0]) in plan.job_pods:
                yield _kubelet(pod, plan.job_pods[(meta.namespace, jobs[0])])


def _kubelet(pod: _Pod, plan: _PodPlan) -> Callable[[httpx.Client], None]:
    """Bind the pod as the scheduler would, then write its status as the kubelet would (the
    generator's status, for the containers the pod really has)."""

    def write(client: httpx.Client) -> None:
        meta = pod.metadata
        base = f"/api/v1/namespaces/{meta.namespace}/pods/{meta.name}"
        if plan.node and not pod.spec.node_name:
            binding = {
                "apiVersion": "v1",
                "kind": "Binding",
                "metadata": {"name": meta.name},
                "target": {"apiVersion": "v1", "kind": "Node", "name": plan.node},
            }
            _checked(client.post(f"{base}/binding", json=binding))
        status = dict(plan.status)
        names = [c.name for c in pod.spec.containers]
        given = {s["name"]: s for s in status.get("containerStatuses", [])}
        if given:
            status["containerStatuses"] = [given[n] | {"name": n} for n in names if n in given]
        body = msgspec.json.encode({"status": status})
        _checked(client.patch(f"{base}/status", content=body, headers=MERGE))

    return write


def _wait_quiet(plane: ControlPlane, report: Callable[[str], None], window: float = 10.0) -> None:
    """Until the controllers caught up with the pods' statuses: at most `BACKGROUND_WRITES`
    writes in the last `window` seconds (the API server renews its own Leases all along)."""
    seen: list[tuple[float, int]] = []
    deadline = time.monotonic() + 900
    with plane.client() as client:
        while time.monotonic() < deadline:
            answer = _checked(client.get("/api/v1/namespaces", params={"limit": "1"}))
            now, version = time.monotonic(), int(answer.json()["metadata"]["resourceVersion"])
            seen.append((now, version))
            older = [v for t, v in seen if t <= now - window]
            if older and version - older[-1] <= BACKGROUND_WRITES:
                return
            if older:
                report(f"the cluster still changes: {version - older[-1]} writes in {window:g} s")
            time.sleep(1)
    raise RuntimeError("the cluster did not settle within 15 min")
