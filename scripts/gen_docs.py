#!/usr/bin/env python3
"""Write the parts of docs/ that come from the code, or with --check, fail when they drifted.

- docs/annotations.md: the whole page, from src/koordqueue/api/reference.py.
- docs/metrics.md: the table between the `generated:metrics` markers, from the
  controller's metrics (src/koordqueue/controller/metrics.py).
- docs/architecture.md: the QueueUnit phase table between the `generated:phases` markers,
  from src/koordqueue/controller/phases.py.

    python scripts/gen_docs.py [--check]
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from prometheus_client import Counter, Gauge, Histogram

from koordqueue.api.reference import markdown as annotations_markdown
from koordqueue.controller.metrics import Metrics
from koordqueue.controller.phases import markdown as phases_markdown

ROOT = Path(__file__).resolve().parents[1]
ANNOTATIONS = ROOT / "docs" / "annotations.md"
METRICS = ROOT / "docs" / "metrics.md"
BEGIN = "<!-- generated:metrics (scripts/gen_docs.py from src/koordqueue/controller/metrics.py) -->"
END = "<!-- end generated:metrics -->"
ARCHITECTURE = ROOT / "docs" / "architecture.md"
PHASES_BEGIN = "<!-- generated:phases (scripts/gen_docs.py from src/koordqueue/controller/phases.py) -->"
PHASES_END = "<!-- end generated:phases -->"


def metric_rows() -> list[tuple[str, str, list[str], str]]:
    """(name as scraped, type, labels, help) of every metric the controller exposes."""
    rows = []
    for metric in vars(Metrics()).values():
        if not isinstance(metric, (Counter, Gauge, Histogram)) or metric._labelvalues:
            continue  # not a metric, or one labelled child of a metric listed already
        name, labels, doc = metric._name, list(metric._labelnames), metric._documentation
        if isinstance(metric, Counter):
            rows.append((f"{name}_total", "counter", labels, doc))
        elif isinstance(metric, Histogram):
            rows.append((name, "histogram", labels, doc + " (`_bucket`, `_sum`, `_count`)"))
        else:
            rows.append((name, "gauge", labels, doc))
    return rows


def metrics_table() -> str:
    lines = ["| Metric | Type | Labels | Meaning |", "| --- | --- | --- | --- |"]
    for name, kind, labels, doc in metric_rows():
        label_text = ", ".join(f"`{label}`" for label in labels) or "-"
        lines.append(f"| `{name}` | {kind} | {label_text} | {doc} |")
    return "\n".join(lines)


def between(current: str, begin: str, end: str, text: str, path: Path) -> str:
    """``current`` with ``text`` between the markers ``begin`` and ``end``."""
    pattern = re.compile(re.escape(begin) + r".*?" + re.escape(end), re.S)
    if not pattern.search(current):
        raise SystemExit(f"{path}: no {begin} ... {end} markers")
    return pattern.sub(lambda _: f"{begin}\n{text}\n{end}", current)


def metrics_page(current: str) -> str:
    return between(current, BEGIN, END, metrics_table(), METRICS)


def expected() -> dict[Path, str]:
    return {ANNOTATIONS: annotations_markdown(), METRICS: metrics_page(METRICS.read_text()),
            ARCHITECTURE: between(ARCHITECTURE.read_text(), PHASES_BEGIN, PHASES_END, phases_markdown(), ARCHITECTURE)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="only report files that differ; exit 1 if any")
    args = parser.parse_args()
    stale = []
    for path, text in expected().items():
        if path.exists() and path.read_text() == text:
            continue
        stale.append(path)
        if not args.check:
            path.write_text(text)
            print(f"wrote {path.relative_to(ROOT)}")
    if args.check and stale:
        print("out of date (run: make generate): " + ", ".join(str(p.relative_to(ROOT)) for p in stale))
        sys.exit(1)


if __name__ == "__main__":
    main()
