"""core/v1 Events about an object, as client-go's recorder writes them (`kubectl describe`
shows them under the object).

The Event carries the object it is about (`involvedObject`: type, name, namespace, uid and
resourceVersion), the component that reports (`source.component`, `reportingComponent`) and
the host it runs on (the pod) as the reporting instance, as `tools/record/event.go` fills
them. The caller names the Event (`scheduler.names.event_name`, client-go's rule).

How it fails: `record` raises `kube.errors` as `KubeApi.post` does (a `Forbidden` naming the
`create events` permission, most often); an Event is a courtesy, so callers log and go on.
"""

from __future__ import annotations

import socket
from datetime import datetime

from kube.api import KubeApi
from kube.resources import EVENTS, Resource
from kube.workloads import ObjectMeta
from kube.writes import WriteOptions

# The API server allows 128 characters; a hostname has at most 64.
HOST = socket.gethostname()[:128]


def record(
    api: KubeApi,
    resource: Resource,
    involved: ObjectMeta,
    *,
    name: str,
    component: str,
    reason: str,
    message: str,
    warning: bool,
    now: datetime,
    options: WriteOptions,
) -> None:
    """Create the Event `name` about the object of `resource` whose metadata was read as
    `involved`, in its namespace."""
    namespace, involved_name = involved.namespace, involved.name
    stamp = now.isoformat(timespec="seconds").replace("+00:00", "Z")
    body = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": name, "namespace": namespace},
        "involvedObject": {
            "apiVersion": resource.api_version,
            "kind": resource.kind,
            "name": involved_name,
            "namespace": namespace,
            "uid": involved.uid,
            "resourceVersion": involved.resource_version,
        },
        "reason": reason,
        "message": message,
        "type": "Warning" if warning else "Normal",
        "source": {"component": component, "host": HOST},
        "reportingComponent": component,
        "reportingInstance": HOST,
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
        "count": 1,
    }
    api.post(
        EVENTS.path(namespace),
        body,
        options=options,
        what=f"create event for {resource.kind} {namespace}/{involved_name}",
    )
