"""Prometheus metrics of the controller (SEMANTICS.md §6), on a registry of its own.

A registry per controller instance keeps tests and two controllers in one process
(leader-election tests) from colliding.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

WAIT_BUCKETS = (0.1, 0.5, 1, 2, 5, 10, 30, 60, 120, 300, 600, 1800, 3600, 4 * 3600, 24 * 3600)
CYCLE_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5)


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.pending_units = Gauge(
            "koord_queue_pending_units", "QueueUnits waiting in a queue", ["queue"], registry=r
        )
        self.admissions = Counter(
            "koord_queue_admissions", "QueueUnits admitted", ["queue", "quota"], registry=r
        )
        self.admission_wait = Histogram(
            "koord_queue_admission_wait_seconds",
            "Time from a unit's creation to its admission",
            ["queue"],
            buckets=WAIT_BUCKETS,
            registry=r,
        )
        self.preemptions = Counter(
            "koord_queue_preemptions", "QueueUnits preempted", ["quota"], registry=r
        )
        self.requeues = Counter(
            "koord_queue_requeues", "QueueUnits sent back to backoff", ["reason"], registry=r
        )
        self.quota = Gauge(
            "koord_queue_quota",
            "Quota amounts per resource (kind: min, max, runtime, used), in units",
            ["quota", "resource", "kind"],
            registry=r,
        )
        self.quota_history = Gauge(
            "koord_queue_quota_usage_history",
            "Fairness over weeks (docs/fairness.md), per quota and resource, in resource-hours "
            "(kind: decayed: decayed past usage; budget_used: used within the budget's window; budget: the budget)",
            ["quota", "resource", "kind"],
            registry=r,
        )
        self.cycle_duration = Histogram(
            "koord_queue_scheduling_cycle_seconds",
            "Wall time of one scheduling cycle of the engine",
            buckets=CYCLE_BUCKETS,
            registry=r,
        )
        self.api_writes = Counter(
            "koord_queue_api_writes", "Writes the controller made to the API", ["verb", "resource"], registry=r
        )
        self.is_leader = Gauge("koord_queue_leader", "1 while this replica leads", registry=r)
        self.forecast_drain = Gauge(
            "koord_queue_forecast_drain_seconds",
            "Seconds until the last unit now pending in the queue is expected to start (forecaster.py)",
            ["queue"],
            registry=r,
        )
        self.forecast_duration = Gauge(
            "koord_queue_forecast_cpu_seconds", "CPU seconds the last start-time forecast took", registry=r
        )
        # The write made most (several per job): its child looked up once, not at every write.
        self.unit_status_writes = self.api_writes.labels("patch", "queueunits/status")

    def leading(self, leads: bool) -> None:
        """Whether this replica leads. One that stops leading forgets the gauges of the
        queue's state (pending units, quota amounts): the new leader reports them, and
        two replicas reporting pending units would count them twice. Counters stay."""
        self.is_leader.set(1 if leads else 0)
        if not leads:
            self.pending_units.clear()
            self.quota.clear()
            self.quota_history.clear()
            self.forecast_drain.clear()
