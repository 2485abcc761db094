"""The embedded Kubernetes-compatible API server: HTTP routing over the API verbs.

Requests are parsed here (path → resource type, namespace, name, subresource; query
options; body by Content-Type) and answered in the forms real clients ask for
(JSON, `Table`, `PartialObjectMetadata`, watch streams). The verbs themselves live
in `operations.py`. Everything is on loopback, HTTPS with a per-state-directory CA,
behind a bearer token (`auth.py`; kubectl sends no token over plain HTTP).
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import orjson
import yaml
from aiohttp import web

from koordqueue import aio
from koordqueue.api import constants as c
from koordqueue.apiserver import (
    admission,
    discovery,
    errors,
    managedfields,
    openapi,
    podlogs,
    printing,
    protobuf,
    rbac,
)
from koordqueue.apiserver.access import review, token_request, token_review
from koordqueue.apiserver.admission import AdmissionWebhooks
from koordqueue.apiserver.auth import (
    KUBECONFIG_FILE,
    authorized,
    client_ssl_context,
    ensure_state_dir,
    load_or_create_certificates,
    load_or_create_token,
    write_kubeconfig,
)
from koordqueue.apiserver.builtin import (
    BUILTIN_TYPES,
    CRD_KEY,
    INITIAL_NAMESPACES,
    NAMESPACE_KEY,
    POD_KEY,
    REVIEW_KEYS,
    SELF_REVIEW_KEYS,
    SERVICE_ACCOUNT_KEY,
    TOKEN_REVIEW_KEY,
)
from koordqueue.apiserver.controls import PREFIX as CONTROLS_PREFIX
from koordqueue.apiserver.controls import Access, Controls
from koordqueue.apiserver.gc import GarbageCollector
from koordqueue.apiserver.operations import (
    APPLY_PATCH,
    FOREGROUND,
    ORPHAN,
    PATCH_TYPES,
    DeleteOptions,
    Operations,
    check_fields,
    make_filter,
    now_rfc3339,
)
from koordqueue.apiserver.patch import deep_copy
from koordqueue.apiserver.registry import Registry, ResourceType
from koordqueue.apiserver.selectors import SelectorError, parse_field_selector, parse_label_selector
from koordqueue.apiserver.store import ADDED, DELETED, Event, Store
from koordqueue.apiserver.tokens import (
    ADMIN,
    API_AUDIENCE,
    AUTHENTICATED,
    SA_PREFIX,
    TokenIssuer,
    UserInfo,
    load_or_create_key,
)
from koordqueue.apiserver.tokens import service_account_user as sa_user
from koordqueue.apiserver.watch import Watcher, WatchHub, encode_event
from koordqueue.apiserver.yamlbody import load_body
from koordqueue.manifests import all_crds

log = logging.getLogger(__name__)

VERSION_INFO = {
    "major": "1", "minor": "32", "gitVersion": "v1.32.0", "gitCommit": "koord-queue-embedded",
    "gitTreeState": "clean", "buildDate": "2024-12-11T00:00:00Z", "goVersion": "go1.23.3",
    "compiler": "gc", "platform": "linux/amd64",
}
JSON = "application/json"
YAML_TYPES = ("application/yaml", "application/x-yaml", "text/yaml")
DEFAULT_WATCH_TIMEOUT = 1800.0
MAX_BODY = 3 * 1024 * 1024  # kube-apiserver's request size limit
_TYPE_KEYS = frozenset({"kind", "apiVersion"})  # what a built-in list's items leave out
# An aggregated API's answer (see APIServer.aggregate): (tail, query, user, groups) -> (code, body).
AggregatedAPI = Callable[[str, dict[str, str], str, tuple[str, ...]], Awaitable[tuple[int, dict[str, Any]]]]
USER = web.RequestKey("user", UserInfo)  # who sent the request, set by the middleware


Headers = list[tuple[str, str]]


def _json(body: Any, status: int = 200, headers: dict[str, str] | Headers | None = None,
          content_type: str = JSON) -> web.Response:
    out = list(headers.items()) if isinstance(headers, dict) else list(headers or [])
    out.append(("Content-Type", content_type))
    return web.Response(body=orjson.dumps(body), status=status, headers=out)


def _warning_headers(warnings: list[str] | None) -> Headers | None:
    """One `Warning: 299 - "text"` header per warning, the text quoted as RFC 7234 says; the
    same text once, as kube-apiserver's recorder has it (a write done again adds its warnings again)."""
    if not warnings:
        return None
    out: Headers = []
    for text in dict.fromkeys(warnings):
        out.append(("Warning", '299 - "' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'))
    return out


def _error(e: errors.APIError) -> web.Response:
    return _json(e.status(), e.code, e.headers or None)


def _bool(value: str | None) -> bool:
    return value in ("true", "1", "True")


def _valid_text(obj: Any) -> Any:
    """YAML's escapes can write a lone UTF-16 surrogate ("\\ud800"), which no JSON encoder
    takes; kube-apiserver's YAML-to-JSON conversion turns it into U+FFFD, and so do we."""
    try:
        orjson.dumps(obj)
        return obj
    except TypeError as e:
        if "surrogates" not in str(e):
            return obj  # another fault (a YAML alias to itself...): refused where it always was

    def fix(value: Any) -> Any:
        if isinstance(value, str):
            return value.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
        if isinstance(value, dict):
            return {fix(k): fix(v) for k, v in value.items()}
        if isinstance(value, list):
            return [fix(v) for v in value]
        return value

    return fix(obj)


class APIServer:
    """The server and its state directory. `await start()`, use `url`/`token`/`kubeconfig_path`, `await stop()`."""

    def __init__(self, state_dir: Path, port: int = 0, crds: list[dict[str, Any]] | None = None,
                 seed: int | None = None, test_controls: bool = False) -> None:
        """`crds`: CRD manifests installed (created or updated) on start; None: the project's own
        (`koordqueue.api.crds.all_crds()`). `seed` makes error injection reproducible.
        `test_controls`: serve the fault-injection controls over HTTP under `/_test/` (tests and
        benchmarks ask for them; a user's server has no such door). From Python, `controls` is
        always there."""
        self.state_dir = Path(state_dir)
        self._requested_port = port
        self._crds = crds
        self._seed = seed
        self._test_controls = test_controls
        self._registry = Registry()
        self._aggregated: dict[tuple[str, str], AggregatedAPI] = {}
        self._pod_logs = podlogs.PodLogs()
        self._log_followers: set[asyncio.Event] = set()
        self._stopping = False
        self._runner: web.AppRunner | None = None
        self._port = 0
        self._token = ""
        self._ca_pem = b""

    # --- public interface --------------------------------------------------------------
    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self._port}"

    @property
    def token(self) -> str:
        return self._token

    @property
    def ca_pem(self) -> bytes:
        """The CA certificate (PEM) that signed the server's certificate."""
        return self._ca_pem

    @property
    def ca_path(self) -> Path:
        return self.state_dir / "ca.crt"

    def client_ssl_context(self) -> ssl.SSLContext:
        """An SSL context that verifies this server, for aiohttp clients."""
        return client_ssl_context(self._ca_pem)

    @property
    def kubeconfig_path(self) -> Path:
        return self.state_dir / KUBECONFIG_FILE

    def aggregate(self, group: str, version: str, resources: list[dict[str, Any]], answer: AggregatedAPI) -> None:
        """Serve ``group/version`` from ``answer`` where kube-apiserver would proxy it to an
        APIService: listed by discovery from ``resources`` (an APIResourceList's), each request
        authenticated and authorized here by RBAC as kube-apiserver does before proxying, then
        answered by ``answer(path after the version, query, user name, groups)``. It is called
        directly (no TLS hop, no front-proxy certificate: this server is in the same process)."""
        subresources: dict[str, set[str]] = {}
        for entry in resources:
            plural, _, sub = str(entry["name"]).partition("/")
            if sub:
                subresources.setdefault(plural, set()).add(sub)
        for entry in resources:
            if "/" not in entry["name"]:
                self._registry.add(ResourceType(
                    group, version, entry["kind"], entry["name"], entry.get("singularName", ""),
                    bool(entry.get("namespaced")), subresources=frozenset(subresources.get(entry["name"], ())),
                    verbs=tuple(entry.get("verbs") or ())))
        self._aggregated[(group, version)] = answer

    @property
    def registry(self) -> Registry:
        return self._registry

    @property
    def controls(self) -> Controls:
        return self._controls

    @property
    def store(self) -> Store:
        return self._store

    @property
    def gc(self) -> GarbageCollector:
        return self._gc

    @property
    def pod_logs(self) -> podlogs.PodLogs:
        """Where `kubectl logs` reads each container's output (attach a real process's here)."""
        return self._pod_logs

    def issue_token(self, namespace: str, name: str, expiration_seconds: int = 3600) -> str:
        """A token for the ServiceAccount namespace/name, as `kubectl create token` would get (404 if absent)."""
        rt = self._registry.get("", "v1", "serviceaccounts")
        assert rt is not None
        account = self._ops.get(rt, namespace, name)
        answer = token_request(self._store, self._issuer, account, {"spec": {"expirationSeconds": expiration_seconds}})
        return str(answer["status"]["token"])

    def write_kubeconfig_for(self, namespace: str, name: str, path: Path, expiration_seconds: int = 3600) -> Path:
        """A kubeconfig (mode 0600) that acts as the ServiceAccount namespace/name: what a controller
        running under that ServiceAccount would use."""
        write_kubeconfig(path, self.url, self.issue_token(namespace, name, expiration_seconds), self._ca_pem)
        return path

    async def start(self) -> None:
        self._stopping = False
        ensure_state_dir(self.state_dir)
        self._token = load_or_create_token(self.state_dir)
        self._issuer = TokenIssuer(load_or_create_key(self.state_dir))
        server_ssl, self._ca_pem = load_or_create_certificates(self.state_dir)
        self._store = Store(self.state_dir / "state.db")
        self._registry = Registry()
        for rt in BUILTIN_TYPES:
            self._registry.add(rt)
        self._admission = AdmissionWebhooks(self._store, self._registry)
        self._ops = Operations(self._store, self._registry, self._admission.mutate, self._admission.validate)
        self._ops.load_crds()
        self._hub = WatchHub()
        self._store.listeners.append(self._hub)
        self._store.listeners.append(self._end_watches_of_removed_crds)
        self._controls = Controls(self._store, self._hub, self._seed)
        self._authorizer = rbac.Authorizer(self._store)
        self._gc = GarbageCollector(self._ops)
        self._store.listeners.append(self._gc)
        await self._bootstrap()
        app = web.Application(middlewares=[self._middleware], client_max_size=MAX_BODY)
        self._routes(app)
        self._runner = web.AppRunner(app, handler_cancellation=True, access_log=None, shutdown_timeout=2.0)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", self._requested_port, ssl_context=server_ssl)
        await site.start()
        self._port = self._runner.addresses[0][1]
        write_kubeconfig(self.kubeconfig_path, self.url, self._token, self._ca_pem)
        self._gc.start()

    def _end_watches_of_removed_crds(self, event: Event) -> None:
        if event.key == CRD_KEY and event.type == DELETED:
            spec = event.obj["spec"]
            self._hub.close_all(f"{spec['group']}/{spec['names']['plural']}")

    async def stop(self) -> None:
        if self._runner is None:
            return
        self._controls.resume()
        self._hub.close_all()
        self._stopping = True
        for follower in self._log_followers:
            follower.set()
        await self._gc.stop()
        await self._runner.cleanup()
        self._runner = None
        await self._admission.close()
        self._store.close()

    async def __aenter__(self) -> APIServer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def _bootstrap(self) -> None:
        ns_rt = self._registry.get("", "v1", "namespaces")
        crd_rt = self._registry.get("apiextensions.k8s.io", "v1", "customresourcedefinitions")
        assert ns_rt is not None and crd_rt is not None
        for name in INITIAL_NAMESPACES:
            if self._store.get(NAMESPACE_KEY, "", name) is None:
                await self._ops.create(ns_rt, "", {"metadata": {"name": name}})
        for key, obj in rbac.bootstrap_objects():
            rt = next(t for t in BUILTIN_TYPES if t.storage_key == key)
            if self._store.get(key, "", obj["metadata"]["name"]) is None:
                await self._ops.create(rt, "", obj)
        for manifest in self._crds if self._crds is not None else all_crds():
            manifest = deep_copy(manifest)
            current = self._store.get(CRD_KEY, "", manifest["metadata"]["name"])
            if current is None:
                await self._ops.create(crd_rt, "", manifest)
            elif current.get("spec") != manifest.get("spec"):
                manifest["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
                await self._ops.update(crd_rt, "", current["metadata"]["name"], manifest)
        self._store.flush()

    # --- plumbing -----------------------------------------------------------------------
    def _routes(self, app: web.Application) -> None:
        r = app.router
        r.add_get("/version", self._version)
        for probe in ("/healthz", "/readyz", "/livez"):
            r.add_get(probe, self._ok)
            r.add_get(probe + "/{check:.*}", self._ok)
        r.add_get("/api", self._discovery_core)
        r.add_get("/apis", self._discovery_groups)
        r.add_get("/api/{version}", self._discovery_core_version)
        r.add_get("/apis/{group}", self._discovery_group)
        r.add_get("/apis/{group}/{version}", self._discovery_group_version)
        r.add_get("/openapi/v3", self._openapi_index)
        r.add_get("/openapi/v3/{path:.+}", self._openapi_document)
        r.add_route("*", "/api/{version}/{tail:.+}", self._resource)
        r.add_route("*", "/apis/{group}/{version}/{tail:.+}", self._resource)
        if self._test_controls:
            self._controls.add_routes(app)

    @web.middleware
    async def _middleware(self, request: web.Request, handler: Any) -> web.StreamResponse:
        try:
            user = self._authenticate(request.headers.get("Authorization"))
            if user is None:
                raise errors.unauthorized()
            request[USER] = self._impersonate(request, user)
            admission.REQUESTER.set(request[USER].as_dict())
            if "tail" not in request.match_info:  # not a resource: discovery, OpenAPI, health, test controls
                attrs = rbac.Attributes(verb=request.method.lower(), path=request.path)
                if request.path.startswith(CONTROLS_PREFIX) and not user.is_admin or \
                        not self._authorizer.allowed(user, attrs):
                    raise rbac.forbidden(user, attrs)
            if self._controls.paused and not request.path.startswith(CONTROLS_PREFIX):
                await self._controls.wait_running()
            response: web.StreamResponse = await handler(request)
            return response
        except errors.APIError as e:
            return _error(e)
        except web.HTTPNotFound:
            return _error(errors.resource_not_found())
        except web.HTTPMethodNotAllowed:
            return _error(errors.method_not_allowed())
        except web.HTTPRequestEntityTooLarge:
            return _error(errors.request_entity_too_large(f"limit is {MAX_BODY}"))
        except web.HTTPException as e:
            return _error(errors.APIError(e.status, e.reason, e.text or e.reason))
        except (ConnectionResetError, asyncio.CancelledError):
            raise
        except Exception as e:  # a bug of ours: say so, never drop the connection
            log.exception("internal error serving %s %s", request.method, request.path)
            return _error(errors.internal(str(e)))

    async def _version(self, request: web.Request) -> web.Response:
        return _json(VERSION_INFO)

    async def _ok(self, request: web.Request) -> web.Response:
        return web.Response(text="ok")

    # --- discovery and OpenAPI ---------------------------------------------------------------
    def _discovery(self, request: web.Request, core: bool) -> web.Response:
        form = discovery.negotiate(request.headers.get("Accept"))
        if form is None:
            raise errors.not_acceptable([JSON])
        if form.aggregated:
            doc = discovery.aggregated_discovery(self._registry, core, form.aggregated)
        elif core:
            doc = discovery.api_versions(f"127.0.0.1:{self._port}")
        else:
            doc = discovery.api_group_list(self._registry)
        return web.Response(body=orjson.dumps(doc), headers={"Content-Type": form.content_type})

    async def _discovery_core(self, request: web.Request) -> web.Response:
        return self._discovery(request, True)

    async def _discovery_groups(self, request: web.Request) -> web.Response:
        return self._discovery(request, False)

    async def _discovery_core_version(self, request: web.Request) -> web.Response:
        return self._found(discovery.api_resource_list(self._registry, "", request.match_info["version"]))

    async def _discovery_group(self, request: web.Request) -> web.Response:
        return self._found(discovery.api_group(self._registry, request.match_info["group"]))

    async def _discovery_group_version(self, request: web.Request) -> web.Response:
        info = request.match_info
        return self._found(discovery.api_resource_list(self._registry, info["group"], info["version"]))

    def _found(self, doc: dict[str, Any] | None) -> web.Response:
        if doc is None:
            raise errors.resource_not_found()
        return _json(doc)

    async def _openapi_index(self, request: web.Request) -> web.Response:
        return _json(openapi.index(self._registry))

    async def _openapi_document(self, request: web.Request) -> web.Response:
        parts = request.match_info["path"].split("/")
        if parts[0] == "api" and len(parts) == 2:
            doc = openapi.group_version_document(self._registry, "", parts[1])
        elif parts[0] == "apis" and len(parts) == 3:
            doc = openapi.group_version_document(self._registry, parts[1], parts[2])
        else:
            doc = None
        return self._found(doc)

    # --- resources ---------------------------------------------------------------------------
    def _route(self, request: web.Request) -> tuple[ResourceType, str | None, str, str]:
        """(type, namespace or None, name or "", subresource or "") from the path; 404 if not served."""
        info = request.match_info
        group = info.get("group", "")
        if not group and not request.path.startswith("/api/"):
            raise errors.resource_not_found()
        segs = info["tail"].split("/")
        namespace: str | None = None
        if segs[0] == "namespaces" and len(segs) >= 3 and not (len(segs) == 3 and segs[2] in ("status", "finalize")):
            namespace, segs = segs[1], segs[2:]
        if len(segs) > 3 or not all(segs):
            raise errors.resource_not_found()
        rt = self._registry.get(group, info["version"], segs[0])
        if rt is None:
            raise errors.resource_not_found()
        name = segs[1] if len(segs) > 1 else ""
        sub = segs[2] if len(segs) > 2 else ""
        if namespace is not None and not rt.namespaced:
            raise errors.resource_not_found()
        if rt.namespaced and namespace is None and name:
            raise errors.resource_not_found()
        return rt, namespace, name, sub  # (a subresource not served is refused once the request is authorized)

    async def _resource(self, request: web.Request) -> web.StreamResponse:
        rt, namespace, name, sub = self._route(request)
        method, q = request.method, request.query
        ns = namespace or ""
        if not name:
            verb = {"GET": "watch" if _bool(q.get("watch")) else "list", "POST": "create",
                    "DELETE": "deletecollection"}.get(method)
        elif sub in ("binding", "token"):
            verb = "create" if method == "POST" else None
        elif sub == "log":
            verb = "get" if method == "GET" else None
        elif sub and sub not in rt.subresources:
            verb = {"GET": "get", "PUT": "update", "PATCH": "patch", "DELETE": "delete", "POST": "create"}.get(method)
        elif sub:
            verb = {"GET": "get", "PUT": "update", "PATCH": "patch"}.get(method)
        else:
            verb = {"GET": "get", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}.get(method)
        if verb is None or (not sub and verb not in rt.verbs):
            raise errors.method_not_allowed()
        self._authorize(request, verb, rt, ns, name, sub)
        if sub and sub not in rt.subresources:
            # As kube-apiserver, after authorization: a custom resource's handler answers that the
            # object is not found (whether it exists or not; e.g. /status where the CRD version has
            # no status subresource), a built-in type's path matches no route.
            raise errors.not_found(rt, name) if rt.from_crd else errors.resource_not_found()
        aggregated = self._aggregated.get((rt.group, rt.version))
        if aggregated is not None:
            user = request[USER]
            code, doc = await aggregated(request.match_info["tail"], dict(request.query), user.username, user.groups)
            return _json(doc, code)
        self._controls.check(verb, rt, name)
        if rt.storage_key == TOKEN_REVIEW_KEY:
            return _json(token_review(await self._read_object(request), self._authenticate), 201)
        if rt.storage_key in REVIEW_KEYS:
            return _json(review(rt, await self._read_object(request), request[USER], self._authorizer), 201)
        if sub == "token":
            body = await self._read_object(request)
            account = self._ops.get(rt, ns, name)
            return _json(token_request(self._store, self._issuer, account, body), 201)
        dry_run = q.get("dryRun") == "All"
        if verb in ("list", "watch", "deletecollection"):
            accept = self._selector(rt, q)
            if verb == "watch":
                return await self._watch(request, rt, namespace, accept)
            if verb == "list":
                return self._list(request, rt, namespace, accept)
            opts = await self._delete_options(request)
            gone = self._ops.delete_collection(rt, namespace, accept, opts)
            return self._respond_list(request, rt, gone, str(self._store.rv))
        if sub == "log":
            return await self._pod_log(request, rt, ns, name)
        if verb == "get":
            return self._respond(request, rt, self._ops.get(rt, ns, name))
        if verb == "create" and sub == "binding":
            return await self._bind(request, rt, ns, name)
        warnings: list[str] = []
        manager = managedfields.manager_name(q.get("fieldManager", ""), request.headers.get("User-Agent", ""))
        managedfields.check_manager(manager)
        if verb == "create":
            body = self._validate_fields(request, rt, await self._read_object(request), warnings)
            obj = await self._ops.create(rt, ns, body, dry_run, manager=manager)
            return self._respond(request, rt, obj, 201, warnings)
        if verb == "update":
            body = self._validate_fields(request, rt, await self._read_object(request), warnings)
            obj = await self._ops.update(rt, ns, name, body, sub, dry_run, manager=manager)
            return self._respond(request, rt, obj, 200, warnings)
        if verb == "patch":
            patch_type = request.content_type
            if patch_type not in PATCH_TYPES:
                raise errors.unsupported_media_type(patch_type, PATCH_TYPES)
            if patch_type == APPLY_PATCH:
                return await self._apply(request, rt, ns, name, sub, dry_run)
            obj = await self._ops.patch(rt, ns, name, patch_type, await request.read(), sub, dry_run,
                                        check=lambda o, old: self._validate_fields(request, rt, o, warnings, old),
                                        manager=manager)
            return self._respond(request, rt, obj, 200, warnings)
        opts = await self._delete_options(request)
        obj, _gone = self._ops.delete(rt, ns, name, opts)
        return self._respond(request, rt, obj)

    def _authenticate(self, header: str | None) -> UserInfo | None:
        """The admin, a ServiceAccount whose token is in force, or None (401)."""
        if authorized(header, self._token):
            return ADMIN
        if not header or not header.startswith("Bearer "):
            return None
        claims = self._issuer.verify(header[len("Bearer "):].strip())
        if claims is None or API_AUDIENCE not in claims.audiences:
            return None
        account = self._store.get(SERVICE_ACCOUNT_KEY, claims.namespace, claims.name)
        if account is None or account["metadata"].get("uid") != claims.uid or \
                account["metadata"].get("deletionTimestamp"):
            return None
        if claims.bound_kind:
            bound = self._store.get(f"/{claims.bound_kind.lower()}s", claims.namespace, claims.bound_name)
            if bound is None or bound["metadata"].get("uid") != claims.bound_uid:
                return None
        return sa_user(claims.namespace, claims.name, claims.uid)

    def _impersonate(self, request: web.Request, user: UserInfo) -> UserInfo:
        """`Impersonate-User` / `Impersonate-Group` (kubectl --as, --as-group): act as someone else, if
        the caller may `impersonate` that user (or ServiceAccount) and those groups."""
        target = request.headers.get("Impersonate-User")
        groups = tuple(request.headers.getall("Impersonate-Group", ()))
        if target is None:
            if groups:
                raise errors.bad_request("requested impersonation of groups without impersonating a user")
            return user
        account = target[len(SA_PREFIX):].split(":", 1) if target.startswith(SA_PREFIX) else None
        if account is not None and len(account) == 2:
            checks = [rbac.Attributes("impersonate", resource="serviceaccounts", namespace=account[0],
                                      name=account[1])]
        else:
            checks = [rbac.Attributes("impersonate", resource="users", name=target)]
        checks += [rbac.Attributes("impersonate", resource="groups", name=group) for group in groups]
        for attrs in checks:
            if not self._authorizer.allowed(user, attrs):
                raise rbac.forbidden(user, attrs)
        if account is not None and len(account) == 2 and not groups:
            return sa_user(account[0], account[1])
        return UserInfo(target, (*groups, AUTHENTICATED) if AUTHENTICATED not in groups else groups)

    def _authorize(self, request: web.Request, verb: str, rt: ResourceType, ns: str, name: str, sub: str) -> None:
        """RBAC on a resource request (403 if refused); every decision goes to the per-user log."""
        user = request[USER]
        if not name and verb in ("list", "watch"):  # a list of one named object is authorized by its name
            name = _name_from_field_selector(request.query.get("fieldSelector", ""))
        if rt.storage_key == NAMESPACE_KEY and name:
            ns = name  # a namespace is in itself, for RoleBindings
        attrs = rbac.Attributes(verb=verb, group=rt.group, resource=rt.plural, subresource=sub, namespace=ns,
                                name=name)
        allowed = rt.storage_key in SELF_REVIEW_KEYS or self._authorizer.allowed(user, attrs)
        self._controls.record(user.username, Access(verb, rt.group, rt.plural, sub), allowed)
        if not allowed:
            raise rbac.forbidden(user, attrs)
        if verb == "watch" and _bool(request.query.get("sendInitialEvents")):
            self._controls.record_streamed(user.username, Access("list", rt.group, rt.plural, sub))

    def _selector(self, rt: ResourceType, q: Any) -> Any:
        try:
            labels = parse_label_selector(q.get("labelSelector", ""))
            fields = parse_field_selector(q.get("fieldSelector", ""))
        except SelectorError as e:
            raise errors.bad_request(f"unable to parse requirement: {e}" if "parse" not in str(e) else str(e)) from None
        check_fields(rt, fields)
        return make_filter(labels, fields)

    async def _read_object(self, request: web.Request) -> Any:
        ctype = request.content_type
        raw = await request.read()
        if ctype in YAML_TYPES:
            try:
                return _valid_text(load_body(raw))
            except yaml.YAMLError as e:
                raise errors.bad_request(f"error converting YAML to JSON: {e}") from None
        if ctype == protobuf.CONTENT_TYPE:
            try:
                return protobuf.decode_object(raw)
            except protobuf.ProtobufError as e:
                raise errors.APIError(415, "UnsupportedMediaType", f"the body of the request could not be "
                                      f"decoded: {e}; accepted media types include: {JSON}, application/yaml") from None
        if ctype not in (JSON, "application/octet-stream"):
            raise errors.unsupported_media_type(ctype, [JSON, "application/yaml", protobuf.CONTENT_TYPE])
        try:
            return orjson.loads(raw)
        except orjson.JSONDecodeError as e:
            raise errors.bad_request(f"couldn't get version/kind; json parse error: {e}") from None

    def _validate_fields(self, request: web.Request, rt: ResourceType, obj: Any, warnings: list[str],
                         stored: Any = None) -> Any:
        """`fieldValidation`: Strict rejects unknown fields, Warn (the default) warns, Ignore ignores.
        ``stored``: the object a patch was applied to; what the patch left as it was is not looked at."""
        mode = request.query.get("fieldValidation", "Warn")
        if mode not in ("Strict", "Warn", "Ignore"):
            raise errors.bad_request(f"fieldValidation parameter unsupported: {mode}")
        if mode == "Ignore" or not isinstance(obj, dict):
            return obj
        unknown = openapi.unknown_fields(rt, obj, stored)
        if unknown and mode == "Strict":
            raise errors.bad_request(openapi.strict_error_message(rt, unknown))
        warnings.extend(openapi.warning_texts(unknown))
        return obj

    async def _apply(self, request: web.Request, rt: ResourceType, ns: str, name: str, sub: str,
                     dry_run: bool) -> web.Response:
        """Server-side apply (apply.py): creates the object or merges the configuration in."""
        if sub:
            raise errors.APIError(415, "UnsupportedMediaType", "this server does not serve server-side apply "
                                  f"to the {sub} subresource; send a merge or JSON patch")
        manager = request.query.get("fieldManager", "")
        if not manager:
            raise errors.unprocessable('PatchOptions.meta.k8s.io "" is invalid: fieldManager: Required value: '
                                       "is required for apply patch")
        if request.query.get("force", "false") not in ("true", "false"):
            raise errors.bad_request(f"invalid force: {request.query['force']!r}")
        try:
            config = load_body(await request.read())
        except yaml.YAMLError as e:
            raise errors.bad_request(f"error decoding YAML: {e}") from None
        warnings: list[str] = []
        if self._store.get(rt.storage_key, ns if rt.namespaced else "", name) is None:
            self._authorize(request, "create", rt, ns, name, "")  # an apply that creates needs create too
        obj, created = await self._ops.apply(rt, ns, name, config, manager, dry_run,
                                             check=lambda o: self._validate_fields(request, rt, o, warnings),
                                             force=request.query.get("force") == "true")
        return self._respond(request, rt, obj, 201 if created else 200, warnings)

    async def _delete_options(self, request: web.Request) -> DeleteOptions:
        q = request.query
        body: Any = {}
        raw = await request.read()
        if raw.strip() and request.content_type == protobuf.CONTENT_TYPE:
            try:
                body = protobuf.decode_delete_options(raw)
            except protobuf.ProtobufError as e:
                raise errors.bad_request(f"error decoding DeleteOptions: {e}") from None
        elif raw.strip():
            try:
                body = orjson.loads(raw)
            except orjson.JSONDecodeError as e:
                raise errors.bad_request(f"error decoding DeleteOptions: {e}") from None
            if not isinstance(body, dict):
                raise errors.bad_request("DeleteOptions must be a JSON object")
        policy = q.get("propagationPolicy") or body.get("propagationPolicy")
        orphan = q.get("orphanDependents") or body.get("orphanDependents")
        if policy is None and orphan is not None:
            policy = ORPHAN if _bool(str(orphan).lower()) else None
        if policy not in (None, "Background", FOREGROUND, ORPHAN):
            raise errors.bad_request(f'propagationPolicy: Unsupported value: "{policy}": supported values: '
                                     '"Foreground", "Background", "Orphan"')
        pre = body.get("preconditions") or {}
        dry = q.get("dryRun") == "All" or body.get("dryRun") == ["All"]
        return DeleteOptions(policy, pre.get("uid"), pre.get("resourceVersion"), dry)

    async def _bind(self, request: web.Request, rt: ResourceType, ns: str, name: str) -> web.Response:
        body = await self._read_object(request)
        target = (body.get("target") or {}).get("name") if isinstance(body, dict) else None
        if not target:
            raise errors.invalid(rt, name, [("target.name", "Required value")])
        pod = self._ops.get(rt, ns, name)
        node = (pod.get("spec") or {}).get("nodeName")
        if node:
            raise errors.conflict(rt, name, f"pod {name} is already assigned to node \"{node}\"")
        if (pod.get("spec") or {}).get("schedulingGates"):  # kube-apiserver's assignPod refuses it so
            raise errors.internal(f"pod {name} has non-empty .spec.schedulingGates")
        new = deep_copy(pod)
        new.setdefault("spec", {})["nodeName"] = target
        status = new.setdefault("status", {})
        conditions = [c for c in status.get("conditions") or () if c.get("type") != "PodScheduled"]
        conditions.append({"type": "PodScheduled", "status": "True", "lastTransitionTime": now_rfc3339()})
        status["conditions"] = conditions
        self._ops.write_system(rt, pod, new)
        return _json({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}, 201)

    # --- pods/log -----------------------------------------------------------------------------
    async def _pod_log(self, request: web.Request, rt: ResourceType, ns: str, name: str) -> web.StreamResponse:
        """A container's output (podlogs.py): at once, or with `follow` as it is written, until the
        container ends, the pod goes, or the client leaves."""
        opts = podlogs.parse_options(name, request.query, time.time())
        pod = self._ops.get(rt, ns, name)
        container = podlogs.container_of(pod, opts.container)
        headers = {"Content-Type": "text/plain", "Cache-Control": "no-cache, private"}
        if not (pod.get("spec") or {}).get("nodeName"):
            return web.Response(body=b"", headers=headers)  # no host yet: an empty log, as kube-apiserver's
        lines, ended, due = self._container_output(pod, container, opts)
        first = podlogs.select(lines, opts, None)
        if not opts.follow or ended:
            return web.Response(body=_limited(b"".join(podlogs.render(line, opts) for line in first), opts),
                                headers=headers)
        uid = pod["metadata"].get("uid")
        wake = asyncio.Event()
        loop = asyncio.get_running_loop()

        def on_change(event: Any) -> None:
            if event.key == POD_KEY and event.namespace == ns and event.obj["metadata"]["name"] == name:
                wake.set()

        def written() -> None:  # on the writer's thread
            loop.call_soon_threadsafe(wake.set)

        buffer = self._pod_logs.buffer_for(pod, container)
        unfollow = buffer.follow(written) if buffer is not None else None
        self._store.listeners.append(on_change)
        self._log_followers.add(wake)
        resp = web.StreamResponse(headers=headers)
        resp.enable_chunked_encoding()
        budget = opts.limit_bytes
        try:
            await resp.prepare(request)
            batch, sent = first, lines[-1].seq if lines else -1
            while True:
                for line in batch:
                    data = podlogs.render(line, opts)
                    if budget is not None:
                        data, budget = data[:budget], budget - len(data)
                    await resp.write(data)
                    if budget is not None and budget <= 0:
                        ended = True
                        break
                if ended or self._stopping:
                    break
                await aio.wait_event(wake, None if due is None else max(due - time.time(), 0.0))
                wake.clear()
                now = self._store.get(POD_KEY, ns, name)
                if now is None or now["metadata"].get("uid") != uid:
                    break  # the pod and its logs are gone
                try:
                    lines, ended, due = self._container_output(now, container, opts)
                except errors.APIError:
                    break
                batch = podlogs.select(lines, opts, sent)
                sent = lines[-1].seq if lines else sent
            await resp.write_eof()
        except (ConnectionResetError, RuntimeError):
            pass  # the client went away
        finally:
            self._log_followers.discard(wake)
            self._store.listeners.remove(on_change)
            if unfollow is not None:
                unfollow()
        return resp

    def _container_output(self, pod: dict[str, Any], container: str,
                          opts: podlogs.Options) -> tuple[list[podlogs.LogLine], bool, float | None]:
        """(what the container wrote so far, whether it has ended, when the simulation writes next)."""
        run = podlogs.container_run(pod, container, opts.previous)
        ended = run.finished is not None
        buffer = self._pod_logs.buffer_for(pod, container)
        if buffer is not None:
            return buffer.lines(), ended, None
        lines, due = podlogs.simulated_output(pod, container, run, time.time())
        return lines, ended, due

    # --- responses ---------------------------------------------------------------------------
    @staticmethod
    def _present(rt: ResourceType, obj: dict[str, Any]) -> dict[str, Any]:
        """The object as seen through this version (all versions of a CRD share storage)."""
        if obj.get("apiVersion") != rt.api_version:
            return {**obj, "apiVersion": rt.api_version}
        return obj

    @staticmethod
    def _form(request: web.Request) -> tuple[str, str]:
        """("Table", version) / ("PartialObjectMetadata", "v1") / ("", "") for plain objects."""
        accept = request.headers.get("Accept", "")
        version = printing.table_version(accept)
        if version is not None:
            return "Table", version
        if "as=PartialObjectMetadata" in accept:
            return "PartialObjectMetadata", "v1"
        return "", ""

    @staticmethod
    def _table(rt: ResourceType, request: web.Request, objs: list[dict[str, Any]], version: str,
               list_meta: dict[str, Any] | None = None, headers: bool = True) -> dict[str, Any]:
        try:
            return printing.to_table(rt, objs, request.query.get("includeObject", ""), headers=headers,
                                     list_meta=list_meta, version=version)
        except ValueError as e:
            raise errors.bad_request(str(e)) from None

    def _respond(self, request: web.Request, rt: ResourceType, obj: dict[str, Any], status: int = 200,
                 warnings: list[str] | None = None) -> web.Response:
        headers = _warning_headers(warnings)
        form, version = self._form(request)
        if form == "Table":
            return _json(self._table(rt, request, [obj], version), status, headers,
                         printing.table_content_type(version))
        if form == "PartialObjectMetadata":
            return _json(_partial(obj), status, headers)
        return _json(self._present(rt, obj), status, headers)

    def _list(self, request: web.Request, rt: ResourceType, namespace: str | None, accept: Any) -> web.Response:
        q = request.query
        try:
            limit = int(q.get("limit") or 0)
        except ValueError:
            raise errors.bad_request(f"invalid limit: {q.get('limit')!r}") from None
        page = self._ops.list(rt, namespace, accept, max(limit, 0), q.get("continue", ""))
        return self._respond_list(request, rt, page.items, page.resource_version, page.continue_token,
                                  page.remaining)

    def _respond_list(self, request: web.Request, rt: ResourceType, items: list[dict[str, Any]], rv: str,
                      token: str = "", remaining: int | None = None) -> web.Response:
        meta: dict[str, Any] = {"resourceVersion": rv}
        if token:
            meta["continue"] = token
        if remaining is not None:
            meta["remainingItemCount"] = remaining
        form, version = self._form(request)
        if form == "Table":
            return _json(self._table(rt, request, items, version, meta), 200, None,
                         printing.table_content_type(version))
        if form == "PartialObjectMetadata":
            body = {"kind": "PartialObjectMetadataList", "apiVersion": "meta.k8s.io/v1", "metadata": meta,
                    "items": [_partial(o) for o in items]}
        elif rt.from_crd is None:
            # kube-apiserver writes a built-in kind's list items without their kind and
            # apiVersion (the list names them once); a CRD's items keep theirs.
            body = {"kind": rt.list_kind, "apiVersion": rt.api_version, "metadata": meta,
                    "items": [{k: v for k, v in o.items() if k not in _TYPE_KEYS} for o in items]}
        else:
            body = {"kind": rt.list_kind, "apiVersion": rt.api_version, "metadata": meta,
                    "items": [self._present(rt, o) for o in items]}
        return _json(body)

    # --- watch -------------------------------------------------------------------------------
    async def _watch(self, request: web.Request, rt: ResourceType, namespace: str | None,
                     accept: Any) -> web.StreamResponse:
        q = request.query
        rv = q.get("resourceVersion", "")
        try:
            timeout = float(q.get("timeoutSeconds") or DEFAULT_WATCH_TIMEOUT)
            since = int(rv) if rv not in ("", "0") else None
        except ValueError:
            raise errors.bad_request(f"invalid resourceVersion or timeoutSeconds: {rv!r}") from None
        bookmarks = _bool(q.get("allowWatchBookmarks"))
        initial_end = bookmarks and _bool(q.get("sendInitialEvents"))
        encoder = None
        form, version = self._form(request)
        if form == "Table":
            self._table(rt, request, [], version)  # 400 now for a bad includeObject
            first = [True]

            def encoder(event_type: str, obj: dict[str, Any]) -> bytes:
                table = self._table(rt, request, [obj], version, headers=first[0])
                first[0] = False
                return encode_event(event_type, table)

        watcher = Watcher(rt.storage_key, namespace, accept, rt.api_version, encoder)
        lines: list[bytes] = []
        try:
            if since is None:
                lines = [watcher.line(ADDED, o) for o in self._store.items(rt.storage_key, namespace)
                         if accept is None or accept(o)]
            else:
                for event in self._store.events_since(since):
                    if event.key == rt.storage_key:
                        event_type = watcher.translate(event)
                        if event_type is not None:
                            lines.append(watcher.line(event_type, event.obj, event.encoded))
        except errors.APIError as e:
            lines, watcher.closed = [encode_event("ERROR", e.status())], True
        if initial_end:
            lines.append(self._bookmark(rt, {c.INITIAL_EVENTS_END_ANNOTATION: "true"}))
        if not watcher.closed:
            self._hub.add(watcher)
        loop = asyncio.get_running_loop()
        timers = [loop.call_later(timeout, watcher.close)]

        def tick() -> None:
            watcher.push(self._bookmark(rt))
            timers.append(loop.call_later(self._controls.bookmark_interval, tick))

        if bookmarks:
            timers.append(loop.call_later(self._controls.bookmark_interval, tick))
        resp = web.StreamResponse(headers={"Content-Type": JSON, "Cache-Control": "no-cache, private"})
        resp.enable_chunked_encoding()
        try:
            await resp.prepare(request)
            if lines:
                await resp.write(b"".join(lines))
            while not watcher.closed:
                await watcher.ready.wait()
                watcher.ready.clear()
                if watcher.buffer:
                    chunk, watcher.buffer = watcher.buffer, []
                    await resp.write(b"".join(chunk))
            await resp.write_eof()
        except (ConnectionResetError, RuntimeError):
            pass  # the client went away
        finally:
            self._hub.discard(watcher)
            for timer in timers:
                timer.cancel()
        return resp

    def _bookmark(self, rt: ResourceType, annotations: dict[str, str] | None = None) -> bytes:
        meta: dict[str, Any] = {"resourceVersion": str(self._store.rv)}
        if annotations:
            meta["annotations"] = annotations
        return encode_event("BOOKMARK", {"kind": rt.kind, "apiVersion": rt.api_version, "metadata": meta})


def _name_from_field_selector(text: str) -> str:
    """X when the field selector requires `metadata.name=X` (kube-apiserver authorizes such a list or
    watch as a request for the object X); "" otherwise, or if the selector does not parse (400 later)."""
    try:
        selector = parse_field_selector(text)
    except SelectorError:
        return ""
    names = {r.value for r in selector.requirements if r.field == "metadata.name" and not r.negate}
    return names.pop() if len(names) == 1 else ""


def _limited(data: bytes, opts: podlogs.Options) -> bytes:
    return data if opts.limit_bytes is None else data[:opts.limit_bytes]


def _partial(obj: dict[str, Any]) -> dict[str, Any]:
    return {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": obj["metadata"]}

