"""`koord-queue`: the command line. Each command's work lives in its own module."""

from __future__ import annotations

import click


@click.group()
@click.version_option(package_name="koord-queue")
def main() -> None:
    """Job-level queueing for Kubernetes training jobs against ElasticQuota."""
