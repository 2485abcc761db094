"""Who a caller is and what they may read, asked of the API server: a TokenReview for a
bearer token, a SubjectAccessReview for each decision, each answer kept a few seconds.

The visibility API (its callers named by kube-apiserver's aggregation layer) and the
dashboard when exposed (its callers bring a token) decide alike: a caller sees the
QueueUnits of the namespaces where it may `list queueunits`, never another tenant's.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any

from koordqueue.api import constants as c
from koordqueue.kube.client import KubeClient, Resource
from koordqueue.kube.errors import KubeError

log = logging.getLogger(__name__)

SUBJECT_ACCESS_REVIEWS = Resource("authorization.k8s.io", "v1", "subjectaccessreviews", namespaced=False)
TOKEN_REVIEWS = Resource("authentication.k8s.io", "v1", "tokenreviews", namespaced=False)
REVIEW_TTL = 10.0  # seconds an answer is reused: a revoked token or grant stops working within it
MAX_CACHED = 10_000  # answers kept at most (then forgotten all at once)


@dataclass(frozen=True)
class Caller:
    """Who asks, as the API server authenticated them."""

    user: str
    groups: tuple[str, ...] = ()
    extra: tuple[tuple[str, tuple[str, ...]], ...] = ()


@dataclass
class AccessReviewer:
    """TokenReviews and SubjectAccessReviews through ``client`` (the controller's identity, which
    needs `create` on both), their answers cached for REVIEW_TTL seconds."""

    client: KubeClient
    what: str = "access"  # who asks, in log lines
    _decisions: dict[tuple[Any, ...], tuple[float, bool]] = field(default_factory=dict)
    _tokens: dict[str, tuple[float, Caller | None]] = field(default_factory=dict)

    async def authenticate(self, token: str) -> Caller | None:
        """The user a bearer token is, by a TokenReview; None when the token is not (or cannot be) accepted."""
        now = time.monotonic()
        known = self._tokens.get(token)
        if known is not None and now < known[0]:
            return known[1]
        try:
            answer = await self.client.create(TOKEN_REVIEWS, {
                "apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": token}})
        except KubeError as e:
            log.warning("%s: TokenReview failed: %s", self.what, e)
            return None
        status = answer.get("status") or {}
        user = status.get("user") or {}
        caller = None
        if status.get("authenticated") and user.get("username"):
            extra = user.get("extra") or {}
            caller = Caller(str(user["username"]), tuple(str(g) for g in user.get("groups") or ()),
                            tuple((str(k), tuple(str(v) for v in vs)) for k, vs in sorted(extra.items())))
        _remember(self._tokens, token, (now + REVIEW_TTL, caller))
        return caller

    async def allowed(self, caller: Caller, verb: str, group: str, resource: str, subresource: str = "",
                      namespace: str = "", name: str = "") -> bool:
        """A SubjectAccessReview; refused when it cannot be asked."""
        key = (caller, verb, group, resource, subresource, namespace, name)
        now = time.monotonic()
        known = self._decisions.get(key)
        if known is not None and now < known[0]:
            return known[1]
        attributes = {"verb": verb, "group": group, "resource": resource, "subresource": subresource,
                      "namespace": namespace, "name": name}
        spec: dict[str, Any] = {"user": caller.user, "groups": list(caller.groups),
                                "resourceAttributes": {k: v for k, v in attributes.items() if v}}
        if caller.extra:
            spec["extra"] = {k: list(v) for k, v in caller.extra}
        try:
            answer = await self.client.create(SUBJECT_ACCESS_REVIEWS, {
                "apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": spec})
        except KubeError as e:
            log.warning("%s: SubjectAccessReview for %s failed: %s", self.what, caller.user, e)
            return False
        allowed = bool((answer.get("status") or {}).get("allowed"))
        _remember(self._decisions, key, (now + REVIEW_TTL, allowed))
        return allowed

    async def unit_namespaces(self, caller: Caller, namespaces: set[str]) -> set[str] | None:
        """Of ``namespaces``, those whose QueueUnits the caller may list; None: every namespace
        (it may list them cluster-wide)."""
        if await self.allowed(caller, "list", c.QUEUE_GROUP, c.QUEUE_UNIT_PLURAL):
            return None
        return {ns for ns in sorted(namespaces)
                if await self.allowed(caller, "list", c.QUEUE_GROUP, c.QUEUE_UNIT_PLURAL, namespace=ns)}


def _remember(cache: dict[Any, Any], key: Any, value: Any) -> None:
    if len(cache) >= MAX_CACHED:
        cache.clear()
    cache[key] = value
