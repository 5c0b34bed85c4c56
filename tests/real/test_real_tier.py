"""The real tier itself: the session's control plane is the real thing, its audit log reads
back as request records, and where no control plane can run its tests skip with one line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sandbox import controlplane
from sandbox.controlplane import ControlPlane, ControlPlaneError
from tests.real_cluster import NewNamespace

ROOT = Path(__file__).resolve().parents[2]


def test_the_control_plane_is_a_real_server_whose_audit_log_reads_back_as_requests(
    control_plane: ControlPlane, real_namespace: NewNamespace
) -> None:
    assert control_plane.version.startswith("v1.36")
    ns = real_namespace("tier")
    control_plane.create(
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "sa", "namespace": ns}}
    )
    mark = control_plane.audit_mark()
    with control_plane.client(control_plane.token(ns, "sa")) as client:
        refused = client.get(f"/api/v1/namespaces/{ns}/configmaps")
    assert refused.status_code == 403
    user = f"system:serviceaccount:{ns}:sa"
    [record] = control_plane.requests(mark, user=user)
    assert (record.status, record.info and record.info.verb) == (403, "list")
    assert record.info is not None and record.info.namespace == ns
    with pytest.raises(ControlPlaneError) as refused_create:
        control_plane.create(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": "Not_Valid", "namespace": ns},
            }
        )
    assert (refused_create.value.status, refused_create.value.reason) == (422, "Invalid")


def test_without_a_control_plane_the_real_tier_skips_with_one_line_saying_why(
    tmp_path: Path,
) -> None:
    missing = tmp_path / "nowhere"
    env = os.environ | {controlplane.ENVIRONMENT: str(missing)}
    real = test_the_control_plane_is_a_real_server_whose_audit_log_reads_back_as_requests
    test = f"{Path(__file__).name}::{real.__name__}"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-rs",
            "-m",
            "real",
            "-p",
            "no:cacheprovider",
            f"tests/real/{test}",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    [reason] = [line for line in done.stdout.splitlines() if line.startswith("SKIPPED")]
    assert f"{missing / 'controlplane.py'} not found (set {controlplane.ENVIRONMENT})" in reason
    assert "1 skipped" in done.stdout


def test_a_mark_inside_an_audit_event_being_written_reads_from_the_next_event(
    tmp_path: Path,
) -> None:
    log = tmp_path / "audit.log"
    first = json.dumps({"auditID": "1", "verb": "get"}).encode()
    log.write_bytes(first[:10])  # the API server is halfway through writing an event
    mark = log.stat().st_size  # what `audit_mark` takes
    with log.open("ab") as writing:
        writing.write(first[10:] + b"\n" + json.dumps({"auditID": "2", "verb": "list"}).encode())
        writing.write(b"\n")
    assert [event["auditID"] for event in controlplane.audit_events(log, mark)] == ["2"]
    assert [event["auditID"] for event in controlplane.audit_events(log)] == ["1", "2"]


def test_a_read_takes_the_log_as_it_was_and_leaves_an_event_being_written_for_the_next(
    tmp_path: Path,
) -> None:
    log = tmp_path / "audit.log"
    first = json.dumps({"auditID": "1", "verb": "get"}).encode()
    second = json.dumps({"auditID": "2", "verb": "list"}).encode()
    log.write_bytes(first + b"\n" + second[:10])  # the API server is halfway through the second
    events = controlplane.audit_events(log)
    assert next(events)["auditID"] == "1"
    with log.open("ab") as writing:  # ...and finishes it while the first is being read
        writing.write(second[10:] + b"\n")
    assert list(events) == []  # its rest is never taken for an event of its own
    assert [event["auditID"] for event in controlplane.audit_events(log)] == ["1", "2"]
