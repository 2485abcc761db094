"""metav1.LabelSelector matching, for a Queue's admissionChecks[].labelSelector."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def selector_matches(selector: Mapping[str, Any] | None, labels: Mapping[str, str]) -> bool:
    """Kubernetes semantics: a nil or empty selector matches everything; matchLabels
    and every matchExpressions term (In, NotIn, Exists, DoesNotExist) must all hold.
    An operator we do not know matches nothing, so a typo never widens a check's reach."""
    if not selector:
        return True
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(str(key)) != str(value):
            return False
    for term in selector.get("matchExpressions") or ():
        if not isinstance(term, Mapping):
            return False
        key, operator = str(term.get("key", "")), term.get("operator")
        values = [str(v) for v in term.get("values") or ()]
        present = key in labels
        if operator == "In":
            ok = present and labels[key] in values
        elif operator == "NotIn":
            ok = not present or labels[key] not in values
        elif operator == "Exists":
            ok = present
        elif operator == "DoesNotExist":
            ok = not present
        else:
            ok = False
        if not ok:
            return False
    return True
