"""The adversarial tenant suite: a tenant with ordinary namespace rights tries to get past its
quota. The systems are the controller suite's (`system`, `start_system`, on both control planes)."""

from __future__ import annotations

from tests.controller.conftest import start_system, system

__all__ = ["start_system", "system"]
