"""Where the API server is and how to authenticate: kubeconfig or in-cluster service account.

We parse the kubeconfig ourselves (pyyaml) instead of using `kubernetes_asyncio.config`:
that loader fills a `kubernetes_asyncio.Configuration` for its own generated ApiClient,
while we need exactly three things for aiohttp: a base URL, an `ssl.SSLContext` and a
source of bearer tokens that can be refreshed (rotated token files, exec plugins).
Building those directly is a page of code and keeps our failure messages ours.

Supported: clusters with certificate-authority(-data), insecure-skip-tls-verify and
tls-server-name; users with token, tokenFile, client-certificate(-data)/client-key(-data)
and exec credential plugins that return a token. Several files in $KUBECONFIG are
merged, the first file to define a name winning, as kubectl does.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import os
import ssl
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Protocol

import orjson
import yaml

SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
DEFAULT_KUBECONFIG = Path("~/.kube/config")
TOKEN_FILE_REREAD_SECONDS = 60.0  # client-go rereads projected service-account tokens each minute
EXEC_EXPIRY_MARGIN_SECONDS = 10.0  # refresh an exec token this long before it expires


class ConfigError(Exception):
    """The cluster configuration is missing, malformed or asks for something unsupported."""


class Credentials(Protocol):
    """A source of the Authorization header, refreshed when the server answers 401."""

    async def authorization(self) -> str | None: ...

    def invalidate(self) -> None: ...


@dataclass
class NoCredentials:
    """Anonymous, or authenticated by client certificate alone."""

    async def authorization(self) -> str | None:
        return None

    def invalidate(self) -> None:
        return None


@dataclass
class StaticToken:
    token: str

    async def authorization(self) -> str | None:
        return f"Bearer {self.token}"

    def invalidate(self) -> None:
        return None


@dataclass
class TokenFile:
    """A token read from a file and reread periodically, because kubelets rotate them."""

    path: Path
    _token: str | None = field(default=None, repr=False)
    _read_at: float = field(default=0.0, repr=False)

    async def authorization(self) -> str | None:
        now = time.monotonic()
        if self._token is None or now - self._read_at > TOKEN_FILE_REREAD_SECONDS:
            try:
                self._token = self.path.read_text().strip()
            except OSError as e:
                raise ConfigError(f"cannot read token file {self.path}: {e}") from e
            self._read_at = now
        return f"Bearer {self._token}"

    def invalidate(self) -> None:
        self._token = None


@dataclass
class ExecCredentials:
    """A client-go exec credential plugin (aws, gke-gcloud-auth-plugin, kubelogin...)."""

    command: str
    args: list[str]
    env: dict[str, str]
    api_version: str
    _token: str | None = field(default=None, repr=False)
    _expires_at: float | None = field(default=None, repr=False)  # time.time()
    _lock: asyncio.Lock = field(default_factory=asyncio.Lock, repr=False)

    async def authorization(self) -> str | None:
        async with self._lock:
            if self._token is None or (
                self._expires_at is not None
                and time.time() > self._expires_at - EXEC_EXPIRY_MARGIN_SECONDS
            ):
                await self._run()
        return f"Bearer {self._token}"

    def invalidate(self) -> None:
        self._token = None

    async def _run(self) -> None:
        exec_info = {
            "apiVersion": self.api_version,
            "kind": "ExecCredential",
            "spec": {"interactive": False},
        }
        env = {**os.environ, **self.env, "KUBERNETES_EXEC_INFO": orjson.dumps(exec_info).decode()}
        try:
            proc = await asyncio.create_subprocess_exec(
                self.command,
                *self.args,
                env=env,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
            )
        except OSError as e:
            raise ConfigError(f"exec credential plugin {self.command!r} cannot start: {e}") from e
        out, err = await proc.communicate()
        if proc.returncode != 0:
            raise ConfigError(
                f"exec credential plugin {self.command!r} exited with {proc.returncode}: "
                f"{err.decode(errors='replace').strip()}"
            )
        try:
            status = orjson.loads(out)["status"]
        except (orjson.JSONDecodeError, KeyError, TypeError) as e:
            raise ConfigError(f"exec credential plugin {self.command!r} printed no ExecCredential status") from e
        token = status.get("token")
        if not token:
            raise ConfigError(
                f"exec credential plugin {self.command!r} returned no token "
                "(plugins that return client certificates are not supported)"
            )
        self._token = token
        expiry = status.get("expirationTimestamp")
        self._expires_at = _parse_timestamp(expiry) if expiry else None


@dataclass
class ClusterConfig:
    """Everything a client needs to talk to one API server."""

    server: str  # base URL without a trailing slash, e.g. https://10.0.0.1:6443
    ssl_context: ssl.SSLContext | None  # None for plain http
    credentials: Credentials
    namespace: str = "default"  # the context's (or service account's) namespace
    tls_server_name: str | None = None
    source: str = ""  # where it came from, for messages


def load_config(kubeconfig: str | None = None, context: str | None = None) -> ClusterConfig:
    """Find the cluster: explicit path, then $KUBECONFIG, then ~/.kube/config, then in-cluster."""
    if kubeconfig:
        return load_kubeconfig([Path(kubeconfig).expanduser()], context)
    env = os.environ.get("KUBECONFIG")
    if env:
        paths = [Path(p).expanduser() for p in env.split(os.pathsep) if p]
        existing = [p for p in paths if p.exists()]
        if not existing:
            raise ConfigError(f"none of the files in $KUBECONFIG exist: {env}")
        return load_kubeconfig(existing, context)
    home = DEFAULT_KUBECONFIG.expanduser()
    if home.exists():
        return load_kubeconfig([home], context)
    if os.environ.get("KUBERNETES_SERVICE_HOST"):
        return load_in_cluster_config()
    raise ConfigError(
        f"no cluster configuration: no --kubeconfig given, $KUBECONFIG unset, {home} missing, "
        "and not running in a pod (KUBERNETES_SERVICE_HOST unset)"
    )


def load_in_cluster_config(
    sa_dir: Path = SERVICE_ACCOUNT_DIR, environ: Mapping[str, str] | None = None
) -> ClusterConfig:
    """The pod's service account: token and CA mounted by the kubelet, address from the env."""
    env = os.environ if environ is None else environ
    host, port = env.get("KUBERNETES_SERVICE_HOST"), env.get("KUBERNETES_SERVICE_PORT")
    if not host or not port:
        raise ConfigError("in-cluster config needs KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT")
    token_path, ca_path = sa_dir / "token", sa_dir / "ca.crt"
    for p in (token_path, ca_path):
        if not p.is_file():
            raise ConfigError(f"in-cluster config: {p} is missing")
    if ":" in host:  # IPv6
        host = f"[{host}]"
    ns_path = sa_dir / "namespace"
    namespace = ns_path.read_text().strip() if ns_path.is_file() else "default"
    return ClusterConfig(
        server=f"https://{host}:{port}",
        ssl_context=_ssl_context(ca_file=ca_path),
        credentials=TokenFile(token_path),
        namespace=namespace or "default",
        source=f"in-cluster service account ({sa_dir})",
    )


def load_kubeconfig(paths: list[Path], context: str | None = None) -> ClusterConfig:
    """Merge kubeconfig files (first definition of a name wins) and resolve one context."""
    clusters: dict[str, tuple[dict[str, Any], Path]] = {}
    users: dict[str, tuple[dict[str, Any], Path]] = {}
    contexts: dict[str, dict[str, Any]] = {}
    current: str | None = None
    for path in paths:
        doc = _read_kubeconfig(path)
        for section, target in (("clusters", clusters), ("users", users)):
            for entry in _named_entries(doc, section, path):
                target.setdefault(entry[0], (entry[1], path))
        for name, body in _named_entries(doc, "contexts", path):
            contexts.setdefault(name, body)
        current = current or doc.get("current-context") or None
    where = ", ".join(str(p) for p in paths)
    ctx_name = context or current
    if not ctx_name:
        raise ConfigError(f"{where}: no current-context set and no context given")
    if ctx_name not in contexts:
        raise ConfigError(f"{where}: context {ctx_name!r} not found (have: {sorted(contexts)})")
    ctx = contexts[ctx_name]
    cluster_name, user_name = ctx.get("cluster"), ctx.get("user")
    if cluster_name not in clusters:
        raise ConfigError(f"{where}: context {ctx_name!r} names unknown cluster {cluster_name!r}")
    cluster, cluster_file = clusters[cluster_name]
    user, user_file = users.get(user_name, ({}, paths[0])) if user_name else ({}, paths[0])
    if user_name and user_name not in users:
        raise ConfigError(f"{where}: context {ctx_name!r} names unknown user {user_name!r}")

    server = cluster.get("server")
    if not isinstance(server, str) or not server.startswith(("http://", "https://")):
        raise ConfigError(f"{cluster_file}: cluster {cluster_name!r} has no http(s) server URL: {server!r}")
    server = server.rstrip("/")
    credentials = _credentials(user, user_file, user_name or "")
    ssl_context = None
    if server.startswith("https://"):
        ssl_context = _ssl_context(
            ca_data=_b64(cluster, "certificate-authority-data", cluster_file),
            ca_file=_file(cluster, "certificate-authority", cluster_file),
            insecure=bool(cluster.get("insecure-skip-tls-verify", False)),
            cert_data=_b64(user, "client-certificate-data", user_file),
            cert_file=_file(user, "client-certificate", user_file),
            key_data=_b64(user, "client-key-data", user_file),
            key_file=_file(user, "client-key", user_file),
        )
    return ClusterConfig(
        server=server,
        ssl_context=ssl_context,
        credentials=credentials,
        namespace=ctx.get("namespace") or "default",
        tls_server_name=cluster.get("tls-server-name") or None,
        source=f"{where} (context {ctx_name})",
    )


def _read_kubeconfig(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise ConfigError(f"kubeconfig {path} does not exist") from None
    except OSError as e:
        raise ConfigError(f"kubeconfig {path} cannot be read: {e}") from e
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise ConfigError(f"kubeconfig {path} is not valid YAML: {e}") from e
    if doc is None:
        doc = {}
    if not isinstance(doc, dict):
        raise ConfigError(f"kubeconfig {path} is not a mapping")
    return doc


def _named_entries(doc: dict[str, Any], section: str, path: Path) -> list[tuple[str, dict[str, Any]]]:
    """`clusters: [{name, cluster: {...}}]` and the like, as (name, body) pairs."""
    entries = doc.get(section) or []
    if not isinstance(entries, list):
        raise ConfigError(f"kubeconfig {path}: {section} must be a list")
    inner = section[:-1]  # clusters -> cluster
    out = []
    for entry in entries:
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
            raise ConfigError(f"kubeconfig {path}: every entry of {section} needs a name")
        body = entry.get(inner) or {}
        if not isinstance(body, dict):
            raise ConfigError(f"kubeconfig {path}: {section} entry {entry['name']!r} is not a mapping")
        out.append((entry["name"], body))
    return out


def _credentials(user: dict[str, Any], path: Path, name: str) -> Credentials:
    if "auth-provider" in user:
        raise ConfigError(f"{path}: user {name!r} uses an auth-provider, which is not supported; use exec")
    if "username" in user or "password" in user:
        raise ConfigError(f"{path}: user {name!r} uses basic auth, which Kubernetes no longer supports")
    if user.get("token"):
        return StaticToken(str(user["token"]))
    token_file = _file(user, "tokenFile", path)
    if token_file:
        return TokenFile(token_file)
    exec_cfg = user.get("exec")
    if exec_cfg:
        if not isinstance(exec_cfg, dict) or not exec_cfg.get("command"):
            raise ConfigError(f"{path}: user {name!r} has an exec section without a command")
        env = {e["name"]: str(e.get("value", "")) for e in exec_cfg.get("env") or []}
        return ExecCredentials(
            command=str(exec_cfg["command"]),
            args=[str(a) for a in exec_cfg.get("args") or []],
            env=env,
            api_version=str(exec_cfg.get("apiVersion", "client.authentication.k8s.io/v1")),
        )
    return NoCredentials()


def _b64(section: dict[str, Any], key: str, path: Path) -> bytes | None:
    value = section.get(key)
    if not value:
        return None
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError, TypeError) as e:
        raise ConfigError(f"{path}: {key} is not valid base64") from e


def _file(section: dict[str, Any], key: str, path: Path) -> Path | None:
    """A file named in a kubeconfig; relative names are relative to the kubeconfig's folder."""
    value = section.get(key)
    if not value:
        return None
    p = Path(str(value)).expanduser()
    p = p if p.is_absolute() else path.parent / p
    if not p.is_file():
        raise ConfigError(f"{path}: {key} {p} does not exist")
    return p


def _ssl_context(
    *,
    ca_data: bytes | None = None,
    ca_file: Path | None = None,
    insecure: bool = False,
    cert_data: bytes | None = None,
    cert_file: Path | None = None,
    key_data: bytes | None = None,
    key_file: Path | None = None,
) -> ssl.SSLContext:
    try:
        if ca_data:
            ctx = ssl.create_default_context(cadata=ca_data.decode())
        elif ca_file:
            ctx = ssl.create_default_context(cafile=str(ca_file))
        else:
            ctx = ssl.create_default_context()
    except (ssl.SSLError, UnicodeDecodeError) as e:
        raise ConfigError(f"certificate authority is not a valid PEM certificate: {e}") from e
    if insecure:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    has_cert, has_key = bool(cert_data or cert_file), bool(key_data or key_file)
    if has_cert != has_key:
        raise ConfigError("a client certificate needs both a certificate and a key")
    if has_cert:
        _load_client_cert(ctx, cert_data, cert_file, key_data, key_file)
    return ctx


def _load_client_cert(
    ctx: ssl.SSLContext,
    cert_data: bytes | None,
    cert_file: Path | None,
    key_data: bytes | None,
    key_file: Path | None,
) -> None:
    """`load_cert_chain` only reads files, so inline data goes through a private temp dir."""
    with tempfile.TemporaryDirectory(prefix="kq-tls-") as tmp:
        if cert_data:
            cert_file = Path(tmp) / "client.crt"
            cert_file.write_bytes(cert_data)
        if key_data:
            key_file = Path(tmp) / "client.key"
            key_file.touch(mode=0o600)
            key_file.write_bytes(key_data)
        try:
            ctx.load_cert_chain(str(cert_file), str(key_file))
        except ssl.SSLError as e:
            raise ConfigError(f"client certificate or key is invalid: {e}") from e


def _parse_timestamp(value: str) -> float:
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError as e:
        raise ConfigError(f"exec credential has a malformed expirationTimestamp {value!r}") from e
