"""Decoding the protobuf bodies kubectl sends for its `create` generators.

kubectl 1.32 posts `kubectl create configmap|secret|namespace|serviceaccount|priorityclass|
role|clusterrole|rolebinding|clusterrolebinding|token` and `kubectl auth can-i|whoami`
as `application/vnd.kubernetes.protobuf` and does not fall back to JSON on 415. So the
server reads the Kubernetes protobuf envelope (`k8s\\0` + runtime.Unknown) for these
few kinds, with their field numbers from the Kubernetes API definitions, and turns
them into the JSON objects everything else handles. Other kinds stay 415.
An unknown field is an error, never silently dropped.
"""

from __future__ import annotations

import base64
from datetime import UTC, datetime
from typing import Any

MAGIC = b"k8s\x00"
CONTENT_TYPE = "application/vnd.kubernetes.protobuf"


class ProtobufError(ValueError):
    pass


# message name -> field number -> (JSON name, type). Types: str, bytes (base64 in JSON), bool, int,
# time, msg:<Name>, map:str, map:bytes, rep:str, rep:msg:<Name>.
_MESSAGES: dict[str, dict[int, tuple[str, str]]] = {
    "Unknown": {1: ("typeMeta", "msg:TypeMeta"), 2: ("raw", "bytes_raw"), 3: ("contentEncoding", "str"),
                4: ("contentType", "str")},
    "TypeMeta": {1: ("apiVersion", "str"), 2: ("kind", "str")},
    "ObjectMeta": {1: ("name", "str"), 2: ("generateName", "str"), 3: ("namespace", "str"), 4: ("selfLink", "str"),
                   5: ("uid", "str"), 6: ("resourceVersion", "str"), 7: ("generation", "int"),
                   8: ("creationTimestamp", "time"), 9: ("deletionTimestamp", "time"),
                   10: ("deletionGracePeriodSeconds", "int"), 11: ("labels", "map:str"),
                   12: ("annotations", "map:str"), 13: ("ownerReferences", "rep:msg:OwnerReference"),
                   14: ("finalizers", "rep:str")},
    "OwnerReference": {1: ("kind", "str"), 3: ("name", "str"), 4: ("uid", "str"), 5: ("apiVersion", "str"),
                       6: ("controller", "bool"), 7: ("blockOwnerDeletion", "bool")},
    "Time": {1: ("seconds", "int"), 2: ("nanos", "int")},
    "ConfigMap": {1: ("metadata", "msg:ObjectMeta"), 2: ("data", "map:str"), 3: ("binaryData", "map:bytes"),
                  4: ("immutable", "bool")},
    "Secret": {1: ("metadata", "msg:ObjectMeta"), 2: ("data", "map:bytes"), 3: ("type", "str"),
               4: ("stringData", "map:str"), 5: ("immutable", "bool")},
    "Namespace": {1: ("metadata", "msg:ObjectMeta"), 2: ("spec", "msg:NamespaceSpec"),
                  3: ("status", "msg:NamespaceStatus")},
    "NamespaceSpec": {1: ("finalizers", "rep:str")},
    "NamespaceStatus": {1: ("phase", "str")},
    "ServiceAccount": {1: ("metadata", "msg:ObjectMeta"), 2: ("secrets", "rep:msg:ObjectReference"),
                       3: ("imagePullSecrets", "rep:msg:LocalObjectReference"),
                       4: ("automountServiceAccountToken", "bool")},
    "ObjectReference": {1: ("kind", "str"), 2: ("namespace", "str"), 3: ("name", "str"), 4: ("uid", "str"),
                        5: ("apiVersion", "str"), 6: ("resourceVersion", "str"), 7: ("fieldPath", "str")},
    "LocalObjectReference": {1: ("name", "str")},
    "PriorityClass": {1: ("metadata", "msg:ObjectMeta"), 2: ("value", "int"), 3: ("globalDefault", "bool"),
                      4: ("description", "str"), 5: ("preemptionPolicy", "str")},
    # authentication.k8s.io/v1: `kubectl create token`, `kubectl auth whoami`
    "TokenRequest": {1: ("metadata", "msg:ObjectMeta"), 2: ("spec", "msg:TokenRequestSpec"),
                     3: ("status", "msg:TokenRequestStatus")},
    "TokenRequestSpec": {1: ("audiences", "rep:str"), 3: ("boundObjectRef", "msg:BoundObjectReference"),
                         4: ("expirationSeconds", "int")},
    "BoundObjectReference": {1: ("kind", "str"), 2: ("apiVersion", "str"), 3: ("name", "str"), 4: ("uid", "str")},
    "TokenRequestStatus": {1: ("token", "str"), 2: ("expirationTimestamp", "time")},
    "SelfSubjectReview": {1: ("metadata", "msg:ObjectMeta"), 2: ("status", "msg:SelfSubjectReviewStatus")},
    "SelfSubjectReviewStatus": {1: ("userInfo", "msg:UserInfo")},
    "UserInfo": {1: ("username", "str"), 2: ("uid", "str"), 3: ("groups", "rep:str")},
    # authorization.k8s.io/v1: `kubectl auth can-i [--list]`
    "SelfSubjectAccessReview": {1: ("metadata", "msg:ObjectMeta"), 2: ("spec", "msg:SelfSubjectAccessReviewSpec"),
                                3: ("status", "msg:SubjectAccessReviewStatus")},
    "SelfSubjectAccessReviewSpec": {1: ("resourceAttributes", "msg:ResourceAttributes"),
                                    2: ("nonResourceAttributes", "msg:NonResourceAttributes")},
    "SubjectAccessReview": {1: ("metadata", "msg:ObjectMeta"), 2: ("spec", "msg:SubjectAccessReviewSpec"),
                            3: ("status", "msg:SubjectAccessReviewStatus")},
    "SubjectAccessReviewSpec": {1: ("resourceAttributes", "msg:ResourceAttributes"),
                                2: ("nonResourceAttributes", "msg:NonResourceAttributes"), 3: ("user", "str"),
                                4: ("groups", "rep:str"), 6: ("uid", "str")},
    "ResourceAttributes": {1: ("namespace", "str"), 2: ("verb", "str"), 3: ("group", "str"), 4: ("version", "str"),
                           5: ("resource", "str"), 6: ("subresource", "str"), 7: ("name", "str")},
    "NonResourceAttributes": {1: ("path", "str"), 2: ("verb", "str")},
    "SubjectAccessReviewStatus": {1: ("allowed", "bool"), 2: ("reason", "str"), 3: ("evaluationError", "str"),
                                  4: ("denied", "bool")},
    "SelfSubjectRulesReview": {1: ("metadata", "msg:ObjectMeta"), 2: ("spec", "msg:SelfSubjectRulesReviewSpec"),
                               3: ("status", "msg:SubjectRulesReviewStatus")},
    "SubjectRulesReviewStatus": {1: ("resourceRules", "rep:msg:ResourceRule"),
                                 2: ("nonResourceRules", "rep:msg:NonResourceRule"), 3: ("incomplete", "bool"),
                                 4: ("evaluationError", "str")},
    "ResourceRule": {1: ("verbs", "rep:str"), 2: ("apiGroups", "rep:str"), 3: ("resources", "rep:str"),
                     4: ("resourceNames", "rep:str")},
    "NonResourceRule": {1: ("verbs", "rep:str"), 2: ("nonResourceURLs", "rep:str")},
    "SelfSubjectRulesReviewSpec": {1: ("namespace", "str")},
    # rbac.authorization.k8s.io/v1: `kubectl create role|clusterrole|rolebinding|clusterrolebinding`
    "ClusterRole": {1: ("metadata", "msg:ObjectMeta"), 2: ("rules", "rep:msg:PolicyRule"),
                    3: ("aggregationRule", "msg:AggregationRule")},
    "Role": {1: ("metadata", "msg:ObjectMeta"), 2: ("rules", "rep:msg:PolicyRule")},
    "PolicyRule": {1: ("verbs", "rep:str"), 2: ("apiGroups", "rep:str"), 3: ("resources", "rep:str"),
                   4: ("resourceNames", "rep:str"), 5: ("nonResourceURLs", "rep:str")},
    "AggregationRule": {1: ("clusterRoleSelectors", "rep:msg:LabelSelector")},
    "LabelSelector": {1: ("matchLabels", "map:str"), 2: ("matchExpressions", "rep:msg:LabelSelectorRequirement")},
    "LabelSelectorRequirement": {1: ("key", "str"), 2: ("operator", "str"), 3: ("values", "rep:str")},
    "ClusterRoleBinding": {1: ("metadata", "msg:ObjectMeta"), 2: ("subjects", "rep:msg:Subject"),
                           3: ("roleRef", "msg:RoleRef")},
    "RoleBinding": {1: ("metadata", "msg:ObjectMeta"), 2: ("subjects", "rep:msg:Subject"),
                    3: ("roleRef", "msg:RoleRef")},
    "Subject": {1: ("kind", "str"), 2: ("apiGroup", "str"), 3: ("name", "str"), 4: ("namespace", "str")},
    "RoleRef": {1: ("apiGroup", "str"), 2: ("kind", "str"), 3: ("name", "str")},
    # meta/v1 DeleteOptions: client-go's typed clients (helm's release Secrets) send it
    # with DELETE. Field numbers as in kubectl 1.32's registered descriptor of
    # k8s.io/apimachinery/pkg/apis/meta/v1/generated.proto.
    "DeleteOptions": {1: ("gracePeriodSeconds", "int"), 2: ("preconditions", "msg:Preconditions"),
                      3: ("orphanDependents", "bool"), 4: ("propagationPolicy", "str"), 5: ("dryRun", "rep:str"),
                      6: ("ignoreStoreReadErrorWithClusterBreakingPotential", "bool")},
    "Preconditions": {1: ("uid", "str"), 2: ("resourceVersion", "str")},
}
_RBAC = "rbac.authorization.k8s.io/v1"
KINDS = {("v1", "ConfigMap"), ("v1", "Secret"), ("v1", "Namespace"), ("v1", "ServiceAccount"),
         ("scheduling.k8s.io/v1", "PriorityClass"),
         ("authentication.k8s.io/v1", "TokenRequest"), ("authentication.k8s.io/v1", "SelfSubjectReview"),
         ("authorization.k8s.io/v1", "SelfSubjectAccessReview"), ("authorization.k8s.io/v1", "SubjectAccessReview"),
         ("authorization.k8s.io/v1", "SelfSubjectRulesReview"),
         (_RBAC, "ClusterRole"), (_RBAC, "Role"), (_RBAC, "ClusterRoleBinding"), (_RBAC, "RoleBinding")}


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(data):
            raise ProtobufError("truncated varint")
        b = data[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise ProtobufError("varint too long")


def _fields(data: bytes) -> list[tuple[int, int | bytes]]:
    out: list[tuple[int, int | bytes]] = []
    pos = 0
    while pos < len(data):
        tag, pos = _varint(data, pos)
        number, wire = tag >> 3, tag & 7
        if wire == 0:
            value, pos = _varint(data, pos)
            out.append((number, value))
        elif wire == 2:
            length, pos = _varint(data, pos)
            if pos + length > len(data):
                raise ProtobufError("truncated field")
            out.append((number, data[pos:pos + length]))
            pos += length
        else:
            raise ProtobufError(f"unsupported wire type {wire} for field {number}")
    return out


def _signed(value: int) -> int:
    return value - (1 << 64) if value >= 1 << 63 else value


def _decode(message: str, data: bytes) -> dict[str, Any]:
    schema = _MESSAGES[message]
    out: dict[str, Any] = {}
    for number, value in _fields(data):
        if number not in schema:
            raise ProtobufError(f"field {number} of {message} is not supported by this server")
        name, kind = schema[number]
        if kind in ("int", "bool"):
            if not isinstance(value, int):
                raise ProtobufError(f"{message}.{name}: expected a number")
            out[name] = bool(value) if kind == "bool" else _signed(value)
            continue
        if not isinstance(value, bytes):
            raise ProtobufError(f"{message}.{name}: expected length-delimited data")
        if kind == "str":
            out[name] = value.decode()
        elif kind == "bytes_raw":
            out[name] = value
        elif kind == "time":
            t = _decode("Time", value)
            if t.get("seconds"):
                out[name] = datetime.fromtimestamp(t["seconds"], UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        elif kind.startswith("msg:"):
            out[name] = _decode(kind[4:], value)
        elif kind.startswith("map:"):
            entry = dict(_fields(value))
            key, item = entry.get(1, b""), entry.get(2, b"")
            if not isinstance(key, bytes) or not isinstance(item, bytes):
                raise ProtobufError(f"{message}.{name}: malformed map entry")
            out.setdefault(name, {})[key.decode()] = (
                base64.b64encode(item).decode() if kind == "map:bytes" else item.decode())
        elif kind == "rep:str":
            out.setdefault(name, []).append(value.decode())
        elif kind.startswith("rep:msg:"):
            out.setdefault(name, []).append(_decode(kind[8:], value))
    return {k: v for k, v in out.items() if v not in ("", 0, {}) or isinstance(v, bool)}


def decode_object(body: bytes) -> dict[str, Any]:
    """A Kubernetes protobuf request body as its JSON object; ProtobufError if we cannot read it."""
    if not body.startswith(MAGIC):
        raise ProtobufError("missing the protobuf envelope prefix")
    envelope = _decode("Unknown", body[len(MAGIC):])
    type_meta = envelope.get("typeMeta") or {}
    api_version, kind = type_meta.get("apiVersion", ""), type_meta.get("kind", "")
    if (api_version, kind) not in KINDS:
        raise ProtobufError(f"protobuf bodies of {kind or 'this kind'} are not supported; send JSON")
    obj = _decode(kind, envelope.get("raw", b""))
    obj.setdefault("metadata", {})
    return {"apiVersion": api_version, "kind": kind, **obj}


def decode_delete_options(body: bytes) -> dict[str, Any]:
    """A protobuf DeleteOptions (the body of a DELETE) as its JSON form; ProtobufError if it is
    not one. An empty message (no options) is `{}`."""
    if not body.startswith(MAGIC):
        raise ProtobufError("missing the protobuf envelope prefix")
    envelope = _decode("Unknown", body[len(MAGIC):])
    type_meta = envelope.get("typeMeta") or {}
    api_version, kind = type_meta.get("apiVersion", ""), type_meta.get("kind", "")
    if kind != "DeleteOptions" or api_version not in ("v1", "meta.k8s.io/v1"):
        raise ProtobufError(f"expected a DeleteOptions, got {api_version or '?'} {kind or '?'}")
    return _decode("DeleteOptions", envelope.get("raw", b""))
