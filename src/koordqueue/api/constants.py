"""Every string of the API, defined once.

Annotations, labels, phases, reasons, group/versions and kinds that the rest of the
code uses. Nobody types one of these literally anywhere else: import it from here.
"""

from __future__ import annotations

from enum import StrEnum

# --- API groups and versions -------------------------------------------------------
QUOTA_GROUP = "scheduling.sigs.k8s.io"
QUOTA_VERSION = "v1alpha1"
QUOTA_API_VERSION = f"{QUOTA_GROUP}/{QUOTA_VERSION}"
ELASTIC_QUOTA_KIND = "ElasticQuota"
ELASTIC_QUOTA_PLURAL = "elasticquotas"
ELASTIC_QUOTA_SHORT_NAMES = ("eq",)
# Koord-Queue's other way to write quotas: the whole tree in one object, read only in
# kube-system (Koord-Queue's constant, not the chart's namespace). Its root is always
# named "root", as Koord-Queue renames it.
QUOTA_TREE_VERSION = "v1beta1"
QUOTA_TREE_API_VERSION = f"{QUOTA_GROUP}/{QUOTA_TREE_VERSION}"
ELASTIC_QUOTA_TREE_KIND = "ElasticQuotaTree"
ELASTIC_QUOTA_TREE_PLURAL = "elasticquotatrees"
ELASTIC_QUOTA_TREE_SHORT_NAMES = ("eqtree",)
QUOTA_TREE_NAMESPACE = "kube-system"
QUOTA_TREE_ROOT = "root"
# The Queue of a tree's leaf, as Koord-Queue's ElasticQuota plugin makes it: generateName
# from the quota's path (tree_queue_prefix), this label, and the two annotations below (its
# DecoupledQueue feature finds a unit's Queue by the full name).
LABEL_CREATED_BY_KOORD_QUEUE = "create-by-koordqueue"
ANNOTATION_QUOTA_FULL_NAME = "koord-queue/quota-fullname"  # "root/team-b/b-1"
ANNOTATION_PARENT_QUOTA_NAME = "koord-queue/parent-quota-fullname"  # the parent's name ("team-b")
TREE_QUEUE_PREFIX_MAX = 58  # a generateName's prefix is cut from the front to this many characters
QUOTA_TREE_CONDITION_VALID = "Valid"
# Node attributes Koord-Queue reads that we do not (said in a warning on the tree).
TREE_ATTRIBUTE_PREEMPT_POLICY = "preempt-policy"
TREE_ATTRIBUTE_LEND_LIMIT = "alibabacloud.com/lendlimit"

QUEUE_GROUP = "scheduling.x-k8s.io"
QUEUE_VERSION = "v1alpha1"
QUEUE_API_VERSION = f"{QUEUE_GROUP}/{QUEUE_VERSION}"
QUEUE_KIND = "Queue"
QUEUE_PLURAL = "queues"
QUEUE_UNIT_KIND = "QueueUnit"
QUEUE_UNIT_PLURAL = "queueunits"
QUEUE_UNIT_SHORT_NAMES = ("qu",)

# The visibility API the controller serves through the aggregation layer (as Koord-Queue's):
# GET /apis/VISIBILITY_GROUP/VISIBILITY_VERSION/queues/NAME/queueunits (and elasticquotas/NAME/...).
VISIBILITY_GROUP = "visibility.koord-queue.x-k8s.io"
VISIBILITY_VERSION = "v1alpha1"
VISIBILITY_API_VERSION = f"{VISIBILITY_GROUP}/{VISIBILITY_VERSION}"
VISIBILITY_SUBRESOURCE = "queueunits"
VISIBILITY_SUMMARY_KIND = "QueueUnitsSummary"
VISIBILITY_APISERVICE = f"{VISIBILITY_VERSION}.{VISIBILITY_GROUP}"  # the APIService's name
# Koord-Queue's HTTP API (its --enableApiHandler: gin on port 19876, read-only JSON): the
# queues' and user quotas' debug info, and its quota plugins' handlers (controller/koordapi.py).
KOORD_API_PORT = 19876
KOORD_API_PREFIX = "/apis/v1"
KOORD_API_QUEUE = f"{KOORD_API_PREFIX}/queue"
KOORD_API_USER_QUOTA = f"{KOORD_API_PREFIX}/userquota"
KOORD_API_QUOTA_TREE = f"{KOORD_API_PREFIX}/elasticquotatree"  # its ElasticQuota (tree) plugin
KOORD_API_ELASTIC_QUOTA = f"{KOORD_API_PREFIX}/elasticquota"  # its ElasticQuotaV2 plugin
# Where kube-apiserver publishes who may call an aggregated API, and how it names the user.
REQUESTHEADER_CONFIG_MAP = "extension-apiserver-authentication"
REQUESTHEADER_NAMESPACE = "kube-system"
# Koord-Queue's label on the leader's pod: its visibility Service selects it (only the leader
# holds the queues' order).
LABEL_LEADER = "koord-queue-leader"

KUBEFLOW_GROUP = "kubeflow.org"
KUBEFLOW_API_VERSION = "kubeflow.org/v1"
PYTORCH_JOB_KIND = "PyTorchJob"
TF_JOB_KIND = "TFJob"
MPI_JOB_KIND = "MPIJob"
BATCH_API_VERSION = "batch/v1"
BATCH_JOB_KIND = "Job"
RAY_API_VERSION = "ray.io/v1"
RAY_JOB_KIND = "RayJob"
RAY_CLUSTER_KIND = "RayCluster"
MPI_V1ALPHA1_API_VERSION = "kubeflow.org/v1alpha1"  # the mpi-operator's MPIJob: spec.replicas + spec.template
SPARK_GROUP = "sparkoperator.k8s.io"
SPARK_API_VERSION = f"{SPARK_GROUP}/v1beta2"
SPARK_APPLICATION_KIND = "SparkApplication"
ARGO_GROUP = "argoproj.io"
ARGO_API_VERSION = f"{ARGO_GROUP}/v1alpha1"
ARGO_WORKFLOW_KIND = "Workflow"

# A streaming list's end (KEP-3157, watch with sendInitialEvents): the BOOKMARK after the
# initial ADDED events carries this annotation, "true".
INITIAL_EVENTS_END_ANNOTATION = "k8s.io/initial-events-end"

SCHEDULING_API_VERSION = "scheduling.k8s.io/v1"
PRIORITY_CLASS_KIND = "PriorityClass"

# Dynamic Resource Allocation (resource.k8s.io/v1, Kubernetes 1.34 and later; api/dra.py).
DRA_GROUP = "resource.k8s.io"
DRA_VERSION = "v1"
RESOURCE_CLAIM_KIND = "ResourceClaim"
RESOURCE_CLAIM_PLURAL = "resourceclaims"
RESOURCE_CLAIM_TEMPLATE_KIND = "ResourceClaimTemplate"
RESOURCE_CLAIM_TEMPLATE_PLURAL = "resourceclaimtemplates"
RESOURCE_SLICE_KIND = "ResourceSlice"
RESOURCE_SLICE_PLURAL = "resourceslices"
DEVICE_CLASS_KIND = "DeviceClass"
DEVICE_CLASS_PLURAL = "deviceclasses"

# The namespace that holds the Queues created for ElasticQuotas.
SYSTEM_NAMESPACE = "koord-queue"
AUTO_QUEUE_PRIORITY = 1000

# --- ElasticQuota labels and annotations --------------------------------------------
LABEL_QUEUE_POLICY = "koord-queue/queue-policy"
LABEL_QUOTA_PARENT = "quota.scheduling.koordinator.sh/parent"
LABEL_QUOTA_IS_PARENT = "quota.scheduling.koordinator.sh/is-parent"
# Koordinator's quota tree a quota belongs to: a child's must be its parent's (koord-manager
# fills it in from the parent when a quota is created without one).
LABEL_QUOTA_TREE_ID = "quota.scheduling.koordinator.sh/tree-id"
LABEL_ALLOW_LENT_RESOURCE = "quota.scheduling.koordinator.sh/allow-lent-resource"
# The quotas Koordinator makes for itself (koord-scheduler creates them at start). Its root
# is the tree's root: a quota whose parent label names it is a child of the root, as one
# without the label (koord-manager's webhook writes that name into an empty parent label).
# Its system and default quotas are for the pods of no team (unlimited): no Queue of ours.
KOORDINATOR_ROOT_QUOTA = "koordinator-root-quota"
KOORDINATOR_SYSTEM_QUOTA = "koordinator-system-quota"
KOORDINATOR_DEFAULT_QUOTA = "koordinator-default-quota"
KOORDINATOR_QUOTAS = frozenset({KOORDINATOR_ROOT_QUOTA, KOORDINATOR_SYSTEM_QUOTA, KOORDINATOR_DEFAULT_QUOTA})


class KoordinatorMode(StrEnum):
    """Whether jobs are admitted for koord-scheduler (--koordinator, the chart's koordinator.mode):
    their pod templates marked with the quota and a gang (jobs/placement.py)."""

    AUTO = "auto"  # on once Koordinator's own quotas are seen (koord-scheduler makes them)
    ON = "on"
    OFF = "off"
# kube-apiserver refuses a CRD whose group is k8s.io's or kubernetes.io's (or under them)
# without this annotation (KEP-1111). ElasticQuota's group is one: its upstream CRD
# (scheduler-plugins, which Koordinator installs too) names the PR that approved it.
ANNOTATION_API_APPROVED = "api-approved.kubernetes.io"
ELASTIC_QUOTA_API_APPROVAL = "https://github.com/kubernetes-sigs/scheduler-plugins/pull/52"
ANNOTATION_SHARED_WEIGHT = "quota.scheduling.koordinator.sh/shared-weight"
ANNOTATION_QUOTA_NAMESPACES = "quota.scheduling.koordinator.sh/namespaces"
ANNOTATION_PRIORITY_THRESHOLD = "koord-queue/priority-threshold"
# The highest priority a job charged to the quota is queued with (ours): a job asking more
# (annotation or PriorityClass) is queued at this one, and told so (PriorityCapped).
ANNOTATION_MAX_PRIORITY = "koord-queue/max-priority"
# GPU models as flavors (docs/gpus.md): a leaf ElasticQuota carrying a node selector
# (equality terms, "key=value[,key=value]") is a flavor of its parent; a job charged to the
# parent is admitted into the first flavor, in the parent's flavor order (child names,
# comma-separated; default: by name), where it fits, its pods pinned to the flavor's nodes.
ANNOTATION_NODE_SELECTOR = "koord-queue/node-selector"
ANNOTATION_FLAVOR_ORDER = "koord-queue/flavor-order"
# On a flavor, as Kueue's ResourceFlavor.spec.tolerations: a JSON list of core/v1
# Tolerations added to the pods of the jobs admitted into it, in the write that pins them.
ANNOTATION_FLAVOR_TOLERATIONS = "koord-queue/tolerations"
# Kueue's FlavorFungibility on the parent: "whenCanBorrow=Borrow|TryNextFlavor,
# whenCanPreempt=Preempt|TryNextFlavor" (defaults: Borrow, TryNextFlavor, as Kueue's).
ANNOTATION_FLAVOR_FUNGIBILITY = "koord-queue/flavor-fungibility"
FUNGIBILITY_WHEN_CAN_BORROW = "whenCanBorrow"
FUNGIBILITY_WHEN_CAN_PREEMPT = "whenCanPreempt"
FUNGIBILITY_BORROW = "Borrow"
FUNGIBILITY_PREEMPT = "Preempt"
FUNGIBILITY_TRY_NEXT = "TryNextFlavor"
# The level a flavor's node selector is given under in an admission's placement (beside
# the topology domains): the unit's status names it, and the resuming write pins the pods.
FLAVOR_LEVEL = "flavor"
DEFAULT_PRIORITY_THRESHOLD = 4

# --- Labels and annotations on jobs (and Queues) ------------------------------------
LABEL_QUOTA_NAME = "quota.scheduling.koordinator.sh/name"
# Koord-Queue's fallback for the quota label (ASI clusters): read when the label above is
# absent or empty, on jobs only.
LABEL_ASI_QUOTA_NAME = "alibabacloud.com/quota-name"
LABEL_PREEMPTIBLE = "quota.scheduling.koordinator.sh/preemptible"
ANNOTATION_SUSPEND = "scheduling.x-k8s.io/suspend"
ANNOTATION_QUEUE = "scheduling.x-k8s.io/queue"
ANNOTATION_PRIORITY = "scheduling.x-k8s.io/priority"
# Koord-Queue v1.8's spec.active and spec.maximumExecutionTimeSeconds of a job's QueueUnit,
# set from the job: "false" (Go's strconv.ParseBool spellings) keeps the job out of admission
# and suspends it if running; a positive int32 bounds the seconds its pods may run, summed
# over its admissions.
ANNOTATION_ACTIVE = "scheduling.x-k8s.io/active"
ANNOTATION_MAX_EXEC_TIME_SECONDS = "scheduling.x-k8s.io/max-exec-time-seconds"
# Written on a job as Koord-Queue's job extensions write them: "true" and the time once it is
# queued, the time it is let run (emptied when it is suspended again). Times in Go's
# time.Time.String() layout, in UTC, which Koord-Queue's own reader (this layout) parses.
ANNOTATION_JOB_HAS_ENQUEUED = "koord-queue/job-has-enqueued"
ANNOTATION_JOB_ENQUEUE_TIMESTAMP = "koord-queue/job-enqueue-timestamp"
ANNOTATION_JOB_DEQUEUE_TIMESTAMP = "koord-queue/job-dequeue-timestamp"

# --- Queue annotations ------------------------------------------------------------
ANNOTATION_QUEUE_ITEMS_REFRESH_INTERVAL = "koord-queue/queue-items-refresh-interval"
ANNOTATION_WAIT_FOR_PODS_RUNNING = "koord-queue/wait-for-pods-running"
ANNOTATION_ENABLE_PREEMPTION = "koord-queue/enable-queueunit-preemption"
ANNOTATION_MAX_DEPTH = "koord-queue/max-depth"
# Koord-Queue's back-off arguments of a Queue: a YAML map of strings, read here for the
# two keys below (seconds), which stand for our back-off base and cap on that Queue.
ANNOTATION_QUEUE_ARGS = "koord-queue/queue-args"
QUEUE_ARG_INITIAL_BACKOFF = "podInitialBackoffSeconds"
QUEUE_ARG_MAX_BACKOFF = "podMaxBackoffSeconds"
# Present (any value): status.queueItemDetails is no longer refreshed (what it says stays).
ANNOTATION_DISABLE_SHOW_QUEUE_ITEMS = "koord-queue/disable-show-queue-items"
# What a Queue's quota holds, written on the Queue as Koord-Queue writes them: JSON objects
# of whole units (cpu cores, memory bytes, rounded up), keys sorted. Used: the quota and its
# descendants; self: units charged to the quota itself; children: to its descendants. The
# guaranteed variants leave out units admitted oversold (Koord-Queue: never, unless a unit
# carries its oversold-type annotation; ours: none), so they equal the others.
QUEUE_USAGE_PREFIX = "alibabacloud.com/queue-"  # the six below
ANNOTATION_QUEUE_USED = "alibabacloud.com/queue-used"
ANNOTATION_QUEUE_SELF_USED = "alibabacloud.com/queue-self-used"
ANNOTATION_QUEUE_CHILDREN_USED = "alibabacloud.com/queue-children-used"
ANNOTATION_QUEUE_GUARANTEED_USED = "alibabacloud.com/queue-guaranteed-used"
ANNOTATION_QUEUE_SELF_GUARANTEED_USED = "alibabacloud.com/queue-self-guaranteed-used"
ANNOTATION_QUEUE_CHILDREN_GUARANTEED_USED = "alibabacloud.com/queue-children-guaranteed-used"
DEFAULT_QUEUE_ITEMS_REFRESH_SECONDS = 15.0
# How long a unit waits before free room under a shared parent is held for it against
# borrowing units of its own priority (units of lower priority are kept out at once).
ANNOTATION_HOLD_ROOM_AFTER = "koord-queue/hold-room-after"
DEFAULT_HOLD_ROOM_AFTER_SECONDS = 600.0

# --- Placement: node fit and topology domains ---------------------------------------
# On an ElasticQuota or a Queue (the Queue's wins): "false" admits on quota alone, as
# Koord-Queue does; anything else (or absent) checks that a unit's pods fit on the nodes.
ANNOTATION_NODE_FIT = "koord-queue/node-fit"
# Fairness over weeks (docs/fairness.md). On a parent ElasticQuota (or any quota, for
# the root's children: the cluster default is the chart's ``fairSharing``): how its
# children share the spare capacity past their mins: "usage-history" by weight over
# decayed past usage, "none" by weight alone (Koordinator's rule).
ANNOTATION_FAIR_SHARING = "koord-queue/fair-sharing"
FAIR_SHARING_USAGE_HISTORY = "usage-history"
FAIR_SHARING_NONE = "none"
ANNOTATION_USAGE_HALF_LIFE = "koord-queue/usage-half-life"  # e.g. "168h": how fast past usage fades
DEFAULT_USAGE_HALF_LIFE_SECONDS = 168 * 3600.0
# On any ElasticQuota: resource-hours per window, e.g. "nvidia.com/gpu=2000h/720h" (several
# comma-separated; ";exempt-min" after one: what fits within min is not held to it).
ANNOTATION_BUDGET = "koord-queue/budget"
BUDGET_EXEMPT_MIN = "exempt-min"
# Kueue's annotations on a pod template, so users' manifests carry over: the pods of the
# pod set go into one domain of the level this node label names (required), or as close
# as the nodes allow, level by level upwards (preferred).
ANNOTATION_REQUIRED_TOPOLOGY = "kueue.x-k8s.io/podset-required-topology"
ANNOTATION_PREFERRED_TOPOLOGY = "kueue.x-k8s.io/podset-preferred-topology"
# On a job we changed at admission (pods pinned to a domain, an elastic role's replicas
# set to the count admitted): per role, the values we replaced (JSON), put back when the
# job is suspended again. The job's QueueUnit is made from those, as the user wrote them.
ANNOTATION_PLACED = "koord-queue/placed"
# Koordinator's gang of pods (koord-scheduler's Coscheduling: all of them placed, or none),
# written on the pod templates of a job admitted beside Koordinator (jobs/placement.py).
ANNOTATION_GANG_NAME = "gang.scheduling.koordinator.sh/name"
ANNOTATION_GANG_MIN_AVAILABLE = "gang.scheduling.koordinator.sh/min-available"
LABEL_TOPOLOGY_ZONE = "topology.kubernetes.io/zone"
LABEL_TOPOLOGY_BLOCK = "topology.koord-queue.io/block"
LABEL_TOPOLOGY_RACK = "topology.koord-queue.io/rack"
# The levels of topology, widest first, when the controller or the trace names none.
DEFAULT_TOPOLOGY_LEVELS = (LABEL_TOPOLOGY_ZONE, LABEL_TOPOLOGY_BLOCK, LABEL_TOPOLOGY_RACK, "kubernetes.io/hostname")
TAINT_NO_SCHEDULE = "NoSchedule"
TAINT_PREFER_NO_SCHEDULE = "PreferNoSchedule"
TAINT_NO_EXECUTE = "NoExecute"
TAINT_UNSCHEDULABLE = "node.kubernetes.io/unschedulable"  # what a cordoned node is tainted with
TOLERATION_EXISTS = "Exists"
TOLERATION_EQUAL = "Equal"

# --- Simulated cluster (embedded control plane) -----------------------------------
ANNOTATION_SIM_DURATION = "koord-queue.sim/duration"  # seconds a simulated pod runs
LABEL_JOB_NAME = "training.kubeflow.org/job-name"
LABEL_REPLICA_TYPE = "training.kubeflow.org/replica-type"
LABEL_REPLICA_INDEX = "training.kubeflow.org/replica-index"
ANNOTATION_SIM_FAIL = "koord-queue.sim/fail"  # "true": simulated pods end Failed (exit code 1)
LABEL_OPERATOR_NAME = "training.kubeflow.org/operator-name"  # "<kind lower>-controller"
LABEL_JOB_ROLE = "training.kubeflow.org/job-role"
JOB_ROLE_MASTER = "master"
OPERATOR_NAME_SUFFIX = "-controller"
# What the training operator (v1.9.2) puts in the pods and Services of its jobs, as the
# simulated one does (simcluster/training.py): default containers and ports, the env.
PYTORCH_CONTAINER = "pytorch"
PYTORCH_PORT_NAME = "pytorchjob-port"
PYTORCH_DEFAULT_PORT = 23456
TF_CONTAINER = "tensorflow"
TF_PORT_NAME = "tfjob-port"
TF_DEFAULT_PORT = 2222
MPI_CONTAINER = "mpi"
REPLICA_MASTER = "Master"
REPLICA_WORKER = "Worker"
REPLICA_CHIEF = "Chief"
REPLICA_PS = "PS"
REPLICA_EVALUATOR = "Evaluator"
REPLICA_LAUNCHER = "Launcher"
ENV_PYTHONUNBUFFERED = "PYTHONUNBUFFERED"
ENV_MASTER_PORT = "MASTER_PORT"
ENV_PET_MASTER_PORT = "PET_MASTER_PORT"
ENV_MASTER_ADDR = "MASTER_ADDR"
ENV_PET_MASTER_ADDR = "PET_MASTER_ADDR"
ENV_WORLD_SIZE = "WORLD_SIZE"
ENV_RANK = "RANK"
ENV_PET_NODE_RANK = "PET_NODE_RANK"
ENV_PET_NPROC_PER_NODE = "PET_NPROC_PER_NODE"
ENV_PET_NNODES = "PET_NNODES"
ENV_PET_RDZV_ENDPOINT = "PET_RDZV_ENDPOINT"
ENV_PET_RDZV_BACKEND = "PET_RDZV_BACKEND"
ENV_PET_MAX_RESTARTS = "PET_MAX_RESTARTS"
ENV_PET_RDZV_ID = "PET_RDZV_ID"
ENV_PET_RDZV_CONF = "PET_RDZV_CONF"
ENV_PET_STANDALONE = "PET_STANDALONE"
ENV_TF_CONFIG = "TF_CONFIG"
ENV_OMPI_RSH_AGENT = "OMPI_MCA_plm_rsh_agent"
ENV_OMPI_HOSTFILE = "OMPI_MCA_orte_default_hostfile"
ENV_NVIDIA_VISIBLE_DEVICES = "NVIDIA_VISIBLE_DEVICES"
ENV_NVIDIA_DRIVER_CAPABILITIES = "NVIDIA_DRIVER_CAPABILITIES"
ENV_I_MPI_HYDRA_BOOTSTRAP = "I_MPI_HYDRA_BOOTSTRAP"
ENV_I_MPI_HYDRA_BOOTSTRAP_EXEC = "I_MPI_HYDRA_BOOTSTRAP_EXEC"
PYTORCH_DEFAULT_NPROC_PER_NODE = "auto"
PYTORCH_DEFAULT_RDZV_BACKEND = "c10d"
PYTORCH_INIT_CONTAINER = "init-pytorch"  # a worker's: waits until the master's name resolves
PYTORCH_INIT_IMAGE = "alpine:3.10"
PYTORCH_INIT_MAX_TRIES = 100
MPI_CONFIG_MOUNT = "/etc/mpi"  # where an MPIJob's launcher finds kubexec.sh and its hostfile
MPI_DEFAULT_BOOTSTRAP = "rsh"
MPI_KUBEXEC = "kubexec.sh"
MPI_HOSTFILE = "hostfile"
MPI_WORKER_COMMAND = ("sleep", "365d")  # a worker with no command of its own waits for the launcher's rsh
TF_ENVIRONMENT = "cloud"  # TF_CONFIG's environment
IMAGE_PULL_IF_NOT_PRESENT = "IfNotPresent"
# Koordinator's gang annotations: pods of one gang are bound all together or not at all.
ANNOTATION_GANG_NAME = "gang.scheduling.koordinator.sh/name"
ANNOTATION_GANG_MIN_AVAILABLE = "gang.scheduling.koordinator.sh/min-available"
# REST plurals of the kinds the simulated cluster works on.
PODS_PLURAL = "pods"
SERVICES_PLURAL = "services"
NODES_PLURAL = "nodes"
PYTORCH_JOB_PLURAL = "pytorchjobs"
TF_JOB_PLURAL = "tfjobs"
MPI_JOB_PLURAL = "mpijobs"
BATCH_JOB_PLURAL = "jobs"
CORE_API_VERSION = "v1"
POD_KIND = "Pod"
SERVICE_KIND = "Service"
NODE_KIND = "Node"
BINDING_KIND = "Binding"
# Pod phases, pod and node condition types, and the reasons the simulated cluster writes.
POD_PENDING = "Pending"
POD_RUNNING = "Running"
POD_SUCCEEDED = "Succeeded"
POD_FAILED = "Failed"
POD_CONDITION_SCHEDULED = "PodScheduled"
POD_CONDITION_INITIALIZED = "Initialized"
POD_CONDITION_CONTAINERS_READY = "ContainersReady"
POD_CONDITION_READY = "Ready"
POD_REASON_UNSCHEDULABLE = "Unschedulable"
POD_REASON_COMPLETED = "PodCompleted"
POD_REASON_FAILED = "PodFailed"
# kube-apiserver's condition of a pod created with scheduling gates (pkg/registry/core/pod strategy).
POD_REASON_SCHEDULING_GATED = "SchedulingGated"
POD_MESSAGE_SCHEDULING_GATED = "Scheduling is blocked due to non-empty scheduling gates"
POD_QOS_GUARANTEED = "Guaranteed"
POD_QOS_BURSTABLE = "Burstable"
POD_QOS_BEST_EFFORT = "BestEffort"
NODE_ADDRESS_INTERNAL_IP = "InternalIP"
NODE_ADDRESS_HOSTNAME = "Hostname"
CONTAINER_REASON_COMPLETED = "Completed"
CONTAINER_REASON_ERROR = "Error"
NODE_CONDITION_READY = "Ready"
NODE_CONDITION_PRESSURES = ("MemoryPressure", "DiskPressure", "PIDPressure")
NODE_REASON_READY = "KubeletReady"
LABEL_HOSTNAME = "kubernetes.io/hostname"
LABEL_OS = "kubernetes.io/os"
LABEL_ARCH = "kubernetes.io/arch"
CONDITION_FALSE = "False"
RESTART_POLICY_NEVER = "Never"
RESTART_POLICY_ON_FAILURE = "OnFailure"
RESTART_POLICY_EXIT_CODE = "ExitCode"  # kubeflow only; its pods get Never
CLEAN_POD_POLICY_ALL = "All"
CLEAN_POD_POLICY_RUNNING = "Running"
# kubeflow.org/v1 condition reasons are "<Kind><Reason>" (PyTorchJobRunning, ...).
KUBEFLOW_REASON_CREATED = "Created"
KUBEFLOW_REASON_RUNNING = "Running"
KUBEFLOW_REASON_SUCCEEDED = "Succeeded"
KUBEFLOW_REASON_FAILED = "Failed"
KUBEFLOW_REASON_FAILED_VALIDATION = "FailedValidation"
KUBEFLOW_REASON_SUSPENDED = "Suspended"
KUBEFLOW_REASON_RESUMED = "Resumed"
# batch/v1 Job conditions and reasons, as the Job controller writes them.
BATCH_CONDITION_SUSPENDED = "Suspended"
BATCH_REASON_SUSPENDED = "JobSuspended"
BATCH_REASON_RESUMED = "JobResumed"
BATCH_REASON_COMPLETED = "CompletionsReached"
BATCH_REASON_BACKOFF_LIMIT = "BackoffLimitExceeded"
# Event reasons of the simulated operator and scheduler (as the real ones word them).
EVENT_SUCCESSFUL_CREATE_POD = "SuccessfulCreatePod"
EVENT_SUCCESSFUL_DELETE_POD = "SuccessfulDeletePod"
EVENT_SUCCESSFUL_CREATE_SERVICE = "SuccessfulCreateService"
EVENT_SUCCESSFUL_DELETE_SERVICE = "SuccessfulDeleteService"
EVENT_POD_TEMPLATE_RESTART_POLICY = "SetPodTemplateRestartPolicy"  # the replica spec's wins
EVENT_MPI_POD_TEMPLATE_RESTART_POLICY = "SettedPodTemplateRestartPolicy"  # (sic) the MPIJob launcher's
EVENT_BATCH_SUCCESSFUL_CREATE = "SuccessfulCreate"  # the Job and ReplicaSet controllers' pod events
EVENT_BATCH_SUCCESSFUL_DELETE = "SuccessfulDelete"
EVENT_SCHEDULED = "Scheduled"
EVENT_FAILED_SCHEDULING = "FailedScheduling"
EVENT_INVALID_SIM_ANNOTATION = "InvalidSimulationAnnotation"
EVENT_FAILED_CREATE_POD = "FailedCreatePod"  # the operator's, when a pod cannot be made
BATCH_JOB_CONTROLLER = "job-controller"  # the source of batch Job events
# Deployments and ReplicaSets, as kube-controller-manager's controllers keep them.
APPS_API_VERSION = "apps/v1"
DEPLOYMENT_KIND = "Deployment"
REPLICA_SET_KIND = "ReplicaSet"
DEPLOYMENTS_PLURAL = "deployments"
REPLICA_SETS_PLURAL = "replicasets"
LABEL_POD_TEMPLATE_HASH = "pod-template-hash"
ANNOTATION_DEPLOYMENT_REVISION = "deployment.kubernetes.io/revision"
ANNOTATION_DESIRED_REPLICAS = "deployment.kubernetes.io/desired-replicas"
ANNOTATION_MAX_REPLICAS = "deployment.kubernetes.io/max-replicas"
DEPLOYMENT_CONDITION_AVAILABLE = "Available"
DEPLOYMENT_CONDITION_PROGRESSING = "Progressing"
EVENT_SCALING_REPLICA_SET = "ScalingReplicaSet"
DEPLOYMENT_CONTROLLER = "deployment-controller"
REPLICA_SET_CONTROLLER = "replicaset-controller"
SCHEDULER_NAME = "default-scheduler"  # the source of scheduling events

TRUE = "true"
FALSE = "false"


class QueuePolicy(StrEnum):
    PRIORITY = "Priority"
    BLOCK = "Block"
    INTELLIGENT = "Intelligent"


DEFAULT_QUEUE_POLICY = QueuePolicy.PRIORITY


class Phase(StrEnum):
    """QueueUnit status.phase."""

    ENQUEUED = "Enqueued"
    RESERVED = "Reserved"
    DEQUEUED = "Dequeued"
    RUNNING = "Running"
    SUCCEED = "Succeed"
    FAILED = "Failed"
    TIMEOUT_BACKOFF = "TimeoutBackoff"
    PREEMPTED = "Preempted"


# Phases in which a unit holds quota.
PHASES_HOLDING_QUOTA = frozenset({Phase.RESERVED, Phase.DEQUEUED, Phase.RUNNING})
PHASES_FINISHED = frozenset({Phase.SUCCEED, Phase.FAILED})
# Koord-Queue v1.8's QueueUnit conditions we write: PodsReady (True while its pods run: the
# execution clock of maximumExecutionTimeSeconds) and Evicted (why it lost its admission).
UNIT_CONDITION_PODS_READY = "PodsReady"
UNIT_CONDITION_EVICTED = "Evicted"
UNIT_REASON_PODS_RUNNING = "PodsRunning"
UNIT_REASON_PODS_STOPPED = "PodsStopped"
# Koord-Queue's older phases, read as the phase of ours they mean (units written before a
# switch to us): SchedReady (quota reserved, job not yet released) and SchedSucceed (pods
# placed, job released) hold quota as Dequeued does; SchedFailed waits as Enqueued does.
KOORD_QUEUE_OLDER_PHASES = {"SchedReady": Phase.DEQUEUED, "SchedSucceed": Phase.DEQUEUED,
                            "SchedFailed": Phase.ENQUEUED}


class AdmissionCheckState(StrEnum):
    PENDING = "Pending"
    READY = "Ready"
    RETRY = "Retry"
    REJECTED = "Rejected"


class EventReason(StrEnum):
    """Reasons of the events we write on jobs, units and quotas."""

    ENQUEUED = "Enqueued"
    DEQUEUED = "Dequeued"
    RESERVED = "Reserved"
    PREEMPTED = "Preempted"
    FAILED_SCHEDULING = "FailedScheduling"
    TIMEOUT_BACKOFF = "TimeoutBackoff"
    SUSPENDED = "Suspended"
    RESUMED = "Resumed"
    INVALID_QUOTA = "InvalidQuota"
    INVALID_QUEUE = "InvalidQueue"
    INVALID_JOB = "InvalidJob"
    UNKNOWN_POLICY = "UnknownQueuePolicy"
    FAILED = "Failed"  # (a job that succeeded gets no event: its unit's phase says so)
    SPEC_RESTORED = "SpecRestored"  # a hand edit of a QueueUnit's spec was undone
    PRIORITY_CLASS_NOT_FOUND = "PriorityClassNotFound"  # a job is held for a class that does not exist
    # A job waits for a ResourceClaimTemplate or ResourceClaim its pods use that does not exist (DRA).
    RESOURCE_CLAIM_NOT_FOUND = "ResourceClaimNotFound"
    DEACTIVATED = "Deactivated"  # Koord-Queue's: an inactive job suspended, its quota released
    MAX_EXEC_TIME_EXCEEDED = "MaximumExecutionTimeExceeded"  # (Koord-Queue's) ran past its maximum
    # A job whose QueueUnit name (job name + kind suffix) is another job's unit: it waits, suspended.
    QUEUE_UNIT_NAME_TAKEN = "QueueUnitNameTaken"
    PRIORITY_CAPPED = "PriorityCapped"  # a job asking more than its quota's max-priority is queued at that
    # A job's koord-queue/expected-runtime is not a runtime: the forecast ignores it (forecaster.py).
    INVALID_EXPECTED_RUNTIME = "InvalidExpectedRuntime"
    UNGATED = "Ungated"  # a gated pod's unit was admitted: its scheduling gate removed (controller/podgroups.py)
    EVICTED = "Evicted"  # a gated workload's pod deleted: its unit was preempted, or it ran unadmitted
    # A gated pod of an admitted group asks for more (requests, DRA claims) than the pod its unit was
    # admitted for, or its claims cannot be charged: its gate stays (controller/podgroups.py).
    KEPT_GATED = "KeptGated"


class EventType(StrEnum):
    NORMAL = "Normal"
    WARNING = "Warning"


# --- Resource names ----------------------------------------------------------------
CPU = "cpu"
MEMORY = "memory"
# Pod-level resources (spec.resources, PodLevelResources: beta and on since 1.34) take only
# cpu, memory and hugepages-<size> (component-helpers' IsSupportedPodLevelResource).
HUGEPAGES_PREFIX = "hugepages-"
GPU = "nvidia.com/gpu"
# Koordinator's GPU sharing (apis/extension/device_share.go): a container asks for a share of
# a GPU; koord-manager's pod webhook (DeviceResourceSpec) rewrites koordinator.sh/gpu into
# gpu-core and gpu-memory-ratio and adds gpu.shared, and koord-scheduler's ElasticQuota
# plugin charges the pod's requests as rewritten (docs/gpus.md).
KOORD_GPU = "koordinator.sh/gpu"
KOORD_GPU_CORE = "koordinator.sh/gpu-core"
KOORD_GPU_MEMORY = "koordinator.sh/gpu-memory"
KOORD_GPU_MEMORY_RATIO = "koordinator.sh/gpu-memory-ratio"
KOORD_GPU_SHARED = "koordinator.sh/gpu.shared"
KOORD_GPU_SHARE_RESOURCES = (KOORD_GPU, KOORD_GPU_CORE, KOORD_GPU_MEMORY, KOORD_GPU_MEMORY_RATIO, KOORD_GPU_SHARED)
PODS = "pods"

# --- Scheduling defaults ------------------------------------------------------------
DEFAULT_PROTECT_SECONDS = 60.0
# An admitted job whose pods have all succeeded is no victim this long: its controller says it
# ended within seconds (5-8 s under load, issue 36), and one that never does is a victim after.
DONE_GRACE_SECONDS = 30.0
BACKOFF_BASE_SECONDS = 10.0
BACKOFF_FACTOR = 2.0
BACKOFF_CAP_SECONDS = 15 * 60.0
BACKOFF_JITTER = 0.10

# --- The controller's settings, published for `koord-queue status` and `explain` ---
# A ConfigMap in the controller's namespace, written by the leader when it starts, so
# that they load the objects into the engine as it does (loader.py).
SETTINGS_CONFIG_MAP = "koord-queue-settings"
# Where the controller keeps the quotas' usage history across restarts (docs/fairness.md).
USAGE_HISTORY_CONFIG_MAP = "koord-queue-usage-history"
USAGE_HISTORY_KEY = "history.json"
STATUS_USAGE_HISTORY = "usageHistory"  # an ElasticQuota's status: decayed usage, budgets' use
SETTING_DEFAULT_QUEUE_POLICY = "defaultQueuePolicy"
SETTING_OVERSELL_RATE = "oversellRate"
SETTING_PROTECT_SECONDS = "protectSeconds"
SETTING_FAIR_SHARING = "fairSharing"  # usage-history or none: the default of koord-queue/fair-sharing
SETTING_USAGE_HALF_LIFE_SECONDS = "usageHalfLifeSeconds"
SETTING_DEFAULT_EXPECTED_RUNTIME_SECONDS = "defaultExpectedRuntimeSeconds"  # the forecast's (forecaster.py)
SETTING_BACKOFF_BASE_SECONDS = "backoffBaseSeconds"
SETTING_BACKOFF_CAP_SECONDS = "backoffCapSeconds"
SETTING_JOB_KINDS = "jobKinds"  # comma-separated
SETTING_KOORDINATOR = "koordinator"  # a KoordinatorMode

# --- Core kinds the simulator reads from a trace -----------------------------------
NAMESPACE_KIND = "Namespace"

# --- Job kinds: pod labels, conditions and statuses the adapters read ----------------
RAY_GROUP = "ray.io"
LABEL_BATCH_JOB_NAME = "batch.kubernetes.io/job-name"
LABEL_RAY_CLUSTER = "ray.io/cluster"
LABEL_RAY_ORIGINATED_FROM_CR_NAME = "ray.io/originated-from-cr-name"
LABEL_RAY_ORIGINATED_FROM_CRD = "ray.io/originated-from-crd"
# What the simulated KubeRay operator writes on a RayJob's pods, as KubeRay does.
LABEL_RAY_NODE_TYPE = "ray.io/node-type"  # head or worker
LABEL_RAY_GROUP = "ray.io/group"  # headgroup, or the worker group's name
LABEL_RAY_IS_RAY_NODE = "ray.io/is-ray-node"
LABEL_CREATED_BY = "app.kubernetes.io/created-by"
RAY_HEAD_GROUP = "headgroup"
RAY_OPERATOR = "kuberay-operator"
RAY_JOB_CONTROLLER = "rayjob-controller"  # the source of RayJob events
RAY_PLURAL = "rayjobs"
RAY_CLUSTER_PLURAL = "rayclusters"
RAY_CLUSTER_CONTROLLER = "raycluster-controller"  # the source of RayCluster events
# What KubeRay's default submitter pod asks for (common/job.go, GetDefaultSubmitterContainer):
# the most a RayJob's submitter Job may ask and still be trusted as made by it (jobs/parents.py).
RAY_SUBMITTER_REQUESTS = {"cpu": "500m", "memory": "200Mi"}
# ray.io/v1 RayCluster status.state values (KubeRay's ClusterState).
RAY_CLUSTER_STATE_READY = "ready"
RAY_CLUSTER_STATE_SUSPENDED = "suspended"
RAY_CLUSTER_STATE_FAILED = "failed"
# The Spark operator's SparkApplication: its pods' labels, status.applicationState.state values.
SPARK_PLURAL = "sparkapplications"
SPARK_API_APPROVAL = "https://github.com/kubeflow/spark-operator/pull/1298"  # its CRD's (k8s.io group)
SPARK_OPERATOR = "spark-operator"  # the source of SparkApplication events
LABEL_SPARK_APP_NAME = "spark-app-name"
LABEL_SPARK_ROLE = "spark-role"  # driver or executor
SPARK_ROLE_DRIVER = "driver"
SPARK_ROLE_EXECUTOR = "executor"
SPARK_MODE_CLIENT = "client"  # spec.mode: the driver runs outside the cluster (not counted)
SPARK_STATE_SUBMITTED = "SUBMITTED"
SPARK_STATE_RUNNING = "RUNNING"
SPARK_STATE_SUCCEEDING = "SUCCEEDING"
SPARK_STATE_FAILING = "FAILING"
SPARK_STATE_COMPLETED = "COMPLETED"
SPARK_STATE_FAILED = "FAILED"
SPARK_STATE_SUBMISSION_FAILED = "SUBMISSION_FAILED"
SPARK_STATE_SUSPENDED = "SUSPENDED"  # spec.suspend (the Spark operator's since kubeflow/spark-operator#2387)
# Argo's Workflow: its demand is the annotation (a JSON or YAML ResourceList, as Koord-Queue reads it).
ARGO_PLURAL = "workflows"
ARGO_CONTROLLER = "workflow-controller"  # the source of Workflow events
ANNOTATION_ARGO_MIN_RESOURCES = "koord-queue/min-resources"
LABEL_ARGO_WORKFLOW = "workflows.argoproj.io/workflow"
ARGO_PHASE_PENDING = "Pending"
ARGO_PHASE_RUNNING = "Running"
ARGO_PHASE_SUCCEEDED = "Succeeded"
ARGO_PHASE_FAILED = "Failed"
ARGO_PHASE_ERROR = "Error"
# The mpi-operator's kubeflow.org/v1alpha1 MPIJob: status.launcherStatus values.
LABEL_MPI_JOB_NAME_V1ALPHA1 = "mpi_job_name"
LABEL_MPI_ROLE_V1ALPHA1 = "mpi_role_type"  # launcher or worker
MPI_LAUNCHER_ACTIVE = "Active"
MPI_LAUNCHER_SUCCEEDED = "Succeeded"
MPI_LAUNCHER_FAILED = "Failed"
# QueueUnit name = job name + "-" + suffix (Koord-Queue's job extensions; batch Job: none).
UNIT_SUFFIX_PYTORCH = "py-qu"
UNIT_SUFFIX_TF = "tf-qu"
UNIT_SUFFIX_MPI = "mpi-qu"
UNIT_SUFFIX_RAY = "ray-qu"
UNIT_SUFFIX_RAY_CLUSTER = "raycluster-qu"
UNIT_SUFFIX_SPARK = "spark-qu"
UNIT_SUFFIX_ARGO = ""  # a Workflow's QueueUnit has the Workflow's name
# kubeflow.org/v1 JobCondition types.
# runPolicy.managedBy: the training operator runs a job it names, or that names none; not one
# managed by another controller (MultiKueue's), which it leaves alone (ManagedByExternalController).
TRAINING_OPERATOR_MANAGER = "kubeflow.org/training-operator"
MULTIKUEUE_MANAGER = "kueue.x-k8s.io/multikueue"
KUBEFLOW_CONDITION_CREATED = "Created"
KUBEFLOW_CONDITION_RUNNING = "Running"
KUBEFLOW_CONDITION_RESTARTING = "Restarting"
KUBEFLOW_CONDITION_SUCCEEDED = "Succeeded"
KUBEFLOW_CONDITION_FAILED = "Failed"
KUBEFLOW_CONDITION_SUSPENDED = "Suspended"
# batch/v1 JobCondition types.
BATCH_CONDITION_COMPLETE = "Complete"
BATCH_CONDITION_FAILED = "Failed"
# The outcome decided, set before Complete / Failed (Kubernetes 1.31+), which wait for the pods to stop.
BATCH_CONDITION_SUCCESS_CRITERIA_MET = "SuccessCriteriaMet"
BATCH_CONDITION_FAILURE_TARGET = "FailureTarget"
CONDITION_TRUE = "True"
# A Queue's Bound condition (status.conditions, written by the controller with status.quota).
QUEUE_CONDITION_BOUND = "Bound"
QUEUE_REASON_BOUND = "QuotaFound"
QUEUE_REASON_QUOTA_MISSING = "QuotaNotFound"
QUEUE_REASON_UNBOUND = "NoQuota"
# ray.io/v1 RayJob status.jobStatus and status.jobDeploymentStatus values.
RAY_JOB_STATUS_PENDING = "PENDING"
RAY_JOB_STATUS_RUNNING = "RUNNING"
RAY_JOB_STATUS_SUCCEEDED = "SUCCEEDED"
RAY_JOB_STATUS_FAILED = "FAILED"
RAY_DEPLOYMENT_INITIALIZING = "Initializing"
RAY_DEPLOYMENT_SUSPENDED = "Suspended"
RAY_DEPLOYMENT_RUNNING = "Running"
RAY_DEPLOYMENT_COMPLETE = "Complete"
RAY_DEPLOYMENT_FAILED = "Failed"
RAY_DEPLOYMENT_VALIDATION_FAILED = "ValidationFailed"
# Which namespaces' jobs are queued (Kueue's managedJobsNamespaceSelector): by default all but
# Kubernetes' own and the controller's, by the name label every namespace carries.
LABEL_NAMESPACE_NAME = "kubernetes.io/metadata.name"
KUBE_SYSTEM_NAMESPACES = ("kube-system", "kube-public", "kube-node-lease")

# Workloads queued by a scheduling gate (docs/workloads.md): pods of Deployments, StatefulSets,
# LeaderWorkerSets, plain pods and Kueue's pod groups, held by our gate until their unit is admitted.
SCHEDULING_GATE = "scheduling.koord-queue.io/admission"
# The webhook marks every pod it gates ("true"): once ungated, still ours (its unit's to hold quota for).
LABEL_GATED_POD = "scheduling.koord-queue.io/gated"
LABEL_POD_GROUP_UNIT = "scheduling.koord-queue.io/pod-group"  # on a pod group's QueueUnit: the group it stands for
LABEL_MANAGED_NAMESPACE = "koord-queue/managed"  # a namespace opting all its workloads in ("true")
LABEL_KUEUE_QUEUE_NAME = "kueue.x-k8s.io/queue-name"  # Kueue's LocalQueue: our Queue of that name
LABEL_KUEUE_POD_GROUP_NAME = "kueue.x-k8s.io/pod-group-name"
# Kueue writes the total count as an annotation; a label of that name is read too.
ANNOTATION_KUEUE_POD_GROUP_TOTAL_COUNT = "kueue.x-k8s.io/pod-group-total-count"
STATEFUL_SET_KIND = "StatefulSet"
STATEFUL_SETS_PLURAL = "statefulsets"
STATEFUL_SET_CONTROLLER = "statefulset-controller"
LABEL_STATEFUL_SET_POD_NAME = "statefulset.kubernetes.io/pod-name"  # the StatefulSet controller's, on its pods
LABEL_POD_INDEX = "apps.kubernetes.io/pod-index"
LABEL_LWS_NAME = "leaderworkerset.sigs.k8s.io/name"  # on every pod of a LeaderWorkerSet
LABEL_LWS_GROUP_INDEX = "leaderworkerset.sigs.k8s.io/group-index"  # which of its groups (leader + workers)
ANNOTATION_LWS_SIZE = "leaderworkerset.sigs.k8s.io/size"  # the pods of one group
# The chart's extension.<name> switches of the workloads queued by gate (controller/gating.py).
WORKLOAD_POD = "pod"
WORKLOAD_DEPLOYMENT = "deployment"
WORKLOAD_STATEFULSET = "statefulset"
WORKLOAD_LEADERWORKERSET = "leaderworkerset"
WORKLOAD_EXTENSIONS = (WORKLOAD_POD, WORKLOAD_DEPLOYMENT, WORKLOAD_STATEFULSET, WORKLOAD_LEADERWORKERSET)
# --- the start-time forecast (engine/forecast.py) ------------------------------------------
ANNOTATION_EXPECTED_RUNTIME = "koord-queue/expected-runtime"  # on a job: "90s", "45m", "2h"
DEFAULT_EXPECTED_RUNTIME_SECONDS = 3600.0  # a job with no annotation and no history is taken to run this long
FORECAST_INTERVAL_SECONDS = 30.0  # the leader recomputes the forecast at most this often
FORECAST_HORIZON_SECONDS = 7 * 86400.0  # a start later than this is "beyond the forecast"
# Jobs ending within max(FORECAST_RESOLUTION_SECONDS, FORECAST_COARSEN x how far ahead) of
# each other end together in the forecast's play: its cost follows the span, not the jobs.
FORECAST_RESOLUTION_SECONDS = 1.0
FORECAST_COARSEN = 0.005
FORECAST_MAX_CYCLES = 60_000  # engine cycles per scenario of one forecast (its cost bound)
# The QueueUnit's forecast is written only when its expected start moved by more than both.
FORECAST_WRITE_MIN_SECONDS = 60.0
FORECAST_WRITE_FRACTION = 0.10
FORECAST_OPTIMISTIC_FACTOR = 0.5  # earliest: every job runs half its expected runtime
FORECAST_PESSIMISTIC_FACTOR = 2.0  # latest: twice it (or up to its max-exec-time when that is set)
# basis: where a unit's runtime (and the runtimes of those ahead of it) came from
BASIS_ANNOTATION = "annotation"
BASIS_HISTORY = "history"
BASIS_DEFAULT = "default"
BASIS_NEVER = "never-fits"  # it cannot start under the quotas as they are
BASIS_BEYOND = "beyond-horizon"
EXPECTED_START_FIELD = "expectedStart"  # QueueUnit status, explain --json, visibility items
EXPECTED_START_RANGE_FIELD = "expectedStartRange"
FORECAST_BASIS_FIELD = "forecastBasis"
FORECAST_NOTE_FIELD = "forecastNote"  # why the job's expected-runtime annotation is ignored
