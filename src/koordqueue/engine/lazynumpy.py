"""numpy, imported where it is first used, not where the engine is.

Most runs of the engine never need it (no nodes, fewer than 32 sibling groups at a
depth), and importing it took 0.09 s of CPU: a third of ``koord-queue simulate``'s
start. A module names it ``np = LazyNumpy(globals())``; the first attribute read
imports numpy and puts it in that module's globals in place of the stand-in.
"""

from __future__ import annotations

from typing import Any


class LazyNumpy:
    def __init__(self, namespace: dict[str, Any]) -> None:
        self._namespace = namespace

    def __getattr__(self, name: str) -> Any:
        import numpy

        self._namespace["np"] = numpy
        return getattr(numpy, name)
