"""Ingresses (networking.k8s.io/v1) -> `ingress` records (key `namespace/name`).

Class, rules (hosts, paths and the Service and port each path routes to), the default
backend, TLS hosts with their certificate Secret's name (an identity, not its contents)
and the load balancer addresses.
"""

from __future__ import annotations

from typing import Any

import msgspec

from collector import sanitize
from collector.model import Int64, ObjectMeta
from collector.normalize.base import Context, PerObject
from collector.normalize.service import LoadBalancerStatus, load_balancer

# Before `ingressClassName` existed the class was an annotation; controllers still read it.
CLASS_ANNOTATION = "kubernetes.io/ingress.class"


class ServiceBackendPort(msgspec.Struct, frozen=True, gc=False):
    name: str | None = None
    number: Int64 | None = None


class ServiceBackend(msgspec.Struct, frozen=True, gc=False):
    name: str = ""
    port: ServiceBackendPort | None = None


class ResourceBackend(msgspec.Struct, rename="camel", frozen=True, gc=False):
    api_group: str | None = None
    kind: str = ""
    name: str = ""


class Backend(msgspec.Struct, frozen=True, gc=False):
    service: ServiceBackend | None = None
    resource: ResourceBackend | None = None


class HttpPath(msgspec.Struct, rename="camel", frozen=True, gc=False):
    path: str | None = None
    path_type: str | None = None
    backend: Backend = msgspec.field(default_factory=Backend)


class HttpRule(msgspec.Struct, frozen=True, gc=False):
    paths: list[HttpPath] | None = None


class Rule(msgspec.Struct, frozen=True, gc=False):
    host: str | None = None
    http: HttpRule | None = None


class Tls(msgspec.Struct, rename="camel", frozen=True, gc=False):
    hosts: list[str] | None = None
    secret_name: str | None = None


class IngressSpec(msgspec.Struct, rename="camel", frozen=True, gc=False):
    ingress_class_name: str | None = None
    default_backend: Backend | None = None
    rules: list[Rule] | None = None
    tls: list[Tls] | None = None


class IngressStatus(msgspec.Struct, rename="camel", frozen=True, gc=False):
    load_balancer: LoadBalancerStatus | None = None


class Ingress(msgspec.Struct, frozen=True, gc=False):
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: IngressSpec = msgspec.field(default_factory=IngressSpec)
    status: IngressStatus = msgspec.field(default_factory=IngressStatus)


def ingress_data(obj: Ingress, ctx: Context) -> dict[str, Any]:
    meta, spec = obj.metadata, obj.spec
    return {
        "class": spec.ingress_class_name or meta.annotations.get(CLASS_ANNOTATION),
        "rules": [
            {
                "host": rule.host,
                "paths": [
                    {"path": p.path, "path_type": p.path_type, **_backend(p.backend)}
                    for p in (rule.http.paths if rule.http else None) or []
                ],
            }
            for rule in spec.rules or []
        ],
        "default_backend": _backend(spec.default_backend) if spec.default_backend else None,
        "tls": [
            {"hosts": sorted(tls.hosts or []), "secret_name": tls.secret_name}
            for tls in spec.tls or []
        ],
        "load_balancer": load_balancer(obj.status.load_balancer),
        "labels": sanitize.labels(meta.labels),
        "annotations": sanitize.safe_annotations(meta.annotations),
        "created_at": meta.creation_timestamp,
    }


def _backend(backend: Backend) -> dict[str, Any]:
    """`service` and `port` (a number, or a port name) or a `resource` reference."""
    service, resource = backend.service, backend.resource
    port = service.port if service else None
    return {
        "service": service.name if service else None,
        "port": (port.number if port.number is not None else port.name) if port else None,
        "resource": (
            {"api_group": resource.api_group, "kind": resource.kind, "name": resource.name}
            if resource
            else None
        ),
    }


NORMALIZER = PerObject(kind="ingress", source="Ingress", struct=Ingress, data=ingress_data)
