"""What the controller asks of the API server, as a Protocol: the client methods its parts
call, so that a part can be given `KubeClient` in production and an in-memory fake in its
unit tests (tests/controller/fakeapi.py). The signatures are `KubeClient`'s; keep them so
(`_conforms` below has mypy check it).

Who calls what: the parts write with create, patch, patch_status and delete (jobswitch,
unitstatus, quotastatus, quotasync, reconciler); the informers they share read with list
and watch (kube/informer.py); the Events' line writes with create and patch (kube/events.py).
get, list_all and replace are not here: only the snapshot loader, the webhook's own
registration and leader election use them, and they are given a `KubeClient`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Protocol

from koordqueue.kube.client import Body, KubeClient, ListResult, Object, PatchType, Resource, WatchEvent


class KubeAPI(Protocol):
    async def list(
        self,
        resource: Resource,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        limit: int | None = None,
        continue_token: str | None = None,
        resource_version: str | None = None,
    ) -> ListResult: ...

    # Not `async def`: an async generator's type is a function returning an iterator.
    def watch(
        self,
        resource: Resource,
        *,
        namespace: str | None = None,
        resource_version: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        allow_bookmarks: bool = True,
        timeout_seconds: int | None = None,
        send_initial_events: bool = False,
    ) -> AsyncIterator[WatchEvent]: ...

    async def create(self, resource: Resource, body: Object, *, namespace: str | None = None,
                     field_validation: str | None = None) -> Object: ...

    async def patch(
        self,
        resource: Resource,
        name: str,
        patch: Body,
        *,
        namespace: str | None = None,
        patch_type: PatchType = PatchType.MERGE,
    ) -> Object: ...

    async def patch_status(
        self,
        resource: Resource,
        name: str,
        patch: Body,
        *,
        namespace: str | None = None,
        patch_type: PatchType = PatchType.MERGE,
    ) -> Object: ...

    async def delete(
        self,
        resource: Resource,
        name: str,
        *,
        namespace: str | None = None,
        propagation_policy: str | None = None,
        preconditions: dict[str, str] | None = None,
        grace_period_seconds: int | None = None,
    ) -> Object: ...


def _conforms(client: KubeClient) -> KubeAPI:
    """Never called: mypy checks here that KubeClient meets the Protocol."""
    return client
