"""A kind read in more than one version (MPIJob: kubeflow.org/v1, and the mpi-operator's
v1alpha1) is read and written in the first the API server serves: a cluster whose
mpi-operator CRD serves v1alpha1 alone answers 404 for v1, and an informer of v1 there
would never sync."""

from __future__ import annotations

from typing import Any

import pytest

from koordqueue.api import constants as c
from koordqueue.controller.informers import job_resource
from koordqueue.controller.jobswitch import JobSwitch
from koordqueue.controller.views import adapter_of_kind
from koordqueue.kube.client import Resource

from .fakeapi import FakeKube, shared_on, status_error
from .test_app_kinds import mpi_v1alpha1

V1ALPHA1 = job_resource(c.MPI_JOB_KIND, c.MPI_V1ALPHA1_API_VERSION)


@pytest.mark.parametrize("v1_served", [True, False])
async def test_mpijobs_are_read_and_written_in_the_version_served(v1_served: bool) -> None:
    fake = FakeKube()
    fake.seed(V1ALPHA1, mpi_v1alpha1("hvd", None))
    if not v1_served:  # (the fake serves every version: the probe of v1 answers as such a server does)
        fake.fail_next(status_error(404, "NotFound", "the server could not find the requested resource"),
                       verb="list", plural=c.MPI_JOB_PLURAL)
    shared = shared_on(fake)
    informers = shared.informers
    await informers.start()
    try:
        served = job_resource(c.MPI_JOB_KIND) if v1_served else V1ALPHA1
        assert informers.jobs[c.MPI_JOB_KIND].resource == served == informers.job_resource(c.MPI_JOB_KIND)
        assert informers.job_resource(c.PYTORCH_JOB_KIND) == job_resource(c.PYTORCH_JOB_KIND)  # (not probed)
        job = informers.job_view(f"{c.MPI_JOB_KIND}/default/hvd")
        assert job is not None and job.invalid is None
        assert job.api_version == c.MPI_V1ALPHA1_API_VERSION  # as listed (its unit's owner reference)
        written: list[Resource] = []
        patch = fake.patch

        async def recording(resource: Resource, *args: Any, **kwargs: Any) -> Any:
            written.append(resource)
            return await patch(resource, *args, **kwargs)

        fake.patch = recording  # type: ignore[method-assign]
        await JobSwitch(shared).suspend(job, adapter_of_kind(c.MPI_JOB_KIND))
        assert written == [served]
    finally:
        for informer in informers.all():
            await informer.stop()
