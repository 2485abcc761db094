"""`koord-queue`: the command line. Each command's work lives in its own module."""

from __future__ import annotations

from typing import Any

import click

from koordqueue.api import constants as c
from koordqueue.api.dra import parse_mappings
from koordqueue.controller.config import ALL_JOB_KINDS, ControllerConfig
from koordqueue.controller.scope import parse_selector


def _checked_mappings(_ctx: click.Context, _param: click.Parameter, value: str) -> str:
    """--device-class-mappings is the admin's: a bad one stops the controller before it starts."""
    try:
        parse_mappings(value)
    except ValueError as e:
        raise click.BadParameter(str(e)) from None
    return value


@click.group()
@click.version_option(package_name="koord-queue")
def main() -> None:
    """Job-level queueing for Kubernetes training jobs against ElasticQuota."""


@main.command()
@click.argument("trace", type=click.Path(dir_okay=False))
@click.option("--json", "as_json", is_flag=True, help="Print the result as one JSON object.")
@click.option("--html", "html_path", type=click.Path(dir_okay=False),
              help="Also write a self-contained HTML report with plots to this file.")
@click.option("--compare", "compare_trace", type=click.Path(dir_okay=False),
              help="With --html: another trace (say, other quota settings) shown side by side.")
def simulate(trace: str, as_json: bool, html_path: str | None, compare_trace: str | None) -> None:
    """Replay TRACE (YAML or JSON) against the quotas and policies on a virtual clock."""
    from koordqueue.sim.command import simulate_command
    from koordqueue.sim.trace import TraceError

    if compare_trace and not html_path:
        raise click.UsageError("--compare puts two runs side by side in the HTML report: give --html FILE too")
    try:
        if html_path:
            from koordqueue.sim.htmlreport import html_report_command  # (its imports only when asked for)

            html_report_command(trace, as_json, html_path, compare_trace)
        else:
            simulate_command(trace, as_json)
    except TraceError as err:
        click.echo(f"Error: {err}", err=True)
        raise SystemExit(2) from None


@main.command()
@click.option("--kubeconfig", envvar="KUBECONFIG", default=None, help="Kubeconfig file (default: in-cluster).")
@click.option("--job-kinds", default=",".join(sorted(ALL_JOB_KINDS)), show_default=True,
              help="Comma-separated job kinds to queue (the chart's extension.<kind>.enable).")
@click.option("--workload-kinds", default="", show_default=True,
              help="Comma-separated workloads queued by a scheduling gate: pod, deployment, statefulset, "
                   "leaderworkerset (the chart's extension.<name>.enable; none by default).")
@click.option("--namespace", default=c.SYSTEM_NAMESPACE, show_default=True,
              help="Namespace of the Queues made for quotas, and of the leader Lease.")
@click.option("--default-queue-policy", type=click.Choice([p.value for p in c.QueuePolicy]),
              default=c.DEFAULT_QUEUE_POLICY.value, show_default=True)
@click.option("--protect-seconds", type=float, default=c.DEFAULT_PROTECT_SECONDS, show_default=True,
              help="Admitted units younger than this are never preempted.")
@click.option("--fair-sharing", type=click.Choice([c.FAIR_SHARING_NONE, c.FAIR_SHARING_USAGE_HISTORY]),
              default=c.FAIR_SHARING_NONE, show_default=True,
              help="How children share the spare capacity past their mins where their parent quota has no "
                   "koord-queue/fair-sharing annotation (docs/fairness.md).")
@click.option("--usage-half-life", type=float, default=c.DEFAULT_USAGE_HALF_LIFE_SECONDS, show_default=True,
              help="Seconds in which past usage counts half, for fair sharing by usage history.")
@click.option("--backoff-base", type=float, default=c.BACKOFF_BASE_SECONDS, show_default=True)
@click.option("--backoff-cap", type=float, default=c.BACKOFF_CAP_SECONDS, show_default=True)
@click.option("--wait-for-pods-running-timeout", type=float, default=300.0, show_default=True,
              help="Seconds an admitted job's pods have to run, on Queues with wait-for-pods-running.")
@click.option("--resume-refused-timeout", type=float, default=60.0, show_default=True,
              help="Seconds an admitted job's resume may keep failing before its unit is sent back "
                   "and its quota released.")
@click.option("--oversell-rate", type=float, default=1.0, show_default=True,
              help="Koord-Queue's oversellrate: a job fits while its quota's (and each ancestor's) "
                   "used + request <= max times this; the nodes' allocatable is oversold alike.")
@click.option("--forecast-interval", type=float, default=c.FORECAST_INTERVAL_SECONDS, show_default=True,
              help="Seconds between recomputes of the start-time forecast (0: none).")
@click.option("--default-expected-runtime", type=float, default=c.DEFAULT_EXPECTED_RUNTIME_SECONDS,
              show_default=True, help="Seconds a job runs, for the forecast, when neither its annotation "
                                      "koord-queue/expected-runtime nor the runtimes of jobs like it say.")
@click.option("--qps", type=float, default=200.0, show_default=True)
@click.option("--burst", type=int, default=400, show_default=True)
@click.option("--koordinator", type=click.Choice([m.value for m in c.KoordinatorMode]),
              default=c.KoordinatorMode.AUTO.value, show_default=True,
              help="Mark admitted jobs' pods for koord-scheduler (the quota label and a gang); "
                   "auto: once Koordinator's own quotas are seen.")
@click.option("--leader-elect/--no-leader-elect", default=True, show_default=True)
@click.option("--lease-name", default="koord-queue-controller", show_default=True)
@click.option("--lease-duration", type=float, default=10.0, show_default=True,
              help="Seconds a Lease holds without renewal: how long a dead leader blocks the others.")
@click.option("--renew-deadline", type=float, default=7.0, show_default=True,
              help="The leader steps down when it could not renew for this long.")
@click.option("--retry-period", type=float, default=2.0, show_default=True)
@click.option("--pod-name", envvar="POD_NAME", default="",
              help="This replica's pod (default: $POD_NAME): labelled koord-queue-leader=true while it leads, "
                   "for the visibility API's Service.")
@click.option("--pod-namespace", envvar="POD_NAMESPACE", default="", help="Its namespace (default: $POD_NAMESPACE).")
@click.option("--identity", default="", help="This replica's name in the Lease (default: host, pid, random).")
@click.option("--metrics-port", type=int, default=8080, show_default=True, help="/metrics, /healthz, /readyz.")
@click.option("--dashboard/--no-dashboard", default=False, show_default=True, help="Serve the web dashboard.")
@click.option("--dashboard-port", type=int, default=8082, show_default=True)
@click.option("--dashboard-host", default="127.0.0.1", show_default=True,
              help="Address the dashboard binds. Loopback: no token asked; any other: each request needs a bearer "
                   "token (TokenReview), and its user sees the units of the namespaces it may list QueueUnits in.")
@click.option("--dashboard-max-streams", type=int, default=16, show_default=True,
              help="Live event streams served at once; one more is answered 429.")
@click.option("--api-handler/--no-api-handler", default=False, show_default=True,
              help="Serve Koord-Queue's HTTP API (/apis/v1/queue, /apis/v1/userquota, /apis/v1/elasticquotatree, "
                   "/apis/v1/elasticquota; read-only JSON) on the leader.")
@click.option("--api-handler-port", type=int, default=c.KOORD_API_PORT, show_default=True)
@click.option("--api-handler-host", default="127.0.0.1", show_default=True,
              help="Address to bind it to: loopback (kubectl port-forward reaches it); it has no authentication.")
@click.option("--bare-queue-units/--no-bare-queue-units", default=True, show_default=True,
              help="Queue QueueUnits no job of ours stands behind (a Koord-Queue job extension's, a platform's) "
                   "as Koord-Queue does; off, they wait and say why.")
@click.option("--webhook/--no-webhook", default=False, show_default=True,
              help="Serve the mutating admission webhook that suspends new jobs before their pods exist.")
@click.option("--webhook-port", type=int, default=9443, show_default=True)
@click.option("--visibility/--no-visibility", default=False, show_default=True,
              help="Serve the visibility API (visibility.koord-queue.x-k8s.io, pending units and their positions) "
                   "on the webhook's port, for kube-apiserver's aggregation layer.")
@click.option("--webhook-cert-dir", default="", help="tls.crt and tls.key to serve with (empty: make our own).")
@click.option("--webhook-config-name", default="koord-queue", show_default=True,
              help="Mutating and ValidatingWebhookConfiguration whose caBundle we keep when we make our own certificate.")
@click.option("--webhook-host", "webhook_hosts", multiple=True,
              help="DNS name or IP for our own certificate (repeatable; e.g. the Service's name).")
@click.option("--managed-jobs-namespace-selector", default="",
              help="Whose namespaces' jobs are queued: a label selector in JSON, as the webhook's namespaceSelector "
                   "(empty or {}: all but kube-system, kube-public, kube-node-lease and --namespace).")
@click.option("--device-class-mappings", default="", callback=_checked_mappings,
              help="DRA: charge each device a pod's ResourceClaims ask for as a quota resource, "
                   "deviceclass=resource[:count][@driver], comma-separated (Kueue's deviceClassMappings; "
                   "with @driver, the driver's ResourceSlices say which nodes have such devices).")
@click.option("--log-format", type=click.Choice(["text", "json"]), default="text", show_default=True)
@click.option("--log-level", type=click.Choice(["debug", "info", "warning", "error"]), default="info",
              show_default=True)
def controller(**opts: Any) -> None:
    """Run the controller against a Kubernetes cluster."""
    from koordqueue.controller.manager import main as run

    kinds = frozenset(k.strip() for k in str(opts["job_kinds"]).split(",") if k.strip())
    unknown = sorted(kinds - ALL_JOB_KINDS)
    if unknown:
        raise click.BadParameter(f"unknown job kinds {unknown}; known: {sorted(ALL_JOB_KINDS)}",
                                 param_hint="--job-kinds")
    workloads = frozenset(k.strip() for k in str(opts["workload_kinds"]).split(",") if k.strip())
    if unknown_workloads := sorted(workloads - set(c.WORKLOAD_EXTENSIONS)):
        raise click.BadParameter(f"unknown workloads {unknown_workloads}; known: {list(c.WORKLOAD_EXTENSIONS)}",
                                 param_hint="--workload-kinds")
    try:
        selector = parse_selector(opts["managed_jobs_namespace_selector"])
    except ValueError as e:
        raise click.BadParameter(str(e), param_hint="--managed-jobs-namespace-selector") from None
    config = ControllerConfig(
        job_kinds=kinds,
        workload_kinds=workloads,
        managed_jobs_namespace_selector=selector,
        system_namespace=opts["namespace"],
        default_queue_policy=c.QueuePolicy(opts["default_queue_policy"]),
        protect_seconds=opts["protect_seconds"],
        fair_sharing=opts["fair_sharing"] == c.FAIR_SHARING_USAGE_HISTORY,
        usage_half_life=opts["usage_half_life"],
        backoff_base=opts["backoff_base"],
        backoff_cap=opts["backoff_cap"],
        wait_for_pods_running_seconds=opts["wait_for_pods_running_timeout"],
        resume_refused_seconds=opts["resume_refused_timeout"],
        oversell_rate=opts["oversell_rate"],
        forecast_interval_seconds=opts["forecast_interval"],
        default_expected_runtime_seconds=opts["default_expected_runtime"],
        qps=opts["qps"],
        burst=opts["burst"],
        koordinator=c.KoordinatorMode(opts["koordinator"]),
        leader_election=opts["leader_elect"],
        lease_name=opts["lease_name"],
        lease_duration=opts["lease_duration"],
        renew_deadline=opts["renew_deadline"],
        retry_period=opts["retry_period"],
        identity=opts["identity"],
        metrics_port=opts["metrics_port"],
        dashboard=opts["dashboard"],
        dashboard_port=opts["dashboard_port"],
        dashboard_host=opts["dashboard_host"],
        dashboard_max_streams=opts["dashboard_max_streams"],
        bare_queue_units=opts["bare_queue_units"],
        api_handler=opts["api_handler"],
        api_handler_port=opts["api_handler_port"],
        api_handler_host=opts["api_handler_host"],
        webhook=opts["webhook"],
        webhook_port=opts["webhook_port"],
        webhook_cert_dir=opts["webhook_cert_dir"],
        webhook_config_name=opts["webhook_config_name"],
        webhook_hosts=tuple(opts["webhook_hosts"]) or ("127.0.0.1",),
        visibility=opts["visibility"],
        pod_name=opts["pod_name"],
        pod_namespace=opts["pod_namespace"],
        device_class_mappings=opts["device_class_mappings"],
    )
    run(opts["kubeconfig"], config, opts["log_format"], opts["log_level"])


CONTROLLER_NAMESPACE = click.option(
    "--controller-namespace", default=c.SYSTEM_NAMESPACE, show_default=True,
    help="The controller's namespace (its --namespace), where it publishes the settings it loads objects with.")


@main.command()
@click.option("--kubeconfig", envvar="KUBECONFIG", default=None, help="Kubeconfig file (default: in-cluster).")
@CONTROLLER_NAMESPACE
def status(kubeconfig: str | None, controller_namespace: str) -> None:
    """Quotas (min / used / runtime / max) and queues with their pending units."""
    from koordqueue.reports import status_command

    click.echo(status_command(kubeconfig, controller_namespace))


@main.command()
@click.argument("target", metavar="KIND/NAME", required=False)
@click.option("-n", "--namespace", default=None, help="The job's namespace (default: default; with -f: the file's).")
@click.option("-f", "--filename", type=click.Path(dir_okay=False, exists=True), default=None,
              help="A job not submitted yet: what it would meet (its unit, quota, queue, position, whether it "
                   "could ever fit, when it would start), from the live state; nothing is created.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object (expectedStart, expectedStartRange, "
                                                        "basis, ...).")
@click.option("--kubeconfig", envvar="KUBECONFIG", default=None, help="Kubeconfig file (default: in-cluster).")
@CONTROLLER_NAMESPACE
def explain(target: str | None, namespace: str | None, filename: str | None, as_json: bool, kubeconfig: str | None,
            controller_namespace: str) -> None:
    """Why a job waits, where it stands in its queue, when it is expected to start, and what would let it in."""
    from koordqueue.reports import ReportError, explain_command, explain_file_command

    if (target is None) == (filename is None):
        raise click.UsageError("give KIND/NAME, or -f job.yaml")
    try:
        if filename is not None:
            click.echo(explain_file_command(kubeconfig, filename, namespace, controller_namespace, as_json))
        else:
            assert target is not None
            click.echo(explain_command(kubeconfig, target, namespace or "default", controller_namespace, as_json))
    except ReportError as e:
        raise click.ClickException(str(e)) from None


@main.command()
@click.option("--state-dir", type=click.Path(file_okay=False), default=".koord-queue", show_default=True,
              help="Where the API server keeps its state, token and kubeconfig.")
@click.option("--nodes", type=click.IntRange(0, 10_000), default=4, show_default=True)
@click.option("--gpus-per-node", type=click.IntRange(0, 1024), default=8, show_default=True)
@click.option("--example/--no-example", default=False, show_default=True,
              help="Apply the seed guide's ElasticQuota, Queue and PyTorchJob and show their state.")
@click.option("--metrics-port", type=int, default=0, show_default=True, help="0: any free port.")
@click.option("--dashboard-port", type=int, default=8082, show_default=True)
@click.option("--api-handler-port", type=int, default=c.KOORD_API_PORT, show_default=True,
              help="Koord-Queue's HTTP API (/apis/v1/queue, ...) on loopback; 0: any free port.")
@click.option("--control-plane", type=click.Choice(["embedded", "kube"]), default="embedded", show_default=True,
              help="embedded: our own API server (Python only). kube: the real kube-apiserver, etcd, "
                   "scheduler, controller-manager, kwok and the training operator, built from Go modules "
                   "first when missing (needs Go 1.26).")
@click.option("--device-class-mappings", default="", callback=_checked_mappings,
              help="DRA: deviceclass=resource[:count][@driver], comma-separated (as the controller's flag).")
def up(state_dir: str, nodes: int, gpus_per_node: int, example: bool, metrics_port: int, dashboard_port: int,
       api_handler_port: int, control_plane: str, device_class_mappings: str) -> None:
    """The whole system on this machine with no cluster: API server, simulated nodes, controller."""
    from pathlib import Path

    from koordqueue.up import main as run_up

    run_up(Path(state_dir), nodes, gpus_per_node, example, metrics_port, dashboard_port, control_plane,
           api_handler_port, device_class_mappings)


if __name__ == "__main__":
    main()
