"""koord-queue: job-level queueing for Kubernetes training jobs against ElasticQuota."""

__version__ = "0.1.0"
