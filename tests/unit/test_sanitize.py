"""The allowlist: image references, annotations, labels, containers, selectors, conditions."""

from __future__ import annotations

import msgspec
import pytest

from collector import redact, sanitize
from collector.model import ObjectMeta
from collector.normalize import revision
from collector.sanitize import Condition, Container, LabelSelector, PodSpec

SECRET = "s3cr3t-hunter2"


@pytest.mark.parametrize(
    ("image", "expected"),
    [
        ("nginx", ("docker.io", "library/nginx", "latest", None)),
        ("nginx:1.25", ("docker.io", "library/nginx", "1.25", None)),
        ("bitnami/redis:7.2", ("docker.io", "bitnami/redis", "7.2", None)),
        ("docker.io/library/nginx", ("docker.io", "library/nginx", "latest", None)),
        ("docker.io/nginx:1", ("docker.io", "library/nginx", "1", None)),
        ("index.docker.io/nginx", ("docker.io", "library/nginx", "latest", None)),
        ("localhost/app:1", ("localhost", "app", "1", None)),
        ("localhost:5000/app", ("localhost:5000", "app", "latest", None)),
        ("registry:5000/team/app:2", ("registry:5000", "team/app", "2", None)),
        ("ghcr.io/org/team/app:v1.2.3", ("ghcr.io", "org/team/app", "v1.2.3", None)),
        ("Registry/app", ("Registry", "app", "latest", None)),
        (
            "registry.example.com:5000/shop/web:1.4.2@sha256:" + "a" * 64,
            ("registry.example.com:5000", "shop/web", "1.4.2", "sha256:" + "a" * 64),
        ),
        (
            "gcr.io/proj/app@sha256:" + "b" * 64,
            ("gcr.io", "proj/app", None, "sha256:" + "b" * 64),
        ),
        ("redis@sha256:" + "c" * 64, ("docker.io", "library/redis", None, "sha256:" + "c" * 64)),
    ],
)
def test_image_ref(image: str, expected: tuple) -> None:
    registry, repository, tag, digest = expected
    assert sanitize.image_ref(image) == {
        "registry": registry,
        "repository": repository,
        "tag": tag,
        "digest": digest,
    }


def test_image_ref_of_nothing() -> None:
    empty = {"registry": None, "repository": None, "tag": None, "digest": None}
    assert sanitize.image_ref("") == empty
    assert sanitize.image_ref(None) == empty


def test_annotations_drop_redact_truncate_and_sort() -> None:
    raw = {
        "zeta": "last",
        "kubectl.kubernetes.io/last-applied-configuration": '{"env":"' + SECRET + '"}',
        "kapp.k14s.io/original": '{"env":[{"name":"K","value":"' + SECRET + '"}]}',
        "nginx.ingress.kubernetes.io/configuration-snippet": f'more_set_headers "X: {SECRET}";',
        "nginx.ingress.kubernetes.io/server-snippet": f"set $k {SECRET};",
        "nginx.org/location-snippets": f"set $k {SECRET};",
        "db-password": SECRET,
        "example.com/API_TOKEN": SECRET,
        "example.com/apikey": SECRET,
        "vault.hashicorp.com/Credentials-ref": SECRET,
        "my-secret-name": "db",
        "example.com/database": f"postgres://admin:{SECRET}@db:5432/shop",
        "example.com/author": "Jane Doe",
        "example.com/tokenizer": "bpe",
        "long": "a" * 3000,
        "alpha": "first",
    }
    # Manifests, snippets and credential-named annotations go whole, the rest is redacted
    # and cut.
    assert sanitize.safe_annotations(raw) == {
        "alpha": "first",
        "example.com/author": "Jane Doe",
        "example.com/database": "postgres://[REDACTED]@db:5432/shop",
        "example.com/tokenizer": "bpe",
        "long": "a" * 2048 + "…[truncated 952 bytes]",
        "zeta": "last",
    }
    assert list(sanitize.safe_annotations(raw)) == sorted(sanitize.safe_annotations(raw))
    assert sanitize.safe_annotations(None) == {}


def test_truncation_keeps_whole_characters() -> None:
    assert redact.truncate("a" * 2048) == "a" * 2048
    # 3-byte characters: 682 of them fit in 2048 bytes (2046), the partial 683rd is dropped.
    cut = redact.truncate("€" * 1000)
    assert cut == "€" * 682 + "…[truncated 954 bytes]"
    cut = redact.truncate("é" * 2000)
    assert cut == "é" * 1024 + "…[truncated 1952 bytes]"


def test_change_cause_never_carries_env_values() -> None:
    cause = "kubectl set env deployment/web DB_HOST=db.internal LOG=debug --record=true"
    assert sanitize.change_cause(cause) == (
        "kubectl set env deployment/web DB_HOST=[REDACTED] LOG=[REDACTED] --record=true"
    )
    image = "kubectl set image deployment/web web=nginx:1.25 --record=true"
    assert sanitize.change_cause(image) == image
    # `v2` may be the rest of the value (the quotes are gone): it goes too.
    assert sanitize.change_cause(f"deploy.sh DB_PASSWORD={SECRET} v2") == (
        "deploy.sh DB_PASSWORD=[REDACTED]"
    )
    assert sanitize.safe_annotations(
        {sanitize.CHANGE_CAUSE: f"kubectl set env deploy/a K={SECRET}"}
    ) == {sanitize.CHANGE_CAUSE: "kubectl set env deploy/a K=[REDACTED]"}


def test_change_cause_hides_values_in_flag_form_and_values_with_spaces() -> None:
    # --record keeps the command line without its quotes: a value can run over words.
    cause = (
        f"kubectl set env deployment/web --env=API_KEY={SECRET} -e=K={SECRET} "
        f"GREETING=hello {SECRET} -e X={SECRET} --record=true"
    )
    assert sanitize.change_cause(cause) == (
        "kubectl set env deployment/web --env=API_KEY=[REDACTED] -e=K=[REDACTED] "
        "GREETING=[REDACTED] -e X=[REDACTED] --record=true"
    )
    assert sanitize.change_cause(
        f"deploy.sh --token={SECRET} --set=db.password={SECRET} --mode=fast"
    ) == ("deploy.sh --token=[REDACTED] --set=db.password=[REDACTED] --mode=[REDACTED]")


@pytest.mark.parametrize(
    ("cause", "shipped"),
    [
        (
            'kubectl patch deployment web -p {"spec":{"template":{"spec":{"containers":'
            f'[{{"name":"web","env":[{{"name":"KEY","value":"{SECRET}"}}]}}]}}}}}}}} '
            "--record=true",
            "kubectl patch deployment web -p [REDACTED] --record=true",
        ),
        (
            f'kubectl patch deployment web --patch={{"spec": {{"x": "{SECRET} more"}}}} --record',
            "kubectl patch deployment web --patch=[REDACTED] --record",
        ),
        (
            "kubectl patch deployment web --type=json -p "
            f'[{{"op":"replace","path":"/spec/template/spec/containers/0/env/0/value","value":"{SECRET}"}}]',
            "kubectl patch deployment web --type=json -p [REDACTED]",
        ),
        (
            f"kubectl run web --image=nginx:1.25 --env=API_KEY={SECRET} --record=true",
            "kubectl run web --image=nginx:1.25 --env=API_KEY=[REDACTED] --record=true",
        ),
        (
            f"kubectl create deployment web --image=nginx -- /app --api-key={SECRET} x",
            "kubectl create deployment web --image=nginx -- [REDACTED]",
        ),
        (
            f"kubectl create secret generic db --from-literal password {SECRET} -n shop",
            "kubectl create secret generic db --from-literal [REDACTED] -n shop",
        ),
        (
            "kubectl rollout undo deployment/web --to-revision=3 -n shop",
            "kubectl rollout undo deployment/web --to-revision=3 -n shop",
        ),
        (
            "kubectl apply --filename=deploy/web.yaml --record=true --server-side",
            "kubectl apply --filename=deploy/web.yaml --record=true --server-side",
        ),
        ("Deploy v1.4.2 by pipeline 1234", "Deploy v1.4.2 by pipeline 1234"),
        (
            f"kubectl apply --filename=https://example.com/web.yaml?token={SECRET} --record",
            "kubectl apply --filename=[REDACTED] --record",
        ),
        (
            f"kubectl apply -f https://ci:{SECRET}@git.example.com/web.yaml -n shop",
            "kubectl apply -f [REDACTED] -n shop",
        ),
        (
            "kubectl rollout restart deployment --selector=app=web,tier!=db -n shop",
            "kubectl rollout restart deployment --selector=app=web,tier!=db -n shop",
        ),
        (
            "kubectl set image deployment/web web=nginx@sha256:0123abcd --record=true",
            "kubectl set image deployment/web web=nginx@sha256:0123abcd --record=true",
        ),
    ],
)
def test_change_cause_keeps_only_words_known_to_be_safe(cause: str, shipped: str) -> None:
    # Recorded command lines lose their quotes: a value of any flag but the known-safe
    # ones, a patch body, and anything after `--` can hold a secret.
    assert sanitize.change_cause(cause) == shipped


def test_labels_are_sorted_and_never_redacted() -> None:
    assert sanitize.labels({"b": "2", "secret-kind": "tls", "a": "1"}) == {
        "a": "1",
        "b": "2",
        "secret-kind": "tls",
    }
    assert sanitize.labels(None) == {}


CONTAINER = {
    "name": "web",
    "image": "registry.example.com/shop/web:1.4.2",
    "command": ["/bin/sh", "-c", f"export PW={SECRET}; exec web"],
    "args": ["--db-password", SECRET],
    "ports": [{"name": "http", "containerPort": 8080, "protocol": "TCP"}, {"containerPort": 9090}],
    "env": [
        {"name": "LOG_LEVEL", "value": "debug"},
        {"name": "INLINE_PASSWORD", "value": SECRET},
        {"name": "DB_PASSWORD", "valueFrom": {"secretKeyRef": {"name": "db", "key": "password"}}},
        {"name": "MODE", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "mode"}}},
        {
            "name": "POD_IP",
            "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "status.podIP"}},
        },
        {
            "name": "CPU_LIMIT",
            "valueFrom": {"resourceFieldRef": {"containerName": "web", "resource": "limits.cpu"}},
        },
    ],
    "envFrom": [
        {"configMapRef": {"name": "web-config"}},
        {"prefix": "DB_", "secretRef": {"name": "db-credentials"}},
    ],
    "resources": {"requests": {"memory": "128Mi", "cpu": "100m"}, "limits": {"memory": "256Mi"}},
    "volumeMounts": [
        {"name": "data", "mountPath": "/data"},
        {"name": "tls", "mountPath": "/etc/tls", "readOnly": True, "subPath": "tls.crt"},
    ],
    "livenessProbe": {
        "httpGet": {
            "path": "/healthz",
            "port": 8080,
            "httpHeaders": [{"name": "X-Token", "value": SECRET}],
        }
    },
    "readinessProbe": {"exec": {"command": ["check", f"--token={SECRET}"]}},
    "startupProbe": None,
    "terminationMessagePath": "/dev/termination-log",
    "imagePullPolicy": "IfNotPresent",
}

SANITIZED_CONTAINER = {
    "name": "web",
    "image": "registry.example.com/shop/web:1.4.2",
    "image_ref": {
        "registry": "registry.example.com",
        "repository": "shop/web",
        "tag": "1.4.2",
        "digest": None,
    },
    "ports": [
        {"name": "http", "container_port": 8080, "protocol": "TCP"},
        {"name": None, "container_port": 9090, "protocol": "TCP"},
    ],
    "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"memory": "256Mi"}},
    "env": [
        {"name": "LOG_LEVEL", "from": None},
        {"name": "INLINE_PASSWORD", "from": None},
        {"name": "DB_PASSWORD", "from": "secretKeyRef", "secret": "db", "key": "password"},
        {"name": "MODE", "from": "configMapKeyRef", "config_map": "cfg", "key": "mode"},
        {"name": "POD_IP", "from": "fieldRef", "field_path": "status.podIP"},
        {
            "name": "CPU_LIMIT",
            "from": "resourceFieldRef",
            "resource": "limits.cpu",
            "container": "web",
        },
    ],
    "env_from": [
        {"from": "configMapRef", "name": "web-config", "prefix": None},
        {"from": "secretRef", "name": "db-credentials", "prefix": "DB_"},
    ],
    "volume_mounts": [
        {"name": "data", "mount_path": "/data", "read_only": False},
        {"name": "tls", "mount_path": "/etc/tls", "read_only": True},
    ],
    "probes": {"liveness": "httpGet", "readiness": "exec", "startup": None},
}


def test_containers_keep_identities_and_drop_values() -> None:
    decoded = msgspec.json.decode(msgspec.json.encode([CONTAINER]), type=list[Container])
    shipped = sanitize.pod_containers(PodSpec(containers=decoded))["containers"]
    assert shipped == [SANITIZED_CONTAINER]
    encoded = msgspec.json.encode(shipped)
    assert SECRET.encode() not in encoded
    assert b"debug" not in encoded  # a literal env value, however harmless
    assert b"/bin/sh" not in encoded
    assert b"healthz" not in encoded  # probe handlers are reduced to their type
    assert sanitize.pod_containers(PodSpec())["containers"] == []


def test_a_minimal_container_decodes_and_normalizes() -> None:
    decoded = msgspec.json.decode(b'{"name": "x", "image": "busybox"}', type=Container)
    assert sanitize.pod_containers(PodSpec(containers=[decoded]))["containers"] == [
        {
            "name": "x",
            "image": "busybox",
            "image_ref": {
                "registry": "docker.io",
                "repository": "library/busybox",
                "tag": "latest",
                "digest": None,
            },
            "ports": [],
            "resources": {"requests": {}, "limits": {}},
            "env": [],
            "env_from": [],
            "volume_mounts": [],
            "probes": {"liveness": None, "readiness": None, "startup": None},
        }
    ]


def test_images_cover_containers_and_init_containers() -> None:
    spec = msgspec.json.decode(
        b'{"containers": [{"name": "web", "image": "nginx:1.25"}],'
        b' "initContainers": [{"name": "migrate", "image": "ghcr.io/o/m@sha256:abc"}]}',
        type=PodSpec,
    )
    assert sanitize.pod_containers(spec)["images"] == [
        {
            "container": "web",
            "init": False,
            "image": "nginx:1.25",
            "registry": "docker.io",
            "repository": "library/nginx",
            "tag": "1.25",
            "digest": None,
        },
        {
            "container": "migrate",
            "init": True,
            "image": "ghcr.io/o/m@sha256:abc",
            "registry": "ghcr.io",
            "repository": "o/m",
            "tag": None,
            "digest": "sha256:abc",
        },
    ]


def test_selector() -> None:
    sel = msgspec.json.decode(
        b'{"matchLabels": {"b": "2", "a": "1"}, "matchExpressions":'
        b' [{"key": "tier", "operator": "In", "values": ["web", "api"]}]}',
        type=LabelSelector,
    )
    assert sanitize.selector(sel) == {
        "match_labels": {"a": "1", "b": "2"},
        "match_expressions": [{"key": "tier", "operator": "In", "values": ["api", "web"]}],
    }
    assert sanitize.selector(LabelSelector()) == {"match_labels": {}, "match_expressions": []}
    assert sanitize.selector(None) is None


def test_conditions_are_sorted_without_heartbeat_times() -> None:
    raw = [
        {
            "type": "Ready",
            "status": "True",
            "reason": "KubeletReady",
            "message": "kubelet is posting ready status",
            "lastHeartbeatTime": "2026-12-02T11:59:00Z",
            "lastTransitionTime": "2026-12-01T08:00:00Z",
        },
        {
            "type": "MemoryPressure",
            "status": "False",
            "lastProbeTime": "2026-12-02T11:59:00Z",
            "lastUpdateTime": "2026-12-02T11:59:00Z",
            "lastTransitionTime": "2026-12-01T08:00:00Z",
        },
    ]
    conds = msgspec.json.decode(msgspec.json.encode(raw), type=list[Condition])
    assert sanitize.conditions(conds) == [
        {
            "type": "MemoryPressure",
            "status": "False",
            "reason": None,
            "message": None,
            "last_transition_time": "2026-12-01T08:00:00Z",
        },
        {
            "type": "Ready",
            "status": "True",
            "reason": "KubeletReady",
            "message": "kubelet is posting ready status",
            "last_transition_time": "2026-12-01T08:00:00Z",
        },
    ]
    assert sanitize.conditions(conds, message=False)[1] == {
        "type": "Ready",
        "status": "True",
        "reason": "KubeletReady",
        "last_transition_time": "2026-12-01T08:00:00Z",
    }


def test_kept_metadata_loses_only_the_values_no_record_carries() -> None:
    meta = ObjectMeta(
        name="web",
        annotations={
            "kubectl.kubernetes.io/last-applied-configuration": '{"big": "manifest"}',
            "argocd.argoproj.io/sync-token": "abc123",
            "team": "shop",
        },
    )
    slim = sanitize.without_dropped_values(meta)
    assert slim.annotations == {
        "kubectl.kubernetes.io/last-applied-configuration": "",
        "argocd.argoproj.io/sync-token": "",
        "team": "shop",
    }
    assert sanitize.safe_annotations(slim.annotations) == sanitize.safe_annotations(
        meta.annotations
    )
    # A key no record carries can still decide one: this one says Argo CD made the object.
    assert revision.rollout_type({}, slim.annotations) == "gitops"
    untouched = ObjectMeta(name="api", annotations={"team": "shop"})
    assert sanitize.without_dropped_values(untouched) is untouched


def test_a_remembered_annotation_value_is_remembered_with_its_key() -> None:
    # Short values are remembered per key and value: the same text is dropped under a key
    # that names a credential or a manifest's and masked under another, whichever came
    # first; a long one is judged each time, the same way.
    value = "password=hunter2"
    for _ in range(2):
        assert sanitize.annotation_value("example.com/db-password", value) is None
        assert sanitize.annotation_value("kapp.k14s.io/original", value) is None
        assert sanitize.annotation_value("example.com/note", value) == f"password={redact.REDACTED}"
        assert sanitize.annotation_value("example.com/note", "db-main") == "db-main"
    long = "token=" + "x" * 200
    assert sanitize.annotation_value("example.com/note", long) == f"token={redact.REDACTED}"
