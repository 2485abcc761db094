"""Real kubectl 1.32 against the server: it finds it, authenticates, creates and reads objects."""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path

import pytest

from koordqueue.apiserver.protobuf import ProtobufError, decode_object
from koordqueue.apiserver.server import APIServer

pytestmark = pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed")


async def kubectl(server: APIServer, home: Path, *args: str) -> str:
    proc = await asyncio.create_subprocess_exec(
        "kubectl", "--kubeconfig", str(server.kubeconfig_path), "--cache-dir", str(home / "cache"), *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        env={"HOME": str(home), "PATH": str(Path(shutil.which("kubectl") or "").parent)})
    out, err = await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode == 0, err.decode()
    return out.decode()


async def test_kubectl_get_create_and_read(apiserver: APIServer, tmp_path: Path) -> None:
    out = await kubectl(apiserver, tmp_path, "get", "namespaces")
    names = [line.split()[0] for line in out.splitlines()[1:]]
    assert {"default", "kube-system", "koord-queue"} <= set(names)
    assert out.splitlines()[0].split() == ["NAME", "STATUS", "AGE"]
    assert "configmap/settings created" in await kubectl(
        apiserver, tmp_path, "create", "configmap", "settings", "--from-literal=mode=fast")
    obj = json.loads(await kubectl(apiserver, tmp_path, "get", "configmap", "settings", "-o", "json"))
    assert obj["kind"] == "ConfigMap" and obj["data"] == {"mode": "fast"}
    assert obj["metadata"]["namespace"] == "default" and obj["metadata"]["uid"]


def test_protobuf_envelope_decoding() -> None:
    # the body kubectl 1.32 sends for `kubectl create configmap foo --from-literal=a=b`
    body = (b'k8s\x00\n\x0f\n\x02v1\x12\tConfigMap\x12\x1d\n\x13\n\x03foo\x12\x00\x1a\x00"\x00*\x002\x008\x00B\x00'
            b'\x12\x06\n\x01a\x12\x01b\x1a\x00"\x00')
    assert decode_object(body) == {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "foo"},
                                   "data": {"a": "b"}}
    with pytest.raises(ProtobufError):
        decode_object(b"k8s\x00\n\x0f\n\x02v1\x12\tConfigMap\x12\x03\xff\xff")
    with pytest.raises(ProtobufError):
        decode_object(b'k8s\x00\n\x12\n\x07apps/v1\x12\x07Unknown')
