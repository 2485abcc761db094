"""The nodes as arrays: a row per node, a column per resource, and what is derived from
them and kept until the nodes change (pod vectors, the nodes a pod's rules allow, the
topology domains, how many pods of a kind each node has room for).

It knows nothing of units or placements: NodeRoom writes the room (``add``), the gang search
and the failed placements read it. Arrays over the nodes keep a placement in tens of microseconds
on a thousand nodes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from koordqueue.api.constants import PODS
from koordqueue.engine.model import NodeInfo, PodSetInfo, ResourceList
from koordqueue.engine.nodefilter import node_refusal, rules_key

if TYPE_CHECKING:  # numpy only once there are nodes (lazynumpy.py)
    import numpy as np
    import numpy.typing as npt

    Vector = npt.NDArray[np.int64]
    Matrix = npt.NDArray[np.int64]
    Mask = npt.NDArray[np.bool_]
else:
    from koordqueue.engine.lazynumpy import LazyNumpy

    np = LazyNumpy(globals())
Shape = tuple[tuple[str, int], ...]
Chain = tuple[tuple[str, str], ...]  # a domain: the labels that pin it, widest level first
ONE_POD = 1000  # a pod takes one of a node's ``pods`` (in milli-units)
MANY = 1 << 40  # pods that fit on a node when they ask for nothing the node counts


def shape(request: ResourceList) -> Shape:
    """A request as a hashable key (zero amounts left out)."""
    return tuple(sorted((name, amount) for name, amount in request.items() if amount))


class NodeArrays:
    """The room on every node as a matrix, and the caches derived from the nodes."""

    def __init__(self, levels: Sequence[str]) -> None:
        self.levels = tuple(levels)
        self.infos: Mapping[str, NodeInfo] = {}
        self.names: list[str] = []
        self.index: dict[str, int] = {}
        self.columns: dict[str, int] = {}
        self.alloc: Matrix  # these arrays come with the first node (rebuild)
        self.free: Matrix
        self.touched: set[int] = set()  # rows whose room changed since the growth was looked at
        # ``version`` counts the changes of ``free``; ``log`` holds the rows changed, in order.
        self.version = 0
        self.log: list[int] = []
        self._vectors: dict[Shape, tuple[Vector, list[int], str | None]] = {}
        self.masks: dict[object, Mask] = {}  # rules -> the nodes they allow (read by failedplacements)
        self._domains: dict[str, tuple[npt.NDArray[np.intp], list[Chain]]] = {}
        self._sizes: dict[Shape, float] = {}
        # Per pod vector (by id, as kept in ``_vectors``): how many such pods each node has
        # room for, and how far into ``log`` that count is current; a placement updates only
        # the rows changed since.
        self._counts: dict[int, tuple[npt.NDArray[np.int64], int]] = {}
        self.whole: dict[int, npt.NDArray[np.int64]] = {}  # per pod vector: pods per empty node
        self._rows: dict[str, list[npt.NDArray[np.intp]]] = {}  # level -> each domain's rows
        self._usable: dict[tuple[object, str], Mask] = {}  # (rules, level) -> nodes labelled and allowed

    def rebuild(self, infos: Mapping[str, NodeInfo], usage: Mapping[str, ResourceList]) -> None:
        """Derive everything again after nodes came, went or changed."""
        self.infos = infos
        self.names = sorted(infos)
        self.index = {name: i for i, name in enumerate(self.names)}
        columns = sorted({r for info in infos.values() for r in info.allocatable})
        self.columns = {name: i for i, name in enumerate(columns)}
        self._vectors = {}
        self.masks = {}
        self._domains = {}
        self._sizes = {}
        self._counts = {}
        self.log = []
        self.version += 1
        self.whole = {}
        self._rows = {}
        self._usable = {}
        self.touched = set()
        if not self.names:  # no row to index: the arrays (and numpy) wait for a node
            return
        self.alloc = np.zeros((len(self.names), len(columns)), dtype=np.int64)
        for i, name in enumerate(self.names):
            self.alloc[i] = self.vector(infos[name].allocatable)
        self.free = self.alloc.copy()
        for node, used in usage.items():
            if node in self.index:
                self.free[self.index[node]] -= self.vector(used)

    def add(self, index: int, vector: Vector) -> None:
        """Room on row ``index`` changes by ``vector`` (negative: taken)."""
        self.free[index] += vector
        self.touched.add(index)
        self.log.append(index)
        self.version += 1

    def vector(self, amounts: ResourceList) -> Vector:
        vector = np.zeros(len(self.columns), dtype=np.int64)
        for name, amount in amounts.items():
            col = self.columns.get(name)
            if col is not None:
                vector[col] = amount
        return vector

    def pod_vector(self, request: ResourceList) -> tuple[Vector, list[int], str | None]:
        """One pod's request over the columns (a pod slot included), the columns it asks
        for, and a resource it asks for that no node has (None: none). The same object
        for the same request until the nodes change: caches are keyed by its id."""
        key = shape(request)
        known = self._vectors.get(key)
        if known is None:
            with_pod = {**request, PODS: request.get(PODS, 0) + ONE_POD} if PODS in self.columns else request
            vector = self.vector(with_pod)
            missing = next((n for n, a in sorted(request.items()) if a > 0 and n not in self.columns), None)
            known = self._vectors[key] = (vector, np.flatnonzero(vector > 0).tolist(), missing)
        return known

    def size(self, request: ResourceList) -> float:
        """A pod's size: the largest share of a node's allocatable it asks for."""
        key = shape(request)
        known = self._sizes.get(key)
        if known is None:
            vector, cols, _ = self.pod_vector(request)
            biggest = self.alloc.max(axis=0) if len(self.alloc) else vector
            known = self._sizes[key] = max((int(vector[c]) / max(int(biggest[c]), 1) for c in cols), default=0.0)
        return known

    def count(self, vector: Vector, cols: list[int]) -> npt.NDArray[np.int64]:
        """``fits`` on the room now, kept per pod vector and brought up to date on the rows
        changed since it was last asked for (read only: callers copy before writing)."""
        log = self.log
        known = self._counts.get(id(vector))
        if known is None:
            k = fits(self.free, vector, cols)
        else:
            k, seen = known
            if seen < len(log):
                changed = np.array(log[seen:], dtype=np.intp)  # a row twice is counted twice alike
                if 2 * len(changed) >= len(k):
                    k = fits(self.free, vector, cols)
                else:
                    k = k.copy()
                    k[changed] = fits(self.free[changed], vector, cols)
        if len(log) > 4 * max(len(self.names), 64):  # trim: what is behind every count
            self._counts = {}
            log.clear()
        self._counts[id(vector)] = (k, len(log))
        return k

    def on_empty(self, vector: Vector, cols: list[int]) -> npt.NDArray[np.int64]:
        """How many pods of ``vector`` each node would take empty."""
        whole = self.whole.get(id(vector))
        if whole is None:
            whole = self.whole[id(vector)] = fits(self.alloc, vector, cols)
        return whole

    def mask(self, ps: PodSetInfo) -> Mask:
        """The nodes the pods of ``ps`` may go to (selector, affinity, taints)."""
        key = rules_key(ps)
        mask = self.masks.get(key)
        if mask is None:
            mask = self.masks[key] = np.array(
                [node_refusal(self.infos[name], ps) is None for name in self.names], dtype=np.bool_)
        return mask

    def shut_out(self, ps: PodSetInfo) -> tuple[tuple[str, int], ...]:
        """Why no node may take pods of ``ps``: the first rule each node breaks, counted."""
        reasons: dict[str, int] = {}
        for name in self.names:
            refusal = node_refusal(self.infos[name], ps)
            if refusal is not None:
                reasons[refusal.reason] = reasons.get(refusal.reason, 0) + 1
        return tuple(sorted(reasons.items(), key=lambda item: (-item[1], item[0])))

    # --- topology domains -----------------------------------------------------------------
    def domain_codes(self, level: str) -> tuple[npt.NDArray[np.intp], list[Chain]]:
        """Each node's domain of ``level`` (-1: none), and the domains in order. A configured
        level's domain is named by the levels above it too (rack 1 of zone a is not rack 1
        of zone b)."""
        known = self._domains.get(level)
        if known is not None:
            return known
        above = self.levels[: self.levels.index(level)] if level in self.levels else ()
        keys: list[Chain | None] = []
        for name in self.names:
            labels = self.infos[name].labels
            value = labels.get(level)
            keys.append(None if value is None else
                        tuple((upper, labels[upper]) for upper in above if upper in labels) + ((level, value),))
        chains = sorted({key for key in keys if key is not None})
        number = {chain: i for i, chain in enumerate(chains)}
        codes = np.array([-1 if key is None else number[key] for key in keys], dtype=np.intp)
        self._domains[level] = (codes, chains)
        return codes, chains

    def domain_rows(self, level: str) -> list[npt.NDArray[np.intp]]:
        """The rows of each domain of ``level``, in the order of ``domain_codes``."""
        rows = self._rows.get(level)
        if rows is None:
            codes, chains = self.domain_codes(level)
            order = np.argsort(codes, kind="stable")
            bounds = np.searchsorted(codes[order], np.arange(len(chains) + 1))
            rows = self._rows[level] = [order[bounds[d]:bounds[d + 1]] for d in range(len(chains))]
        return rows

    def usable_in(self, ps: PodSetInfo, level: str) -> Mask:
        """The nodes pods of ``ps`` may go to that have a domain of ``level``."""
        key = (rules_key(ps), level)
        mask = self._usable.get(key)
        if mask is None:
            mask = self._usable[key] = self.mask(ps) & (self.domain_codes(level)[0] >= 0)
        return mask

    def wider_levels(self, level: str) -> list[str]:
        """The configured levels above ``level``, nearest first (a preferred level's fallbacks)."""
        return list(reversed(self.levels[: self.levels.index(level)])) if level in self.levels else []


def fits(free: Matrix, vector: Vector, cols: list[int]) -> npt.NDArray[np.int64]:
    """How many pods of ``vector`` each node has room for."""
    if not cols:
        return np.full(len(free), MANY, dtype=np.int64)
    k: npt.NDArray[np.int64] = (free[:, cols] // vector[cols]).min(axis=1)
    return np.maximum(k, 0)
