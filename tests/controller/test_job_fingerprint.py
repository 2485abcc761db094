"""A job's view is made afresh only when what its unit is made from changed."""

from __future__ import annotations

import copy

from koordqueue.api import constants as c
from koordqueue.controller.informers import _job_fingerprint

from .conftest import pytorch_job


def test_suspension_and_status_leave_the_fingerprint_alone_and_the_rest_does_not() -> None:
    job = pytorch_job("j", annotations={c.ANNOTATION_SUSPEND: c.TRUE})
    job["metadata"].update(uid="u1", creationTimestamp="2026-01-01T00:00:00Z")
    job["spec"]["runPolicy"] = {"suspend": True, "cleanPodPolicy": "None"}
    base = _job_fingerprint(job, 0)

    resumed = copy.deepcopy(job)
    del resumed["metadata"]["annotations"][c.ANNOTATION_SUSPEND]
    resumed["spec"]["runPolicy"]["suspend"] = False
    resumed["status"] = {"conditions": [{"type": "Running", "status": "True"}]}
    assert _job_fingerprint(resumed, 0) == base
    assert job["spec"]["runPolicy"]["suspend"] is True  # the object is not changed

    for change in (
        lambda j: j["spec"]["pytorchReplicaSpecs"]["Worker"].update(replicas=3),
        lambda j: j["spec"]["runPolicy"].update(cleanPodPolicy="All"),
        lambda j: j["metadata"]["annotations"].update({c.ANNOTATION_PRIORITY: "7"}),
        lambda j: j["metadata"]["labels"].update({c.LABEL_QUOTA_NAME: "other"}),
        lambda j: j["metadata"].update(uid="u2"),
    ):
        changed = copy.deepcopy(job)
        change(changed)
        assert _job_fingerprint(changed, 0) != base
    assert _job_fingerprint(job, 1) != base  # priority classes changed
