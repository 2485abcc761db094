"""Texts for people: why a unit waits, why it was preempted, why it went back.

Every text names the quota, the resource, how much is asked, used and allowed, in the
units people write in their manifests (``8``, ``500m``, ``200Gi``).
"""

from __future__ import annotations

from functools import lru_cache

from koordqueue.api.constants import (
    ANNOTATION_HOLD_ROOM_AFTER,
    FALSE,
    LABEL_HOSTNAME,
    LABEL_PREEMPTIBLE,
    SETTING_PROTECT_SECONDS,
)
from koordqueue.api.quantity import format_quantity
from koordqueue.engine.fit import Misfit
from koordqueue.engine.placement import Unplaced
from koordqueue.engine.quotanode import QuotaNode


@lru_cache(maxsize=4096)
def _q(amount: int) -> str:
    """Amounts repeat (the same requests, limits and usages, message after message)."""
    return format_quantity(amount)


def _where(node: QuotaNode) -> str:
    return "the cluster" if node.is_root else f"quota {node.name}"


def _duration(seconds: float) -> str:
    """Seconds as a Go duration, as the annotations are written: 600 -> 10m, 90 -> 1m30s."""
    whole = round(seconds)
    if whole != seconds:
        return f"{seconds:g}s"
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    text = (f"{hours}h" if hours else "") + (f"{minutes}m" if minutes else "") + (f"{secs}s" if secs else "")
    return text or "0s"


def _max(node: QuotaNode, name: str, limit: int) -> str:
    """A quota's limit: its max, and with an oversell rate how the limit comes of it."""
    if node.oversell == 1.0 or node.info is None or name not in node.info.max:
        return f"max {_q(limit)}"
    return f"max {_q(node.info.max[name])} x oversellrate {node.oversell:g} = {_q(limit)}"


def _min(node: QuotaNode, name: str, limit: int) -> str:
    """A quota's min as non-preemptible units are held to it (with an oversell rate, how)."""
    if node.oversell == 1.0 or node.info is None or name not in node.info.min:
        return f"min {_q(limit)}"
    return f"min {_q(node.info.min[name])} x oversellrate {node.oversell:g} = {_q(limit)}"


NON_PREEMPTIBLE = f'non-preemptible jobs ({LABEL_PREEMPTIBLE}: "{FALSE}")'


def _pinned(leaf: QuotaNode, misfit: Misfit) -> str:
    """Why a non-preemptible unit waits: they are never preempted, so they may not borrow."""
    name, asked, node = misfit.resource, _q(misfit.asked), misfit.node
    whose = "its" if node is leaf else f"its parent quota {node.name}'s"
    if misfit.never:
        return (f"can never fit quota {leaf.name}: {name} asks {asked}, more than {whose} "
                f"{_min(node, name, misfit.limit)}, all that {NON_PREEMPTIBLE} may use (they are never preempted)")
    return (f"waiting for quota {leaf.name}: {name} asks {asked}; {NON_PREEMPTIBLE} are never preempted, so "
            f"they may use only {whose} min: they use {_q(misfit.used)} of {whose} {_min(node, name, misfit.limit)}")


def waiting(leaf: QuotaNode, misfit: Misfit, priority: int, protect: float | None = None) -> str:
    """Why a unit of ``leaf`` and ``priority`` does not fit now; ``protect``: the protect
    time, when units it could preempt for room are still within it."""
    text = _waiting(leaf, misfit, priority)
    if protect is None:
        return text
    return (f"{text}; units it could preempt for room have run less than the protect time "
            f"({_duration(protect)}, {SETTING_PROTECT_SECONDS}): it tries again as each passes it")


def protect_advice(protect: float) -> str:
    """``explain``'s advice to a unit that could preempt for room but for the protect time."""
    return (f"time may be enough: units it could preempt for room pass their protect time "
            f"({protect:g}s, {SETTING_PROTECT_SECONDS}) within that from now, and it tries again as each does; or")


def _waiting(leaf: QuotaNode, misfit: Misfit, priority: int) -> str:
    name, asked, node = misfit.resource, _q(misfit.asked), misfit.node
    if misfit.pinned:
        return _pinned(leaf, misfit)
    if misfit.runtime:  # beside koord-scheduler, which would leave pods Pending
        if node in leaf.path and node is not leaf:
            return (f"waiting for quota {leaf.name}: {name} asks {asked}; its parent quota {node.name} has used "
                    f"{_q(misfit.used)} of its runtime quota {_q(misfit.limit)} as koord-scheduler computes it")
        if node is not leaf:
            return (f"waiting for quota {leaf.name}: {name} asks {asked}; admitted, it would leave quota "
                    f"{node.name} a runtime quota of {_q(misfit.limit)} as koord-scheduler computes it, less than "
                    f"the {_q(misfit.used)} it uses")
        return (f"waiting for quota {leaf.name}: {name} asks {asked}, used {_q(misfit.used)}: over its runtime "
                f"quota {_q(misfit.limit)} as koord-scheduler computes it")
    if misfit.never:
        if node is leaf:
            return (
                f"can never fit quota {leaf.name}: {name} asks {asked}, more than its {_max(node, name, misfit.limit)}"
            )
        return (
            f"can never fit quota {leaf.name}: {name} asks {asked}, more than the "
            f"{_q(misfit.limit)} of {_where(node)}"
        )
    hold = misfit.hold
    if hold is not None:
        free = misfit.limit - misfit.used - misfit.reserve
        if hold.priority > priority:
            rule = f"of higher priority ({hold.priority} > {priority})"
        else:
            rule = (f"of the same priority ({priority}), which has waited more than "
                    f"{_duration(hold.waited_past or 0.0)} ({ANNOTATION_HOLD_ROOM_AFTER} of its Queue)")
        return (
            f"waiting for quota {leaf.name}: {name} asks {asked}; the free {_q(free)} of {_where(node)} "
            f"is held for {hold.holder}, {rule}"
        )
    kept = f", {_q(misfit.reserve)} of it kept by quotas that do not lend" if misfit.reserve > 0 else ""
    used = f"used {_q(misfit.used)} of {_max(node, name, misfit.limit)}{kept}"
    if node is leaf:
        return f"waiting for quota {leaf.name}: {name} asks {asked}, {used}"
    if node.is_root:
        return (
            f"waiting for cluster capacity: {name} asks {asked}, used {_q(misfit.used)} of "
            f"{_q(misfit.limit)} in the cluster{kept}"
        )
    return f"waiting for quota {leaf.name}: {name} asks {asked}; its parent quota {node.name} has {used}"


def unplaced(leaf: QuotaNode, misfit: Unplaced) -> str:
    """Why a unit that fits its quota waits for the nodes: what they lack, and where there is most."""
    start = f"quota {leaf.name} has room, but "
    pods = _pods(misfit)
    if misfit.shut_out:
        why = ", ".join(f"{count} {_refusal(reason)}" for reason, count in misfit.shut_out)
        return f"{start}no node may take {pods}: {why}"
    if misfit.level is not None:
        domain = _domain(misfit.level)
        best = f" (the most in one: {misfit.room}, in {misfit.domain})" if misfit.domain is not None else ""
        return f"{start}no {domain} ({misfit.level}) has room for all {pods}{best}"
    if misfit.room == 0 and misfit.resource is not None:
        asked = _q(dict(misfit.asked).get(misfit.resource, 0))
        if misfit.node is None:
            return f"{start}no node has {misfit.resource}, which {pods} ask for ({asked} each)"
        text = (f"{start}no node has {asked} free {misfit.resource} (the most free on one node: "
                f"{_q(misfit.most)}, on {misfit.node})")
        return text + ("; nor would any, empty" if misfit.never else "")
    each = ", ".join(f"{_q(amount)} {name}" for name, amount in misfit.asked)
    if misfit.room == 0:
        text = f"{start}no node has room for one of {pods} ({each}) now"
    else:
        text = f"{start}the nodes have room for {misfit.room} of {pods} ({each} each) now"
    return text + ("; even empty, they could not hold them all" if misfit.never else "")


def _pods(misfit: Unplaced) -> str:
    role = f"{misfit.pod_set} " if misfit.pod_set else ""
    return f"its {role}pod" if misfit.count == 1 else f"its {misfit.count} {role}pods"


def _refusal(reason: str) -> str:
    """A rule a node breaks for a pod set (nodefilter.Refusal.reason), said of the nodes that break it."""
    if reason.startswith("taint "):
        return f"with {reason} not tolerated"
    if reason.startswith("nodeSelector "):
        return f"without label {reason.removeprefix('nodeSelector ')} (nodeSelector)"
    if reason == "node affinity":
        return "outside its required node affinity"
    return reason


def _domain(level: str) -> str:
    """What one domain of a topology level is called: a node, a zone, a rack..."""
    return "node" if level == LABEL_HOSTNAME else level.rpartition("/")[2]


_QUEUED = "queued in "


def queued(queue: str, quota: str, policy: str) -> str:
    return f"{_QUEUED}{queue} for quota {quota} ({policy} policy), waiting for its turn"


def says_only_queued(message: str) -> bool:
    """Whether a message (one written on an object, perhaps before a restart) is `queued`'s:
    a unit in its queue not yet tried, rather than a reason it does not fit."""
    return message.startswith(_QUEUED)


def blocked(head: str, queue: str, policy: str) -> str:
    return f"blocked behind {head} ({policy} policy of queue {queue})"


def band_blocked(head: str, queue: str, threshold: int) -> str:
    return (
        f"waiting while high-priority {head} (priority {threshold} or more) waits ahead of it "
        f"(Intelligent policy of queue {queue})"
    )


def pods_starting(queue: str, unit: str) -> str:
    return (f"waiting: queue {queue} waits for the pods of {unit} to run before it admits more "
            "(koord-queue/wait-for-pods-running)")


def beyond_depth(queue: str, depth: int) -> str:
    return (f"waiting its turn: queue {queue} considers only its first {depth} pending jobs "
            "(koord-queue/max-depth), and this one is further back")


def reclaimed(victim_quota: QuotaNode, name: str, preemptor: str, quota: str) -> str:
    used = victim_quota.used.get(name, 0)
    share = victim_quota.runtime.get(name, 0)
    return (
        f"preempted: quota {victim_quota.name} used {_q(used)} {name}, more than its runtime share "
        f"{_q(share)}; quota {quota} reclaimed it for {preemptor}"
    )


def outranked(preemptor: str, priority: int, quota: str) -> str:
    return f"preempted by {preemptor} of higher priority ({priority}) in quota {quota}"


def backing_off(reason: str, seconds: float, attempts: int) -> str:
    return f"{reason}; queued again in {seconds:.0f} s (attempt {attempts})"


def next_cycle(victims: list[str]) -> str:
    """For a unit that fits now, seen from a snapshot of the objects (`koord-queue explain`)."""
    preempting = f", preempting {', '.join(sorted(victims))}" if victims else ""
    return (f"fits now: the controller admits it at its next cycle{preempting} "
            "(if it does not, see that the controller runs)")


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def _victims(units: list[str]) -> str:
    return f"preempted unit{'' if len(units) == 1 else 's'} {', '.join(sorted(units))}"


def waiting_for_victims(pods: int, units: list[str], bound: float) -> str:
    """A preemptor admitted (its quota held), its job not resumed yet: the room it was given is
    still taken on the nodes by its victims' pods, which are being deleted."""
    return (f"waiting for {_count(pods, 'pod')} of {_victims(units)} to terminate; its job is resumed "
            f"once they have, or after {_duration(bound)} at most (their grace period and a margin)")


def victims_gone(units: list[str]) -> str:
    return f"the pods of {_victims(units)} have terminated: its job is resumed"


def victims_outlasted(pods: int, units: list[str], bound: float) -> str:
    return (f"its job is resumed though {_count(pods, 'pod')} of {_victims(units)} had not terminated "
            f"after {_duration(bound)} (their grace period and a margin)")
