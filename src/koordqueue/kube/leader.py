"""Leader election on a coordination.k8s.io/v1 Lease, so only one replica writes.

The rules (client-go's, rewritten here) that keep two replicas from leading at once:
- every write of the Lease is a PUT with the resourceVersion just read, so of two
  replicas racing for it exactly one wins and the other gets a Conflict;
- a Lease held by someone else counts as expired only `leaseDurationSeconds` after
  *we saw it last change*, measured on our own monotonic clock, so clock skew
  between machines does not matter;
- the leader stops leading when it has not renewed within `renew_deadline` counted
  from the start of its last successful renewal, which is earlier than anyone else
  can see the Lease expire (renew_deadline < lease_duration). `is_leader` checks that
  deadline itself, so it turns False in time even while a renewal hangs.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import math
import random
import time
from collections.abc import Awaitable, Callable, Coroutine
from datetime import UTC, datetime
from typing import Any

from koordqueue.kube.client import KubeClient, Resource
from koordqueue.kube.errors import AlreadyExists, Conflict, KubeError, NotFound

log = logging.getLogger(__name__)

LEASES = Resource("coordination.k8s.io", "v1", "leases")
JITTER = 0.2  # retries wait retry_period * [1, 1.2)


class LeaderElector:
    def __init__(
        self,
        client: KubeClient,
        namespace: str,
        name: str,
        identity: str,
        lease_duration: float = 15.0,
        renew_deadline: float = 10.0,
        retry_period: float = 2.0,
        *,
        release_on_cancel: bool = True,
    ) -> None:
        if not lease_duration > renew_deadline > retry_period * (1 + JITTER):
            raise ValueError("need lease_duration > renew_deadline > retry_period * 1.2")
        if not identity:
            raise ValueError("identity must not be empty")
        self.client = client
        self.namespace = namespace
        self.name = name
        self.identity = identity
        self.lease_duration = lease_duration
        self.renew_deadline = renew_deadline
        self.retry_period = retry_period
        self.release_on_cancel = release_on_cancel
        self._leading = False
        self._renewed_at = -math.inf  # monotonic start of the last successful acquire/renew
        self._observed: tuple[Any, ...] | None = None  # the Lease record last read
        self._observed_at = 0.0  # monotonic time it was first seen
        self._holder = ""

    @property
    def is_leader(self) -> bool:
        return self._leading and time.monotonic() < self._renewed_at + self.renew_deadline

    @property
    def holder(self) -> str:
        """The identity holding the Lease when we last looked ("" when free)."""
        return self._holder

    async def run(
        self,
        on_started_leading: Callable[[], Coroutine[Any, Any, None]],
        on_stopped_leading: Callable[[], Awaitable[None] | None] | None = None,
    ) -> None:
        """Campaign; while leading, run `on_started_leading()` as a task; campaign again
        after losing the Lease. Returns (after releasing the Lease) when that task
        returns, raises what it raises, and runs until cancelled otherwise."""
        while True:
            await self._acquire()
            if await self._lead(on_started_leading, on_stopped_leading):
                return

    async def _acquire(self) -> None:
        while not await self._try_acquire_or_renew():
            await asyncio.sleep(self.retry_period * (1 + JITTER * random.random()))
        log.info("%s: acquired lease %s/%s", self.identity, self.namespace, self.name)

    async def _lead(
        self,
        on_started_leading: Callable[[], Coroutine[Any, Any, None]],
        on_stopped_leading: Callable[[], Awaitable[None] | None] | None,
    ) -> bool:
        """Lead until the work ends (True) or the Lease is lost (False)."""
        self._leading = True
        work = asyncio.create_task(on_started_leading(), name=f"leader-{self.name}")
        renewing = asyncio.create_task(self._keep_renewing(), name=f"lease-{self.name}")
        release = self.release_on_cancel
        cancelled = False  # we were cancelled while cleaning up: re-raise it afterwards
        try:
            await asyncio.wait({work, renewing}, return_when=asyncio.FIRST_COMPLETED)
            release = work.done()  # the work ended: hand the Lease over; lost: nothing to release
        finally:
            self._leading = False
            for task in (work, renewing):
                task.cancel()
            for task in (work, renewing):
                while not task.done():
                    try:
                        await asyncio.wait({task})
                    except asyncio.CancelledError:
                        cancelled = True  # a stop during clean-up must not be swallowed
            if release:
                await self._release()
            if on_stopped_leading is not None:
                result = on_stopped_leading()
                if inspect.isawaitable(result):
                    await result
        if cancelled:
            raise asyncio.CancelledError
        if work.done() and not work.cancelled():
            work.result()  # re-raise what the work raised
            return True
        log.warning("%s: lost lease %s/%s", self.identity, self.namespace, self.name)
        return False

    async def _keep_renewing(self) -> None:
        """Renew every retry_period; return once a renewal deadline has passed."""
        while True:
            await asyncio.sleep(self.retry_period)
            while not await self._renew_before_deadline():
                if time.monotonic() >= self._renewed_at + self.renew_deadline:
                    return
                await asyncio.sleep(min(self.retry_period, max(0.0, self._deadline_left())))

    async def _renew_before_deadline(self) -> bool:
        left = self._deadline_left()
        if left <= 0:
            return False
        try:  # not asyncio.wait_for: it may swallow the cancel that stops us (see aio.wait_event)
            async with asyncio.timeout(left):
                return await self._try_acquire_or_renew()
        except TimeoutError:
            return False

    def _deadline_left(self) -> float:
        return self._renewed_at + self.renew_deadline - time.monotonic()

    async def _try_acquire_or_renew(self) -> bool:
        started = time.monotonic()
        now = _micro_time()
        try:
            lease = await self.client.get(LEASES, self.name, namespace=self.namespace)
        except NotFound:
            return await self._create(started, now)
        except KubeError as e:
            log.warning("%s: cannot read lease %s/%s: %s", self.identity, self.namespace, self.name, e)
            return False
        spec = lease.get("spec") or {}
        self._observe(spec, time.monotonic())  # when we saw it: the later, the safer for followers
        holder = spec.get("holderIdentity") or ""
        duration = spec.get("leaseDurationSeconds") or self.lease_duration
        if holder and holder != self.identity and time.monotonic() < self._observed_at + duration:
            return False  # held by someone else and not expired
        ours = holder == self.identity
        lease["spec"] = {
            **spec,
            "holderIdentity": self.identity,
            "leaseDurationSeconds": math.ceil(self.lease_duration),
            "acquireTime": spec.get("acquireTime") if ours else now,
            "renewTime": now,
            "leaseTransitions": int(spec.get("leaseTransitions") or 0) + (0 if ours else 1),
        }
        try:
            updated = await self.client.replace(LEASES, lease)
        except Conflict:
            return False  # someone else wrote it first
        except KubeError as e:
            log.warning("%s: cannot update lease %s/%s: %s", self.identity, self.namespace, self.name, e)
            return False
        self._observe(updated.get("spec") or {}, started)
        self._renewed_at = started
        return True

    async def _create(self, started: float, now: str) -> bool:
        lease = {
            "apiVersion": LEASES.api_version,
            "kind": "Lease",
            "metadata": {"name": self.name, "namespace": self.namespace},
            "spec": {
                "holderIdentity": self.identity,
                "leaseDurationSeconds": math.ceil(self.lease_duration),
                "acquireTime": now,
                "renewTime": now,
                "leaseTransitions": 0,
            },
        }
        try:
            created = await self.client.create(LEASES, lease)
        except AlreadyExists:
            return False  # another replica created it first (or ours did: the next read tells)
        except KubeError as e:
            log.warning("%s: cannot create lease %s/%s: %s", self.identity, self.namespace, self.name, e)
            return False
        self._observe(created.get("spec") or {}, started)
        self._renewed_at = started
        return True

    def _observe(self, spec: dict[str, Any], now: float) -> None:
        record = (spec.get("holderIdentity"), spec.get("renewTime"), spec.get("leaseTransitions"))
        if record != self._observed:
            self._observed = record
            self._observed_at = now
        self._holder = spec.get("holderIdentity") or ""

    async def _release(self) -> None:
        """Give the Lease up so another replica need not wait for it to expire."""
        try:
            lease = await self.client.get(LEASES, self.name, namespace=self.namespace)
            spec = lease.get("spec") or {}
            if spec.get("holderIdentity") != self.identity:
                return
            now = _micro_time()
            lease["spec"] = {**spec, "holderIdentity": "", "leaseDurationSeconds": 1, "renewTime": now}
            await self.client.replace(LEASES, lease)
            self._holder = ""
            log.info("%s: released lease %s/%s", self.identity, self.namespace, self.name)
        except KubeError as e:
            log.warning("%s: cannot release lease %s/%s: %s", self.identity, self.namespace, self.name, e)


def _micro_time() -> str:
    """A Kubernetes MicroTime: RFC 3339 with microseconds."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
