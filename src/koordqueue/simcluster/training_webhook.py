"""The training operator's validating webhook, on the simulated cluster.

The real training operator (v1.9.2, pkg/webhooks/pytorch and pkg/webhooks/tensorflow) runs a
validating webhook that refuses malformed PyTorchJobs and TFJobs on create and update, after the
CRD's schema passed them: a job name that is not a DNS-1035 label, a replica spec without
containers or without one named after the framework (pytorch, tensorflow), a container without
an image, and for PyTorchJob a role other than Master and Worker, a Master whose replicas is not 1,
a Worker with fewer than 1, elasticPolicy without a Worker; for TFJob more than one Chief or
Master; a runPolicy.managedBy that is not a known job controller. The checks and their messages
are the operator's, written out here as it aggregates them (`[a, b]`), and kube-apiserver wraps
the refusal as `admission webhook "validator.pytorchjob.training-operator.kubeflow.org" denied the
request: ...` (403 Forbidden, controller-runtime's answer).

`OperatorWebhook` serves it over HTTPS with a certificate of its own and registers a
ValidatingWebhookConfiguration pointing at it (failurePolicy Fail, as the operator's manifests
say); it removes it when stopped, so that a server left running without the simulated cluster
does not refuse every job. As in the operator, an update is validated as a create: its
ValidateUpdate hands the new job in place of the old one, so runPolicy.managedBy is never
compared with what it was.
"""

from __future__ import annotations

import base64
import logging
import ssl
import tempfile
from pathlib import Path
from typing import Any

import orjson
from aiohttp import web

from koordqueue.api import constants as c
from koordqueue.apiserver.validation import (
    DNS1035,
    FieldError,
    aggregate,
    forbidden,
    invalid,
    name_problems,
    not_supported,
    required,
)
from koordqueue.controller.certs import make_serving_cert
from koordqueue.jobs.pytorchjob import PyTorchJobAdapter
from koordqueue.jobs.tfjob import TFJobAdapter
from koordqueue.kube.client import KubeClient, Resource
from koordqueue.kube.errors import KubeError, NotFound

log = logging.getLogger(__name__)

VALIDATING_WEBHOOKS = Resource("admissionregistration.k8s.io", "v1", "validatingwebhookconfigurations",
                               namespaced=False)
CONFIGURATION_NAME = "validator.training-operator.kubeflow.org"  # as the real control plane's harness names it
PYTORCH_WEBHOOK = "validator.pytorchjob.training-operator.kubeflow.org"
TF_WEBHOOK = "validator.tfjob.training-operator.kubeflow.org"
PYTORCH_PATH = "/validate-kubeflow-org-v1-pytorchjob"
TF_PATH = "/validate-kubeflow-org-v1-tfjob"
JOB_CONTROLLERS = (c.MULTIKUEUE_MANAGER, c.TRAINING_OPERATOR_MANAGER)  # runPolicy.managedBy
PYTORCH_ROLES = ("Master", "Worker")
PYTORCH_SPECS = PyTorchJobAdapter.replica_specs_key
TF_SPECS = TFJobAdapter.replica_specs_key

Object = dict[str, Any]


def _mapping(value: Any) -> dict[str, Any]:
    """What Go's decoding into the operator's types makes of an absent or null object: empty."""
    return value if isinstance(value, dict) else {}


def _containers(spec: Any) -> list[dict[str, Any]]:
    pod = _mapping(_mapping(_mapping(spec).get("template")).get("spec"))
    containers = pod.get("containers")
    return [x if isinstance(x, dict) else {} for x in containers] if isinstance(containers, list) else []


def _name_errors(job: Object) -> list[FieldError]:
    name = str(_mapping(job.get("metadata")).get("name", ""))
    problems = name_problems(name, DNS1035)
    return [invalid("metadata.name", name, f"should match: {','.join(problems)}")] if problems else []


def _run_policy_errors(job: Object) -> list[FieldError]:
    """util.ValidateRunPolicy: managedBy, when set, names a known job controller."""
    manager = _mapping(_mapping(job.get("spec")).get("runPolicy")).get("managedBy")
    if manager is not None and manager not in JOB_CONTROLLERS:
        return [not_supported("spec.runPolicy.managedBy", manager, list(JOB_CONTROLLERS))]
    return []


def _container_errors(spec: Any, role_path: str, default_container: str) -> list[FieldError]:
    """Both kinds' checks of a replica spec's containers."""
    path = f"{role_path}.template.spec.containers"
    containers = _containers(spec)
    errs = [] if containers else [required(path, "must be specified")]
    errs += [required(f"{path}[{i}].image", "must be required") for i, x in enumerate(containers) if not x.get("image")]
    if not any(x.get("name") == default_container for x in containers):
        errs.append(required(path, f"must have at least one container with name {default_container}"))
    return errs


def validate_pytorchjob(job: Object) -> list[FieldError]:
    """pytorch.validatePyTorchJob."""
    errs = _name_errors(job) + _run_policy_errors(job)
    spec = _mapping(job.get("spec"))
    path = f"spec.{PYTORCH_SPECS}"
    elastic = spec.get("elasticPolicy")
    if isinstance(elastic, dict):
        if "Worker" not in _mapping(spec.get(PYTORCH_SPECS)):
            errs.append(required(f"{path}[Worker]", "must be configured if elastic policy is used"))
        if elastic.get("nProcPerNode") is not None and spec.get("nprocPerNode") is not None:
            errs.append(forbidden("spec.elasticPolicy.nProcPerNode", "must not be used with spec.nprocPerNode"))
    if spec.get(PYTORCH_SPECS) is None:
        return [*errs, required(path, "must be required")]
    for role, replica_spec in _mapping(spec[PYTORCH_SPECS]).items():
        role_path = f"{path}[{role}]"
        if role not in PYTORCH_ROLES:
            errs.append(not_supported(role_path, role, list(PYTORCH_ROLES)))
        errs += _container_errors(replica_spec, role_path, "pytorch")
        replicas = _mapping(replica_spec).get("replicas")
        if role == "Master" and replicas != 1:
            errs.append(forbidden(f"{role_path}.replicas", "must be 1"))
        elif role != "Master" and replicas is not None and replicas < 1:
            errs.append(forbidden(f"{role_path}.replicas", "must be at least 1"))
    return errs


def validate_tfjob(job: Object) -> list[FieldError]:
    """tensorflow.validateTFJob."""
    errs = _name_errors(job) + _run_policy_errors(job)
    specs = _mapping(job.get("spec")).get(TF_SPECS)
    path = f"spec.{TF_SPECS}"
    if specs is None:
        return [*errs, required(path, "must be required")]
    for role, replica_spec in _mapping(specs).items():
        errs += _container_errors(replica_spec, f"{path}[{role}]", "tensorflow")
    if sum(1 for role in _mapping(specs) if role in ("Chief", "Master")) > 1:
        errs.append(forbidden(path, "must not have more than 1 Chief or Master role"))
    return errs


CHECKS = {PYTORCH_PATH: validate_pytorchjob, TF_PATH: validate_tfjob}


def review(path: str, body: Any) -> dict[str, Any]:
    """Answer one AdmissionReview as controller-runtime's validator does."""
    request = body.get("request") if isinstance(body, dict) else None
    if not isinstance(request, dict):
        raise ValueError("an AdmissionReview with a request is expected")
    response: dict[str, Any] = {"uid": request.get("uid", ""), "allowed": True}
    obj = request.get("object")
    if request.get("operation") in ("CREATE", "UPDATE") and isinstance(obj, dict):
        errs = CHECKS[path](obj)
        if errs:
            response = {"uid": response["uid"], "allowed": False,
                        "status": {"code": 403, "reason": "Forbidden", "message": aggregate(errs)}}
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response}


def configuration(url: str, ca_pem: bytes, kinds: set[str]) -> dict[str, Any]:
    """The ValidatingWebhookConfiguration of the operator's manifests, pointed at `url`."""
    hooks = [(c.PYTORCH_JOB_KIND, PYTORCH_WEBHOOK, PYTORCH_PATH, c.PYTORCH_JOB_PLURAL),
             (c.TF_JOB_KIND, TF_WEBHOOK, TF_PATH, c.TF_JOB_PLURAL)]
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": CONFIGURATION_NAME},
        "webhooks": [{
            "name": name,
            "admissionReviewVersions": ["v1"],
            "clientConfig": {"url": f"{url}{path}", "caBundle": base64.b64encode(ca_pem).decode()},
            "failurePolicy": "Fail",
            "sideEffects": "None",
            "rules": [{"apiGroups": [c.KUBEFLOW_GROUP], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"],
                       "resources": [plural]}],
        } for kind, name, path, plural in hooks if kind in kinds],
    }


class OperatorWebhook:
    """The webhook's HTTPS server on 127.0.0.1 and its registration; `await start()`, `await stop()`."""

    def __init__(self, client: KubeClient, kinds: set[str]) -> None:
        self.client = client
        self.kinds = kinds & {c.PYTORCH_JOB_KIND, c.TF_JOB_KIND}
        self.port = 0
        self._runner: web.AppRunner | None = None
        self._registered = False

    async def start(self) -> None:
        if not self.kinds:
            return
        cert = make_serving_cert(["127.0.0.1"])
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        with tempfile.TemporaryDirectory(prefix="koord-queue-sim-webhook-") as directory:
            context.load_cert_chain(*cert.write(Path(directory)))
        app = web.Application(client_max_size=8 * 1024 * 1024)
        for path in CHECKS:
            app.router.add_post(path, self._handle)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0, ssl_context=context)
        await site.start()
        self.port = self._runner.addresses[0][1]
        manifest = configuration(f"https://127.0.0.1:{self.port}", cert.ca_pem, self.kinds)
        try:  # one left by a run that ended without stop() points at a server that is gone
            await self.client.delete(VALIDATING_WEBHOOKS, CONFIGURATION_NAME)
        except NotFound:
            pass
        except KubeError as e:
            log.warning("simulated cluster: the training operator's webhook is not registered: %s", e)
            return
        try:
            await self.client.create(VALIDATING_WEBHOOKS, manifest)
        except KubeError as e:
            log.warning("simulated cluster: the training operator's webhook is not registered: %s", e)
            return
        self._registered = True

    async def stop(self) -> None:
        if self._registered:
            try:
                await self.client.delete(VALIDATING_WEBHOOKS, CONFIGURATION_NAME)
            except KubeError as e:  # the server may be gone already
                log.debug("simulated cluster: could not remove the training operator's webhook: %s", e)
            self._registered = False
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def _handle(self, request: web.Request) -> web.Response:
        try:
            answer = review(request.path, orjson.loads(await request.read()))
        except (orjson.JSONDecodeError, ValueError) as e:
            return web.Response(status=400, text=f"bad AdmissionReview: {e}")
        return web.Response(body=orjson.dumps(answer), content_type="application/json")
