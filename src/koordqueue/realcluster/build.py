"""Build the real control plane's programs from the Go modules pinned in `e2e/`.

Each folder of `e2e/` is one Go module of ours (go.mod, go.sum and a tools.go that
imports the programs); it pins upstream Kubernetes, etcd, kwok and the training
operator. The binaries go to `.tools/kube/<module>-<key>/`, where the key hashes what
decides the build (go.mod, go.sum, the flags, the Go version): a pin that changes
builds anew, one that does not is never built twice.

    python -m koordqueue.realcluster.build          # build what is missing
    python -m koordqueue.realcluster.build cluster  # only the programs of e2e/cluster
    python -m koordqueue.realcluster.build --print  # the folder of each program

The control plane (`CONTROL_PLANE`: e2e/cluster and e2e/training-operator) is what
`RealCluster` and `up --control-plane kube` need; e2e/kueue is for the bench only;
e2e/koordinator (koord-scheduler, koord-manager) for the suite's Koordinator variant;
e2e/kuberay (KubeRay's operator) for its KubeRay variant.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
E2E = REPO / "e2e"
TOOLS_DIR = Path(os.environ.get("KOORD_QUEUE_TOOLS", REPO / ".tools")) / "kube"


class BuildError(Exception):
    """A program could not be built: said in words (Go missing, a module not served, ...)."""


@dataclass(frozen=True)
class Module:
    """One Go module of ours under e2e/ and the programs built from it."""

    folder: str
    programs: dict[str, str]  # binary name -> Go package path
    version_of: str = ""  # the module whose version the binaries report (ldflags)

    @property
    def path(self) -> Path:
        return E2E / self.folder

    def pinned(self, module: str) -> str:
        """The version go.mod requires of `module`."""
        found = re.search(rf"^\s*(?:require\s+)?{re.escape(module)}\s+(v\S+)", (self.path / "go.mod").read_text(), re.M)
        if not found:
            raise BuildError(f"{self.path / 'go.mod'} does not require {module}")
        return found.group(1)

    def ldflags(self) -> str:
        flags = ["-s", "-w"]
        if self.version_of == "k8s.io/kubernetes":
            # What Kubernetes' own build sets (hack/lib/version.sh): /version reports the release,
            # which helm's kubeVersion check and kubectl read.
            version = self.pinned("k8s.io/kubernetes")
            major, minor = version.lstrip("v").split(".")[:2]
            for pkg in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
                flags += [f"-X {pkg}.gitVersion={version}", f"-X {pkg}.gitMajor={major}",
                          f"-X {pkg}.gitMinor={minor}", f"-X {pkg}.gitTreeState=clean",
                          f"-X {pkg}.buildDate=1970-01-01T00:00:00Z"]
            flags.append(f"-X go.etcd.io/etcd/api/v3/version.GitSHA={self.pinned('go.etcd.io/etcd/server/v3')}")
            flags.append(f"-X sigs.k8s.io/kwok/pkg/consts.Version={self.pinned('sigs.k8s.io/kwok')}")
        return " ".join(flags)

    def key(self, go_version: str) -> str:
        digest = hashlib.sha256()
        for name in ("go.mod", "go.sum"):
            digest.update((self.path / name).read_bytes())
        digest.update(self.ldflags().encode())
        digest.update(go_version.encode())
        digest.update(" ".join(f"{k}={v}" for k, v in sorted(self.programs.items())).encode())
        return digest.hexdigest()[:12]


MODULES = (
    Module("cluster", {
        "kube-apiserver": "k8s.io/kubernetes/cmd/kube-apiserver",
        "kube-controller-manager": "k8s.io/kubernetes/cmd/kube-controller-manager",
        "kube-scheduler": "k8s.io/kubernetes/cmd/kube-scheduler",
        "etcd": "go.etcd.io/etcd/server/v3",
        "kwok": "sigs.k8s.io/kwok/cmd/kwok",
    }, version_of="k8s.io/kubernetes"),
    Module("training-operator", {
        "training-operator": "github.com/kubeflow/training-operator/cmd/training-operator.v1",
    }),
    # Kueue, for the side-by-side bench (bench/versus_kueue.py): its scheduler performance
    # test's runner and minimal manager, and its full manager for the batch Job integration.
    Module("kueue", {
        "kueue": "sigs.k8s.io/kueue/cmd/kueue",
        "kueue-perf-runner": "sigs.k8s.io/kueue/test/performance/scheduler/runner",
        "minimalkueue": "sigs.k8s.io/kueue/test/performance/scheduler/minimalkueue",
    }),
    # Koordinator's scheduler and manager, which the guide's users run beside us: the
    # real-cluster suite's Koordinator variant (tests/kubecluster/test_koordinator.py).
    Module("koordinator", {
        "koord-scheduler": "github.com/koordinator-sh/koordinator/cmd/koord-scheduler",
        "koord-manager": "github.com/koordinator-sh/koordinator/cmd/koord-manager",
    }),
    # KubeRay's operator, which makes the pods of RayClusters and RayJobs: the real-cluster
    # suite's KubeRay variant (tests/kubecluster/test_kuberay.py).
    Module("kuberay", {
        "kuberay-operator": "github.com/ray-project/kuberay/ray-operator",
    }),
)
CONTROL_PLANE = tuple(m for m in MODULES if m.folder in ("cluster", "training-operator"))
KOORDINATOR = next(m for m in MODULES if m.folder == "koordinator")
KUBERAY = next(m for m in MODULES if m.folder == "kuberay")


def modules_named(names: list[str]) -> tuple[Module, ...]:
    """The modules of these e2e/ folders (all of them when none is named)."""
    known = {m.folder: m for m in MODULES}
    unknown = [n for n in names if n not in known]
    if unknown:
        raise BuildError(f"no module e2e/{unknown[0]}; the modules are {', '.join(known)}")
    return tuple(known[n] for n in names) if names else MODULES


def module_source(folder: str, module: str) -> Path:
    """Where Go's module cache keeps `module` at the version e2e/<folder>/go.mod pins (its
    manifests: CRDs, webhooks, configs); downloaded when it is not there yet."""
    pinned = next(m for m in MODULES if m.folder == folder).pinned(module)
    result = subprocess.run(["go", "mod", "download", "-json", f"{module}@{pinned}"],
                            cwd=E2E / folder, capture_output=True, text=True)
    if result.returncode != 0:
        raise BuildError(f"cannot find {module}@{pinned}: {result.stderr[-1000:]}")
    return Path(json.loads(result.stdout)["Dir"])


def binary_name(package: str) -> str:
    """The file `go build -o DIR/` makes for `package`: its last element, a /vN suffix dropped."""
    parts = package.rstrip("/").split("/")
    return parts[-2] if len(parts) > 1 and re.fullmatch(r"v\d+", parts[-1]) else parts[-1]


def go_version() -> str:
    go = shutil.which("go")
    if go is None:
        raise BuildError("Go is not installed: the real control plane is built from Go modules "
                         "(Go 1.26 or newer; `apt-get install golang` is too old, see the README)")
    return subprocess.run([go, "env", "GOVERSION"], capture_output=True, text=True, check=True).stdout.strip()


def folder(module: Module, version: str) -> Path:
    return TOOLS_DIR / f"{module.folder}-{module.key(version)}"


def binaries(version: str | None = None, modules: tuple[Module, ...] = MODULES) -> dict[str, Path]:
    """Where each program of `modules` is (or will be) once built."""
    version = version or go_version()
    return {name: folder(m, version) / name for m in modules for name in m.programs}


def build(say: Callable[[str], None] = print, modules: tuple[Module, ...] = MODULES) -> dict[str, Path]:
    """Build every program of `modules` that is not built yet; return the path of each."""
    version = go_version()
    for module in modules:
        dest = folder(module, version)
        todo = [name for name in module.programs if not (dest / name).exists()]
        if not todo:
            continue
        say(f"building {', '.join(todo)} from e2e/{module.folder} with {version} "
            f"(the first build takes 10-20 minutes on 2 cores; later ones are cached)")
        started = time.monotonic()
        partial = dest.with_name(dest.name + ".partial")
        partial.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, "CGO_ENABLED": "0", "GOFLAGS": "-mod=readonly -buildvcs=false"}
        command = ["go", "build", "-trimpath", "-ldflags", module.ldflags(), "-o", str(partial) + os.sep,
                   *(module.programs[name] for name in todo)]
        result = subprocess.run(command, cwd=module.path, env=env, capture_output=True, text=True)
        if result.returncode != 0:
            raise BuildError(f"go build in e2e/{module.folder} failed:\n{result.stderr[-4000:]}")
        for name, package in module.programs.items():
            if name not in todo:
                continue
            built = partial / binary_name(package)
            if not built.exists():
                raise BuildError(f"go build made no {built.name} for {package}")
            dest.mkdir(parents=True, exist_ok=True)
            os.replace(built, dest / name)
        shutil.rmtree(partial, ignore_errors=True)
        say(f"built {', '.join(todo)} in {time.monotonic() - started:.0f} s into {dest}")
    return binaries(version, modules)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("modules", nargs="*", help="e2e/ folders to build (default: all)")
    parser.add_argument("--print", action="store_true", help="print where each program is, build nothing")
    args = parser.parse_args(argv)
    try:
        modules = modules_named(args.modules)
        paths = binaries(modules=modules) if args.print else build(modules=modules)
    except BuildError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    for name, path in paths.items():
        print(f"{name}\t{path}\t{'built' if path.exists() else 'missing'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
