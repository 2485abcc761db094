"""DeleteOptions as clients send them: JSON or protobuf body, or query parameters.

client-go's typed clients (helm purging its release Secret on `helm uninstall`) send a
protobuf DeleteOptions; kubectl sends JSON or puts propagationPolicy in the query.
"""

from __future__ import annotations

import pytest

from koordqueue.apiserver.protobuf import CONTENT_TYPE, MAGIC, ProtobufError, decode_delete_options
from koordqueue.apiserver.server import APIServer
from koordqueue.apiserver.testing import APIClient, eventually

from .conftest import WIDGETS, configmap, widget
from .test_api_lifecycle import gone, owned_by

CMS = "/api/v1/namespaces/default/configmaps"
# The exact body helm 4 sends to delete its release Secret: an empty DeleteOptions.
HELM_PURGE = b'k8s\x00\n\x13\n\x02v1\x12\rDeleteOptions\x12\x00\x1a\x00"\x00'


def _varint(n: int) -> bytes:
    out = b""
    while True:
        byte, n = n & 0x7F, n >> 7
        if not n:
            return out + bytes([byte])
        out += bytes([byte | 0x80])


def _field(number: int, value: bytes | str | int | bool) -> bytes:
    if isinstance(value, (bool, int)):
        return _varint(number << 3) + _varint(int(value))
    data = value.encode() if isinstance(value, str) else value
    return _varint(number << 3 | 2) + _varint(len(data)) + data


def delete_options(*fields: bytes, api_version: str = "v1", kind: str = "DeleteOptions") -> bytes:
    type_meta = _field(1, api_version) + _field(2, kind)
    return MAGIC + _field(1, type_meta) + _field(2, b"".join(fields))


def test_decoding() -> None:
    assert decode_delete_options(HELM_PURGE) == {}
    body = delete_options(_field(1, 0), _field(2, _field(1, "u-1") + _field(2, "7")), _field(3, False),
                          _field(4, "Foreground"), _field(5, "All"), _field(6, True))
    assert decode_delete_options(body) == {
        "preconditions": {"uid": "u-1", "resourceVersion": "7"}, "orphanDependents": False,
        "propagationPolicy": "Foreground", "dryRun": ["All"],
        "ignoreStoreReadErrorWithClusterBreakingPotential": True}
    with pytest.raises(ProtobufError, match="expected a DeleteOptions"):
        decode_delete_options(delete_options(kind="ConfigMap"))
    with pytest.raises(ProtobufError, match="not supported"):
        decode_delete_options(delete_options(_field(9, "x")))


async def test_helms_protobuf_body_deletes(api: APIClient) -> None:
    await api.post(CMS, configmap("a"))
    status, obj, _ = await api.delete(f"{CMS}/a", raw=HELM_PURGE, content_type=CONTENT_TYPE)
    assert status == 200 and obj["metadata"]["name"] == "a"
    assert (await api.get(f"{CMS}/a"))[0] == 404


async def test_protobuf_options_are_honoured(api: APIClient) -> None:
    _, obj, _ = await api.post(CMS, configmap("a"))
    stale = delete_options(_field(2, _field(1, "not-the-uid")))
    status, body, _ = await api.delete(f"{CMS}/a", raw=stale, content_type=CONTENT_TYPE)
    assert status == 409 and "Precondition failed" in body["message"]
    dry = delete_options(_field(5, "All"))
    assert (await api.delete(f"{CMS}/a", raw=dry, content_type=CONTENT_TYPE))[0] == 200
    assert (await api.get(f"{CMS}/a"))[0] == 200  # a dry run deletes nothing
    bad = delete_options(_field(4, "Sideways"))
    status, body, _ = await api.delete(f"{CMS}/a", raw=bad, content_type=CONTENT_TYPE)
    assert status == 400 and 'Unsupported value: "Sideways"' in body["message"]
    right = delete_options(_field(2, _field(1, obj["metadata"]["uid"])))
    assert (await api.delete(f"{CMS}/a", raw=right, content_type=CONTENT_TYPE))[0] == 200
    assert (await api.get(f"{CMS}/a"))[0] == 404


async def test_a_body_that_is_no_delete_options_is_a_bad_request(api: APIClient) -> None:
    await api.post(CMS, configmap("a"))
    status, body, _ = await api.delete(f"{CMS}/a", raw=b"k8s\x00\xff", content_type=CONTENT_TYPE)
    assert status == 400 and body["message"].startswith("error decoding DeleteOptions")
    status, body, _ = await api.delete(f"{CMS}/a", raw=b"{not json", content_type="application/json")
    assert status == 400 and body["message"].startswith("error decoding DeleteOptions")
    assert (await api.get(f"{CMS}/a"))[0] == 200


async def test_propagation_policy_in_a_protobuf_body(apiserver: APIServer, api: APIClient) -> None:
    """Orphan, said in protobuf, keeps the dependent (test_api_lifecycle has it in the query)."""
    _, owner, _ = await api.post(WIDGETS, widget("owner"))
    child = configmap("child")
    child["metadata"]["ownerReferences"] = owned_by(owner)
    await api.post(CMS, child)
    orphan = delete_options(_field(4, "Orphan"))
    assert (await api.delete(f"{WIDGETS}/owner", raw=orphan, content_type=CONTENT_TYPE))[0] == 200
    await eventually(lambda: gone(api, f"{WIDGETS}/owner"))
    await apiserver.gc.idle()
    status, kept, _ = await api.get(f"{CMS}/child")
    assert status == 200 and "ownerReferences" not in kept["metadata"]
