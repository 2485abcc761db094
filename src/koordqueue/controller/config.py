"""The controller's settings: what the chart's values and the CLI flags turn into."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from koordqueue.api import constants as c
from koordqueue.api.dra import DeviceClassMapping, parse_mappings
from koordqueue.controller.scope import default_selector
from koordqueue.loader import ALL_JOB_KINDS, Settings

__all__ = ["ALL_JOB_KINDS", "ControllerConfig"]


@dataclass(frozen=True)
class ControllerConfig:
    # Which job kinds are watched (the chart's extension.<kind>.enable values).
    job_kinds: frozenset[str] = ALL_JOB_KINDS
    # Which workloads are queued by a scheduling gate (c.WORKLOAD_*; the chart's extension.pod,
    # .deployment, .statefulset, .leaderworkerset): none unless asked (controller/gating.py).
    workload_kinds: frozenset[str] = frozenset()
    system_namespace: str = c.SYSTEM_NAMESPACE
    # Whose namespaces' jobs are queued (controller/scope.py); None: all but Kubernetes' own
    # and system_namespace. The webhook configuration's namespaceSelector must say the same.
    managed_jobs_namespace_selector: dict[str, Any] | None = field(default=None, hash=False)
    # QueueUnits no job of ours stands behind (a Koord-Queue job extension's, a platform's) are
    # queued and dequeued as Koord-Queue does (chart controller.bareQueueUnits); off: they wait.
    bare_queue_units: bool = True
    default_queue_policy: c.QueuePolicy = c.DEFAULT_QUEUE_POLICY
    protect_seconds: float = c.DEFAULT_PROTECT_SECONDS
    fair_sharing: bool = False  # the default of koord-queue/fair-sharing (chart fairSharing)
    usage_half_life: float = c.DEFAULT_USAGE_HALF_LIFE_SECONDS
    backoff_base: float = c.BACKOFF_BASE_SECONDS
    backoff_cap: float = c.BACKOFF_CAP_SECONDS
    wait_for_pods_running_seconds: float = 300.0  # with the Queue annotation wait-for-pods-running
    # A unit admitted by preempting others has its job resumed once the victims' pods have
    # terminated, or at the latest after their grace period plus this (jobswitch.py).
    victim_wait_margin_seconds: float = 30.0
    # An admitted job whose resume keeps failing (refused by the API server, a webhook, a
    # quota of objects) is sent back after this long, its quota released: a resume refused
    # for good must not hold quota for ever (reconciler.py).
    resume_refused_seconds: float = 60.0
    queue_status_refresh_seconds: float = c.DEFAULT_QUEUE_ITEMS_REFRESH_SECONDS
    quota_status_refresh_seconds: float = 2.0
    # Controller seconds per real second: above 1, a compressed clock (tests of budgets and
    # usage history over hours in seconds); the scheduler's waits are shortened alike.
    clock_rate: float = 1.0
    # A waiting unit's status.message, once it gives a reason, is told the engine's reason
    # of now at least this often when it moved (amounts, the unit it waits behind): with
    # the message writes' own pacing it is never more than ~45 s behind (docs/dashboard.md);
    # when only its amounts moved, they are written every second refresh (~95 s behind).
    reason_refresh_seconds: float = 30.0
    # The start-time forecast (forecaster.py): recomputed at most this often (0: never), and
    # the runtime of a job with neither an annotation koord-queue/expected-runtime nor history.
    forecast_interval_seconds: float = c.FORECAST_INTERVAL_SECONDS
    default_expected_runtime_seconds: float = c.DEFAULT_EXPECTED_RUNTIME_SECONDS
    # Koord-Queue's oversellrate: a job fits its quota and each ancestor while used +
    # request <= max times this; the cluster's total (the nodes' allocatable) is oversold alike.
    oversell_rate: float = 1.0
    # Beside Koordinator, pod templates are marked with the quota and a gang at admission.
    koordinator: c.KoordinatorMode = c.KoordinatorMode.AUTO
    # Client side of the API (the chart's qps/burst values).
    qps: float = 200.0
    burst: int = 400
    write_concurrency: int = 32  # API writes in flight at once from one cycle
    # Jobs reconciled at once (each waits on its writes; one job is never reconciled twice at once).
    job_workers: int = 16
    # Leader election.
    leader_election: bool = True
    lease_name: str = "koord-queue-controller"
    # A dead leader's Lease expires lease_duration after its last renewal; a follower sees
    # that within one retry: a killed leader is replaced in under 13 s.
    lease_duration: float = 10.0
    renew_deadline: float = 7.0
    retry_period: float = 2.0
    identity: str = ""
    # Endpoints: metrics/health, the dashboard and the admission webhook (port 0: any free port).
    metrics_host: str = "0.0.0.0"
    metrics_port: int = 8080
    dashboard: bool = False
    # Loopback: no token asked (reach it by `kubectl port-forward`); any other address: every
    # request needs a bearer token (TokenReview, SubjectAccessReview; controller/dashboard.py).
    dashboard_host: str = "127.0.0.1"
    dashboard_port: int = 8082
    dashboard_max_streams: int = 16  # event streams open at once; one more is answered 429
    # Koord-Queue's HTTP API (controller/koordapi.py): off unless asked, as in Koord-Queue;
    # on loopback unless told otherwise (it has no authentication of its own).
    api_handler: bool = False
    api_handler_host: str = "127.0.0.1"
    api_handler_port: int = c.KOORD_API_PORT
    webhook: bool = False  # off: jobs are suspended at reconcile time only
    webhook_port: int = 9443
    webhook_host: str = "0.0.0.0"
    # Where the serving certificate is (tls.crt, tls.key). Empty: the controller makes
    # its own CA and certificate, and writes the CA into the webhook configuration.
    webhook_cert_dir: str = ""
    webhook_config_name: str = "koord-queue"  # the MutatingWebhookConfiguration to keep the caBundle of
    webhook_hosts: tuple[str, ...] = field(default=("127.0.0.1",))  # names in the self-made certificate
    # The visibility API (controller/visibility.py), on the webhook's port: needs webhook on.
    visibility: bool = False
    # This replica's pod (downward API): labelled koord-queue-leader=true while it leads, with visibility on.
    pod_name: str = ""
    pod_namespace: str = ""
    # DRA: DeviceClass -> quota resource, ``deviceclass=resource[:count][@driver]`` comma-separated
    # (the chart's deviceClassMappings; api/dra.py). Empty: claims are not read, nor charged.
    device_class_mappings: str = ""

    def __post_init__(self) -> None:
        try:
            parse_mappings(self.device_class_mappings)
        except ValueError as e:  # admin input: the controller does not start with it
            raise ValueError(f"--device-class-mappings: {e}") from None

    @property
    def dra_mappings(self) -> dict[str, DeviceClassMapping]:
        """The device class mappings (checked as the config was made)."""
        return parse_mappings(self.device_class_mappings)

    @property
    def namespace_selector(self) -> dict[str, Any]:
        """The managed-jobs namespace selector in use (the default spelled out)."""
        return self.managed_jobs_namespace_selector or default_selector(self.system_namespace)

    @property
    def settings(self) -> Settings:
        """What of these the objects are loaded into the engine with (loader.py); the
        controller publishes them for `koord-queue status` and `explain`."""
        return Settings(self.default_queue_policy, self.oversell_rate, self.protect_seconds, self.backoff_base,
                        self.backoff_cap, self.job_kinds, self.koordinator, self.fair_sharing, self.usage_half_life,
                        self.default_expected_runtime_seconds)


def clock_of(rate: float) -> Callable[[], float]:
    """The controller's clock: the wall clock, or one running ``rate`` times as fast from now."""
    if rate == 1.0:
        return time.time
    start = time.time()
    return lambda: start + (time.time() - start) * rate
