"""Suite-wide: the real control plane (tests/realcluster.py) and the `control_plane` parameter.

A test marked `both_control_planes` whose fixtures use `control_plane` runs twice: on the
embedded API server, and on the real one (kube-apiserver, etcd, kwok, the training
operator; those cases carry the `kube` marker: `make test-kube`).
"""

from __future__ import annotations

import pytest

from koordqueue.realcluster.cluster import RealCluster

pytest_plugins = ["tests.realcluster"]


@pytest.fixture
def control_plane() -> str:
    """Which control plane a system runs on; parametrised by `both_control_planes`."""
    return "embedded"


@pytest.fixture
def real_or_none(control_plane: str, request: pytest.FixtureRequest) -> RealCluster | None:
    """The session's real control plane, reset, when this case runs on it; else None."""
    return request.getfixturevalue("kube") if control_plane == "kube" else None


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The files with a test marked slow run first, each in its own order (a stable sort): on
    the workers of `make test` (one file per worker) the minute-long ones start at once, not last."""
    slow = {item.path for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: item.path not in slow)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "control_plane" in metafunc.fixturenames and metafunc.definition.get_closest_marker("both_control_planes"):
        metafunc.parametrize("control_plane", ["embedded", pytest.param("kube", marks=pytest.mark.kube)])
