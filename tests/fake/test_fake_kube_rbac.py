"""The fake's RBAC authorizer over real HTTP: what kube-apiserver's RBAC allows and denies.

Upstream, each request's attributes come from
staging/src/k8s.io/apiserver/pkg/endpoints/request/requestinfo.go (`NewRequestInfo`), the
RBAC authorizer (plugin/pkg/auth/authorizer/rbac/rbac.go, `Authorize` and `RuleAllows`)
visits the rules of every binding that applies to the user (pkg/registry/rbac/validation/
rule.go, `VisitRulesFor` and `appliesToUser`) and matches them with
pkg/apis/rbac/v1/evaluation_helpers.go; a denial is written by
staging/src/k8s.io/apiserver/pkg/endpoints/handlers/responsewriters/errors.go (`Forbidden`,
`forbiddenMessage`) as apimachinery's `NewForbidden` Status. A SelfSubjectAccessReview
(pkg/registry/authorization/selfsubjectaccessreview/rest.go) asks the same authorizer.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from sandbox import objects
from sandbox.kube import FakeKube, auth
from tests.kubectl import Kubectl

A, B = "team-a", "team-b"
ADMIN, ALICE, BOB = "admin", "alice", "bob"
READER_A = auth.service_account(A, "reader")
READER_B = auth.service_account(B, "reader")
# The first token is the one the `kubectl` fixture's kubeconfig carries.
TOKENS = {
    "t-admin": ADMIN,
    "t-alice": ALICE,
    "t-bob": BOB,
    "t-reader-a": READER_A,
    "t-reader-b": READER_B,
}
TOKEN_OF = {user: token for token, user in TOKENS.items()}
RBAC_GROUP = "rbac.authorization.k8s.io"
RBAC_V1 = f"/apis/{RBAC_GROUP}/v1"
CONFIGMAPS_A = f"/api/v1/namespaces/{A}/configmaps"
CONFIGMAPS_B = f"/api/v1/namespaces/{B}/configmaps"


# --- the cluster ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def kubectl_kube() -> Iterator[FakeKube]:
    """This module's fake, RBAC on; also the one the `kubectl` fixture drives."""
    with FakeKube(tokens=TOKENS, rbac=True) as kube:
        yield kube


@pytest.fixture
def cluster(kubectl_kube: FakeKube) -> FakeKube:
    """Two namespaces with a ConfigMap, a Pod and a Deployment each; `admin` may do
    anything (a ClusterRoleBinding to a `*` ClusterRole), nobody else anything yet."""
    kube = kubectl_kube
    kube.reset()
    for namespace in (A, B):
        kube.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
        kube.create(config_map("settings", namespace))
        kube.create(config_map("other", namespace))
        kube.create(objects.pod(name="p", namespace=namespace, node="node-1"))
        kube.create(objects.deployment(name="web", namespace=namespace))
    kube.create(cluster_role("cluster-admin", rule(["*"], ["*"], groups=["*"])))
    kube.create(cluster_binding("cluster-admin", "cluster-admin", user(ADMIN)))
    return kube


def config_map(name: str, namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": namespace},
        "data": {"k": "v"},
    }


# --- RBAC objects --------------------------------------------------------------------------


def rule(
    verbs: list[str],
    resources: list[str],
    *,
    groups: list[str] | None = None,
    names: list[str] | None = None,
) -> dict[str, Any]:
    found: dict[str, Any] = {"verbs": verbs, "apiGroups": groups or [""], "resources": resources}
    if names:
        found["resourceNames"] = names
    return found


def url_rule(verbs: list[str], urls: list[str]) -> dict[str, Any]:
    return {"verbs": verbs, "nonResourceURLs": urls}


def cluster_role(name: str, *rules: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": f"{RBAC_GROUP}/v1",
        "kind": "ClusterRole",
        "metadata": {"name": name},
        "rules": list(rules),
    }


def role(namespace: str, name: str, *rules: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": f"{RBAC_GROUP}/v1",
        "kind": "Role",
        "metadata": {"name": name, "namespace": namespace},
        "rules": list(rules),
    }


def cluster_binding(name: str, cluster_role: str, *subjects: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": f"{RBAC_GROUP}/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": name},
        "roleRef": {"apiGroup": RBAC_GROUP, "kind": "ClusterRole", "name": cluster_role},
        "subjects": list(subjects),
    }


def binding(
    namespace: str, name: str, kind: str, role_name: str, *subjects: dict[str, Any]
) -> dict[str, Any]:
    return {
        "apiVersion": f"{RBAC_GROUP}/v1",
        "kind": "RoleBinding",
        "metadata": {"name": name, "namespace": namespace},
        "roleRef": {"apiGroup": RBAC_GROUP, "kind": kind, "name": role_name},
        "subjects": list(subjects),
    }


def user(name: str) -> dict[str, Any]:
    return {"apiGroup": RBAC_GROUP, "kind": "User", "name": name}


def group(name: str) -> dict[str, Any]:
    return {"apiGroup": RBAC_GROUP, "kind": "Group", "name": name}


def service_account(name: str, namespace: str | None = None) -> dict[str, Any]:
    subject = {"kind": "ServiceAccount", "name": name}
    if namespace is not None:
        subject["namespace"] = namespace
    return subject


def grant(kube: FakeKube, who: dict[str, Any], *rules: dict[str, Any]) -> None:
    """Give `who` the rules everywhere (a ClusterRole and a ClusterRoleBinding)."""
    name = f"grant-{len(kube.list('clusterroles'))}"
    kube.create(cluster_role(name, *rules))
    kube.create(cluster_binding(name, name, who))


# --- HTTP ----------------------------------------------------------------------------------


def call(
    kube: FakeKube,
    who: str | None,
    method: str,
    path: str,
    *,
    body: Any = None,
    content_type: str = "application/json",
    params: dict[str, str] | None = None,
) -> httpx.Response:
    """One request as `who` (a user of TOKENS; None: no credentials)."""
    headers = {"Authorization": f"Bearer {TOKEN_OF[who]}"} if who is not None else {}
    content = None
    if body is not None:
        headers["Content-Type"] = content_type
        content = json.dumps(body)
    return httpx.request(
        method,
        kube.url + path,
        headers=headers,
        content=content,
        params=params,
        trust_env=False,
        timeout=10,
    )


def watch(kube: FakeKube, who: str, path: str, params: dict[str, str]) -> Any:
    """A watch request as `who`, its answer streamed (a context manager)."""
    return httpx.stream(
        "GET",
        kube.url + path,
        params=params | {"watch": "true"},
        headers={"Authorization": f"Bearer {TOKEN_OF[who]}"},
        trust_env=False,
        timeout=10,
    )


def code(kube: FakeKube, who: str | None, method: str, path: str, **kwargs: Any) -> int:
    return call(kube, who, method, path, **kwargs).status_code


def merge_patch(kube: FakeKube, who: str, path: str, body: dict[str, Any]) -> int:
    return code(kube, who, "PATCH", path, body=body, content_type="application/merge-patch+json")


def forbidden(message: str, **details: str) -> dict[str, Any]:
    """The Status of apimachinery's NewForbidden (pkg/api/errors/errors.go)."""
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": "Forbidden",
        "details": details,
        "code": 403,
    }


# --- bindings and their scope --------------------------------------------------------------


def test_a_cluster_role_binding_grants_in_every_namespace_and_at_the_cluster_scope(
    cluster: FakeKube,
) -> None:
    # rule.go VisitRulesFor: ClusterRoleBindings are visited whatever the namespace.
    grant(cluster, user(ALICE), rule(["list"], ["configmaps", "nodes"]))
    assert code(cluster, ALICE, "GET", CONFIGMAPS_A) == 200
    assert code(cluster, ALICE, "GET", CONFIGMAPS_B) == 200
    assert code(cluster, ALICE, "GET", "/api/v1/configmaps") == 200
    assert code(cluster, ALICE, "GET", "/api/v1/nodes") == 200
    assert code(cluster, ALICE, "GET", f"/api/v1/namespaces/{A}/pods") == 403
    assert code(cluster, BOB, "GET", CONFIGMAPS_A) == 403


def test_a_role_binding_to_a_role_grants_only_in_its_own_namespace(cluster: FakeKube) -> None:
    # rule.go VisitRulesFor: RoleBindings are listed in the request's namespace only, and a
    # Role is looked up in the binding's namespace (GetRoleReferenceRules).
    cluster.create(role(A, "reader", rule(["get", "list"], ["configmaps"])))
    cluster.create(binding(A, "reader", "Role", "reader", user(ALICE)))
    assert code(cluster, ALICE, "GET", CONFIGMAPS_A) == 200
    assert code(cluster, ALICE, "GET", f"{CONFIGMAPS_A}/settings") == 200
    assert code(cluster, ALICE, "GET", CONFIGMAPS_B) == 403
    assert code(cluster, ALICE, "GET", "/api/v1/configmaps") == 403  # all namespaces


def test_a_role_binding_to_a_cluster_role_grants_only_in_the_bindings_namespace(
    cluster: FakeKube,
) -> None:
    # rule.go: a RoleBinding's ClusterRole rules apply in the binding's namespace alone.
    cluster.create(cluster_role("configmap-reader", rule(["list"], ["configmaps"])))
    cluster.create(binding(A, "reader", "ClusterRole", "configmap-reader", user(ALICE)))
    assert code(cluster, ALICE, "GET", CONFIGMAPS_A) == 200
    assert code(cluster, ALICE, "GET", CONFIGMAPS_B) == 403
    assert code(cluster, ALICE, "GET", "/api/v1/configmaps") == 403


def test_a_role_binding_never_grants_cluster_scoped_resources(cluster: FakeKube) -> None:
    # A cluster-scoped request has no namespace, so rule.go never lists RoleBindings for it.
    everything = rule(["*"], ["*"], groups=["*"])
    cluster.create(cluster_role("everything", everything))
    cluster.create(binding(A, "everything", "ClusterRole", "everything", user(ALICE)))
    assert code(cluster, ALICE, "GET", "/api/v1/nodes") == 403
    assert code(cluster, ALICE, "GET", "/api/v1/namespaces") == 403
    assert code(cluster, ALICE, "GET", f"/api/v1/namespaces/{B}") == 403
    # requestinfo.go sets the namespace of /api/v1/namespaces/NAME to NAME: a RoleBinding
    # in that namespace covers reading the Namespace object itself.
    assert code(cluster, ALICE, "GET", f"/api/v1/namespaces/{A}") == 200
    assert code(cluster, ALICE, "GET", CONFIGMAPS_A) == 200


# --- subjects ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("subject", "allowed"),
    [
        # rule.go appliesToUser: a ServiceAccount subject without a namespace is one of the
        # binding's namespace.
        (service_account("reader"), {READER_A}),
        (service_account("reader", B), {READER_B}),
        (user(ALICE), {ALICE}),
        (group("system:serviceaccounts"), {READER_A, READER_B}),
        (group(f"system:serviceaccounts:{B}"), {READER_B}),
        (group("system:authenticated"), {ALICE, BOB, READER_A, READER_B}),
    ],
    ids=["sa-of-the-binding", "sa-of-another-namespace", "user", "all-sa", "sa-of-b", "all"],
)
def test_a_role_binding_applies_to_the_users_its_subjects_name(
    subject: dict[str, Any], allowed: set[str], cluster: FakeKube
) -> None:
    cluster.create(role(A, "reader", rule(["list"], ["configmaps"])))
    cluster.create(binding(A, "reader", "Role", "reader", subject))
    answers = {who: code(cluster, who, "GET", CONFIGMAPS_A) for who in TOKEN_OF if who != ADMIN}
    assert answers == {who: 200 if who in allowed else 403 for who in answers}


def test_a_service_account_subject_without_namespace_in_a_cluster_role_binding_is_nobody(
    cluster: FakeKube,
) -> None:
    # rule.go appliesToUser: no namespace in the subject nor the binding matches no account.
    grant(cluster, service_account("reader"), rule(["list"], ["configmaps"]))
    assert code(cluster, READER_A, "GET", CONFIGMAPS_A) == 403
    grant(cluster, service_account("reader", A), rule(["list"], ["configmaps"]))
    assert code(cluster, READER_A, "GET", CONFIGMAPS_A) == 200
    assert code(cluster, READER_A, "GET", CONFIGMAPS_B) == 200  # a ClusterRoleBinding
    assert code(cluster, READER_B, "GET", CONFIGMAPS_B) == 403


# --- resourceNames -------------------------------------------------------------------------


def test_resource_names_allow_the_named_object_only(cluster: FakeKube) -> None:
    # evaluation_helpers.go ResourceNameMatches: with resourceNames, the request's name must
    # be one of them.
    verbs = ["get", "update", "patch", "delete", "list", "watch", "create"]
    grant(cluster, user(ALICE), rule(verbs, ["configmaps"], names=["settings"]))
    settings, other = f"{CONFIGMAPS_A}/settings", f"{CONFIGMAPS_A}/other"
    assert code(cluster, ALICE, "GET", settings) == 200
    assert code(cluster, ALICE, "GET", other) == 403
    assert merge_patch(cluster, ALICE, settings, {"data": {"k": "2"}}) == 200
    assert merge_patch(cluster, ALICE, other, {"data": {"k": "2"}}) == 403
    assert code(cluster, ALICE, "PUT", settings, body=config_map("settings", A)) == 200
    assert code(cluster, ALICE, "PUT", other, body=config_map("other", A)) == 403
    assert code(cluster, ALICE, "DELETE", other) == 403
    assert code(cluster, ALICE, "DELETE", settings) == 200


def test_list_watch_and_create_carry_no_name_so_resource_names_never_allow_them(
    cluster: FakeKube,
) -> None:
    # requestinfo.go: a collection request has no name (a create's name is in its body), and
    # ResourceNameMatches needs one.
    verbs = ["list", "watch", "create", "deletecollection"]
    grant(cluster, user(ALICE), rule(verbs, ["configmaps"], names=["new", "settings"]))
    assert code(cluster, ALICE, "GET", CONFIGMAPS_A) == 403
    assert code(cluster, ALICE, "GET", CONFIGMAPS_A, params={"watch": "true"}) == 403
    assert code(cluster, ALICE, "POST", CONFIGMAPS_A, body=config_map("new", A)) == 403
    assert code(cluster, ALICE, "DELETE", CONFIGMAPS_A) == 403


def test_a_list_or_watch_narrowed_to_one_name_by_field_selector_meets_resource_names(
    cluster: FakeKube,
) -> None:
    # requestinfo.go: a list or watch whose fieldSelector requires metadata.name=NAME gets
    # that name, so a resourceNames rule can allow it (what a single-object informer does).
    grant(cluster, user(ALICE), rule(["list", "watch"], ["configmaps"], names=["settings"]))
    for selector in ("metadata.name=settings", "metadata.name==settings"):
        answer = call(cluster, ALICE, "GET", CONFIGMAPS_A, params={"fieldSelector": selector})
        assert answer.status_code == 200, selector
        assert [item["metadata"]["name"] for item in answer.json()["items"]] == ["settings"]
        assert cluster.requests[-1].info.name == "settings"
    other = {"fieldSelector": "metadata.name=other"}
    assert code(cluster, ALICE, "GET", CONFIGMAPS_A, params=other) == 403
    # A negation pins no name (fields.Selector RequiresExactMatch); other terms beside the
    # name do not hide it.
    negation = {"fieldSelector": "metadata.name!=other"}
    assert code(cluster, ALICE, "GET", CONFIGMAPS_A, params=negation) == 403
    both = {"fieldSelector": f"metadata.namespace={A},metadata.name=settings"}
    assert code(cluster, ALICE, "GET", CONFIGMAPS_A, params=both) == 200
    params = {"fieldSelector": "metadata.name=settings", "timeoutSeconds": "1"}
    with watch(cluster, ALICE, CONFIGMAPS_A, params) as answer:
        assert answer.status_code == 200
        first = json.loads(next(answer.iter_lines()))
        assert (first["type"], first["object"]["metadata"]["name"]) == ("ADDED", "settings")
    assert cluster.requests[-1].info.verb == "watch"


# --- subresources --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("resources", "log", "pod_itself"),
    [
        (["pods"], 403, 200),
        (["pods/log"], 200, 403),
        (["*/log"], 200, 403),
        (["pods", "pods/log"], 200, 200),
    ],
)
def test_a_pods_log_is_allowed_only_by_a_rule_for_the_log_subresource(
    resources: list[str], log: int, pod_itself: int, cluster: FakeKube
) -> None:
    # rbac.go RuleAllows matches "pods/log" (resource/subresource) against the rule's
    # resources; evaluation_helpers.go ResourceMatches also takes "*/log". "pods" alone is
    # the pod, not its subresources.
    cluster.set_pod_log(A, "p", "app", "hello\n")
    grant(cluster, user(ALICE), rule(["get"], resources))
    assert code(cluster, ALICE, "GET", f"/api/v1/namespaces/{A}/pods/p/log") == log
    assert code(cluster, ALICE, "GET", f"/api/v1/namespaces/{A}/pods/p") == pod_itself


def test_scale_and_status_subresources_need_rules_of_their_own(cluster: FakeKube) -> None:
    deployments = f"/apis/apps/v1/namespaces/{A}/deployments"
    grant(cluster, user(ALICE), rule(["get"], ["deployments"], groups=["apps"]))
    assert code(cluster, ALICE, "GET", f"{deployments}/web") == 200
    assert code(cluster, ALICE, "GET", f"{deployments}/web/scale") == 403
    assert code(cluster, ALICE, "GET", f"{deployments}/web/status") == 403
    grant(cluster, user(BOB), rule(["get", "patch"], ["deployments/scale"], groups=["apps"]))
    assert code(cluster, BOB, "GET", f"{deployments}/web/scale") == 200
    assert merge_patch(cluster, BOB, f"{deployments}/web/scale", {"spec": {"replicas": 5}}) == 200
    assert cluster.get("deployments.apps", A, "web")["spec"]["replicas"] == 5
    assert code(cluster, BOB, "GET", f"{deployments}/web") == 403
    assert code(cluster, BOB, "GET", f"{deployments}/web/status") == 403
    grant(cluster, user(READER_A), rule(["get"], ["pods/status"]))
    assert code(cluster, READER_A, "GET", f"/api/v1/namespaces/{A}/pods/p/status") == 200
    assert code(cluster, READER_A, "GET", f"/api/v1/namespaces/{A}/pods/p") == 403


# --- verbs ---------------------------------------------------------------------------------


def test_a_list_rule_allows_neither_a_watch_nor_a_get(cluster: FakeKube) -> None:
    # requestinfo.go: GET on a collection is "list", or "watch" when ?watch= has any value
    # but "false" or "0" (Convert_Slice_string_To_bool), or under the legacy /watch/ prefix;
    # GET of one object is "get".
    grant(cluster, user(ALICE), rule(["list"], ["configmaps"]))
    assert code(cluster, ALICE, "GET", CONFIGMAPS_A) == 200
    assert code(cluster, ALICE, "GET", CONFIGMAPS_A, params={"watch": "false"}) == 200
    assert code(cluster, ALICE, "GET", CONFIGMAPS_A, params={"watch": "0"}) == 200
    for value in ("true", "1", "yes", ""):
        assert code(cluster, ALICE, "GET", CONFIGMAPS_A, params={"watch": value}) == 403, value
        assert cluster.requests[-1].info.verb == "watch"
    assert code(cluster, ALICE, "GET", f"/api/v1/watch/namespaces/{A}/configmaps") == 403
    assert cluster.requests[-1].info.verb == "watch"
    assert code(cluster, ALICE, "GET", f"{CONFIGMAPS_A}/settings") == 403


def test_a_get_rule_allows_no_list(cluster: FakeKube) -> None:
    grant(cluster, user(ALICE), rule(["get"], ["configmaps"]))
    assert code(cluster, ALICE, "GET", f"{CONFIGMAPS_A}/settings") == 200
    assert code(cluster, ALICE, "GET", CONFIGMAPS_A) == 403


def test_delete_of_a_collection_is_deletecollection_a_verb_of_its_own(cluster: FakeKube) -> None:
    # requestinfo.go: DELETE without a name is "deletecollection".
    grant(cluster, user(ALICE), rule(["delete"], ["configmaps"]))
    assert code(cluster, ALICE, "DELETE", CONFIGMAPS_A) == 403
    assert len(cluster.list("configmaps", A)) == 2
    assert code(cluster, ALICE, "DELETE", f"{CONFIGMAPS_A}/other") == 200
    grant(cluster, user(BOB), rule(["deletecollection"], ["configmaps"]))
    assert code(cluster, BOB, "DELETE", f"{CONFIGMAPS_A}/settings") == 403
    # Authorized; the fake serves no deletecollection, so its handler answers 405.
    assert code(cluster, BOB, "DELETE", CONFIGMAPS_A) == 405
    assert cluster.requests[-1].info.verb == "deletecollection"


def test_a_star_matches_every_verb_group_or_resource(cluster: FakeKube) -> None:
    # evaluation_helpers.go: VerbAll, APIGroupAll and ResourceAll ("*") match anything,
    # subresources included.
    grant(cluster, user(ALICE), rule(["*"], ["configmaps"]))
    assert code(cluster, ALICE, "GET", f"{CONFIGMAPS_A}/settings") == 200
    assert code(cluster, ALICE, "POST", CONFIGMAPS_A, body=config_map("new", A)) == 201
    assert code(cluster, ALICE, "DELETE", f"{CONFIGMAPS_A}/new") == 200
    assert code(cluster, ALICE, "GET", f"/api/v1/namespaces/{A}/secrets") == 403
    grant(cluster, user(BOB), rule(["list"], ["deployments"], groups=["*"]))
    assert code(cluster, BOB, "GET", f"/apis/apps/v1/namespaces/{A}/deployments") == 200
    assert code(cluster, BOB, "GET", f"/apis/apps/v1/namespaces/{A}/replicasets") == 403
    grant(cluster, user(READER_A), rule(["get"], ["*"], groups=["apps"]))
    deployment_path = f"/apis/apps/v1/namespaces/{A}/deployments/web"
    assert code(cluster, READER_A, "GET", deployment_path) == 200
    assert code(cluster, READER_A, "GET", f"{deployment_path}/scale") == 200
    assert code(cluster, READER_A, "GET", f"/api/v1/namespaces/{A}/pods/p") == 403


# --- non-resource URLs ---------------------------------------------------------------------


def test_discovery_is_open_to_every_authenticated_user_through_the_bootstrap_roles(
    cluster: FakeKube,
) -> None:
    # bootstrappolicy/policy.go: system:discovery (bound to system:authenticated) gets
    # /api, /api/*, /apis, /apis/*, /openapi, /openapi/*, /version and the health checks;
    # system:public-info-viewer (authenticated and unauthenticated) /version and health.
    names = {role["metadata"]["name"] for role in cluster.list("clusterroles")}
    assert {"system:discovery", "system:public-info-viewer"} <= names
    for path in ("/version", "/api", "/api/v1", "/apis", "/apis/apps", "/apis/apps/v1"):
        assert code(cluster, BOB, "GET", path) == 200, path
        assert cluster.requests[-1].info.resource_request is False
    assert code(cluster, BOB, "GET", "/openapi/v3") == 200
    assert code(cluster, BOB, "GET", "/healthz") == 200
    for path in ("/version", "/healthz"):
        assert code(cluster, None, "GET", path) == 200, path
        assert cluster.requests[-1].user == auth.ANONYMOUS


def test_a_path_outside_the_bootstrap_roles_is_forbidden_unless_a_rule_names_it(
    cluster: FakeKube,
) -> None:
    # rbac.go RuleAllows for a non-resource request: the verb (the lowercased method) and
    # NonResourceURLMatches: exact, "*", or a prefix ending in "*".
    answer = call(cluster, BOB, "GET", "/logs/kube-apiserver.log")
    assert answer.json() == forbidden(
        'forbidden: User "bob" cannot get path "/logs/kube-apiserver.log"'
    )
    grant(cluster, user(BOB), url_rule(["get"], ["/logs/*", "/metrics"]))
    assert code(cluster, BOB, "GET", "/logs/kube-apiserver.log") != 403
    assert code(cluster, BOB, "GET", "/metrics") != 403
    assert code(cluster, BOB, "GET", "/metrics/slis") == 403
    assert code(cluster, ALICE, "GET", "/metrics") == 403
    # A request with no namespace never reaches RoleBindings, whatever their rules say.
    cluster.create(cluster_role("metrics", url_rule(["get"], ["/metrics"])))
    cluster.create(binding(A, "metrics", "ClusterRole", "metrics", user(ALICE)))
    assert code(cluster, ALICE, "GET", "/metrics") == 403


# --- the 403 -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "path", "message", "details"),
    [
        (
            "GET",
            f"{CONFIGMAPS_A}/settings",
            'configmaps "settings" is forbidden: User "bob" cannot get resource "configmaps" '
            'in API group "" in the namespace "team-a"',
            {"name": "settings", "kind": "configmaps"},
        ),
        (
            "PATCH",
            f"/apis/apps/v1/namespaces/{A}/deployments/web/scale",
            'deployments.apps "web" is forbidden: User "bob" cannot patch resource '
            '"deployments/scale" in API group "apps" in the namespace "team-a"',
            {"name": "web", "group": "apps", "kind": "deployments"},
        ),
        (
            "GET",
            "/api/v1/nodes",
            'nodes is forbidden: User "bob" cannot list resource "nodes" in API group "" '
            "at the cluster scope",
            {"kind": "nodes"},
        ),
        (
            "DELETE",
            f"{RBAC_V1}/clusterroles",
            'clusterroles.rbac.authorization.k8s.io is forbidden: User "bob" cannot '
            'deletecollection resource "clusterroles" in API group "rbac.authorization.k8s.io" '
            "at the cluster scope",
            {"group": RBAC_GROUP, "kind": "clusterroles"},
        ),
        (
            "GET",
            f"/api/v1/namespaces/{A}/pods/p/log",
            'pods "p" is forbidden: User "bob" cannot get resource "pods/log" in API group "" '
            'in the namespace "team-a"',
            {"name": "p", "kind": "pods"},
        ),
    ],
    ids=["named", "group-and-subresource", "cluster-list", "deletecollection", "log"],
)
def test_a_denial_is_the_forbidden_status_the_api_server_writes(
    method: str, path: str, message: str, details: dict[str, str], cluster: FakeKube
) -> None:
    # errors.go forbiddenMessage + apierrors.NewForbidden: `<resource>[.<group>] ["name"] is
    # forbidden: User ... cannot <verb> resource "<res[/sub]>" in API group ...`, details
    # kind = the resource (never the subresource), group and name when there are any.
    body = {"spec": {"replicas": 1}} if method == "PATCH" else None
    answer = call(
        cluster, BOB, method, path, body=body, content_type="application/merge-patch+json"
    )
    assert answer.status_code == 403
    assert answer.headers["content-type"] == "application/json"
    assert answer.json() == forbidden(message, **details)


def test_a_user_name_is_escaped_in_the_message_so_it_never_reads_as_html(
    cluster: FakeKube,
) -> None:
    # errors.go Forbidden: the message goes through a sanitizer replacing &, < and >.
    cluster.add_token("t-odd", "dev <ops> & co")
    answer = httpx.get(
        cluster.url + CONFIGMAPS_A, headers={"Authorization": "Bearer t-odd"}, trust_env=False
    )
    assert answer.json()["message"] == (
        'configmaps is forbidden: User "dev &lt;ops&gt; &amp; co" cannot list resource '
        '"configmaps" in API group "" in the namespace "team-a"'
    )


def test_a_binding_to_a_missing_role_is_named_in_the_denial(cluster: FakeKube) -> None:
    # rbac.go Authorize: errors met resolving bindings become `RBAC: <aggregate>`; the role
    # getters are informer listers whose NotFound names the singular resource
    # (client-go listers/rbac/v1: v1.Resource("clusterrole")); util/errors aggregate drops
    # repeated messages and brackets several.
    base = (
        'configmaps is forbidden: User "alice" cannot list resource "configmaps" '
        'in API group "" in the namespace "team-a"'
    )
    missing_cluster_role = 'clusterrole.rbac.authorization.k8s.io "ghost" not found'
    cluster.create(cluster_binding("ghost", "ghost", user(ALICE)))
    answer = call(cluster, ALICE, "GET", CONFIGMAPS_A)
    assert answer.json() == forbidden(f"{base}: RBAC: {missing_cluster_role}", kind="configmaps")
    cluster.create(cluster_binding("ghost-again", "ghost", group("system:authenticated")))
    assert call(cluster, ALICE, "GET", CONFIGMAPS_A).json()["message"] == (
        f"{base}: RBAC: {missing_cluster_role}"
    )
    cluster.create(binding(A, "phantom", "Role", "phantom", user(ALICE)))
    assert call(cluster, ALICE, "GET", CONFIGMAPS_A).json()["message"] == (
        f"{base}: RBAC: [{missing_cluster_role}, "
        'role.rbac.authorization.k8s.io "phantom" not found]'
    )
    # Somebody whom no broken binding names gets the plain denial.
    assert (
        call(cluster, READER_B, "GET", CONFIGMAPS_B)
        .json()["message"]
        .endswith(
            'in the namespace "team-b": RBAC: clusterrole.rbac.authorization.k8s.io "ghost" '
            "not found"
        )
    )
    assert (
        call(cluster, BOB, "GET", "/api/v1/nodes")
        .json()["message"]
        .endswith(f"at the cluster scope: RBAC: {missing_cluster_role}")
    )
    # A rule that allows wins over the broken bindings.
    grant(cluster, user(ALICE), rule(["list"], ["configmaps"]))
    assert code(cluster, ALICE, "GET", CONFIGMAPS_A) == 200


def test_a_binding_to_a_kind_that_is_no_role_is_named_in_the_denial(cluster: FakeKube) -> None:
    # rule.go GetRoleReferenceRules: `unsupported role reference kind: "<kind>"` (the API
    # refuses such a binding; one seeded from Python still reaches the authorizer).
    cluster.create(binding(A, "odd", "Policy", "x", user(ALICE)))
    assert call(cluster, ALICE, "GET", CONFIGMAPS_A).json()["message"] == (
        'configmaps is forbidden: User "alice" cannot list resource "configmaps" in API group '
        '"" in the namespace "team-a": RBAC: unsupported role reference kind: "Policy"'
    )


# --- changes, switching off, watches -------------------------------------------------------


def test_rbac_objects_written_over_http_take_effect_on_the_next_request(
    cluster: FakeKube,
) -> None:
    assert code(cluster, ALICE, "GET", CONFIGMAPS_A) == 403
    reader = role(A, "reader", rule(["list"], ["configmaps"]))
    assert code(cluster, ADMIN, "POST", f"{RBAC_V1}/namespaces/{A}/roles", body=reader) == 201
    assert code(cluster, ALICE, "GET", CONFIGMAPS_A) == 403  # a role alone grants nothing
    bound = binding(A, "reader", "Role", "reader", user(ALICE))
    bindings = f"{RBAC_V1}/namespaces/{A}/rolebindings"
    assert code(cluster, ADMIN, "POST", bindings, body=bound) == 201
    assert code(cluster, ALICE, "GET", CONFIGMAPS_A) == 200
    assert code(cluster, ADMIN, "DELETE", f"{bindings}/reader") == 200
    assert code(cluster, ALICE, "GET", CONFIGMAPS_A) == 403
    # Nor may alice bind herself: writing RBAC objects is a request like any other.
    assert code(cluster, ALICE, "POST", bindings, body=bound) == 403


def test_with_rbac_off_every_authenticated_request_is_allowed(
    cluster: FakeKube, session_kube: FakeKube
) -> None:
    assert code(cluster, BOB, "GET", CONFIGMAPS_A) == 403
    cluster.disable_rbac()
    assert code(cluster, BOB, "GET", CONFIGMAPS_A) == 200
    assert code(cluster, BOB, "DELETE", f"{CONFIGMAPS_A}/other") == 200
    cluster.enable_rbac()
    assert code(cluster, BOB, "GET", CONFIGMAPS_A) == 403
    # The shared fake has RBAC off: on for a test, and off again after its reset.
    session_kube.reset()
    path = "/api/v1/namespaces/default/configmaps"
    headers = session_kube.headers
    assert httpx.get(session_kube.url + path, headers=headers, trust_env=False).status_code == 200
    session_kube.enable_rbac()
    assert httpx.get(session_kube.url + path, headers=headers, trust_env=False).status_code == 403
    session_kube.reset()
    assert httpx.get(session_kube.url + path, headers=headers, trust_env=False).status_code == 200


def test_a_watch_denied_before_it_starts_is_a_plain_403_not_a_stream(cluster: FakeKube) -> None:
    # The authorization filter answers before any handler runs: no watch is opened.
    with watch(cluster, BOB, CONFIGMAPS_A, {"timeoutSeconds": "5"}) as answer:
        body = json.loads(answer.read())
    assert answer.status_code == 403
    assert answer.headers["content-type"] == "application/json"
    assert "transfer-encoding" not in answer.headers
    assert body == forbidden(
        'configmaps is forbidden: User "bob" cannot watch resource "configmaps" in API group '
        '"" in the namespace "team-a"',
        kind="configmaps",
    )
    assert cluster.open_watches() == 0
    assert (cluster.requests[-1].watch, cluster.requests[-1].status) == (True, 403)


def test_a_denied_request_changes_nothing(cluster: FakeKube) -> None:
    grant(cluster, user(BOB), rule(["get", "list"], ["*"], groups=["*"]))
    before = (cluster.current_rv, cluster.list("configmaps"), cluster.list("deployments.apps"))
    merge = "application/merge-patch+json"
    settings = f"{CONFIGMAPS_A}/settings"
    deployment_path = f"/apis/apps/v1/namespaces/{A}/deployments/web"
    for method, path, body, content_type in [
        ("POST", CONFIGMAPS_A, config_map("new", A), "application/json"),
        ("PUT", settings, config_map("settings", A) | {"data": {"k": "x"}}, "application/json"),
        ("PATCH", settings, {"data": {"k": "x"}}, merge),
        ("DELETE", settings, None, "application/json"),
        ("DELETE", CONFIGMAPS_A, None, "application/json"),
        ("PATCH", f"{deployment_path}/scale", {"spec": {"replicas": 9}}, merge),
        (
            "PUT",
            f"{deployment_path}/status",
            objects.deployment(name="web", namespace=A),
            "application/json",
        ),
    ]:
        answer = call(cluster, BOB, method, path, body=body, content_type=content_type)
        assert answer.status_code == 403, (method, path)
    after = (cluster.current_rv, cluster.list("configmaps"), cluster.list("deployments.apps"))
    assert after == before


# --- real clients --------------------------------------------------------------------------


def test_the_official_client_gets_an_api_exception_403_with_the_status(cluster: FakeKube) -> None:
    api = client.CoreV1Api(client.ApiClient(cluster.client_configuration(token=TOKEN_OF[BOB])))
    with pytest.raises(ApiException) as refused:
        api.read_namespaced_config_map("settings", A)
    assert (refused.value.status, refused.value.reason) == (403, "Forbidden")
    assert json.loads(refused.value.body) == forbidden(
        'configmaps "settings" is forbidden: User "bob" cannot get resource "configmaps" in '
        'API group "" in the namespace "team-a"',
        name="settings",
        kind="configmaps",
    )


def test_kubectl_prints_the_servers_forbidden_message(
    kubectl: Kubectl, kubectl_kube: FakeKube
) -> None:
    kubectl_kube.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": A}})
    kubectl_kube.create(objects.pod(name="p", namespace=A))
    bob = kubectl.with_token(TOKEN_OF[BOB], kubectl_kube)
    assert bob.fails("get", "pods", "-n", A).strip() == (
        'Error from server (Forbidden): pods is forbidden: User "bob" cannot list resource '
        '"pods" in API group "" in the namespace "team-a"'
    )
    kubectl_kube.create(role(A, "pod-reader", rule(["list"], ["pods"])))
    kubectl_kube.create(binding(A, "pod-reader", "Role", "pod-reader", user(BOB)))
    assert bob.ok("get", "pods", "-n", A, "-o", "name").split() == ["pod/p"]


# --- SelfSubjectAccessReviews --------------------------------------------------------------

REVIEWS = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"


def review(kube: FakeKube, who: str, **spec: Any) -> httpx.Response:
    body = {"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview"}
    return call(kube, who, "POST", REVIEWS, body=body | {"spec": spec})


def test_a_self_subject_access_review_answers_from_the_same_rules(cluster: FakeKube) -> None:
    # selfsubjectaccessreview/rest.go Create: the review comes back with status.allowed and
    # the authorizer's reason; rule.go's describers name the allowing binding.
    cluster.create(role(A, "reader", rule(["list"], ["configmaps"])))
    cluster.create(binding(A, "reader", "Role", "reader", service_account("reader")))
    asked = {"namespace": A, "verb": "list", "resource": "configmaps"}
    answer = review(cluster, READER_A, resourceAttributes=asked)
    assert answer.status_code == 201
    assert answer.json() == {
        "kind": "SelfSubjectAccessReview",
        "apiVersion": "authorization.k8s.io/v1",
        "metadata": {},
        "spec": {"resourceAttributes": asked},
        "status": {
            "allowed": True,
            "reason": 'RBAC: allowed by RoleBinding "reader/team-a" of Role "reader" to '
            'ServiceAccount "reader/team-a"',
        },
    }
    elsewhere = asked | {"namespace": B}
    assert review(cluster, READER_A, resourceAttributes=elsewhere).json()["status"] == {
        "allowed": False
    }
    assert review(cluster, READER_B, resourceAttributes=asked).json()["status"] == {
        "allowed": False
    }
    assert review(cluster, ADMIN, resourceAttributes=elsewhere).json()["status"] == {
        "allowed": True,
        "reason": 'RBAC: allowed by ClusterRoleBinding "cluster-admin" of ClusterRole '
        '"cluster-admin" to User "admin"',
    }
    # Subresources and names are taken as given, not parsed from a path.
    logs = {"namespace": A, "verb": "get", "resource": "pods", "subresource": "log", "name": "p"}
    assert review(cluster, BOB, resourceAttributes=logs).json()["status"]["allowed"] is False
    grant(cluster, user(BOB), rule(["get"], ["pods/log"], names=["p"]))
    assert review(cluster, BOB, resourceAttributes=logs).json()["status"]["allowed"] is True
    version = {"path": "/version", "verb": "get"}
    assert review(cluster, BOB, nonResourceAttributes=version).json()["status"]["allowed"]
    metrics = {"path": "/metrics", "verb": "get"}
    assert review(cluster, BOB, nonResourceAttributes=metrics).json()["status"] == {
        "allowed": False
    }


def test_a_self_subject_access_review_names_bindings_to_missing_roles(cluster: FakeKube) -> None:
    cluster.create(cluster_binding("ghost", "ghost", user(ALICE)))
    asked = {"namespace": A, "verb": "list", "resource": "configmaps"}
    assert review(cluster, ALICE, resourceAttributes=asked).json()["status"] == {
        "allowed": False,
        "reason": 'RBAC: clusterrole.rbac.authorization.k8s.io "ghost" not found',
    }


def test_a_self_subject_access_review_needs_exactly_one_kind_of_attributes(
    cluster: FakeKube,
) -> None:
    # authorization/validation ValidateSelfSubjectAccessReviewSpec.
    answer = review(cluster, BOB)
    assert answer.status_code == 422
    assert answer.json()["message"] == (
        'SelfSubjectAccessReview.authorization.k8s.io "" is invalid: spec.resourceAttributes: '
        'Invalid value: "null": exactly one of nonResourceAttributes or resourceAttributes '
        "must be specified"
    )
    both = review(
        cluster,
        BOB,
        resourceAttributes={"verb": "get", "resource": "pods"},
        nonResourceAttributes={"path": "/version", "verb": "get"},
    )
    assert both.status_code == 422
    assert both.json()["details"]["causes"][0]["field"] == "spec.nonResourceAttributes"
    odd = review(cluster, BOB, resourceAttributes="pods")
    assert (odd.status_code, odd.json()["reason"]) == (400, "BadRequest")


def test_with_rbac_off_a_self_subject_access_review_allows_everything(cluster: FakeKube) -> None:
    cluster.disable_rbac()
    answer = review(cluster, BOB, resourceAttributes={"verb": "delete", "resource": "nodes"})
    assert answer.json()["status"] == {"allowed": True}


def test_the_official_client_reviews_its_own_access(cluster: FakeKube) -> None:
    cluster.create(role(A, "reader", rule(["list"], ["configmaps"])))
    cluster.create(binding(A, "reader", "Role", "reader", user(ALICE)))
    api = client.AuthorizationV1Api(
        client.ApiClient(cluster.client_configuration(token=TOKEN_OF[ALICE]))
    )

    def allowed(namespace: str) -> bool:
        attributes = client.V1ResourceAttributes(
            namespace=namespace, verb="list", resource="configmaps"
        )
        body = client.V1SelfSubjectAccessReview(
            spec=client.V1SelfSubjectAccessReviewSpec(resource_attributes=attributes)
        )
        answer = api.create_self_subject_access_review(body)
        return bool(answer.status.allowed)

    assert (allowed(A), allowed(B)) == (True, False)


def test_kubectl_auth_can_i_answers_yes_or_no_from_the_fakes_rules(
    kubectl: Kubectl, kubectl_kube: FakeKube
) -> None:
    # kubectl auth can-i posts a SelfSubjectAccessReview (as protobuf) and prints "yes" (exit
    # 0) or "no" (exit 1).
    kubectl_kube.create(role(A, "pod-reader", rule(["list", "get"], ["pods"])))
    kubectl_kube.create(binding(A, "pod-reader", "Role", "pod-reader", user(BOB)))
    bob = kubectl.with_token(TOKEN_OF[BOB], kubectl_kube)
    assert bob.ok("auth", "can-i", "list", "pods", "-n", A) == "yes\n"
    assert bob.ok("auth", "can-i", "get", "pods/p", "-n", A) == "yes\n"
    for args in (
        ("list", "pods", "-n", B),
        ("delete", "pods", "-n", A),
        ("get", "pods", "--subresource=log", "-n", A),
        ("list", "nodes"),
        ("get", "/metrics"),
    ):
        done = bob.run("auth", "can-i", *args)
        assert (done.returncode, done.stdout) == (1, "no\n"), args
    assert bob.ok("auth", "can-i", "get", "/version") == "yes\n"
