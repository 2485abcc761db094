"""Every job kind we queue, registered once (``KINDS``); what names kinds elsewhere is derived
from it here: ``ADAPTERS``, ``KIND_NAMES``, ``PLURALS``, ``POD_LABELS``, ``adapter_for``, ``kind_named``."""

from __future__ import annotations

from koordqueue.jobs import argo, batchjob, mpijob, pytorchjob, raycluster, rayjob, spark, tfjob
from koordqueue.jobs.base import JobAdapter, PodLabels
from koordqueue.jobs.kind import JobKind

KINDS: tuple[JobKind, ...] = (
    pytorchjob.KIND,
    tfjob.KIND,
    mpijob.KIND,
    batchjob.KIND,
    rayjob.KIND,
    raycluster.KIND,
    spark.KIND,
    argo.KIND,
)
"""In the order the chart and ``--job-kinds`` list them. A new kind: its file, and its line here."""

ADAPTERS: dict[tuple[str, str], JobAdapter] = {(v, k.kind): k.adapter for k in KINDS for v in k.api_versions}
"""(apiVersion, kind) -> adapter, for every kind we queue, in every version we read it in
(MPIJob's v1alpha1 too: one kind, read by its shape)."""
KIND_NAMES: frozenset[str] = frozenset(k.kind for k in KINDS)
PLURALS: dict[str, str] = {k.kind: k.plural for k in KINDS}
"""kind -> its REST plural."""
_BY_NAME = {k.kind: k for k in KINDS}


def _pod_labels() -> tuple[PodLabels, ...]:
    found: dict[str, PodLabels] = {}
    for adapter in ADAPTERS.values():
        for labels in adapter.pod_labels:
            if found.setdefault(labels.job, labels) != labels:
                raise ValueError(f"{adapter.kind}: its pods' label {labels.job} is read otherwise by another kind")
    return tuple(found.values())


POD_LABELS = _pod_labels()
"""How the pods of every kind are labelled, each label naming a job once (controller/pods.py)."""


def adapter_for(api_version: str, kind: str) -> JobAdapter | None:
    """The adapter of a kind, or None when we do not queue that kind."""
    return ADAPTERS.get((api_version, kind))


def kind_named(kind: str) -> JobKind:
    """The registration of a kind we queue (KeyError for any other)."""
    return _BY_NAME[kind]
