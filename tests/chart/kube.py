"""kubectl 1.32 (and helm) against the embedded API server, for the chart and docs tests."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from koordqueue.apiserver.testing import ThreadedAPIServer

KUBECTL = shutil.which("kubectl")


@dataclass
class Cluster:
    """A running embedded API server and the environment that points kubectl and helm at it."""

    server: ThreadedAPIServer
    home: Path

    @property
    def kubeconfig(self) -> Path:
        return self.server.kubeconfig_path

    def env(self, extra_path: list[Path] | None = None) -> dict[str, str]:
        """A clean environment: HOME of its own (kubectl's and helm's caches), KUBECONFIG."""
        path = [str(p) for p in extra_path or []]
        path += [str(Path(KUBECTL).parent)] if KUBECTL else []
        path += os.environ.get("PATH", "/usr/bin:/bin").split(os.pathsep)
        return {
            "HOME": str(self.home),
            "PATH": os.pathsep.join(path),
            "KUBECONFIG": str(self.kubeconfig),
            "HELM_CACHE_HOME": str(self.home / ".cache" / "helm"),
            "HELM_CONFIG_HOME": str(self.home / ".config" / "helm"),
            "HELM_DATA_HOME": str(self.home / ".local" / "share" / "helm"),
            "LANG": "C.UTF-8",
        }

    def kubectl(self, *args: str, stdin: str | None = None, check: bool = True,
                timeout: float = 30) -> subprocess.CompletedProcess[str]:
        assert KUBECTL, "kubectl is not installed"
        result = subprocess.run([KUBECTL, *args], input=stdin, capture_output=True, text=True,
                                timeout=timeout, env=self.env())
        if check and result.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed ({result.returncode}):\n{result.stderr}")
        return result

    def get_json(self, *args: str) -> Any:
        return json.loads(self.kubectl("get", *args, "-o", "json").stdout)


@contextmanager
def embedded_cluster(root: Path, crds: list[dict[str, Any]] | None = None) -> Iterator[Cluster]:
    """The embedded API server in a thread (so blocking subprocesses never block it)."""
    home = root / "home"
    home.mkdir(parents=True, exist_ok=True)
    with ThreadedAPIServer(root / "state", crds=crds) as server:
        yield Cluster(server, home)
