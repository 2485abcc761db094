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
from koordqueue.controller.views import adapter_of_kind, job_view, queue_unit_manifest
from koordqueue.kube.client import Resource

from ..jobs.helpers import load
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
        assert job.unit_spec is not None and job.unit_spec["consumerRef"]["apiVersion"] == c.MPI_V1ALPHA1_API_VERSION
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


@pytest.mark.parametrize("listed_as", [c.KUBEFLOW_API_VERSION, c.MPI_V1ALPHA1_API_VERSION])
def test_a_unit_names_its_mpijob_in_the_version_it_was_written_in(listed_as: str) -> None:
    """One stored MPIJob is served in v1 and v1alpha1 alike (no conversion): a job in the
    v1alpha1 form is named kubeflow.org/v1alpha1 by its unit (consumerRef, owner), whichever
    version it was read in; one in the v1 form, by the version it was read in."""
    adapter = adapter_of_kind(c.MPI_JOB_KIND)
    alpha = job_view({**mpi_v1alpha1("hvd", None), "apiVersion": listed_as}, adapter, {})
    assert alpha.unit_spec is not None and alpha.invalid is None
    assert alpha.unit_spec["consumerRef"]["apiVersion"] == alpha.api_version == c.MPI_V1ALPHA1_API_VERSION
    assert queue_unit_manifest(alpha)["metadata"]["ownerReferences"][0]["apiVersion"] == c.MPI_V1ALPHA1_API_VERSION
    v1 = job_view({**load("mpijob.yaml"), "apiVersion": listed_as}, adapter, {})
    assert v1.unit_spec is not None and v1.invalid is None
    assert v1.unit_spec["consumerRef"]["apiVersion"] == v1.api_version == listed_as
