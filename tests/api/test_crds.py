"""The CRDs are generated from one place, stay structural, and the files do not drift."""

from __future__ import annotations

from pathlib import Path

from koordqueue.api.crds import all_crds, our_crds, render

CONFIG = Path(__file__).parents[2] / "config" / "crd"


def test_config_files_match_the_generator() -> None:
    for manifest in our_crds():
        path = CONFIG / f"{manifest['metadata']['name']}.yaml"
        assert path.read_text() == render(manifest), f"{path} drifted: run python -m koordqueue.api.crds --write config/crd"
    assert len(list(CONFIG.glob("*.yaml"))) == len(our_crds())


def _walk(schema: dict, where: str) -> None:
    assert "$ref" not in schema, where
    if not schema.get("x-kubernetes-int-or-string") and not schema.get("x-kubernetes-preserve-unknown-fields"):
        assert "type" in schema, f"{where} has no type"
    for name, sub in (schema.get("properties") or {}).items():
        _walk(sub, f"{where}.{name}")
    if isinstance(schema.get("items"), dict):
        _walk(schema["items"], f"{where}[]")
    if isinstance(schema.get("additionalProperties"), dict):
        _walk(schema["additionalProperties"], f"{where}{{}}")


def test_schemas_are_structural() -> None:
    for manifest in all_crds():
        version = manifest["spec"]["versions"][0]
        _walk(version["schema"]["openAPIV3Schema"], manifest["metadata"]["name"])
        assert version["subresources"] == {"status": {}}


def test_queue_unit_printer_columns_are_koord_queues() -> None:
    unit = next(m for m in our_crds() if m["spec"]["names"]["kind"] == "QueueUnit")
    columns = unit["spec"]["versions"][0]["additionalPrinterColumns"]
    assert [(c["name"].upper(), c["jsonPath"]) for c in columns] == [
        ("PHASE", ".status.phase"), ("PRIORITY", ".spec.priority"), ("ADMISSIONS", ".status.admissions"),
        ("JOBTYPE", ".spec.consumerRef.kind"), ("AGE", ".metadata.creationTimestamp"),
    ]
    assert unit["spec"]["names"]["shortNames"] == ["qu"]
