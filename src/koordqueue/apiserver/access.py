"""Requests about access that are answered, never stored: TokenRequest and the reviews.

- `POST .../serviceaccounts/NAME/token` (TokenRequest, what `kubectl create token` sends):
  a token for the ServiceAccount, 1 hour by default, at least 10 minutes;
- SelfSubjectAccessReview (`kubectl auth can-i`), SubjectAccessReview (the same for
  someone else), SelfSubjectRulesReview (`kubectl auth can-i --list`), and
  SelfSubjectReview (`kubectl auth whoami`);
- TokenReview: who a bearer token is (a server that takes tokens, as the dashboard, asks).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from koordqueue.apiserver import errors
from koordqueue.apiserver.builtin import POD_KEY, SECRET_KEY
from koordqueue.apiserver.operations import now_rfc3339
from koordqueue.apiserver.rbac import Authorizer, attributes_from_review
from koordqueue.apiserver.registry import ResourceType
from koordqueue.apiserver.store import Store
from koordqueue.apiserver.tokens import (
    API_AUDIENCE,
    DEFAULT_EXPIRATION,
    MAX_EXPIRATION,
    MIN_EXPIRATION,
    TokenClaims,
    TokenIssuer,
    UserInfo,
)

AUTHN_V1 = "authentication.k8s.io/v1"
AUTHZ_V1 = "authorization.k8s.io/v1"
TOKEN_REQUEST = ResourceType(group="authentication.k8s.io", version="v1", kind="TokenRequest",
                             plural="tokenrequests", singular="tokenrequest", namespaced=True)
_BOUND_KINDS = {"Pod": POD_KEY, "Secret": SECRET_KEY}

Object = dict[str, Any]


def _rfc3339(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def token_request(store: Store, issuer: TokenIssuer, account: Object, body: Any) -> Object:
    """The TokenRequest answered: a token for `account` (a ServiceAccount that exists)."""
    meta = account["metadata"]
    name, namespace = meta["name"], meta["namespace"]
    if not isinstance(body, dict):
        raise errors.bad_request("the body must be a TokenRequest object")
    spec = body.get("spec") or {}
    if not isinstance(spec, dict):
        raise errors.bad_request("spec must be an object")
    expiration = spec.get("expirationSeconds")
    expiration = DEFAULT_EXPIRATION if expiration is None else expiration
    if isinstance(expiration, bool) or not isinstance(expiration, int):
        raise errors.invalid(TOKEN_REQUEST, name, [("spec.expirationSeconds", f"Invalid value: {expiration!r}: "
                                                    "must be a whole number of seconds")])
    if expiration < MIN_EXPIRATION:
        raise errors.invalid(TOKEN_REQUEST, name, [("spec.expirationSeconds", f"Invalid value: {expiration}: "
                                                    "may not specify a duration less than 10 minutes")])
    if expiration > MAX_EXPIRATION:
        raise errors.invalid(TOKEN_REQUEST, name, [("spec.expirationSeconds", f"Invalid value: {expiration}: "
                                                    "may not specify a duration larger than 2^32 seconds")])
    audiences = spec.get("audiences") or [API_AUDIENCE]
    if not isinstance(audiences, list) or not all(isinstance(a, str) and a for a in audiences):
        raise errors.invalid(TOKEN_REQUEST, name, [("spec.audiences", "Invalid value: must be a list of strings")])
    bound = spec.get("boundObjectRef")
    bound_kind = bound_name = bound_uid = ""
    if bound:
        bound_kind, bound_name, bound_uid = _bound_object(store, namespace, bound)
    now = int(time.time())
    claims = TokenClaims(namespace, name, str(meta.get("uid", "")), tuple(audiences), now + expiration,
                         bound_kind, bound_name, bound_uid)
    return {
        "kind": "TokenRequest", "apiVersion": AUTHN_V1,
        "metadata": {"name": name, "namespace": namespace, "creationTimestamp": now_rfc3339()},
        "spec": {"audiences": list(audiences), "expirationSeconds": expiration, "boundObjectRef": bound or None},
        "status": {"token": issuer.issue(claims, now), "expirationTimestamp": _rfc3339(now + expiration)},
    }


def _bound_object(store: Store, namespace: str, ref: Any) -> tuple[str, str, str]:
    if not isinstance(ref, dict) or not ref.get("name"):
        raise errors.bad_request("boundObjectRef needs a kind and a name")
    kind = str(ref.get("kind", ""))
    key = _BOUND_KINDS.get(kind)
    if key is None:
        raise errors.bad_request(f'cannot bind token to object of type "{kind}": only Pod and Secret')
    obj = store.get(key, namespace, str(ref["name"]))
    if obj is None:
        raise errors.APIError(404, "NotFound", f'{kind.lower()}s "{ref["name"]}" not found',
                              {"name": ref["name"], "kind": f"{kind.lower()}s"})
    uid = str(obj["metadata"].get("uid", ""))
    if ref.get("uid") and ref["uid"] != uid:
        raise errors.APIError(409, "Conflict", f"the UID in the bound object reference ({ref['uid']}) does not "
                                               f"match the UID in record. The object might have been deleted and "
                                               "then recreated", {})
    return kind, str(ref["name"]), uid


def review(rt: ResourceType, body: Any, user: UserInfo, authorizer: Authorizer) -> Object:
    """Answer a review of kind `rt.kind` about `user` (or, for SubjectAccessReview, about its spec's user)."""
    if not isinstance(body, dict):
        raise errors.bad_request(f"the body must be a {rt.kind} object")
    spec = body.get("spec") or {}
    if not isinstance(spec, dict):
        raise errors.bad_request("spec must be an object")
    out: Object = {"kind": rt.kind, "apiVersion": rt.api_version,
                   "metadata": {"creationTimestamp": None}, "spec": spec}
    if rt.kind == "SelfSubjectReview":
        out["status"] = {"userInfo": user.as_dict()}
        out.pop("spec")
        return out
    if rt.kind == "SelfSubjectRulesReview":
        namespace = spec.get("namespace") or ""
        out["status"] = _rules_review(authorizer, user, str(namespace))
        return out
    if rt.kind == "SubjectAccessReview":
        groups = spec.get("groups") or []
        if not spec.get("user") and not groups:
            raise errors.invalid(rt, "", [("spec.user", "Invalid value: \"\": at least one of user or group "
                                                        "must be specified")])
        user = UserInfo(str(spec.get("user") or ""), tuple(str(g) for g in groups), str(spec.get("uid") or ""))
    attrs = attributes_from_review(spec)
    if attrs is None:
        raise errors.invalid(rt, "", [("spec.resourceAttributes", "Required value: exactly one of "
                                                                  "nonResourceAttributes or resourceAttributes "
                                                                  "must be specified")])
    allowed = authorizer.allowed(user, attrs)
    out["status"] = {"allowed": allowed}
    if allowed:
        out["status"]["reason"] = _why(user)
    return out


def _why(user: UserInfo) -> str:
    return "system:masters may do anything" if user.is_admin else "allowed by RBAC"


def _rules_review(authorizer: Authorizer, user: UserInfo, namespace: str) -> Object:
    if user.is_admin:
        return {"resourceRules": [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]}],
                "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["*"]}], "incomplete": False}
    resource_rules: list[Object] = []
    non_resource_rules: list[Object] = [{"verbs": ["get"], "nonResourceURLs": ["/api", "/api/*", "/apis",
                                                                                "/apis/*", "/version", "/openapi/*",
                                                                                "/healthz", "/livez", "/readyz"]}]
    for rule in authorizer.rules_in(user, namespace):
        if rule.get("nonResourceURLs"):
            non_resource_rules.append({"verbs": list(rule.get("verbs") or []),
                                       "nonResourceURLs": list(rule.get("nonResourceURLs") or [])})
        else:
            entry = {"verbs": list(rule.get("verbs") or []), "apiGroups": list(rule.get("apiGroups") or []),
                     "resources": list(rule.get("resources") or [])}
            if rule.get("resourceNames"):
                entry["resourceNames"] = list(rule.get("resourceNames") or [])
            resource_rules.append(entry)
    self_reviews = [{"verbs": ["create"], "apiGroups": ["authorization.k8s.io"],
                     "resources": ["selfsubjectaccessreviews", "selfsubjectrulesreviews"]},
                    {"verbs": ["create"], "apiGroups": ["authentication.k8s.io"], "resources": ["selfsubjectreviews"]}]
    return {"resourceRules": self_reviews + resource_rules, "nonResourceRules": non_resource_rules,
            "incomplete": False}


def token_review(body: Any, authenticate: Callable[[str], UserInfo | None]) -> Object:
    """Answer a TokenReview: the user its token authenticates as (by ``authenticate``, given an
    Authorization header), or not authenticated. A token for another audience than the ones
    asked is not accepted, as kube-apiserver's authenticators check audiences."""
    if not isinstance(body, dict):
        raise errors.bad_request("the body must be a TokenReview object")
    spec = body.get("spec") or {}
    if not isinstance(spec, dict):
        raise errors.bad_request("spec must be an object")
    token = spec.get("token")
    if not isinstance(token, str) or not token:
        raise errors.bad_request("token is required for TokenReview in authentication")
    out: Object = {"kind": "TokenReview", "apiVersion": AUTHN_V1, "metadata": {"creationTimestamp": None},
                   "spec": {k: v for k, v in spec.items() if k != "token"}}
    audiences = spec.get("audiences") or [API_AUDIENCE]
    user = authenticate(f"Bearer {token}") if API_AUDIENCE in audiences else None
    if user is None:
        out["status"] = {"user": {}, "error": "invalid bearer token"}
    else:
        out["status"] = {"authenticated": True, "user": user.as_dict(), "audiences": [API_AUDIENCE]}
    return out
