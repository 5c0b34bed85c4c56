"""A real Kubernetes control plane (etcd, kube-apiserver, kube-controller-manager) for tests
and benchmarks, started from the binaries of the `kube-control-plane` folder beside the
project's checkout (`KUBE_CONTROL_PLANE` names another folder).

`ControlPlane.up(dir)` runs that folder's `controlplane.py up` (no fsync, an audit log of
every request), and the handle it returns speaks to the server as the test needs: the
admin's REST calls by apiVersion and kind (paths found through the server's own
discovery), server-side apply, ServiceAccount tokens through the TokenRequest API, a
kubeconfig for any token, the audit log read back as the fake's `RequestRecord`s, an etcd
compaction, and a restart of the API server (its watch cache then starts afresh; the
controller manager is restarted after it).
`absent()` says in one line why no control plane can run here, or None.

How it fails: a request the server refuses raises `ControlPlaneError` with its status code
and the Status it answered; a control plane that does not come up raises `RuntimeError`
with the end of the script's output.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import signal
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any
from urllib.parse import parse_qsl

import httpx

from sandbox.kube.faults import RequestRecord
from sandbox.kube.requestinfo import RequestInfo

ENVIRONMENT = "KUBE_CONTROL_PLANE"
# The checkout's parent holds the shared folder; the package sits one level inside the checkout.
_BESIDE_CHECKOUT = Path(__file__).resolve().parents[2] / "shared" / "kube-control-plane"
# What the audit log's verbs were as HTTP methods (for the request records).
_VERB_METHODS = {
    "create": "POST",
    "get": "GET",
    "list": "GET",
    "watch": "GET",
    "update": "PUT",
    "patch": "PATCH",
    "delete": "DELETE",
    "deletecollection": "DELETE",
}
APPLY_PATCH = "application/apply-patch+yaml"
MERGE_PATCH = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
STRATEGIC_PATCH = "application/strategic-merge-patch+json"


def folder() -> Path:
    return Path(os.environ.get(ENVIRONMENT) or _BESIDE_CHECKOUT)


def absent() -> str | None:
    """Why no control plane can start here, in one line; None when one can."""
    script = folder() / "controlplane.py"
    if not script.is_file():
        return f"no real control plane here: {script} not found (set {ENVIRONMENT})"
    if shutil.which("openssl") is None:
        return "no real control plane here: openssl is not installed"
    if sys.platform != "linux":
        return "no real control plane here: its binaries are for Linux"
    return None


class ControlPlaneError(Exception):
    def __init__(self, message: str, *, status: int, body: dict[str, Any]) -> None:
        super().__init__(message)
        self.status = status
        self.body = body

    @property
    def reason(self) -> str:
        return str(self.body.get("reason", ""))


@dataclass(frozen=True, slots=True)
class _Kind:
    path: str  # /api/v1 or /apis/apps/v1
    plural: str
    namespaced: bool


class ControlPlane:
    """A running control plane; `down()` (or leaving the `with` block) stops it."""

    def __init__(self, info: Mapping[str, Any]) -> None:
        self.info = dict(info)
        self.dir = Path(info["dir"])
        self.url: str = info["url"]
        self.ca_file = Path(info["ca_file"])
        self.admin_token: str = info["admin_token"]
        self.audit_log = Path(info["audit_log"]) if info.get("audit_log") else None
        self.version: str = info.get("version") or ""
        self._kinds: dict[tuple[str, str], _Kind] = {}
        self._admin = self.client()

    # -- lifecycle -----------------------------------------------------------------------

    @classmethod
    def up(cls, directory: Path, *, controller_manager: bool = True) -> ControlPlane:
        reason = absent()
        if reason:
            raise RuntimeError(reason)
        directory.mkdir(parents=True, exist_ok=True)
        args = [sys.executable, str(folder() / "controlplane.py"), "up", str(directory)]
        args += ["--no-fsync", "--audit"]
        if not controller_manager:
            args.append("--no-controller-manager")
        done = subprocess.run(args, capture_output=True, text=True, timeout=300)
        if done.returncode != 0:
            raise RuntimeError(
                f"control plane did not start: {(done.stdout + done.stderr)[-2000:]}"
            )
        return cls(json.loads(done.stdout.strip().splitlines()[-1]))

    def down(self) -> None:
        self._admin.close()
        subprocess.run(
            [sys.executable, str(folder() / "controlplane.py"), "down", str(self.dir)],
            capture_output=True,
            timeout=60,
        )

    def __enter__(self) -> ControlPlane:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.down()

    @property
    def pids(self) -> dict[str, int]:
        """The processes by binary name (etcd, kube-apiserver, kube-controller-manager)."""
        found = {}
        for pid in (self.dir / "pids").read_text().split():
            try:
                command = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            except FileNotFoundError:
                continue
            found[Path(command[0].decode()).name] = int(pid)
        return found

    def _command(self, binary: str) -> list[str]:
        raw = Path(f"/proc/{self.pids[binary]}/cmdline").read_bytes()
        return [part.decode() for part in raw.split(b"\0") if part]

    @property
    def etcd_url(self) -> str:
        for arg in self._command("etcd"):
            if arg.startswith("--listen-client-urls="):
                return arg.partition("=")[2]
        raise RuntimeError("etcd has no client URL")

    def compact(self, revision: int | None = None) -> int:
        """Compact etcd's history up to `revision`, by default its current one; returns the
        revision. Watches the API server serves from etcd (Events) and exact reads older than
        it then answer 410. kube-apiserver's own compactor, every
        `--etcd-compaction-interval` (5 min), compacts up to the revision it saw at its
        previous run, so the last interval's history stays."""
        with httpx.Client(base_url=self.etcd_url, trust_env=False, timeout=10) as etcd:
            if revision is None:
                header = etcd.post("/v3/kv/range", json={"key": "AA=="}).json()["header"]
                revision = int(header["revision"])
            answer = etcd.post(
                "/v3/kv/compaction", json={"revision": str(revision), "physical": True}
            )
            answer.raise_for_status()
        return revision

    def restart_apiserver(self, *extra_args: str) -> None:
        """Stop the API server and start it again with the same arguments and port, and
        `extra_args` after them (a flag given twice takes the later value): every connection
        drops and its watch cache starts over from etcd.

        The controller manager is restarted once the server is ready. Left running, its
        informers wait out client-go's reflector backoff, which doubles from 0.8 s to 30 s
        (with jitter up to twice that) over failures less than two minutes apart: after a
        few restarts it saw a new namespace 43 s late, and the next test's controllers did
        nothing for that long."""
        self._restart("kube-apiserver", *extra_args)
        self._wait_ready()
        self._restart("kube-controller-manager")

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if self._admin.get("/readyz").status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.2)
        raise RuntimeError("kube-apiserver did not come back within 60 s")

    def restart_controller_manager(self, *extra_args: str) -> None:
        """Start the controller manager again with `extra_args` after its own (a flag given
        twice takes the later value), e.g. `--kube-api-qps=500` for a fast bulk load."""
        self._restart("kube-controller-manager", *extra_args)

    def _restart(self, binary: str, *extra_args: str) -> None:
        pid = self.pids[binary]
        command = self._command(binary) + list(extra_args)
        os.killpg(pid, signal.SIGTERM)
        # A graceful stop takes about a second; one started by an earlier restart may hang in
        # it after its audit backend has shut down, so it gets five seconds, then SIGKILL.
        for _ in range(100):
            if _exited(pid):
                break
            time.sleep(0.05)
        else:
            os.killpg(pid, signal.SIGKILL)
        with open(self.dir / "logs" / f"{binary}.log", "ab") as log:
            child = subprocess.Popen(
                command,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        pids = (self.dir / "pids").read_text().split()
        replaced = (str(child.pid) if known == str(pid) else known for known in pids)
        (self.dir / "pids").write_text(" ".join(replaced))

    # -- clients -------------------------------------------------------------------------

    def client(self, token: str | None = None, **options: Any) -> httpx.Client:
        """An httpx client for this server, verified against its CA, as `token` (the admin's
        by default)."""
        headers = {"Authorization": f"Bearer {token or self.admin_token}"}
        return httpx.Client(
            base_url=self.url,
            verify=ssl.create_default_context(cafile=str(self.ca_file)),
            headers=headers,
            trust_env=False,
            timeout=options.pop("timeout", 30),
            **options,
        )

    def kubeconfig(
        self, path: Path, *, token: str | None = None, namespace: str = "default"
    ) -> Path:
        """A kubeconfig for this server as `token` (the admin's by default), its CA inline."""
        authority = base64.b64encode(self.ca_file.read_bytes()).decode("ascii")
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "real",
                    "cluster": {"server": self.url, "certificate-authority-data": authority},
                }
            ],
            "users": [{"name": "real", "user": {"token": token or self.admin_token}}],
            "contexts": [
                {
                    "name": "real",
                    "context": {"cluster": "real", "user": "real", "namespace": namespace},
                }
            ],
            "current-context": "real",
        }
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(config, indent=1) + "\n")
        return path

    def token(
        self,
        namespace: str,
        account: str,
        *,
        seconds: int = 3600,
        bound_to: Mapping[str, str] | None = None,
    ) -> str:
        """A ServiceAccount token from the TokenRequest API, as a kubelet projects one;
        `bound_to` (`{"kind": "Secret", "name": ..., "uid": ...}`) ties it to an object, so
        deleting that object revokes it."""
        spec: dict[str, Any] = {"expirationSeconds": seconds}
        if bound_to:
            spec["boundObjectRef"] = {"apiVersion": "v1", **bound_to}
        body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec}
        path = f"/api/v1/namespaces/{namespace}/serviceaccounts/{account}/token"
        return str(self._call("POST", path, json=body)["status"]["token"])

    # -- REST as the admin ---------------------------------------------------------------

    def _kind(self, api_version: str, kind: str) -> _Kind:
        if (api_version, kind) not in self._kinds:
            base = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
            for resource in self._call("GET", base)["resources"]:
                if "/" not in resource["name"]:
                    self._kinds[(api_version, resource["kind"])] = _Kind(
                        base, resource["name"], resource["namespaced"]
                    )
        return self._kinds[(api_version, kind)]

    def path(
        self, api_version: str, kind: str, namespace: str | None = None, name: str = ""
    ) -> str:
        """The path of an object (or, without a name, of its collection)."""
        found = self._kind(api_version, kind)
        where = f"/namespaces/{namespace}" if found.namespaced and namespace else ""
        return f"{found.path}{where}/{found.plural}" + (f"/{name}" if name else "")

    def _object_path(self, obj: Mapping[str, Any], *, named: bool) -> str:
        meta = obj["metadata"]
        name = meta["name"] if named else ""
        return self.path(obj["apiVersion"], obj["kind"], meta.get("namespace"), name)

    def _call(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, str] | None = None,
        content_type: str = "application/json",
        **body: Any,
    ) -> Any:
        answer = self._admin.request(
            method, path, params=params, headers={"Content-Type": content_type}, **body
        )
        if answer.status_code >= 400:
            try:
                status = answer.json()
            except ValueError:
                status = {"message": answer.text[:500]}
            raise ControlPlaneError(
                f"{method} {path}: {answer.status_code} {status.get('message', '')}",
                status=answer.status_code,
                body=status,
            )
        return answer.json() if answer.content else None

    def create(self, obj: Mapping[str, Any], **params: str) -> dict[str, Any]:
        return dict(
            self._call("POST", self._object_path(obj, named=False), json=obj, params=params)
        )

    def get(self, api_version: str, kind: str, namespace: str | None, name: str) -> dict[str, Any]:
        return dict(self._call("GET", self.path(api_version, kind, namespace, name)))

    def list(
        self, api_version: str, kind: str, namespace: str | None = None, **params: str
    ) -> list[dict[str, Any]]:
        items = self._call("GET", self.path(api_version, kind, namespace), params=params)["items"]
        return list(items)

    def update(self, obj: Mapping[str, Any], *, subresource: str = "") -> dict[str, Any]:
        path = self._object_path(obj, named=True) + (f"/{subresource}" if subresource else "")
        return dict(self._call("PUT", path, json=obj))

    def patch(
        self,
        api_version: str,
        kind: str,
        namespace: str | None,
        name: str,
        patch: Any,
        *,
        content_type: str = MERGE_PATCH,
        subresource: str = "",
        **params: str,
    ) -> dict[str, Any]:
        path = self.path(api_version, kind, namespace, name) + (
            f"/{subresource}" if subresource else ""
        )
        return dict(self._call("PATCH", path, json=patch, content_type=content_type, params=params))

    def apply(
        self, obj: Mapping[str, Any], *, manager: str, force: bool = False, subresource: str = ""
    ) -> dict[str, Any]:
        """Server-side apply of `obj` as the field manager `manager`."""
        meta = obj["metadata"]
        params = {"fieldManager": manager} | ({"force": "true"} if force else {})
        return self.patch(
            obj["apiVersion"],
            obj["kind"],
            meta.get("namespace"),
            meta["name"],
            obj,
            content_type=APPLY_PATCH,
            subresource=subresource,
            **params,
        )

    def delete(
        self, api_version: str, kind: str, namespace: str | None, name: str, **params: str
    ) -> Any:
        return self._call("DELETE", self.path(api_version, kind, namespace, name), params=params)

    def exists(self, api_version: str, kind: str, namespace: str | None, name: str) -> bool:
        try:
            self.get(api_version, kind, namespace, name)
        except ControlPlaneError as exc:
            if exc.status == 404:
                return False
            raise
        return True

    # -- the audit log -------------------------------------------------------------------

    def audit_mark(self) -> int:
        """Where the audit log ends now: pass it to `audit` to read only what follows."""
        return self.audit_log.stat().st_size if self.audit_log and self.audit_log.exists() else 0

    def audit(self, since: int = 0) -> Iterator[dict[str, Any]]:
        """The audit events written after `since`, complete requests only (a watch is there
        once it ended; one still open is there with stage `ResponseStarted`)."""
        if self.audit_log is None:
            raise RuntimeError("the control plane was started without an audit log")
        return audit_events(self.audit_log, since)

    def requests(
        self, since: int = 0, *, user: str | None = None, agent: str | None = None
    ) -> list[RequestRecord]:
        """The audit log after `since` as request records (one per request, at its last
        stage), in the terms the fake's request log uses, optionally of one user, or of
        clients whose User-Agent starts with `agent` (`kubectl/`: kubectl's alone, not the
        controllers' that share the admin's credentials)."""
        latest: dict[str, dict[str, Any]] = {}
        for event in self.audit(since):
            if (user is None or event["user"].get("username", "") == user) and (
                agent is None or str(event.get("userAgent", "")).startswith(agent)
            ):
                latest[event["auditID"]] = event
        return [record_of(event) for event in latest.values()]


def _exited(pid: int) -> bool:
    """Whether process `pid` is gone. One started by an earlier restart is this process's
    child: it stays a zombie, alive to `kill(pid, 0)`, until it is reaped here."""
    try:
        if os.waitpid(pid, os.WNOHANG)[0] == pid:
            return True
    except ChildProcessError:
        pass  # not our child: the control plane's script started it
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def audit_events(path: Path, since: int = 0) -> Iterator[dict[str, Any]]:
    """The complete audit events of the log at `path` written after the offset `since`, as
    the log was when the read began: it is read at once, since the API server appends on
    (reading on line by line once took the rest of an event finished meanwhile for an
    event of its own)."""
    with path.open("rb") as log:
        log.seek(max(since - 1, 0))
        written = log.read()
    first = 0
    if since > 0:
        # Unless the offset is where an event begins, it fell inside one being written:
        # that event was before it.
        first = 1 if written.startswith(b"\n") else written.find(b"\n") + 1
        if first == 0:
            return
    complete = written[first : written.rfind(b"\n") + 1]  # one still being written waits
    for line in complete.splitlines():
        yield json.loads(line)


def record_of(event: Mapping[str, Any]) -> RequestRecord:
    """One audit event as a `RequestRecord` (its attributes from the event's objectRef)."""
    uri: str = event["requestURI"]
    path, _, query = uri.partition("?")
    ref = event.get("objectRef")
    verb = event["verb"]
    info = RequestInfo(
        verb=verb,
        path=path,
        resource_request=ref is not None,
        api_group=(ref or {}).get("apiGroup", ""),
        api_version=(ref or {}).get("apiVersion", ""),
        resource=(ref or {}).get("resource", ""),
        subresource=(ref or {}).get("subresource", ""),
        namespace=(ref or {}).get("namespace", ""),
        name=(ref or {}).get("name", ""),
    )
    params = dict(parse_qsl(query, keep_blank_values=True))
    code = int(event.get("responseStatus", {}).get("code") or 0)
    return RequestRecord(
        method=_VERB_METHODS.get(verb, verb.upper()),
        path=path,
        query=params,
        status=code,
        resource=None,
        watch=verb == "watch",
        time=0.0,
        accept="",
        user=event["user"].get("username", ""),
        info=info,
    )
