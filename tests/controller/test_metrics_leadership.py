"""A replica that stops leading stops reporting the queue's state."""

from __future__ import annotations

from prometheus_client import generate_latest

from koordqueue.controller.metrics import Metrics


def test_a_replica_that_stops_leading_forgets_the_queue_state_and_keeps_its_counters() -> None:
    metrics = Metrics()
    metrics.leading(True)
    metrics.pending_units.labels("koord-queue/team-a").set(7)
    metrics.quota.labels("team-a", "nvidia.com/gpu", "used").set(4)
    metrics.admissions.labels("koord-queue/team-a", "team-a").inc(3)
    text = generate_latest(metrics.registry).decode()
    assert 'koord_queue_pending_units{queue="koord-queue/team-a"} 7.0' in text
    assert "koord_queue_leader 1.0" in text

    metrics.leading(False)
    text = generate_latest(metrics.registry).decode()
    assert "koord_queue_leader 0.0" in text
    assert "koord_queue_pending_units{" not in text and "koord_queue_quota{" not in text
    assert 'koord_queue_admissions_total{queue="koord-queue/team-a",quota="team-a"} 3.0' in text
