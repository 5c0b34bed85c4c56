"""A large, realistic synthetic cluster for benchmarks (and a small one for tests).

The objects look like what a real EKS cluster returns, because the agent's costs depend on
it: Deployments of about 10 KB (containers with env values, resources, probes, volumes,
managedFields, a `kubectl.kubernetes.io/last-applied-configuration` annotation; some Helm-
or Argo CD-managed), ReplicaSets (one or two per Deployment) and their Pods (managedFields,
container statuses; a few per cent in CrashLoopBackOff, OOMKilled, ImagePullBackOff or
Pending, and some as only Warning Events tell: waiting as ContainerCreating while their
sandbox or a volume fails, or running with a failing readiness probe), Nodes with labels,
conditions, nodeInfo and image lists, CronJobs with some Jobs (succeeded, failed, running)
and their Pods and logs, Services with Endpoints, HPAs, Ingresses, NetworkPolicies, RBAC
objects, ConfigMaps, ServiceAccounts, Secrets (Helm release Secrets among them), node
Leases and the Warning Events kubelets, the scheduler and the ReplicaSet controller write
(a few Deployments want a replica more than their namespace's quota lets them create).

Generation is deterministic for a seed and quick: what real clusters repeat (a pod
template's spec, managedFields, conditions, probes) is built once and shared between
objects, which is safe because the store keeps only the encoded bytes. `populate()`
streams the objects into a `FakeKube` in batches, so the peak memory is the stored bytes,
not Python dicts. Simplifications: the pods of one ReplicaSet share one service-account
token volume name, and all timestamps fall in the last 300 days.

`SyntheticSpec(heavy=True)` adds what strains a collector's memory rather than its object
count: a `monitoring` namespace of Helm releases of a kube-prometheus-stack-like chart, each
with many revisions whose Secrets come near the 1 MiB object limit (Grafana dashboards with
seeded sample data, in the chart's templates and in the manifest, compressing about 5x);
Deployment pods carrying a ~200 KB `kubectl.kubernetes.io/last-applied-configuration`; and
a few Deployments of 100 containers. A release's revisions share their JSON but for a tail,
so its gzip is computed once and each revision only finishes a copy of the compressor.
"""

from __future__ import annotations

import base64
import gc
import hashlib
import math
import random
import time
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import msgspec
import yaml

from sandbox import objects

if TYPE_CHECKING:
    from sandbox.kube.fake import FakeKube

Obj = dict[str, Any]


def _words(text: str) -> tuple[str, ...]:
    return tuple(text.split())


_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
_PAIRS = [a + b for a in _ALPHABET for b in _ALPHABET]
_TEAMS = _words(
    "payments checkout catalog search identity billing orders inventory shipping pricing "
    "reviews ledger fraud notify media growth ads data ml platform infra support crm "
    "loyalty partner mobile web gateway audit risk tax reporting"
)
_ENVS = _words("prod staging dev qa sandbox")
_NOUNS = _words(
    "cart order user account invoice product stock price coupon session token profile "
    "report export import email sms push image video feed ranking quote refund wallet "
    "ledger rate review shipment label route tracker"
)
_ROLES = _words("api worker web consumer gateway scheduler sync indexer")
_TASKS = _words("cleanup report backup sync reindex digest rollup expire")
_SCHEDULES = (
    "*/5 * * * *",
    "0 * * * *",
    "0 2 * * *",
    "30 3 * * 1",
    "*/15 * * * *",
    "0 0 1 * *",
    "15 */6 * * *",
    "0 9 * * 1-5",
)
_REGISTRIES = _words(
    "123456789012.dkr.ecr.us-east-1.amazonaws.com ghcr.io/acme docker.io/acme quay.io/acme"
)
_ZONES = _words("us-east-1a us-east-1b us-east-1c")
_INSTANCE_TYPES = (
    ("m6i.2xlarge", 8, 32),
    ("m6i.4xlarge", 16, 64),
    ("c6i.2xlarge", 8, 16),
    ("r6i.xlarge", 4, 32),
)
_SIDECARS = (
    ("envoy", "docker.io/envoyproxy/envoy:v1.29.4", ["--config-path", "/etc/envoy/envoy.yaml"]),
    ("fluent-bit", "cr.fluentbit.io/fluent/fluent-bit:3.0.7", ["-c", "/fluent-bit/etc/fb.conf"]),
    ("cloud-sql-proxy", "gcr.io/cloud-sql-connectors/cloud-sql-proxy:2.11.0", ["--port=5432"]),
)

# Shared, never mutated: the store only encodes them.
_DEFAULTS = {
    "terminationMessagePath": "/dev/termination-log",
    "terminationMessagePolicy": "File",
    "imagePullPolicy": "IfNotPresent",
}
_PORTS = [
    {"name": "http", "containerPort": 8080, "protocol": "TCP"},
    {"name": "metrics", "containerPort": 9090, "protocol": "TCP"},
]
_PROBE_TIMES = {"timeoutSeconds": 2, "periodSeconds": 10, "successThreshold": 1}
_LIVENESS = {
    "httpGet": {"path": "/healthz", "port": "http", "scheme": "HTTP"},
    "initialDelaySeconds": 10,
    "failureThreshold": 3,
    **_PROBE_TIMES,
}
_READINESS = {
    "httpGet": {"path": "/ready", "port": "http", "scheme": "HTTP"},
    "failureThreshold": 3,
    **_PROBE_TIMES,
}
_CONTAINER_SECURITY = {
    "allowPrivilegeEscalation": False,
    "capabilities": {"drop": ["ALL"]},
    "readOnlyRootFilesystem": True,
    "runAsNonRoot": True,
}
_MOUNTS = [
    {"name": "config", "mountPath": "/etc/app", "readOnly": True},
    {"name": "tmp", "mountPath": "/tmp"},
]
_VOLUMES = [
    {"name": "config", "configMap": {"name": "app-config", "defaultMode": 420}},
    {"name": "tmp", "emptyDir": {}},
]
_TOLERATIONS = [
    {
        "key": f"node.kubernetes.io/{taint}",
        "operator": "Exists",
        "effect": "NoExecute",
        "tolerationSeconds": 300,
    }
    for taint in ("not-ready", "unreachable")
]
_NAMESPACE_FIELD = {"apiVersion": "v1", "fieldPath": "metadata.namespace"}
_TOKEN_SOURCES = [
    {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
    {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
    {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": _NAMESPACE_FIELD}]}},
]
_TOKEN_MOUNT_PATH = "/var/run/secrets/kubernetes.io/serviceaccount"
# Pod troubles only Warning Events tell (the containers wait as ContainerCreating, or run
# unready), and how often a Deployment is scaled up past its namespace's quota.
SANDBOX_FAILED = "FailedCreatePodSandBox"
MOUNT_FAILED = "FailedMount"
PROBE_FAILING = "Unhealthy"
QUOTA_REFUSED_EVERY = 499
_POD_CONDITIONS = (
    "PodReadyToStartContainers",
    "Initialized",
    "Ready",
    "ContainersReady",
    "PodScheduled",
)
_NODE_CONDITIONS = (
    ("MemoryPressure", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
    ("DiskPressure", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
    ("PIDPressure", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
)
_HPA_CONDITIONS = (
    ("AbleToScale", "True", "ReadyForNewScale", "recommended size matches current size"),
    (
        "ScalingActive",
        "True",
        "ValidMetricFound",
        "the HPA was able to successfully calculate a replica count from cpu resource utilization "
        "(percentage of request)",
    ),
    (
        "ScalingLimited",
        "False",
        "DesiredWithinRange",
        "the desired count is within the acceptable range",
    ),
)
_HPA_BEHAVIOR = {
    "scaleUp": {
        "stabilizationWindowSeconds": 0,
        "selectPolicy": "Max",
        "policies": [
            {"type": "Pods", "value": 4, "periodSeconds": 15},
            {"type": "Percent", "value": 100, "periodSeconds": 15},
        ],
    },
    "scaleDown": {
        "stabilizationWindowSeconds": 300,
        "selectPolicy": "Max",
        "policies": [{"type": "Percent", "value": 100, "periodSeconds": 15}],
    },
}


_TIMES_OF_DAY = [f"{s // 3600:02d}:{s // 60 % 60:02d}:{s % 60:02d}Z" for s in range(86400)]


def _raw(value: Any) -> msgspec.Raw:
    """A fragment encoded once and spliced into every object that shares it."""
    return msgspec.Raw(msgspec.json.encode(value))


def _frozen(obj: Obj) -> Obj:
    """A copy of `obj` whose nested values are pre-encoded (scalars stay selectable)."""
    return {k: _raw(v) if isinstance(v, dict | list) else v for k, v in obj.items()}


def _env(name: str, value: str) -> Obj:
    return {"name": name, "value": value}


def _env_from(name: str, source: str, ref: Obj) -> Obj:
    return {"name": name, "valueFrom": {source: ref}}


def _field_env(name: str, path: str) -> Obj:
    return _env_from(name, "fieldRef", {"apiVersion": "v1", "fieldPath": path})


def _owner(api_version: str, kind: str, name: str, uid: str) -> list[Obj]:
    # Controllers block their owner's foreground deletion until they are gone.
    return objects.controller_reference(
        api_version=api_version, kind=kind, name=name, uid=uid, block_deletion=True
    )


def _condition(kind: str, status: str, when: str, reason: str = "", message: str = "") -> Obj:
    condition = {"type": kind, "status": status, "lastTransitionTime": when}
    if reason:
        condition["reason"] = reason
    if message:
        condition["message"] = message
    return condition


@dataclass(frozen=True)
class SyntheticSpec:
    """Sizes of the synthetic cluster; None means "derived from the others"."""

    namespaces: int = 1_000  # application namespaces (the 4 system ones come on top)
    deployments: int = 10_000
    pods: int = 50_000  # Deployment pods; CronJob pods come on top
    nodes: int = 500
    cronjobs: int = 1_000
    services: int = 2_000
    jobs: int | None = None  # default: cronjobs // 20
    hpas: int | None = None  # default: deployments // 10
    helm_releases: int | None = None  # default: deployments // 50
    seed: int = 1
    # Heavy objects, only with `heavy` (else none of them): Helm releases of a monitoring
    # stack in one namespace, each revision a Secret near the 1 MiB object limit; Deployment
    # pods with a ~200 KB last-applied-configuration annotation; Deployments of 100
    # containers. The releases are one namespace's worth whatever the other sizes.
    heavy: bool = False
    heavy_helm_releases: int | None = None  # default: 40
    heavy_helm_revisions: int = 10  # Secrets per heavy release
    heavy_pods: int | None = None  # default: pods // 100 (one per Deployment at most)
    wide_deployments: int | None = None  # default: min(5, deployments)

    def derived(self, name: str) -> int:
        if name in _HEAVY_SIZES and not self.heavy:
            return 0
        value = getattr(self, name)
        if value is not None:
            return int(value)
        return {
            "jobs": self.cronjobs // 20,
            "hpas": self.deployments // 10,
            "helm_releases": self.deployments // 50,
            "heavy_helm_releases": 40,
            "heavy_pods": self.pods // 100,
            "wide_deployments": min(5, self.deployments),
        }[name]

    def helm_release_secrets(self) -> int:
        """Helm release Secrets, one per revision (each a `helm_release` record)."""
        light = min(self.derived("helm_releases"), self.deployments)
        return light + self.derived("heavy_helm_releases") * self.heavy_helm_revisions


_HEAVY_SIZES = frozenset({"heavy_helm_releases", "heavy_pods", "wide_deployments"})


@dataclass(slots=True)
class _Deploy:
    index: int
    namespace: str
    name: str
    uid: str
    replicas: int
    labels: dict[str, str]
    image: str
    created: int
    helm: bool
    wide: bool  # WIDE_CONTAINERS containers
    pods: list[tuple[str, str, str, str]] = field(default_factory=list)  # name, uid, ip, node

    @property
    def quota_refused(self) -> bool:
        """Scaled up past its namespace's quota: one replica more is wanted than exists, and
        its ReplicaSet records FailedCreate."""
        return self.index % QUOTA_REFUSED_EVERY == QUOTA_REFUSED_EVERY - 1

    @property
    def wanted(self) -> int:
        return self.replicas + 1 if self.quota_refused else self.replicas

    @property
    def team(self) -> str:
        return self.namespace.split("-")[0]

    @property
    def sidecar(self) -> int | None:
        return (self.index // 3) % len(_SIDECARS) if self.index % 3 == 0 else None

    @property
    def variant(self) -> tuple[Any, ...]:
        # Everything that changes the set of fields (not their values): managedFields key.
        return (
            self.helm,
            self.index % 3 == 1,
            self.index % 4 == 0,
            self.sidecar,
            self.index % 5 == 0,
            self.wide,
        )


class _Builder:
    def __init__(self, spec: SyntheticSpec) -> None:
        self.spec = spec
        self.rng = random.Random(spec.seed)
        self.now = int(time.time())
        self.namespaces: list[str] = []
        self.nodes: list[tuple[str, str]] = []  # name, ip
        self.deploys: list[_Deploy] = []
        self.failed_job_pods: list[tuple[str, str, str]] = []  # namespace, pod, container
        self.troubled_pods: list[tuple[str, str, str, str, str]] = []  # ns, pod, uid, node, why
        self.refused_replicasets: list[tuple[str, str, str]] = []  # ns, name, uid
        self._pod_serial = 0
        self._days: dict[int, str] = {}
        self._fields: dict[tuple[Any, ...], msgspec.Raw] = {}
        self._replicasets: dict[tuple[int, int], tuple[str, str]] = {}
        # The first pod of every `_heavy_stride`-th Deployment is a heavy one, up to
        # `_heavy_pods`: a stride prime to the namespace count spreads them over namespaces.
        self._heavy_pods = spec.derived("heavy_pods")
        self._heavy_stride = max(1, spec.deployments // max(1, self._heavy_pods))
        while math.gcd(self._heavy_stride, max(1, spec.namespaces)) != 1:
            self._heavy_stride -= 1
        self._applied_spec: msgspec.Raw | None = None

    # small helpers ------------------------------------------------------------------------

    def uid(self) -> str:
        v = f"{self.rng.getrandbits(128):032x}"
        return f"{v[:8]}-{v[8:12]}-4{v[13:16]}-a{v[17:20]}-{v[20:]}"

    def suffix(self) -> str:
        """Five characters, like the random part of a generated name."""
        r = self.rng.getrandbits(32)
        return _PAIRS[r % 729] + _PAIRS[r // 729 % 729] + _ALPHABET[r // 531441 % 27]

    def ts(self, seconds: int) -> str:
        day, rest = divmod(seconds, 86400)
        date = self._days.get(day)
        if date is None:
            date = self._days[day] = time.strftime("%Y-%m-%dT", time.gmtime(day * 86400))
        return date + _TIMES_OF_DAY[rest]

    def ago(self, low: int, high: int) -> int:
        return self.now - self.rng.randint(low, high)

    def digest(self) -> str:
        return f"sha256:{self.rng.getrandbits(256):064x}"

    def managed(
        self,
        key: tuple[Any, ...],
        manager: str,
        api_version: str,
        when: str,
        fragment: Obj,
        subresource: str | None = None,
    ) -> Obj:
        """A managedFields entry; its fieldsV1 is computed once per shape `key`."""
        fields = self._fields.get(key)
        if fields is None:
            fields = self._fields[key] = _raw(fields_v1(fragment))
        entry: Obj = {
            "manager": manager,
            "operation": "Update",
            "apiVersion": api_version,
            "time": when,
            "fieldsType": "FieldsV1",
            "fieldsV1": fields,
        }
        if subresource:
            entry["subresource"] = subresource
        return entry

    def replicaset_identity(self, d: _Deploy, revision: int) -> tuple[str, str]:
        """(pod-template-hash, uid) of a Deployment's ReplicaSet for a revision."""
        key = (d.index, revision)
        identity = self._replicasets.get(key)
        if identity is None:
            identity = self._replicasets[key] = (self.suffix() + self.suffix(), self.uid())
        return identity

    # namespaces, nodes, leases -------------------------------------------------------------

    def namespace_objects(self) -> Iterator[Obj]:
        taken: set[str] = set()
        for i in range(self.spec.namespaces):
            name = f"{_TEAMS[i % len(_TEAMS)]}-{_ENVS[(i // len(_TEAMS)) % len(_ENVS)]}"
            self.namespaces.append(_unique(name, taken))
        system = ["default", "kube-system", "kube-public", "kube-node-lease"]
        if self.spec.derived("heavy_helm_releases"):
            system.append(HEAVY_NAMESPACE)
        for name in system + self.namespaces:
            labels = {"kubernetes.io/metadata.name": name}
            if name not in system:
                labels |= {"team": name.split("-")[0], "env": name.split("-")[1]}
            created = self.ts(self.ago(86400 * 30, 86400 * 300))
            yield {
                "apiVersion": "v1",
                "kind": "Namespace",
                "metadata": {"name": name, "creationTimestamp": created, "labels": labels},
                "spec": {"finalizers": ["kubernetes"]},
                "status": {"phase": "Active"},
            }

    def node_objects(self) -> Iterator[Obj]:
        images = []
        for i in range(24):
            repo = f"{_REGISTRIES[i % 4]}/{_NOUNS[i % len(_NOUNS)]}-{_ROLES[i % 8]}"
            names = [f"{repo}@{self.digest()}", f"{repo}:1.{i}.0"]
            images.append({"names": names, "sizeBytes": self.rng.randint(5_000_000, 900_000_000)})
        for i in range(self.spec.nodes):
            zone = _ZONES[i % len(_ZONES)]
            ip = f"10.0.{(i >> 8) & 255}.{i & 255}"
            name = f"ip-10-0-{(i >> 8) & 255}-{i & 255}.ec2.internal"
            self.nodes.append((name, ip))
            itype, cpus, gib = _INSTANCE_TYPES[i % len(_INSTANCE_TYPES)]
            created = self.ago(3600, 86400 * 60)
            yield {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {
                    "name": name,
                    "creationTimestamp": self.ts(created),
                    "labels": self._node_labels(name, zone, itype, i),
                    "annotations": {
                        "alpha.kubernetes.io/provided-node-ip": ip,
                        "csi.volume.kubernetes.io/nodeid": f'{{"ebs.csi.aws.com":"i-0{i:016x}"}}',
                        "node.alpha.kubernetes.io/ttl": "0",
                        "volumes.kubernetes.io/controller-managed-attach-detach": "true",
                    },
                },
                "spec": {"providerID": f"aws:///{zone}/i-0{i:016x}"}
                | (
                    {"taints": [{"key": "dedicated", "value": "batch", "effect": "NoSchedule"}]}
                    if i % 25 == 0
                    else {}
                ),
                "status": self._node_status(name, ip, cpus, gib, created, ready=i % 100 != 37)
                | {"images": images},
            }

    @staticmethod
    def _node_labels(name: str, zone: str, itype: str, i: int) -> dict[str, str]:
        return {
            "beta.kubernetes.io/arch": "amd64",
            "beta.kubernetes.io/instance-type": itype,
            "beta.kubernetes.io/os": "linux",
            "eks.amazonaws.com/capacityType": "SPOT" if i % 4 == 0 else "ON_DEMAND",
            "eks.amazonaws.com/nodegroup": f"ng-{itype.split('.')[0]}-{zone[-1]}",
            "eks.amazonaws.com/nodegroup-image": "ami-0c1a2b3c4d5e6f789",
            "failure-domain.beta.kubernetes.io/region": "us-east-1",
            "failure-domain.beta.kubernetes.io/zone": zone,
            "k8s.io/cloud-provider-aws": "a1b2c3d4e5f60718293a4b5c6d7e8f90",
            "kubernetes.io/arch": "amd64",
            "kubernetes.io/hostname": name,
            "kubernetes.io/os": "linux",
            "node.kubernetes.io/instance-type": itype,
            "topology.ebs.csi.aws.com/zone": zone,
            "topology.kubernetes.io/region": "us-east-1",
            "topology.kubernetes.io/zone": zone,
        }

    def _node_status(
        self, name: str, ip: str, cpus: int, gib: int, created: int, *, ready: bool
    ) -> Obj:
        heartbeat = self.ts(self.now - self.rng.randint(0, 40))
        since = self.ts(created + 30)
        conditions = [
            _condition(kind, "False", since, reason, message) | {"lastHeartbeatTime": heartbeat}
            for kind, reason, message in _NODE_CONDITIONS
        ]
        if ready:
            last = _condition(
                "Ready", "True", since, "KubeletReady", "kubelet is posting ready status"
            )
        else:
            last = _condition(
                "Ready",
                "Unknown",
                heartbeat,
                "NodeStatusUnknown",
                "Kubelet stopped posting node status.",
            )
        conditions.append(last | {"lastHeartbeatTime": heartbeat})
        memory = gib * 1024 * 1024
        return {
            "capacity": {
                "cpu": str(cpus),
                "ephemeral-storage": "104845292Ki",
                "hugepages-1Gi": "0",
                "hugepages-2Mi": "0",
                "memory": f"{memory - 400_000}Ki",
                "pods": "58",
            },
            "allocatable": {
                "cpu": f"{cpus * 1000 - 90}m",
                "ephemeral-storage": "95551679124",
                "hugepages-1Gi": "0",
                "hugepages-2Mi": "0",
                "memory": f"{memory - 1_200_000}Ki",
                "pods": "58",
            },
            "conditions": conditions,
            "addresses": [
                {"type": "InternalIP", "address": ip},
                {"type": "InternalDNS", "address": name},
                {"type": "Hostname", "address": name},
            ],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": {
                "machineID": f"{self.rng.getrandbits(128):032x}",
                "systemUUID": f"ec2{self.rng.getrandbits(116):029x}",
                "bootID": self.uid(),
                "kernelVersion": "5.10.219-208.866.amzn2.x86_64",
                "osImage": "Amazon Linux 2",
                "containerRuntimeVersion": "containerd://1.7.11",
                "kubeletVersion": "v1.30.2-eks-1552ad0",
                "kubeProxyVersion": "v1.30.2-eks-1552ad0",
                "operatingSystem": "linux",
                "architecture": "amd64",
            },
        }

    def lease_objects(self) -> Iterator[Obj]:
        for name, _ in self.nodes:
            renewed = self.ts(self.now - self.rng.randint(0, 10))[:-1] + ".000000Z"
            yield {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {
                    "name": name,
                    "namespace": "kube-node-lease",
                    "ownerReferences": [
                        {"apiVersion": "v1", "kind": "Node", "name": name, "uid": self.uid()}
                    ],
                },
                "spec": {"holderIdentity": name, "leaseDurationSeconds": 40, "renewTime": renewed},
            }

    # deployments, replicasets, pods --------------------------------------------------------

    def _replica_counts(self) -> list[int]:
        count, pods = self.spec.deployments, self.spec.pods
        if not count:
            return []
        base, extra = divmod(pods, count)
        counts = [base + (1 if i < extra else 0) for i in range(count)]
        for i in range(0, count - 1, 2):  # vary the sizes, keep the total exact
            delta = self.rng.randint(0, max(0, min(counts[i + 1] - 1, 4)))
            counts[i] += delta
            counts[i + 1] -= delta
        return counts

    def _main_container(self, d: _Deploy, rng: random.Random) -> Obj:
        team, namespace = d.team, d.namespace
        memory = rng.choice(("128Mi", "256Mi", "512Mi", "1Gi"))
        cpu = rng.choice(("100m", "250m", "500m", "1"))
        env = [
            _env("LOG_LEVEL", rng.choice(("info", "debug", "warn"))),
            _env("PORT", "8080"),
            _env("DATABASE_HOST", f"{team}-db.{namespace}.svc.cluster.local"),
            _env("REDIS_URL", f"redis://{team}-cache.{namespace}:6379/0"),
            _env("OTEL_EXPORTER_OTLP_ENDPOINT", "http://otel-collector.observability:4317"),
            _env("PAYMENT_API_KEY", f"sk_live_{rng.getrandbits(96):024x}"),
            _env_from(
                "DATABASE_PASSWORD", "secretKeyRef", {"name": f"{team}-db", "key": "password"}
            ),
            _env_from("CACHE_TTL", "configMapKeyRef", {"name": "app-config", "key": "cache_ttl"}),
            _field_env("POD_NAME", "metadata.name"),
            _field_env("POD_NAMESPACE", "metadata.namespace"),
        ]
        return {
            "name": "app",
            "image": d.image,
            "ports": _PORTS,
            "envFrom": [{"configMapRef": {"name": "app-config"}}],
            "env": env,
            "resources": {
                "limits": {"cpu": "2", "memory": memory},
                "requests": {"cpu": cpu, "memory": memory},
            },
            "volumeMounts": _MOUNTS,
            "livenessProbe": _LIVENESS,
            "readinessProbe": _READINESS,
            **_DEFAULTS,
            "securityContext": _CONTAINER_SECURITY,
        }

    def _template(self, d: _Deploy) -> Obj:
        """The Deployment's pod template; the same every time it is asked for (the
        ReplicaSets and Pods are generated later from it)."""
        rng = random.Random(self.spec.seed * 1_000_003 + d.index)
        containers = [self._main_container(d, rng)]
        if d.sidecar is not None:
            name, image, args = _SIDECARS[d.sidecar]
            resources = {"requests": {"cpu": "50m", "memory": "64Mi"}}
            containers.append(
                {"name": name, "image": image, "args": args, "resources": resources, **_DEFAULTS}
            )
        if d.wide:
            containers += [_worker(d.image, n) for n in range(len(containers), WIDE_CONTAINERS)]
        spec: Obj = {
            "volumes": _VOLUMES,
            "containers": containers,
            "restartPolicy": "Always",
            "terminationGracePeriodSeconds": 30,
            "dnsPolicy": "ClusterFirst",
            "serviceAccountName": "app",
            "serviceAccount": "app",
            "securityContext": {"runAsUser": 10001, "fsGroup": 10001},
            "affinity": {
                "podAntiAffinity": {
                    "preferredDuringSchedulingIgnoredDuringExecution": [
                        {
                            "weight": 100,
                            "podAffinityTerm": {
                                "labelSelector": {"matchLabels": {"app": d.name}},
                                "topologyKey": "kubernetes.io/hostname",
                            },
                        },
                    ]
                }
            },
            "schedulerName": "default-scheduler",
        }
        if d.index % 5 == 0:
            spec["initContainers"] = [
                {
                    "name": "migrate",
                    "image": d.image,
                    "command": ["/app/bin/migrate"],
                    "args": ["--database-url", "$(DATABASE_URL)", "up"],
                    "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}},
                    **_DEFAULTS,
                }
            ]
        annotations = {"prometheus.io/scrape": "true", "prometheus.io/port": "9090"}
        return {"metadata": {"labels": d.labels, "annotations": annotations}, "spec": spec}

    def deployment_objects(self) -> Iterator[Obj]:
        helm = self.spec.derived("helm_releases")
        first_wide = self.spec.deployments - self.spec.derived("wide_deployments")
        taken: dict[str, set[str]] = {}
        for i, replicas in enumerate(self._replica_counts()):
            namespace = self.namespaces[i % len(self.namespaces)]
            noun, role = _NOUNS[(i * 7) % len(_NOUNS)], _ROLES[(i // 3) % len(_ROLES)]
            name = _unique(f"{noun}-{role}", taken.setdefault(namespace, set()))
            team = namespace.split("-")[0]
            version = f"{1 + i % 4}.{(i * 13) % 40}.{i % 9}"
            labels = {
                "app": name,
                "app.kubernetes.io/name": name,
                "app.kubernetes.io/part-of": team,
                "app.kubernetes.io/version": version,
            }
            if i < helm:
                labels |= {
                    "app.kubernetes.io/instance": name,
                    "app.kubernetes.io/managed-by": "Helm",
                    "helm.sh/chart": f"{name}-{version}",
                }
            d = _Deploy(
                index=i,
                namespace=namespace,
                name=name,
                uid=self.uid(),
                replicas=replicas,
                labels=labels,
                image=f"{_REGISTRIES[i % len(_REGISTRIES)]}/{team}/{name}:{version}",
                created=self.ago(86400, 86400 * 300),
                helm=i < helm,
                wide=i >= first_wide,
            )
            self.deploys.append(d)
            yield self._deployment(d)

    def _deployment(self, d: _Deploy) -> Obj:
        revision = 2 if d.index % 3 == 0 else 1
        spec: Obj = {
            "replicas": d.wanted,
            "selector": {"matchLabels": {"app": d.name}},
            "template": self._template(d),
            "strategy": {
                "type": "RollingUpdate",
                "rollingUpdate": {"maxUnavailable": "25%", "maxSurge": "25%"},
            },
            "revisionHistoryLimit": 10,
            "progressDeadlineSeconds": 600,
        }
        annotations: dict[str, str] = {}
        if d.helm:
            annotations["meta.helm.sh/release-name"] = d.name
            annotations["meta.helm.sh/release-namespace"] = d.namespace
        elif d.index % 3 == 1:
            tracking = f"{d.namespace}:apps/Deployment:{d.namespace}/{d.name}"
            annotations["argocd.argoproj.io/tracking-id"] = tracking
        if d.index % 4 == 0:
            annotations["kubernetes.io/change-cause"] = f"deploy {d.image.rsplit(':', 1)[1]}"
        applied_metadata = {
            "annotations": dict(annotations),
            "labels": d.labels,
            "name": d.name,
            "namespace": d.namespace,
        }
        spec_raw = _raw(spec)
        applied = {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": applied_metadata,
            "spec": spec_raw,
        }
        last_applied = msgspec.json.encode(applied).decode() + "\n"
        annotations["deployment.kubernetes.io/revision"] = str(revision)
        annotations["kubectl.kubernetes.io/last-applied-configuration"] = last_applied
        updated = self.ts(d.created + 3600 * revision)
        unavailable = 1 if d.index % 97 == 0 and d.replicas else 0
        rs_hash, _ = self.replicaset_identity(d, revision)
        if unavailable:
            available = _condition(
                "Available",
                "False",
                updated,
                "MinimumReplicasUnavailable",
                "Deployment does not have minimum availability.",
            )
        else:
            available = _condition(
                "Available",
                "True",
                updated,
                "MinimumReplicasAvailable",
                "Deployment has minimum availability.",
            )
        progressing = _condition(
            "Progressing",
            "True",
            self.ts(d.created),
            "NewReplicaSetAvailable",
            f'ReplicaSet "{d.name}-{rs_hash}" has successfully progressed.',
        )
        status: Obj = {
            "observedGeneration": revision,
            "replicas": d.replicas,
            "updatedReplicas": d.replicas,
            "readyReplicas": d.replicas - unavailable,
            "availableReplicas": d.replicas - unavailable,
            "conditions": [
                available | {"lastUpdateTime": updated},
                progressing | {"lastUpdateTime": updated},
            ],
        }
        if unavailable:
            status["unavailableReplicas"] = unavailable
        manager = "helm" if d.helm else "kubectl-client-side-apply"
        applied_fields = {"metadata": applied_metadata, "spec": spec}
        revision_fields = {
            "metadata": {"annotations": {"deployment.kubernetes.io/revision": ""}},
            "status": status,
        }
        managed = [
            self.managed(
                ("deploy", d.variant), manager, "apps/v1", self.ts(d.created), applied_fields
            ),
            self.managed(
                ("deploy-status", unavailable),
                "kube-controller-manager",
                "apps/v1",
                updated,
                revision_fields,
                "status",
            ),
        ]
        metadata = {
            "name": d.name,
            "namespace": d.namespace,
            "uid": d.uid,
            "generation": revision,
            "creationTimestamp": self.ts(d.created),
            "labels": d.labels,
            "annotations": annotations,
            "managedFields": managed,
        }
        return {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": metadata,
            "spec": spec_raw,
            "status": status,
        }

    def replicaset_and_pod_objects(self) -> Iterator[Obj]:
        """ReplicaSets (the current one, and an older one for every third Deployment), then
        the current one's Pods."""
        for d in self.deploys:
            template = self._template(d)
            template_spec = _raw(template["spec"])
            revisions = (1, 2) if d.index % 3 == 0 else (1,)
            for revision in revisions:
                current = revision == revisions[-1]
                yield self._replicaset(d, template, template_spec, revision, current)
            yield from self._pods(d, template, revisions[-1], keep=d.index < self.spec.services)

    def _replicaset(
        self, d: _Deploy, template: Obj, template_spec: msgspec.Raw, revision: int, current: bool
    ) -> Obj:
        pod_hash, uid = self.replicaset_identity(d, revision)
        replicas = d.replicas if current else 0
        wanted = d.wanted if current else 0
        if current and d.quota_refused:
            self.refused_replicasets.append((d.namespace, f"{d.name}-{pod_hash}", uid))
        labels = d.labels | {"pod-template-hash": pod_hash}
        created = d.created + 3600 * (revision - 1)
        pod_spec: Obj | msgspec.Raw = template_spec
        if not current:
            containers = template["spec"]["containers"]
            old_image = {**containers[0], "image": d.image.rsplit(":", 1)[0] + ":0.9.0"}
            pod_spec = {**template["spec"], "containers": [old_image, *containers[1:]]}
        selector = {"matchLabels": {"app": d.name, "pod-template-hash": pod_hash}}
        template_metadata = {**template["metadata"], "labels": labels}
        spec = {
            "replicas": wanted,
            "selector": selector,
            "template": {"metadata": template_metadata, "spec": pod_spec},
        }
        spec_fields = {
            "replicas": wanted,
            "selector": selector,
            "template": {"metadata": template_metadata, "spec": template["spec"]},
        }
        status: Obj = {"replicas": replicas, "observedGeneration": 1 if current else 2}
        if replicas:
            status |= {
                "fullyLabeledReplicas": replicas,
                "readyReplicas": replicas,
                "availableReplicas": replicas,
            }
        managed = [
            self.managed(
                ("rs", d.variant),
                "kube-controller-manager",
                "apps/v1",
                self.ts(created),
                {"metadata": {"labels": labels}, "spec": spec_fields},
            ),
            self.managed(
                ("rs-status", bool(replicas)),
                "kube-controller-manager",
                "apps/v1",
                self.ts(created + 60),
                {"status": status},
                "status",
            ),
        ]
        annotations = {
            "deployment.kubernetes.io/desired-replicas": str(d.replicas),
            "deployment.kubernetes.io/max-replicas": str(d.replicas + 1),
            "deployment.kubernetes.io/revision": str(revision),
        }
        metadata = {
            "name": f"{d.name}-{pod_hash}",
            "namespace": d.namespace,
            "uid": uid,
            "generation": 1 if current else 2,
            "creationTimestamp": self.ts(created),
            "labels": labels,
            "annotations": annotations,
            "ownerReferences": _owner("apps/v1", "Deployment", d.name, d.uid),
            "managedFields": managed,
        }
        return {
            "apiVersion": "apps/v1",
            "kind": "ReplicaSet",
            "metadata": metadata,
            "spec": spec,
            "status": status,
        }

    def _pods(self, d: _Deploy, template: Obj, revision: int, keep: bool) -> Iterator[Obj]:
        pod_hash, rs_uid = self.replicaset_identity(d, revision)
        rs_name = f"{d.name}-{pod_hash}"
        labels = d.labels | {"pod-template-hash": pod_hash}
        token = f"kube-api-access-{self.suffix()}"
        mount = {"name": token, "readOnly": True, "mountPath": _TOKEN_MOUNT_PATH}
        volume = {"name": token, "projected": {"sources": _TOKEN_SOURCES, "defaultMode": 420}}
        template_spec = template["spec"]
        containers = [
            {**c, "volumeMounts": [*c.get("volumeMounts", ()), mount]}
            for c in template_spec["containers"]
        ]
        base_spec = _frozen(
            {
                **template_spec,
                "containers": containers,
                "volumes": [*template_spec["volumes"], volume],
                "tolerations": _TOLERATIONS,
                "priority": 0,
                "enableServiceLinks": True,
                "preemptionPolicy": "PreemptLowerPriority",
            }
        )
        owner = _owner("apps/v1", "ReplicaSet", rs_name, rs_uid)
        started = d.created + 3600 * (revision - 1) + 30
        image_ids = [f"{c['image'].rsplit(':', 1)[0]}@{self.digest()}" for c in containers]
        ready_conditions = _pod_conditions(self.ts(started), ready=True)
        sample_status = {
            "phase": "Running",
            "conditions": ready_conditions,
            "podIP": "",
            "containerStatuses": [],
        }
        managed = [
            self.managed(
                ("pod", d.variant),
                "kube-controller-manager",
                "v1",
                self.ts(started),
                {
                    "metadata": {"generateName": "", "labels": labels, "ownerReferences": owner},
                    "spec": template_spec,
                },
            ),
            self.managed(
                ("pod-status",),
                "kubelet",
                "v1",
                self.ts(started + 20),
                {"status": sample_status},
                "status",
            ),
        ]
        # What every pod of this ReplicaSet repeats is encoded once.
        template_annotations = template["metadata"]["annotations"]
        annotations = _raw(template_annotations)
        shared_owner, shared_managed = _raw(owner), _raw(managed)
        shared_conditions = _raw(ready_conditions)
        heavy = self._heavy(d)
        for replica in range(d.replicas):
            self._pod_serial += 1
            serial = self._pod_serial
            name = f"{rs_name}-{self.suffix()}"
            uid = self.uid()
            node, host_ip = self.nodes[serial % len(self.nodes)] if self.nodes else ("", "")
            ip = f"10.{16 + (serial >> 16) % 200}.{(serial >> 8) & 255}.{serial & 255}"
            created = started + self.rng.randint(0, 600)
            trouble = _trouble(serial)
            metadata = {
                "name": name,
                "generateName": f"{rs_name}-",
                "namespace": d.namespace,
                "uid": uid,
                "creationTimestamp": self.ts(created),
                "labels": labels,
                "annotations": (
                    self._applied(template_annotations, labels, name, d.namespace)
                    if heavy and replica == 0
                    else annotations
                ),
                "ownerReferences": shared_owner,
                "managedFields": shared_managed,
            }
            if trouble == "Pending":
                spec = base_spec
                nodes = len(self.nodes)
                message = (
                    f"0/{nodes} nodes are available: {nodes} Insufficient cpu. "
                    f"preemption: 0/{nodes} nodes are available: {nodes} No preemption "
                    "victims found for incoming pod."
                )
                scheduled = _condition(
                    "PodScheduled", "False", self.ts(created), "Unschedulable", message
                )
                status: Obj = {
                    "phase": "Pending",
                    "conditions": [scheduled | {"lastProbeTime": None}],
                    "qosClass": "Burstable",
                }
                self.troubled_pods.append((d.namespace, name, uid, "", "FailedScheduling"))
            elif trouble in (SANDBOX_FAILED, MOUNT_FAILED):
                # The kubelet never got to start a container: they all wait as created.
                spec = {**base_spec, "nodeName": node}
                status = {
                    "phase": "Pending",
                    "conditions": _pod_conditions(
                        self.ts(created + 1), ready=False, container="app"
                    ),
                    "hostIP": host_ip,
                    "hostIPs": [{"ip": host_ip}],
                    "startTime": self.ts(created + 1),
                    "containerStatuses": [
                        {
                            "name": c["name"],
                            "image": c["image"],
                            "imageID": "",
                            "state": {"waiting": {"reason": "ContainerCreating"}},
                            "lastState": {},
                            "ready": False,
                            "restartCount": 0,
                            "started": False,
                        }
                        for c in containers
                    ],
                    "qosClass": "Burstable",
                }
                self.troubled_pods.append((d.namespace, name, uid, node, trouble))
            else:
                spec = {**base_spec, "nodeName": node}
                statuses = [
                    self._container_status(
                        c, image_ids[i], created + 5, trouble if i == 0 else None
                    )
                    for i, c in enumerate(containers)
                ]
                ready = trouble in (None, "OOMKilled")
                conditions = (
                    shared_conditions
                    if ready
                    else _pod_conditions(self.ts(created + 5), ready=False, container="app")
                )
                status = {
                    "phase": "Running",
                    "conditions": conditions,
                    "hostIP": host_ip,
                    "hostIPs": [{"ip": host_ip}],
                    "podIP": ip,
                    "podIPs": [{"ip": ip}],
                    "startTime": self.ts(created + 1),
                    "containerStatuses": statuses,
                    "qosClass": "Burstable",
                }
                if trouble is not None:
                    self.troubled_pods.append((d.namespace, name, uid, node, trouble))
                if keep and ready:
                    d.pods.append((name, uid, ip, node))
            yield {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": metadata,
                "spec": spec,
                "status": status,
            }

    def _heavy(self, d: _Deploy) -> bool:
        stride = self._heavy_stride
        return d.index % stride == 0 and d.index // stride < self._heavy_pods

    def _applied(self, annotations: Obj, labels: Obj, name: str, namespace: str) -> Obj:
        """A pod's annotations with its kubectl `last-applied-configuration`: its whole
        manifest, about 200 KB with the configuration inlined in its environment."""
        if self._applied_spec is None:
            self._applied_spec = _applied_pod_spec(random.Random(f"{self.spec.seed}/applied"))
        metadata = {"annotations": annotations, "labels": labels, "name": name}
        applied = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": metadata | {"namespace": namespace},
            "spec": self._applied_spec,
        }
        return annotations | {LAST_APPLIED: msgspec.json.encode(applied).decode() + "\n"}

    def _container_status(
        self, container: Obj, image_id: str, started: int, trouble: str | None
    ) -> Obj:
        name, image = container["name"], container["image"]
        container_id = f"containerd://{self.rng.getrandbits(256):064x}"
        if trouble in (None, PROBE_FAILING):
            return {
                "name": name,
                "image": image,
                "imageID": image_id,
                "containerID": container_id,
                "state": {"running": {"startedAt": self.ts(started)}},
                "lastState": {},
                "ready": trouble is None,
                "restartCount": 0,
                "started": True,
            }
        status = {"name": name, "image": image, "imageID": image_id, "containerID": container_id}
        if trouble == "ImagePullBackOff":
            waiting = {
                "waiting": {
                    "reason": "ImagePullBackOff",
                    "message": f'Back-off pulling image "{image}"',
                }
            }
            return {
                "name": name,
                "image": image,
                "imageID": "",
                "state": waiting,
                "lastState": {},
                "ready": False,
                "restartCount": 0,
                "started": False,
            }
        reason, code = ("OOMKilled", 137) if trouble == "OOMKilled" else ("Error", 1)
        last = {
            "terminated": {
                "exitCode": code,
                "reason": reason,
                "startedAt": self.ts(self.now - 400),
                "finishedAt": self.ts(self.now - 380),
                "containerID": container_id,
            }
        }
        if trouble == "OOMKilled":
            running = {"running": {"startedAt": self.ts(self.now - 300)}}
            return status | {
                "state": running,
                "lastState": last,
                "ready": True,
                "restartCount": 3,
                "started": True,
            }
        waiting = {
            "waiting": {
                "reason": "CrashLoopBackOff",
                "message": f"back-off 5m0s restarting failed container={name}",
            }
        }
        return status | {
            "state": waiting,
            "lastState": last,
            "ready": False,
            "restartCount": 27,
            "started": False,
        }

    # services, endpoints, hpas, ingresses ---------------------------------------------------

    def service_objects(self) -> Iterator[Obj]:
        for i in range(self.spec.services):
            d = self.deploys[i] if i < len(self.deploys) else None
            namespace = d.namespace if d else self.namespaces[i % len(self.namespaces)]
            name = d.name if d else f"external-{i}"
            cluster_ip = f"172.20.{(i >> 8) & 255}.{i & 255}"
            balancer = i % 20 == 0
            port: Obj = {"name": "http", "protocol": "TCP", "port": 80, "targetPort": "http"}
            spec: Obj = {
                "ports": [port],
                "clusterIP": cluster_ip,
                "clusterIPs": [cluster_ip],
                "type": "LoadBalancer" if balancer else "ClusterIP",
                "sessionAffinity": "None",
                "ipFamilies": ["IPv4"],
                "ipFamilyPolicy": "SingleStack",
                "internalTrafficPolicy": "Cluster",
            }
            annotations: dict[str, str] = {}
            status: Obj = {"loadBalancer": {}}
            if d is not None:
                spec["selector"] = {"app": d.name}
            if balancer:
                port["nodePort"] = 30000 + i % 2000
                spec |= {"externalTrafficPolicy": "Cluster", "allocateLoadBalancerNodePorts": True}
                annotations["service.beta.kubernetes.io/aws-load-balancer-type"] = "nlb"
                hostname = f"a{i:031x}.elb.us-east-1.amazonaws.com"
                status = {"loadBalancer": {"ingress": [{"hostname": hostname}]}}
            labels = d.labels if d else {"app": name}
            metadata = {
                "name": name,
                "namespace": namespace,
                "labels": labels,
                "annotations": annotations,
            }
            yield {
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": metadata,
                "spec": spec,
                "status": status,
            }
            if d is None:
                continue
            subsets = []
            if d.pods:
                addresses = [
                    {
                        "ip": ip,
                        "nodeName": node,
                        "targetRef": {
                            "kind": "Pod",
                            "namespace": namespace,
                            "name": pod,
                            "uid": uid,
                        },
                    }
                    for pod, uid, ip, node in d.pods
                ]
                ports = [{"name": "http", "port": 8080, "protocol": "TCP"}]
                subsets = [{"addresses": addresses, "ports": ports}]
            trigger = {"endpoints.kubernetes.io/last-change-trigger-time": self.ts(d.created)}
            metadata = {
                "name": name,
                "namespace": namespace,
                "labels": labels,
                "annotations": trigger,
            }
            yield {
                "apiVersion": "v1",
                "kind": "Endpoints",
                "metadata": metadata,
                "subsets": subsets,
            }
            d.pods = []  # served its purpose

    def hpa_objects(self) -> Iterator[Obj]:
        count = min(self.spec.derived("hpas"), len(self.deploys))
        step = max(1, len(self.deploys) // count) if count else 1
        for n in range(count):
            d = self.deploys[(n * step) % len(self.deploys)]
            replicas = max(d.replicas, 1)
            cpu = self.rng.randint(20, 95)
            updated = self.ts(self.ago(60, 86400))
            target = {"apiVersion": "apps/v1", "kind": "Deployment", "name": d.name}
            metrics = [
                {
                    "type": "Resource",
                    "resource": {
                        "name": resource,
                        "target": {"type": "Utilization", "averageUtilization": goal},
                    },
                }
                for resource, goal in (("cpu", 70), ("memory", 80))
            ]
            current = [
                {
                    "type": "Resource",
                    "resource": {
                        "name": "cpu",
                        "current": {"averageValue": f"{cpu * 3}m", "averageUtilization": cpu},
                    },
                },
                {
                    "type": "Resource",
                    "resource": {
                        "name": "memory",
                        "current": {"averageValue": "201326592", "averageUtilization": 61},
                    },
                },
            ]
            conditions = [
                _condition(kind, value, updated, reason, message)
                for kind, value, reason, message in _HPA_CONDITIONS
            ]
            yield {
                "apiVersion": "autoscaling/v2",
                "kind": "HorizontalPodAutoscaler",
                "metadata": {"name": d.name, "namespace": d.namespace, "labels": d.labels},
                "spec": {
                    "scaleTargetRef": target,
                    "minReplicas": max(1, replicas - 1),
                    "maxReplicas": replicas * 4,
                    "metrics": metrics,
                    "behavior": _HPA_BEHAVIOR,
                },
                "status": {
                    "lastScaleTime": updated,
                    "currentReplicas": replicas,
                    "desiredReplicas": replicas,
                    "currentMetrics": current,
                    "conditions": conditions,
                },
            }

    def ingress_objects(self) -> Iterator[Obj]:
        for i in range(0, min(self.spec.services, len(self.deploys)), 10):
            d = self.deploys[i]
            host = f"{d.name}.{d.namespace}.example.com"
            backend = {"service": {"name": d.name, "port": {"name": "http"}}}
            path = {"path": "/", "pathType": "Prefix", "backend": backend}
            yield {
                "apiVersion": "networking.k8s.io/v1",
                "kind": "Ingress",
                "metadata": {
                    "name": d.name,
                    "namespace": d.namespace,
                    "labels": d.labels,
                    "annotations": {"cert-manager.io/cluster-issuer": "letsencrypt"},
                },
                "spec": {
                    "ingressClassName": "nginx",
                    "tls": [{"hosts": [host], "secretName": f"{d.name}-tls"}],
                    "rules": [{"host": host, "http": {"paths": [path]}}],
                },
                "status": {"loadBalancer": {"ingress": [{"hostname": "ingress.example.com"}]}},
            }

    # cronjobs, jobs -----------------------------------------------------------------------

    def cronjob_and_job_objects(self) -> Iterator[Obj]:
        cronjobs: list[tuple[str, str, str, Obj]] = []
        taken: dict[str, set[str]] = {}
        for i in range(self.spec.cronjobs):
            namespace = self.namespaces[(i * 3) % len(self.namespaces)]
            task, team = _TASKS[i % len(_TASKS)], namespace.split("-")[0]
            name = _unique(
                f"{_NOUNS[(i * 5) % len(_NOUNS)]}-{task}", taken.setdefault(namespace, set())
            )
            uid = self.uid()
            container = {
                "name": task,
                "image": f"{_REGISTRIES[i % 4]}/{team}/jobs:2.{i % 30}.0",
                "command": ["/bin/sh", "-c"],
                "args": [f"python -m jobs.{task} --namespace {namespace}"],
                "env": [
                    _env("JOB_NAME", name),
                    _env_from("DATABASE_URL", "secretKeyRef", {"name": f"{team}-db", "key": "url"}),
                ],
                "resources": {
                    "requests": {"cpu": "200m", "memory": "256Mi"},
                    "limits": {"memory": "512Mi"},
                },
                **_DEFAULTS,
            }
            pod_spec = {
                "containers": [container],
                "restartPolicy": "OnFailure",
                "serviceAccountName": "app",
                "terminationGracePeriodSeconds": 30,
                "dnsPolicy": "ClusterFirst",
                "schedulerName": "default-scheduler",
            }
            job_template = {
                "metadata": {"labels": {"app": name, "team": team}},
                "spec": {
                    "backoffLimit": 2,
                    "activeDeadlineSeconds": 3600,
                    "template": {"metadata": {"labels": {"app": name}}, "spec": pod_spec},
                },
            }
            cronjobs.append((namespace, name, uid, job_template))
            last = self.ago(60, 3600)
            spec: Obj = {
                "schedule": _SCHEDULES[i % len(_SCHEDULES)],
                "concurrencyPolicy": ("Forbid", "Allow", "Replace")[i % 3],
                "suspend": i % 20 == 7,
                "jobTemplate": job_template,
                "successfulJobsHistoryLimit": 3,
                "failedJobsHistoryLimit": 1,
            }
            if i % 4 == 0:
                spec["timeZone"] = ("Europe/Madrid", "America/New_York", "UTC")[i % 3]
            if i % 5 == 0:
                spec["startingDeadlineSeconds"] = 200
            created = self.ts(self.ago(86400 * 2, 86400 * 200))
            yield {
                "apiVersion": "batch/v1",
                "kind": "CronJob",
                "metadata": {
                    "name": name,
                    "namespace": namespace,
                    "uid": uid,
                    "creationTimestamp": created,
                    "labels": {"app": name, "team": team},
                },
                "spec": spec,
                "status": {
                    "lastScheduleTime": self.ts(last),
                    "lastSuccessfulTime": self.ts(last + 42),
                },
            }
        for n in range(min(self.spec.derived("jobs"), len(cronjobs) * 3)):
            yield from self._job(n, *cronjobs[(n * 7) % len(cronjobs)])

    def _job(
        self, n: int, namespace: str, cron: str, cron_uid: str, template: Obj
    ) -> Iterator[Obj]:
        scheduled = (self.now // 60 - 15 * (n + 1)) * 60  # one run every 15 minutes
        name = f"{cron}-{scheduled // 60}"
        uid = self.uid()
        outcome = ("succeeded", "succeeded", "failed", "succeeded", "running")[n % 5]
        labels = {
            "batch.kubernetes.io/controller-uid": uid,
            "batch.kubernetes.io/job-name": name,
            "controller-uid": uid,
            "job-name": name,
        } | template["metadata"]["labels"]
        pod_template = template["spec"]["template"]
        finished = self.ts(scheduled + 95)
        status: Obj = {"startTime": self.ts(scheduled + 1), "uncountedTerminatedPods": {}}
        if outcome == "succeeded":
            complete = _condition("Complete", "True", finished) | {"lastProbeTime": finished}
            status |= {
                "succeeded": 1,
                "completionTime": finished,
                "ready": 0,
                "conditions": [complete],
            }
        elif outcome == "failed":
            conditions = [
                _condition(
                    kind,
                    "True",
                    finished,
                    "BackoffLimitExceeded",
                    "Job has reached the specified backoff limit",
                )
                | {"lastProbeTime": finished}
                for kind in ("FailureTarget", "Failed")
            ]
            status |= {"failed": 3, "ready": 0, "conditions": conditions}
        else:
            status |= {"active": 1, "ready": 1}
        job_spec = {
            "parallelism": 1,
            "completions": 1,
            "backoffLimit": template["spec"]["backoffLimit"],
            "activeDeadlineSeconds": template["spec"]["activeDeadlineSeconds"],
            "completionMode": "NonIndexed",
            "suspend": False,
            "podReplacementPolicy": "TerminatingOrFailed",
            "selector": {"matchLabels": {"batch.kubernetes.io/controller-uid": uid}},
            "template": {"metadata": {"labels": labels}, "spec": pod_template["spec"]},
        }
        scheduled_at = {"batch.kubernetes.io/cronjob-scheduled-timestamp": self.ts(scheduled)}
        yield {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {
                "name": name,
                "namespace": namespace,
                "uid": uid,
                "creationTimestamp": self.ts(scheduled),
                "labels": labels,
                "annotations": scheduled_at,
                "ownerReferences": _owner("batch/v1", "CronJob", cron, cron_uid),
            },
            "spec": job_spec,
            "status": status,
        }
        yield self._job_pod(
            n, namespace, name, uid, labels, pod_template["spec"], scheduled, outcome
        )

    def _job_pod(
        self,
        n: int,
        namespace: str,
        job: str,
        job_uid: str,
        labels: dict[str, str],
        pod_spec: Obj,
        scheduled: int,
        outcome: str,
    ) -> Obj:
        container = pod_spec["containers"][0]
        pod = f"{job}-{self.suffix()}"
        node, host_ip = self.nodes[n % len(self.nodes)] if self.nodes else ("", "")
        if outcome == "running":
            state: Obj = {"running": {"startedAt": self.ts(scheduled + 3)}}
            phase = "Running"
        else:
            if outcome == "succeeded":
                code, reason = 0, "Completed"
            else:
                code, reason = (137, "OOMKilled") if n % 3 == 0 else (1, "Error")
                self.failed_job_pods.append((namespace, pod, container["name"]))
            state = {
                "terminated": {
                    "exitCode": code,
                    "reason": reason,
                    "startedAt": self.ts(scheduled + 3),
                    "finishedAt": self.ts(scheduled + 95),
                }
            }
            phase = "Succeeded" if outcome == "succeeded" else "Failed"
        ip = f"10.250.{(n >> 8) & 255}.{n & 255}"
        container_status = {
            "name": container["name"],
            "image": container["image"],
            "imageID": f"{container['image'].rsplit(':', 1)[0]}@{self.digest()}",
            "containerID": f"containerd://{self.rng.getrandbits(256):064x}",
            "state": state,
            "lastState": {},
            "ready": outcome == "running",
            "restartCount": 0,
            "started": outcome == "running",
        }
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": pod,
                "generateName": f"{job}-",
                "namespace": namespace,
                "creationTimestamp": self.ts(scheduled),
                "labels": labels,
                "ownerReferences": _owner("batch/v1", "Job", job, job_uid),
            },
            "spec": {**pod_spec, "nodeName": node},
            "status": {
                "phase": phase,
                "hostIP": host_ip,
                "podIP": ip,
                "podIPs": [{"ip": ip}],
                "startTime": self.ts(scheduled + 1),
                "containerStatuses": [container_status],
                "qosClass": "Burstable",
            },
        }

    # per-namespace and cluster-wide objects --------------------------------------------------

    def namespace_content_objects(self) -> Iterator[Obj]:
        ca = base64.b64encode(self.rng.randbytes(800)).decode()
        body = "\n".join(ca[i : i + 64] for i in range(0, len(ca), 64))
        pem = f"-----BEGIN CERTIFICATE-----\n{body}\n-----END CERTIFICATE-----\n"
        for index, namespace in enumerate(["default", "kube-system", *self.namespaces]):
            yield {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "data": {"ca.crt": pem},
                "metadata": {"name": "kube-root-ca.crt", "namespace": namespace},
            }
            yield {
                "apiVersion": "v1",
                "kind": "ServiceAccount",
                "metadata": {"name": "default", "namespace": namespace},
            }
            if index < 2:
                continue
            team = namespace.split("-")[0]
            role_arn = f"arn:aws:iam::123456789012:role/{namespace}-app"
            yield {
                "apiVersion": "v1",
                "kind": "ServiceAccount",
                "metadata": {
                    "name": "app",
                    "namespace": namespace,
                    "annotations": {"eks.amazonaws.com/role-arn": role_arn},
                },
            }
            yield {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {
                    "name": "app-config",
                    "namespace": namespace,
                    "labels": {"team": team},
                },
                "data": {
                    "cache_ttl": "300",
                    "region": "us-east-1",
                    "feature_flags": "new-checkout,fast-search",
                },
            }
            url = f"postgres://{team}_app:hunter2@{team}-db:5432/{team}".encode()
            data = {
                "password": base64.b64encode(self.rng.randbytes(18)).decode(),
                "url": base64.b64encode(url).decode(),
            }
            yield {
                "apiVersion": "v1",
                "kind": "Secret",
                "type": "Opaque",
                "data": data,
                "metadata": {"name": f"{team}-db", "namespace": namespace},
            }
            if index % 10 == 2:
                yield from _namespace_rbac(namespace)
            if index % 5 == 2:
                yield _network_policy(namespace)

    def helm_secret_objects(self) -> Iterator[Obj]:
        """The release Secrets of the Helm-managed Deployments (one revision each, small),
        then those of the heavy monitoring stacks (many revisions, near 1 MiB each)."""
        for d in self.deploys:
            if not d.helm:
                continue
            version = d.labels["app.kubernetes.io/version"]
            manifest = "".join(
                f"---\n# Source: {d.name}/templates/{kind.lower()}.yaml\napiVersion: {api}\n"
                f"kind: {kind}\nmetadata:\n  name: {d.name}\n  namespace: {d.namespace}\n"
                for api, kind in (("v1", "Service"), ("apps/v1", "Deployment"))
            )
            chart = {
                "metadata": {
                    "name": d.name,
                    "version": version,
                    "appVersion": version,
                    "apiVersion": "v2",
                    "type": "application",
                },
                "values": {"replicaCount": 2},
                "templates": [
                    {
                        "name": "templates/deployment.yaml",
                        "data": base64.b64encode(b"kind: Deployment").decode(),
                    }
                ],
            }
            upgraded = d.created + 7200
            revision = _Revision(
                number=3,
                status="deployed",
                deployed=upgraded,
                modified=upgraded + 30,
                description="Upgrade complete",
                config={"image": {"tag": version}, "db": {"password": "not-for-the-agent"}},
            )
            release = _HelmRelease(
                name=d.name,
                namespace=d.namespace,
                chart=chart,
                manifest=manifest,
                notes="Thank you for installing.",
                first_deployed=d.created,
                revisions=[revision],
            )
            yield from self.release_secrets(release)
        count = self.spec.derived("heavy_helm_releases")
        if count:
            stack = _MonitoringStack(random.Random(f"{self.spec.seed}/monitoring"))
            taken: set[str] = set()
            for i in range(count):
                team = _TEAMS[i % len(_TEAMS)]
                name = _unique(f"{team}-monitoring", taken)
                yield from self.release_secrets(self._stack_release(stack, name, team))

    def _stack_release(self, stack: _MonitoringStack, name: str, team: str) -> _HelmRelease:
        """A monitoring stack upgraded every few days, `heavy_helm_revisions` times."""
        count = self.spec.heavy_helm_revisions
        deployed = [self.ago(86400 * 200, 86400 * 300)]
        while len(deployed) < count:
            deployed.append(deployed[-1] + self.rng.randint(3600, 86400 * 3))
        revisions = []
        for number, when in enumerate(deployed, start=1):
            config, tail = stack.revision(name, team, number)
            newest = number == count
            revisions.append(
                _Revision(
                    number=number,
                    status="deployed" if newest else "superseded",
                    deployed=when,
                    modified=when + 40 if newest else deployed[number],  # the next one's
                    description="Install complete" if number == 1 else "Upgrade complete",
                    config=config,
                    manifest_tail=tail,
                )
            )
        return _HelmRelease(
            name=name,
            namespace=HEAVY_NAMESPACE,
            chart=stack.chart,
            manifest=stack.manifest(name),
            notes=stack.notes(name),
            first_deployed=deployed[0],
            revisions=revisions,
            hooks=stack.hooks(name),
        )

    def release_secrets(self, release: _HelmRelease) -> Iterator[Obj]:
        """A release's Secrets, one per revision, as Helm 3's storage driver writes them:
        `data.release` is base64 (the API's) of base64 (Helm's) of gzipped JSON.

        What every revision shares (chart, manifest) leads the JSON and is compressed once;
        each revision only adds its tail (its own manifest documents, hooks, config, number
        and info) to a copy of the compressor, so many big revisions cost little."""
        shared = msgspec.json.encode(
            {
                "name": release.name,
                "namespace": release.namespace,
                "chart": release.chart,
                "manifest": release.manifest,
            }
        )
        compressor = zlib.compressobj(9, zlib.DEFLATED, 31)  # Helm's BestCompression; gzip
        head = compressor.compress(shared[:-2])  # '"}' closes the manifest: left open
        for revision in release.revisions:
            info = {
                "first_deployed": self.ts(release.first_deployed),
                "last_deployed": self.ts(revision.deployed),
                "deleted": "",
                "description": revision.description,
                "status": revision.status,
                "notes": release.notes,
            }
            last_run = {
                "started_at": self.ts(revision.deployed - 20),
                "completed_at": self.ts(revision.deployed - 5),
                "phase": "Succeeded",
            }
            rest = {
                "hooks": [hook | {"last_run": last_run} for hook in release.hooks],
                "config": revision.config,
                "version": revision.number,
                "info": info,
            }
            tail = msgspec.json.encode(revision.manifest_tail)[1:] + b","
            finish = compressor.copy()
            payload = head + finish.compress(tail + msgspec.json.encode(rest)[1:])
            payload += finish.flush()
            labels = {
                "createdAt": str(revision.deployed),
                "modifiedAt": str(revision.modified),
                "name": release.name,
                "owner": "helm",
                "status": revision.status,
                "version": str(revision.number),
            }
            yield objects.helm_release_secret(
                name=release.name,
                namespace=release.namespace,
                revision=revision.number,
                storage=base64.b64encode(payload),  # gzipped above, with Helm's level
                labels=labels,
                created=self.ts(revision.deployed),
            )

    def event_objects(self) -> Iterator[Obj]:
        for n, (namespace, pod, uid, node, why) in enumerate(self.troubled_pods):
            field_path: str | None = "spec.containers{app}"
            if why == SANDBOX_FAILED:
                field_path, reason, component = None, why, "kubelet"
                message = (
                    "Failed to create pod sandbox: rpc error: code = Unknown desc = failed to"
                    f' setup network for sandbox "{self.rng.getrandbits(256):064x}": plugin'
                    ' type="calico" failed (add): error getting ClusterInformation: connection'
                    " is unauthorized: Unauthorized"
                )
            elif why == MOUNT_FAILED:
                field_path, reason, component = None, why, "kubelet"
                message = (
                    'MountVolume.SetUp failed for volume "config" : configmap "app-config"'
                    " not found"
                )
            elif why == PROBE_FAILING:
                reason, component = why, "kubelet"
                message = "Readiness probe failed: HTTP probe failed with statuscode: 503"
            elif why == "FailedScheduling":
                reason, message, component = (
                    "FailedScheduling",
                    f"0/{len(self.nodes)} nodes are available: Insufficient cpu.",
                    "default-scheduler",
                )
            elif why == "ImagePullBackOff":
                reason, message, component = "Failed", "Error: ImagePullBackOff", "kubelet"
            elif why == "OOMKilled":
                reason, message, component = "OOMKilling", "Memory cgroup out of memory", "kubelet"
            else:
                message = (
                    f"Back-off restarting failed container app in pod {pod}_{namespace}({uid})"
                )
                reason, component = "BackOff", "kubelet"
            involved = {
                "kind": "Pod",
                "namespace": namespace,
                "name": pod,
                "uid": uid,
                "apiVersion": "v1",
            } | ({"fieldPath": field_path} if field_path else {})
            source = {"component": component} | ({"host": node} if node else {})
            yield {
                "apiVersion": "v1",
                "kind": "Event",
                "metadata": {"name": f"{pod}.{n:016x}", "namespace": namespace},
                "involvedObject": involved,
                "reason": reason,
                "message": message,
                "source": source,
                "firstTimestamp": self.ts(self.ago(3600, 7200)),
                "lastTimestamp": self.ts(self.ago(0, 600)),
                "count": self.rng.randint(1, 300),
                "type": "Warning",
                "eventTime": None,
                "reportingComponent": component,
                "reportingInstance": node,
            }
        for n, (namespace, rs, uid) in enumerate(self.refused_replicasets):
            message = (
                f'Error creating: pods "{rs}-{self.suffix()}" is forbidden: exceeded quota:'
                " compute-quota, requested: requests.cpu=250m, used: requests.cpu=8, limited:"
                " requests.cpu=8"
            )
            yield {
                "apiVersion": "v1",
                "kind": "Event",
                "metadata": {"name": f"{rs}.{n:016x}", "namespace": namespace},
                "involvedObject": {
                    "kind": "ReplicaSet",
                    "namespace": namespace,
                    "name": rs,
                    "uid": uid,
                    "apiVersion": "apps/v1",
                },
                "reason": "FailedCreate",
                "message": message,
                "source": {"component": "replicaset-controller"},
                "firstTimestamp": self.ts(self.ago(3600, 7200)),
                "lastTimestamp": self.ts(self.ago(0, 600)),
                "count": self.rng.randint(1, 300),
                "type": "Warning",
                "eventTime": None,
                "reportingComponent": "replicaset-controller",
                "reportingInstance": "",
            }


# --- Helm releases ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Revision:
    number: int
    status: str  # "deployed" (the newest) or "superseded"
    deployed: int  # epoch seconds; also Helm's `createdAt` label
    modified: int  # its last update by Helm (deployed, or superseded): `modifiedAt`
    description: str
    config: Obj  # the values the user installed or upgraded with
    manifest_tail: str = ""  # the manifest's last documents, this revision's own


@dataclass(frozen=True, slots=True)
class _HelmRelease:
    name: str
    namespace: str
    chart: Obj | msgspec.Raw
    manifest: str  # what every revision renders alike (each adds its manifest_tail)
    notes: str
    first_deployed: int
    revisions: list[_Revision]
    hooks: list[Obj] = field(default_factory=list)  # without `last_run`, per revision


HEAVY_NAMESPACE = "monitoring"
_RELEASE = "release-name"  # the release in a rendering made once for all (`helm template`'s)
_CHART, _CHART_VERSION, _APP_VERSION = "kube-prometheus-stack", "58.2.1", "v0.73.2"
# Sized so that a release Secret lands near 900 KiB (measured in the generator's tests).
_STACK_DASHBOARDS = 28
_PANELS = 14
_SAMPLES = 100  # seeded random samples per panel: what keeps the release from compressing 10x
_SAMPLES_START = 1_717_200_000_000
_STACK_COMPONENTS = (
    ("alertmanager", "quay.io/prometheus/alertmanager:v0.27.0", 9093),
    ("prometheus", "quay.io/prometheus/prometheus:v2.51.2", 9090),
    ("operator", "quay.io/prometheus-operator/prometheus-operator:v0.73.2", 10250),
    ("kube-state-metrics", "registry.k8s.io/kube-state-metrics/kube-state-metrics:v2.12.0", 8080),
    ("node-exporter", "quay.io/prometheus/node-exporter:v1.8.0", 9100),
)
_CERTGEN = "registry.k8s.io/ingress-nginx/kube-webhook-certgen:v20221220"
_SCRAPED = _words(
    "apiserver kubelet coredns kube-controller-manager kube-scheduler kube-proxy kube-etcd"
)
_DASHBOARD_AREAS = _words(
    "cluster namespace node pod workload apiserver kubelet etcd coredns scheduler proxy "
    "persistentvolume network alertmanager prometheus"
)
_DASHBOARD_VIEWS = _words("resources usage overview saturation errors latency")
_PANEL_METRICS = (
    ("container_cpu_usage_seconds_total", "short"),
    ("container_memory_working_set_bytes", "bytes"),
    ("container_network_receive_bytes_total", "Bps"),
    ("container_network_transmit_packets_dropped_total", "pps"),
    ("apiserver_request_duration_seconds_bucket", "s"),
    ("kubelet_pleg_relist_duration_seconds_bucket", "s"),
    ("node_filesystem_avail_bytes", "bytes"),
    ("etcd_disk_wal_fsync_duration_seconds_bucket", "s"),
    ("coredns_dns_request_duration_seconds_bucket", "s"),
    ("kube_pod_container_status_restarts_total", "short"),
)
_RULE_GROUPS = _words(
    "alertmanager etcd general k8s kube-apiserver-availability kube-apiserver-slos "
    "kube-prometheus-node-recording kube-state-metrics kubelet kubernetes-apps "
    "kubernetes-resources kubernetes-storage kubernetes-system node-exporter node-network "
    "prometheus prometheus-operator"
)
# The C dumper when PyYAML has it: the same YAML, much faster.
_SAFE_DUMPER: Any = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


class _Dumper(_SAFE_DUMPER):  # type: ignore[misc]
    """YAML as a template renders it: a value used twice is written twice, no anchors."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def _yaml(doc: Obj) -> str:
    return str(yaml.dump(doc, Dumper=_Dumper, sort_keys=False, width=4096))


class _MonitoringStack:
    """A kube-prometheus-stack-like chart, rendered once for releases in HEAVY_NAMESPACE
    (each release renames it).

    As with the real chart, each Grafana dashboard is in a release twice: in its chart
    template (base64, like every chart file) and rendered into a ConfigMap of the manifest.
    The dashboards carry seeded random samples, which compress far less than the YAML and
    JSON around them, so a release compresses about 5x, as big real ones do."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        objects = [*_stack_components(), *(self._rules(group) for group in _RULE_GROUPS)]
        documents = [(path, _yaml(doc)) for path, doc in objects]
        documents += [self._dashboard(n) for n in range(_STACK_DASHBOARDS)]
        self._manifest = "".join(_source(path, text) for path, text in documents)
        # The Grafana Deployment changes with every revision: rendered per revision.
        path, grafana = _grafana(_RELEASE, 1)
        documents.append((path, _yaml(grafana)))
        templates = [
            {"name": path, "data": base64.b64encode(_template(path, text).encode()).decode()}
            for path, text in documents
        ]
        readme = "\n".join(
            f"## {area.title()}\n\nDashboards and alerts for the {area} {view}."
            for area in _DASHBOARD_AREAS
            for view in _DASHBOARD_VIEWS
        )
        files = [
            {"name": "README.md", "data": base64.b64encode(readme.encode()).decode()},
            {"name": ".helmignore", "data": base64.b64encode(b".git/\n*.swp\n*.bak\n").decode()},
        ]
        self.chart = _raw(
            {
                "metadata": _stack_metadata(),
                "lock": None,
                "templates": templates,
                "values": _stack_values(),
                "schema": None,
                "files": files,
            }
        )

    def manifest(self, release: str) -> str:
        return self._manifest.replace(_RELEASE, release)

    def notes(self, release: str) -> str:
        return (
            f"{_CHART} has been installed. Check its status by running:\n"
            f'  kubectl --namespace {HEAVY_NAMESPACE} get pods -l "release={release}"\n\n'
            "Visit https://github.com/prometheus-operator/kube-prometheus for instructions on "
            "how to create & configure Alertmanager and Prometheus instances using the Operator."
        )

    def hooks(self, release: str) -> list[Obj]:
        hooks = []
        for step, events, weight in (
            ("create", ["pre-install", "pre-upgrade"], 3),
            ("patch", ["post-install", "post-upgrade"], 5),
        ):
            name = f"{release}-admission-{step}"
            job = {
                "apiVersion": "batch/v1",
                "kind": "Job",
                "metadata": {
                    "name": name,
                    "namespace": HEAVY_NAMESPACE,
                    "annotations": {
                        "helm.sh/hook": ",".join(events),
                        "helm.sh/hook-delete-policy": "before-hook-creation,hook-succeeded",
                    },
                },
                "spec": {
                    "template": {
                        "spec": {
                            "containers": [
                                {
                                    "name": step,
                                    "image": _CERTGEN,
                                    "args": [step, f"--namespace={HEAVY_NAMESPACE}"],
                                }
                            ],
                            "restartPolicy": "OnFailure",
                        }
                    }
                },
            }
            path = f"templates/prometheus-operator/admission-webhooks/job-patch/job-{step}.yaml"
            hooks.append(
                {
                    "name": name,
                    "kind": "Job",
                    "path": f"{_CHART}/{path}",
                    "manifest": _yaml(job),
                    "events": events,
                    "weight": weight,
                    "delete_policies": ["before-hook-creation", "hook-succeeded"],
                }
            )
        return hooks

    def revision(self, release: str, team: str, number: int) -> tuple[Obj, str]:
        """A revision's config (user values) and manifest tail (its Grafana Deployment)."""
        config = {
            "grafana": {
                "adminPassword": f"{self.rng.getrandbits(96):024x}",
                "image": {"tag": f"10.4.{number}"},
                "ingress": {"enabled": True, "hosts": [f"grafana.{team}.example.com"]},
            },
            "prometheus": {
                "prometheusSpec": {
                    "retention": f"{10 + number}d",
                    "replicas": 2,
                    "externalLabels": {"cluster": "prod-us-east-1", "team": team},
                }
            },
            "alertmanager": {
                "config": {
                    "route": {"receiver": f"{team}-oncall", "group_by": ["alertname"]},
                    "receivers": [
                        {"name": f"{team}-oncall", "slack_configs": [{"channel": f"#{team}"}]}
                    ],
                }
            },
        }
        path, grafana = _grafana(release, number)
        return config, _source(path, _yaml(grafana))

    # the rendering (release `_RELEASE`) -----------------------------------------------------

    def _rules(self, group: str) -> tuple[str, Obj]:
        rules = []
        for n in range(8):
            metric, _ = _PANEL_METRICS[(len(group) + n) % len(_PANEL_METRICS)]
            alert = "".join(part.title() for part in group.split("-")) + f"Alert{n}"
            threshold = self.rng.randint(1, 99)
            rules.append(
                {
                    "alert": alert,
                    "annotations": {
                        "description": (
                            f"{{{{ $labels.namespace }}}}/{{{{ $labels.pod }}}} has {metric} "
                            f"above {threshold}% for the last 15 minutes on cluster "
                            "{{ $labels.cluster }}."
                        ),
                        "runbook_url": (
                            f"https://runbooks.prometheus-operator.dev/runbooks/{group}/"
                            f"{alert.lower()}"
                        ),
                        "summary": f"{metric} is high.",
                    },
                    "expr": (
                        f'sum by (cluster, namespace, pod) (rate({metric}{{job="{group}"}}[5m]))'
                        f" / ignoring(pod) group_left sum by (cluster, namespace) "
                        f'({metric}{{job="{group}"}}) > {threshold / 100}'
                    ),
                    "for": "15m",
                    "labels": {"severity": ("warning", "critical", "info")[n % 3]},
                }
            )
        return f"templates/prometheus/rules-1.14/{group}.yaml", {
            "apiVersion": "monitoring.coreos.com/v1",
            "kind": "PrometheusRule",
            "metadata": {
                "name": f"{_RELEASE}-{group}",
                "namespace": HEAVY_NAMESPACE,
                "labels": _stack_labels(_RELEASE),
            },
            "spec": {"groups": [{"name": group, "rules": rules}]},
        }

    def _dashboard(self, n: int) -> tuple[str, str]:
        area = _DASHBOARD_AREAS[n % len(_DASHBOARD_AREAS)]
        view = _DASHBOARD_VIEWS[n // len(_DASHBOARD_AREAS) % len(_DASHBOARD_VIEWS)]
        slug = f"k8s-{area}-{view}"
        board = {
            "annotations": {"list": [{"builtIn": 1, "enable": True, "name": "Annotations"}]},
            "editable": True,
            "graphTooltip": 1,
            "panels": [self._panel(p) for p in range(_PANELS)],
            "refresh": "30s",
            "schemaVersion": 39,
            "tags": ["kubernetes-mixin", area],
            "templating": {
                "list": [
                    {
                        "name": variable,
                        "type": "query",
                        "datasource": {"type": "prometheus", "uid": "${datasource}"},
                        "query": f'label_values(up{{job="kubelet"}}, {variable})',
                        "refresh": 2,
                        "hide": 0,
                        "includeAll": variable != "cluster",
                    }
                    for variable in ("cluster", "namespace", "pod")
                ]
            },
            "time": {"from": "now-1h", "to": "now"},
            "timezone": "utc",
            "title": f"Kubernetes / {area.title()} / {view.title()}",
            "uid": f"{self.rng.getrandbits(128):032x}",
            "version": 1,
        }
        labels = "".join(f"    {k}: {v}\n" for k, v in _stack_labels(_RELEASE).items())
        text = (
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n"
            f"  namespace: {HEAVY_NAMESPACE}\n  name: {_RELEASE}-{slug}\n"
            f'  labels:\n    grafana_dashboard: "1"\n{labels}'
            f"data:\n  {slug}.json: |-\n    {msgspec.json.encode(board).decode()}\n"
        )
        return f"templates/grafana/dashboards-1.14/{slug}.yaml", text

    def _panel(self, n: int) -> Obj:
        rng = self.rng
        metric, unit = rng.choice(_PANEL_METRICS)
        by = rng.choice(("pod", "namespace", "node", "container", "workload"))
        selector = '{cluster="$cluster", namespace=~"$namespace", container!=""}'
        samples = [
            [round(rng.uniform(0, 2000), 3), _SAMPLES_START + k * 30_000] for k in range(_SAMPLES)
        ]
        return {
            "datasource": {"type": "prometheus", "uid": "${datasource}"},
            "fieldConfig": {
                "defaults": {
                    "color": {"mode": "palette-classic"},
                    "custom": {"drawStyle": "line", "fillOpacity": 10, "lineWidth": 1},
                    "thresholds": {
                        "mode": "absolute",
                        "steps": [
                            {"color": "green", "value": None},
                            {"color": "red", "value": rng.randint(50, 95)},
                        ],
                    },
                    "unit": unit,
                },
                "overrides": [],
            },
            "gridPos": {"h": 8, "w": 12, "x": (n % 2) * 12, "y": n // 2 * 8},
            "id": n + 1,
            "interval": "1m",
            "options": {
                "legend": {"displayMode": "table", "placement": "right", "showLegend": True},
                "tooltip": {"mode": "multi", "sort": "desc"},
            },
            "targets": [
                {
                    "datasource": {"type": "prometheus", "uid": "${datasource}"},
                    "expr": f"sum(rate({metric}{selector}[$__rate_interval])) by ({by})",
                    "legendFormat": f"{{{{{by}}}}}",
                    "refId": "A",
                }
            ],
            "title": f"{metric.replace('_', ' ').title()} by {by}",
            "type": "timeseries",
            "snapshotData": [{"target": f"{by}-{rng.getrandbits(40):010x}", "datapoints": samples}],
        }


def _grafana(release: str, revision: int) -> tuple[str, Obj]:
    image = f"docker.io/grafana/grafana:10.4.{revision}"
    deployment = _stack_workload(release, "grafana", image, 3000)
    checksum = hashlib.sha256(f"{release}/{revision}".encode()).hexdigest()
    deployment["spec"]["template"]["metadata"]["annotations"] = {"checksum/config": checksum}
    return "charts/grafana/templates/deployment.yaml", deployment


def _stack_object(api_version: str, kind: str, name: str, **fields: Any) -> Obj:
    """An object of the stack's rendering: named after the release, in its namespace."""
    metadata = {"name": name, "namespace": HEAVY_NAMESPACE, "labels": _stack_labels(_RELEASE)}
    return {"apiVersion": api_version, "kind": kind, "metadata": metadata, **fields}


def _stack_components() -> Iterator[tuple[str, Obj]]:
    """(template path, object) of what the stack runs and scrapes, but Grafana's Deployment."""
    monitoring = "monitoring.coreos.com/v1"
    release = {"release": _RELEASE}
    for component, image, port in _STACK_COMPONENTS:
        name = f"{_RELEASE}-{component}"
        folder = f"templates/{component}"
        yield f"{folder}/serviceaccount.yaml", _stack_object("v1", "ServiceAccount", name)
        rules = [
            {"apiGroups": [group], "resources": resources, "verbs": ["get", "list", "watch"]}
            for group, resources in (
                ("", ["nodes", "nodes/metrics", "services", "endpoints", "pods"]),
                ("monitoring.coreos.com", ["servicemonitors", "podmonitors", "probes"]),
                ("networking.k8s.io", ["ingresses"]),
            )
        ]
        role = _stack_object("rbac.authorization.k8s.io/v1", "ClusterRole", name, rules=rules)
        del role["metadata"]["namespace"]  # cluster-scoped
        yield f"{folder}/clusterrole.yaml", role
        service = {
            "ports": [{"name": "http-web", "port": port, "targetPort": port}],
            "selector": {"app.kubernetes.io/name": component} | release,
            "type": "ClusterIP",
        }
        yield f"{folder}/service.yaml", _stack_object("v1", "Service", name, spec=service)
        scraping = {
            "endpoints": [{"port": "http-web", "path": "/metrics", "interval": "30s"}],
            "namespaceSelector": {"matchNames": [HEAVY_NAMESPACE]},
            "selector": {"matchLabels": release},
        }
        monitor = _stack_object(monitoring, "ServiceMonitor", name, spec=scraping)
        yield f"{folder}/servicemonitor.yaml", monitor
        if component in ("operator", "kube-state-metrics"):
            yield f"{folder}/deployment.yaml", _stack_workload(_RELEASE, component, image, port)
        elif component == "node-exporter":
            workload = _stack_workload(_RELEASE, component, image, port)
            yield f"{folder}/daemonset.yaml", workload | {"kind": "DaemonSet"}
        else:  # alertmanager, prometheus: the operator runs them from a custom resource
            spec = {
                "image": image,
                "replicas": 2,
                "serviceAccountName": name,
                "retention": "10d",
                "externalUrl": f"http://{name}.{HEAVY_NAMESPACE}:{port}",
                "podMonitorSelector": {"matchLabels": release},
                "ruleSelector": {"matchLabels": release},
            }
            resource = _stack_object(monitoring, component.title(), name, spec=spec)
            yield f"{folder}/{component}.yaml", resource
    dropped = [
        {"action": "drop", "regex": metric, "sourceLabels": ["__name__"]}
        for metric, _ in _PANEL_METRICS
    ]
    for target in _SCRAPED:
        endpoint = {
            "port": "https-metrics",
            "scheme": "https",
            "bearerTokenFile": _TOKEN_MOUNT_PATH + "/token",
            "metricRelabelings": dropped,
        }
        scraping = {
            "endpoints": [endpoint],
            "jobLabel": "component",
            "selector": {"matchLabels": {"component": target}},
        }
        monitor = _stack_object(monitoring, "ServiceMonitor", f"{_RELEASE}-{target}", spec=scraping)
        yield f"templates/exporters/{target}/servicemonitor.yaml", monitor


def _source(path: str, text: str) -> str:
    """A document of a rendered manifest, as Helm joins them."""
    return f"---\n# Source: {_CHART}/{path}\n{text}"


def _template(path: str, rendered: str) -> str:
    """A chart template that renders `rendered` (near enough: the release name put back)."""
    values = path.split("/")[1]
    body = rendered.replace(_RELEASE, "{{ .Release.Name }}")
    return f"{{{{- if .Values.{values}.enabled }}}}\n{body}{{{{- end }}}}\n"


def _stack_labels(release: str) -> dict[str, str]:
    return {
        "app.kubernetes.io/managed-by": "Helm",
        "app.kubernetes.io/instance": release,
        "app.kubernetes.io/version": _CHART_VERSION,
        "app.kubernetes.io/part-of": _CHART,
        "chart": f"{_CHART}-{_CHART_VERSION}",
        "release": release,
        "heritage": "Helm",
    }


def _stack_workload(release: str, component: str, image: str, port: int) -> Obj:
    selector = {"app.kubernetes.io/name": component, "release": release}
    container = {
        "name": component,
        "image": image,
        "args": [f"--web.listen-address=:{port}", "--log.level=info"],
        "ports": [{"name": "http-web", "containerPort": port}],
        "resources": {"requests": {"cpu": "100m", "memory": "256Mi"}},
        "livenessProbe": _LIVENESS,
        "readinessProbe": _READINESS,
        "securityContext": _CONTAINER_SECURITY,
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": f"{release}-{component}",
            "namespace": HEAVY_NAMESPACE,
            "labels": _stack_labels(release),
        },
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": selector},
            "template": {
                "metadata": {"labels": selector},
                "spec": {"serviceAccountName": f"{release}-{component}", "containers": [container]},
            },
        },
    }


def _stack_metadata() -> Obj:
    dependencies = [
        ("crds", "0.0.0", ""),
        ("kube-state-metrics", "5.19.*", "https://prometheus-community.github.io/helm-charts"),
        (
            "prometheus-node-exporter",
            "4.34.*",
            "https://prometheus-community.github.io/helm-charts",
        ),
        ("grafana", "7.3.*", "https://grafana.github.io/helm-charts"),
    ]
    return {
        "name": _CHART,
        "home": "https://github.com/prometheus-operator/kube-prometheus",
        "sources": ["https://github.com/prometheus-community/helm-charts"],
        "version": _CHART_VERSION,
        "description": (
            "kube-prometheus-stack collects Kubernetes manifests, Grafana dashboards, and "
            "Prometheus rules combined with documentation and scripts to provide easy to "
            "operate end-to-end Kubernetes cluster monitoring with Prometheus using the "
            "Prometheus Operator."
        ),
        "keywords": ["operator", "prometheus", "kube-prometheus"],
        "maintainers": [{"name": "platform-team", "email": "platform@example.com"}],
        "apiVersion": "v2",
        "appVersion": _APP_VERSION,
        "kubeVersion": ">=1.19.0-0",
        "dependencies": [
            {
                "name": name,
                "version": version,
                "repository": repository,
                "condition": f"{name}.enabled",
                "enabled": True,
            }
            for name, version, repository in dependencies
        ],
        "type": "application",
        "annotations": {"artifacthub.io/license": "Apache-2.0"},
    }


def _stack_values() -> Obj:
    """The chart's default values, a few of its many hundred lines per component."""
    values: Obj = {
        "nameOverride": "",
        "namespaceOverride": "",
        "commonLabels": {},
        "crds": {"enabled": True},
        "defaultRules": {"create": True, "rules": {group: True for group in _RULE_GROUPS}},
    }
    for component, image, port in _STACK_COMPONENTS:
        registry, _, rest = image.partition("/")
        repository, _, tag = rest.partition(":")
        values[component] = {
            "enabled": True,
            "image": {
                "registry": registry,
                "repository": repository,
                "tag": tag,
                "sha": "",
                "pullPolicy": "IfNotPresent",
            },
            "serviceAccount": {"create": True, "name": "", "annotations": {}},
            "service": {"port": port, "targetPort": port, "type": "ClusterIP", "annotations": {}},
            "serviceMonitor": {
                "enabled": True,
                "interval": "",
                "scrapeTimeout": "",
                "relabelings": [
                    {
                        "sourceLabels": [f"__meta_kubernetes_pod_{label}"],
                        "separator": ";",
                        "regex": "^(.*)$",
                        "targetLabel": label,
                        "replacement": "$1",
                        "action": "replace",
                    }
                    for label in ("node_name", "name", "namespace", "container_name")
                ],
            },
            "resources": {"requests": {"cpu": "100m", "memory": "256Mi"}},
            "securityContext": {"runAsNonRoot": True, "runAsUser": 65534, "fsGroup": 65534},
            "containerSecurityContext": _CONTAINER_SECURITY,
            "nodeSelector": {},
            "tolerations": [],
            "affinity": {},
        }
    for target in _SCRAPED:
        values[target] = {
            "enabled": True,
            "serviceMonitor": {
                "metricRelabelings": [
                    {"action": "drop", "regex": metric, "sourceLabels": ["__name__"]}
                    for metric, _ in _PANEL_METRICS
                ]
            },
        }
    return values


# --- heavy pods and Deployments --------------------------------------------------------------

LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"
_LAST_APPLIED_BYTES = 200_000
WIDE_CONTAINERS = 100


def _applied_pod_spec(rng: random.Random) -> msgspec.Raw:
    """The spec of a pod applied with kubectl with its routing table inlined in its
    environment: about `_LAST_APPLIED_BYTES` of JSON."""
    env: list[Obj] = []
    size = 0
    while size < _LAST_APPLIED_BYTES:
        noun = _NOUNS[len(env) % len(_NOUNS)]
        rule = (
            f"tenant=t-{rng.getrandbits(40):010x} path=/api/v{1 + len(env) % 3}/{noun}s "
            f"limit={rng.randint(10, 5000)}/m burst={rng.randint(1, 200)} "
            f"upstream={noun}-api.{_TEAMS[len(env) % len(_TEAMS)]}-prod:8080"
        )
        item = _env(f"ROUTE_RULE_{len(env):04d}", rule)
        env.append(item)
        size += len(msgspec.json.encode(item)) + 1
    container = {"name": "gateway", "image": "ghcr.io/acme/gateway:3.2.0", "env": env}
    return _raw({"containers": [container | {"ports": _PORTS}]})


def _worker(image: str, n: int) -> Obj:
    """One of the many containers of a wide pod (each its own worker, port and metrics)."""
    return {
        "name": f"worker-{n:03d}",
        "image": image,
        "args": ["--worker", str(n)],
        "ports": [{"name": f"metrics-{n}", "containerPort": 9100 + n, "protocol": "TCP"}],
        "env": [_env("WORKER_INDEX", str(n)), _field_env("POD_NAME", "metadata.name")],
        "resources": {"requests": {"cpu": "10m", "memory": "32Mi"}, "limits": {"memory": "64Mi"}},
        "volumeMounts": _MOUNTS[1:],
        **_DEFAULTS,
        "securityContext": _CONTAINER_SECURITY,
    }


def _namespace_rbac(namespace: str) -> Iterator[Obj]:
    rule = {
        "apiGroups": [""],
        "resources": ["configmaps", "pods"],
        "verbs": ["get", "list", "watch"],
    }
    yield objects.role(name="app-reader", namespace=namespace, rules=[rule])
    subject = objects.service_account_subject(name="app", namespace=namespace)
    yield objects.role_binding(
        name="app-reader", namespace=namespace, role="app-reader", subjects=[subject]
    )


def _network_policy(namespace: str) -> Obj:
    source = {
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "ingress-nginx"}}
    }
    return objects.network_policy(
        name="default-deny-ingress", namespace=namespace, allow_from=[source]
    )


def _cluster_rbac_objects() -> Iterator[Obj]:
    for name in _words(
        "cluster-admin admin edit view system:node system:kube-scheduler "
        "system:kube-controller-manager system:controller:deployment-controller "
        "system:controller:replicaset-controller system:controller:job-controller "
        "system:controller:cronjob-controller moonin-discovery moonin-scaling"
    ):
        labels = {"kubernetes.io/bootstrapping": "rbac-defaults"}
        rule = {"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}
        yield objects.role(name=name, namespace=None, rules=[rule], labels=labels)
        group = objects.RBAC_GROUP
        subject = {"kind": "Group", "apiGroup": group, "name": f"system:{name.split(':')[-1]}"}
        yield objects.role_binding(name=name, namespace=None, role=name, subjects=[subject])


def _unique(name: str, taken: set[str]) -> str:
    """`name`, or `name-2`, `name-3`... whichever is not in `taken` yet (it joins it)."""
    candidate, n = name, 1
    while candidate in taken:
        n += 1
        candidate = f"{name}-{n}"
    taken.add(candidate)
    return candidate


def _trouble(serial: int) -> str | None:
    """A few per cent of Deployment pods are in trouble, spread evenly and deterministically.
    Those the kubelet cannot start (sandbox, volumes) wait as ContainerCreating and only their
    Warning Events say why, as in a real cluster."""
    for modulus, trouble in (
        (97, "CrashLoopBackOff"),
        (211, "OOMKilled"),
        (331, "Pending"),
        (401, "ImagePullBackOff"),
        (503, SANDBOX_FAILED),
        (601, MOUNT_FAILED),
        (701, PROBE_FAILING),
    ):
        if serial % modulus == 0:
            return trouble
    return None


def _pod_conditions(when: str, *, ready: bool, container: str = "") -> list[Obj]:
    conditions = []
    for kind in _POD_CONDITIONS:
        condition = _condition(kind, "True", when) | {"lastProbeTime": None}
        if not ready and kind in ("Ready", "ContainersReady"):
            condition |= {
                "status": "False",
                "reason": "ContainersNotReady",
                "message": f"containers with unready status: [{container}]",
            }
        conditions.append(condition)
    return conditions


def fields_v1(value: Obj) -> Obj:
    """The `fieldsV1` set of a managedFields entry describing an object fragment."""
    out: Obj = {}
    for key, item in value.items():
        if isinstance(item, dict):
            out[f"f:{key}"] = {".": {}, **fields_v1(item)} if item else {}
        elif isinstance(item, list) and item and all(isinstance(i, dict) for i in item):
            members: Obj = {}
            for element in item:
                if "name" in element:
                    member = f'k:{{"name":"{element["name"]}"}}'
                elif "containerPort" in element:
                    member = f'k:{{"containerPort":{element["containerPort"]},"protocol":"TCP"}}'
                elif "type" in element:
                    member = f'k:{{"type":"{element["type"]}"}}'
                else:
                    member = f"v:{msgspec.json.encode(element).decode()}"
                members[member] = {".": {}, **fields_v1(element)}
            out[f"f:{key}"] = members
        else:
            out[f"f:{key}"] = {}
    return out


def _objects(builder: _Builder) -> Iterator[Obj]:
    # The agent's warm-up order first: namespaces, Deployments, CronJobs.
    yield from builder.namespace_objects()
    if not builder.namespaces:
        builder.namespaces = ["default"]
    yield from builder.node_objects()
    yield from builder.deployment_objects()
    yield from builder.cronjob_and_job_objects()
    yield from builder.replicaset_and_pod_objects()
    yield from builder.service_objects()
    yield from builder.hpa_objects()
    yield from builder.ingress_objects()
    yield from builder.namespace_content_objects()
    yield from _cluster_rbac_objects()
    yield from builder.helm_secret_objects()
    yield from builder.lease_objects()
    yield from builder.event_objects()


def generate(spec: SyntheticSpec | None = None) -> Iterator[Obj]:
    """Every object of the synthetic cluster, with apiVersion and kind. Fragments shared
    between objects are `msgspec.Raw` (already encoded); a JSON round trip gives plain dicts."""
    yield from _objects(_Builder(spec or SyntheticSpec()))


def populate(kube: FakeKube, spec: SyntheticSpec | None = None) -> dict[str, int]:
    """Load the synthetic cluster into `kube`, logs of failed Job pods included; returns
    the number of objects per resource."""
    builder = _Builder(spec or SyntheticSpec())
    # Nothing built here forms cycles; without the pause, the cyclic collector rescans the
    # growing store over and over and the load takes several times longer.
    collecting = gc.isenabled()
    gc.disable()
    try:
        kube.load(_objects(builder))
    finally:
        if collecting:
            gc.enable()
    for namespace, pod, container in builder.failed_job_pods:
        kube.set_pod_log(namespace, pod, container, _failed_job_log(pod, container))
    return dict(kube.stats()["objects"])


def _failed_job_log(pod: str, container: str) -> str:
    lines = [
        f"2024-06-01T02:00:{n % 60:02d}Z INFO {container}: processed batch {n} of 400 ({pod})"
        for n in range(1, 290)
    ]
    lines += [
        "Traceback (most recent call last):",
        '  File "/app/jobs/main.py", line 88, in run',
        "    rows = fetch(batch)",
        '  File "/app/jobs/db.py", line 41, in fetch',
        "    raise ConnectionError('could not connect to server: Connection refused')",
        "ConnectionError: could not connect to server: Connection refused",
        f"2024-06-01T02:05:00Z ERROR {container}: giving up after 3 attempts",
    ]
    return "\n".join(lines) + "\n"
