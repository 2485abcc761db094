"""The docs' promise that every command in them is run by tests/docs holds only where
kubectl is: without it test_docs.py skips every one of them. So its absence is a failure
here, not a skip, and so is a kubectl older than the one the README asks for."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

from tests.chart.kube import KUBECTL

README = Path(__file__).parents[2] / "README.md"


def test_kubectl_is_installed_and_as_new_as_the_readme_asks() -> None:
    assert KUBECTL is not None, "kubectl is not on PATH: tests/docs skips every command of the docs without it"
    wanted = re.search(r"kubectl \((\d+)\.(\d+) or newer\)", README.read_text())
    assert wanted, "README.md no longer says which kubectl it needs"
    out = subprocess.run([KUBECTL, "version", "--client", "-o", "json"], capture_output=True, text=True,
                         timeout=30, check=True).stdout
    client = json.loads(out)["clientVersion"]
    minor = re.match(r"\d+", client["minor"])  # "32+" on some builds
    assert minor, client
    have = (int(client["major"]), int(minor.group()))
    assert have >= (int(wanted[1]), int(wanted[2])), f"kubectl {client['gitVersion']} is older than the README asks"
