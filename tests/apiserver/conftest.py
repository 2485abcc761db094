"""Fixtures for the API server tests: a real server on 127.0.0.1 per test, spoken to over HTTPS."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from koordqueue.apiserver.server import APIServer
from koordqueue.apiserver.testing import APIClient, running_apiserver

WIDGET_CRD: dict[str, Any] = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "widgets.example.com"},
    "spec": {
        "group": "example.com",
        "scope": "Namespaced",
        "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "shortNames": ["wd"]},
        "versions": [{
            "name": "v1", "served": True, "storage": True,
            "subresources": {"status": {}},
            "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}},
        }],
    },
}
WIDGETS = "/apis/example.com/v1/namespaces/default/widgets"


@pytest.fixture
async def apiserver(tmp_path: Path) -> AsyncIterator[APIServer]:
    async with running_apiserver(tmp_path / "state", crds=[WIDGET_CRD], test_controls=True) as server:
        yield server


@pytest.fixture
async def api(apiserver: APIServer) -> AsyncIterator[APIClient]:
    async with APIClient(apiserver) as client:
        yield client


def configmap(name: str, labels: dict[str, str] | None = None, **data: str) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if labels:
        meta["labels"] = labels
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": data}


def widget(name: str, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": name}, "spec": spec}
