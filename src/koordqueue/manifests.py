"""The files made from the code by ``make generate``, and the CRDs the embedded control
plane serves: every CRD to config/crd, ours to the chart's crds/, and the chart's list
of job kinds (templates/_kinds.tpl) from the kinds' registrations (jobs/__init__.py).

    python -m koordqueue.manifests --write config/crd --chart charts/koord-queue

Tests fail when a written file drifts from what this module makes.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from koordqueue.api.crds import file_name, our_crds, render
from koordqueue.jobs import KINDS
from koordqueue.jobs.kind import JobKind

CHART_KINDS = Path("templates") / "_kinds.tpl"  # in the chart


def operator_crds(kinds: Iterable[JobKind] = KINDS) -> list[dict[str, Any]]:
    """The job kinds' CRDs, as their operators install them, for the embedded control plane."""
    return [kind.crd() for kind in kinds if kind.crd is not None]


def all_crds(kinds: Iterable[JobKind] = KINDS) -> list[dict[str, Any]]:
    return our_crds() + operator_crds(kinds)


def chart_kinds(kinds: Iterable[JobKind] = KINDS) -> str:
    """The chart's templates/_kinds.tpl: one line per kind, read by _helpers.tpl."""
    lines = [
        "{{/* Written by `make generate` (python -m koordqueue.manifests) from the job kinds'",
        "     registrations, src/koordqueue/jobs/__init__.py: do not edit. One per extension value,",
        "     in the order --job-kinds lists them: its kind, and the API group, version and",
        "     resource that the webhook and the ClusterRole name; the webhook names every",
        "     version the kind is read in (versions: its own first); the validating one its",
        "     scale subresource too, where its CRD has one (scale: true). */}}",
        '{{- define "koord-queue.extensionKinds" -}}',
        "kinds:",
        *(f"- {{extension: {k.extension}, kind: {k.kind}, group: {k.group}, version: {k.version}, "
          f"versions: [{', '.join(k.versions)}], resource: {k.plural}, "
          f"scale: {'true' if k.scale_role else 'false'}}}" for k in kinds),
        "{{- end -}}",
    ]
    return "\n".join(lines) + "\n"


def _write(directory: Path, manifests: list[dict[str, Any]]) -> list[Path]:
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for manifest in manifests:
        path = directory / file_name(manifest)
        path.write_text(render(manifest))
        paths.append(path)
    return paths


def write(directory: Path) -> list[Path]:
    """Every CRD to ``directory`` as ``<plural>.<group>.yaml`` (config/crd)."""
    return _write(directory, all_crds())


def write_chart(chart: Path) -> list[Path]:
    """Into a Helm chart: our CRDs (ElasticQuota, Queue, QueueUnit) to ``crds/``, the very
    bytes ``write`` puts in config/crd, and the job kinds to ``templates/_kinds.tpl``."""
    paths = _write(chart / "crds", our_crds())
    kinds = chart / CHART_KINDS
    kinds.write_text(chart_kinds())
    return [*paths, kinds]


def main() -> None:
    parser = argparse.ArgumentParser(description="Write the CRD manifests and the chart's job kinds.")
    parser.add_argument("--write", type=Path, required=True, help="directory for every CRD (config/crd)")
    parser.add_argument("--chart", type=Path, help="the Helm chart: our CRDs to crds/, the kinds to templates/")
    args = parser.parse_args()
    paths = write(args.write)
    if args.chart is not None:
        paths += write_chart(args.chart)
    for path in paths:
        print(path)


if __name__ == "__main__":
    main()
