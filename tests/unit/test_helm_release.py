"""Helm release Secrets: decoded exactly as Helm stores them, and nothing secret gets out."""

from __future__ import annotations

import base64
import gzip
import json
from typing import Any

import msgspec
import pytest
import structlog.testing

from collector.normalize.base import Context, ObjectTooLarge
from collector.normalize.helm_release import (
    MAX_RELEASE_BYTES,
    HelmReleaseNormalizer,
    Secret,
    release_key,
)
from collector.relations import Relations
from sandbox import objects

PLANTED = {
    "values": "values-pw-0a1b2c",
    "chart_default": "default-pw-3d4e5f",
    "notes": "notes-token-6a7b8c",
    "template": "template-key-9d0e1f",
    "file": "file-cred-2a3b4c",
    "manifest_secret": "manifest-secret-5d6e7f",
    "manifest_env": "manifest-env-8a9b0c",
    "hook": "hook-pw-1d2e3f",
}

MANIFEST = f"""---
# Source: shop/templates/secret.yaml
apiVersion: v1
kind: Secret
metadata:
  name: shop-db
  labels:
    app.kubernetes.io/managed-by: Helm
type: Opaque
stringData:
  password: "{PLANTED["manifest_secret"]}"
---
# Source: shop/templates/service.yaml
apiVersion: v1
kind: Service
metadata:
  name: shop-web
  namespace: shop
spec:
  selector:
    app: shop-web
  ports:
    - port: 80
      targetPort: 8080
---
# Source: shop/templates/deployment.yaml
apiVersion: apps/v1
kind: Deployment
metadata:
  name: shop-web
  namespace: shop
spec:
  replicas: 2
  selector:
    matchLabels:
      app: shop-web
  template:
    metadata:
      labels:
        app: shop-web
    spec:
      containers:
        - name: web
          image: ghcr.io/acme/shop:2.7.0
          env:
            - name: SESSION_KEY
              value: "{PLANTED["manifest_env"]}"
---
"""


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def release_json() -> dict[str, Any]:
    """A release as Helm 3 marshals it (byte fields are base64, as Go encodes []byte)."""
    return {
        "name": "shop",
        "info": {
            "first_deployed": "2026-11-30T10:00:00.123456789+01:00",
            "last_deployed": "2026-12-02T11:00:00.987654321+01:00",
            "deleted": "",
            "description": "Upgrade complete",
            "status": "deployed",
            "notes": f"Log in with admin / {PLANTED['notes']}",
        },
        "chart": {
            "metadata": {
                "name": "shop",
                "version": "1.4.2",
                "description": "The shop",
                "apiVersion": "v2",
                "appVersion": "2.7.0",
                "type": "application",
            },
            "lock": None,
            "templates": [
                {
                    "name": "templates/secret.yaml",
                    "data": b64(f"stringData:\n  key: {PLANTED['template']}\n"),
                }
            ],
            "values": {"db": {"password": PLANTED["chart_default"]}, "replicas": 2},
            "schema": None,
            "files": [{"name": "files/creds.txt", "data": b64(PLANTED["file"])}],
        },
        "config": {"db": {"password": PLANTED["values"]}},
        "manifest": MANIFEST,
        "hooks": [
            {
                "name": "shop-migrate",
                "kind": "Job",
                "path": "shop/templates/migrate.yaml",
                "manifest": f"apiVersion: batch/v1\nkind: Job\n# {PLANTED['hook']}\n",
                "events": ["pre-upgrade"],
                "last_run": {"started_at": "", "completed_at": "", "phase": ""},
            }
        ],
        "version": 7,
        "namespace": "shop",
    }


def secret(
    data_release: str | None,
    *,
    name: str = "sh.helm.release.v1.shop.v7",
    kind: str = "helm.sh/release.v1",
) -> Secret:
    doc = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": name,
            "namespace": "shop",
            "uid": "e8c1f9a2-3b4d-4e5f-9a6b-7c8d9e0f1a2b",
            "resourceVersion": "99120",
            "creationTimestamp": "2026-12-02T10:00:00Z",
            "labels": {
                "name": "shop",
                "owner": "helm",
                "status": "deployed",
                "version": "7",
                "modifiedAt": "1764669600",
            },
        },
        "type": kind,
        "data": {} if data_release is None else {"release": data_release},
    }
    return msgspec.json.decode(msgspec.json.encode(doc), type=Secret)


CTX = Context(lookups=Relations())

EXPECTED = {
    "name": "shop",
    "namespace": "shop",
    "revision": 7,
    "status": "deployed",
    "first_deployed": "2026-11-30T09:00:00.123Z",
    "last_deployed": "2026-12-02T10:00:00.987Z",
    "deleted": None,
    "chart": "shop",
    "chart_version": "1.4.2",
    "app_version": "2.7.0",
    "resources": [
        {"api_version": "v1", "kind": "Secret", "namespace": None, "name": "shop-db"},
        {"api_version": "v1", "kind": "Service", "namespace": "shop", "name": "shop-web"},
        {"api_version": "apps/v1", "kind": "Deployment", "namespace": "shop", "name": "shop-web"},
    ],
}


@pytest.mark.parametrize("gzipped", [True, False])
def test_a_release_secret_becomes_one_record_with_exactly_the_allowed_fields(
    gzipped: bool,
) -> None:
    stored = secret(objects.api_encoded(objects.helm_storage(release_json(), gzipped=gzipped)))
    records = HelmReleaseNormalizer().upserts(stored, CTX)
    [record] = records
    assert (record.kind, record.op, record.key) == ("helm_release", "upsert", "shop/shop/v7")
    assert (record.namespace, record.name) == ("shop", "sh.helm.release.v1.shop.v7")
    assert record.data == EXPECTED
    encoded = msgspec.json.encode(records)
    for planted in PLANTED.values():
        assert planted.encode() not in encoded


def test_a_deleted_release_and_its_delete_record() -> None:
    release = release_json()
    release["info"].update(status="uninstalled", deleted="2026-12-03T08:00:00Z")
    [record] = HelmReleaseNormalizer().upserts(
        secret(objects.api_encoded(objects.helm_storage(release))), CTX
    )
    assert record.data["status"] == "uninstalled"
    assert record.data["deleted"] == "2026-12-03T08:00:00.000Z"
    # A delete needs the Secret's name only (a relist may know nothing else).
    [gone] = HelmReleaseNormalizer().deletes(secret(None), CTX)
    assert (gone.op, gone.key, gone.data) == ("delete", "shop/shop/v7", {})


def test_release_keys_come_from_the_secret_name() -> None:
    assert release_key("shop", "sh.helm.release.v1.shop.v7") == "shop/shop/v7"
    assert release_key("ops", "sh.helm.release.v1.my.app.v12") == "ops/my.app/v12"
    assert release_key("ops", "db-credentials") is None


def _corrupt_payloads() -> dict[str, str]:
    good_gzip = gzip.compress(json.dumps(release_json()).encode())
    bad_yaml = release_json()
    bad_yaml["manifest"] = f"kind: Secret\nstringData: {{password: {PLANTED['manifest_secret']}\n"
    # Nested too deep: the C loader stops scanning, the pure-Python one hits RecursionError.
    deep_yaml = release_json()
    deep_yaml["manifest"] = "kind: ConfigMap\ndata: " + "[" * 20_000 + "]" * 20_000 + "\n"
    return {
        "not base64": "!!not-base64!!",
        "inner not base64": objects.api_encoded(b"@@@" + PLANTED["values"].encode()),
        "not json": objects.api_encoded(base64.b64encode(PLANTED["values"].encode())),
        "truncated gzip": objects.api_encoded(base64.b64encode(good_gzip[: len(good_gzip) // 2])),
        "wrong shape": objects.api_encoded(
            objects.helm_storage({"name": "shop", "version": "seven"})
        ),
        "no revision": objects.api_encoded(
            objects.helm_storage({"name": "shop", "config": PLANTED})
        ),
        "bad manifest": objects.api_encoded(objects.helm_storage(bad_yaml)),
        "manifest nested too deep": objects.api_encoded(objects.helm_storage(deep_yaml)),
    }


@pytest.mark.parametrize(
    "payload", list(_corrupt_payloads().values()), ids=list(_corrupt_payloads())
)
def test_a_corrupt_payload_gives_no_record_and_one_clean_warning(payload: str) -> None:
    with structlog.testing.capture_logs() as logs:
        assert HelmReleaseNormalizer().upserts(secret(payload), CTX) == []
    [entry] = logs
    assert entry["event"] == "helm_release_undecodable"
    assert entry["log_level"] == "warning"
    assert (entry["namespace"], entry["secret"]) == ("shop", "sh.helm.release.v1.shop.v7")
    assert entry["stage"] in {"base64", "gzip", "json", "manifest"}
    text = repr(entry)
    for planted in PLANTED.values():
        assert planted not in text
    assert "password" not in text


def test_an_unquoted_date_that_does_not_exist_is_a_string_as_in_helm() -> None:
    # Go's YAML keeps `2024-02-30` a string; a timestamp-resolving loader raises ValueError.
    release = release_json()
    release["manifest"] = (
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: dates\n"
        "data:\n  due: 2024-02-30\n  month: 2024-13-01\n"
    )
    [record] = HelmReleaseNormalizer().upserts(
        secret(objects.api_encoded(objects.helm_storage(release))), CTX
    )
    assert record.data["resources"] == [
        {"api_version": "v1", "kind": "ConfigMap", "namespace": None, "name": "dates"}
    ]


def test_a_secret_without_release_data_is_reported() -> None:
    with structlog.testing.capture_logs() as logs:
        assert HelmReleaseNormalizer().upserts(secret(None), CTX) == []
    assert [e["event"] for e in logs] == ["helm_release_undecodable"]


def test_other_secrets_and_a_disabled_switch_give_nothing() -> None:
    encoded = objects.api_encoded(objects.helm_storage(release_json()))
    normalizer = HelmReleaseNormalizer()
    opaque = secret(encoded, name="db-credentials", kind="Opaque")
    assert normalizer.upserts(opaque, CTX) == []
    assert normalizer.deletes(opaque, CTX) == []
    off = Context(lookups=Relations(), collect_helm_releases=False)
    assert normalizer.upserts(secret(encoded), off) == []
    assert normalizer.deletes(secret(encoded), off) == []


# -- as listed: metadata only, the body read one Secret at a time ---------------------------


def metadata_only(full: Secret) -> Secret:
    """The Secret as a metadata list or watch hands it over: no type, no data."""
    return msgspec.structs.replace(full, type="", data=None)


def reading(*bodies: Secret | None) -> tuple[Context, list[tuple[str, str]]]:
    """A context whose Secret reads answer `bodies` in turn (None: the Secret is gone)."""
    reads: list[tuple[str, str]] = []
    answers = iter(bodies)

    def fetch(namespace: str, name: str) -> bytes | None:
        reads.append((namespace, name))
        body = next(answers)
        return None if body is None else msgspec.json.encode(body)

    return Context(lookups=Relations(), fetch_secret=fetch), reads


def test_a_listed_release_is_read_by_name_and_becomes_the_same_record() -> None:
    full = secret(objects.api_encoded(objects.helm_storage(release_json())))
    ctx, reads = reading(full)
    [record] = HelmReleaseNormalizer().upserts(metadata_only(full), ctx)
    assert reads == [("shop", "sh.helm.release.v1.shop.v7")]
    assert (record.key, record.data) == ("shop/shop/v7", EXPECTED)


def test_a_release_gone_before_its_body_was_read_gives_no_record_and_no_warning() -> None:
    ctx, _ = reading(None)
    with structlog.testing.capture_logs() as logs:
        assert HelmReleaseNormalizer().upserts(metadata_only(secret(None)), ctx) == []
    assert logs == []


def test_a_release_over_the_decompression_cap_gives_no_record_and_one_warning() -> None:
    # A few hundred KiB of gzip that would inflate past the cap: read only up to it.
    release = release_json()
    release["manifest"] = "kind: ConfigMap\n# " + "a" * (MAX_RELEASE_BYTES + 1024) + "\n"
    full = secret(objects.api_encoded(objects.helm_storage(release)))
    assert len(full.data["release"]) < 1024 * 1024  # type: ignore[index]
    ctx, _ = reading(full)
    with structlog.testing.capture_logs() as logs:
        assert HelmReleaseNormalizer().upserts(metadata_only(full), ctx) == []
    [entry] = logs
    assert (entry["event"], entry["log_level"]) == ("helm_release_undecodable", "warning")
    assert (entry["secret"], entry["stage"]) == ("sh.helm.release.v1.shop.v7", "gzip")
    assert "exc_info" not in entry and "exception" not in entry


def test_a_secret_too_large_to_read_gives_no_record_and_one_warning() -> None:
    def fetch(namespace: str, name: str) -> bytes:
        raise ObjectTooLarge("over 4 MiB")

    ctx = Context(lookups=Relations(), fetch_secret=fetch)
    with structlog.testing.capture_logs() as logs:
        assert HelmReleaseNormalizer().upserts(metadata_only(secret(None)), ctx) == []
    assert [(e["event"], e["stage"], e["error"]) for e in logs] == [
        ("helm_release_undecodable", "secret", "over 4 MiB")
    ]


def test_the_manifest_is_read_without_building_its_documents() -> None:
    # Anchors, aliases, lists and scalars that are not strings, as YAML allows them.
    release = release_json()
    release["manifest"] = (
        "---\n- just\n- a list\n---\nplain text\n---\n"
        "apiVersion: v1\nkind: ConfigMap\nmetadata: &meta\n  name: 42\n  namespace: ops\n"
        "data: {a: [1, {b: c}]}\n---\n"
        "apiVersion: v1\nkind: Service\nmetadata:\n  labels: *meta\n  name: 'quoted'\n"
        "  annotations: {x: y}\n"
    )
    [record] = HelmReleaseNormalizer().upserts(
        secret(objects.api_encoded(objects.helm_storage(release))), CTX
    )
    assert record.data["resources"] == [
        {"api_version": "v1", "kind": "ConfigMap", "namespace": "ops", "name": None},
        {"api_version": "v1", "kind": "Service", "namespace": None, "name": "quoted"},
    ]
