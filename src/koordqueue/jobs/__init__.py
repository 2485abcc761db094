"""One adapter per job kind; ``adapter_for`` finds the one for an object's apiVersion and kind."""

from __future__ import annotations

from koordqueue.jobs.base import JobAdapter
from koordqueue.jobs.batchjob import BatchJobAdapter
from koordqueue.jobs.mpijob import MPIJobAdapter
from koordqueue.jobs.pytorchjob import PyTorchJobAdapter
from koordqueue.jobs.rayjob import RayJobAdapter
from koordqueue.jobs.tfjob import TFJobAdapter

ADAPTERS: dict[tuple[str, str], JobAdapter] = {
    (adapter.api_version, adapter.kind): adapter
    for adapter in (PyTorchJobAdapter(), TFJobAdapter(), MPIJobAdapter(), BatchJobAdapter(), RayJobAdapter())
}
"""(apiVersion, kind) -> adapter, for every kind we queue."""


def adapter_for(api_version: str, kind: str) -> JobAdapter | None:
    """The adapter of a kind, or None when we do not queue that kind."""
    return ADAPTERS.get((api_version, kind))
