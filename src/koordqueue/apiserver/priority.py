"""kube-apiserver's Priority admission plugin, for pods: a pod's priorityClassName is resolved
to its spec.priority (and preemptionPolicy) as it is created, and a pod naming a PriorityClass
that does not exist is refused (403: `pods "x" is forbidden: no PriorityClass with name y was
found`), which a training operator reports as FailedCreatePod. Without a class, the pod gets the
global default class's, or priority 0. An update keeps what creation set.
"""

from __future__ import annotations

from typing import Any

from koordqueue.apiserver import errors
from koordqueue.apiserver.registry import ResourceType
from koordqueue.apiserver.store import Store

PRIORITY_CLASS_KEY = "scheduling.k8s.io/priorityclasses"
PREEMPT_LOWER_PRIORITY = "PreemptLowerPriority"
DEFAULT_PRIORITY = 0  # scheduling.DefaultPriorityWhenNoDefaultClassExists


def _default_class(store: Store) -> dict[str, Any] | None:
    """The global default class (the lowest of them, should there be several)."""
    defaults = [pc for pc in store.items(PRIORITY_CLASS_KEY) if pc.get("globalDefault")]
    return min(defaults, key=lambda pc: int(pc.get("value") or 0)) if defaults else None


def admit_create(store: Store, rt: ResourceType, pod: dict[str, Any]) -> None:
    spec = pod.get("spec")
    if not isinstance(spec, dict):
        return  # left to validation
    name = pod["metadata"]["name"]
    class_name = spec.get("priorityClassName") or ""
    if class_name:
        found = store.get(PRIORITY_CLASS_KEY, "", str(class_name))
        if found is None:
            raise errors.forbidden(rt, name, f"no PriorityClass with name {class_name} was found")
        value, policy = int(found.get("value") or 0), found.get("preemptionPolicy")
    elif (default := _default_class(store)) is not None:
        class_name = default["metadata"]["name"]
        value, policy = int(default.get("value") or 0), default.get("preemptionPolicy")
    else:
        value, policy = DEFAULT_PRIORITY, PREEMPT_LOWER_PRIORITY
    if class_name:
        spec["priorityClassName"] = class_name
    given = spec.get("priority")
    if given is not None and given != value:
        raise errors.forbidden(rt, name, f"the integer value of priority ({given}) must not be provided in pod spec; "
                                         f"priority admission controller computed {value} from the given "
                                         "PriorityClass name")
    spec["priority"] = value
    if policy:
        given_policy = spec.get("preemptionPolicy")
        if given_policy is not None and given_policy != policy:
            raise errors.forbidden(rt, name, f"the string value of PreemptionPolicy ({given_policy}) must not be "
                                             f"provided in pod spec; priority admission controller computed "
                                             f"{policy} from the given PriorityClass name")
        spec["preemptionPolicy"] = policy


def admit_update(pod: dict[str, Any], old: dict[str, Any]) -> None:
    """What creation set is kept when an update leaves it out."""
    spec, old_spec = pod.get("spec"), old.get("spec")
    if not isinstance(spec, dict) or not isinstance(old_spec, dict):
        return
    for field in ("priority", "preemptionPolicy"):
        if spec.get(field) is None and old_spec.get(field) is not None:
            spec[field] = old_spec[field]
