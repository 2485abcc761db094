"""The resource types the embedded API server serves: built-in kinds and CRDs.

Discovery, OpenAPI, Table printing and request routing all read this one registry, so
a CRD registered at run time shows up everywhere at once.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True)
class ResourceType:
    group: str  # "" for the core group
    version: str
    kind: str
    plural: str
    singular: str
    namespaced: bool
    short_names: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()
    subresources: frozenset[str] = frozenset()  # e.g. {"status"}
    # CRD-style additionalPrinterColumns: [{"name", "type", "jsonPath", "description"?, "priority"?}]
    printer_columns: tuple[dict[str, Any], ...] = ()
    schema: dict[str, Any] | None = None  # openAPIV3Schema; None: anything goes
    # A CRD's scale subresource (specReplicasPath, statusReplicasPath, labelSelectorPath): not
    # served, but its paths are validated as kube-apiserver validates them.
    scale: dict[str, str] | None = None
    from_crd: str | None = None  # name of the CRD that defined it
    verbs: tuple[str, ...] = (
        "create", "delete", "deletecollection", "get", "list", "patch", "update", "watch",
    )
    # Field-selector paths served beyond metadata.name/metadata.namespace, e.g. "spec.nodeName".
    selectable_fields: tuple[str, ...] = ()

    @property
    def group_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def api_version(self) -> str:
        return self.group_version

    @property
    def list_kind(self) -> str:
        return f"{self.kind}List"

    @property
    def storage_key(self) -> str:
        """Where objects live: every served version of a resource shares one storage."""
        return f"{self.group}/{self.plural}"

    @property
    def has_status(self) -> bool:
        return "status" in self.subresources


@dataclass
class Registry:
    """All served types, by (group, version, plural). Mutable: CRDs come and go."""

    _types: dict[tuple[str, str, str], ResourceType] = field(default_factory=dict)

    def add(self, rt: ResourceType) -> None:
        self._types[(rt.group, rt.version, rt.plural)] = rt

    def remove(self, group: str, version: str, plural: str) -> None:
        self._types.pop((group, version, plural), None)

    def get(self, group: str, version: str, plural: str) -> ResourceType | None:
        return self._types.get((group, version, plural))

    def versions_of(self, storage_key: str) -> list[ResourceType]:
        return [rt for rt in self._types.values() if rt.storage_key == storage_key]

    def by_kind(self, api_version: str, kind: str) -> ResourceType | None:
        for rt in self._types.values():
            if rt.api_version == api_version and rt.kind == kind:
                return rt
        return None

    def all(self) -> list[ResourceType]:
        return sorted(self._types.values(), key=lambda r: (r.group, r.version, r.plural))

    def groups(self) -> dict[str, list[str]]:
        """group -> served versions (preferred first)."""
        out: dict[str, list[str]] = {}
        for rt in self.all():
            versions = out.setdefault(rt.group, [])
            if rt.version not in versions:
                versions.append(rt.version)
        return out
