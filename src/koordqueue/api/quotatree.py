"""ElasticQuotaTree (``scheduling.sigs.k8s.io/v1beta1``): Koord-Queue's other way to write
quotas, the whole tree in one object, read in kube-system only.

Each node is read as the ElasticQuota it stands for (one loader: the same parser, so the
engine sees no difference): its name, min and max; its attributes as the quota's labels
and annotations (``koord-queue/queue-policy``, ``.../shared-weight``, ...); its parent and
whether it is one from where it sits in the tree; its ``namespaces`` as the quota's bound
namespaces. A node lives in no namespace of its own: jobs reach it by the namespaces it
lists (as Koord-Queue maps them) or by naming it (label ``quota.scheduling.koordinator.sh/name``).

Bad input never stops the rest: a node that cannot be read (no name, a name used twice,
a quantity that is not one, a field of the wrong type) is left out with the nodes below it,
and said; what the engine checks of every quota (min <= max, the children's mins within
the parent's) it checks here too.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

from koordqueue.api import constants as c
from koordqueue.api.meta import InvalidObject, read_meta, section
from koordqueue.api.objects import ParsedQuota, QuotaInfo, parse_elastic_quota
from koordqueue.api.quantity import QuantityError, ResourceList, format_resource_list

# A node's QuotaInfo.namespace: no job's namespace is "", so a node binds only the
# namespaces it lists (an ElasticQuota binds its own namespace too).
TREE_QUOTA_NAMESPACE = ""
MAX_DEPTH = 32
_OBJECT_NAME = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_STRUCTURE_KEYS = (c.LABEL_QUOTA_PARENT, c.LABEL_QUOTA_IS_PARENT, c.ANNOTATION_QUOTA_NAMESPACES)
_NOT_READ = {
    c.TREE_ATTRIBUTE_PREEMPT_POLICY: "Koord-Queue lets a job that may not be preempted preempt lower "
                                     "priorities in its quota; here preemption is set on the Queue "
                                     "(koord-queue/enable-queueunit-preemption)",
    c.TREE_ATTRIBUTE_LEND_LIMIT: "Koord-Queue keeps min minus this much from being lent; here a quota lends "
                                 f"all or nothing (attribute {c.LABEL_ALLOW_LENT_RESOURCE})",
}

QuotaParser = Callable[[object], ParsedQuota]
T = TypeVar("T", bound=Mapping[str, Any])


@dataclass(frozen=True, slots=True)
class ParsedTree:
    """The quotas of one tree (usable as far as reading goes; the engine validates them)."""

    where: str  # "ElasticQuotaTree kube-system/name": how messages name the tree
    quotas: dict[str, QuotaInfo] = field(default_factory=dict)  # by name, root first
    paths: dict[str, str] = field(default_factory=dict)  # quota name -> "root/a/b", as Koord-Queue names it
    problems: tuple[str, ...] = ()  # nodes left out, and why
    warnings: tuple[str, ...] = ()  # read all the same, with something ignored


def tree_queue_prefix(path: str) -> str:
    """The generateName of the Queue of the quota at ``path`` ("root/team-b/b_1"), as
    Koord-Queue's ElasticQuota plugin makes it: lowercased, '/' and '_' turned into '-', a
    trailing '-', cut from the front to 58 characters (the server adds 5)."""
    prefix = path.replace("/", "-").replace("_", "-").lower() + "-"
    return prefix[max(0, len(prefix) - c.TREE_QUEUE_PREFIX_MAX):]


def choose_tree(trees: Iterable[T]) -> tuple[T | None, list[tuple[T, str]]]:
    """The tree that holds the quotas, and the others with why they are not used. Koord-Queue
    reads trees in kube-system only and keeps whichever it heard of last; here the oldest
    (then by name), so that the outcome depends on the objects alone."""
    in_namespace: list[T] = []
    refused: list[tuple[T, str]] = []
    for obj in trees:
        if _meta(obj).get("namespace") != c.QUOTA_TREE_NAMESPACE:
            refused.append((obj, f"not used: an {c.ELASTIC_QUOTA_TREE_KIND} is read in namespace "
                                 f"{c.QUOTA_TREE_NAMESPACE} only"))
        else:
            in_namespace.append(obj)
    in_namespace.sort(key=lambda o: (str(_meta(o).get("creationTimestamp") or ""), str(_meta(o).get("name") or "")))
    if not in_namespace:
        return None, refused
    used = in_namespace[0]
    for other in in_namespace[1:]:
        refused.append((other, f"not used: {c.ELASTIC_QUOTA_TREE_KIND} {c.QUOTA_TREE_NAMESPACE}/"
                               f"{_meta(used).get('name')} holds the quotas (one tree per cluster: the oldest)"))
    return used, refused


def parse_quota_tree(obj: object, quota_of: QuotaParser = parse_elastic_quota) -> ParsedTree:
    """The quotas of an ElasticQuotaTree. ``quota_of``: how an ElasticQuota is read (the
    controller's settings give the default queue policy). Raises InvalidObject only when
    the object as a whole cannot be read (no spec.root)."""
    meta = read_meta(obj, c.ELASTIC_QUOTA_TREE_KIND)
    assert isinstance(obj, Mapping)  # read_meta checked it
    where = meta.describe()
    spec = section(obj, "spec", where, required=True)
    root = spec.get("root")
    if not isinstance(root, Mapping):
        raise InvalidObject(f"{where}: spec.root is missing or not a mapping")
    reader = _Reader(where, meta.namespace, quota_of)
    reader.node(root, None, "", "spec.root", 0)
    reader.shared_namespaces()
    return ParsedTree(where, reader.quotas, reader.paths, tuple(reader.problems), tuple(reader.warnings))


def tree_status(obj: Mapping[str, Any], parsed: ParsedTree | None, used: Mapping[str, ResourceList],
                request: Mapping[str, ResourceList], problems: Sequence[str]) -> dict[str, Any]:
    """The tree's status as Koord-Queue's API declares it: ``root`` mirrors the spec, each
    node with its ``used`` (what its admitted jobs hold, those below it included) and
    ``request`` (that plus what its waiting jobs ask, up to its max); and ours besides:
    ``problems``, every node not used and why."""
    spec_root = (obj.get("spec") or {}).get("root") if isinstance(obj.get("spec"), Mapping) else None
    paths = parsed.paths if parsed is not None else {}
    seen: set[str] = set()  # a name used twice: the first node (in the parser's order) has the figures

    def mirror(node: Mapping[str, Any], prefix: str, depth: int) -> dict[str, Any]:
        name = c.QUOTA_TREE_ROOT if depth == 0 else node.get("name")
        out: dict[str, Any] = {"name": name if isinstance(name, str) else ""}
        namespaces = node.get("namespaces")
        if isinstance(namespaces, list) and all(isinstance(n, str) for n in namespaces) and namespaces:
            out["namespaces"] = list(namespaces)
        path = f"{prefix}/{name}" if prefix else str(name)
        if isinstance(name, str) and paths.get(name) == path and name not in seen:
            seen.add(name)
            limit = set(parsed.quotas[name].max) if parsed is not None else set()
            out["used"] = format_resource_list({r: used.get(name, {}).get(r, 0) for r in limit | set(used.get(name, {}))})
            out["request"] = format_resource_list(
                {r: request.get(name, {}).get(r, 0) for r in limit | set(request.get(name, {}))})
        children = node.get("children")
        if isinstance(children, list) and depth < MAX_DEPTH:
            kids = [mirror(child, path, depth + 1) for child in children if isinstance(child, Mapping)]
            if kids:
                out["children"] = kids
        return out

    status: dict[str, Any] = {"problems": list(problems)}
    if isinstance(spec_root, Mapping):
        status["root"] = mirror(spec_root, "", 0)
    return status


class _Reader:
    def __init__(self, where: str, namespace: str, quota_of: QuotaParser) -> None:
        self.where = where
        self.namespace = namespace
        self.quota_of = quota_of
        self.quotas: dict[str, QuotaInfo] = {}
        self.paths: dict[str, str] = {}
        self.problems: list[str] = []
        self.warnings: list[str] = []

    def refuse(self, node: object, at: str, why: str) -> None:
        below = _count_below(node)
        tail = f"; nor the {below} quota{'s' if below > 1 else ''} below it" if below else ""
        self.problems.append(f"{self.where}: {at}: not used: {why}{tail}")

    def node(self, node: Mapping[str, Any], parent: str | None, prefix: str, field_path: str, depth: int) -> None:
        if depth == 0:
            given = node.get("name")
            if given not in (None, "", c.QUOTA_TREE_ROOT):
                self.warnings.append(f"{self.where}: the root is named {c.QUOTA_TREE_ROOT}, whatever spec.root.name "
                                     f"says ({given!r}), as Koord-Queue names it")
            name: object = c.QUOTA_TREE_ROOT
        else:
            name = node.get("name")
        if not isinstance(name, str) or not name:
            self.refuse(node, field_path, "name is missing or not a string")
            return
        path = f"{prefix}/{name}" if prefix else name
        at = f"quota {path}"
        if name in self.paths:
            self.refuse(node, at, f"the name {name} is taken by the quota before it at {self.paths[name]} "
                                  "(quota names are unique)")
            return
        if depth > MAX_DEPTH:
            self.refuse(node, at, f"deeper than {MAX_DEPTH} levels")
            return
        children = node.get("children")
        if children is not None and not isinstance(children, list):
            self.refuse(node, at, "children must be a list of quotas")
            return
        namespaces = node.get("namespaces")
        if namespaces is not None and (not isinstance(namespaces, list)
                                       or not all(isinstance(n, str) and n for n in namespaces)):
            self.refuse(node, at, "namespaces must be a list of namespace names")
            return
        attributes = node.get("attributes") or {}
        if not isinstance(attributes, Mapping) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in attributes.items()):
            self.refuse(node, at, "attributes must map strings to strings (quote numbers and booleans)")
            return
        try:
            parsed = self.quota_of(self._as_elastic_quota(name, parent, bool(children), namespaces or [], attributes,
                                                          node))
        except (InvalidObject, QuantityError) as e:
            self.refuse(node, at, self._reworded(str(e), name, at))
            return
        self.quotas[name] = replace(parsed.quota, namespace=TREE_QUOTA_NAMESPACE)
        self.paths[name] = path
        self.warnings += [f"{self.where}: {self._reworded(w, name, at, keep=True)}" for w in parsed.warnings]
        for key in sorted(set(attributes) & set(_NOT_READ)):
            self.warnings.append(f"{self.where}: {at}: attribute {key} is not read ({_NOT_READ[key]})")
        for key in sorted(set(attributes) & set(_STRUCTURE_KEYS)):
            self.warnings.append(f"{self.where}: {at}: attribute {key} is not read (the tree says it)")
        if children and namespaces:
            self.warnings.append(f"{self.where}: {at}: namespaces {', '.join(namespaces)} not bound: a quota with "
                                 "children holds no jobs (list them on a quota below it)")
        if not children and not _OBJECT_NAME.fullmatch(tree_queue_prefix(path) + "x"):
            self.warnings.append(f"{self.where}: {at}: no Queue is made for it (the name Koord-Queue gives its Queue, "
                                 f"{tree_queue_prefix(path)}..., is not a valid object name: letters, digits, '-', "
                                 "'_' and '.' in the quotas' names); its jobs are queued all the same")
        for i, child in enumerate(children or []):
            where = f"{field_path}.children[{i}]"
            if not isinstance(child, Mapping):
                self.refuse(child, f"{at}: {where}", "a quota must be a mapping")
                continue
            self.node(child, name, path, where, depth + 1)

    def _as_elastic_quota(self, name: str, parent: str | None, is_parent: bool, namespaces: Sequence[str],
                          attributes: Mapping[str, str], node: Mapping[str, Any]) -> dict[str, Any]:
        """The ElasticQuota that reads as this node does."""
        free = {k: v for k, v in attributes.items() if k not in _STRUCTURE_KEYS}
        labels = dict(free)
        if parent is not None:
            labels[c.LABEL_QUOTA_PARENT] = parent
        if is_parent:
            labels[c.LABEL_QUOTA_IS_PARENT] = c.TRUE
        annotations = dict(free)
        if namespaces and not is_parent:
            annotations[c.ANNOTATION_QUOTA_NAMESPACES] = json.dumps(list(namespaces))
        return {
            "apiVersion": c.QUOTA_API_VERSION,
            "kind": c.ELASTIC_QUOTA_KIND,
            "metadata": {"name": name, "namespace": self.namespace, "labels": labels, "annotations": annotations},
            "spec": {"min": node.get("min") or {}, "max": node.get("max") or {}},
        }

    def _reworded(self, message: str, name: str, at: str, keep: bool = False) -> str:
        """An ElasticQuota's message about the node, naming the node (``keep``) or nothing
        (the caller names it) instead, and its attributes as such."""
        quota = f"{c.ELASTIC_QUOTA_KIND} {self.namespace}/{name}"
        text = message.replace(f"{quota}: ", f"{at}: " if keep else "").replace(quota, at)
        return text.replace(": label ", ": attribute ").replace(": annotation ", ": attribute ")

    def shared_namespaces(self) -> None:
        listed: dict[str, list[str]] = {}
        for quota in self.quotas.values():
            if not quota.is_parent:
                for namespace in sorted(quota.namespaces):
                    listed.setdefault(namespace, []).append(quota.name)
        for namespace, names in sorted(listed.items()):
            if len(names) > 1:
                self.warnings.append(
                    f"{self.where}: namespace {namespace} is listed by several quotas ({', '.join(names)}): its "
                    f"jobs wait until they name one (label {c.LABEL_QUOTA_NAME})")


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


def _count_below(node: object) -> int:
    if not isinstance(node, Mapping) or not isinstance(node.get("children"), list):
        return 0
    return sum(1 + _count_below(child) for child in node["children"])
