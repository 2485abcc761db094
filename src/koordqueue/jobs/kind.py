"""A job kind's one registration, from which everything else that names kinds is derived:
the kinds queued (``--job-kinds``), their REST plurals, the webhook's rules, the CRDs the
embedded control plane serves, the kinds its simulated operators run, and the chart's
list of extensions (``make generate`` writes charts/koord-queue/templates/_kinds.tpl).

Adding a kind is one file (its adapter and its ``KIND = JobKind(...)``) and its line in
``KINDS`` (jobs/__init__.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from koordqueue.jobs.base import JobAdapter

Manifest = dict[str, Any]


@dataclass(frozen=True)
class JobKind:
    adapter: JobAdapter  # its apiVersion and kind are the kind's
    plural: str  # the REST resource (api/constants.py)
    extension: str  # its switch in the chart's values: extension.<extension>.enable
    # The CRD the embedded control plane serves for it, as its operator installs it
    # (None: the API server has the kind built in, as batch Job). A function, so that
    # the CRD schemas (pydantic) are loaded only by whoever serves or writes them.
    crd: Callable[[], Manifest] | None = None
    simulated: bool = True  # the simulated cluster's operators run its jobs
    # Other versions its CRD may serve, read by the same adapter (by the job's shape), in which
    # the controller reads the kind where the API server serves none of the ones before.
    other_versions: tuple[str, ...] = ()
    # The role whose replicas its CRD's scale subresource sets (PyTorchJob's Worker: `kubectl
    # scale`, a HorizontalPodAutoscaler), None when it has none: the validating webhook sees
    # updates through it too, a scale-up of a running job being a growth like any other.
    scale_role: str | None = None

    @property
    def kind(self) -> str:
        return self.adapter.kind

    @property
    def api_version(self) -> str:
        return self.adapter.api_version

    @property
    def group(self) -> str:
        """The API group ("" for the core group, which no job kind is in)."""
        return self.api_version.rpartition("/")[0]

    @property
    def version(self) -> str:
        return self.api_version.rpartition("/")[2]

    @property
    def versions(self) -> tuple[str, ...]:
        """Every version we read the kind in, its own first: the webhook's rules name each."""
        return (self.version, *self.other_versions)

    @property
    def api_versions(self) -> tuple[str, ...]:
        """Every apiVersion we read the kind in, its own first."""
        return tuple(f"{self.group}/{version}" for version in self.versions)
