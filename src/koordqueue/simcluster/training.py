"""What the Kubeflow training operator (v1.9.2) makes of a job: its pods and their Services.

Read from the operator's source (pkg/apis/kubeflow.org/v1/*_defaults.go; pkg/controller.v1/
common/pod.go and service.go; pytorch/envvar.go, master.go, elastic.go, initcontainer.go;
tensorflow/tensorflow.go; mpi/mpijob_controller.go) and checked against the operator itself
on the real control plane (tests/simcluster/test_training_operator.py runs on both):

- the job is defaulted in memory first (never written back): replicas 1 (an MPIJob's
  workers 0), the kind's restart policy (PyTorchJob OnFailure, TFJob and MPIJob Never),
  the default port (`pytorchjob-port` 23456, `tfjob-port` 2222) appended to the default
  container's ports (the one named `pytorch`/`tensorflow`, else the first) unless a port of
  that name is there, a PyTorchJob's `nprocPerNode` `auto`;
- a pod per replica, `<job>-<type lower>-<index>` (an MPIJob's launcher: `<job>-launcher`),
  with the template's labels and annotations plus the operator's four labels
  (job-name, operator-name, replica-type, replica-index; job-role `master` on the master
  role) and no annotation of its own; the pod's restartPolicy is the replica spec's
  (ExitCode: Never), whatever the template says;
- a PyTorchJob's env, appended to every container after the template's own (the last of a
  name wins): PYTHONUNBUFFERED, then with a Master MASTER_PORT, MASTER_ADDR (`<job>-master-0`),
  WORLD_SIZE, RANK (a worker's is its index + 1) and their PET_ twins, PET_NPROC_PER_NODE,
  and PET_NNODES or the elastic policy's rendezvous env; with a Master, each worker also
  gets the `init-pytorch` init container that waits for the master's name;
- a TFJob's TF_CONFIG (cluster, task, environment `cloud`) on its `tensorflow` container,
  when it has more than one replica;
- an MPIJob's launcher env (Open MPI's and Intel MPI's rsh agent and hostfile, no GPUs for
  a launcher that asks none) and `sleep 365d` for a worker with no command;
- a headless Service per PyTorchJob or TFJob replica, named as its pod, selecting it by the
  four labels, with the default container's ports.

Pure functions of the job; the simulated operator (operators.py) creates what they return.
Not simulated: an MPIJob's ConfigMap, ServiceAccount, Role and RoleBinding, and what in the
launcher refers to them (its service account, init container and volumes).
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from koordqueue.api import constants as c
from koordqueue.api.meta import InvalidObject
from koordqueue.jobs.base import replicas as read_replicas

Object = dict[str, Any]

TEMPLATE_RESTART_POLICY_MESSAGE = "Restart policy in pod template will be overwritten by restart policy in replica spec"
_INTEGER = re.compile(r"[+-]?[0-9]+")  # what Go's strconv.Atoi reads
_INIT_COMMAND = ("err=1;for i in $(seq {tries}); do if nslookup {master}; then err=0 && break; fi;"
                 "echo waiting for master; sleep 2; done; exit $err")


@dataclass(frozen=True, slots=True)
class Kind:
    """The operator's per-kind constants: replica types (as it spells them), default
    container, port and restart policy, and the replica specs' field."""

    specs_key: str
    types: tuple[str, ...]
    container: str
    port_name: str | None
    port: int | None
    restart_policy: str


KINDS = {
    c.PYTORCH_JOB_KIND: Kind("pytorchReplicaSpecs", (c.REPLICA_MASTER, c.REPLICA_WORKER), c.PYTORCH_CONTAINER,
                             c.PYTORCH_PORT_NAME, c.PYTORCH_DEFAULT_PORT, c.RESTART_POLICY_ON_FAILURE),
    c.TF_JOB_KIND: Kind("tfReplicaSpecs", (c.REPLICA_PS, c.REPLICA_WORKER, c.REPLICA_CHIEF, c.REPLICA_MASTER,
                                           c.REPLICA_EVALUATOR),
                        c.TF_CONTAINER, c.TF_PORT_NAME, c.TF_DEFAULT_PORT, c.RESTART_POLICY_NEVER),
    c.MPI_JOB_KIND: Kind("mpiReplicaSpecs", (c.REPLICA_LAUNCHER, c.REPLICA_WORKER), c.MPI_CONTAINER, None, None,
                         c.RESTART_POLICY_NEVER),
}


@dataclass(frozen=True, slots=True)
class Replica:
    """One pod the operator makes, and what goes with it."""

    rtype: str  # the replica type as the job spells it (its key among the replica specs)
    index: int
    name: str  # the pod's, and its Service's
    labels: dict[str, str]  # the operator's, set over the template's own
    template: Object  # the pod template with the operator's additions
    service: Object | None  # the headless Service made for it (metadata.name, labels, spec); None for MPIJob
    created: tuple[str, str]  # the event (reason, message) the operator records once the pod is created
    template_restart_policy: str | None  # the Warning's reason when the template's restartPolicy is overridden


@dataclass(frozen=True, slots=True)
class _Spec:
    key: str  # as the job spells it
    rtype: str  # as the operator does (camel case for its own types)
    replicas: int
    restart_policy: str
    template: Object  # defaulted: the default port added


MAX_PODS = 10_000  # the most pods the simulated operator makes for one job


class TooManyPods(Exception):
    """The job wants more pods than the simulated operator makes (the real one would try to
    make them all, one by one, for ever): it makes none and says so."""


def validate(kind_name: str, job: Mapping[str, Any]) -> int:
    """Refuse `job` as the operator's validating webhook does (InvalidObject); else return
    how many pods it wants. Cheap at any replica count: nothing is built per pod."""
    return sum(spec.replicas for spec in _defaulted(kind_name, KINDS[kind_name], job).values())


def replicas_of(kind_name: str, job: Mapping[str, Any]) -> list[Replica]:
    """Every pod the operator wants for `job`, in its order (replica types as written).
    InvalidObject where the operator's validating webhook refuses the job; TooManyPods
    past MAX_PODS."""
    kind = KINDS[kind_name]
    specs = _defaulted(kind_name, kind, job)
    total = sum(spec.replicas for spec in specs.values())
    if total > MAX_PODS:
        meta = job.get("metadata") or {}
        raise TooManyPods(f"{kind_name} {meta.get('namespace', '')}/{meta.get('name', '')} wants {total} pods; "
                          f"the simulated training operator makes at most {MAX_PODS} for a job, and made none")
    if kind_name == c.PYTORCH_JOB_KIND:
        return _pytorch(job, kind, specs)
    if kind_name == c.TF_JOB_KIND:
        return _tensorflow(job, kind, specs)
    return _mpi(job, kind, specs)


# --- defaulting and validation ------------------------------------------------------------------

def _defaulted(kind_name: str, kind: Kind, job: Mapping[str, Any]) -> dict[str, _Spec]:
    meta = job.get("metadata") or {}
    where = f"{kind_name} {meta.get('namespace', '')}/{meta.get('name', '')}"
    raw = (job.get("spec") or {}).get(kind.specs_key)
    if not isinstance(raw, Mapping) or not raw:
        raise InvalidObject(f"{where}: spec.{kind.specs_key}: Required value: must be required")
    out: dict[str, _Spec] = {}
    for key, spec in raw.items():
        at = f"{where}: spec.{kind.specs_key}[{key}]"
        if not isinstance(spec, Mapping):
            raise InvalidObject(f"{at} must be a mapping with replicas and a template")
        rtype = next((t for t in kind.types if t.lower() == str(key).lower()), str(key))
        default_count = 0 if kind_name == c.MPI_JOB_KIND and rtype == c.REPLICA_WORKER else 1
        count = read_replicas(spec.get("replicas"), at, default_count)
        template = copy.deepcopy(dict(spec.get("template") or {}))
        pod_spec = template.setdefault("spec", {})
        containers = pod_spec.get("containers")
        if not isinstance(containers, list) or not containers or not all(isinstance(x, dict) for x in containers):
            raise InvalidObject(f"{at}.template.spec.containers: Required value: must be specified")
        if kind_name != c.MPI_JOB_KIND and not any(x.get("name") == kind.container for x in containers):
            raise InvalidObject(f"{at}.template.spec.containers: Required value: must have at least one "
                                f"container with name {kind.container}")
        if kind.port_name is not None:
            target = _default_container(containers, kind.container) or containers[0]
            ports = target.setdefault("ports", [])
            if not any(isinstance(p, Mapping) and p.get("name") == kind.port_name for p in ports):
                ports.append({"name": kind.port_name, "containerPort": kind.port})
        policy = spec.get("restartPolicy") or kind.restart_policy
        out[str(key)] = _Spec(str(key), rtype, count, str(policy), template)
    if kind_name == c.PYTORCH_JOB_KIND:
        master = _of_type(out, c.REPLICA_MASTER)
        if master is not None and master.replicas != 1:
            raise InvalidObject(f"{where}: spec.{kind.specs_key}[{master.key}].replicas: Forbidden: must be 1")
        if isinstance((job.get("spec") or {}).get("elasticPolicy"), Mapping) and \
                _of_type(out, c.REPLICA_WORKER) is None:
            raise InvalidObject(f"{where}: spec.{kind.specs_key}[{c.REPLICA_WORKER}]: Required value: must be "
                                "configured if elastic policy is used")
    return out


def _default_container(containers: list[Object], name: str) -> Object | None:
    return next((x for x in containers if x.get("name") == name), None)


def _of_type(specs: Mapping[str, _Spec], rtype: str) -> _Spec | None:
    return next((s for s in specs.values() if s.rtype == rtype), None)


def _port(spec: _Spec, kind: Kind) -> int | None:
    """The default container's port of the default name (None: there is none)."""
    container = _default_container(spec.template["spec"]["containers"], kind.container)
    for port in (container or {}).get("ports") or []:
        if isinstance(port, Mapping) and port.get("name") == kind.port_name and isinstance(port.get("containerPort"),
                                                                                           int):
            return int(port["containerPort"])
    return None


# --- what every kind's pods share ---------------------------------------------------------------

def _operator_name(kind_name: str) -> str:
    return f"{kind_name.lower()}{c.OPERATOR_NAME_SUFFIX}"


def _labels(kind_name: str, job_name: str, rtype: str, index: int | None, master: bool) -> dict[str, str]:
    labels = {c.LABEL_JOB_NAME: job_name.replace("/", "-"), c.LABEL_OPERATOR_NAME: _operator_name(kind_name),
              c.LABEL_REPLICA_TYPE: rtype.lower()}
    if index is not None:
        labels[c.LABEL_REPLICA_INDEX] = str(index)
    if master:
        labels[c.LABEL_JOB_ROLE] = c.JOB_ROLE_MASTER
    return labels


def _pod_template(spec: _Spec) -> tuple[Object, bool]:
    """The replica's template with its restart policy (ExitCode: Never), and whether the
    template had one of its own (the operator warns that it is overridden)."""
    template = copy.deepcopy(spec.template)
    overridden = bool(template["spec"].get("restartPolicy"))
    policy = spec.restart_policy
    template["spec"]["restartPolicy"] = c.RESTART_POLICY_NEVER if policy == c.RESTART_POLICY_EXIT_CODE else policy
    return template, overridden


def _env(name: str, value: str) -> Object:
    """An env var as the API server returns it: an empty value is left out (omitempty)."""
    return {"name": name, "value": value} if value else {"name": name}


def _append_env(container: Object, env: list[Object]) -> None:
    container["env"] = [*(container.get("env") or []), *env]


def _service(kind_name: str, job_name: str, spec: _Spec, kind: Kind, index: int) -> Object:
    """The headless Service of one replica: the default container's ports by name."""
    labels = _labels(kind_name, job_name, spec.rtype, index, master=False)
    container = _default_container(spec.template["spec"]["containers"], kind.container) or {}
    ports = [{"name": p.get("name", ""), "port": p["containerPort"]} for p in container.get("ports") or []
             if isinstance(p, Mapping) and "containerPort" in p]
    return {"metadata": {"name": f"{job_name}-{spec.rtype.lower()}-{index}", "labels": dict(labels)},
            "spec": {"clusterIP": "None", "selector": dict(labels), "ports": ports}}


def _replica(kind_name: str, job: Mapping[str, Any], kind: Kind, spec: _Spec, index: int, master: bool,
             template: Object, overridden: bool) -> Replica:
    job_name = str(job["metadata"]["name"])
    name = f"{job_name}-{spec.rtype.lower()}-{index}"
    return Replica(spec.key, index, name, _labels(kind_name, job_name, spec.rtype, index, master), template,
                   _service(kind_name, job_name, spec, kind, index), (c.EVENT_SUCCESSFUL_CREATE_POD,
                                                                      f"Created pod: {name}"),
                   c.EVENT_POD_TEMPLATE_RESTART_POLICY if overridden else None)


# --- PyTorchJob ---------------------------------------------------------------------------------

def _pytorch(job: Mapping[str, Any], kind: Kind, specs: dict[str, _Spec]) -> list[Replica]:
    job_spec = job.get("spec") or {}
    job_name = str(job["metadata"]["name"])
    elastic = job_spec.get("elasticPolicy") if isinstance(job_spec.get("elasticPolicy"), Mapping) else None
    nproc = job_spec.get("nprocPerNode")
    if nproc is None and (elastic is None or elastic.get("nProcPerNode") is None):
        nproc = c.PYTORCH_DEFAULT_NPROC_PER_NODE
    total = sum(s.replicas for s in specs.values())
    master = _of_type(specs, c.REPLICA_MASTER)
    master_addr = f"{job_name}-{c.REPLICA_MASTER.lower()}-0"
    nproc_int = int(nproc) if isinstance(nproc, str) and _INTEGER.fullmatch(nproc) else 1
    out = []
    for spec in specs.values():
        rtype = spec.rtype.lower()
        for index in range(spec.replicas):
            template, overridden = _pod_template(spec)
            env = [_env(c.ENV_PYTHONUNBUFFERED, "1")]
            if master is not None:
                port = str(_port(master, kind))
                rank = str(index + 1 if rtype == c.REPLICA_WORKER.lower() else index)
                env += [_env(c.ENV_MASTER_PORT, port), _env(c.ENV_PET_MASTER_PORT, port),
                        _env(c.ENV_MASTER_ADDR, master_addr), _env(c.ENV_PET_MASTER_ADDR, master_addr),
                        _env(c.ENV_WORLD_SIZE, str(total * nproc_int)), _env(c.ENV_RANK, rank),
                        _env(c.ENV_PET_NODE_RANK, rank)]
            if nproc is not None:
                env.append(_env(c.ENV_PET_NPROC_PER_NODE, str(nproc)))
            env += _elastic_env(job_name, elastic, specs, kind) if elastic is not None else \
                [_env(c.ENV_PET_NNODES, str(total))]
            for container in template["spec"]["containers"]:
                _append_env(container, env)
            if master is not None and rtype == c.REPLICA_WORKER.lower():
                template["spec"]["initContainers"] = [*(template["spec"].get("initContainers") or []),
                                                      _init_container(master_addr)]
            is_master = spec.rtype == c.REPLICA_MASTER if master is not None else \
                spec.rtype == c.REPLICA_WORKER and index == 0
            out.append(_replica(c.PYTORCH_JOB_KIND, job, kind, spec, index, is_master, template, overridden))
    return out


def _elastic_env(job_name: str, elastic: Mapping[str, Any], specs: dict[str, _Spec], kind: Kind) -> list[Object]:
    """The rendezvous env of an elastic PyTorchJob (torchrun reads PET_*)."""
    worker = _of_type(specs, c.REPLICA_WORKER)
    assert worker is not None  # _defaulted refuses an elastic job without workers
    low, high = elastic.get("minReplicas"), elastic.get("maxReplicas")
    low, high = (low if low is not None else high), (high if high is not None else low)
    if low is None:
        low = high = worker.replicas
    host = elastic.get("rdzvHost") or f"{job_name}-{c.REPLICA_WORKER.lower()}-0"
    port = elastic.get("rdzvPort") if elastic.get("rdzvPort") is not None else _port(worker, kind)
    env = [_env(c.ENV_PET_RDZV_ENDPOINT, f"{host}:{port}"),
           _env(c.ENV_PET_RDZV_BACKEND, str(elastic.get("rdzvBackend") or c.PYTORCH_DEFAULT_RDZV_BACKEND)),
           _env(c.ENV_PET_NNODES, f"{low}:{high}")]
    for field_name, env_name in (("maxRestarts", c.ENV_PET_MAX_RESTARTS), ("nProcPerNode", c.ENV_PET_NPROC_PER_NODE),
                                 ("rdzvId", c.ENV_PET_RDZV_ID)):
        if elastic.get(field_name) is not None:
            env.append(_env(env_name, str(elastic[field_name])))
    conf = elastic.get("rdzvConf")
    if isinstance(conf, list) and conf:
        env.append(_env(c.ENV_PET_RDZV_CONF, ",".join(f"{item.get('key', '')}={item.get('value', '')}"
                                                      for item in conf if isinstance(item, Mapping))))
    if elastic.get("standalone") is True:
        env.append(_env(c.ENV_PET_STANDALONE, ""))
    return env


def _init_container(master_addr: str) -> Object:
    """The operator's default init container for a worker: wait until the master's name resolves."""
    return {"name": c.PYTORCH_INIT_CONTAINER, "image": c.PYTORCH_INIT_IMAGE, "imagePullPolicy": c.IMAGE_PULL_IF_NOT_PRESENT,
            "resources": {"limits": {c.CPU: "100m", c.MEMORY: "20Mi"}, "requests": {c.CPU: "50m", c.MEMORY: "10Mi"}},
            "command": ["sh", "-c", _INIT_COMMAND.format(tries=c.PYTORCH_INIT_MAX_TRIES, master=master_addr)]}


# --- TFJob --------------------------------------------------------------------------------------

def _tensorflow(job: Mapping[str, Any], kind: Kind, specs: dict[str, _Spec]) -> list[Replica]:
    meta = job["metadata"]
    job_name, namespace = str(meta["name"]), str(meta.get("namespace", ""))
    distributed = sum(s.replicas for s in specs.values() if s.rtype in kind.types) != 1
    cluster = {s.rtype.lower(): [f"{job_name}-{s.rtype.lower()}-{i}.{namespace}.svc:{_port(s, kind) or kind.port}"
                                 for i in range(s.replicas)] for s in specs.values()}
    chief = any(s.rtype in (c.REPLICA_CHIEF, c.REPLICA_MASTER) for s in specs.values())
    dynamic = bool((job.get("spec") or {}).get("enableDynamicWorker"))
    out = []
    for spec in specs.values():
        for index in range(spec.replicas):
            template, overridden = _pod_template(spec)
            if distributed:
                config = _tf_config(cluster, spec.rtype.lower(), index, dynamic)
                container = _default_container(template["spec"]["containers"], kind.container)
                if container is not None:
                    _append_env(container, [_env(c.ENV_TF_CONFIG, config)])
            is_master = spec.rtype in (c.REPLICA_CHIEF, c.REPLICA_MASTER) if chief else \
                spec.rtype == c.REPLICA_WORKER and index == 0
            out.append(_replica(c.TF_JOB_KIND, job, kind, spec, index, is_master, template, overridden))
    return out


def _tf_config(cluster: dict[str, list[str]], rtype: str, index: int, dynamic: bool) -> str:
    """TF_CONFIG as Go's encoding/json writes it: struct fields in order, map keys sorted, no spaces."""
    task = {"type": rtype, "index": index}
    if not dynamic:
        return _go_json({"cluster": dict(sorted(cluster.items())), "task": task, "environment": c.TF_ENVIRONMENT})
    ps, worker = c.REPLICA_PS.lower(), c.REPLICA_WORKER.lower()
    sparse: Object = {"worker": {}, "ps": []}
    if rtype == ps:
        sparse["ps"] = [cluster[ps][index]]
    elif rtype == worker:
        sparse = {"worker": {str(index): cluster[worker][index]}, "ps": cluster.get(ps)}
    return _go_json({"cluster": sparse, "task": task})


def _go_json(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))


# --- MPIJob -------------------------------------------------------------------------------------

def _mpi(job: Mapping[str, Any], kind: Kind, specs: dict[str, _Spec]) -> list[Replica]:
    job_name = str(job["metadata"]["name"])
    out = []
    worker = _of_type(specs, c.REPLICA_WORKER)
    if worker is not None:
        for index in range(worker.replicas):
            template, _ = _pod_template(worker)
            container = template["spec"]["containers"][0]
            if not container.get("command"):
                container["command"], container["args"] = [c.MPI_WORKER_COMMAND[0]], list(c.MPI_WORKER_COMMAND[1:])
            name = f"{job_name}-{c.REPLICA_WORKER.lower()}-{index}"
            out.append(Replica(worker.key, index, name,
                               _labels(c.MPI_JOB_KIND, job_name, worker.rtype, index, master=False), template, None,
                               (c.EVENT_SUCCESSFUL_CREATE_POD, f"Created worker pod: {name}"), None))
    launcher = _of_type(specs, c.REPLICA_LAUNCHER)
    if launcher is not None:
        template, overridden = _pod_template(launcher)
        container = template["spec"]["containers"][0]
        script = f"{c.MPI_CONFIG_MOUNT}/{c.MPI_KUBEXEC}"
        env = [_env(c.ENV_OMPI_RSH_AGENT, script), _env(c.ENV_OMPI_HOSTFILE, f"{c.MPI_CONFIG_MOUNT}/{c.MPI_HOSTFILE}")]
        if not _asks_gpus(launcher):
            env += [_env(c.ENV_NVIDIA_VISIBLE_DEVICES, ""), _env(c.ENV_NVIDIA_DRIVER_CAPABILITIES, "")]
        names = {e.get("name") for e in container.get("env") or [] if isinstance(e, Mapping)}
        if c.ENV_I_MPI_HYDRA_BOOTSTRAP not in names:
            env.append(_env(c.ENV_I_MPI_HYDRA_BOOTSTRAP, c.MPI_DEFAULT_BOOTSTRAP))
        if c.ENV_I_MPI_HYDRA_BOOTSTRAP_EXEC not in names:
            env.append(_env(c.ENV_I_MPI_HYDRA_BOOTSTRAP_EXEC, script))
        _append_env(container, env)
        name = f"{job_name}-{c.REPLICA_LAUNCHER.lower()}"
        out.append(Replica(launcher.key, 0, name,
                           _labels(c.MPI_JOB_KIND, job_name, launcher.rtype, None, master=True), template, None,
                           (f"{c.MPI_JOB_KIND}{c.KUBEFLOW_REASON_RUNNING}", f"launcher pod created success: {name}"),
                           c.EVENT_MPI_POD_TEMPLATE_RESTART_POLICY if overridden else None))
    return out


def _asks_gpus(spec: _Spec) -> bool:
    """isGPULauncher: a launcher container whose limits name a GPU resource."""
    for container in spec.template["spec"]["containers"]:
        limits = (container.get("resources") or {}).get("limits") or {}
        if any(str(key).endswith(".com/gpu") or "gpu" in str(key) for key in limits):
            return True
    return False
