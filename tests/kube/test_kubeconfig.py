"""Config loading: kubeconfig files written to tmp, in-cluster dirs, exec plugins, TLS."""

from __future__ import annotations

import asyncio
import base64
import ssl
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import yaml

from koordqueue.kube.config import (
    ConfigError,
    ExecCredentials,
    NoCredentials,
    StaticToken,
    TokenFile,
    load_config,
    load_in_cluster_config,
    load_kubeconfig,
)

if TYPE_CHECKING:
    from conftest import TLSFiles  # the `tls` fixture's type


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def kubeconfig(cluster: dict[str, Any], user: dict[str, Any] | None = None, *, namespace: str | None = None,
               current: str | None = "ctx", extra_contexts: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    context: dict[str, Any] = {"cluster": "c", "user": "u"}
    if namespace:
        context["namespace"] = namespace
    doc: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": cluster}],
        "users": [{"name": "u", "user": user or {}}],
        "contexts": [{"name": "ctx", "context": context}, *(extra_contexts or [])],
    }
    if current:
        doc["current-context"] = current
    return doc


def write(path: Path, doc: dict[str, Any] | str) -> Path:
    path.write_text(doc if isinstance(doc, str) else yaml.safe_dump(doc))
    return path


async def test_token_user_and_context_namespace(tmp_path: Path) -> None:
    p = write(tmp_path / "config", kubeconfig({"server": "http://127.0.0.1:8080/"}, {"token": "s3cret"},
                                              namespace="team-a"))
    cfg = load_config(str(p))
    assert cfg.server == "http://127.0.0.1:8080"
    assert cfg.ssl_context is None
    assert cfg.namespace == "team-a"
    assert isinstance(cfg.credentials, StaticToken)
    assert await cfg.credentials.authorization() == "Bearer s3cret"


def test_explicit_context_wins_over_current(tmp_path: Path) -> None:
    doc = kubeconfig({"server": "http://a:1"}, extra_contexts=[
        {"name": "other", "context": {"cluster": "c", "user": "u", "namespace": "ns2"}}])
    p = write(tmp_path / "config", doc)
    assert load_config(str(p)).namespace == "default"
    assert load_config(str(p), context="other").namespace == "ns2"


async def test_token_file_relative_to_the_kubeconfig_and_reread_after_invalidate(tmp_path: Path) -> None:
    (tmp_path / "tok").write_text("one\n")
    p = write(tmp_path / "config", kubeconfig({"server": "http://a:1"}, {"tokenFile": "tok"}))
    cfg = load_config(str(p))
    assert isinstance(cfg.credentials, TokenFile)
    assert await cfg.credentials.authorization() == "Bearer one"
    (tmp_path / "tok").write_text("two")
    assert await cfg.credentials.authorization() == "Bearer one"  # cached for a while
    cfg.credentials.invalidate()  # what the client does on a 401
    assert await cfg.credentials.authorization() == "Bearer two"


def test_kubeconfig_env_merges_files_first_wins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first = write(tmp_path / "a", {"current-context": "ctx", "contexts": [
        {"name": "ctx", "context": {"cluster": "c", "user": "u", "namespace": "from-a"}}]})
    second = write(tmp_path / "b", kubeconfig({"server": "http://from-b:1"}, {"token": "t"}, namespace="from-b",
                                              current="nope"))
    monkeypatch.setenv("KUBECONFIG", f"{first}:{tmp_path / 'missing'}:{second}")
    cfg = load_config()
    assert cfg.server == "http://from-b:1"
    assert cfg.namespace == "from-a"


def test_kubeconfig_env_with_no_existing_file_is_an_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "nope"))
    with pytest.raises(ConfigError, match="none of the files"):
        load_config()


def test_home_kubeconfig_then_in_cluster_then_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    with pytest.raises(ConfigError, match="no cluster configuration"):
        load_config()
    (tmp_path / ".kube").mkdir()
    write(tmp_path / ".kube" / "config", kubeconfig({"server": "http://home:1"}))
    cfg = load_config()
    assert cfg.server == "http://home:1"
    assert isinstance(cfg.credentials, NoCredentials)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("clusters: [unclosed", "not valid YAML"),
        ("- just\n- a list\n", "not a mapping"),
        ("clusters: {c: 1}\n", "clusters must be a list"),
        ("clusters: [{cluster: {server: 'http://a'}}]\n", "needs a name"),
        ("clusters: []\n", "no current-context"),
    ],
)
def test_malformed_kubeconfigs_say_what_is_wrong(tmp_path: Path, content: str, message: str) -> None:
    p = write(tmp_path / "config", content)
    with pytest.raises(ConfigError, match=message) as info:
        load_config(str(p))
    assert str(p) in str(info.value)


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        (kubeconfig({"server": "http://a"}, current="missing"), "context 'missing' not found"),
        (kubeconfig({"server": "ftp://a"}), "no http\\(s\\) server URL"),
        (kubeconfig({}), "no http\\(s\\) server URL"),
        (kubeconfig({"server": "https://a", "certificate-authority-data": "!!!"}), "not valid base64"),
        (kubeconfig({"server": "https://a", "certificate-authority": "/no/such/ca"}), "does not exist"),
        (kubeconfig({"server": "https://a", "certificate-authority-data": b64(b"garbage")}), "not a valid PEM"),
        (kubeconfig({"server": "http://a"}, {"auth-provider": {"name": "gcp"}}), "auth-provider"),
        (kubeconfig({"server": "http://a"}, {"username": "u", "password": "p"}), "basic auth"),
        (kubeconfig({"server": "http://a"}, {"exec": {"args": ["x"]}}), "without a command"),
    ],
)
def test_invalid_kubeconfig_contents(tmp_path: Path, doc: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_config(str(write(tmp_path / "config", doc)))


def test_context_naming_an_unknown_cluster_or_user(tmp_path: Path) -> None:
    doc = kubeconfig({"server": "http://a"})
    doc["contexts"][0]["context"]["cluster"] = "ghost"
    with pytest.raises(ConfigError, match="unknown cluster 'ghost'"):
        load_config(str(write(tmp_path / "c1", doc)))
    doc = kubeconfig({"server": "http://a"})
    doc["contexts"][0]["context"]["user"] = "ghost"
    with pytest.raises(ConfigError, match="unknown user 'ghost'"):
        load_config(str(write(tmp_path / "c2", doc)))


def test_missing_explicit_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(str(tmp_path / "absent"))


def test_client_certificate_needs_its_key(tmp_path: Path, tls: TLSFiles) -> None:
    doc = kubeconfig({"server": "https://a", "certificate-authority-data": b64(tls.ca_pem)},
                     {"client-certificate-data": b64(tls.client_cert_pem)})
    with pytest.raises(ConfigError, match="both a certificate and a key"):
        load_config(str(write(tmp_path / "config", doc)))


def test_a_key_that_does_not_match_the_certificate(tmp_path: Path, tls: TLSFiles) -> None:
    doc = kubeconfig({"server": "https://a", "certificate-authority-data": b64(tls.ca_pem)},
                     {"client-certificate-data": b64(tls.client_cert_pem),
                      "client-key-data": b64(tls.server_key.read_bytes())})
    with pytest.raises(ConfigError, match="client certificate or key is invalid"):
        load_config(str(write(tmp_path / "config", doc)))


# --- TLS: the SSL context really verifies the server and presents our certificate ------


async def _tls_server(tls: TLSFiles) -> tuple[asyncio.Server, int]:
    """A TLS endpoint that demands a client certificate and answers with its common name."""
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=str(tls.ca))
    ctx.load_cert_chain(str(tls.server_cert), str(tls.server_key))
    ctx.verify_mode = ssl.CERT_REQUIRED

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peercert") or {}
        subject = dict(x[0] for x in peer.get("subject", ()))
        writer.write(subject.get("commonName", "?").encode())
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0, ssl=ctx)
    return server, server.sockets[0].getsockname()[1]


async def _handshake(ctx: ssl.SSLContext, port: int, server_hostname: str) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=ctx, server_hostname=server_hostname)
    data = await reader.read()
    writer.close()
    return data


async def test_inline_ca_and_client_cert_complete_a_mutual_tls_handshake(tmp_path: Path, tls: TLSFiles) -> None:
    server, port = await _tls_server(tls)
    async with server:
        doc = kubeconfig(
            {"server": f"https://127.0.0.1:{port}", "certificate-authority-data": b64(tls.ca_pem),
             "tls-server-name": "kube.test"},
            {"client-certificate-data": b64(tls.client_cert_pem), "client-key-data": b64(tls.client_key_pem)})
        cfg = load_config(str(write(tmp_path / "config", doc)))
        assert cfg.ssl_context is not None and cfg.tls_server_name == "kube.test"
        assert await _handshake(cfg.ssl_context, port, cfg.tls_server_name) == b"alice"
        # The certificate is for kube.test only: the address itself does not verify.
        with pytest.raises(ssl.SSLCertVerificationError):
            await _handshake(cfg.ssl_context, port, "127.0.0.1")


async def test_ca_and_client_cert_files(tmp_path: Path, tls: TLSFiles) -> None:
    server, port = await _tls_server(tls)
    async with server:
        doc = kubeconfig({"server": f"https://127.0.0.1:{port}", "certificate-authority": str(tls.ca)},
                         {"client-certificate": str(tls.client_cert), "client-key": str(tls.client_key)})
        cfg = load_config(str(write(tmp_path / "config", doc)))
        assert cfg.ssl_context is not None
        assert await _handshake(cfg.ssl_context, port, "kube.test") == b"alice"


async def test_without_the_ca_the_server_is_not_trusted_unless_insecure(tmp_path: Path, tls: TLSFiles) -> None:
    server, port = await _tls_server(tls)
    async with server:
        user = {"client-certificate": str(tls.client_cert), "client-key": str(tls.client_key)}
        strict = load_config(str(write(tmp_path / "a", kubeconfig({"server": f"https://127.0.0.1:{port}"}, user))))
        assert strict.ssl_context is not None
        with pytest.raises(ssl.SSLCertVerificationError):
            await _handshake(strict.ssl_context, port, "kube.test")
        insecure = load_config(str(write(tmp_path / "b", kubeconfig(
            {"server": f"https://127.0.0.1:{port}", "insecure-skip-tls-verify": True}, user))))
        assert insecure.ssl_context is not None
        assert await _handshake(insecure.ssl_context, port, "127.0.0.1") == b"alice"


# --- in-cluster ----------------------------------------------------------------------


def _service_account(d: Path, tls: TLSFiles, namespace: str | None = "koord-queue") -> Path:
    d.mkdir()
    (d / "token").write_text("sa-token\n")
    (d / "ca.crt").write_bytes(tls.ca_pem)
    if namespace:
        (d / "namespace").write_text(namespace)
    return d


async def test_in_cluster_service_account(tmp_path: Path, tls: TLSFiles) -> None:
    sa = _service_account(tmp_path / "sa", tls)
    cfg = load_in_cluster_config(sa, {"KUBERNETES_SERVICE_HOST": "10.0.0.1", "KUBERNETES_SERVICE_PORT": "443"})
    assert cfg.server == "https://10.0.0.1:443"
    assert cfg.namespace == "koord-queue"
    assert await cfg.credentials.authorization() == "Bearer sa-token"
    assert cfg.ssl_context is not None
    assert any(c.get("subject") == ((("commonName", "test-ca"),),) for c in cfg.ssl_context.get_ca_certs())


def test_in_cluster_ipv6_host_and_default_namespace(tmp_path: Path, tls: TLSFiles) -> None:
    sa = _service_account(tmp_path / "sa", tls, namespace=None)
    cfg = load_in_cluster_config(sa, {"KUBERNETES_SERVICE_HOST": "fd00::1", "KUBERNETES_SERVICE_PORT": "6443"})
    assert cfg.server == "https://[fd00::1]:6443"
    assert cfg.namespace == "default"


def test_in_cluster_errors(tmp_path: Path, tls: TLSFiles) -> None:
    with pytest.raises(ConfigError, match="KUBERNETES_SERVICE_HOST"):
        load_in_cluster_config(tmp_path, {})
    with pytest.raises(ConfigError, match="token is missing"):
        load_in_cluster_config(tmp_path, {"KUBERNETES_SERVICE_HOST": "h", "KUBERNETES_SERVICE_PORT": "1"})


# --- exec credential plugins -----------------------------------------------------------

PLUGIN = """
import json, os, sys
runs = os.path.join(os.path.dirname(sys.argv[0]), "runs")
n = (int(open(runs).read()) if os.path.exists(runs) else 0) + 1
open(runs, "w").write(str(n))
info = json.loads(os.environ["KUBERNETES_EXEC_INFO"])
assert info["kind"] == "ExecCredential" and info["spec"]["interactive"] is False
status = {"token": os.environ["PREFIX"] + str(n)}
if len(sys.argv) > 1:
    status["expirationTimestamp"] = sys.argv[1]
print(json.dumps({"apiVersion": info["apiVersion"], "kind": "ExecCredential", "status": status}))
"""


def _exec_config(tmp_path: Path, script: str, args: list[str]) -> Path:
    plugin = tmp_path / "plugin.py"
    plugin.write_text(script)
    user = {"exec": {"apiVersion": "client.authentication.k8s.io/v1", "command": sys.executable,
                     "args": [str(plugin), *args], "env": [{"name": "PREFIX", "value": "tok-"}]}}
    return write(tmp_path / "config", kubeconfig({"server": "http://a:1"}, user))


async def test_exec_plugin_token_is_cached_until_invalidated(tmp_path: Path) -> None:
    cfg = load_kubeconfig([_exec_config(tmp_path, PLUGIN, ["2999-01-01T00:00:00Z"])])
    assert isinstance(cfg.credentials, ExecCredentials)
    assert await cfg.credentials.authorization() == "Bearer tok-1"
    assert await cfg.credentials.authorization() == "Bearer tok-1"
    cfg.credentials.invalidate()
    assert await cfg.credentials.authorization() == "Bearer tok-2"


async def test_exec_plugin_token_past_its_expiry_is_refreshed(tmp_path: Path) -> None:
    cfg = load_kubeconfig([_exec_config(tmp_path, PLUGIN, ["2000-01-01T00:00:00Z"])])
    assert await cfg.credentials.authorization() == "Bearer tok-1"
    assert await cfg.credentials.authorization() == "Bearer tok-2"


async def test_exec_plugin_failures_are_config_errors(tmp_path: Path) -> None:
    failing = load_kubeconfig([_exec_config(tmp_path, "import sys; sys.stderr.write('no login'); sys.exit(3)", [])])
    with pytest.raises(ConfigError, match="exited with 3: no login"):
        await failing.credentials.authorization()
    silent = load_kubeconfig([_exec_config(tmp_path, "print('{}')", [])])
    with pytest.raises(ConfigError, match="no ExecCredential status"):
        await silent.credentials.authorization()
