"""The secrets proof: nothing secret leaves the cluster, whatever path it could take.

A cluster is filled with distinctive strings, one per place a secret lives (env values of
containers and init containers, args, commands, probe and hook handlers, Secret data, Helm
release values, notes, templates and manifests, last-applied manifests, annotations named
like secrets, change causes, managedFields, a terminated container's message, an exec
probe's output and a lifecycle hook's command and output in Warning Events), and one per
form a credential takes in the free text that is shipped on purpose (`plant_free_text`):
user:password in URLs, proxy snippets, kapp's original manifest, `Authorization` headers,
`key=value` and flags naming a credential, `-pVALUE`, GitHub, AWS, Slack and JWT tokens and
PEM blocks, in annotations, change causes, a failed Job's log, a waiting message, a
sandbox error, admission denials in an Event and a Deployment's condition, and a
scheduler's Event the collector keeps in its state file. The real agent runs against it
and ships to the fake platform; then every byte that reached the platform, every line the
agent logged at debug level and every byte of its queue files (the outbox and the
collector's state file) is searched for each string, and for its base64 form. `preview` is
searched the same way.

A positive control makes sure the search looks at real records: env var names, images,
the Helm release and chart version, the failed Job's log lines, the redaction markers and
the fixed wording around the masked credentials must all be there.
"""

from __future__ import annotations

import base64
import contextlib
import json
import signal
import subprocess
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest

from sandbox import objects
from sandbox.kube import FakeKube
from sandbox.platform import FakePlatform, Status
from tests.agent_process import agent_env, preview_env, start_agent
from tests.waiting import wait_until

NS = "vault"
JOB_LOG_LINE = "ERROR: upload failed: connection reset by peer"
JOB_LOG = f"backup: uploading archive\n{JOB_LOG_LINE}\n"


class Planted:
    """Hands out one distinctive secret per place and remembers where each went."""

    def __init__(self) -> None:
        self.values: dict[str, str] = {}

    def __call__(self, place: str) -> str:
        assert place not in self.values, f"{place} planted twice"
        self.values[place] = f"SECRET-{place}-c0ffee"
        return self.values[place]

    def exact(self, place: str, value: str) -> str:
        """A secret of a given shape (a token format), remembered like the others."""
        assert place not in self.values, f"{place} planted twice"
        assert value not in self.values.values()
        self.values[place] = value
        return value

    def needles(self) -> dict[str, bytes]:
        """Each secret as text and as base64 (how Secret data and Helm's []byte carry it)."""
        found = {}
        for place, value in self.values.items():
            found[place] = value.encode()
            found[f"{place} (base64)"] = base64.b64encode(value.encode())
        return found


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def last_applied(secret: str) -> str:
    return json.dumps({"spec": {"containers": [{"env": [{"name": "K", "value": secret}]}]}})


def managed_fields(secret: str) -> list[dict[str, Any]]:
    return [
        {
            "manager": "kubectl-client-side-apply",
            "operation": "Update",
            "apiVersion": "apps/v1",
            "fieldsType": "FieldsV1",
            "fieldsV1": {"f:metadata": {"f:annotations": {f"f:{secret}": {}}}},
        }
    ]


def pod_spec(plant: Planted, owner: str) -> dict[str, Any]:
    """A pod spec with a secret in every place a container can carry one."""
    return {
        "initContainers": [
            {
                "name": "migrate",
                "image": "registry.example/shop/migrate:3.1",
                "command": ["/migrate", plant(f"{owner}-init-command")],
                "args": [f"--dsn={plant(f'{owner}-init-args')}"],
                "env": [{"name": "MIGRATE_DSN", "value": plant(f"{owner}-init-env")}],
            }
        ],
        "containers": [
            {
                "name": "app",
                "image": "registry.example/shop/web:1.4.2",
                "command": ["/bin/web", f"--token={plant(f'{owner}-command')}"],
                "args": [f"--password={plant(f'{owner}-args')}"],
                "env": [
                    {"name": "DB_PASSWORD", "value": plant(f"{owner}-env")},
                    {"name": "API_KEY", "valueFrom": {"secretKeyRef": {"name": "api", "key": "k"}}},
                ],
                "livenessProbe": {
                    "httpGet": {
                        "path": "/healthz",
                        "port": 8080,
                        "httpHeaders": [
                            {"name": "Authorization", "value": plant(f"{owner}-probe-header")}
                        ],
                    }
                },
                "readinessProbe": {"exec": {"command": ["check", plant(f"{owner}-probe-exec")]}},
                "lifecycle": {
                    "postStart": {"exec": {"command": ["hook", plant(f"{owner}-lifecycle")]}}
                },
            }
        ],
    }


def terminated(message: str, *, exit_code: int = 1, container_id: str) -> dict[str, Any]:
    return {
        "exitCode": exit_code,
        "reason": "Error" if exit_code else "Completed",
        "message": message,
        "startedAt": "2026-12-02T03:00:01Z",
        "finishedAt": "2026-12-02T03:00:09Z",
        "containerID": f"containerd://{container_id}",
    }


# -- the cluster ------------------------------------------------------------------------------


def plant_workloads(kube: FakeKube, plant: Planted) -> None:
    kube.create(
        {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {
                "name": NS,
                "annotations": {
                    "kubectl.kubernetes.io/last-applied-configuration": last_applied(
                        plant("namespace-last-applied")
                    )
                },
            },
        }
    )
    template_labels = {"app": "web"}
    web = kube.create(
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {
                "name": "web",
                "namespace": NS,
                "labels": {"app": "web", "app.kubernetes.io/managed-by": "Helm"},
                "annotations": {
                    "deployment.kubernetes.io/revision": "2",
                    "meta.helm.sh/release-name": "shop",
                    "kubectl.kubernetes.io/last-applied-configuration": last_applied(
                        plant("deployment-last-applied")
                    ),
                    "db-password": plant("deployment-db-password-annotation"),
                    "kubernetes.io/change-cause": (
                        f"deploy.sh --token={plant('deployment-change-cause-flag')} && "
                        "kubectl patch deployment web -p "
                        '{"spec":{"template":{"spec":{"containers":[{"name":"web","env":'
                        f'[{{"name":"K","value":"{plant("deployment-change-cause-patch")}"}}]'
                        "}]}}}}"
                    ),
                },
                "managedFields": managed_fields(plant("deployment-managed-fields")),
            },
            "spec": {
                "replicas": 2,
                "selector": {"matchLabels": template_labels},
                "template": {
                    "metadata": {
                        "labels": template_labels,
                        "annotations": {"api-token": plant("template-token-annotation")},
                    },
                    "spec": pod_spec(plant, "deployment"),
                },
            },
        }
    )
    replicaset = kube.create(
        {
            "apiVersion": "apps/v1",
            "kind": "ReplicaSet",
            "metadata": {
                "name": "web-7c9d",
                "namespace": NS,
                "labels": template_labels,
                "annotations": {
                    "deployment.kubernetes.io/revision": "2",
                    "kubernetes.io/change-cause": (
                        "kubectl set env deployment/web "
                        f"--env=API_KEY={plant('replicaset-change-cause-env-flag')} "
                        f"GREETING=hello {plant('replicaset-change-cause-spaced-value')} "
                        "--record=true"
                    ),
                },
                "ownerReferences": objects.controlled_by(web),
                "managedFields": managed_fields(plant("replicaset-managed-fields")),
            },
            "spec": {
                "replicas": 2,
                "selector": {"matchLabels": template_labels},
                "template": {
                    "metadata": {"labels": template_labels},
                    "spec": pod_spec(plant, "replicaset"),
                },
            },
        }
    )
    pod = kube.create(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": "web-7c9d-x2x4q",
                "namespace": NS,
                "labels": template_labels,
                "ownerReferences": objects.controlled_by(replicaset),
            },
            "spec": {"nodeName": "node-1", **pod_spec(plant, "pod")},
            "status": {
                "phase": "Running",
                "initContainerStatuses": [
                    {
                        "name": "migrate",
                        "image": "registry.example/shop/migrate:3.1",
                        "ready": True,
                        "state": {
                            "terminated": terminated(
                                plant("pod-init-terminated-message"),
                                exit_code=0,
                                container_id="init-1",
                            )
                        },
                    }
                ],
                "containerStatuses": [
                    {
                        "name": "app",
                        "image": "registry.example/shop/web:1.4.2",
                        "ready": False,
                        "restartCount": 3,
                        "state": {
                            "waiting": {
                                "reason": "CrashLoopBackOff",
                                "message": "back-off 40s restarting failed container=app",
                            }
                        },
                        "lastState": {
                            "terminated": terminated(
                                plant("pod-terminated-message"), container_id="app-3"
                            )
                        },
                    }
                ],
            },
        }
    )
    plant_events(kube, plant, pod)
    kube.create(
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {
                "name": "web",
                "namespace": NS,
                "annotations": {
                    "kubectl.kubernetes.io/last-applied-configuration": last_applied(
                        plant("service-last-applied")
                    ),
                    "external-dns.example/credentials": plant("service-credentials-annotation"),
                },
            },
            "spec": {"selector": template_labels, "ports": [{"port": 80}]},
        }
    )


def plant_events(kube: FakeKube, plant: Planted, pod: dict[str, Any]) -> None:
    """Warning Events whose messages carry what an exec probe printed and a hook's command."""
    output = plant("event-exec-probe-output")
    probe = objects.event(
        involved=pod,
        reason="Unhealthy",
        message=f"Readiness probe failed: psql: FATAL: password authentication failed: {output}\n",
        field_path="spec.containers{app}",
        count=7,
    )
    kube.create(probe)
    pod_name = f"{pod['metadata']['name']}_{NS}({pod['metadata']['uid']})"
    command = plant("event-hook-command")
    hook = objects.event(
        involved=pod,
        reason="FailedPostStartHook",
        message=f'Exec lifecycle hook ([hook {command}]) for Container "app" in Pod "{pod_name}"'
        f" failed - error: command 'hook {command}' exited with 2: ,"
        f' message: "{plant("event-hook-output")}\\n"',
        field_path="spec.containers{app}",
        series="17e0c1f2a3b4c5aa",
    )
    kube.create(hook)


def plant_cronjob(kube: FakeKube, plant: Planted) -> None:
    cron = kube.create(
        {
            "apiVersion": "batch/v1",
            "kind": "CronJob",
            "metadata": {
                "name": "backup",
                "namespace": NS,
                "annotations": {
                    "kubectl.kubernetes.io/last-applied-configuration": last_applied(
                        plant("cronjob-last-applied")
                    )
                },
            },
            "spec": {
                "schedule": "0 3 * * *",
                "jobTemplate": {"spec": {"template": {"spec": pod_spec(plant, "cronjob")}}},
            },
        }
    )
    job = kube.create(
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {
                "name": "backup-29001",
                "namespace": NS,
                "ownerReferences": objects.controlled_by(cron),
            },
            "spec": {"template": {"spec": pod_spec(plant, "job")}},
            "status": {
                "startTime": "2026-12-02T03:00:00Z",
                "failed": 1,
                "conditions": [
                    {
                        "type": "Failed",
                        "status": "True",
                        "reason": "BackoffLimitExceeded",
                        "message": "Job has reached the specified backoff limit",
                        "lastTransitionTime": "2026-12-02T03:00:10Z",
                    }
                ],
            },
        }
    )
    pod = "backup-29001-k8s7p"
    kube.create(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": pod,
                "namespace": NS,
                "ownerReferences": objects.controlled_by(job),
            },
            "spec": {"nodeName": "node-1", **pod_spec(plant, "job-pod")},
            "status": {
                "phase": "Failed",
                "containerStatuses": [
                    {
                        "name": "app",
                        "image": "registry.example/shop/web:1.4.2",
                        "state": {
                            "terminated": terminated(
                                plant("job-pod-terminated-message"), container_id="job-1"
                            )
                        },
                    }
                ],
            },
        }
    )
    # Shipped on purpose: the positive control, after the lines with credentials in them.
    kube.set_pod_log(NS, pod, "app", job_log_with_credentials(plant) + JOB_LOG)


# -- credentials in free text ------------------------------------------------------------------

API_POD = "api-5f6b-q9z8k"
GITHUB_CHANGE_CAUSE = "ghp_C0ffeeChangeCause0123456789abcdefghij"
PENDING_POD = "api-5f6b-w2c4m"
# What a credential looks like where a key names it.
CREDENTIAL_KEYS = (
    *("password", "passwd", "pwd", "secret", "token", "apikey", "api_key", "auth"),
    *("credential", "private_key", "Private-Key"),
)


def token_formats(plant: Planted, where: str) -> str:
    """One credential of each well-known format, as a sentence; `where` makes them unique."""
    tag = "".join(c for c in where.title() if c.isalnum())  # job-log -> JobLog
    github = plant.exact(f"{where}-github", f"ghp_C0ffee{tag}0123456789abcdefghij")
    pat = plant.exact(f"{where}-github-pat", f"github_pat_11C0FFEE_{tag}_0123456789abcdef")
    aws = plant.exact(f"{where}-aws", f"AKIA{tag.upper()[:10]:0<10}C0FFEE")
    slack = plant.exact(f"{where}-slack", f"xoxb-1234-5678-C0ffee{tag}")
    jwt = plant.exact(f"{where}-jwt", f"eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJhcGkifQ.C0ffee{tag}Sig")
    pem = plant.exact(f"{where}-pem", f"MIIEpAIBAAKCAQEAC0ffee{tag}Pem0123456789")
    return (
        f"pushed with {github} then {pat}, aws {aws}, slack {slack}, session {jwt}, key"
        f" -----BEGIN RSA PRIVATE KEY-----\n{pem}\n-----END RSA PRIVATE KEY----- loaded"
    )


def credential_assignments(plant: Planted, where: str) -> str:
    return " ".join(f"{key}={plant(f'{where}-{key}')}" for key in CREDENTIAL_KEYS)


def job_log_with_credentials(plant: Planted) -> str:
    pem = plant.exact("job-log-pem-line", "MIIEvQIBADANBgkqhkiG9w0BAQEFAASCC0ffeeJobLogPem")
    return (
        f"GET /upload Authorization: Bearer {plant('job-log-bearer')}\n"
        f"connecting to db with password={plant('job-log-db-password')}\n"
        f"{credential_assignments(plant, 'job-log')}\n"
        f"{token_formats(plant, 'job-log')}\n"
        f"-----BEGIN PRIVATE KEY-----\n{pem}\n-----END PRIVATE KEY-----\n"
        f"mysql --user=root --password {plant('job-log-password-flag')} -h db\n"
    )


def plant_free_text(kube: FakeKube, plant: Planted) -> None:
    """Credentials in the free text the agent ships on purpose (annotations, messages)."""
    kube.create(
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {
                "name": "edge",
                "namespace": NS,
                "annotations": {
                    "example.com/database": f"postgres://admin:{plant('url-postgres')}@db:5432/shop",
                    "example.com/upstream": f"https://svc:{plant('url-https')}@auth.example.com/v1",
                    "external-dns.alpha.kubernetes.io/webhook": (
                        f"http://dns:{plant('url-external-dns')}@external-dns-webhook:8888"
                    ),
                    "nginx.ingress.kubernetes.io/configuration-snippet": (
                        f'proxy_set_header Authorization "Basic {plant("snippet-configuration")}";'
                    ),
                    "nginx.ingress.kubernetes.io/server-snippet": (
                        f"set $upstream_token {plant('snippet-server')};"
                    ),
                    "nginx.ingress.kubernetes.io/auth-snippet": (
                        f"proxy_set_header X-Api-Key {plant('snippet-auth')};"
                    ),
                    "example.com/apikey": plant("annotation-apikey"),
                    "example.com/password": plant("annotation-password"),
                    "example.com/token": plant("annotation-token"),
                    "kapp.k14s.io/original": last_applied(plant("kapp-original")),
                    "example.com/notes": credential_assignments(plant, "notes-annotation"),
                    "example.com/tokens": token_formats(plant, "tokens-annotation"),
                    "example.com/owner": "team-shop",
                },
            },
            "spec": {"selector": {"app": "api"}, "ports": [{"port": 80}]},
        }
    )
    denial = (
        'admission webhook "deny-plaintext.example.com" denied the request: env value'
        " {} is not allowed"
    )
    api = kube.create(
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "api", "namespace": NS, "labels": {"app": "api"}},
            "spec": {
                "replicas": 2,
                "selector": {"matchLabels": {"app": "api"}},
                "template": {
                    "metadata": {"labels": {"app": "api"}},
                    "spec": {
                        "containers": [{"name": "app", "image": "registry.example/shop/api:2.0"}]
                    },
                },
            },
            "status": {
                "conditions": [
                    {
                        "type": "ReplicaFailure",
                        "status": "True",
                        "reason": "FailedCreate",
                        "message": denial.format(plant("condition-webhook-denial")),
                        "lastTransitionTime": "2026-12-02T11:00:00Z",
                    }
                ]
            },
        }
    )
    replicaset = kube.create(
        {
            "apiVersion": "apps/v1",
            "kind": "ReplicaSet",
            "metadata": {
                "name": "api-5f6b",
                "namespace": NS,
                "labels": {"app": "api"},
                "annotations": {
                    "deployment.kubernetes.io/revision": "1",
                    "kubernetes.io/change-cause": (
                        "kubectl run api --image=registry.example/shop/api:2.0 --command mysql"
                        f" -p{plant('change-cause-short-password')}"
                        f" {plant.exact('change-cause-github', GITHUB_CHANGE_CAUSE)}"
                    ),
                },
                "ownerReferences": objects.controlled_by(api),
            },
            "spec": {
                "replicas": 2,
                "selector": {"matchLabels": {"app": "api"}},
                "template": {
                    "metadata": {"labels": {"app": "api"}},
                    "spec": {
                        "containers": [{"name": "app", "image": "registry.example/shop/api:2.0"}]
                    },
                },
            },
        }
    )
    kube.create(
        objects.event(
            involved=replicaset,
            reason="FailedCreate",
            message="Error creating: " + denial.format(plant("event-webhook-denial")),
            series="17e0c1f2a3b4c5bb",
        )
    )
    pod = kube.create(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": API_POD,
                "namespace": NS,
                "labels": {"app": "api"},
                "ownerReferences": objects.controlled_by(replicaset),
            },
            "spec": {
                "nodeName": "node-1",
                "containers": [{"name": "app", "image": "registry.example/shop/api:2.0"}],
            },
            "status": {
                "phase": "Pending",
                "containerStatuses": [
                    {
                        "name": "app",
                        "image": "registry.example/shop/api:2.0",
                        "ready": False,
                        "state": {
                            "waiting": {
                                "reason": "CreateContainerError",
                                "message": "failed to create containerd task: exec:"
                                f' "/bin/api --db-password={plant("waiting-db-password")}":'
                                " permission denied",
                            }
                        },
                    }
                ],
            },
        }
    )
    kube.create(
        objects.event(
            involved=pod,
            reason="FailedCreatePodSandBox",
            # What a CNI plugin's error can quote: the command it sent, with its credentials.
            message="Failed to create pod sandbox: rpc error: code = Unknown desc = failed to"
            " setup network for sandbox 4f1c: plugin redis-cni failed: sent"
            f" auth admin {plant('sandbox-auth')}",
            series="17e0c1f2a3b4c5cc",
        )
    )
    kube.create(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": PENDING_POD,
                "namespace": NS,
                "labels": {"app": "api"},
                "ownerReferences": objects.controlled_by(replicaset),
            },
            "spec": {"containers": [{"name": "app", "image": "registry.example/shop/api:2.0"}]},
            "status": {
                "phase": "Pending",
                "conditions": [
                    {
                        "type": "PodScheduled",
                        "status": "False",
                        "reason": "Unschedulable",
                        "message": "0/1 nodes are available: extender"
                        f" https://sched:{plant('unschedulable-extender')}@extender:8888 failed.",
                        "lastTransitionTime": "2026-12-02T11:00:00Z",
                    }
                ],
            },
        }
    )
    # The scheduler's Event about a pod whose status does not say Unschedulable yet: the
    # collector keeps its message in its state file until the status says the same.
    unscheduled = kube.create(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": "api-5f6b-n8d7r",
                "namespace": NS,
                "labels": {"app": "api"},
                "ownerReferences": objects.controlled_by(replicaset),
            },
            "spec": {"containers": [{"name": "app", "image": "registry.example/shop/api:2.0"}]},
            "status": {"phase": "Pending"},
        }
    )
    kube.create(
        objects.event(
            involved=unscheduled,
            reason="FailedScheduling",
            message="0/1 nodes are available: extender"
            f" https://sched:{plant('scheduling-event-extender')}@extender:8888 failed.",
            series="17e0c1f2a3b4c5dd",
        )
    )


def plant_secrets(kube: FakeKube, plant: Planted) -> None:
    for name, labels in (("db-credentials", {}), ("looks-like-helm", {"owner": "helm"})):
        kube.create(
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {"name": name, "namespace": NS, "labels": labels},
                "type": "Opaque",
                "data": {"password": b64(plant(f"{name}-data"))},
                "stringData": {"token": plant(f"{name}-string-data")},
            }
        )
    manifest = f"""---
apiVersion: v1
kind: Secret
metadata:
  name: shop-db
  namespace: {NS}
stringData:
  password: {plant("helm-manifest-secret")}
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  namespace: {NS}
spec:
  template:
    spec:
      containers:
        - name: app
          env:
            - name: DB_PASSWORD
              value: {plant("helm-manifest-env")}
"""
    release = {
        "name": "shop",
        "namespace": NS,
        "version": 2,
        "info": {
            "first_deployed": "2026-11-30T10:00:00.123456789+01:00",
            "last_deployed": "2026-12-02T11:00:00.987654321+01:00",
            "status": "deployed",
            "description": "Upgrade complete",
            "notes": f"Log in with admin / {plant('helm-notes')}",
        },
        "chart": {
            "metadata": {"name": "shop", "version": "1.4.2", "appVersion": "2.7.0"},
            "templates": [{"name": "templates/secret.yaml", "data": b64(plant("helm-template"))}],
            "values": {"db": {"password": plant("helm-chart-values")}},
            "files": [{"name": "files/creds.txt", "data": b64(plant("helm-chart-file"))}],
        },
        "config": {"db": {"password": plant("helm-values")}},
        "manifest": manifest,
        "hooks": [{"name": "migrate", "manifest": f"# {plant('helm-hook')}\n"}],
    }
    labels = {"owner": "helm", "name": "shop", "status": "deployed", "version": "2"}
    storage = objects.helm_storage(release)
    kube.create(
        objects.helm_release_secret(
            name="shop", namespace=NS, revision=2, storage=storage, labels=labels
        )
    )


@pytest.fixture
def planted(kube: FakeKube) -> Planted:
    plant = Planted()
    kube.create({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "node-1"}})
    plant_workloads(kube, plant)
    plant_cronjob(kube, plant)
    plant_secrets(kube, plant)
    plant_free_text(kube, plant)
    return plant


# -- what to look for -------------------------------------------------------------------------


def leaks(planted: Planted, where: str, haystacks: Iterable[bytes]) -> list[str]:
    found = []
    for haystack in haystacks:
        found += [
            f"{place} in {where}"
            for place, needle in planted.needles().items()
            if needle in haystack
        ]
    return sorted(set(found))


def platform_bytes(platform: FakePlatform) -> Iterator[bytes]:
    for request in platform.requests:
        yield request.path.encode()
        yield request.body  # decompressed
        yield from (f"{name}: {value}".encode() for name, value in request.headers.items())


def queue_bytes(queue: Path) -> Iterator[bytes]:
    for path in queue.rglob("*"):
        if not path.is_file():
            continue
        with contextlib.suppress(FileNotFoundError):  # -wal and -shm come and go
            yield path.read_bytes()


def by_kind(records: Iterable[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    kinds: dict[str, list[dict[str, Any]]] = {}
    for record in records:
        kinds.setdefault(record["kind"], []).append(record)
    return kinds


SHIPPED_KINDS = {
    "namespace",
    "node",
    "deployment",
    "revision",
    "service",
    "cronjob",
    "job_execution",
    "pod_error",
    "helm_release",
    "cluster_metadata",
}


def complete(records: list[dict[str, Any]]) -> bool:
    """Every planted kind arrived, the Job with its log and both pods with their errors."""
    kinds = by_kind(records)
    jobs = kinds.get("job_execution", [])
    pods = {record["data"]["pod"] for record in kinds.get("pod_error", [])}
    from_events = {
        record["data"]["reason"]
        for record in kinds.get("pod_error", [])
        if record["data"]["details"]["source"] == "event"
    }
    return (
        set(kinds) >= SHIPPED_KINDS
        and any(job["data"]["logs"] for job in jobs)
        and {"web-7c9d-x2x4q", "backup-29001-k8s7p", API_POD, PENDING_POD} <= pods
        and {"ReadinessProbeFailed", "FailedPostStartHook", "CreatePodSandboxError"} <= from_events
        and "FailedCreate" in {record["data"]["reason"] for record in kinds.get("pod_error", [])}
        and {"api-5f6b", "web-7c9d"}
        <= {record["name"] for record in kinds.get("revision", []) if record.get("name")}
    )


def assert_the_expected_is_there(records: list[dict[str, Any]]) -> None:
    """The positive control: the search above looked at real, complete records."""
    kinds = by_kind(records)
    text = json.dumps(records)
    for expected in ("DB_PASSWORD", "MIGRATE_DSN", "registry.example/shop/web:1.4.2"):
        assert expected in text
    deployment = kinds["deployment"][-1]["data"]
    assert [env["name"] for env in deployment["containers"][0]["env"]] == ["DB_PASSWORD", "API_KEY"]
    assert "db-password" not in deployment["annotations"]  # a credential's name: dropped whole
    revision = kinds["revision"][-1]["data"]
    assert "API_KEY=[REDACTED]" in revision["change_cause"]
    release = kinds["helm_release"][-1]["data"]
    assert (release["name"], release["revision"], release["chart_version"]) == ("shop", 2, "1.4.2")
    assert [(r["kind"], r["name"]) for r in release["resources"]] == [
        ("Secret", "shop-db"),
        ("Deployment", "web"),
    ]
    logs = [line for job in kinds["job_execution"] for line in job["data"]["logs"] or []]
    assert JOB_LOG_LINE in logs
    probes = [
        r["data"] for r in kinds["pod_error"] if r["data"]["reason"] == "ReadinessProbeFailed"
    ]
    assert [probe["message"] for probe in probes] == ["Readiness probe failed: [REDACTED]"]
    assert_free_text_is_masked_and_readable(kinds)


def assert_free_text_is_masked_and_readable(kinds: dict[str, list[dict[str, Any]]]) -> None:
    """The credentials went, what was around them stayed."""
    [edge] = [r["data"] for r in kinds["service"] if r["name"] == "edge"][-1:]
    annotations = edge["annotations"]
    assert annotations["example.com/database"] == "postgres://[REDACTED]@db:5432/shop"
    assert "example.com/apikey" not in annotations  # a credential's name: dropped whole
    assert annotations["example.com/owner"] == "team-shop"
    assert annotations["example.com/notes"].startswith("password=[REDACTED] passwd=[REDACTED]")
    for dropped in ("kapp.k14s.io/original", "nginx.ingress.kubernetes.io/server-snippet"):
        assert dropped not in annotations
    logs = [line for job in kinds["job_execution"] for line in job["data"]["logs"] or []]
    assert "GET /upload Authorization: Bearer [REDACTED]" in logs
    assert "-----BEGIN PRIVATE KEY-----[REDACTED]-----END PRIVATE KEY-----" in logs
    errors = {r["data"]["reason"]: r["data"]["message"] for r in kinds["pod_error"]}
    assert errors["CreateContainerError"] == (
        'Container "app" is waiting: CreateContainerError: failed to create containerd task:'
        ' exec: "/bin/api --db-password=[REDACTED]": permission denied'
    )
    assert errors["CreatePodSandboxError"] == (
        "Failed to create pod sandbox: rpc error: code = Unknown desc = failed to setup network"
        " for sandbox 4f1c: plugin redis-cni failed: sent auth [REDACTED]"
    )
    assert errors["FailedCreate"] == (
        'Error creating: admission webhook "deny-plaintext.example.com" denied the request:'
        " [REDACTED]"
    )
    [api] = [r["data"] for r in kinds["deployment"] if r["name"] == "api"][-1:]
    assert api["conditions"][0]["message"].endswith("denied the request: [REDACTED]")
    [revision] = [r["data"] for r in kinds["revision"] if r["name"] == "api-5f6b"][-1:]
    assert revision["change_cause"].startswith("kubectl run api --image=registry.example")


def assert_no_secret_was_read(kube: FakeKube) -> None:
    """Only Helm release Secrets are ever asked for, and only the failed Job's pod log."""
    secrets = [request for request in kube.requests if request.resource == "secrets"]
    collections = [request for request in secrets if request.path == "/api/v1/secrets"]
    assert collections
    for request in collections:
        # Metadata only: no Secret's data travels in a list or a watch.
        assert "as=PartialObjectMetadata" in request.accept
        assert request.query.get("labelSelector") == "owner=helm"
        assert request.query.get("fieldSelector") == "type=helm.sh/release.v1"
    # Bodies are read one at a time, and only those of Helm's release Secrets.
    helm = {
        f"/api/v1/namespaces/{secret['metadata']['namespace']}/secrets/{secret['metadata']['name']}"
        for secret in kube.list("secrets")
        if secret.get("type") == "helm.sh/release.v1"
    }
    read = {request.path for request in secrets if request not in collections}
    assert read and read <= helm
    logs = {request.path for request in kube.requests if request.path.endswith("/log")}
    assert logs == {f"/api/v1/namespaces/{NS}/pods/backup-29001-k8s7p/log"}


# -- the proof --------------------------------------------------------------------------------


def test_no_planted_secret_leaves_the_cluster(
    planted: Planted, kube: FakeKube, kubeconfig: Path, platform: FakePlatform, tmp_path: Path
) -> None:
    queue = tmp_path / "queue"
    env = agent_env(
        platform,
        queue,
        KUBECONFIG=str(kubeconfig),
        LOG_LEVEL="debug",
        HEARTBEAT_SECONDS="1",
    )
    # The platform refuses at first, so the records sit in the queue files for a while.
    platform.fail_all("records", Status(503))
    agent = start_agent(env)
    try:
        wait_until(lambda: JOB_LOG_LINE.encode() in b"".join(queue_bytes(queue)))
        held = list(queue_bytes(queue))
        platform.fail_all("records", None)
        wait_until(lambda: complete(platform.received_records()))
        wait_until(lambda: platform.last_heartbeat is not None)
        agent.send_signal(signal.SIGTERM)
        stdout, stderr = agent.communicate(timeout=30)
    finally:
        agent.kill()
    assert agent.returncode == 0, stderr[-3000:]

    preview = subprocess.run(
        [sys.executable, "-m", "agent.cli", "preview"],
        env=preview_env(KUBECONFIG=str(kubeconfig), LOG_LEVEL="debug"),
        cwd=tmp_path,
        capture_output=True,
        timeout=30,
    )
    assert preview.returncode == 0, preview.stderr.decode()

    found = [
        *leaks(planted, "the platform's requests", platform_bytes(platform)),
        *leaks(planted, "the agent's output", [stdout.encode(), stderr.encode()]),
        *leaks(planted, "the queue files while they held records", held),
        *leaks(planted, "the queue files left behind", queue_bytes(queue)),
        *leaks(planted, "preview", [preview.stdout, preview.stderr]),
    ]
    assert not found, "leaked: " + ", ".join(found)

    assert_the_expected_is_there(platform.received_records())
    assert_the_expected_is_there([json.loads(line) for line in preview.stdout.splitlines()])
    assert_no_secret_was_read(kube)
