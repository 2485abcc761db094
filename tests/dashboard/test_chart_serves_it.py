"""The chart turns the dashboard on exactly when controller.dashboard.port is set."""

from __future__ import annotations

from typing import Any

from koordqueue.cli import controller as controller_command
from tests.chart.helmtool import container, render


def controller_params(values: dict[str, Any]) -> dict[str, Any]:
    """The options the real `koord-queue controller` reads from the rendered args."""
    context = controller_command.make_context("controller", list(container(render(values))["args"]))
    return dict(context.params)


def test_a_dashboard_port_serves_the_dashboard() -> None:
    params = controller_params({"controller": {"dashboard": {"port": 8090}}})
    assert params["dashboard"] is True and params["dashboard_port"] == 8090


def test_no_dashboard_by_default() -> None:
    assert controller_params({})["dashboard"] is False
