"""The functional core: quota tree, runtime quota, queue policies, the scheduling cycle.

Pure and deterministic: no I/O, no asyncio, no Kubernetes client; time is passed in.
"""

from koordqueue.engine.core import Engine

__all__ = ["Engine"]
