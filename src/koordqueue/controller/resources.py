"""The API resources the controller reads and writes: shared by the controller's parts, the
state loader (loading.py) and the overview. The groups of unit phases are in phases.py."""

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
RESOURCE_CLAIMS = Resource(c.DRA_GROUP, c.DRA_VERSION, c.RESOURCE_CLAIM_PLURAL)
RESOURCE_CLAIM_TEMPLATES = Resource(c.DRA_GROUP, c.DRA_VERSION, c.RESOURCE_CLAIM_TEMPLATE_PLURAL)
RESOURCE_SLICES = Resource(c.DRA_GROUP, c.DRA_VERSION, c.RESOURCE_SLICE_PLURAL, namespaced=False)
