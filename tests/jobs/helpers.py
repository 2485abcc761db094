"""Shared helpers of the adapter tests: manifests from data/, and RFC 7386 merge patch."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from koordqueue.apiserver.patch import merged

DATA = Path(__file__).parent / "data"
GI = 2**30 * 1000  # one Gi in milli-units
MI = 2**20 * 1000


def load(name: str) -> dict[str, Any]:
    return yaml.safe_load((DATA / name).read_text())


def merge_patch(target: Any, patch: Any) -> Any:
    """Apply a JSON merge patch as the API server does (None removes a key)."""
    return merged(target, patch)
