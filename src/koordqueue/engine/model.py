"""What the shells hand to the engine, and what the engine hands back.

This module is the contract between the engine and its shells (controller, simulator,
benchmarks). Resources are ``dict[str, int]`` in milli-units (``cpu: "1"`` is 1000,
``memory: 1Ki`` is 1024000): integer arithmetic only, so nothing is lost to rounding.
Times are float seconds on whatever clock the shell uses (wall or virtual).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from koordqueue.api.constants import (
    AUTO_QUEUE_PRIORITY,
    BACKOFF_BASE_SECONDS,
    BACKOFF_CAP_SECONDS,
    BACKOFF_FACTOR,
    BACKOFF_JITTER,
    DEFAULT_PRIORITY_THRESHOLD,
    DEFAULT_PROTECT_SECONDS,
    DEFAULT_TOPOLOGY_LEVELS,
    DEFAULT_USAGE_HALF_LIFE_SECONDS,
    DONE_GRACE_SECONDS,
    SYSTEM_NAMESPACE,
    TAINT_NO_SCHEDULE,
    TOLERATION_EQUAL,
    TOLERATION_EXISTS,
)

# An ElasticQuota and a Queue as the engine takes them: typed views of the API's objects.
from koordqueue.api.objects import QueueInfo as QueueInfo
from koordqueue.api.objects import QuotaInfo as QuotaInfo

ResourceList = dict[str, int]
"""Resource name -> amount in milli-units."""


@dataclass(frozen=True, slots=True)
class Taint:
    key: str
    value: str = ""
    effect: str = TAINT_NO_SCHEDULE  # NoSchedule, PreferNoSchedule or NoExecute


@dataclass(frozen=True, slots=True)
class Toleration:
    key: str = ""  # with Exists, "" tolerates every taint
    operator: str = TOLERATION_EQUAL  # Equal or Exists
    value: str = ""
    effect: str = ""  # "": every effect

    def tolerates(self, taint: Taint) -> bool:
        if self.effect and self.effect != taint.effect:
            return False
        if self.operator == TOLERATION_EXISTS:
            return not self.key or self.key == taint.key
        return self.key == taint.key and self.value == taint.value


@dataclass(frozen=True, slots=True)
class Requirement:
    """One entry of a required node affinity term: matchExpressions on a label, or
    matchFields (``field``) on the node's name."""

    key: str
    operator: str  # In, NotIn, Exists, DoesNotExist, Gt, Lt
    values: tuple[str, ...] = ()
    field: bool = False


@dataclass(frozen=True, slots=True)
class TopologyRequest:
    """All pods of the pod set in one domain of ``level`` (a node label): ``required``,
    or else as close as the nodes allow (the levels above it, then anywhere)."""

    level: str
    required: bool


@dataclass(frozen=True, slots=True)
class PodSetInfo:
    """One role of a job: ``count`` pods alike, and where they may go."""

    name: str
    count: int
    request: ResourceList  # one pod's
    min_count: int | None = None  # elastic: it may be admitted with as few as this
    node_selector: tuple[tuple[str, str], ...] = ()
    affinity: tuple[tuple[Requirement, ...], ...] = ()  # required node affinity: any one term, all of it
    tolerations: tuple[Toleration, ...] = ()
    topology: TopologyRequest | None = None
    # Why an admission cannot pin its pods to nodes (its kind has no pod field that holds
    # them there): then it is never admitted into a flavor (flavorsets.py). None: it can.
    unpinnable: str | None = None

    @property
    def elastic(self) -> bool:
        return self.min_count is not None and self.min_count < self.count


@dataclass(frozen=True, slots=True)
class NodeInfo:
    """A node as placement needs it; an unschedulable (cordoned) node takes only pods
    that tolerate its ``node.kubernetes.io/unschedulable`` taint, as kube-scheduler says."""

    name: str
    allocatable: ResourceList
    labels: dict[str, str] = field(default_factory=dict)
    taints: tuple[Taint, ...] = ()
    unschedulable: bool = False


@dataclass(frozen=True, slots=True)
class Placement:
    """Where an admitted unit's pods go: how many of each pod set (fewer than asked for
    an elastic one admitted in part), the topology domain each pod set was given (its
    level and the labels that pin it, widest first), and the nodes planned for them."""

    counts: tuple[tuple[str, int], ...] = ()
    domains: tuple[tuple[str, str, tuple[tuple[str, str], ...]], ...] = ()  # (pod set, level, labels)
    nodes: tuple[tuple[str, str, int], ...] = ()  # (pod set, node, pods)

    def count_of(self, pod_set: str, default: int) -> int:
        return next((n for name, n in self.counts if name == pod_set), default)


class Held(Enum):
    """Why an unusable unit waits whatever room there is, when it is one of these two (the
    shell's states, carried as a field so that no one reads them from the reason's words;
    the engine treats a held unit as any other with ``invalid`` set)."""

    ORPHAN = "orphan"  # stands for no job the shell queues: waits, holding nothing
    INACTIVE = "inactive"  # its job's active annotation, or its own spec.active, is false


@dataclass(slots=True)
class UnitInfo:
    """A QueueUnit (one job) as the engine needs it.

    ``queue_name`` and ``quota_name`` are what the job *asked for* (annotation
    ``scheduling.x-k8s.io/queue``, label ``quota.scheduling.koordinator.sh/name``);
    the engine resolves them under the tenant rules. ``admitted_quota`` is set when the
    unit holds quota (phases Reserved, Dequeued, Running): the shell sets it when it
    reloads state after a restart, the engine sets it when it admits.
    """

    namespace: str
    name: str
    priority: int
    created: float
    request: ResourceList
    queue_name: str | None = None
    quota_name: str | None = None
    preemptible: bool = True
    admitted_quota: str | None = None
    admitted_queue: str | None = None  # key of the Queue it was admitted through
    admitted_at: float | None = None
    requeue_at: float | None = None  # in backoff: not eligible before this time
    attempts: int = 0  # times it was admitted and then sent back (backoff exponent)
    invalid: str | None = None  # a reason the job itself is unusable (bad quantity, ...)
    pod_sets: tuple[PodSetInfo, ...] = ()  # its pods, for node fit; () : quota alone decides
    placement: Placement | None = None  # set with admitted_quota when placed (or admitted in part)
    # How long it is expected to run (koord-queue/expected-runtime, else its maximum
    # execution time): what a budget counts it for (history.py); None: unknown.
    expected_runtime: float | None = None
    held: Held | None = None  # with ``invalid``: the state behind it, when it is one of these

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True, slots=True)
class EngineConfig:
    protect_seconds: float = DEFAULT_PROTECT_SECONDS  # admitted units younger than this are never victims
    # an admitted unit whose pods have all succeeded is no victim for this long (starting.Done)
    done_grace_seconds: float = DONE_GRACE_SECONDS
    reclaim: bool = True  # preempt borrowers to give a quota back its runtime share
    backoff_base: float = BACKOFF_BASE_SECONDS
    backoff_factor: float = BACKOFF_FACTOR
    backoff_cap: float = BACKOFF_CAP_SECONDS
    backoff_jitter: float = BACKOFF_JITTER
    default_priority_threshold: int = DEFAULT_PRIORITY_THRESHOLD
    cluster_capacity: ResourceList | None = None  # None: unbounded (no nodes known)
    # Koord-Queue's oversellrate: a request fits a quota and each ancestor while used +
    # request <= max x rate, and the cluster's total is oversold alike (tree.py).
    oversell_rate: float = 1.0
    node_fit: bool = True  # when nodes are known: admit only units whose pods fit on them now
    topology_levels: tuple[str, ...] = DEFAULT_TOPOLOGY_LEVELS  # node labels, widest first
    # Beside koord-scheduler (it refuses a pod past its quota's runtime): runtime split by
    # Koordinator's rule, and no unit admitted past its quota's runtime (tree.py, fit.py).
    koordinator: bool = False
    # The cluster's default for koord-queue/fair-sharing (a quota's annotation wins): share
    # the spare capacity past min by usage history (docs/fairness.md); off, Koordinator's rule.
    fair_sharing: bool = False
    usage_half_life: float = DEFAULT_USAGE_HALF_LIFE_SECONDS


@dataclass(frozen=True, slots=True)
class Admission:
    unit: str  # unit key namespace/name
    quota: str
    queue: str  # queue key namespace/name
    placement: Placement | None = None  # None: admitted on quota alone


@dataclass(frozen=True, slots=True)
class Preemption:
    unit: str  # the victim's key
    quota: str  # the victim's quota
    preemptor: str  # key of the unit it made room for
    reason: str  # in words, for status.message and the Preempted event
    requeue_at: float


@dataclass(slots=True)
class CycleResult:
    """Decisions of one cycle. The engine has already applied them to its own state."""

    admitted: list[Admission] = field(default_factory=list)
    preempted: list[Preemption] = field(default_factory=list)
    # unit key -> why it still waits; only units whose message changed this cycle.
    messages: dict[str, str] = field(default_factory=dict)
    # Earliest time at which time alone can change a decision (a backoff or a protect
    # time running out); None: only a change of the inputs can.
    next_wakeup: float | None = None


@dataclass(frozen=True, slots=True)
class QuotaStatus:
    name: str
    min: ResourceList
    max: ResourceList
    used: ResourceList
    runtime: ResourceList
    demand: ResourceList
    valid: bool
    reason: str | None = None  # why it is not valid
    limit: ResourceList = field(default_factory=dict)  # what admission checks against: max x oversellrate


@dataclass(frozen=True, slots=True)
class Standing:
    """Where a pending unit stands: for queue positions, `explain` and the dashboard."""

    unit: str
    queue: str | None  # resolved queue key
    quota: str | None  # resolved quota name
    position: int | None  # 1-based within its queue; None when not queued
    priority: int
    message: str


@dataclass(frozen=True, slots=True)
class FlavorTry:
    """One flavor of a waiting unit's quota, in the order they are tried, and why it refused
    the unit (None: it fits there now, the next cycle admits it): for `explain` and the dashboard."""

    flavor: str
    selects: str  # its node selector, as the annotation writes it
    refused: str | None


def auto_queue_for(quota: QuotaInfo) -> QueueInfo:
    """The Queue created for every ElasticQuota: in the system namespace, named like it."""
    return QueueInfo(
        name=quota.name,
        namespace=SYSTEM_NAMESPACE,
        quota=quota.name,
        policy=quota.policy,
        priority=AUTO_QUEUE_PRIORITY,
        priority_threshold=quota.priority_threshold,
    )
