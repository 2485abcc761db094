"""Who a request comes from: the admin token, or a ServiceAccount's token from the TokenRequest API.

ServiceAccount tokens are JWTs as kube-apiserver issues them (`kubectl create token`):
subject `system:serviceaccount:<namespace>:<name>`, audiences, expiry, and the
ServiceAccount's uid (and a bound Pod's or Secret's, if asked), signed with a key
kept in the state directory, so they stay valid across a restart. Ours are HS256
(one local key) where kube-apiserver signs RS256; clients treat tokens as opaque.
A token stops working when it expires, or when its ServiceAccount (or bound
object) is deleted or replaced by one of the same name.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import secrets
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

ISSUER = "https://kubernetes.default.svc.cluster.local"
API_AUDIENCE = ISSUER  # what a token must be for to authenticate to this server
KEY_FILE = "sa.key"
ADMIN_USER = "kubernetes-admin"
MASTERS = "system:masters"  # the group kube-apiserver lets do anything
AUTHENTICATED = "system:authenticated"
SERVICE_ACCOUNTS = "system:serviceaccounts"
SA_PREFIX = "system:serviceaccount:"
MIN_EXPIRATION = 600  # kube-apiserver refuses shorter tokens
DEFAULT_EXPIRATION = 3600
MAX_EXPIRATION = 2**32
VERIFIED_CACHE = 1024  # tokens whose signature was checked, kept until this many


@dataclass(frozen=True, slots=True)
class UserInfo:
    username: str
    groups: tuple[str, ...]
    uid: str = ""

    @property
    def is_admin(self) -> bool:
        return MASTERS in self.groups

    def as_dict(self) -> dict[str, Any]:
        """The `userInfo` of a SelfSubjectReview or SubjectAccessReview."""
        out: dict[str, Any] = {"username": self.username, "groups": list(self.groups)}
        if self.uid:
            out["uid"] = self.uid
        return out


ADMIN = UserInfo(ADMIN_USER, (MASTERS, AUTHENTICATED))


def service_account_user(namespace: str, name: str, uid: str = "") -> UserInfo:
    return UserInfo(f"{SA_PREFIX}{namespace}:{name}",
                    (SERVICE_ACCOUNTS, f"{SERVICE_ACCOUNTS}:{namespace}", AUTHENTICATED), uid)


@dataclass(frozen=True, slots=True)
class TokenClaims:
    namespace: str
    name: str
    uid: str  # the ServiceAccount's
    audiences: tuple[str, ...]
    expires: int
    bound_kind: str = ""
    bound_name: str = ""
    bound_uid: str = ""


def load_or_create_key(state_dir: Path) -> bytes:
    path = state_dir / KEY_FILE
    if path.exists():
        key = path.read_bytes()
        if len(key) >= 32:
            return key
    key = secrets.token_bytes(32)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(key)
    return key


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class TokenIssuer:
    def __init__(self, key: bytes) -> None:
        self._key = key
        self._verified: dict[str, tuple[TokenClaims, int]] = {}
        self._kid = _b64(hashlib.sha256(key).digest()[:12])

    def issue(self, claims: TokenClaims, now: int | None = None) -> str:
        issued = int(time.time()) if now is None else now
        inner: dict[str, Any] = {"namespace": claims.namespace,
                                 "serviceaccount": {"name": claims.name, "uid": claims.uid}}
        if claims.bound_kind:
            inner[claims.bound_kind.lower()] = {"name": claims.bound_name, "uid": claims.bound_uid}
        payload = {
            "aud": list(claims.audiences), "exp": claims.expires, "iat": issued, "nbf": issued, "iss": ISSUER,
            "jti": str(uuid.uuid4()), "kubernetes.io": inner,
            "sub": f"{SA_PREFIX}{claims.namespace}:{claims.name}",
        }
        header = {"alg": "HS256", "kid": self._kid, "typ": "JWT"}
        signing_input = f"{_b64(orjson.dumps(header))}.{_b64(orjson.dumps(payload))}"
        return f"{signing_input}.{_b64(self._sign(signing_input))}"

    def verify(self, token: str, now: int | None = None) -> TokenClaims | None:
        """The claims of a token we issued that is in force now, else None."""
        decoded = self._verified.get(token)
        if decoded is None:
            decoded = self._decode(token)
            if decoded is None:
                return None
            if len(self._verified) >= VERIFIED_CACHE:
                self._verified.clear()
            self._verified[token] = decoded  # a client sends its token with every request
        claims, not_before = decoded
        moment = int(time.time()) if now is None else now
        return claims if not_before <= moment < claims.expires else None

    def _decode(self, token: str) -> tuple[TokenClaims, int] | None:
        """The claims and not-before time of a token we signed, else None (times not checked)."""
        parts = token.split(".")
        if len(parts) != 3:
            return None
        try:
            signature = _unb64(parts[2])
            payload = orjson.loads(_unb64(parts[1]))
        except (ValueError, orjson.JSONDecodeError):
            return None
        if not hmac.compare_digest(signature, self._sign(f"{parts[0]}.{parts[1]}")) or not isinstance(payload, dict):
            return None
        try:
            if payload.get("iss") != ISSUER:
                return None
            inner = payload["kubernetes.io"]
            bound_kind = next((k for k in ("pod", "secret") if k in inner), "")
            bound: dict[str, Any] = inner[bound_kind] if bound_kind else {}
            claims = TokenClaims(
                namespace=str(inner["namespace"]), name=str(inner["serviceaccount"]["name"]),
                uid=str(inner["serviceaccount"]["uid"]), audiences=tuple(payload["aud"]), expires=int(payload["exp"]),
                bound_kind=bound_kind.capitalize(), bound_name=str(bound.get("name", "")),
                bound_uid=str(bound.get("uid", "")),
            )
            return claims, int(payload["nbf"])
        except (KeyError, TypeError, AttributeError, ValueError):
            return None

    def _sign(self, signing_input: str) -> bytes:
        return hmac.new(self._key, signing_input.encode(), hashlib.sha256).digest()
