"""The API resources the controller reads and writes and the groups of unit phases it
acts on: shared by the controller's parts, the state loader (loading.py) and the overview."""

from __future__ import annotations

from koordqueue.api import constants as c
from koordqueue.kube.client import Resource

QUOTAS = Resource(c.QUOTA_GROUP, c.QUOTA_VERSION, c.ELASTIC_QUOTA_PLURAL)
QUOTA_TREES = Resource(c.QUOTA_GROUP, c.QUOTA_TREE_VERSION, c.ELASTIC_QUOTA_TREE_PLURAL)
QUEUES = Resource(c.QUEUE_GROUP, c.QUEUE_VERSION, c.QUEUE_PLURAL)
UNITS = Resource(c.QUEUE_GROUP, c.QUEUE_VERSION, c.QUEUE_UNIT_PLURAL)
NODES = Resource("", "v1", "nodes", namespaced=False)
NAMESPACES = Resource("", "v1", "namespaces", namespaced=False)
PODS = Resource("", "v1", "pods")
CONFIG_MAPS = Resource("", "v1", "configmaps")
PRIORITY_CLASSES = Resource("scheduling.k8s.io", "v1", "priorityclasses", namespaced=False)
HOLDING = {p.value for p in c.PHASES_HOLDING_QUOTA}
FINISHED = {p.value for p in c.PHASES_FINISHED}
SENT_BACK = {c.Phase.PREEMPTED.value, c.Phase.TIMEOUT_BACKOFF.value}
RUNNABLE = {c.Phase.DEQUEUED.value, c.Phase.RUNNING.value}  # a job may run while its unit is in one
ORPHAN = "this QueueUnit stands for no job"  # how the reason of a unit without one begins
UNRESOLVED = "(unresolved)"  # a unit held in a quota that is gone: charged to the cluster total
