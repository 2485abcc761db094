"""`koord-queue`: the command line. Each command's work lives in its own module."""

from __future__ import annotations

import click


@click.group()
@click.version_option(package_name="koord-queue")
def main() -> None:
    """Job-level queueing for Kubernetes training jobs against ElasticQuota."""


@main.command()
@click.argument("trace", type=click.Path(dir_okay=False))
@click.option("--json", "as_json", is_flag=True, help="Print the result as one JSON object.")
def simulate(trace: str, as_json: bool) -> None:
    """Replay TRACE (YAML) against the quotas and policies on a virtual clock."""
    from koordqueue.sim.command import simulate_command
    from koordqueue.sim.trace import TraceError

    try:
        simulate_command(trace, as_json)
    except TraceError as err:
        click.echo(f"Error: {err}", err=True)
        raise SystemExit(2) from None
