"""The few Kubernetes calls the scaling role makes, on plain JSON dicts.

Objects are read and written as dicts (`_preload_content=False`, decoded with msgspec), not
as the client's model classes: the reconciler only touches a handful of fields, annotations
are plain maps, and a write sends exactly the merge patch it built. Every write that changes
an existing object carries its resourceVersion (in the merge patch, or as a delete
precondition), so a change made by someone else since the read is a `Conflict`, never
overwritten.

The client's errors are translated in one function (`_translate`), chained `from`:

    KubeError              anything else: 429, 5xx, timeouts, connection errors
    ├── NotFound           404
    ├── Forbidden          403 (RBAC, or an admission policy); its `permission` is what
    │                      the call needed (`kube.permission`)
    ├── Conflict           409 (stale resourceVersion, or the name is taken)
    ├── Invalid            422 (the server refused the object)
    └── BadRequest         400 (a field it does not know, under fieldValidation=Strict)

Messages carry the verb, the object and at most `BODY_SNIPPET` characters of the answer.

Every call has a total deadline (`deadline_seconds`, `runtime.deadline`): a hung API server
or a proxy that answers one byte at a time ends the call as a `KubeError` (status None)
saying so, and the cycle goes on with the next HPA or the next cycle.
"""

from __future__ import annotations

import functools
import socket
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

import msgspec
import urllib3
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from kube.official import REQUEST_TIMEOUT
from kube.permission import Permission, refused
from runtime import deadline
from scheduler import names

HPA_API_VERSION = "autoscaling/v2"
HPA_KIND = "HorizontalPodAutoscaler"
HPAS = "horizontalpodautoscalers"
MERGE_PATCH = "application/merge-patch+json"
BODY_SNIPPET = 300
LIST_PAGE = 500
EVENT_SOURCE = "moonin-agent"
# kube-apiserver ends a request its handler has not answered within a minute
# (`--request-timeout`); waiting longer than that only means something in between hangs.
DEADLINE_SECONDS = 60.0

Obj = dict[str, Any]
_decode = msgspec.json.Decoder(dict[str, Any]).decode


class KubeError(Exception):
    """A Kubernetes call failed; `status` is None for transport failures."""

    def __init__(self, message: str, *, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class NotFound(KubeError):
    pass


class Forbidden(KubeError):
    def __init__(self, message: str, *, permission: Permission) -> None:
        super().__init__(message, status=403)
        self.permission = permission
        """What the call needed: its verb, API group, resource and namespace."""

    @property
    def denied(self) -> str:
        """The missing permission as a health reason or log field."""
        return self.permission.denied


class Conflict(KubeError):
    pass


class Invalid(KubeError):
    pass


class BadRequest(KubeError):
    """400: the body could not be taken as sent (an unknown or duplicate field under
    `fieldValidation=Strict`, a malformed value): a bug in what the agent wrote."""


_BY_STATUS: dict[int, type[KubeError]] = {  # 403 is built apart: it names a permission
    400: BadRequest,
    404: NotFound,
    409: Conflict,
    422: Invalid,
}


class KubeApi:
    """Deployments, autoscaling/v2 HPAs and core/v1 Events, through one `ApiClient`."""

    def __init__(
        self, api_client: client.ApiClient, *, deadline_seconds: float = DEADLINE_SECONDS
    ) -> None:
        if deadline_seconds <= 0:
            raise ValueError("the deadline must be positive")
        self.api_client = api_client
        self.deadline_seconds = deadline_seconds
        self._apps = client.AppsV1Api(api_client)
        self._autoscaling = client.AutoscalingV2Api(api_client)
        self._core = client.CoreV1Api(api_client)
        # The API server allows 128 characters; a hostname has at most 64.
        self._host = socket.gethostname()[:128]

    # deployments --------------------------------------------------------------------------

    def get_deployment(self, namespace: str, name: str) -> Obj:
        return self._call(
            f"get deployment {namespace}/{name}",
            _allowed("get", "apps", "deployments", namespace),
            lambda: self._apps.read_namespaced_deployment(name, namespace, **_RAW),
        )

    def patch_deployment(self, namespace: str, name: str, patch: Obj) -> Obj:
        return self._call(
            f"patch deployment {namespace}/{name}",
            _allowed("patch", "apps", "deployments", namespace),
            lambda: self._apps.patch_namespaced_deployment(
                name, namespace, patch, _content_type=MERGE_PATCH, **_WRITE
            ),
        )

    # horizontal pod autoscalers -------------------------------------------------------------

    def list_hpas(self, namespace: str | None = None) -> list[Obj]:
        """Every HPA of a namespace, or of the cluster when `namespace` is None (paginated)."""
        return list(self._pages(namespace))

    def _pages(self, namespace: str | None) -> Iterator[Obj]:
        if namespace is None:
            what = "list horizontalpodautoscalers"
            lister = self._autoscaling.list_horizontal_pod_autoscaler_for_all_namespaces
        else:
            what = f"list horizontalpodautoscalers in {namespace}"
            lister = functools.partial(
                self._autoscaling.list_namespaced_horizontal_pod_autoscaler, namespace
            )
        needs = _allowed("list", "autoscaling", HPAS, namespace)
        token: str | None = None
        while True:
            options: dict[str, Any] = {"limit": LIST_PAGE, **_RAW}
            if token:
                options["_continue"] = token
            page = self._call(what, needs, functools.partial(lister, **options))
            for item in page.get("items") or ():
                # List items come without their type; later writes and events want it.
                item.setdefault("apiVersion", HPA_API_VERSION)
                item.setdefault("kind", HPA_KIND)
                yield item
            token = (page.get("metadata") or {}).get("continue")
            if not token:
                return

    def get_hpa(self, namespace: str, name: str) -> Obj:
        hpa = self._call(
            f"get horizontalpodautoscaler {namespace}/{name}",
            _allowed("get", "autoscaling", HPAS, namespace),
            lambda: self._autoscaling.read_namespaced_horizontal_pod_autoscaler(
                name, namespace, **_RAW
            ),
        )
        hpa.setdefault("apiVersion", HPA_API_VERSION)
        hpa.setdefault("kind", HPA_KIND)
        return hpa

    def create_hpa(self, namespace: str, body: Obj) -> Obj:
        name = body["metadata"]["name"]
        return self._call(
            f"create horizontalpodautoscaler {namespace}/{name}",
            _allowed("create", "autoscaling", HPAS, namespace),
            lambda: self._autoscaling.create_namespaced_horizontal_pod_autoscaler(
                namespace, body, **_WRITE
            ),
        )

    def patch_hpa(self, namespace: str, name: str, patch: Obj) -> Obj:
        return self._call(
            f"patch horizontalpodautoscaler {namespace}/{name}",
            _allowed("patch", "autoscaling", HPAS, namespace),
            lambda: self._autoscaling.patch_namespaced_horizontal_pod_autoscaler(
                name, namespace, patch, _content_type=MERGE_PATCH, **_WRITE
            ),
        )

    def delete_hpa(self, namespace: str, name: str, *, uid: str, resource_version: str) -> None:
        """Delete only the very object that was read (uid and resourceVersion preconditions)."""
        options = client.V1DeleteOptions(
            preconditions=client.V1Preconditions(uid=uid, resource_version=resource_version)
        )
        self._call(
            f"delete horizontalpodautoscaler {namespace}/{name}",
            _allowed("delete", "autoscaling", HPAS, namespace),
            lambda: self._autoscaling.delete_namespaced_horizontal_pod_autoscaler(
                name, namespace, body=options, **_RAW
            ),
        )

    # events ---------------------------------------------------------------------------------

    def record_event(
        self, involved: Obj, *, reason: str, message: str, warning: bool = False
    ) -> None:
        """A core/v1 Event about `involved` (shown by `kubectl describe`)."""
        metadata = involved["metadata"]
        namespace, name = metadata["namespace"], metadata["name"]
        stamp = datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": names.event_name(name, time.time_ns()), "namespace": namespace},
            "involvedObject": {
                "apiVersion": involved.get("apiVersion"),
                "kind": involved.get("kind"),
                "name": name,
                "namespace": namespace,
                "uid": metadata.get("uid"),
                "resourceVersion": metadata.get("resourceVersion"),
            },
            "reason": reason,
            "message": message,
            "type": "Warning" if warning else "Normal",
            # As client-go's recorder fills them (`tools/record/event.go`): the component,
            # and the host (the pod) as the reporting instance.
            "source": {"component": EVENT_SOURCE, "host": self._host},
            "reportingComponent": EVENT_SOURCE,
            "reportingInstance": self._host,
            "firstTimestamp": stamp,
            "lastTimestamp": stamp,
            "count": 1,
        }
        self._call(
            f"create event for {involved.get('kind')} {namespace}/{name}",
            _allowed("create", "", "events", namespace),
            lambda: self._core.create_namespaced_event(namespace, body, **_WRITE),
        )

    # the one place the client's errors are translated -----------------------------------

    def _call(self, what: str, needs: Permission, call: Callable[[], Any]) -> Obj:
        """`call` within the deadline; `needs` is the permission it takes (named by a 403)."""
        with deadline.within(self.deadline_seconds) as limit:
            try:
                response = call()
                data = response.data
            except (ApiException, urllib3.exceptions.HTTPError, OSError) as exc:
                if limit.expired:
                    raise KubeError(f"{what}: {limit.missed()}") from exc
                if isinstance(exc, ApiException):
                    raise _translate(what, needs, exc) from exc
                message = f"{what} failed: {type(exc).__name__}: {_one_line(str(exc))}"
                raise KubeError(message) from exc
            if limit.interrupted:
                # The socket was shut down under the read: what it got may be cut short.
                raise KubeError(f"{what}: {limit.missed()}")
        if not data:
            return {}
        try:
            return _decode(data)
        except msgspec.DecodeError as exc:
            raise KubeError(f"{what}: the answer is not a JSON object") from exc


_RAW: dict[str, Any] = {"_preload_content": False, "_request_timeout": REQUEST_TIMEOUT}
# Our writes under our own name in managedFields, so GitOps tools can tell them apart, and
# strictly validated: a field the server does not know (a typo in a body built here) is a
# 400 `BadRequest` naming it, not silently dropped.
FIELD_MANAGER = "moonin-agent"
_WRITE: dict[str, Any] = {**_RAW, "field_manager": FIELD_MANAGER, "field_validation": "Strict"}


def terminating(obj: Obj) -> bool:
    """Whether the object is being deleted (held by a finalizer until it goes): a real
    server refuses nothing written to it, but the write is lost with it, and a spec change
    may fight whoever is finishing the deletion."""
    return bool((obj.get("metadata") or {}).get("deletionTimestamp"))


def _allowed(verb: str, group: str, resource: str, namespace: str | None) -> Permission:
    return Permission(verb=verb, group=group, resource=resource, namespace=namespace)


def _translate(what: str, needs: Permission, exc: ApiException) -> KubeError:
    status = exc.status or None
    body = exc.body.decode("utf-8", "replace") if isinstance(exc.body, bytes) else exc.body
    detail = _one_line(_status_message(body) or exc.reason or "no detail")[:BODY_SNIPPET]
    if status == 403:
        return Forbidden(refused(what, needs, detail), permission=needs)
    error = _BY_STATUS.get(status or 0, KubeError)
    return error(f"{what}: {status} {detail}", status=status)


def _status_message(body: str | None) -> str | None:
    """The `message` of a Kubernetes Status body, else the start of the body."""
    if not body:
        return None
    try:
        status = _decode(body)
    except msgspec.DecodeError:
        return body[:BODY_SNIPPET]
    message = status.get("message")
    return message if isinstance(message, str) else body[:BODY_SNIPPET]


def _one_line(text: str) -> str:
    return " ".join(text.split())
