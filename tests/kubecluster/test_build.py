"""Which Go modules are built for what (Go-free: nothing is built or started here)."""

from __future__ import annotations

from pathlib import Path

import pytest

from koordqueue.realcluster import build, kueue
from koordqueue.realcluster.cluster import ClusterError, RealCluster


def test_the_control_plane_is_built_without_kueue() -> None:
    control_plane = build.binaries("go0", build.CONTROL_PLANE)
    assert {"kube-apiserver", "etcd", "kwok", "training-operator"} <= set(control_plane)
    assert not {"kueue", "minimalkueue", "kueue-perf-runner"} & set(control_plane)
    assert {"kueue", "minimalkueue", "kueue-perf-runner"} <= set(build.binaries("go0"))


def test_modules_are_named_by_their_folder() -> None:
    assert build.modules_named([]) == build.MODULES
    assert [m.folder for m in build.modules_named(["kueue", "cluster"])] == ["kueue", "cluster"]
    with pytest.raises(build.BuildError, match="no module e2e/nope; the modules are cluster, training-operator, kueue"):
        build.modules_named(["nope"])


def test_kueue_is_pinned_in_its_own_module() -> None:
    kueue = build.modules_named(["kueue"])[0]
    assert kueue.pinned("sigs.k8s.io/kueue") == "v0.17.0"
    go_mod = (kueue.path / "go.mod").read_text()
    assert "replace" not in go_mod  # Kueue's go.mod needs none
    tools = (kueue.path / "tools.go").read_text()
    assert all(f'"{package}"' in tools for package in kueue.programs.values())


def test_a_cluster_needs_only_the_control_plane_built(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(build, "TOOLS_DIR", tmp_path / "nothing-built")
    monkeypatch.setattr(build, "go_version", lambda: "go0")
    with pytest.raises(ClusterError) as raised:
        RealCluster(tmp_path / "state").start()
    assert "kube-apiserver" in str(raised.value) and "training-operator" in str(raised.value)
    assert "kueue" not in str(raised.value)


def test_kueue_is_asked_for_by_its_build_command_when_not_built(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """What the side-by-side bench and its test see without Kueue's binaries: a skip, a clear message."""
    monkeypatch.setattr(build, "TOOLS_DIR", tmp_path / "nothing-built")
    monkeypatch.setattr(build, "go_version", lambda: "go0")
    assert not kueue.built()
    with pytest.raises(ClusterError, match=r"not built yet: kueue, kueue-perf-runner, minimalkueue; run "
                                           r"`python -m koordqueue.realcluster.build kueue`"):
        kueue.binaries()


def test_kuberay_is_pinned_in_its_own_module_at_one_kubernetes_release() -> None:
    """KubeRay's operator: its main package imported, every k8s.io library at the release its
    own go.mod names (v0.34.1), and no replace line (KubeRay's go.mod has none to repeat)."""
    kuberay = build.modules_named(["kuberay"])[0]
    assert kuberay.pinned("github.com/ray-project/kuberay/ray-operator") == "v1.5.0"
    assert kuberay.programs == {"kuberay-operator": "github.com/ray-project/kuberay/ray-operator"}
    assert build.binary_name(kuberay.programs["kuberay-operator"]) == "ray-operator"
    go_mod = (kuberay.path / "go.mod").read_text()
    assert "replace" not in go_mod
    releases = {kuberay.pinned(f"k8s.io/{lib}") for lib in ("api", "apimachinery", "apiserver", "client-go",
                                                             "component-base", "apiextensions-apiserver")}
    assert releases == {"v0.34.1"}
    tools = (kuberay.path / "tools.go").read_text()
    assert all(f'"{package}"' in tools for package in kuberay.programs.values())


def test_a_kuberay_cluster_needs_kuberay_built(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(build, "TOOLS_DIR", tmp_path / "nothing-built")
    monkeypatch.setattr(build, "go_version", lambda: "go0")
    with pytest.raises(ClusterError, match=r"kuberay-operator.*build cluster training-operator kuberay"):
        RealCluster(tmp_path / "state", kuberay=True).start()
