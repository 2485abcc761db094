"""Which namespaces' jobs are queued: Kueue's managedJobsNamespaceSelector.

Kubernetes' own namespaces and the controller's are left alone by default: a job there
(a system add-on's, the controller's own tooling) is neither suspended by the webhook nor
given a unit. The selector is one metav1.LabelSelector, the webhook configuration's
namespaceSelector and the controller's filter both: a job the webhook lets through
unsuspended is never suspended later by the controller for being unqueued, nor the other
way round. Opting in instead is a selector such as ``{"matchLabels": {"team": "true"}}``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

from koordqueue.api import constants as c
from koordqueue.controller.selectors import selector_matches

OPERATORS = frozenset({"In", "NotIn", "Exists", "DoesNotExist"})


def default_selector(own_namespace: str) -> dict[str, Any]:
    """Every namespace but Kubernetes' own and ``own_namespace`` (the controller's)."""
    names = list(dict.fromkeys((*c.KUBE_SYSTEM_NAMESPACES, own_namespace)))
    return {"matchExpressions": [{"key": c.LABEL_NAMESPACE_NAME, "operator": "NotIn", "values": names}]}


def parse_selector(text: str) -> dict[str, Any] | None:
    """A label selector given as JSON (the chart's toJson of its value); None for empty text.
    ValueError, saying what is wrong, for anything a namespaceSelector could not be."""
    if not text.strip():
        return None
    try:
        selector = orjson.loads(text)
    except orjson.JSONDecodeError as e:
        raise ValueError(f"not JSON: {e}") from None
    if not isinstance(selector, dict) or set(selector) - {"matchLabels", "matchExpressions"}:
        raise ValueError("a label selector is an object with matchLabels and matchExpressions only")
    labels = selector.get("matchLabels") or {}
    if not isinstance(labels, dict) or not all(isinstance(v, str) for v in labels.values()):
        raise ValueError("matchLabels maps label names to strings")
    for term in selector.get("matchExpressions") or ():
        if not isinstance(term, dict) or not isinstance(term.get("key"), str) or term.get("operator") not in OPERATORS \
                or not isinstance(term.get("values") or [], list):
            raise ValueError(f"a matchExpressions term needs a key, an operator of {sorted(OPERATORS)} and a list "
                             f"of values: {term!r}")
    return selector


def namespace_selected(selector: Mapping[str, Any], namespace: str, labels: Mapping[str, str] | None) -> bool:
    """Whether jobs of ``namespace`` are queued. ``labels``: the namespace's, None when it is not
    known yet (only its name label is, which every namespace carries)."""
    return selector_matches(selector, {**(labels or {}), c.LABEL_NAMESPACE_NAME: namespace})
