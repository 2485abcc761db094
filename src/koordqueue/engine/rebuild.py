"""Deriving the ledger from the Engine's inputs again, after quotas or queues changed (rare):
the quotas validated, the quota tree, the directory of tenants, the flavors and the queues
built anew, and every unit attached again where its info says (queued ones loaded at once).
"""

from __future__ import annotations

from collections.abc import Mapping

from koordqueue.engine import flavorsets
from koordqueue.engine.fairness import Fairness
from koordqueue.engine.ledger import Ledger, UnitState
from koordqueue.engine.model import EngineConfig, QueueInfo, QuotaInfo, ResourceList
from koordqueue.engine.pending import Entry, Shape
from koordqueue.engine.tenancy import build_directory
from koordqueue.engine.tree import QuotaTree
from koordqueue.engine.validation import validate_quotas


def rebuild(ledger: Ledger, quotas: Mapping[str, QuotaInfo], queues: Mapping[str, QueueInfo],
            capacity: ResourceList | None, config: EngineConfig, fair: Fairness) -> tuple[dict[str, str], dict[str, str]]:
    """Derive ``ledger`` from the inputs again; returns why some quotas cannot be used (by
    name) and what is wrong with some parents' flavors (by parent name)."""
    ledger.rebuild_needed = False
    reasons = validate_quotas(quotas)
    tree = QuotaTree(
        [fair.effective(q) for q in quotas.values() if q.name not in reasons], capacity,
        config.oversell_rate, config.koordinator,
    )
    ledger.reset(tree, build_directory(quotas, queues, reasons))
    ledger.flavorings, flavor_problems = flavorsets.build(tree, quotas)
    for key in sorted(queues):
        queue = queues[key]
        node = tree.nodes.get(queue.quota) if queue.quota is not None else None
        if node is not None and node.info is not None and (not node.info.is_parent or node in ledger.flavorings):
            ledger.new_queue(queue, node)
    bulk: dict[str, list[tuple[Entry, Shape]]] = {}
    tree.defer()
    units = ledger.units
    for record in units.values():
        previous = record.state
        record.state = UnitState.PARKED
        record.queue = None
        record.node = None
        ledger.attach(record, previous, bulk=bulk)
    removed = ledger.removed_parents
    if removed:  # keep those still named by admitted units, and those between
        kept: dict[str, str | None] = {}
        for record in units.values():
            current = record.info.admitted_quota
            while current in removed and current not in kept:
                kept[current] = parent = removed[current]
                current = parent
        ledger.removed_parents = kept
    tree.settle()
    for key, items in bulk.items():
        ledger.qs[key].pending.load(items)
    ledger.stale = set(ledger.qs)
    return reasons, flavor_problems
