"""From the cluster's objects to the engine's inputs: the one translation.

The controller, `koord-queue status` and `explain` (from a snapshot of the objects, in
controller/loading.py), the dashboard (the controller's own engine) and the simulator
load the engine through ``Settings``, so that they cannot disagree on what the objects
mean: the queue policy of a quota that names none, the oversell rate (Koord-Queue's
oversellrate: each quota's max, and the cluster total the quotas share, the nodes'
allocatable, times it), who may be preempted when, the back-off, which job kinds are
queued, and whether koord-scheduler schedules the pods (Koordinator mode: nothing is
admitted past a quota's runtime quota as it computes it). The running controller publishes its settings
in a ConfigMap (``to_data``) that `status` and `explain` read back (``from_data``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace

from koordqueue.api import constants as c
from koordqueue.api.objects import ParsedQuota, parse_elastic_quota
from koordqueue.engine.model import EngineConfig, ResourceList
from koordqueue.jobs import KIND_NAMES

ALL_JOB_KINDS = KIND_NAMES  # every kind registered (jobs/__init__.py)


@dataclass(frozen=True, slots=True)
class Settings:
    """What the controller is told (its flags, the chart's values) that changes what the
    objects mean to the engine."""

    default_queue_policy: c.QueuePolicy = c.DEFAULT_QUEUE_POLICY
    oversell_rate: float = 1.0
    protect_seconds: float = c.DEFAULT_PROTECT_SECONDS
    backoff_base: float = c.BACKOFF_BASE_SECONDS
    backoff_cap: float = c.BACKOFF_CAP_SECONDS
    job_kinds: frozenset[str] = ALL_JOB_KINDS
    koordinator: c.KoordinatorMode = c.KoordinatorMode.AUTO
    # The default of koord-queue/fair-sharing (docs/fairness.md): off, Koordinator's rule.
    fair_sharing: bool = False
    usage_half_life: float = c.DEFAULT_USAGE_HALF_LIFE_SECONDS
    # The forecast's runtime of a job with no annotation nor history (docs/forecast.md).
    default_expected_runtime: float = c.DEFAULT_EXPECTED_RUNTIME_SECONDS

    def engine_config(self, koordinator_seen: bool = False) -> EngineConfig:
        """``koordinator_seen``: Koordinator's own quotas are there (auto mode turns on)."""
        return EngineConfig(protect_seconds=self.protect_seconds, backoff_base=self.backoff_base,
                            backoff_cap=self.backoff_cap, oversell_rate=self.oversell_rate,
                            koordinator=self.beside_koordinator(koordinator_seen), fair_sharing=self.fair_sharing,
                            usage_half_life=self.usage_half_life)

    def beside_koordinator(self, koordinator_seen: bool) -> bool:
        """Whether koord-scheduler schedules the pods: mode on, or auto and its quotas seen."""
        mode = self.koordinator
        return mode == c.KoordinatorMode.ON or (mode == c.KoordinatorMode.AUTO and koordinator_seen)

    def quota(self, obj: object) -> ParsedQuota:
        """An ElasticQuota as the engine takes it: one without a policy label has the default policy."""
        parsed = parse_elastic_quota(obj)
        assert isinstance(obj, Mapping)  # parse_elastic_quota checked it
        if c.LABEL_QUEUE_POLICY in ((obj.get("metadata") or {}).get("labels") or {}):
            return parsed
        return replace(parsed, quota=replace(parsed.quota, policy=self.default_queue_policy))

    def capacity(self, allocatables: Iterable[ResourceList]) -> ResourceList | None:
        """The cluster total the quotas share: the nodes' allocatable times the oversell
        rate, as each quota's max is in the engine (else a rate above 1 could never let in
        more than the nodes hold, which is what it is for); None (unbounded) when no node
        is known."""
        total: ResourceList = {}
        for allocatable in allocatables:
            for name, amount in allocatable.items():
                total[name] = total.get(name, 0) + amount
        return {name: int(amount * self.oversell_rate) for name, amount in total.items()} or None

    def to_data(self) -> dict[str, str]:
        """As the ConfigMap ``SETTINGS_CONFIG_MAP`` holds them."""
        return {
            c.SETTING_DEFAULT_QUEUE_POLICY: self.default_queue_policy.value,
            c.SETTING_OVERSELL_RATE: f"{self.oversell_rate:g}",
            c.SETTING_PROTECT_SECONDS: f"{self.protect_seconds:g}",
            c.SETTING_BACKOFF_BASE_SECONDS: f"{self.backoff_base:g}",
            c.SETTING_BACKOFF_CAP_SECONDS: f"{self.backoff_cap:g}",
            c.SETTING_JOB_KINDS: ",".join(sorted(self.job_kinds)),
            c.SETTING_KOORDINATOR: self.koordinator.value,
            c.SETTING_FAIR_SHARING: c.FAIR_SHARING_USAGE_HISTORY if self.fair_sharing else c.FAIR_SHARING_NONE,
            c.SETTING_USAGE_HALF_LIFE_SECONDS: f"{self.usage_half_life:g}",
            c.SETTING_DEFAULT_EXPECTED_RUNTIME_SECONDS: f"{self.default_expected_runtime:g}",
        }

    @classmethod
    def from_data(cls, data: Mapping[str, object]) -> tuple[Settings, list[str]]:
        """Settings from the ConfigMap's data, and what in it could not be read (the
        default is used for that, and said)."""
        problems: list[str] = []
        default = cls()

        def number(key: str, fallback: float) -> float:
            text = data.get(key)
            if text is None:
                return fallback
            try:
                value = float(str(text))
            except ValueError:
                value = -1.0
            if value < 0:
                problems.append(f"{key}: {text!r} is not a number of 0 or more; using {fallback:g}")
                return fallback
            return value

        policy = default.default_queue_policy
        text = data.get(c.SETTING_DEFAULT_QUEUE_POLICY)
        if text is not None:
            try:
                policy = c.QueuePolicy(str(text))
            except ValueError:
                problems.append(f"{c.SETTING_DEFAULT_QUEUE_POLICY}: unknown queue policy {text!r}; using {policy}")
        kinds = default.job_kinds
        text = data.get(c.SETTING_JOB_KINDS)
        if text is not None:
            kinds = frozenset(k.strip() for k in str(text).split(",") if k.strip())
        mode = default.koordinator
        text = data.get(c.SETTING_KOORDINATOR)
        if text is not None:
            try:
                mode = c.KoordinatorMode(str(text))
            except ValueError:
                problems.append(f"{c.SETTING_KOORDINATOR}: unknown mode {text!r}; using {mode}")
        settings = cls(policy, number(c.SETTING_OVERSELL_RATE, default.oversell_rate),
                       number(c.SETTING_PROTECT_SECONDS, default.protect_seconds),
                       number(c.SETTING_BACKOFF_BASE_SECONDS, default.backoff_base),
                       number(c.SETTING_BACKOFF_CAP_SECONDS, default.backoff_cap), kinds, mode,
                       str(data.get(c.SETTING_FAIR_SHARING, "")).strip() == c.FAIR_SHARING_USAGE_HISTORY,
                       number(c.SETTING_USAGE_HALF_LIFE_SECONDS, default.usage_half_life) or default.usage_half_life,
                       number(c.SETTING_DEFAULT_EXPECTED_RUNTIME_SECONDS, default.default_expected_runtime)
                       or default.default_expected_runtime)
        return settings, problems
