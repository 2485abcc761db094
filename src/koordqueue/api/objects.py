"""Typed views of ElasticQuota and Queue objects, for the engine and the controller.

QuotaInfo and QueueInfo, what the engine takes, are defined here rather than in the
engine: the engine imports api, so api never imports the engine (tests/test_layering.py).
Two kinds of trouble are kept apart: an object we cannot use at all (a bad quantity, no
spec) raises ``InvalidObject``; a setting we can fall back from (an unknown policy, an
unparsable annotation) becomes a warning text next to a usable value, for an event.
Structural quota rules (min <= max, parents, cycles) are the engine's, not checked here.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import yaml

from koordqueue.api.constants import (
    ANNOTATION_BUDGET,
    ANNOTATION_ENABLE_PREEMPTION,
    ANNOTATION_FAIR_SHARING,
    ANNOTATION_FLAVOR_FUNGIBILITY,
    ANNOTATION_FLAVOR_ORDER,
    ANNOTATION_FLAVOR_TOLERATIONS,
    ANNOTATION_HOLD_ROOM_AFTER,
    ANNOTATION_MAX_DEPTH,
    ANNOTATION_MAX_PRIORITY,
    ANNOTATION_NODE_FIT,
    ANNOTATION_NODE_SELECTOR,
    ANNOTATION_PRIORITY_THRESHOLD,
    ANNOTATION_QUEUE_ARGS,
    ANNOTATION_QUEUE_ITEMS_REFRESH_INTERVAL,
    ANNOTATION_QUOTA_FULL_NAME,
    ANNOTATION_QUOTA_NAMESPACES,
    ANNOTATION_SHARED_WEIGHT,
    ANNOTATION_USAGE_HALF_LIFE,
    ANNOTATION_WAIT_FOR_PODS_RUNNING,
    DEFAULT_HOLD_ROOM_AFTER_SECONDS,
    DEFAULT_QUEUE_ITEMS_REFRESH_SECONDS,
    DEFAULT_QUEUE_POLICY,
    ELASTIC_QUOTA_KIND,
    FALSE,
    FUNGIBILITY_BORROW,
    FUNGIBILITY_PREEMPT,
    FUNGIBILITY_TRY_NEXT,
    FUNGIBILITY_WHEN_CAN_BORROW,
    FUNGIBILITY_WHEN_CAN_PREEMPT,
    KOORDINATOR_QUOTAS,
    KOORDINATOR_ROOT_QUOTA,
    LABEL_ALLOW_LENT_RESOURCE,
    LABEL_QUEUE_POLICY,
    LABEL_QUOTA_IS_PARENT,
    LABEL_QUOTA_NAME,
    LABEL_QUOTA_PARENT,
    LABEL_QUOTA_TREE_ID,
    QUEUE_ARG_INITIAL_BACKOFF,
    QUEUE_ARG_MAX_BACKOFF,
    QUEUE_KIND,
    SYSTEM_NAMESPACE,
    TAINT_NO_EXECUTE,
    TAINT_NO_SCHEDULE,
    TAINT_PREFER_NO_SCHEDULE,
    TOLERATION_EQUAL,
    TOLERATION_EXISTS,
    TRUE,
    QueuePolicy,
)
from koordqueue.api.fairness import Budget, parse_budgets, parse_fair_sharing, parse_half_life
from koordqueue.api.meta import InvalidObject, Meta, parse_int_text, read_int, read_meta, section
from koordqueue.api.quantity import QuantityError, ResourceList, parse_resource_list
from koordqueue.api.safeyaml import RefusedYAML, load_annotation, load_json_annotation

__all__ = [
    "AdmissionCheckSpec",
    "InvalidObject",
    "ParsedQueue",
    "ParsedQuota",
    "QueueInfo",
    "QueueSettings",
    "QuotaInfo",
    "is_koordinators_own",
    "parse_elastic_quota",
    "parse_go_duration",
    "parse_queue",
]


@dataclass(frozen=True, slots=True)
class QuotaInfo:
    """An ElasticQuota as the engine needs it (already parsed, not yet validated)."""

    name: str
    namespace: str
    min: ResourceList
    max: ResourceList
    parent: str | None = None  # None: a child of the root (the cluster)
    is_parent: bool = False
    shared_weight: ResourceList | None = None  # None: equal to max
    allow_lent: bool = True
    policy: QueuePolicy = QueuePolicy.PRIORITY
    namespaces: frozenset[str] = frozenset()  # bound namespaces besides its own
    priority_threshold: int | None = None
    node_fit: bool | None = None  # koord-queue/node-fit; None: the engine's default
    tree_id: str = ""  # Koordinator's tree-id label; "": its parent's
    # koord-queue/max-priority: the highest priority its jobs are queued with (a job asking
    # more gets this one); None: no bound.
    max_priority: int | None = None
    # metadata.creationTimestamp (RFC 3339 in UTC: text order is time order); "": none known
    # (a snapshot's YAML). Of quotas whose rules conflict, the older is used (validation.py).
    created: str = ""
    # koord-queue/fair-sharing on a parent: its children share past min by usage history
    # (True), by weight alone (False), or as the engine's default (None); docs/fairness.md.
    fair_sharing: bool | None = None
    usage_half_life: float | None = None  # koord-queue/usage-half-life (seconds); None: the default
    budgets: tuple[Budget, ...] = ()  # koord-queue/budget
    # koord-queue/node-selector: a leaf with one is a flavor of its parent (docs/gpus.md).
    node_selector: tuple[tuple[str, str], ...] = ()
    # On a parent with flavors: koord-queue/flavor-order (() : by name), and
    # koord-queue/flavor-fungibility (Kueue's defaults: borrow in a flavor, try the next
    # one rather than preempt).
    flavor_order: tuple[str, ...] = ()
    # koord-queue/tolerations on a flavor: added to its jobs' pods (docs/gpus.md).
    tolerations: tuple[FlavorToleration, ...] = ()
    borrow_first: bool = True
    preempt_first: bool = False


@dataclass(frozen=True, slots=True)
class FlavorToleration:
    """A core/v1 Toleration of a flavor's annotation, as validated (``flavor_tolerations``)."""

    key: str = ""
    operator: str = TOLERATION_EQUAL
    value: str = ""
    effect: str = ""
    seconds: int | None = None  # tolerationSeconds (NoExecute only)

    def as_dict(self) -> dict[str, Any]:
        """The Toleration as written into a pod template (empty fields left out)."""
        out: dict[str, Any] = {k: v for k, v in (("key", self.key), ("operator", self.operator),
                                                 ("value", self.value), ("effect", self.effect)) if v}
        if self.seconds is not None:
            out["tolerationSeconds"] = self.seconds
        return out


@dataclass(frozen=True, slots=True)
class QueueInfo:
    """A Queue object: policy and priority for the units sent to it, bound to one quota."""

    name: str
    namespace: str
    quota: str | None  # name of the bound ElasticQuota; None: bound to none, admits nothing
    policy: QueuePolicy = QueuePolicy.PRIORITY
    priority: int = 0
    priority_threshold: int | None = None  # wins over the quota's
    preemption: bool = False  # koord-queue/enable-queueunit-preemption
    # koord-queue/hold-room-after: a unit of this Queue that has waited this long has free
    # room held for it against borrowers of its own priority too (lower ones: at once).
    hold_room_after: float = DEFAULT_HOLD_ROOM_AFTER_SECONDS
    node_fit: bool | None = None  # koord-queue/node-fit; wins over its quota's; None: the quota's
    # koord-queue/max-depth: only its first N pending units (in its policy's order) are
    # considered for admission; None: all of them.
    max_depth: int | None = None
    # koord-queue/wait-for-pods-running: while a unit admitted through it has pods not all
    # running, it admits nothing more (the shell says when they run: Engine.set_pods_running).
    wait_for_pods_running: bool = False
    # koord-queue/queue-args podInitialBackoffSeconds, podMaxBackoffSeconds: the back-off
    # base and cap of units sent back after admission through it; None: the engine's.
    backoff_base: float | None = None
    backoff_cap: float | None = None

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"
    # koord-queue/quota-fullname: the quota (by its path in the tree, "root/team-b/b-1") whose
    # own Queue this is, as Koord-Queue's ElasticQuota plugin marks the Queues it makes: units
    # of that quota that name no Queue are queued here (its DecoupledQueue feature).
    quota_path: str | None = None


@dataclass(frozen=True, slots=True)
class ParsedQuota:
    quota: QuotaInfo
    warnings: tuple[str, ...] = ()
    policy_warning: str | None = None  # the one of them about the queue policy label


@dataclass(frozen=True, slots=True)
class AdmissionCheckSpec:
    """One ``spec.admissionChecks[]`` entry; ``label_selector`` None matches every unit."""

    name: str
    label_selector: Mapping[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class QueueSettings:
    """Queue settings the engine does not need, for the controller and the status writer."""

    priority_class_name: str | None = None
    admission_checks: tuple[AdmissionCheckSpec, ...] = ()
    wait_for_pods_running: bool = False
    max_depth: int | None = None  # None: unlimited (Koord-Queue's -1)
    refresh_seconds: float = DEFAULT_QUEUE_ITEMS_REFRESH_SECONDS


@dataclass(frozen=True, slots=True)
class ParsedQueue:
    queue: QueueInfo
    settings: QueueSettings = field(default_factory=QueueSettings)
    warnings: tuple[str, ...] = ()


def parse_elastic_quota(obj: object) -> ParsedQuota:
    """The ``QuotaInfo`` of an ElasticQuota, with warnings for the settings we fell back from."""
    meta = read_meta(obj, ELASTIC_QUOTA_KIND)
    where = meta.describe()
    assert isinstance(obj, Mapping)  # read_meta checked it
    spec = section(obj, "spec", where, required=True)
    warnings: list[str] = []
    labels, annotations = meta.labels, meta.annotations
    shared_weight = _shared_weight(annotations.get(ANNOTATION_SHARED_WEIGHT), where)
    policy_warnings: list[str] = []
    policy = _policy(labels.get(LABEL_QUEUE_POLICY), f"{where}: label {LABEL_QUEUE_POLICY}", policy_warnings)
    warnings += policy_warnings
    quota = QuotaInfo(
        name=meta.name,
        namespace=meta.namespace,
        min=_resources(spec.get("min"), f"{where}: spec.min"),
        max=_resources(spec.get("max"), f"{where}: spec.max"),
        parent=_parent(labels.get(LABEL_QUOTA_PARENT)),
        is_parent=labels.get(LABEL_QUOTA_IS_PARENT) == TRUE,  # exactly "true", as Koordinator reads it
        shared_weight=shared_weight,
        allow_lent=labels.get(LABEL_ALLOW_LENT_RESOURCE, "").lower() != FALSE,
        policy=policy,
        namespaces=_namespaces(annotations.get(ANNOTATION_QUOTA_NAMESPACES), where, warnings),
        priority_threshold=_optional_int(meta, ANNOTATION_PRIORITY_THRESHOLD, warnings),
        node_fit=_optional_flag(meta, ANNOTATION_NODE_FIT, warnings),
        tree_id=labels.get(LABEL_QUOTA_TREE_ID, ""),
        max_priority=_optional_int(meta, ANNOTATION_MAX_PRIORITY, warnings),
        created=_created(obj),
        **_fairness(annotations, where, warnings),
        node_selector=node_selector(annotations.get(ANNOTATION_NODE_SELECTOR), where),
        flavor_order=_flavor_order(annotations.get(ANNOTATION_FLAVOR_ORDER)),
        tolerations=_flavor_tolerations(annotations, where, warnings),
        **_fungibility(annotations.get(ANNOTATION_FLAVOR_FUNGIBILITY), where, warnings),
    )
    return ParsedQuota(quota, tuple(warnings), policy_warnings[0] if policy_warnings else None)


def _fairness(annotations: Mapping[str, str], where: str, warnings: list[str]) -> dict[str, Any]:
    """The fairness-over-weeks annotations (api/fairness.py); a bad one is ignored, with a warning."""
    out: dict[str, Any] = {}
    for key, field_name, parse in ((ANNOTATION_FAIR_SHARING, "fair_sharing", parse_fair_sharing),
                                   (ANNOTATION_USAGE_HALF_LIFE, "usage_half_life", parse_half_life),
                                   (ANNOTATION_BUDGET, "budgets", parse_budgets)):
        text = annotations.get(key)
        if text is None:
            continue
        try:
            out[field_name] = parse(text)
        except ValueError as err:
            warnings.append(f"{where}: annotation {key}: {err}; ignored")
    return out


_LABEL_NAME = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def node_selector(text: str | None, where: str) -> tuple[tuple[str, str], ...]:
    """A flavor's node selector: label equality terms ``key=value``, comma-separated, each
    key once; anything else raises InvalidObject (the quota is not used: admitting into it
    without the selector would put its jobs on any node)."""
    if text is None:
        return ()
    terms: dict[str, str] = {}
    for raw in text.split(","):
        term = raw.strip()
        key, eq, value = term.partition("=")
        key, value = key.strip(), value.strip()
        if not eq or value.startswith("=") or not _label_key(key) or not _LABEL_NAME.match(value):
            raise InvalidObject(f"{where}: annotation {ANNOTATION_NODE_SELECTOR}: {term!r} is not a node label "
                                "equality term key=value (label syntax)")
        if key in terms:
            raise InvalidObject(f"{where}: annotation {ANNOTATION_NODE_SELECTOR}: label {key} named twice")
        terms[key] = value
    return tuple(sorted(terms.items()))


_TOLERATION_FIELDS = ("key", "operator", "value", "effect", "tolerationSeconds")
_EFFECTS = ("", TAINT_NO_SCHEDULE, TAINT_PREFER_NO_SCHEDULE, TAINT_NO_EXECUTE)


def _flavor_tolerations(annotations: Mapping[str, str], where: str,
                        warnings: list[str]) -> tuple[FlavorToleration, ...]:
    """A flavor's tolerations; on a quota with no node selector (no flavor) they are ignored, with a warning."""
    text = annotations.get(ANNOTATION_FLAVOR_TOLERATIONS)
    if text is None:
        return ()
    tolerations = flavor_tolerations(text, where)
    if not annotations.get(ANNOTATION_NODE_SELECTOR):
        warnings.append(f"{where}: annotation {ANNOTATION_FLAVOR_TOLERATIONS} is read only on a flavor (a quota "
                        f"with {ANNOTATION_NODE_SELECTOR}); ignored")
        return ()
    return tolerations


def flavor_tolerations(text: str, where: str) -> tuple[FlavorToleration, ...]:
    """A flavor's ``koord-queue/tolerations``: a JSON list of core/v1 Tolerations, checked as
    the API server checks a pod's; anything else raises InvalidObject (the quota is not
    used: its jobs' pods, pinned to its tainted nodes without them, would never run)."""
    at = f"{where}: annotation {ANNOTATION_FLAVOR_TOLERATIONS}"
    try:
        value = json.loads(text)
    except ValueError:
        raise InvalidObject(f"{at}: not JSON; a JSON list of Tolerations, e.g. "
                            '[{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}]') from None
    if not isinstance(value, list):
        raise InvalidObject(f"{at}: a JSON list of Tolerations, got {type(value).__name__}")
    out = []
    for i, item in enumerate(value):
        here = f"{at}: [{i}]"
        if not isinstance(item, dict):
            raise InvalidObject(f"{here}: a Toleration is a JSON object")
        unknown = sorted(set(item) - set(_TOLERATION_FIELDS))
        if unknown:
            raise InvalidObject(f"{here}: unknown field {', '.join(map(str, unknown))} (a Toleration has "
                                f"{', '.join(_TOLERATION_FIELDS)})")
        fields = {k: item.get(k, "") for k in _TOLERATION_FIELDS[:4]}
        if not all(isinstance(v, str) for v in fields.values()):
            raise InvalidObject(f"{here}: key, operator, value and effect are strings")
        key, operator, val, effect = fields["key"], fields["operator"] or TOLERATION_EQUAL, fields["value"], \
            fields["effect"]
        if operator not in (TOLERATION_EQUAL, TOLERATION_EXISTS):
            raise InvalidObject(f"{here}: operator is {TOLERATION_EQUAL} or {TOLERATION_EXISTS}, got {operator!r}")
        if key and not _label_key(key):
            raise InvalidObject(f"{here}: key {key!r} is not a label key")
        if not key and operator != TOLERATION_EXISTS:
            raise InvalidObject(f"{here}: a Toleration with no key must have operator {TOLERATION_EXISTS}")
        if operator == TOLERATION_EXISTS and val:
            raise InvalidObject(f"{here}: value must be empty with operator {TOLERATION_EXISTS}")
        if val and not _LABEL_NAME.match(val):
            raise InvalidObject(f"{here}: value {val!r} is not a label value")
        if effect not in _EFFECTS:
            raise InvalidObject(f"{here}: effect is {', '.join(e for e in _EFFECTS if e)} or empty, got {effect!r}")
        seconds = item.get("tolerationSeconds")
        if seconds is not None and (not isinstance(seconds, int) or isinstance(seconds, bool)):
            raise InvalidObject(f"{here}: tolerationSeconds is a whole number of seconds")
        if seconds is not None and effect != TAINT_NO_EXECUTE:
            raise InvalidObject(f"{here}: tolerationSeconds is only for effect {TAINT_NO_EXECUTE}")
        out.append(FlavorToleration(key, operator, val, effect, seconds))
    return tuple(out)


def _label_key(key: str) -> bool:
    """A label key as Kubernetes takes it: [prefix/]name, the prefix a DNS subdomain."""
    prefix, slash, name = key.rpartition("/")
    if slash and (not prefix or len(prefix) > 253 or not _DNS_SUBDOMAIN.match(prefix)):
        return False
    return bool(name) and len(name) <= 63 and bool(_LABEL_NAME.match(name))


def _flavor_order(text: str | None) -> tuple[str, ...]:
    """A parent's flavor order: child names, comma-separated (names that are no flavor of
    it are the engine's to ignore and say)."""
    if not text:
        return ()
    return tuple(dict.fromkeys(name.strip() for name in text.split(",") if name.strip()))


def _fungibility(text: str | None, where: str, warnings: list[str]) -> dict[str, Any]:
    """``borrow_first`` and ``preempt_first`` of a parent's flavor fungibility; a term that
    is not one of Kueue's falls back to its default with a warning."""
    out: dict[str, Any] = {"borrow_first": True, "preempt_first": False}
    if not text:
        return out
    choices = {FUNGIBILITY_WHEN_CAN_BORROW: ("borrow_first", FUNGIBILITY_BORROW),
               FUNGIBILITY_WHEN_CAN_PREEMPT: ("preempt_first", FUNGIBILITY_PREEMPT)}
    for raw in text.split(","):
        name, _, value = (part.strip() for part in raw.partition("="))
        choice = choices.get(name)
        if choice is None or value not in (choice[1], FUNGIBILITY_TRY_NEXT):
            warnings.append(f"{where}: annotation {ANNOTATION_FLAVOR_FUNGIBILITY}: {raw.strip()!r} is not "
                            f"{FUNGIBILITY_WHEN_CAN_BORROW}={FUNGIBILITY_BORROW}|{FUNGIBILITY_TRY_NEXT} nor "
                            f"{FUNGIBILITY_WHEN_CAN_PREEMPT}={FUNGIBILITY_PREEMPT}|{FUNGIBILITY_TRY_NEXT}; ignored")
            continue
        out[choice[0]] = value == choice[1]
    return out


def _created(obj: Mapping[str, Any]) -> str:
    value = (obj.get("metadata") or {}).get("creationTimestamp")
    return value if isinstance(value, str) else ""


def _parent(label: str | None) -> str | None:
    """The parent quota a label names; None for the root (no label, or Koordinator's root)."""
    return None if not label or label == KOORDINATOR_ROOT_QUOTA else label


def is_koordinators_own(obj: Mapping[str, Any]) -> bool:
    """One of the quotas Koordinator makes for itself (root, system, default): not a team's."""
    return str((obj.get("metadata") or {}).get("name", "")) in KOORDINATOR_QUOTAS


def parse_queue(obj: object, quota_names: Collection[str],
                system_namespaces: Collection[str] = (SYSTEM_NAMESPACE,)) -> ParsedQueue:
    """The ``QueueInfo`` of a Queue object, bound to a quota, plus its other settings.

    Binding: the label ``quota.scheduling.koordinator.sh/name``; else the quota the
    annotation ``koord-queue/quota-fullname`` ends with (a Queue Koord-Queue made for a
    tree's quota); else the quota named like the Queue when ``quota_names`` holds it; else
    none (such a Queue admits nothing).
    The knobs that act on other teams (``TENANT_QUEUE_IGNORES``) are honoured only on a
    Queue in one of ``system_namespaces`` (``koord-queue``, and the controller's own when it
    runs in another), which only cluster admins may write (docs/security.md).
    """
    meta = read_meta(obj, QUEUE_KIND)
    where = meta.describe()
    assert isinstance(obj, Mapping)  # read_meta checked it
    spec = section(obj, "spec", where)
    warnings: list[str] = []
    path = meta.annotations.get(ANNOTATION_QUOTA_FULL_NAME) or None
    quota = meta.labels.get(LABEL_QUOTA_NAME) or (path.rsplit("/", 1)[-1] if path else None) or (
        meta.name if meta.name in quota_names else None)
    priority = spec.get("priority")
    max_depth = _max_depth(meta, warnings)
    wait_for_pods_running = _flag(meta, ANNOTATION_WAIT_FOR_PODS_RUNNING, warnings)
    backoff_base, backoff_cap = _queue_args(meta, warnings)
    queue = QueueInfo(
        name=meta.name,
        namespace=meta.namespace,
        quota=quota,
        policy=_policy(spec.get("queuePolicy"), f"{where}: spec.queuePolicy", warnings),
        priority=0 if priority is None else read_int(priority, f"{where}: spec.priority"),
        priority_threshold=_optional_int(meta, ANNOTATION_PRIORITY_THRESHOLD, warnings),
        preemption=_flag(meta, ANNOTATION_ENABLE_PREEMPTION, warnings),
        hold_room_after=_duration(meta, ANNOTATION_HOLD_ROOM_AFTER, DEFAULT_HOLD_ROOM_AFTER_SECONDS, warnings,
                                  zero=True),
        node_fit=_optional_flag(meta, ANNOTATION_NODE_FIT, warnings),
        max_depth=max_depth,
        wait_for_pods_running=wait_for_pods_running,
        backoff_base=backoff_base,
        backoff_cap=backoff_cap,
        quota_path=path,
    )
    if meta.namespace not in system_namespaces:
        queue = _tenants_queue(queue, meta, spec, " or ".join(sorted(system_namespaces)), warnings)
    settings = QueueSettings(
        priority_class_name=_optional_str(spec.get("priorityClassName"), f"{where}: spec.priorityClassName"),
        admission_checks=_admission_checks(spec.get("admissionChecks"), where),
        wait_for_pods_running=wait_for_pods_running,
        max_depth=max_depth,
        refresh_seconds=_duration(meta, ANNOTATION_QUEUE_ITEMS_REFRESH_INTERVAL,
                                  DEFAULT_QUEUE_ITEMS_REFRESH_SECONDS, warnings),
    )
    return ParsedQueue(queue, settings, tuple(warnings))


# What a tenant's Queue (one outside the system namespace) may not set: the order among all
# queues (spec.priority), preemption of the units of a quota other namespaces may share,
# room held against other teams' borrowers, admission past the nodes' room.
TENANT_QUEUE_IGNORES = ("spec.priority", ANNOTATION_ENABLE_PREEMPTION, ANNOTATION_HOLD_ROOM_AFTER,
                        ANNOTATION_NODE_FIT)


def _tenants_queue(queue: QueueInfo, meta: Meta, spec: Mapping[str, Any], honoured_in: str,
                   warnings: list[str]) -> QueueInfo:
    """A Queue outside the system namespace, its tenant-set knobs at their defaults (said in
    a warning): who may write a Queue in their own namespace must not order, preempt or hold
    room against other teams through it."""
    set_here = [name for name in TENANT_QUEUE_IGNORES
                if (spec.get("priority") not in (None, 0) if name == "spec.priority" else name in meta.annotations)]
    if set_here:
        warnings.append(f"{meta.describe()}: {', '.join(set_here)} ignored: honoured only on Queues in namespace "
                        f"{honoured_in}, which cluster admins write (a tenant's Queue must not order, preempt "
                        "or hold room against other teams)")
    return replace(queue, priority=0, preemption=False, hold_room_after=DEFAULT_HOLD_ROOM_AFTER_SECONDS,
                   node_fit=None)


def _resources(value: object, where: str) -> ResourceList:
    try:
        return parse_resource_list(value)
    except QuantityError as err:
        raise InvalidObject(f"{where}: {err}") from None


def _policy(value: object, where: str, warnings: list[str]) -> QueuePolicy:
    if value is None or value == "":
        return DEFAULT_QUEUE_POLICY
    known = [policy.value for policy in QueuePolicy]
    if isinstance(value, str) and value in known:
        return QueuePolicy(value)
    warnings.append(
        f"{where}: unknown queue policy {value!r} (known: {', '.join(known)}); using {DEFAULT_QUEUE_POLICY}"
    )
    return DEFAULT_QUEUE_POLICY


def _shared_weight(text: str | None, where: str) -> ResourceList | None:
    """Its shared weight; one that is not a list of amounts makes the quota unusable, as
    koord-manager refuses it (rather than weigh it as its max, as if it were not there)."""
    if text is None:
        return None
    try:
        return parse_resource_list(load_json_annotation(text))
    except (ValueError, QuantityError) as err:  # json.JSONDecodeError is a ValueError
        raise InvalidObject(f"{where}: annotation {ANNOTATION_SHARED_WEIGHT}: {err}") from None


def _namespaces(text: str | None, where: str, warnings: list[str]) -> frozenset[str]:
    if text is None:
        return frozenset()
    key = f"{where}: annotation {ANNOTATION_QUOTA_NAMESPACES}"
    try:
        value = load_json_annotation(text)
    except ValueError as err:
        warnings.append(f"{key}: not JSON ({err}); no namespace bound")
        return frozenset()
    if not isinstance(value, list) or not all(isinstance(item, str) and item for item in value):
        warnings.append(f'{key}: must be a JSON list of namespace names like ["a", "b"]; no namespace bound')
        return frozenset()
    return frozenset(value)


def _optional_int(meta: Meta, annotation: str, warnings: list[str]) -> int | None:
    text = meta.annotations.get(annotation)
    if text is None:
        return None
    try:
        return parse_int_text(text, f"{meta.describe()}: annotation {annotation}")
    except InvalidObject as err:
        warnings.append(f"{err.reason}; ignored")
        return None


def _flag(meta: Meta, annotation: str, warnings: list[str]) -> bool:
    text = meta.annotations.get(annotation)
    if text is None:
        return False
    if text.lower() not in (TRUE, FALSE):
        warnings.append(
            f'{meta.describe()}: annotation {annotation} must be "true" or "false", got {text!r}; off'
        )
    return text.lower() == TRUE


def _optional_flag(meta: Meta, annotation: str, warnings: list[str]) -> bool | None:
    """A "true"/"false" annotation that may be left out (None: the default decides)."""
    text = meta.annotations.get(annotation)
    if text is None:
        return None
    if text.lower() not in (TRUE, FALSE):
        warnings.append(f'{meta.describe()}: annotation {annotation} must be "true" or "false", got {text!r}; '
                        "ignored")
        return None
    return text.lower() == TRUE


def _max_depth(meta: Meta, warnings: list[str]) -> int | None:
    depth = _optional_int(meta, ANNOTATION_MAX_DEPTH, warnings)
    if depth is None or depth == -1:
        return None
    if depth <= 0:
        warnings.append(
            f"{meta.describe()}: annotation {ANNOTATION_MAX_DEPTH} must be positive or -1, got {depth}; unlimited"
        )
        return None
    return depth


def _queue_args(meta: Meta, warnings: list[str]) -> tuple[float | None, float | None]:
    """The back-off base and cap in Koord-Queue's queue-args (a YAML map of strings, as its
    controller writes it: ``podInitialBackoffSeconds: "1"``); other keys are Koord-Queue's
    queue implementations' and are left alone, as they leave them."""
    text = meta.annotations.get(ANNOTATION_QUEUE_ARGS)
    if text is None:
        return None, None
    where = f"{meta.describe()}: annotation {ANNOTATION_QUEUE_ARGS}"
    try:
        args = load_annotation(text)
    except yaml.YAMLError as err:
        what = "refused" if isinstance(err, RefusedYAML) else "not YAML"
        warnings.append(f"{where}: {what} ({str(err).splitlines()[0]}); ignored")
        return None, None
    if args is None:
        return None, None
    if not isinstance(args, Mapping):
        warnings.append(f'{where}: must be a YAML map like {QUEUE_ARG_INITIAL_BACKOFF}: "5"; ignored')
        return None, None
    found: list[float | None] = []
    for key in (QUEUE_ARG_INITIAL_BACKOFF, QUEUE_ARG_MAX_BACKOFF):
        value = args.get(key)
        seconds = None
        if value is not None:
            try:
                seconds = float(str(value))
            except ValueError:
                seconds = None
            if seconds is None or not math.isfinite(seconds) or seconds < 0:
                warnings.append(f"{where}: {key} must be a number of seconds, 0 or more, got {value!r}; "
                                "the controller's back-off is used")
                seconds = None
        found.append(seconds)
    return found[0], found[1]


def _duration(meta: Meta, annotation: str, default: float, warnings: list[str], zero: bool = False) -> float:
    """Seconds in a Go-duration annotation; ``zero``: 0 is allowed (else it must be positive)."""
    text = meta.annotations.get(annotation)
    if text is None:
        return default
    where = f"{meta.describe()}: annotation {annotation}"
    try:
        seconds = parse_go_duration(text, where)
    except InvalidObject as err:
        warnings.append(f"{err.reason}; using {default:g}s")
        return default
    if seconds < 0 or (seconds == 0 and not zero):
        warnings.append(f"{where} must be {'0 or more' if zero else 'positive'}, got {text!r}; using {default:g}s")
        return default
    return seconds


def _optional_str(value: object, where: str) -> str | None:
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise InvalidObject(f"{where} must be a string, got {value!r}")
    return value


def _admission_checks(value: object, where: str) -> tuple[AdmissionCheckSpec, ...]:
    if value is None:
        return ()
    if not isinstance(value, list):
        raise InvalidObject(f"{where}: spec.admissionChecks must be a list")
    checks = []
    for index, item in enumerate(value):
        at = f"{where}: spec.admissionChecks[{index}]"
        if not isinstance(item, Mapping):
            raise InvalidObject(f"{at} must be a mapping with a name")
        name = item.get("name")
        if not isinstance(name, str) or not name:
            raise InvalidObject(f"{at}.name is missing or not a string")
        selector = item.get("labelSelector")
        if selector is not None and not isinstance(selector, Mapping):
            raise InvalidObject(f"{at}.labelSelector must be a mapping")
        checks.append(AdmissionCheckSpec(name, selector))
    return tuple(checks)


_DURATION_PART = re.compile(r"([0-9]*\.?[0-9]+|[0-9]+\.)(ns|us|µs|μs|ms|s|m|h)")
_DURATION_SECONDS = {
    "ns": 1e-9,
    "us": 1e-6,
    "µs": 1e-6,
    "μs": 1e-6,
    "ms": 1e-3,
    "s": 1.0,
    "m": 60.0,
    "h": 3600.0,
}


def parse_go_duration(text: str, where: str) -> float:
    """Seconds in a Go duration (``30s``, ``2m``, ``1h30m``, ``100ms``), as Koord-Queue reads it."""
    body = text.strip()
    sign = -1.0 if body.startswith("-") else 1.0
    body = body[1:] if body[:1] in ("+", "-") else body
    if body == "0":
        return 0.0
    parts = _DURATION_PART.findall(body)
    if not body or "".join(number + unit for number, unit in parts) != body:
        raise InvalidObject(f"{where} must be a duration like 30s, 2m or 1h30m, got {text!r}")
    return sign * sum(float(number) * _DURATION_SECONDS[unit] for number, unit in parts)
