"""An admission whose answer was lost: kube-apiserver applied the patch and was restarted
before it answered; KubeClient sent the patch again on the version it had made, and got
409 Conflict (`after_retry`). The admission landed: it is kept, and its job resumed. (Undone,
the unit was admitted again while its object held quota: the chaos run on the real control
plane found it, seed 20261204.) A Conflict that is someone else's write still undoes it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from koordqueue.api import constants as c
from koordqueue.controller.resources import UNITS
from koordqueue.kube.client import Object, PatchType, Resource
from koordqueue.kube.errors import error_from_status

from .fakeapi import until
from .test_parts_scheduler import Setting, running

__all__ = ["running"]  # the fixture, used by name


def lose_the_answer(s: Setting, name: str, *, landed: bool) -> list[str]:
    """The unit's next status patch: applied (when `landed`), then answered 409 as after a
    retry. Returns the phases of every status patch of the unit asked for, as they are asked."""
    real = s.fake.patch_status
    asked: list[str] = []

    async def patch_status(resource: Resource, name_: str, patch: Object, *, namespace: str | None = None,
                           patch_type: PatchType = PatchType.MERGE) -> Object:
        if resource.plural == UNITS.plural and name_ == name:
            asked.append(str(patch["status"].get("phase")))
        if resource.plural != UNITS.plural or name_ != name or len(asked) > 1:
            return await real(resource, name_, patch, namespace=namespace, patch_type=patch_type)
        if landed:
            await real(resource, name_, patch, namespace=namespace, patch_type=patch_type)
        raise error_from_status(409, {"kind": "Status", "code": 409, "reason": "Conflict"}, after_retry=True)

    setattr(s.fake, "patch_status", patch_status)  # noqa: B010 (a method of the instance, replaced)
    return asked


async def test_an_admission_that_landed_though_its_answer_was_lost_is_kept(running: Callable[..., Any]) -> None:
    s: Setting = await running()
    key = await s.submit("j", "a", 4)
    asked = lose_the_answer(s, "j-py-qu", landed=True)
    s.shared.wake.set()
    await until(lambda: not s.suspended("j"))  # resumed: the admission stood
    assert asked == ["Dequeued"]  # written once: never undone and admitted again
    assert s.unit_status(key)["phase"] == c.Phase.DEQUEUED.value
    info = s.shared.engine.unit(key)
    assert info is not None and info.admitted_quota == "a"
    assert s.shared.records.rv(key) == s.fake.get(UNITS, "j-py-qu", namespace="default")["metadata"]["resourceVersion"]


async def test_an_admission_refused_for_anothers_write_is_undone(running: Callable[..., Any]) -> None:
    s: Setting = await running()
    key = await s.submit("j", "a", 4)
    asked = lose_the_answer(s, "j-py-qu", landed=False)
    s.shared.wake.set()
    # Undone (the stored unit does not show it), then admitted again in a later cycle.
    await until(lambda: not s.suspended("j"))
    assert asked == ["Dequeued", "Dequeued"]
    assert s.unit_status(key)["phase"] == c.Phase.DEQUEUED.value
