"""The few Kubernetes calls the scaling role makes, over `kube.api`.

Objects are read as the typed views of `kube.workloads` (the handful of fields the reconciler
touches, frozen), and a write sends exactly the merge patch, server-side apply config or
body its caller built, so fields the agent never read are never dropped. Every write that changes an
existing object carries its resourceVersion (in the patch or apply config, or as a delete
precondition), so a change made by someone else since the read is a `Conflict`, never
overwritten. Writes go under the field manager `moonin-agent` (GitOps tools tell our changes
apart in managedFields).

Each call goes through the one client (`kube.api.KubeApi`): its total deadline, its error
translation into `kube.errors` (`NotFound`, `Forbidden` naming the permission the request
needed, `Conflict`, `Invalid`, `BadRequest`, else `KubeError`), so a hung API server ends
the call and the cycle goes on with the next HPA or the next cycle. Errors name the call
("patch horizontalpodautoscaler shop/web"): the verb, the object and the start of the
server's answer, as error events carry them.

How it fails: every method raises `kube.errors.KubeError` and its kinds.
"""

from __future__ import annotations

import dataclasses
import time
from datetime import UTC, datetime
from typing import Any

from kube import pages, recorder
from kube.api import KubeApi, decoded
from kube.resources import DEPLOYMENTS, HPAS
from kube.workloads import Deployment, Hpa, decode_deployment, decode_hpa
from kube.writes import Preconditions, WriteOptions
from scheduler import names

HPA_API_VERSION = HPAS.api_version
HPA_KIND = HPAS.kind
EVENT_SOURCE = "moonin-agent"
# Our writes under our own name in managedFields, so GitOps tools can tell them apart.
FIELD_MANAGER = "moonin-agent"
WRITE = WriteOptions(field_manager=FIELD_MANAGER)

Obj = dict[str, Any]  # a patch or a body, as built to be sent


class ScalingKube:
    """Deployments, autoscaling/v2 HPAs and core/v1 Events, through one `KubeApi`."""

    def __init__(self, api: KubeApi, *, options: WriteOptions = WRITE) -> None:
        self.api = api
        self.options = options  # how every write is asked for (a dry run: `dryRun=All`)

    # deployments --------------------------------------------------------------------------

    def get_deployment(self, namespace: str, name: str) -> Deployment:
        what = f"get deployment {namespace}/{name}"
        answer = self.api.get(DEPLOYMENTS.path(namespace, name), what=what)
        return decoded(decode_deployment, answer, what)

    def list_deployments(self, *, label_selector: str) -> list[Deployment]:
        """The Deployments across the cluster that match `label_selector` (paginated)."""
        return list(
            pages.list_all(
                self.api,
                DEPLOYMENTS,
                decode_deployment,
                params={"labelSelector": label_selector},
                what="list deployments",
            )
        )

    def patch_deployment(self, namespace: str, name: str, patch: Obj) -> Deployment:
        what = f"patch deployment {namespace}/{name}"
        answer = self.api.patch(
            DEPLOYMENTS.path(namespace, name), patch, options=self.options, what=what
        )
        return decoded(decode_deployment, answer, what)

    # horizontal pod autoscalers -------------------------------------------------------------

    def list_hpas(self, namespace: str | None = None) -> list[Hpa]:
        """Every HPA of a namespace, or of the cluster when `namespace` is None (paginated)."""
        where = "" if namespace is None else f" in {namespace}"
        what = f"list horizontalpodautoscalers{where}"
        return list(pages.list_all(self.api, HPAS, decode_hpa, namespace=namespace, what=what))

    def get_hpa(self, namespace: str, name: str) -> Hpa:
        what = f"get horizontalpodautoscaler {namespace}/{name}"
        return decoded(decode_hpa, self.api.get(HPAS.path(namespace, name), what=what), what)

    def create_hpa(self, namespace: str, name: str, body: Obj) -> Hpa:
        """Create the HPA `name` whose whole object is `body`."""
        what = f"create horizontalpodautoscaler {namespace}/{name}"
        answer = self.api.post(HPAS.path(namespace), body, options=self.options, what=what)
        return decoded(decode_hpa, answer, what)

    def apply_hpa(self, namespace: str, name: str, config: Obj) -> Hpa:
        """Server-side apply `config` to the HPA `name` under our field manager, forced: the
        fields it sets are taken from whoever owns them."""
        what = f"apply horizontalpodautoscaler {namespace}/{name}"
        options = dataclasses.replace(self.options, force=True)
        answer = self.api.apply(HPAS.path(namespace, name), config, options=options, what=what)
        return decoded(decode_hpa, answer, what)

    def patch_hpa(self, namespace: str, name: str, patch: Obj) -> Hpa:
        what = f"patch horizontalpodautoscaler {namespace}/{name}"
        answer = self.api.patch(HPAS.path(namespace, name), patch, options=self.options, what=what)
        return decoded(decode_hpa, answer, what)

    def delete_hpa(self, namespace: str, name: str, *, uid: str, resource_version: str) -> None:
        """Delete only the very object that was read (uid and resourceVersion preconditions)."""
        self.api.delete(
            HPAS.path(namespace, name),
            preconditions=Preconditions(uid, resource_version),
            options=self.options,
            what=f"delete horizontalpodautoscaler {namespace}/{name}",
        )

    # events ---------------------------------------------------------------------------------

    def record_event(
        self, involved: Hpa | Deployment, *, reason: str, message: str, warning: bool = False
    ) -> None:
        """A core/v1 Event about `involved` (shown by `kubectl describe`)."""
        recorder.record(
            self.api,
            involved.resource,
            involved.metadata,
            name=names.event_name(involved.metadata.name, time.time_ns()),
            component=EVENT_SOURCE,
            reason=reason,
            message=message,
            warning=warning,
            now=datetime.now(UTC),
            options=self.options,
        )
