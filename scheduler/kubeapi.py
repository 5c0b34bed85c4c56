"""The few Kubernetes calls the scaling role makes, on plain JSON dicts.

Objects are read and written as dicts (`_preload_content=False`, decoded with msgspec), not
as the client's model classes: the reconciler only touches a handful of fields, annotations
are plain maps, and a write sends exactly the merge patch it built. Every write that changes
an existing object carries its resourceVersion (in the merge patch, or as a delete
precondition), so a change made by someone else since the read is a `Conflict`, never
overwritten.

Each call goes through `kube.official.call`: one total deadline (`deadline_seconds`) and
the client's errors translated into `kube.errors` (`NotFound`, `Forbidden` naming the
permission the call needed, `Conflict`, `Invalid`, `BadRequest`, else `KubeError`), so a
hung API server ends the call and the cycle goes on with the next HPA or the next cycle.
Messages carry the verb, the object and the start of the server's answer.
"""

from __future__ import annotations

import functools
import socket
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

from kubernetes import client

from kube import official
from kube.api import DEADLINE_SECONDS, MERGE_PATCH
from kube.official import RAW, WRITE
from kube.permission import Permission
from scheduler import names

HPA_API_VERSION = "autoscaling/v2"
HPA_KIND = "HorizontalPodAutoscaler"
HPAS = "horizontalpodautoscalers"
DEPLOYMENT_API_VERSION = "apps/v1"
DEPLOYMENT_KIND = "Deployment"
LIST_PAGE = 500
EVENT_SOURCE = "moonin-agent"

Obj = dict[str, Any]


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
            lambda: self._apps.read_namespaced_deployment(name, namespace, **RAW),
        )

    def list_deployments(self, *, label_selector: str) -> list[Obj]:
        """The Deployments across the cluster that match `label_selector` (paginated)."""
        lister = functools.partial(
            self._apps.list_deployment_for_all_namespaces, label_selector=label_selector
        )
        needs = _allowed("list", "apps", "deployments", None)
        pages = self._pages(
            "list deployments", needs, lister, DEPLOYMENT_API_VERSION, DEPLOYMENT_KIND
        )
        return list(pages)

    def patch_deployment(self, namespace: str, name: str, patch: Obj) -> Obj:
        return self._call(
            f"patch deployment {namespace}/{name}",
            _allowed("patch", "apps", "deployments", namespace),
            lambda: self._apps.patch_namespaced_deployment(
                name, namespace, patch, _content_type=MERGE_PATCH, **WRITE
            ),
        )

    # horizontal pod autoscalers -------------------------------------------------------------

    def list_hpas(self, namespace: str | None = None) -> list[Obj]:
        """Every HPA of a namespace, or of the cluster when `namespace` is None (paginated)."""
        lister: Callable[..., Any]
        if namespace is None:
            what = "list horizontalpodautoscalers"
            lister = self._autoscaling.list_horizontal_pod_autoscaler_for_all_namespaces
        else:
            what = f"list horizontalpodautoscalers in {namespace}"
            lister = functools.partial(
                self._autoscaling.list_namespaced_horizontal_pod_autoscaler, namespace
            )
        needs = _allowed("list", "autoscaling", HPAS, namespace)
        return list(self._pages(what, needs, lister, HPA_API_VERSION, HPA_KIND))

    def _pages(
        self,
        what: str,
        needs: Permission,
        lister: Callable[..., Any],
        api_version: str,
        kind: str,
    ) -> Iterator[Obj]:
        """Every item of a paginated list, typed with `api_version` and `kind`."""
        token: str | None = None
        while True:
            options: dict[str, Any] = {"limit": LIST_PAGE, **RAW}
            if token:
                options["_continue"] = token
            page = self._call(what, needs, functools.partial(lister, **options))
            for item in page.get("items") or ():
                # List items come without their type; later writes and events want it.
                item.setdefault("apiVersion", api_version)
                item.setdefault("kind", kind)
                yield item
            token = (page.get("metadata") or {}).get("continue")
            if not token:
                return

    def get_hpa(self, namespace: str, name: str) -> Obj:
        hpa = self._call(
            f"get horizontalpodautoscaler {namespace}/{name}",
            _allowed("get", "autoscaling", HPAS, namespace),
            lambda: self._autoscaling.read_namespaced_horizontal_pod_autoscaler(
                name, namespace, **RAW
            ),
        )
        hpa.setdefault("apiVersion", HPA_API_VERSION)
        hpa.setdefault("kind", HPA_KIND)
        return hpa

    def create_hpa(self, namespace: str, body: Obj) -> Obj:
        name = body["metadata"]["name"]
        sent: Any = body  # a dict goes out as it is, though the client's signature names a model
        return self._call(
            f"create horizontalpodautoscaler {namespace}/{name}",
            _allowed("create", "autoscaling", HPAS, namespace),
            lambda: self._autoscaling.create_namespaced_horizontal_pod_autoscaler(
                namespace, sent, **WRITE
            ),
        )

    def patch_hpa(self, namespace: str, name: str, patch: Obj) -> Obj:
        return self._call(
            f"patch horizontalpodautoscaler {namespace}/{name}",
            _allowed("patch", "autoscaling", HPAS, namespace),
            lambda: self._autoscaling.patch_namespaced_horizontal_pod_autoscaler(
                name, namespace, patch, _content_type=MERGE_PATCH, **WRITE
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
                name, namespace, body=options, **RAW
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
        # A dict goes out as it is, though the client's signature names a model.
        body: Any = {
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
            lambda: self._core.create_namespaced_event(namespace, body, **WRITE),
        )

    def _call(self, what: str, needs: Permission, call: Callable[[], Any]) -> Obj:
        """`call` within the deadline; `needs` is the permission it takes (named by a 403)."""
        return official.call(what, needs, call, within=self.deadline_seconds)


def terminating(obj: Obj) -> bool:
    """Whether the object is being deleted (held by a finalizer until it goes): a real
    server refuses nothing written to it, but the write is lost with it, and a spec change
    may fight whoever is finishing the deletion."""
    return bool((obj.get("metadata") or {}).get("deletionTimestamp"))


def _allowed(verb: str, group: str, resource: str, namespace: str | None) -> Permission:
    return Permission(verb=verb, group=group, resource=resource, namespace=namespace)
