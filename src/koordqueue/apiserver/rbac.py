"""Authorization by RBAC (rbac.authorization.k8s.io/v1), as kube-apiserver decides it.

A request is allowed when some rule bound to its user allows it: ClusterRoleBindings
grant their ClusterRole's rules everywhere; RoleBindings grant a Role's (or a
ClusterRole's) rules in their own namespace only. A rule matches a resource request
when its verbs, apiGroups and resources (`"*"`, `"<resource>"`, `"<resource>/<sub>"`,
`"*/<sub>"`) match, and its resourceNames (if any) hold the object's name; a
nonResourceURLs rule matches a path exactly or by a prefix ending in `*`. ClusterRoles
with an aggregationRule carry the rules of the ClusterRoles their selectors pick.
Members of `system:masters` (the admin token) are allowed everything, as on a real
server. Discovery, `/version`, `/openapi` and health checks are open to any
authenticated user, as the default `system:discovery` binding makes them.

Not done: the escalation check (a user may grant rules it does not hold).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from koordqueue.apiserver import errors
from koordqueue.apiserver.selectors import selector_from_object
from koordqueue.apiserver.store import Event, Store
from koordqueue.apiserver.tokens import SA_PREFIX, UserInfo

GROUP = "rbac.authorization.k8s.io"
CLUSTER_ROLES = f"{GROUP}/clusterroles"
CLUSTER_ROLE_BINDINGS = f"{GROUP}/clusterrolebindings"
ROLES = f"{GROUP}/roles"
ROLE_BINDINGS = f"{GROUP}/rolebindings"
RBAC_KEYS = frozenset({CLUSTER_ROLES, CLUSTER_ROLE_BINDINGS, ROLES, ROLE_BINDINGS})
ALL = "*"
OPEN_PATHS = ("/api", "/apis", "/version", "/openapi", "/healthz", "/readyz", "/livez")

Rule = Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class Attributes:
    """What a request does, in RBAC's terms. A resource request has `resource`; else `path`."""

    verb: str
    group: str = ""
    resource: str = ""
    subresource: str = ""
    namespace: str = ""
    name: str = ""
    path: str = ""

    @property
    def is_resource(self) -> bool:
        return bool(self.resource)

    @property
    def resource_text(self) -> str:
        return f"{self.resource}/{self.subresource}" if self.subresource else self.resource


def bootstrap_objects() -> list[tuple[str, dict[str, Any]]]:
    """(storage key, object) the server creates on first start: `cluster-admin`, bound to system:masters."""
    role = {"apiVersion": f"{GROUP}/v1", "kind": "ClusterRole",
            "metadata": {"name": "cluster-admin", "labels": {"kubernetes.io/bootstrapping": "rbac-defaults"}},
            "rules": [{"apiGroups": [ALL], "resources": [ALL], "verbs": [ALL]},
                      {"nonResourceURLs": [ALL], "verbs": [ALL]}]}
    binding = {"apiVersion": f"{GROUP}/v1", "kind": "ClusterRoleBinding",
               "metadata": {"name": "cluster-admin", "labels": {"kubernetes.io/bootstrapping": "rbac-defaults"}},
               "roleRef": {"apiGroup": GROUP, "kind": "ClusterRole", "name": "cluster-admin"},
               "subjects": [{"apiGroup": GROUP, "kind": "Group", "name": "system:masters"}]}
    return [(CLUSTER_ROLES, role), (CLUSTER_ROLE_BINDINGS, binding)]


MAX_DECISIONS = 10_000  # cached decisions (users x verbs x resources x namespaces)


class Authorizer:
    """Reads roles and bindings from the store; the rules per user are cached until one of them changes."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self._cache: dict[tuple[str, tuple[str, ...]], tuple[list[Rule], dict[str, list[Rule]]]] = {}
        # Decisions on resource requests, by user and all but the object's name: kept only
        # while no rule of that user names objects (resourceNames), so the name cannot matter.
        self._decisions: dict[tuple[str, tuple[str, ...], str, str, str, str, str], bool] = {}
        store.listeners.append(self._on_change)

    def _on_change(self, event: Event) -> None:
        if event.key in RBAC_KEYS:
            self._cache.clear()
            self._decisions.clear()

    def allowed(self, user: UserInfo, attrs: Attributes) -> bool:
        if user.is_admin:
            return True
        if not attrs.is_resource and any(attrs.path == p or attrs.path.startswith(p + "/") for p in OPEN_PATHS):
            return True
        key = (user.username, user.groups, attrs.verb, attrs.group, attrs.resource, attrs.subresource,
               attrs.namespace) if attrs.is_resource else None
        if key is not None:
            decided = self._decisions.get(key)
            if decided is not None:
                return decided
        cluster_rules, namespaced_rules = self._rules_of(user)
        rules: list[Rule] = cluster_rules
        if attrs.namespace:
            rules = [*cluster_rules, *namespaced_rules.get(attrs.namespace, [])]
        allowed = any(rule_allows(rule, attrs) for rule in rules)
        if key is not None and not any(rule.get("resourceNames") for rule in rules):
            if len(self._decisions) >= MAX_DECISIONS:
                self._decisions.clear()
            self._decisions[key] = allowed
        return allowed

    def rules_in(self, user: UserInfo, namespace: str) -> list[Rule]:
        """Every rule that applies to `user` in `namespace` (for SelfSubjectRulesReview)."""
        cluster_rules, namespaced_rules = self._rules_of(user)
        return [*cluster_rules, *namespaced_rules.get(namespace, [])]

    def _rules_of(self, user: UserInfo) -> tuple[list[Rule], dict[str, list[Rule]]]:
        key = (user.username, user.groups)
        cached = self._cache.get(key)
        if cached is None:
            cluster: list[Rule] = []
            namespaced: dict[str, list[Rule]] = {}
            for binding in self._store.items(CLUSTER_ROLE_BINDINGS):
                if _binds(binding, user, ""):
                    cluster.extend(self._role_rules(binding, ""))
            for binding in self._store.items(ROLE_BINDINGS):
                ns = binding["metadata"].get("namespace", "")
                if _binds(binding, user, ns):
                    namespaced.setdefault(ns, []).extend(self._role_rules(binding, ns))
            cached = self._cache[key] = (cluster, namespaced)
        return cached

    def _role_rules(self, binding: Mapping[str, Any], namespace: str) -> list[Rule]:
        ref = binding.get("roleRef") or {}
        name = str(ref.get("name", ""))
        if ref.get("kind") == "ClusterRole":
            return self._cluster_role_rules(name)
        if ref.get("kind") == "Role" and namespace:
            role = self._store.get(ROLES, namespace, name)
            return _rules(role)
        return []

    def _cluster_role_rules(self, name: str) -> list[Rule]:
        role = self._store.get(CLUSTER_ROLES, "", name)
        if role is None:
            return []
        aggregation = role.get("aggregationRule")
        if not isinstance(aggregation, Mapping):
            return _rules(role)
        out = list(_rules(role))
        selectors = [selector_from_object(s) for s in aggregation.get("clusterRoleSelectors") or []
                     if isinstance(s, dict)]
        for other in self._store.items(CLUSTER_ROLES):
            labels = other["metadata"].get("labels") or {}
            if other["metadata"]["name"] != name and any(s is not None and s.matches(labels) for s in selectors):
                out.extend(_rules(other))
        return out


def _rules(role: Mapping[str, Any] | None) -> list[Rule]:
    rules = (role or {}).get("rules") or []
    return [rule for rule in rules if isinstance(rule, Mapping)]


def _binds(binding: Mapping[str, Any], user: UserInfo, namespace: str) -> bool:
    return any(_subject_is(subject, user, namespace) for subject in _subjects(binding))


def _subjects(binding: Mapping[str, Any]) -> Iterator[Mapping[str, Any]]:
    for subject in binding.get("subjects") or []:
        if isinstance(subject, Mapping):
            yield subject


def _subject_is(subject: Mapping[str, Any], user: UserInfo, namespace: str) -> bool:
    kind, name = subject.get("kind"), subject.get("name")
    if kind == "User":
        return name == user.username
    if kind == "Group":
        return name in user.groups
    if kind == "ServiceAccount":
        ns = subject.get("namespace") or namespace
        return f"{SA_PREFIX}{ns}:{name}" == user.username
    return False


def _has(values: object, wanted: str) -> bool:
    return isinstance(values, list) and (ALL in values or wanted in values)


def rule_allows(rule: Rule, attrs: Attributes) -> bool:
    if not _has(rule.get("verbs"), attrs.verb):
        return False
    if not attrs.is_resource:
        return any(url == ALL or url == attrs.path or (url.endswith(ALL) and attrs.path.startswith(url[:-1]))
                   for url in rule.get("nonResourceURLs") or [] if isinstance(url, str))
    if not _has(rule.get("apiGroups"), attrs.group):
        return False
    if not _resource_matches(rule.get("resources"), attrs):
        return False
    names = rule.get("resourceNames") or []
    return not names or (bool(attrs.name) and attrs.name in names)


def _resource_matches(resources: object, attrs: Attributes) -> bool:
    if not isinstance(resources, list):
        return False
    for resource in resources:
        if resource == ALL or resource == attrs.resource_text:
            return True
        if attrs.subresource and resource == f"*/{attrs.subresource}":
            return True
    return False


def forbidden(user: UserInfo, attrs: Attributes) -> errors.APIError:
    """403 worded as kube-apiserver words it, naming the user, verb, resource and scope."""
    who = f'User "{user.username}" cannot {attrs.verb}'
    if not attrs.is_resource:
        return errors.APIError(403, "Forbidden", f'forbidden: {who} path "{attrs.path}"', {})
    qualified = f"{attrs.resource}.{attrs.group}" if attrs.group else attrs.resource
    subject = f'{qualified} "{attrs.name}"' if attrs.name else qualified
    scope = f'in the namespace "{attrs.namespace}"' if attrs.namespace else "at the cluster scope"
    message = (f'{subject} is forbidden: {who} resource "{attrs.resource_text}" in API group "{attrs.group}" '
               f"{scope}")
    details: dict[str, Any] = {}
    if attrs.name:
        details["name"] = attrs.name
    if attrs.group:
        details["group"] = attrs.group
    details["kind"] = attrs.resource
    return errors.APIError(403, "Forbidden", message, details)


def attributes_from_review(spec: Mapping[str, Any]) -> Attributes | None:
    """The request a SubjectAccessReview asks about, or None if it names neither kind of request."""
    resource = spec.get("resourceAttributes")
    if isinstance(resource, Mapping):
        return Attributes(verb=str(resource.get("verb") or ""), group=str(resource.get("group") or ""),
                          resource=str(resource.get("resource") or ""),
                          subresource=str(resource.get("subresource") or ""),
                          namespace=str(resource.get("namespace") or ""), name=str(resource.get("name") or ""))
    non_resource = spec.get("nonResourceAttributes")
    if isinstance(non_resource, Mapping):
        return Attributes(verb=str(non_resource.get("verb") or ""), path=str(non_resource.get("path") or ""))
    return None
