"""A job's view reads its metadata and roles once (a restart projects every job: they were
read 14 and 4 times a job), and only while that view is made."""

from __future__ import annotations

import copy

import pytest

from koordqueue.api import constants as c
from koordqueue.controller.views import job_view
from koordqueue.jobs import base
from koordqueue.jobs.pytorchjob import PyTorchJobAdapter

from .conftest import pytorch_job


def test_a_jobs_view_reads_its_metadata_and_roles_once(monkeypatch: pytest.MonkeyPatch) -> None:
    adapter = PyTorchJobAdapter()
    job = pytorch_job("j", annotations={c.ANNOTATION_PRIORITY: "5", c.ANNOTATION_QUEUE: "q"})
    metas: list[object] = []
    roles: list[object] = []
    read_meta, read_roles = base.read_meta, adapter.roles
    monkeypatch.setattr(base, "read_meta", lambda obj, kind: metas.append(obj) or read_meta(obj, kind))
    monkeypatch.setattr(adapter, "roles", lambda obj: roles.append(obj) or read_roles(obj))

    view = job_view(job, adapter, {})

    assert view.invalid is None and view.unit_spec is not None
    assert view.unit_spec["priority"] == 5 and view.unit_spec["queue"] == "q"
    assert len(metas) == 1 and len(roles) == 1


def test_what_was_read_is_forgotten_once_the_view_is_made() -> None:
    adapter = PyTorchJobAdapter()
    job = pytorch_job("j", annotations={c.ANNOTATION_PRIORITY: "5"})
    assert job_view(job, adapter, {}).unit_spec["priority"] == 5

    job["metadata"]["annotations"][c.ANNOTATION_PRIORITY] = "9"  # the same object, changed
    assert adapter.meta(job).annotations[c.ANNOTATION_PRIORITY] == "9"
    assert job_view(job, adapter, {}).unit_spec["priority"] == 9


def test_a_job_read_inside_another_ones_reading_is_read_as_itself() -> None:
    adapter = PyTorchJobAdapter()
    first = pytorch_job("first")
    second = copy.deepcopy(first)
    second["metadata"]["name"] = "second"
    with adapter.reading(first):
        assert adapter.meta(first).name == "first"
        with adapter.reading(second):
            assert adapter.meta(second).name == "second"
            assert adapter.meta(first).name == "first"
        assert adapter.meta(first) is adapter.meta(first)


def test_a_job_whose_metadata_cannot_be_read_still_gets_a_view_saying_why() -> None:
    adapter = PyTorchJobAdapter()
    job = pytorch_job("j")
    job["metadata"]["labels"] = {"a": 1}
    view = job_view(job, adapter, {})
    assert view.invalid is not None and "metadata.labels" in view.invalid
