"""The permission a request needs, derived from the request as kube-apiserver derives it."""

from __future__ import annotations

import pytest

from kube.permission import Permission, of_request
from sandbox.kube.requestinfo import request_info

FIELDS = ("method", "path", "params", "expected")
# Every kind of request the agent makes, and a few it does not, with what they need.
REQUESTS = [
    ("GET", "/api/v1/nodes", {"limit": "500"}, ("list", "", "nodes", None)),
    ("GET", "/api/v1/nodes", {"watch": "1"}, ("watch", "", "nodes", None)),
    ("GET", "/api/v1/pods", {"watch": "true"}, ("watch", "", "pods", None)),
    ("GET", "/api/v1/pods", {"watch": "false"}, ("list", "", "pods", None)),
    ("GET", "/api/v1/pods", {"watch": "FALSE"}, ("list", "", "pods", None)),
    ("GET", "/api/v1/pods", {"watch": "0"}, ("list", "", "pods", None)),
    ("GET", "/api/v1/pods", {"watch": ""}, ("watch", "", "pods", None)),
    ("GET", "/api/v1/pods", {"watch": "yes"}, ("watch", "", "pods", None)),
    (
        "GET",
        "/api/v1/namespaces/shop/pods/web-1/log",
        {"tailLines": "200"},
        ("get", "", "pods/log", "shop"),
    ),
    (
        "GET",
        "/api/v1/namespaces/shop/secrets/sh.helm.release.v1.web.v1",
        None,
        ("get", "", "secrets", "shop"),
    ),
    (
        "POST",
        "/apis/coordination.k8s.io/v1/namespaces/moonin/leases",
        None,
        ("create", "coordination.k8s.io", "leases", "moonin"),
    ),
    (
        "PUT",
        "/apis/coordination.k8s.io/v1/namespaces/moonin/leases/leader",
        None,
        ("update", "coordination.k8s.io", "leases", "moonin"),
    ),
    (
        "PATCH",
        "/apis/autoscaling/v2/namespaces/shop/horizontalpodautoscalers/web",
        None,
        ("patch", "autoscaling", "horizontalpodautoscalers", "shop"),
    ),
    (
        "DELETE",
        "/apis/apps/v1/namespaces/shop/deployments/web",
        None,
        ("delete", "apps", "deployments", "shop"),
    ),
    (
        "DELETE",
        "/apis/apps/v1/namespaces/shop/deployments",
        None,
        ("deletecollection", "apps", "deployments", "shop"),
    ),
    # A Namespace is named by its own name, and is in it (as the server says).
    ("GET", "/api/v1/namespaces/shop", None, ("get", "", "namespaces", "shop")),
    (
        "PUT",
        "/api/v1/namespaces/shop/finalize",
        None,
        ("update", "", "namespaces/finalize", "shop"),
    ),
    ("GET", "/api/v1/namespaces", None, ("list", "", "namespaces", None)),
    (
        "GET",
        "/apis/apps/v1/namespaces/shop/deployments/web",
        {"watch": "true"},
        ("get", "apps", "deployments", "shop"),
    ),
]


@pytest.mark.parametrize(FIELDS, REQUESTS)
def test_the_permission_is_read_from_the_method_path_and_query(
    method: str,
    path: str,
    params: dict[str, str] | None,
    expected: tuple[str, str, str, str | None],
) -> None:
    verb, group, resource, namespace = expected
    assert of_request(method, path, params) == Permission(
        verb=verb, group=group, resource=resource, namespace=namespace
    )


@pytest.mark.parametrize(FIELDS, REQUESTS)
def test_the_permission_is_what_the_fake_api_servers_authorizer_checks(
    method: str, path: str, params: dict[str, str] | None, expected: object
) -> None:
    info = request_info(method, path, params or {})
    assert of_request(method, path, params) == Permission(
        verb=info.verb,
        group=info.api_group,
        resource=info.full_resource,
        namespace=info.namespace or None,
    )


@pytest.mark.parametrize("path", ["/version", "/healthz", "/apis", "/apis/apps/v1", "/api/v1"])
def test_paths_that_are_no_api_resource_have_no_permission(path: str) -> None:
    assert of_request("GET", path) is None


def test_the_wording_is_the_api_servers() -> None:
    cluster = Permission(verb="list", group="", resource="nodes")
    assert cluster.denied == (
        'forbidden: cannot list resource "nodes" in API group "" at the cluster scope'
    )
    namespaced = Permission(verb="get", group="", resource="pods/log", namespace="shop")
    assert str(namespaced) == (
        'cannot get resource "pods/log" in API group "" in the namespace "shop"'
    )
