"""The `scale` subresource: a workload's replica count seen and written as an
autoscaling/v1 `Scale`, as `kubectl scale` and the HPA controller use it.

Upstream (pkg/registry/apps/deployment/storage/storage.go, scaleFromDeployment) a Scale
carries the workload's name, namespace, uid, resourceVersion and creationTimestamp,
`spec.replicas` from the workload's spec and `status.replicas` from its status, and its
label selector as a string (`status.selector`, labels.Selector's form: requirements sorted
by key, `a=b`, `a in (x,y)`, `a notin (x)`, `a`, `!a`). A write takes the new Scale's
`spec.replicas` (below 0 is 422 Invalid on `Scale.autoscaling`) and its resourceVersion,
so a stale one is the workload's 409 Conflict; nothing else of the Scale is kept.
"""

from __future__ import annotations

from typing import Any

from sandbox.kube import status

KIND = "Scale"
GROUP = "autoscaling"
API_VERSION = "autoscaling/v1"


def of(obj: dict[str, Any]) -> dict[str, Any]:
    """The Scale of a stored workload (a Deployment or a ReplicaSet, decoded)."""
    metadata = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    kept = ("name", "namespace", "uid", "resourceVersion", "creationTimestamp")
    scale_status: dict[str, Any] = {"replicas": (obj.get("status") or {}).get("replicas", 0)}
    selector = selector_string(spec.get("selector"))
    if selector:
        scale_status["selector"] = selector
    return {
        "kind": KIND,
        "apiVersion": API_VERSION,
        "metadata": {key: metadata[key] for key in kept if key in metadata},
        "spec": {"replicas": spec.get("replicas", 1)},
        "status": scale_status,
    }


def written(name: str, current: dict[str, Any], scale: Any) -> dict[str, Any]:
    """`current` (the stored workload) with the replicas and resourceVersion of `scale`."""
    if not isinstance(scale, dict):
        raise status.bad_request("the body must be a JSON object")
    kind = scale.get("kind")
    if kind not in (None, "", KIND):
        raise status.bad_request(f"the kind of the body ({kind}) is not {KIND}")
    metadata = scale.get("metadata") or {}
    replicas = (scale.get("spec") or {}).get("replicas", 0)
    if not isinstance(replicas, int) or isinstance(replicas, bool):
        raise status.bad_request(
            f'{KIND} in version "v1" cannot be handled as a {KIND}: json: cannot unmarshal '
            f"{type(replicas).__name__} into Go struct field ScaleSpec.spec.replicas of type int32"
        )
    if replicas < 0:
        raise status.invalid_of_kind(
            GROUP,
            KIND,
            name,
            [status.invalid_field("spec.replicas", replicas, "must be greater than or equal to 0")],
        )
    current.setdefault("spec", {})["replicas"] = replicas
    current["metadata"]["resourceVersion"] = metadata.get("resourceVersion") or ""
    for identity in ("name", "namespace"):
        if metadata.get(identity):
            current["metadata"][identity] = metadata[identity]
    return current


def selector_string(selector: Any) -> str:
    """A LabelSelector as labels.Selector.String() prints it."""
    if not isinstance(selector, dict):
        return ""
    terms: list[tuple[str, str]] = [
        (key, f"{key}={value}") for key, value in (selector.get("matchLabels") or {}).items()
    ]
    for expression in selector.get("matchExpressions") or ():
        key, operator = expression.get("key", ""), expression.get("operator", "")
        values = ",".join(sorted(expression.get("values") or ()))
        printed = {
            "In": f"{key} in ({values})",
            "NotIn": f"{key} notin ({values})",
            "Exists": key,
            "DoesNotExist": f"!{key}",
        }.get(operator)
        if printed is not None:
            terms.append((key, printed))
    return ",".join(text for _, text in sorted(terms, key=lambda term: term[0]))
