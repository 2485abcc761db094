"""Where a job's pods may go (for node fit), and what an admission changes on the job.

A pod set's rules come from its pod template as kube-scheduler reads them: nodeSelector,
required node affinity, tolerations; its topology from Kueue's annotations on the
template's metadata (so that Kueue users' manifests carry over). An admission may pin a
role's pods to the domain the engine chose (nodeSelector on the domain's labels) and set
an elastic role's replicas to the count admitted; the values replaced are kept on the job
(annotation koord-queue/placed) and put back when the job is suspended again. The job's
unit is always made from the values as the user wrote them. Beside Koordinator, an
admission also marks every pod template (``PodMarks``): the quota label, so that
koord-scheduler charges the pods to the quota the unit was admitted to, and Koordinator's
gang annotations, so that it places them all or none; these are put back the same way.
A Node object is read into the engine's NodeInfo here too (``node_info``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from koordqueue.api.constants import (
    ANNOTATION_GANG_MIN_AVAILABLE,
    ANNOTATION_GANG_NAME,
    ANNOTATION_PLACED,
    ANNOTATION_PREFERRED_TOPOLOGY,
    ANNOTATION_REQUIRED_TOPOLOGY,
    LABEL_QUOTA_NAME,
    TOLERATION_EQUAL,
    TOLERATION_EXISTS,
)
from koordqueue.api.meta import InvalidObject, Meta, read_int, section
from koordqueue.api.quantity import QuantityError, parse_resource_list
from koordqueue.engine.model import (
    NodeInfo,
    Placement,
    PodSetInfo,
    Requirement,
    ResourceList,
    Taint,
    Toleration,
    TopologyRequest,
)

OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt")
INTERNED = 4096  # pod sets alike are one object: 100k jobs of a few kinds hold a few of them
_interned: dict[tuple[Any, ...], PodSetInfo] = {}


def pod_set_info(name: str, count: int, request: ResourceList, template: Mapping[str, Any],
                 min_count: int | None, where: str) -> PodSetInfo:
    """The engine's view of one role's pods; raises ``InvalidObject`` for rules it cannot read."""
    spec = section(template, "spec", f"{where}: template")
    annotations = section(section(template, "metadata", f"{where}: template"), "annotations",
                          f"{where}: template.metadata")
    info = PodSetInfo(
        name, count, request, min_count,
        node_selector=_selector(spec.get("nodeSelector"), f"{where}: template.spec.nodeSelector"),
        affinity=_affinity(spec.get("affinity"), f"{where}: template.spec.affinity"),
        tolerations=_tolerations(spec.get("tolerations"), f"{where}: template.spec.tolerations"),
        topology=_topology(annotations, f"{where}: template.metadata.annotations"),
    )
    key = (name, count, min_count, tuple(sorted(request.items())), info.node_selector, info.affinity,
           info.tolerations, info.topology)
    known = _interned.get(key)
    if known is not None:
        return known
    if len(_interned) >= INTERNED:
        _interned.clear()
    _interned[key] = info
    return info


def node_info(obj: Mapping[str, Any]) -> NodeInfo:
    """A Node object as node fit needs it: allocatable ({} when unreadable), labels, taints,
    cordon; for the controller's engine and the simulated scheduler alike."""
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    try:
        allocatable = parse_resource_list((obj.get("status") or {}).get("allocatable") or {})
    except QuantityError:
        allocatable = {}
    labels = meta.get("labels") or {}
    taints = tuple(Taint(str(t.get("key") or ""), str(t.get("value") or ""), str(t.get("effect") or ""))
                   for t in spec.get("taints") or () if isinstance(t, Mapping))
    return NodeInfo(str(meta.get("name", "")), allocatable,
                    {str(k): str(v) for k, v in labels.items()} if isinstance(labels, Mapping) else {},
                    taints, bool(spec.get("unschedulable")))


def _selector(value: object, where: str) -> tuple[tuple[str, str], ...]:
    if value is None:
        return ()
    if not isinstance(value, Mapping) or not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        raise InvalidObject(f"{where} must be a mapping of strings")
    return tuple(sorted(value.items()))


def _affinity(value: object, where: str) -> tuple[tuple[Requirement, ...], ...]:
    if value is None:
        return ()
    if not isinstance(value, Mapping):
        raise InvalidObject(f"{where} must be a mapping")
    node = section(value, "nodeAffinity", where)
    required = section(node, "requiredDuringSchedulingIgnoredDuringExecution", f"{where}.nodeAffinity")
    terms = required.get("nodeSelectorTerms")
    if terms is None:
        return ()
    at = f"{where}.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms"
    if not isinstance(terms, list):
        raise InvalidObject(f"{at} must be a list")
    out = []
    for i, term in enumerate(terms):
        if not isinstance(term, Mapping):
            raise InvalidObject(f"{at}[{i}] must be a mapping")
        reqs = [*_requirements(term.get("matchExpressions"), f"{at}[{i}].matchExpressions", field=False),
                *_requirements(term.get("matchFields"), f"{at}[{i}].matchFields", field=True)]
        out.append(tuple(reqs))
    return tuple(out)


def _requirements(value: object, where: str, field: bool) -> list[Requirement]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise InvalidObject(f"{where} must be a list")
    out = []
    for i, item in enumerate(value):
        if not isinstance(item, Mapping) or not isinstance(item.get("key"), str):
            raise InvalidObject(f"{where}[{i}] must be a mapping with a key")
        operator = item.get("operator")
        if operator not in OPERATORS:
            raise InvalidObject(f"{where}[{i}].operator must be one of {', '.join(OPERATORS)}, got {operator!r}")
        values = item.get("values") or []
        if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
            raise InvalidObject(f"{where}[{i}].values must be a list of strings")
        out.append(Requirement(item["key"], operator, tuple(values), field))
    return out


def _tolerations(value: object, where: str) -> tuple[Toleration, ...]:
    if value is None:
        return ()
    if not isinstance(value, list):
        raise InvalidObject(f"{where} must be a list")
    out = []
    for i, item in enumerate(value):
        if not isinstance(item, Mapping):
            raise InvalidObject(f"{where}[{i}] must be a mapping")
        fields = {k: item.get(k) or "" for k in ("key", "operator", "value", "effect")}
        if not all(isinstance(v, str) for v in fields.values()):
            raise InvalidObject(f"{where}[{i}]: key, operator, value and effect must be strings")
        operator = fields["operator"] or TOLERATION_EQUAL
        if operator not in (TOLERATION_EQUAL, TOLERATION_EXISTS):
            raise InvalidObject(f"{where}[{i}].operator must be Equal or Exists, got {operator!r}")
        out.append(Toleration(fields["key"], operator, fields["value"], fields["effect"]))
    return tuple(out)


def _topology(annotations: Mapping[str, Any], where: str) -> TopologyRequest | None:
    required = annotations.get(ANNOTATION_REQUIRED_TOPOLOGY)
    preferred = annotations.get(ANNOTATION_PREFERRED_TOPOLOGY)
    if required and preferred:
        raise InvalidObject(f"{where}: {ANNOTATION_REQUIRED_TOPOLOGY} and {ANNOTATION_PREFERRED_TOPOLOGY} "
                            "both given; name one level")
    level = required or preferred
    if not level:
        return None
    if not isinstance(level, str):
        raise InvalidObject(f"{where}: a topology level is a node label, got {level!r}")
    return TopologyRequest(level, bool(required))


# --- what an admission changes on the job ------------------------------------------------

Originals = dict[str, dict[str, Any]]
"""Per role (as the job names it): the values an admission replaced (None: it was absent)."""


def originals(meta: Meta) -> Originals:
    """What the annotation koord-queue/placed says we replaced ({} when it is absent)."""
    return read_originals(meta.annotations.get(ANNOTATION_PLACED), meta.describe())


def read_originals(text: str | None, where: str) -> Originals:
    """The annotation koord-queue/placed's value read ({} when it is absent)."""
    if not text:
        return {}
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError:
        value = None
    if not isinstance(value, dict) or not all(isinstance(v, dict) for v in value.values()):
        raise InvalidObject(f"{where}: annotation {ANNOTATION_PLACED} is not what koord-queue writes "
                            "(a JSON mapping of roles); remove it")
    return value


def pins_changed(placed: str, was: Mapping[str, Mapping[str, Any]], now: Mapping[str, Mapping[str, Any]],
                 where: str) -> list[str]:
    """What an update changes of what an admission wrote on a job's pod templates (``placed``,
    the annotation's text; ``was``/``now``: per role, its template before and after): node
    selector entries, tolerations, marks. Changed on a running job, its pods made again would
    leave the flavor or domain it was admitted into and is charged to."""
    def part(template: Mapping[str, Any], *path: str) -> Any:
        for key in path:
            template = template.get(key) if isinstance(template, Mapping) else None  # type: ignore[assignment]
        return template

    said = []
    for role, original in read_originals(placed, where).items():
        before, after = was.get(role), now.get(role)
        if before is None or after is None:
            continue
        selector = original.get("nodeSelector")
        for key in selector if isinstance(selector, Mapping) else ():
            if part(before, "spec", "nodeSelector", key) != part(after, "spec", "nodeSelector", key):
                said.append(f"{role} nodeSelector {key}")
        if TOLERATIONS in original and part(before, "spec", TOLERATIONS) != part(after, "spec", TOLERATIONS):
            said.append(f"{role} tolerations")
        for mark in MARKS:
            written = original.get(mark)
            for key in written if isinstance(written, Mapping) else ():
                if part(before, "metadata", mark, key) != part(after, "metadata", mark, key):
                    said.append(f"{role} {mark[:-1]} {key}")
    return said


def as_written(name: str, replicas: int, template: Mapping[str, Any], original: Mapping[str, Any] | None,
               where: str) -> tuple[int, Mapping[str, Any]]:
    """A role's replicas and pod template with what an admission changed put back. Never fewer
    replicas than the job has now: an admission only ever lowers them, and the annotation is
    on the job, which its tenant may edit (one saying 1 on a job of 7 would have it charged 1)."""
    if not original:
        return replicas, template
    if "replicas" in original:
        replicas = max(replicas, read_int(original["replicas"],
                                          f"{where}: annotation {ANNOTATION_PLACED}: {name}.replicas", minimum=0))
    selector = original.get("nodeSelector")
    if isinstance(selector, Mapping):
        spec = dict(section(template, "spec", f"{where}: template"))
        current = dict(section(spec, "nodeSelector", f"{where}: template.spec"))
        for key, value in selector.items():
            if value is None:
                current.pop(key, None)
            else:
                current[key] = value
        spec["nodeSelector"] = current or None
        template = {**template, "spec": {k: v for k, v in spec.items() if v is not None}}
    if TOLERATIONS in original:  # (the user's list, or None: they wrote none)
        tolerations = original[TOLERATIONS]
        if tolerations is not None and not (isinstance(tolerations, list)
                                            and all(isinstance(t, Mapping) for t in tolerations)):
            raise InvalidObject(f"{where}: annotation {ANNOTATION_PLACED}: {name}.tolerations is not what "
                                "koord-queue writes (a list of Tolerations, or null); remove it")
        spec = {**section(template, "spec", f"{where}: template"), TOLERATIONS: tolerations}
        template = {**template, "spec": {k: v for k, v in spec.items() if v is not None}}
    marks = {key: original[key] for key in MARKS if isinstance(original.get(key), Mapping)}
    if marks:
        meta = dict(section(template, "metadata", f"{where}: template"))
        for key, values in marks.items():
            current = dict(section(meta, key, f"{where}: template.metadata"))
            for name, value in values.items():
                if value is None:
                    current.pop(name, None)
                else:
                    current[name] = value
            meta[key] = current
        template = {**template, "metadata": meta}
    return replicas, template


Pairs = tuple[tuple[str, str], ...]
Written = tuple[str, int, Pairs, Pairs, Pairs, str]
"""A role as the user wrote it: its name in the job, its replicas, and its pod template's
nodeSelector, labels and annotations (sorted pairs), and tolerations (JSON; "": none)."""
MARKS = ("labels", "annotations")  # a pod template's metadata an admission may mark
TOLERATIONS = "tolerations"  # a pod template's spec.tolerations, which a flavor's admission extends


def written_role(role: str, replicas: int, template: Mapping[str, Any]) -> Written:
    """A role's ``Written`` from its pod template as the user wrote it (read by pod_sets)."""
    meta = template.get("metadata") or {}
    spec = template.get("spec") or {}
    tolerations = spec.get(TOLERATIONS)
    return (role, replicas, tuple(sorted((spec.get("nodeSelector") or {}).items())),
            tuple(sorted((meta.get("labels") or {}).items())), tuple(sorted((meta.get("annotations") or {}).items())),
            orjson.dumps(tolerations).decode() if isinstance(tolerations, list) and tolerations else "")


@dataclass(frozen=True)
class PodMarks:
    """Labels and annotations an admission writes on every pod template of a job."""

    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    tolerations: tuple[Mapping[str, Any], ...] = ()  # the flavor's, added to the pods' own


def koordinator_marks(quota: str, gang: str, roles: Sequence[Written], placement: Placement) -> PodMarks:
    """For koord-scheduler: the quota the pods are charged to, and one gang of all the pods
    admitted (its min-available: their count), named after the job."""
    pods = sum(placement.count_of(name.lower(), replicas) for name, replicas, *_ in roles)
    return PodMarks({LABEL_QUOTA_NAME: quota},
                    {ANNOTATION_GANG_NAME: gang, ANNOTATION_GANG_MIN_AVAILABLE: str(pods)})


def template_patch(fields: Mapping[str, Any]) -> dict[str, Any]:
    """A pod template's part of a role's merge patch: nodeSelector and metadata marks (a
    None value removes an entry; a None nodeSelector removes all of it)."""
    out: dict[str, Any] = {}
    if "nodeSelector" in fields:
        out["spec"] = {"nodeSelector": selector_field(fields["nodeSelector"])}
    if TOLERATIONS in fields:  # the whole list (a merge patch replaces lists), or None: none
        out.setdefault("spec", {})[TOLERATIONS] = fields[TOLERATIONS]
    meta = {key: None if fields[key] is None else dict(fields[key]) for key in MARKS if key in fields}
    if meta:
        out["metadata"] = meta
    return out
RolePatch = Callable[[Mapping[str, Mapping[str, Any]]], "dict[str, Any] | None"]
"""A kind's merge patch for roles' replicas and nodeSelector entries, or a whole nodeSelector
removed (None); see JobAdapter.role_patch."""


def admission_patch(role_patch: RolePatch, roles: Sequence[Written], before: Originals,
                    placement: Placement | None, marks: PodMarks | None = None) -> dict[str, Any] | None:
    """The merge patch that applies an admission's ``placement`` (and ``marks`` on the pod
    templates) to a job (None: puts back what an earlier one changed, listed in
    ``before``), with the annotation that keeps the values it replaces; None when there is
    nothing to write (or the kind cannot be changed)."""
    changes, replaced = _changes(roles, placement, marks or PodMarks()) if placement is not None else ({}, {})
    fields: dict[str, dict[str, Any]] = {}
    counts = {name: replicas for name, replicas, *_ in roles}
    for name, old in before.items():  # an earlier admission's changes first put back...
        fields[name] = {k: (dict(v) if isinstance(v, Mapping) else v) for k, v in old.items()}
        if "replicas" in old and name in counts:  # (as written: more, if raised since; see as_written)
            fields[name]["replicas"] = counts[name]
    for name, change in changes.items():  # ...then this one's made
        into = fields.setdefault(name, {})
        if "replicas" in change:
            into["replicas"] = change["replicas"]
        for key in ("nodeSelector", *MARKS):
            if key in change:
                into[key] = {**into.get(key, {}), **change[key]}
        if TOLERATIONS in change:
            into[TOLERATIONS] = change[TOLERATIONS]
    if not fields:
        return None
    written = {name: {"nodeSelector": selector, "labels": labels, "annotations": annotations}
               for name, _, selector, labels, annotations, _ in roles}
    for name, into in fields.items():
        for key in ("nodeSelector", *MARKS):
            values = into.get(key)
            if values is not None and not written.get(name, {}).get(key) and all(v is None for v in values.values()):
                into[key] = None  # the user wrote none: none is left, not an empty one
    patch = role_patch(fields)
    if patch is None:
        return None
    text = orjson.dumps(replaced, option=orjson.OPT_SORT_KEYS).decode() if replaced else None
    patch["metadata"] = {"annotations": {ANNOTATION_PLACED: text}}
    return patch


def _changes(roles: Sequence[Written], placement: Placement,
             marks: PodMarks) -> tuple[dict[str, dict[str, Any]], Originals]:
    """Per role, the fields an admission sets (replicas, nodeSelector entries pinning its
    pods to their domain, labels and annotations marking them), and the values, as the
    user wrote them, that those replace."""
    changes: dict[str, dict[str, Any]] = {}
    replaced: Originals = {}
    for name, replicas, node_selector, labels_written, annotations_written, tolerations_written in roles:
        pod_set = name.lower()
        count = placement.count_of(pod_set, replicas)
        pins = {label: value for set_name, _, chain in placement.domains if set_name == pod_set
                for label, value in chain}
        change: dict[str, Any] = {}
        before: dict[str, Any] = {}
        if count != replicas:
            change["replicas"], before["replicas"] = count, replicas
        if pins:
            selector = dict(node_selector)
            change["nodeSelector"] = pins
            before["nodeSelector"] = {label: selector.get(label) for label in pins}
        if marks.tolerations:
            own: list[Any] = orjson.loads(tolerations_written) if tolerations_written else []
            added = [dict(t) for t in marks.tolerations if t not in own]
            if added:
                change[TOLERATIONS], before[TOLERATIONS] = own + added, own or None
        for key, wanted, written in (("labels", marks.labels, dict(labels_written)),
                                     ("annotations", marks.annotations, dict(annotations_written))):
            if any(written.get(k) != v for k, v in wanted.items()):
                change[key] = dict(wanted)
                before[key] = {k: written.get(k) for k in wanted}
        if change:
            changes[name], replaced[name] = change, before
    return changes, replaced


def selector_field(value: Mapping[str, str | None] | None) -> dict[str, str | None] | None:
    """A nodeSelector in a merge patch: its entries (None removes one), or None (all of it)."""
    return None if value is None else dict(value)
