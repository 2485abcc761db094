"""The controller takes its state by streaming lists (kube/informer.py: a watch with
sendInitialEvents, as client-go's WatchList; issue 36, the first admission after a start) on
both control planes: kube-apiserver 1.37 serves them, and so does the embedded one. An
informer that fell back to pages here would mean the real server refused them."""

from __future__ import annotations

import pytest

from koordqueue.api import constants as c

from .conftest import SystemFactory, pytorch_job, quick_config, quota

pytestmark = [pytest.mark.timeout(120), pytest.mark.both_control_planes]


async def test_every_informer_of_the_controller_takes_its_state_by_a_streaming_list(
        start_system: SystemFactory) -> None:
    async with start_system(config=quick_config()) as system:
        await system.apply(quota("team-a", 4, 4))
        await system.apply(pytorch_job("first", gpus_per_pod=1, quota_name="team-a"))
        await system.wait_phase("first-py-qu", c.Phase.RUNNING, timeout=60)
        informers = system.controller.shared.informers.all()
        assert len(informers) >= 8
        by_pages = [informer.resource.plural for informer in informers if not informer.stream]
        assert by_pages == []
        assert all(informer.has_synced and informer.lists >= 1 for informer in informers)
