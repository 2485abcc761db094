"""The embedded control plane as an attacker on the same machine meets it, beyond
tests/apiserver (which covers 401 with no or a wrong token, kubeconfig 0600, state
directory 0700 and the https://127.0.0.1 URL): the listening socket is bound to loopback
only (read from the kernel's socket table, no traffic sent elsewhere), every other way of
presenting a credential is 401, and a fuzzer (hypothesis) throws malformed paths, query
strings, selectors, headers and bodies (JSON, YAML, protobuf, patches) at it: no 500, no
crash, and the server answers normally after each request.
"""

from __future__ import annotations

import http.client
import json
import logging
import ssl
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from koordqueue.apiserver.testing import ThreadedAPIServer
from koordqueue.manifests import all_crds

pytestmark = pytest.mark.timeout(240)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ThreadedAPIServer]:
    with ThreadedAPIServer(tmp_path_factory.mktemp("apiserver") / "state", crds=all_crds(), seed=1,
                           test_controls=True) as running:
        yield running


class Raw:
    """One HTTPS connection, requests sent exactly as given (no client library cleans them)."""

    def __init__(self, server: ThreadedAPIServer) -> None:
        context = ssl.create_default_context(cadata=server.server.ca_pem.decode())
        self.port = int(server.url.rsplit(":", 1)[1])
        self.context = context
        self.token = server.token

    def send(self, method: str, path: str, body: bytes | None = None, headers: dict[str, str] | None = None,
             token: str | None = "") -> tuple[int, bytes]:
        conn = http.client.HTTPSConnection("127.0.0.1", self.port, context=self.context, timeout=5)
        try:
            sent = dict(headers or {})
            if token == "":
                sent.setdefault("Authorization", f"Bearer {self.token}")
            elif token is not None:
                sent["Authorization"] = token
            conn.putrequest(method, path, skip_accept_encoding=True)
            for name, value in sent.items():
                conn.putheader(name, value)
            if body is not None:
                conn.putheader("Content-Length", str(len(body)))
            conn.endheaders(body)
            response = conn.getresponse()
            try:
                data = response.read(65536)
            except TimeoutError:  # a watch that stays open: it answered, that is enough
                data = b""
            return response.status, data
        finally:
            conn.close()


def test_it_listens_on_loopback_only(server: ThreadedAPIServer) -> None:
    port = int(server.url.rsplit(":", 1)[1])
    listening = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        if not Path(table).exists():
            continue
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            address, port_hex = fields[1].rsplit(":", 1)
            if int(port_hex, 16) == port and fields[3] == "0A":  # state LISTEN
                listening.append(address)
    assert listening == ["0100007F"], listening  # 127.0.0.1, nothing else (no 0.0.0.0, no IPv6)
    assert server.url == f"https://127.0.0.1:{port}"


def test_secrets_on_disk_are_private(server: ThreadedAPIServer) -> None:
    state = server.server.state_dir
    assert stat.S_IMODE(state.stat().st_mode) == 0o700
    for name in ("kubeconfig", "token", "sa.key", "server.key"):
        path = state / name
        if path.exists():
            assert stat.S_IMODE(path.stat().st_mode) == 0o600, name


@pytest.mark.parametrize("credential", [
    None,  # none
    "Bearer",  # the scheme alone
    "Bearer ",
    "bearer {token}",  # the scheme in the wrong case
    "Basic YWRtaW46YWRtaW4=",  # admin:admin
    "Bearer {token}x",  # one character more
    "Bearer {short}",  # a prefix of it
    "Bearer {token} {token}",
    "Token {token}",
    "Bearer \u202e{token}",  # a right-to-left mark in front
])
def test_every_other_credential_is_401(server: ThreadedAPIServer, credential: str | None) -> None:
    raw = Raw(server)
    header = None if credential is None else credential.format(token=raw.token, short=raw.token[:-4])
    for path in ("/api/v1/namespaces/default/configmaps", "/version", "/apis", "/openapi/v3",
                 "/api/v1/pods?watch=true", "/_test/state", f"/api/v1/namespaces?access_token={raw.token}"):
        try:
            status, body = raw.send("GET", path, token=header)
        except (http.client.HTTPException, UnicodeEncodeError):
            continue  # the client itself would not send that header
        assert status == 401, (credential, path, status)
        assert json.loads(body)["reason"] == "Unauthorized"


# --- the fuzzer ------------------------------------------------------------------------

SEGMENT = st.one_of(
    st.sampled_from(["api", "apis", "v1", "v1alpha1", "namespaces", "default", "koord-queue", "pods", "nodes",
                     "configmaps", "events", "status", "binding", "token", "finalize", "scale", "log",
                     "scheduling.x-k8s.io", "queueunits", "queues", "scheduling.sigs.k8s.io", "elasticquotas",
                     "kubeflow.org", "pytorchjobs", "apiextensions.k8s.io", "customresourcedefinitions",
                     "openapi", "v3", "version", "healthz", "..", ".", "", "%2e%2e", "%2F", "a%00b", "~", "*"]),
    st.text(min_size=0, max_size=12),
)
QUERY_KEYS = ["labelSelector", "fieldSelector", "watch", "resourceVersion", "resourceVersionMatch", "limit",
              "continue", "timeoutSeconds", "dryRun", "fieldManager", "fieldValidation", "propagationPolicy",
              "gracePeriodSeconds", "allowWatchBookmarks", "pretty", "force", "orphanDependents"]
SELECTOR = st.one_of(
    st.text(max_size=30),
    st.sampled_from(["a=b", "a!=b", "a in (x,y)", "a notin (x)", "!a", "a", "a in (", "a=(", "=b", ",,", "a==b",
                     "metadata.name=x", "spec.nodeName!=", "involvedObject.uid=", "a in x", "a,b=", "x in ()"]),
)
CONTENT_TYPES = ["application/json", "application/yaml", "application/vnd.kubernetes.protobuf",
                 "application/merge-patch+json", "application/json-patch+json",
                 "application/strategic-merge-patch+json", "application/apply-patch+yaml", "text/plain",
                 "application/json; charset=utf-16", "multipart/form-data; boundary=x", "", ";;", "*/*"]
ACCEPTS = ["application/json", "application/yaml", "application/vnd.kubernetes.protobuf", "*/*", "",
           "application/json;as=Table;v=v1;g=meta.k8s.io", "application/json;as=PartialObjectMetadataList;v=v1",
           "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList", "text/html", "a/b;as=;v="]
JSON_VALUE = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(2**70), max_value=2**70) | st.floats() | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4),
    max_leaves=12,
)


@st.composite
def object_body(draw: st.DrawFn) -> bytes:
    """Something close to a real object, with parts replaced by anything."""
    obj = {"apiVersion": draw(st.sampled_from(["v1", "scheduling.x-k8s.io/v1alpha1", "kubeflow.org/v1", "x"])),
           "kind": draw(st.sampled_from(["ConfigMap", "QueueUnit", "PyTorchJob", "ElasticQuota", "Pod", ""])),
           "metadata": draw(st.one_of(
               st.fixed_dictionaries({"name": st.text(max_size=20),
                                      "labels": st.dictionaries(st.text(max_size=8), JSON_VALUE, max_size=3),
                                      "resourceVersion": st.text(max_size=6)}),
               JSON_VALUE)),
           "spec": draw(JSON_VALUE)}
    return json.dumps(obj, allow_nan=True).encode()


BODY = st.one_of(
    st.none(),
    st.binary(max_size=200),
    JSON_VALUE.map(lambda v: json.dumps(v, allow_nan=True).encode()),
    object_body(),
    st.sampled_from([b"{", b"[", b'{"metadata": {"name": "x"}, "data": {"a": 1e400}}', b"\xff\xfe", b"k8s\x00",
                     b"k8s\x00\x0a\xff\xff\xff\xff\x0f", b"---\n- a\n- : b\n", b"a: &x [*x]", b"!!python/object:os.system",
                     b'[{"op": "replace", "path": "/metadata/name", "value": 1}]', b'[{"op": "move"}]',
                     b'{"$patch": "delete"}', b'{"metadata": {"$setElementOrder/finalizers": 5}}',
                     b'{"spec": {"pytorchReplicaSpecs": {"$retainKeys": [1]}}}']),
)


@st.composite
def request(draw: st.DrawFn) -> tuple[str, str, bytes | None, dict[str, str]]:
    # (A method HTTP does not know, "BREW", is refused by the HTTP parser itself with a plain 400.)
    method = draw(st.sampled_from(["GET", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "HEAD"]))
    segments = draw(st.lists(SEGMENT, min_size=0, max_size=8))
    path = "/" + "/".join(segments)
    if path.startswith("/_test"):  # the test controls (pause, errors) are not under test here
        path = "/x" + path
    query = draw(st.dictionaries(st.sampled_from(QUERY_KEYS), st.one_of(SELECTOR, st.text(max_size=10)),
                                 max_size=4))
    if query.get("watch") or "watch" in path:
        query["timeoutSeconds"] = "1"
    if query:
        from urllib.parse import quote
        path += "?" + "&".join(f"{quote(k)}={quote(v, safe='')}" for k, v in query.items())
    headers = {"Content-Type": draw(st.sampled_from(CONTENT_TYPES)), "Accept": draw(st.sampled_from(ACCEPTS))}
    if draw(st.booleans()):
        headers["Impersonate-User"] = draw(st.sampled_from(["system:anonymous", "", "x\u00e9", "admin"]))
    return method, path, draw(BODY), headers


REAL_PATHS = [
    "/api/v1/namespaces/default/configmaps", "/api/v1/namespaces/default/configmaps/fz",
    "/api/v1/namespaces/default/pods", "/api/v1/nodes", "/api/v1/namespaces", "/api/v1/namespaces/default",
    "/apis/scheduling.x-k8s.io/v1alpha1/namespaces/default/queueunits",
    "/apis/scheduling.x-k8s.io/v1alpha1/namespaces/default/queueunits/fz-qu",
    "/apis/scheduling.x-k8s.io/v1alpha1/namespaces/default/queueunits/fz-qu/status",
    "/apis/scheduling.sigs.k8s.io/v1alpha1/namespaces/default/elasticquotas",
    "/apis/kubeflow.org/v1/namespaces/default/pytorchjobs", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
    "/api/v1/namespaces/default/events", "/apis/scheduling.x-k8s.io/v1alpha1/queueunits",
]


@st.composite
def resource_request(draw: st.DrawFn) -> tuple[str, str, bytes | None, dict[str, str]]:
    """A real resource's path, any verb, with selectors, content types and bodies of any kind."""
    from urllib.parse import quote
    path = draw(st.sampled_from(REAL_PATHS))
    method = draw(st.sampled_from(["GET", "POST", "PUT", "PATCH", "DELETE"]))
    query = draw(st.dictionaries(st.sampled_from(QUERY_KEYS), st.one_of(SELECTOR, st.text(max_size=10)), max_size=3))
    if query.get("watch"):
        query["timeoutSeconds"] = "1"
    if query:
        path += "?" + "&".join(f"{quote(k)}={quote(v, safe='')}" for k, v in query.items())
    headers = {"Content-Type": draw(st.sampled_from(CONTENT_TYPES)), "Accept": draw(st.sampled_from(ACCEPTS))}
    return method, path, draw(BODY), headers


@pytest.fixture(scope="module")
def objects(server: ThreadedAPIServer) -> None:
    """Objects for the fuzzer's updates and patches to hit."""
    raw = Raw(server)
    raw.send("POST", "/api/v1/namespaces/default/configmaps",
             json.dumps({"metadata": {"name": "fz"}, "data": {"a": "b"}}).encode(),
             {"Content-Type": "application/json"})
    raw.send("POST", "/apis/scheduling.x-k8s.io/v1alpha1/namespaces/default/queueunits", json.dumps({
        "apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "QueueUnit", "metadata": {"name": "fz-qu"},
        "spec": {"resource": {"cpu": "1"}}}).encode(), {"Content-Type": "application/json"})


def _check(server: ThreadedAPIServer, caplog: pytest.LogCaptureFixture,
           req: tuple[str, str, bytes | None, dict[str, str]]) -> None:
    method, path, body, headers = req
    raw = Raw(server)
    caplog.set_level(logging.ERROR, logger="koordqueue.apiserver")
    try:
        status, data = raw.send(method, _safe_path(path), body, headers)
    except http.client.HTTPException as e:  # e.g. the client itself refusing a header value
        pytest.skip(f"not sendable: {e}")
    assert status < 500, (method, path, headers, body, status, data[:300])
    if status >= 400 and method != "HEAD":
        answer = json.loads(data)  # errors are Status objects, never a stack trace or HTML
        assert answer["kind"] == "Status" and answer["code"] == status, answer
    assert not [r for r in caplog.records if "internal error" in r.getMessage()]
    # Still up and answering.
    status, data = raw.send("GET", "/version")
    assert status == 200 and json.loads(data)["gitVersion"]


@pytest.mark.slow
@settings(max_examples=700, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                  HealthCheck.too_slow])
@given(resource_request())
def test_malformed_writes_to_real_resources_never_get_a_500(
        server: ThreadedAPIServer, objects: None, caplog: pytest.LogCaptureFixture,
        req: tuple[str, str, bytes | None, dict[str, str]]) -> None:
    _check(server, caplog, req)


def test_a_lone_surrogate_written_in_yaml_becomes_the_replacement_character(
        server: ThreadedAPIServer, caplog: pytest.LogCaptureFixture) -> None:
    """Found by the fuzzer above: YAML's "\\ud800" escape gave a string no JSON encoder takes
    (500); kube-apiserver's YAML-to-JSON conversion writes U+FFFD there. (A Namespace of its
    own: the fuzzer may have deleted the shared objects, namespace default included.)"""
    _check(server, caplog, ("POST", "/api/v1/namespaces",
                            b'metadata: {name: surrogate, annotations: {a: "x\\ud800y"}}\n',
                            {"Content-Type": "application/yaml"}))
    status, data = Raw(server).send("GET", "/api/v1/namespaces/surrogate")
    assert status == 200 and json.loads(data)["metadata"]["annotations"]["a"] == "x\ufffdy"


def test_unknown_methods_and_oversized_bodies_are_refused_plainly(server: ThreadedAPIServer) -> None:
    raw = Raw(server)
    status, data = raw.send("BREW", "/api/v1/pods")  # refused by the HTTP parser, before any handler
    assert status == 400
    status, data = raw.send("POST", "/api/v1/namespaces/default/configmaps", b"{" + b" " * (4 << 20) + b"}",
                            {"Content-Type": "application/json"})
    assert status == 413 and json.loads(data)["code"] == 413
    assert raw.send("GET", "/version")[0] == 200


def _safe_path(path: str) -> str:
    """http.client sends the path as given but refuses control characters and non-ASCII: quote those."""
    from urllib.parse import quote
    return quote(path, safe="/?&=%:;,+!*'()[]@$~.-_")


@settings(max_examples=700, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                  HealthCheck.too_slow])
@given(request())
def test_malformed_requests_never_get_a_500(server: ThreadedAPIServer, caplog: pytest.LogCaptureFixture,
                                            req: tuple[str, str, bytes | None, dict[str, str]]) -> None:
    _check(server, caplog, req)
