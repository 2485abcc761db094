"""The chart's Grafana dashboard: valid, over metrics the controller really exports, and
shipped as the ConfigMap Grafana's sidecar loads when grafana.dashboard.enable is on."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import kubernetes_validate
from prometheus_client.metrics import MetricWrapperBase

from koordqueue.controller.metrics import Metrics
from tests.chart.helmtool import CHART, KUBE_VERSION, NAMESPACE, render

DASHBOARD_FILE = CHART / "dashboards" / "koord-queue.json"
SERIES_SUFFIXES = {"counter": ("_total", "_created"), "gauge": ("",), "histogram": ("_bucket", "_sum", "_count", "_created")}
SCRAPE_LABELS = {"instance", "job"}  # added by Prometheus to every series it scrapes
METRIC = re.compile(r"\bkoord_queue_[a-z0-9_]+\b")
SELECTOR = re.compile(r"\b(koord_queue_[a-z0-9_]+)\{([^}]*)\}")
MATCHER = re.compile(r"([a-zA-Z_][a-zA-Z0-9_]*)\s*(?:=~|!~|!=|=)")


def exported_series() -> dict[str, tuple[str, set[str]]]:
    """Each series name Prometheus scrapes from the controller: its metric and its labels."""
    series: dict[str, tuple[str, set[str]]] = {}
    for metric in vars(Metrics()).values():
        if not isinstance(metric, MetricWrapperBase):
            continue
        labels = set(metric._labelnames) | SCRAPE_LABELS  # the names the metric was declared with
        for family in metric.describe():
            for suffix in SERIES_SUFFIXES[family.type]:
                series[family.name + suffix] = (family.name, labels | ({"le"} if suffix == "_bucket" else set()))
    return series


def dashboard() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(DASHBOARD_FILE.read_text())
    return loaded


def queries(board: dict[str, Any]) -> list[str]:
    """Every PromQL text of the dashboard: panel targets and template variables."""
    texts = [target["expr"] for panel in board["panels"] for target in panel["targets"]]
    texts += [var["definition"] for var in board["templating"]["list"] if var["type"] == "query"]
    return texts


def test_exported_series_are_named_as_prometheus_client_names_them() -> None:
    series = exported_series()
    assert {"koord_queue_admissions_total", "koord_queue_admission_wait_seconds_bucket", "koord_queue_quota",
            "koord_queue_leader"} <= series.keys()
    assert "koord_queue_admissions" not in series  # a counter is scraped with _total
    assert series["koord_queue_quota"][1] == {"quota", "resource", "kind"} | SCRAPE_LABELS


def test_every_metric_in_the_queries_is_exported() -> None:
    series = exported_series()
    used = {name for text in queries(dashboard()) for name in METRIC.findall(text)}
    assert used and used <= series.keys(), used - series.keys()


def test_every_exported_metric_is_on_the_dashboard() -> None:
    series = exported_series()
    shown = {series[name][0] for text in queries(dashboard()) for name in METRIC.findall(text)}
    assert shown == {metric for metric, _ in series.values()}


def test_selectors_use_labels_the_metric_has() -> None:
    series = exported_series()
    checked = 0
    for text in queries(dashboard()):
        for name, matchers in SELECTOR.findall(text):
            labels = set(MATCHER.findall(matchers))
            assert labels <= series[name][1], (name, labels - series[name][1], text)
            checked += 1
    assert checked >= 10


def test_panels_are_complete_and_laid_out_on_the_grid() -> None:
    board = dashboard()
    assert board["uid"] == "koord-queue" and board["title"] == "Koord-Queue"
    variables = {var["name"] for var in board["templating"]["list"]}
    assert {"datasource", "quota", "queue", "resource"} <= variables
    cells: set[tuple[int, int]] = set()
    ids = [panel["id"] for panel in board["panels"]]
    assert len(ids) == len(set(ids))
    for panel in board["panels"]:
        assert panel["title"] and panel["description"] and panel["targets"], panel["id"]
        assert panel["datasource"]["uid"] == "${datasource}"
        for target in panel["targets"]:
            assert target["datasource"]["uid"] == "${datasource}"
            assert target["expr"].count("(") == target["expr"].count(")"), target["expr"]
            assert target["expr"].count("{") == target["expr"].count("}"), target["expr"]
            used_variables = set(re.findall(r"\$([a-z_]+)", target["expr"])) - {"__rate_interval"}
            assert used_variables <= variables, target["expr"]
        grid = panel["gridPos"]
        assert grid["x"] + grid["w"] <= 24
        mine = {(grid["x"] + dx, grid["y"] + dy) for dx in range(grid["w"]) for dy in range(grid["h"])}
        assert not mine & cells, f"panel {panel['title']} overlaps another"
        cells |= mine


def test_off_by_default() -> None:
    assert not [obj for obj in render() if obj["kind"] == "ConfigMap"]


def test_configmap_for_the_grafana_sidecar() -> None:
    values = {"grafana": {"dashboard": {"enable": True, "annotations": {"grafana_folder": "Koord-Queue"}}}}
    maps = [obj for obj in render(values) if obj["kind"] == "ConfigMap"]
    assert len(maps) == 1
    config_map = maps[0]
    kubernetes_validate.validate(config_map, KUBE_VERSION, strict=True)
    assert config_map["metadata"]["namespace"] == NAMESPACE
    assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert config_map["metadata"]["annotations"] == {"grafana_folder": "Koord-Queue"}
    assert json.loads(config_map["data"][Path(DASHBOARD_FILE).name]) == dashboard()
