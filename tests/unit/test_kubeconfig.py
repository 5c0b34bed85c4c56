"""Finding the cluster: service account in a pod, or the common kubeconfig shapes."""

from __future__ import annotations

import base64
import os
import ssl
from pathlib import Path

import pytest
import trustme
import yaml

from kube import cluster
from kube.api import KubeApi
from kube.cluster import KubeConfigError, load_target
from kube.errors import KubeError
from sandbox.kube import FakeKube
from sandbox.kube.auth import DEFAULT_USER

IN_A_POD = {"KUBERNETES_SERVICE_HOST": "10.0.0.1", "KUBERNETES_SERVICE_PORT": "443"}


def write_kubeconfig(path: Path, cluster: dict, user: dict, *, context: str = "dev") -> Path:
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": context,
                "contexts": [{"name": context, "context": {"cluster": "c", "user": "u"}}],
                "clusters": [{"name": "c", "cluster": cluster}],
                "users": [{"name": "u", "user": user}],
            }
        )
    )
    return path


def rotate(token: Path, value: str) -> None:
    """A new token swapped in at once, as the kubelet's atomic writer does."""
    fresh = token.with_name(token.name + ".new")
    fresh.write_text(value + "\n")
    fresh.replace(token)


def test_a_pod_uses_its_service_account_and_rereads_a_rotated_token_at_once(
    tmp_path: Path,
) -> None:
    ca = trustme.CA()
    ca.cert_pem.write_to_path(str(tmp_path / "ca.crt"))
    (tmp_path / "token").write_text("first\n")
    target = load_target(IN_A_POD, service_account=tmp_path)
    assert target.server == "https://10.0.0.1:443"
    assert target.in_cluster and isinstance(target.verify, ssl.SSLContext)
    assert target.token() == "first"
    rotate(tmp_path / "token", "second")
    # Not a minute later: the old token may be revoked as soon as the new one is there.
    assert target.token() == "second"


def test_a_token_file_rewritten_in_place_unnoticed_is_read_again_within_the_reload_period(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    token = tmp_path / "token"
    token.write_text("first-1\n")
    read = cluster.TokenFile(token)
    assert read() == "first-1"
    seen = token.stat()
    token.write_text("other-2\n")  # the same size; the mtime set back as if it were too
    os.utime(token, ns=(seen.st_atime_ns, seen.st_mtime_ns))
    assert read() == "first-1"
    monkeypatch.setattr(cluster, "TOKEN_FILE_RELOAD_SECONDS", 0.0)
    assert read() == "other-2"


def test_a_token_file_the_server_refused_is_read_again_at_once(tmp_path: Path) -> None:
    ca = trustme.CA()
    ca.cert_pem.write_to_path(str(tmp_path / "ca.crt"))
    (tmp_path / "token").write_text("revoked\n")
    target = load_target(IN_A_POD, service_account=tmp_path)
    assert target.token() == "revoked"
    seen = (tmp_path / "token").stat()
    (tmp_path / "token").write_text("rotated\n")  # the same size and mtime: unnoticed
    os.utime(tmp_path / "token", ns=(seen.st_atime_ns, seen.st_mtime_ns))
    assert target.token() == "revoked"
    target.token_rejected()  # what a 401 does
    assert target.token() == "rotated"


@pytest.mark.integration
def test_a_401_makes_the_client_read_a_rotated_token_file_for_its_next_request(
    kube: FakeKube, tmp_path: Path
) -> None:
    old = "x" * len(kube.token)  # the rotated token's size, so the rewrite goes unnoticed
    kube.add_token(old, DEFAULT_USER)
    token = tmp_path / "token"
    token.write_text(old)
    config = write_kubeconfig(tmp_path / "config", {"server": kube.url}, {"tokenFile": str(token)})
    api = KubeApi(load_target({}, kubeconfig=str(config)))
    try:
        assert api.get("/api/v1/namespaces")
        # Rotated, then the old token revoked, well within the minute between reads.
        seen = token.stat()
        token.write_text(kube.token)
        os.utime(token, ns=(seen.st_atime_ns, seen.st_mtime_ns))
        kube.remove_token(old)
        with pytest.raises(KubeError) as refused:
            api.get("/api/v1/namespaces")
        assert refused.value.status == 401
        assert api.get("/api/v1/namespaces")  # at once, with the rotated token
    finally:
        api.close()


def test_an_ipv6_service_address_is_bracketed(tmp_path: Path) -> None:
    trustme.CA().cert_pem.write_to_path(str(tmp_path / "ca.crt"))
    (tmp_path / "token").write_text("t")
    target = load_target(
        {"KUBERNETES_SERVICE_HOST": "fd00::1", "KUBERNETES_SERVICE_PORT": "6443"},
        service_account=tmp_path,
    )
    assert target.server == "https://[fd00::1]:6443"


def test_an_explicit_kubeconfig_wins_over_the_service_account(tmp_path: Path) -> None:
    path = write_kubeconfig(
        tmp_path / "config", {"server": "http://127.0.0.1:1/"}, {"token": "static"}
    )
    target = load_target({"KUBERNETES_SERVICE_HOST": "10.0.0.1"}, kubeconfig=str(path))
    assert (target.server, target.verify, target.token(), target.in_cluster) == (
        "http://127.0.0.1:1",
        False,
        "static",
        False,
    )


def test_kubeconfig_with_ca_data_and_client_certificate_data(tmp_path: Path) -> None:
    ca = trustme.CA()
    client = ca.issue_cert("admin")
    cluster = {
        "server": "https://127.0.0.1:6443",
        "certificate-authority-data": base64.b64encode(ca.cert_pem.bytes()).decode(),
    }
    user = {
        "client-certificate-data": base64.b64encode(client.cert_chain_pems[0].bytes()).decode(),
        "client-key-data": base64.b64encode(client.private_key_pem.bytes()).decode(),
    }
    path = write_kubeconfig(tmp_path / "config", cluster, user)
    target = load_target({"KUBECONFIG": str(path)})
    assert isinstance(target.verify, ssl.SSLContext)
    assert target.verify.verify_mode == ssl.CERT_REQUIRED
    assert target.token() is None
    assert list(tmp_path.iterdir()) == [path]  # no key material left behind


def test_kubeconfig_paths_are_relative_to_the_file_and_token_files_are_read(
    tmp_path: Path,
) -> None:
    trustme.CA().cert_pem.write_to_path(str(tmp_path / "ca.pem"))
    (tmp_path / "token").write_text("from-file\n")
    cluster = {"server": "https://k8s.example:6443", "certificate-authority": "ca.pem"}
    path = write_kubeconfig(tmp_path / "config", cluster, {"tokenFile": "token"})
    target = load_target({}, kubeconfig=str(path))
    assert target.token() == "from-file"


def test_insecure_skip_tls_verify_turns_verification_off(tmp_path: Path) -> None:
    cluster = {"server": "https://k8s.example:6443", "insecure-skip-tls-verify": True}
    target = load_target({}, kubeconfig=str(write_kubeconfig(tmp_path / "c", cluster, {})))
    assert isinstance(target.verify, ssl.SSLContext)
    assert target.verify.verify_mode == ssl.CERT_NONE


def test_a_named_context_is_used_and_an_unknown_one_is_a_clear_error(tmp_path: Path) -> None:
    path = write_kubeconfig(tmp_path / "c", {"server": "http://127.0.0.1:1"}, {}, context="prod")
    assert load_target({}, kubeconfig=str(path), context="prod").context == "prod"
    with pytest.raises(KubeConfigError, match="no context named 'staging'"):
        load_target({}, kubeconfig=str(path), context="staging")


def test_no_cluster_at_all_says_what_to_set(tmp_path: Path) -> None:
    with pytest.raises(KubeConfigError, match="KUBECONFIG"):
        load_target({"HOME": str(tmp_path)})
    with pytest.raises(KubeConfigError, match="does not exist"):
        load_target({}, kubeconfig=str(tmp_path / "missing"))


# --- one rule for every role: the scaling role's client is built from the same target -------------


def service_account(directory: Path) -> Path:
    directory.mkdir()
    trustme.CA().cert_pem.write_to_path(str(directory / "ca.crt"))
    (directory / "token").write_text("pod-token\n")
    return directory


def two_contexts(path: Path) -> Path:
    """A kubeconfig whose current context is `laptop` and which also holds `staging`."""
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": "laptop",
                "contexts": [
                    {"name": "laptop", "context": {"cluster": "laptop", "user": "u"}},
                    {"name": "staging", "context": {"cluster": "staging", "user": "u"}},
                ],
                "clusters": [
                    {"name": "laptop", "cluster": {"server": "http://127.0.0.1:1"}},
                    {"name": "staging", "cluster": {"server": "http://127.0.0.1:2"}},
                ],
                "users": [{"name": "u", "user": {"token": "static"}}],
            }
        )
    )
    return path


def test_a_context_wins_over_the_pods_service_account(tmp_path: Path) -> None:
    account = service_account(tmp_path / "account")
    environ = IN_A_POD | {"KUBECONFIG": str(two_contexts(tmp_path / "config"))}
    target = load_target(environ, context="staging", service_account=account)
    assert (target.server, target.context, target.in_cluster) == (
        "http://127.0.0.1:2",
        "staging",
        False,
    )


def test_in_a_pod_without_flags_the_service_account_is_used(tmp_path: Path) -> None:
    account = service_account(tmp_path / "account")
    # KUBECONFIG alone does not move a pod off its own cluster; only a flag does.
    environ = IN_A_POD | {"KUBECONFIG": str(two_contexts(tmp_path / "config"))}
    target = load_target(environ, service_account=account)
    assert (target.server, target.in_cluster) == ("https://10.0.0.1:443", True)
    assert target.service_account == account
    assert target.token() == "pod-token"


def test_a_kubeconfig_flag_wins_and_takes_the_context_flag_with_it(tmp_path: Path) -> None:
    account = service_account(tmp_path / "account")
    path = two_contexts(tmp_path / "config")
    target = load_target(IN_A_POD, kubeconfig=str(path), service_account=account)
    assert (target.server, target.context) == ("http://127.0.0.1:1", "laptop")
    target = load_target(IN_A_POD, kubeconfig=str(path), context="staging")
    assert target.server == "http://127.0.0.1:2"


def test_a_context_with_no_kubeconfig_to_find_it_in_is_a_clear_error(tmp_path: Path) -> None:
    account = service_account(tmp_path / "account")
    with pytest.raises(KubeConfigError, match="--context staging: no kubeconfig"):
        load_target(IN_A_POD | {"HOME": str(tmp_path)}, context="staging", service_account=account)


def test_a_kubeconfig_list_is_merged_as_kubectl_merges_it(
    tmp_path: Path,
) -> None:
    # kubectl: the first file that names a context, cluster or user wins it, and the first
    # current-context counts (https://kubernetes.io/docs/concepts/configuration/organize-cluster-access-kubeconfig/).
    first = tmp_path / "first"
    first.mkdir()
    (first / "token").write_text("first-token")
    write_kubeconfig(
        first / "config", {"server": "http://127.0.0.1:1"}, {"tokenFile": "token"}, context="one"
    )
    second = tmp_path / "second"
    second.mkdir()
    (second / "config").write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": "two",
                "contexts": [
                    {"name": "two", "context": {"cluster": "c2", "user": "u"}},
                    {"name": "one", "context": {"cluster": "c2", "user": "u"}},
                ],
                "clusters": [{"name": "c2", "cluster": {"server": "http://127.0.0.1:2"}}],
                "users": [{"name": "u", "user": {"token": "second-token"}}],
            }
        )
    )
    listed = f"{tmp_path / 'missing'}:{first / 'config'}:{second / 'config'}"
    environ = {"KUBECONFIG": listed}

    current = load_target(environ)  # the first file's current-context, and its own context
    assert (current.context, current.server, current.token()) == (
        "one",
        "http://127.0.0.1:1",
        "first-token",  # the token file is read from the folder of the file naming it
    )
    # A context only the second file holds; its user `u` is the first file's, which wins.
    other = load_target(environ, context="two")
    assert (other.server, other.token()) == ("http://127.0.0.1:2", "first-token")
    assert other.kubeconfig == (first / "config", second / "config")


def test_the_token_from_a_kubeconfig_token_file_follows_its_rotation(
    tmp_path: Path,
) -> None:
    # A rotated token must reach every role's requests (the client asks the target for it
    # on each request).
    (tmp_path / "token").write_text("first\n")
    path = write_kubeconfig(
        tmp_path / "config", {"server": "http://127.0.0.1:1"}, {"tokenFile": "token"}
    )
    target = load_target({}, kubeconfig=str(path))
    assert target.token() == "first"
    rotate(tmp_path / "token", "second")
    assert target.token() == "second"
