"""The fake authenticates every request by its bearer token, as kube-apiserver does.

Upstream: https://kubernetes.io/docs/reference/access-authn-authz/authentication/ (a request
whose credentials no authenticator accepts is 401; anonymous requests are `system:anonymous`)
and staging/src/k8s.io/apiserver/pkg/endpoints/handlers/responsewriters/errors.go
(`Unauthorized`: a Status with reason Unauthorized and no details).
"""

from __future__ import annotations

import httpx
import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from sandbox.kube import FakeKube, auth

CONFIGMAPS = "/api/v1/namespaces/default/configmaps"
UNAUTHORIZED = {
    "kind": "Status",
    "apiVersion": "v1",
    "metadata": {},
    "status": "Failure",
    "message": "Unauthorized",
    "reason": "Unauthorized",
    "code": 401,
}


def get(kube: FakeKube, path: str, token: str | None) -> httpx.Response:
    headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
    return httpx.get(kube.url + path, headers=headers, trust_env=False)


def test_the_default_token_is_a_service_account_of_the_agents_namespace(kube: FakeKube) -> None:
    assert get(kube, CONFIGMAPS, kube.token).status_code == 200
    assert kube.requests[-1].user == "system:serviceaccount:moonin:moonin-agent"


def test_without_rbac_a_request_without_credentials_is_401_except_version_and_health(
    kube: FakeKube,
) -> None:
    assert get(kube, CONFIGMAPS, None).json() == UNAUTHORIZED
    assert get(kube, "/apis", None).status_code == 401
    for path in ("/version", "/healthz", "/livez", "/readyz"):
        assert get(kube, path, None).status_code == 200, path
    assert kube.requests[-1].user == auth.ANONYMOUS


def test_a_rotated_token_works_once_the_fake_is_told_and_the_old_one_stops(
    kube: FakeKube,
) -> None:
    user = auth.service_account("moonin", "moonin-scaling")
    assert get(kube, CONFIGMAPS, "rotated").status_code == 401
    kube.add_token("rotated", user)
    assert get(kube, CONFIGMAPS, "rotated").status_code == 200
    assert kube.requests[-1].user == user
    kube.remove_token(kube.token)
    assert get(kube, CONFIGMAPS, kube.token).status_code == 401
    kube.reset()  # back to the constructor's tokens
    assert get(kube, CONFIGMAPS, kube.token).status_code == 200
    assert get(kube, CONFIGMAPS, "rotated").status_code == 401


def test_tokens_given_to_the_constructor_replace_the_default() -> None:
    with FakeKube(tokens={"t-discovery": auth.service_account("moonin", "discovery")}) as kube:
        assert kube.token == "t-discovery"
        assert get(kube, CONFIGMAPS, auth.DEFAULT_TOKEN).status_code == 401
        assert get(kube, CONFIGMAPS, "t-discovery").status_code == 200


def test_the_official_client_with_a_wrong_token_gets_401(kube: FakeKube) -> None:
    api = client.CoreV1Api(client.ApiClient(kube.client_configuration(token="wrong")))
    with pytest.raises(ApiException) as refused:
        api.list_namespaced_config_map("default")
    assert refused.value.status == 401
    assert refused.value.reason == "Unauthorized"
