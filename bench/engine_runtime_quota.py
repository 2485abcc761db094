"""Runtime-quota refresh for 10,000 quotas in a 3-level tree with 3 resources.

20 top-level quotas x 20 middle x 24 leaves (10,020 quotas), each leaf with usage and
pending requests drawn so that most sibling groups are contended (demand above the
parent's total), under a bounded cluster.

Demand is kept current as usage and requests change (as Koordinator keeps each
quota's request up its tree), so it is timed with those changes: loading the usage and
requests of every leaf, per change. A refresh then splits runtime quota: a full one
water-fills every sibling group of every resource, as after a rebuild (target <= 20 ms);
an incremental one after 1 and after 100 leaves changed, printed with the time of the
changes themselves.
"""

from __future__ import annotations

import random
import statistics
import time

from koordqueue.engine.model import QuotaInfo
from koordqueue.engine.tree import QuotaTree

RESOURCES = ("cpu", "memory", "nvidia.com/gpu")
TOP, MIDDLE, LEAVES = 20, 20, 24
UNIT = 1000
GI = 1024**3 * 1000


def quotas(rng: random.Random) -> list[QuotaInfo]:
    """A valid tree: each parent's min is its children's mins; maxes leave room to borrow."""
    out: list[QuotaInfo] = []

    def make(name: str, parent: str | None, scale: int, is_parent: bool) -> QuotaInfo:
        low = {"cpu": 4 * scale * UNIT, "memory": 16 * scale * GI, "nvidia.com/gpu": scale * UNIT}
        high = {k: v * 3 for k, v in low.items()}
        weight = {k: v * rng.randint(1, 4) for k, v in low.items()}
        return QuotaInfo(name, "default", low, high, parent=parent, is_parent=is_parent,
                         shared_weight=weight, allow_lent=rng.random() > 0.1)

    for t in range(TOP):
        out.append(make(f"t{t}", None, MIDDLE * LEAVES, True))
        for m in range(MIDDLE):
            out.append(make(f"t{t}-m{m}", f"t{t}", LEAVES, True))
            for leaf in range(LEAVES):
                out.append(make(f"t{t}-m{m}-l{leaf}", f"t{t}-m{m}", 1, False))
    return out


def request(rng: random.Random) -> dict[str, int]:
    scale = rng.choice((0, 0, 1, 1, 2, 3))
    return {"cpu": 4 * scale * UNIT, "memory": 16 * scale * GI, "nvidia.com/gpu": scale * UNIT}


def build(seed: int) -> tuple[QuotaTree, float, int]:
    """The tree with usage and requests loaded; the seconds the loading took, and how
    many changes it was."""
    rng = random.Random(seed)
    infos = quotas(rng)
    gpus = TOP * MIDDLE * LEAVES * 3 // 2  # half as much again as all the mins
    capacity = {"cpu": 4 * UNIT * gpus, "memory": 16 * GI * gpus, "nvidia.com/gpu": gpus * UNIT}
    tree = QuotaTree(infos, capacity)
    changes = [(tree.nodes[info.name], request(rng), request(rng)) for info in infos if not info.is_parent]
    start = time.perf_counter()
    for node, used, pending in changes:
        tree.charge(node, used, 1)
        tree.add_pending(node, pending, 1)
    return tree, time.perf_counter() - start, 2 * len(changes)


def main() -> None:
    full: list[float] = []
    loads: list[float] = []
    for seed in range(5):
        tree, load, changes = build(seed)
        loads.append(load / changes)
        start = time.perf_counter()
        tree.refresh()
        full.append(time.perf_counter() - start)
    print(f"quotas               {len(tree.nodes)} (3 levels, {len(RESOURCES)} resources)")
    print(f"demand kept current  median {1e6 * statistics.median(loads):.1f} us per change of usage or requests "
          f"({changes} changes to load the tree)")
    print(f"full refresh         median {1000 * statistics.median(full):.1f} ms, max {1000 * max(full):.1f} ms")
    rng = random.Random(99)
    leaves = [n for n in tree.nodes.values() if not n.children]
    for changed in (1, 100):
        times, spent = [], []
        for _ in range(20):
            start = time.perf_counter()
            for node in rng.sample(leaves, changed):
                tree.add_pending(node, request(rng), rng.choice((1, -1)))
            middle = time.perf_counter()
            tree.refresh()
            times.append(time.perf_counter() - middle)
            spent.append(middle - start)
        print(f"after {changed:3d} leaves     refresh median {1000 * statistics.median(times):.2f} ms, "
              f"max {1000 * max(times):.2f} ms (the changes: median {1000 * statistics.median(spent):.2f} ms)")


if __name__ == "__main__":
    main()
