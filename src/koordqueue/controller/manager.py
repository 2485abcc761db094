"""Runs a controller replica: leader election, the controller while leading, and the
metrics/health endpoints, the dashboard and the admission webhook all the time (a
follower is healthy and answers the webhook; it is just not ready to lead, and its
dashboard says so)."""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import uuid

from aiohttp import web
from prometheus_client import generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from koordqueue import aio
from koordqueue.api import constants as c
from koordqueue.controller.access import AccessReviewer
from koordqueue.controller.config import ControllerConfig, clock_of
from koordqueue.controller.controller import Controller
from koordqueue.controller.dashboard import Dashboard, is_loopback
from koordqueue.controller.koordapi import KoordAPI, bearer_authorize
from koordqueue.controller.logs import setup_logging
from koordqueue.controller.metrics import Metrics
from koordqueue.controller.resources import PODS
from koordqueue.controller.visibility import VisibilityAPI
from koordqueue.controller.webhook import SuspendWebhook
from koordqueue.kube.client import KubeClient
from koordqueue.kube.config import load_config
from koordqueue.kube.errors import KubeError
from koordqueue.kube.leader import LeaderElector

log = logging.getLogger(__name__)

LABEL_TIMEOUT = 5.0  # seconds: a replica stepping down does not wait longer to unlabel its pod


class Manager:
    def __init__(self, client: KubeClient, config: ControllerConfig) -> None:
        self.client = client
        self.config = config
        self.metrics = Metrics()
        self.controller: Controller | None = None
        self.identity = config.identity or f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        self._runner: web.AppRunner | None = None
        self.metrics_port = 0
        self.visibility = (VisibilityAPI(client, lambda: self.controller, config.system_namespace)
                           if config.visibility and config.webhook else None)
        if config.visibility and not config.webhook:
            log.warning("the visibility API is served on the webhook's port: it is off without --webhook")
        self.webhook = (SuspendWebhook(client, config, routes=[self.visibility.add_routes],
                                       api_services=[c.VISIBILITY_APISERVICE])
                        if self.visibility is not None else SuspendWebhook(client, config) if config.webhook else None)
        self._request_header: asyncio.Task[None] | None = None
        reviewer = None if is_loopback(config.dashboard_host) else AccessReviewer(client, "dashboard")
        self.dashboard = (Dashboard(lambda: self.controller, config.dashboard_host, config.dashboard_port,
                                    self.identity, reviewer, config.dashboard_max_streams)
                          if config.dashboard else None)
        # Bound beyond loopback, it asks for a bearer token and a grant, as the exposed dashboard does.
        authorize = None if is_loopback(config.api_handler_host) else \
            bearer_authorize(AccessReviewer(client, "Koord-Queue's HTTP API"))
        self.koord_api = (KoordAPI(lambda: self.controller, config.api_handler_host, config.api_handler_port,
                                   self.identity, authorize) if config.api_handler else None)
        self.endpoints_ready = asyncio.Event()  # set once the ports are bound (tests, `up`)

    async def start_endpoints(self) -> None:
        app = web.Application()
        app.router.add_get("/metrics", self._metrics)
        app.router.add_get("/healthz", self._healthz)
        app.router.add_get("/readyz", self._readyz)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.config.metrics_host, self.config.metrics_port)
        await site.start()
        if addresses := self._runner.addresses:  # the port actually bound (0 asks for any)
            self.metrics_port = int(addresses[0][1])
        if self.webhook is not None:
            await self.webhook.start()
        if self.visibility is not None and self.webhook is not None:
            await self.visibility.load_request_header(self.webhook.ssl_context)  # before anyone is told it is up
            self._request_header = asyncio.create_task(self.visibility.keep_request_header(self.webhook.ssl_context),
                                                       name="visibility-request-header")
        if self.dashboard is not None:
            await self.dashboard.start()
        if self.koord_api is not None:
            await self.koord_api.start()
        log.info("%s: serving /metrics, /healthz and /readyz on port %d%s%s%s", self.identity, self.metrics_port,
                 f", the admission webhook{' and the visibility API' if self.visibility else ''} on port {self.webhook.port}"
                 if self.webhook is not None else "",
                 f", the dashboard on port {self.dashboard.port}" if self.dashboard is not None else "",
                 f", Koord-Queue's HTTP API on {self.koord_api.host}:{self.koord_api.port}"
                 if self.koord_api is not None else "")
        self.endpoints_ready.set()

    async def _metrics(self, _: web.Request) -> web.Response:
        return web.Response(body=generate_latest(self.metrics.registry), headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def _healthz(self, _: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def _readyz(self, _: web.Request) -> web.Response:
        """Ready once this replica serves (webhook included), leading or not: a follower
        answers the webhook too, and a rollout of two replicas must be able to finish."""
        if not self.endpoints_ready.is_set():
            return web.Response(text="starting", status=503)
        leading = self.controller is not None and self.controller.sync_done
        return web.Response(text="ok: leading" if leading else "ok: following")

    async def _label_leader(self, leading: bool) -> None:
        """Label this replica's pod koord-queue-leader=true while it leads (Koord-Queue's way): the
        visibility API's Service selects it, since only the leader knows the queues' order. A
        replica clears the label as it starts (a restarted container keeps its pod's labels)."""
        if self.visibility is None or not self.config.pod_name:
            return
        patch = {"metadata": {"labels": {c.LABEL_LEADER: c.TRUE if leading else None}}}
        try:
            async with asyncio.timeout(LABEL_TIMEOUT):
                await self.client.patch(PODS, self.config.pod_name, patch,
                                        namespace=self.config.pod_namespace or self.config.system_namespace)
        except (KubeError, TimeoutError) as e:
            log.warning("%s: cannot %s the label %s of pod %s: %s", self.identity, "set" if leading else "remove",
                        c.LABEL_LEADER, self.config.pod_name, e)

    async def _lead(self) -> None:
        await self._label_leader(True)
        log.info("%s: leading; queueing %s in namespace %s", self.identity, ", ".join(sorted(self.config.job_kinds)),
                 self.config.system_namespace)
        self.metrics.leading(True)
        self.controller = Controller(self.client, self.config, self.metrics, clock_of(self.config.clock_rate))
        try:
            await self.controller.run()
        finally:
            self.metrics.leading(False)
            self.controller = None
            await self._label_leader(False)

    async def run(self) -> None:
        await self.start_endpoints()
        await self._label_leader(False)
        try:
            if not self.config.leader_election:
                await self._lead()
                return
            elector = LeaderElector(
                self.client, self.config.system_namespace, self.config.lease_name, self.identity,
                self.config.lease_duration, self.config.renew_deadline, self.config.retry_period,
            )
            await elector.run(self._lead)
        finally:
            if self._request_header is not None:
                self._request_header.cancel()
                await asyncio.gather(self._request_header, return_exceptions=True)
            if self.webhook is not None:
                await self.webhook.stop()
            if self.dashboard is not None:
                await self.dashboard.stop()
            if self.koord_api is not None:
                await self.koord_api.stop()
            if self._runner is not None:
                await self._runner.cleanup()


async def run_controller(kubeconfig: str | None, config: ControllerConfig) -> None:
    cluster = load_config(kubeconfig)
    async with KubeClient(cluster, qps=config.qps, burst=config.burst) as client:
        await Manager(client, config).run()


def main(kubeconfig: str | None, config: ControllerConfig, log_format: str = "text", log_level: str = "info") -> None:
    setup_logging(log_format, log_level)
    try:
        aio.run(run_controller(kubeconfig, config))
    except KeyboardInterrupt:
        pass
