"""The pages made from the code (docs/annotations.md, the metrics table) have not drifted,
and the reference explains every label and annotation of api/constants.py."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

from koordqueue.api import constants as c
from koordqueue.api.reference import NOT_DOCUMENTED, REFERENCE, constant_names, markdown
from koordqueue.controller.metrics import Metrics
from tests.docs.harness import ROOT


def gen_docs() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_docs", ROOT / "scripts" / "gen_docs.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_generated_pages_are_up_to_date() -> None:
    for path, text in gen_docs().expected().items():
        assert path.read_text() == text, f"{path.relative_to(ROOT)} drifted: run make generate"


def test_check_mode_fails_on_drift(tmp_path: Path) -> None:
    result = subprocess.run([sys.executable, str(ROOT / "scripts" / "gen_docs.py"), "--check"],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
    module = gen_docs()
    module.ANNOTATIONS = tmp_path / "annotations.md"
    module.ANNOTATIONS.write_text("stale\n")
    (stale,) = [p for p, text in module.expected().items() if not p.exists() or p.read_text() != text]
    assert stale == module.ANNOTATIONS


def test_every_label_and_annotation_is_explained_once() -> None:
    keys = [k.key for k in REFERENCE]
    assert len(keys) == len(set(keys)), "a key is explained twice"
    constants = {getattr(c, name): name for name in constant_names()}
    unexplained = sorted(name for value, name in constants.items() if value not in keys and name not in NOT_DOCUMENTED)
    assert unexplained == [], f"explain these in src/koordqueue/api/reference.py (or NOT_DOCUMENTED): {unexplained}"
    assert set(keys) <= set(constants), "the reference names a key that constants.py does not have"
    assert set(NOT_DOCUMENTED) <= set(constants.values())


def test_the_page_has_one_table_with_a_row_per_key() -> None:
    text = markdown()
    rows = [line for line in text.splitlines() if line.startswith("| `")]
    assert len(rows) == len(REFERENCE)
    assert text.count("| Key |") == 1
    for key in (c.ANNOTATION_SUSPEND, c.ANNOTATION_QUEUE, c.ANNOTATION_PRIORITY, c.LABEL_QUEUE_POLICY,
                c.LABEL_QUOTA_NAME):
        assert f"| `{key}` |" in text


def test_metrics_page_names_every_metric_and_no_other() -> None:
    text = (ROOT / "docs" / "metrics.md").read_text()
    registry = Metrics().registry
    exposed = set()
    for family in registry.collect():
        exposed.add(f"{family.name}_total" if family.type == "counter" else family.name)
    mentioned = set(re.findall(r"\bkoord_queue_[a-z_]+", text))
    histogram_parts = {f"{name}_{suffix}" for name in exposed for suffix in ("bucket", "sum", "count")}
    assert exposed <= mentioned
    assert mentioned <= exposed | histogram_parts, mentioned - exposed - histogram_parts
