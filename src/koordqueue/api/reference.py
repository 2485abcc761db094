"""What every label and annotation of the API means: the source of docs/annotations.md.

Each entry names its string through ``api/constants.py``, so the table cannot spell a key
differently from the code; ``scripts/gen_docs.py`` writes the page and a test fails when
the page drifts, or when constants.py gains a label or annotation this list does not
explain (or explicitly leave out, in ``NOT_DOCUMENTED``, with the reason).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from koordqueue.api import constants as c


class Where(StrEnum):
    QUOTA = "ElasticQuota"
    QUEUE = "Queue"
    QUOTA_OR_QUEUE = "ElasticQuota or Queue"
    JOB = "job"
    POD_TEMPLATE = "job's pod template"
    POD = "pod"
    NODE = "node"
    SIM_JOB = "job (embedded cluster)"
    NAMESPACE = "namespace"
    UNIT = "QueueUnit"


class Origin(StrEnum):
    KOORD_QUEUE = "Koord-Queue"
    KOORDINATOR = "Koordinator"
    KUBEFLOW = "training operator"
    KUBERAY = "KubeRay"
    SPARK = "Spark operator"
    ARGO = "Argo Workflows"
    MPI = "mpi-operator"
    KUBERNETES = "Kubernetes"
    KUEUE = "Kueue"
    OURS = "ours"


@dataclass(frozen=True)
class Key:
    key: str
    label: bool  # False: an annotation
    where: Where
    values: str
    meaning: str
    origin: Origin
    written_by: str = "you"

    @property
    def kind(self) -> str:
        return "label" if self.label else "annotation"


def _label(key: str, where: Where, values: str, meaning: str, origin: Origin, written_by: str = "you") -> Key:
    return Key(key, True, where, values, meaning, origin, written_by)


def _annotation(key: str, where: Where, values: str, meaning: str, origin: Origin,
                written_by: str = "you") -> Key:
    return Key(key, False, where, values, meaning, origin, written_by)


POLICIES = " / ".join(f"`{p.value}`" for p in c.QueuePolicy)

REFERENCE: tuple[Key, ...] = (
    # --- on an ElasticQuota ---
    _label(c.LABEL_QUEUE_POLICY, Where.QUOTA, f"{POLICIES}; default `{c.DEFAULT_QUEUE_POLICY.value}`",
           "How the quota's queue orders and admits its jobs (see policies.md). Any other value: "
           f"`{c.DEFAULT_QUEUE_POLICY.value}` and a Warning event.", Origin.KOORD_QUEUE),
    _label(c.LABEL_QUOTA_PARENT, Where.QUOTA, "a quota's name; absent: a child of the root",
           "The parent quota in the tree. Children share their parent's runtime quota.", Origin.KOORDINATOR),
    _label(c.LABEL_QUOTA_IS_PARENT, Where.QUOTA, f'`"{c.TRUE}"`',
           "Marks a parent quota: it holds no jobs of its own.", Origin.KOORDINATOR),
    _label(c.LABEL_QUOTA_TREE_ID, Where.QUOTA, "a tree's name; absent: its parent's",
           "Koordinator's quota tree the quota belongs to; a child's is its parent's, or it is not used "
           "(koord-manager refuses it too).", Origin.KOORDINATOR),
    _label(c.LABEL_ALLOW_LENT_RESOURCE, Where.QUOTA, f'`"{c.FALSE}"` to refuse; anything else lends',
           "Whether the quota's unused min may be lent to others. A quota that does not lend keeps its "
           "whole min, used or not.", Origin.KOORDINATOR),
    _annotation(c.ANNOTATION_SHARED_WEIGHT, Where.QUOTA, 'JSON resource list, e.g. `{"nvidia.com/gpu": "40"}`; '
                "default `spec.max`",
                "The weight of the quota when spare capacity is shared among siblings.", Origin.KOORDINATOR),
    _annotation(c.ANNOTATION_QUOTA_NAMESPACES, Where.QUOTA, 'JSON list, e.g. `["team-a", "team-a-dev"]`',
                "Namespaces whose jobs may use this quota, besides the quota's own namespace.",
                Origin.KOORDINATOR),
    _annotation(c.ANNOTATION_PRIORITY_THRESHOLD, Where.QUOTA_OR_QUEUE,
                f"integer; default `{c.DEFAULT_PRIORITY_THRESHOLD}`",
                "For the Intelligent policy: jobs with priority at or above it form the high band. "
                "The Queue's value wins over the quota's.", Origin.KOORD_QUEUE),
    _annotation(c.ANNOTATION_MAX_PRIORITY, Where.QUOTA, "integer; default: no bound",
                "The highest priority the quota's jobs are queued with: a job asking more (its priority "
                "annotation or its PriorityClass) is queued at this one, and a Warning event "
                f"`{c.EventReason.PRIORITY_CAPPED.value}` on the job says so. Priority never takes another "
                "quota's min: reclaim ignores the victims' priority (security.md).", Origin.OURS),
    # --- on a Queue ---
    _annotation(c.ANNOTATION_WAIT_FOR_PODS_RUNNING, Where.QUEUE, f'`"{c.TRUE}"`',
                "While a job admitted through this Queue has pods not all running, the Queue admits nothing "
                "more (its waiting jobs say which job it waits for). A job whose pods are not all running "
                "within the controller's timeout (chart: `controller.waitForPodsRunningTimeoutSeconds`) is "
                "suspended, its quota released, and it is queued again after a backoff.", Origin.KOORD_QUEUE),
    _annotation(c.ANNOTATION_ENABLE_PREEMPTION, Where.QUEUE, f'`"{c.TRUE}"`',
                "Lets a pending job preempt lower-priority admitted jobs of the same quota. Honoured only on "
                f"Queues in namespace `{c.SYSTEM_NAMESPACE}` (see security.md).", Origin.KOORD_QUEUE),
    _annotation(c.ANNOTATION_QUEUE_ITEMS_REFRESH_INTERVAL, Where.QUEUE,
                f"Go duration, e.g. `30s`; default `{c.DEFAULT_QUEUE_ITEMS_REFRESH_SECONDS:g}s`",
                "How often `status.queueItemDetails` (pending jobs and their positions) is rewritten.",
                Origin.KOORD_QUEUE),
    _annotation(c.ANNOTATION_MAX_DEPTH, Where.QUEUE, "positive integer, or `-1` for no limit",
                "Only the first N pending jobs of the Queue, in its policy's order, are considered for "
                "admission; the jobs behind them wait, saying so. Also how many `status.queueItemDetails` "
                "lists.", Origin.KOORD_QUEUE),
    _annotation(c.ANNOTATION_QUEUE_ARGS, Where.QUEUE,
                f'YAML map of strings, e.g. `{c.QUEUE_ARG_INITIAL_BACKOFF}: "5"`',
                f"`{c.QUEUE_ARG_INITIAL_BACKOFF}` and `{c.QUEUE_ARG_MAX_BACKOFF}` (seconds) are the backoff "
                "base and cap of the jobs of this Queue sent back after admission (a timeout, a preemption, a "
                "failed admission check), in place of the controller's; other keys are ignored.",
                Origin.KOORD_QUEUE),
    _annotation(c.ANNOTATION_QUOTA_FULL_NAME, Where.QUEUE, "a quota's path in the ElasticQuotaTree, e.g. "
                "`root/team-b/b-1`",
                "This Queue is the quota's own: its jobs that name no queue are queued here (Koord-Queue's "
                "DecoupledQueue). Written on the Queue made for each leaf of the tree, named from the path "
                "(`root-team-b-b-1-` and five characters); a Queue so marked is bound to the path's last quota.",
                Origin.KOORD_QUEUE, "koord-queue"),
    _annotation(c.ANNOTATION_PARENT_QUOTA_NAME, Where.QUEUE, "a quota's name, e.g. `team-b`",
                "The parent of the Queue's quota in the ElasticQuotaTree, as Koord-Queue writes it; not read.",
                Origin.KOORD_QUEUE, "koord-queue"),
    _label(c.LABEL_CREATED_BY_KOORD_QUEUE, Where.QUEUE, "`true`",
           "A Queue made for a quota of the ElasticQuotaTree (by koord-queue or Koord-Queue): removed when its "
           "quota is no longer a leaf of the tree in use.", Origin.KOORD_QUEUE, "koord-queue"),
    _annotation(c.ANNOTATION_DISABLE_SHOW_QUEUE_ITEMS, Where.QUEUE, "any value (its presence counts)",
                "`status.queueItemDetails` is no longer refreshed; what it said last stays. Remove it to refresh "
                "again.", Origin.KOORD_QUEUE),
    *(_annotation(key, Where.QUEUE, 'JSON object of whole units, e.g. `{"cpu":4,"memory":17179869184}`', meaning
                  + " Rounded up to whole units (cores, bytes), keys sorted, as Koord-Queue writes it; a resource "
                  "used before stays at 0. The guaranteed variant is equal (no job is admitted oversold).",
                  Origin.KOORD_QUEUE, "koord-queue")
      for key, meaning in (
          (c.ANNOTATION_QUEUE_USED, "What the Queue's quota and the quotas below it hold."),
          (c.ANNOTATION_QUEUE_GUARANTEED_USED, "What the Queue's quota and the quotas below it hold."),
          (c.ANNOTATION_QUEUE_SELF_USED, "What the jobs charged to the Queue's quota itself hold."),
          (c.ANNOTATION_QUEUE_SELF_GUARANTEED_USED, "What the jobs charged to the Queue's quota itself hold."),
          (c.ANNOTATION_QUEUE_CHILDREN_USED, "What the quotas below the Queue's quota hold."),
          (c.ANNOTATION_QUEUE_CHILDREN_GUARANTEED_USED, "What the quotas below the Queue's quota hold."))),
    _annotation(c.ANNOTATION_HOLD_ROOM_AFTER, Where.QUEUE,
                f"Go duration, e.g. `5m`; `0s`: at once; default `{c.DEFAULT_HOLD_ROOM_AFTER_SECONDS / 60:g}m`",
                "How long a job of this Queue waits before free room under a shared parent quota is held for "
                "it against borrowing jobs of its own priority (jobs of lower priority are kept out at once). "
                f"See policies.md, held room. Honoured only on Queues in namespace `{c.SYSTEM_NAMESPACE}`.",
                Origin.OURS),
    _annotation(c.ANNOTATION_NODE_SELECTOR, Where.QUOTA, "`key=value[,key=value]` (node label equality terms)",
                "Makes a leaf quota a flavor of its parent (docs/gpus.md): a job charged to the parent may be "
                "admitted into it, its pods then pinned to nodes with these labels in the write that resumes it. "
                "A selector that is not label equality terms makes the quota unusable (a Warning event says why).",
                Origin.OURS),
    _annotation(c.ANNOTATION_FLAVOR_TOLERATIONS, Where.QUOTA,
                'JSON list of core/v1 Tolerations (`[{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}]`)',
                "On a flavor (a leaf with a node selector), as Kueue's ResourceFlavor tolerations: added to the pods "
                "of the jobs admitted into it in the write that pins them to its nodes (and taken off when they are "
                "suspended), and counted by placement-aware admission against the nodes' taints. A list that is "
                "not Tolerations makes the quota unusable (a Warning event says why); on a quota that is no flavor "
                "it is ignored, with a warning.", Origin.OURS),
    _annotation(c.ANNOTATION_FLAVOR_ORDER, Where.QUOTA, "child quota names, comma-separated; default: by name",
                "On a parent with flavors: the order its flavors are tried in. Names that are no flavor of it are "
                "ignored, and a Warning event says so.", Origin.OURS),
    _annotation(c.ANNOTATION_FLAVOR_FUNGIBILITY, Where.QUOTA,
                f"`{c.FUNGIBILITY_WHEN_CAN_BORROW}={c.FUNGIBILITY_BORROW}|{c.FUNGIBILITY_TRY_NEXT},"
                f"{c.FUNGIBILITY_WHEN_CAN_PREEMPT}={c.FUNGIBILITY_PREEMPT}|{c.FUNGIBILITY_TRY_NEXT}`; default "
                f"`{c.FUNGIBILITY_BORROW}`, `{c.FUNGIBILITY_TRY_NEXT}`",
                "On a parent with flavors, as Kueue's FlavorFungibility: whether a job borrows in a flavor before "
                "trying the next one, and whether it preempts in a flavor before trying the next one.",
                Origin.OURS),
    _annotation(c.ANNOTATION_NODE_FIT, Where.QUOTA_OR_QUEUE, f'`"{c.FALSE}"` to admit on quota alone; default on',
                "When nodes are known, a job is admitted only when all its pods fit on the nodes now (their "
                "requests, nodeSelector, required node affinity and tolerations; cordoned nodes skipped), and its "
                "message says what the nodes lack. The Queue's value wins over the quota's; on a Queue it is "
                f"honoured only in namespace `{c.SYSTEM_NAMESPACE}`.", Origin.OURS),
    _annotation(c.ANNOTATION_FAIR_SHARING, Where.QUOTA,
                f"`{c.FAIR_SHARING_USAGE_HISTORY}` or `{c.FAIR_SHARING_NONE}`; default: the chart's "
                "`controller.fairSharing` (`none`)",
                "On a parent quota: how its children share the capacity past their mins. "
                f"`{c.FAIR_SHARING_USAGE_HISTORY}`: by shared weight over decayed past usage, so that a child "
                "that used much lately gets less of the spare capacity, is reclaimed from first and takes its "
                "turn later; min stays guaranteed. Not used beside koord-scheduler. See fairness.md.", Origin.OURS),
    _annotation(c.ANNOTATION_USAGE_HALF_LIFE, Where.QUOTA, "duration, e.g. `168h` (1m to a year); default the "
                "chart's `controller.usageHalfLifeSeconds` (168h)",
                "On a parent quota sharing by usage history: after this long, past usage counts half.", Origin.OURS),
    _annotation(c.ANNOTATION_BUDGET, Where.QUOTA, '`resource=AMOUNT/WINDOW[;exempt-min]`, comma-separated, e.g. '
                '`"nvidia.com/gpu=2000h/720h"`',
                "At most AMOUNT (resource times hours) used in any WINDOW: a job that would take the quota past "
                "it within the window, counting its expected runtime, waits, told when the budget frees up. "
                f"`;{c.BUDGET_EXEMPT_MIN}`: a job that keeps the quota within min is not held to it. "
                "See fairness.md.", Origin.OURS),
    # --- on a job ---
    _label(c.LABEL_QUOTA_NAME, Where.JOB, "a quota's name",
           "The quota the job is charged to. On a Queue: the quota the Queue is bound to.", Origin.KOORDINATOR),
    _label(c.LABEL_ASI_QUOTA_NAME, Where.JOB, "a quota's name",
           f"Read when `{c.LABEL_QUOTA_NAME}` is absent or empty: the quota the job is charged to.",
           Origin.KOORD_QUEUE),
    _annotation(c.ANNOTATION_QUEUE, Where.JOB, "a Queue's name",
                "The Queue the job waits in; a quota's own Queue bears the quota's name.", Origin.KOORD_QUEUE),
    _annotation(c.ANNOTATION_PRIORITY, Where.JOB, 'integer, e.g. `"10"`',
                "The job's priority in its queue; overrides the PriorityClass of its pods.", Origin.KOORD_QUEUE),
    _label(c.LABEL_PREEMPTIBLE, Where.JOB, f'`"{c.FALSE}"`',
           "The job is never chosen as a victim of reclaim or priority preemption, and so is admitted "
           "only within min: its quota's (and each parent's) non-preemptible usage stays within min, as "
           "Koord-Queue's UsedOverMinWithOverSell.", Origin.KOORDINATOR),
    _annotation(c.ANNOTATION_ARGO_MIN_RESOURCES, Where.JOB, 'a ResourceList, JSON or YAML, e.g. `{"cpu": "4"}`',
                "What an Argo Workflow asks of its quota (its steps are made as it runs, so its "
                "templates cannot say): absent, nothing.", Origin.KOORD_QUEUE),
    _annotation(c.ANNOTATION_SUSPEND, Where.JOB, f'`"{c.TRUE}"` while queued',
                "Set when the job is created (by the admission webhook) and removed when it is admitted; "
                "kinds with a native suspend field (`spec.suspend`, `spec.runPolicy.suspend`) get that set too, "
                "and for them the field alone says whether the job is suspended (their operators read only it): "
                "a job not admitted whose field is set to false is suspended again, with a `Suspended` event.",
                Origin.KOORD_QUEUE, "koord-queue"),
    _annotation(c.ANNOTATION_ACTIVE, Where.JOB, f'`"{c.FALSE}"` or `"{c.TRUE}"` (also Go\'s `0`/`1`/`f`/`t`...)',
                "False: the job is not admitted (it stays queued, its message saying it is inactive); if it runs, "
                "it is suspended and its quota released. Copied to its QueueUnit's `spec.active`; absent, the "
                "unit's own `spec.active` stands (false once the job ran past its maximum execution time).",
                Origin.KOORD_QUEUE),
    _annotation(c.ANNOTATION_EXPECTED_RUNTIME, Where.JOB, "duration (`90s`, `45m`, `2h`)",
                "How long the job is expected to run, for the start-time forecast of the jobs behind it "
                "(`koord-queue explain`, docs/forecast.md), and what a quota's `koord-queue/budget` counts it "
                "for (else its maximum execution time, else an hour; docs/fairness.md). A bad value is ignored "
                "with a message; `max-exec-time-seconds` bounds it.", Origin.OURS),
    _annotation(c.ANNOTATION_MAX_EXEC_TIME_SECONDS, Where.JOB, "positive integer (seconds)",
                "How long the job's pods may run, summed over its admissions (a preempted job keeps what it ran, "
                "in its unit's `status.accumulatedPastExecutionTimeSeconds`). Past it, the job is suspended, its "
                "quota released, and its unit made inactive (`spec.active: false`): nothing is deleted.",
                Origin.KOORD_QUEUE),
    _annotation(c.ANNOTATION_JOB_HAS_ENQUEUED, Where.JOB, f'`"{c.TRUE}"`',
                "The job is queued (set when it is created, or when its QueueUnit is).", Origin.KOORD_QUEUE,
                "koord-queue"),
    _annotation(c.ANNOTATION_JOB_ENQUEUE_TIMESTAMP, Where.JOB, "Go time, e.g. `2025-01-02 15:04:05.123456 +0000 UTC`",
                "When the job was queued.", Origin.KOORD_QUEUE, "koord-queue"),
    _annotation(c.ANNOTATION_JOB_DEQUEUE_TIMESTAMP, Where.JOB, "Go time, or empty",
                "When the job was last let run (admitted); emptied when it is suspended again.", Origin.KOORD_QUEUE,
                "koord-queue"),
    _annotation(c.ANNOTATION_PLACED, Where.JOB, "JSON: per role, the values replaced",
                "Set when an admission pins the job's pods to the topology domain chosen (nodeSelector entries "
                "on its pod templates) or admits an elastic job with fewer workers (its Worker replicas): "
                "what was there before, put back when the job is suspended again.", Origin.OURS, "koord-queue"),
    _annotation(c.ANNOTATION_REQUIRED_TOPOLOGY, Where.POD_TEMPLATE, "a node label naming a topology level, "
                f"e.g. `{c.LABEL_TOPOLOGY_RACK}`",
                "All the pods of the role (and of the job's other roles asking for the same level) go into one "
                "domain of that level, the tightest that holds them; the job waits until one does.", Origin.KUEUE),
    _annotation(c.ANNOTATION_PREFERRED_TOPOLOGY, Where.POD_TEMPLATE, "a node label naming a topology level",
                "As the required one, but when no domain of the level holds the pods, the levels above it are "
                "tried (zone, block, rack, hostname: the node labels below), then anywhere.", Origin.KUEUE),
    # --- read from nodes ---
    _label(c.LABEL_TOPOLOGY_ZONE, Where.NODE, "the node's zone",
           "The widest topology level by default.", Origin.KUBERNETES, "the cloud provider or you"),
    _label(c.LABEL_TOPOLOGY_BLOCK, Where.NODE, "the node's block (a group of racks)",
           "The second topology level by default.", Origin.OURS),
    _label(c.LABEL_TOPOLOGY_RACK, Where.NODE, "the node's rack",
           "The third topology level by default (then `kubernetes.io/hostname`).", Origin.OURS),
    # --- read from pods and jobs that others write ---
    _label(c.LABEL_LEADER, Where.POD, f'`"{c.TRUE}"`',
           "On the leading controller replica's pod, with the visibility API on: the "
           "`<release>-visibility-server` Service selects it (only the leader knows the queues' order).",
           Origin.KOORD_QUEUE, "the controller"),
    _label(c.LABEL_JOB_NAME, Where.POD, "the job's name",
           "Which PyTorchJob/TFJob/MPIJob a pod belongs to: its running pods are counted in "
           "the QueueUnit's `status.podState`.", Origin.KUBEFLOW, "training operator"),
    _label(c.LABEL_REPLICA_TYPE, Where.POD, "e.g. `master`, `worker`", "The pod's role in its job.",
           Origin.KUBEFLOW, "training operator"),
    _label(c.LABEL_REPLICA_INDEX, Where.POD, "integer", "The pod's index within its role.", Origin.KUBEFLOW,
           "training operator"),
    _label(c.LABEL_JOB_ROLE, Where.POD, f"`{c.JOB_ROLE_MASTER}`", "Marks the master pod of a job.",
           Origin.KUBEFLOW, "training operator"),
    _label(c.LABEL_OPERATOR_NAME, Where.POD, "e.g. `pytorchjob-controller`", "The operator that made the pod.",
           Origin.KUBEFLOW, "training operator"),
    _label(c.LABEL_BATCH_JOB_NAME, Where.POD, "the Job's name", "Which batch Job a pod belongs to.",
           Origin.KUBERNETES, "Job controller"),
    _label(c.LABEL_RAY_CLUSTER, Where.POD, "the RayCluster's name",
           "Which RayCluster a pod belongs to; a RayJob's pods are its cluster's (the RayJob's "
           "`status.rayClusterName`): no label on a pod names the RayJob.", Origin.KUBERAY, "KubeRay"),
    _label(c.LABEL_RAY_ORIGINATED_FROM_CR_NAME, Where.JOB, "the RayJob's name",
           "On the RayCluster KubeRay makes for a RayJob (not on its pods): the RayJob it was made for.",
           Origin.KUBERAY, "KubeRay"),
    _label(c.LABEL_RAY_ORIGINATED_FROM_CRD, Where.JOB, "`RayJob`",
           "On the RayCluster KubeRay makes for a RayJob. Not read: a cluster is left to its RayJob (not "
           "queued itself) by its controller ownerReference, when that RayJob is there with that uid, "
           "names the cluster in its status and asks no less; a label anyone may write proves nothing.",
           Origin.KUBERAY, "KubeRay"),
    _label(c.LABEL_SPARK_APP_NAME, Where.POD, "the SparkApplication's name",
           "Which SparkApplication a driver or executor pod belongs to.", Origin.SPARK, "Spark operator"),
    _label(c.LABEL_SPARK_ROLE, Where.POD, f"`{c.SPARK_ROLE_DRIVER}` or `{c.SPARK_ROLE_EXECUTOR}`",
           "The pod's role in its SparkApplication.", Origin.SPARK, "Spark operator"),
    _label(c.LABEL_ARGO_WORKFLOW, Where.POD, "the Workflow's name", "Which Workflow a step's pod belongs to.",
           Origin.ARGO, "Argo"),
    _label(c.LABEL_MPI_JOB_NAME_V1ALPHA1, Where.POD, "the MPIJob's name",
           "Which MPIJob (the v1alpha1 form) a launcher or worker pod belongs to.", Origin.MPI, "mpi-operator"),
    _label(c.LABEL_MPI_ROLE_V1ALPHA1, Where.POD, "`launcher` or `worker`",
           "The pod's role in its MPIJob (the v1alpha1 form).", Origin.MPI, "mpi-operator"),
    _annotation(c.ANNOTATION_GANG_NAME, Where.POD, "the gang's name",
                "Koordinator's gang: its pods are bound all together or not at all (the embedded "
                "cluster's kubelet honours it).", Origin.KOORDINATOR, "you or the operator"),
    _annotation(c.ANNOTATION_GANG_MIN_AVAILABLE, Where.POD, "integer",
                "How many pods of the gang must be placeable at once.", Origin.KOORDINATOR,
                "you or the operator"),
    # --- workloads queued by a scheduling gate (docs/workloads.md) ---
    _label(c.LABEL_MANAGED_NAMESPACE, Where.NAMESPACE, f'`"{c.TRUE}"`',
           "Every Deployment, StatefulSet, LeaderWorkerSet and plain pod of the namespace is queued: its "
           f"pods are created gated (`{c.SCHEDULING_GATE}`) until their QueueUnit is admitted.", Origin.OURS),
    _label(c.LABEL_KUEUE_QUEUE_NAME, Where.POD, "a Queue's name",
           "Kueue's LocalQueue label: the pod's workload is queued (gated), in our Queue of that name (its "
           "quota's when there is none).", Origin.KUEUE),
    _label(c.LABEL_KUEUE_POD_GROUP_NAME, Where.POD, "a group's name",
           "Kueue's pod group: its pods are one QueueUnit (`<name>-group`), admitted whole.", Origin.KUEUE),
    _annotation(c.ANNOTATION_KUEUE_POD_GROUP_TOTAL_COUNT, Where.POD, "integer, 1 to 10000",
                "How many pods the Kueue pod group has (read as a label too); no more than that are let "
                "through. Absent or not a count: the group is held inactive and told why.", Origin.KUEUE),
    _label(c.LABEL_LWS_NAME, Where.POD, "a LeaderWorkerSet's name",
           "Marks a LeaderWorkerSet's pod (extension.leaderworkerset).", Origin.KUBERNETES, "the LWS controller"),
    _label(c.LABEL_LWS_GROUP_INDEX, Where.POD, "integer",
           "A LeaderWorkerSet's group: its leader and workers are one QueueUnit "
           "(`<name>-<index>-group`), admitted whole.", Origin.KUBERNETES, "the LWS controller"),
    _annotation(c.ANNOTATION_LWS_SIZE, Where.POD, "integer, 1 to 10000",
                "The pods of a LeaderWorkerSet's group (leader included): its unit's size.", Origin.KUBERNETES,
                "the LWS controller"),
    _label(c.LABEL_GATED_POD, Where.POD, f'`"{c.TRUE}"`',
           "The webhook gated this pod: its QueueUnit holds quota for it once admitted. Only the controller "
           "may remove it (or the gate).", Origin.OURS, "Koord-Queue"),
    _label(c.LABEL_POD_GROUP_UNIT, Where.UNIT, f'`"{c.TRUE}"`',
           "The QueueUnit stands for a pod group (made by the controller, placed on nodes whole).",
           Origin.OURS, "Koord-Queue"),
    # --- the embedded control plane's simulation ---
    _annotation(c.ANNOTATION_SIM_DURATION, Where.SIM_JOB, "seconds, e.g. `\"120\"`; absent: forever",
                "How long the simulated pods of the job run on `koord-queue up`.", Origin.OURS),
    _annotation(c.ANNOTATION_SIM_FAIL, Where.SIM_JOB, f'`"{c.TRUE}"`',
                "The job's simulated pods end Failed (exit code 1) on `koord-queue up`.", Origin.OURS),
)

# Constants of constants.py that are labels or annotations but not part of what a user
# writes or reads, and why.
NOT_DOCUMENTED: dict[str, str] = {
    "ANNOTATION_API_APPROVED": "kube-apiserver's, on our ElasticQuota CRD (its group is protected); users never set it",
    "LABEL_HOSTNAME": "Kubernetes' well-known node label; the simulated nodes carry it",
    "LABEL_NAMESPACE_NAME": "Kubernetes' well-known namespace label (its name); the default managed-jobs "
                            "namespace selector reads it",
    "LABEL_OS": "Kubernetes' well-known node label; the simulated nodes carry it",
    "LABEL_ARCH": "Kubernetes' well-known node label; the simulated nodes carry it",
    "LABEL_RAY_NODE_TYPE": "KubeRay's pod label; the simulated KubeRay operator writes it",
    "LABEL_RAY_GROUP": "KubeRay's pod label; the simulated KubeRay operator writes it",
    "LABEL_RAY_IS_RAY_NODE": "KubeRay's pod label; the simulated KubeRay operator writes it",
    "LABEL_CREATED_BY": "Kubernetes' recommended label; the simulated KubeRay operator writes it on pods",
    "LABEL_STATEFUL_SET_POD_NAME": "the StatefulSet controller's; the simulated one writes it on pods",
    "LABEL_POD_INDEX": "the StatefulSet controller's; the simulated one writes it on pods",
    "LABEL_POD_TEMPLATE_HASH": "the Deployment controller's; the simulated one writes it on ReplicaSets and pods",
    "ANNOTATION_DEPLOYMENT_REVISION": "the Deployment controller's; the simulated one writes it on ReplicaSets",
    "ANNOTATION_DESIRED_REPLICAS": "the Deployment controller's; the simulated one writes it on ReplicaSets",
    "ANNOTATION_MAX_REPLICAS": "the Deployment controller's; the simulated one writes it on ReplicaSets",
}


def constant_names() -> list[str]:
    """Every LABEL_* and ANNOTATION_* constant of constants.py."""
    return [name for name in vars(c) if name.startswith(("LABEL_", "ANNOTATION_")) and isinstance(getattr(c, name), str)]


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def markdown() -> str:
    """docs/annotations.md."""
    lines = [
        "# Labels and annotations",
        "",
        "<!-- Generated from src/koordqueue/api/reference.py by scripts/gen_docs.py: do not edit. -->",
        "",
        "Every label and annotation koord-queue reads or writes, in one table. Keys, values and",
        "defaults come from the code (`src/koordqueue/api/constants.py`), and a test fails",
        "when this page and the code disagree. *From* says whose key it is: Koord-Queue's and",
        "Koordinator's keys mean here what they mean there, so existing manifests work unchanged.",
        "",
        "| Key | Kind | On | Values | Meaning | Written by | From |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for k in REFERENCE:
        lines.append(
            f"| `{k.key}` | {k.kind} | {k.where.value} | {_cell(k.values)} | {_cell(k.meaning)} "
            f"| {k.written_by} | {k.origin.value} |"
        )
    lines += [
        "",
        "Phases a QueueUnit shows in `status.phase`: "
        + ", ".join(f"`{p.value}`" for p in c.Phase) + ".",
        f"A unit goes to `{c.Phase.SUCCEED.value}` or `{c.Phase.FAILED.value}`, and its quota is released, when its "
        "job has ended: for a batch Job, as soon as kube-controller-manager says how "
        f"(`{c.BATCH_CONDITION_SUCCESS_CRITERIA_MET}` or `{c.BATCH_CONDITION_FAILURE_TARGET}`, Kubernetes 1.31+), "
        f"before `{c.BATCH_CONDITION_COMPLETE}` or `{c.BATCH_CONDITION_FAILED}`, which it writes a sync later once "
        "the last pods have stopped; those pods still count on their nodes until they are gone. "
        "A Job that ended while suspended (preempted after its pods had finished) is resumed by the controller, "
        f"with a `{c.EventReason.RESUMED.value}` event saying so: kube-controller-manager marks a suspended Job "
        f"`{c.BATCH_CONDITION_COMPLETE}` only once it is resumed, and makes no pod for a Job that has ended.",
        "An admitted job edited to ask for more (more replicas, a batch Job's parallelism, a Ray worker group) is "
        "charged no more than it was admitted with: it is suspended, its quota released, and its unit queued again "
        f"at its new size (`{c.Phase.ENQUEUED.value}`, after a back-off), with a `{c.EventReason.SUSPENDED.value}` "
        "event saying what grew, as Kueue stops a job that no longer matches its Workload. One edited to ask for "
        "less runs on: fewer pods are charged less at once, but each pod at least what it was admitted with (its "
        "running pods keep that) until the job is queued again or ends.",
        "Queue policies: " + ", ".join(f"`{p.value}`" for p in c.QueuePolicy) + ".",
        "Admission check states: " + ", ".join(f"`{s.value}`" for s in c.AdmissionCheckState) + ".",
        "Event reasons: " + ", ".join(f"`{r.value}`" for r in c.EventReason) + ".",
        "",
    ]
    return "\n".join(lines)
