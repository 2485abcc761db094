"""The API verbs on stored objects: create, get, list, update, patch, delete.

This is the registry strategy of the embedded server, independent of HTTP: system
metadata (uid, creationTimestamp, generation, resourceVersion), optimistic
concurrency, `/status` subresource semantics, finalizers and deletionTimestamp,
namespace lifecycle, CRD registration. Handlers in `server.py` parse requests and
call these; the garbage collector calls them too.
"""

from __future__ import annotations

import base64
import bisect
import builtins  # `list` in the class below is Operations.list
import heapq
import random
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import orjson

from koordqueue.api import constants as c
from koordqueue.apiserver import apply as ssa
from koordqueue.apiserver import builtin, crd, crvalidation, dra, errors, priority
from koordqueue.apiserver import managedfields as mf
from koordqueue.apiserver.builtin import CRD_KEY, NAMESPACE_KEY, POD_KEY
from koordqueue.apiserver.patch import (
    PatchCopyTooLarge,
    PatchError,
    PatchFormatError,
    PatchTooLarge,
    apply_json_patch,
    apply_merge_patch,
    deep_copy,
    merged,
)
from koordqueue.apiserver.registry import Registry, ResourceType
from koordqueue.apiserver.selectors import FieldSelector, LabelSelector
from koordqueue.apiserver.store import ADDED, DELETED, Event, Store
from koordqueue.apiserver.strategic import apply_strategic_merge
from koordqueue.apiserver.validation import check_metadata, check_name

JSON_PATCH = "application/json-patch+json"
MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_PATCH = "application/strategic-merge-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"
PATCH_TYPES = [JSON_PATCH, MERGE_PATCH, APPLY_PATCH, STRATEGIC_PATCH]
MAX_STORED_OBJECT_BYTES = 3 * 512 * 1024  # etcd's default --max-request-bytes, 1.5 MiB

FOREGROUND = "Foreground"
BACKGROUND = "Background"
ORPHAN = "Orphan"
FOREGROUND_FINALIZER = "foregroundDeletion"
ORPHAN_FINALIZER = "orphan"

_SYSTEM_META = ("uid", "creationTimestamp", "namespace", "name", "generation", "deletionTimestamp",
                "deletionGracePeriodSeconds")
_NAME_CHARS = "bcdfghjklmnpqrstvwxz2456789"

ManagedFields = list[dict[str, Any]]  # metadata.managedFields, as server-side apply writes them


class _ChangedMeanwhile(Exception):
    """Another write landed while this one's admission ran: the write is done again from the
    object as it is now (kube-apiserver's GuaranteedUpdate), where a stale resourceVersion the
    request carries is a conflict."""


# (operation, resource type, subresource, object, old object) -> object after mutating admission
Admit = Callable[[str, ResourceType, str, dict[str, Any], dict[str, Any] | None], Awaitable[dict[str, Any]]]
# A validating webhook call: it may only refuse (raise), never change the object.
Validate = Callable[[str, ResourceType, str, dict[str, Any], dict[str, Any] | None], Awaitable[None]]


def now_rfc3339() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _spec_of(obj: dict[str, Any], rt: ResourceType) -> dict[str, Any]:
    """What counts as "spec" for metadata.generation: all but metadata (and status, with /status)."""
    skip = ("metadata", "apiVersion", "kind", "status") if rt.has_status else ("metadata", "apiVersion", "kind")
    return {k: v for k, v in obj.items() if k not in skip}


def _check_stored_size(obj: dict[str, Any]) -> None:
    """Refuse an object etcd would not store: over its default request limit of 1.5 MiB
    (custom resources are stored as JSON; built-in kinds as protobuf, a little smaller). A
    body is at most 3 MiB, but a JSON patch's copies or a merge can make more of less."""
    if len(orjson.dumps(obj)) > MAX_STORED_OBJECT_BYTES:
        raise errors.etcd_request_too_large()


def _same_ignoring_rv(a: dict[str, Any], b: dict[str, Any]) -> bool:
    ma, mb = dict(a["metadata"]), dict(b["metadata"])
    ma.pop("resourceVersion", None)
    mb.pop("resourceVersion", None)
    return ma == mb and {k: v for k, v in a.items() if k != "metadata"} == {
        k: v for k, v in b.items() if k != "metadata"}


@dataclass(frozen=True, slots=True)
class Page:
    items: list[dict[str, Any]]
    resource_version: str
    continue_token: str
    remaining: int | None


@dataclass(frozen=True, slots=True)
class DeleteOptions:
    propagation: str | None = None
    uid: str | None = None  # preconditions
    resource_version: str | None = None
    dry_run: bool = False


class Operations:
    def __init__(self, store: Store, registry: Registry, admit: Admit | None = None,
                 admit_validating: Validate | None = None) -> None:
        self.store = store
        self.registry = registry
        self.admit = admit
        self.admit_validating = admit_validating
        store.listeners.append(self._sync_crds)

    # --- reads ---------------------------------------------------------------------
    def get(self, rt: ResourceType, namespace: str, name: str) -> dict[str, Any]:
        obj = self.store.get(rt.storage_key, namespace if rt.namespaced else "", name)
        if obj is None:
            raise errors.not_found(rt, name)
        return obj

    def list(
        self, rt: ResourceType, namespace: str | None, accept: Callable[[dict[str, Any]], bool] | None,
        limit: int = 0, continue_token: str = "",
    ) -> Page:
        """One page of objects as they were at the list's resourceVersion: a continued list
        starts after the last name of the page before (by bisection in the store's sorted
        names, so that each page of a long list costs its own size, not the whole list's),
        with the objects changed since taken back to how they were then."""
        key = rt.storage_key
        names = self.store.sorted_names(key, namespace)
        list_rv = self.store.rv
        start: tuple[str, str] | None = None
        if continue_token:
            list_rv, start = self._decode_continue(continue_token)
        then = self._as_of(key, namespace, list_rv) if list_rv < self.store.rv else {}
        first = bisect.bisect_right(names, start) if start is not None else 0
        gone = sorted(k for k, obj in then.items()  # deleted since: not among the names any more
                      if obj is not None and (start is None or k > start) and self.store.get(key, *k) is None)
        matched: list[dict[str, Any]] = []
        for where in heapq.merge((names[i] for i in range(first, len(names))), gone):
            obj = then[where] if where in then else self.store.get(key, *where)
            if obj is None or (accept is not None and not accept(obj)):
                continue
            matched.append(obj)
            if limit and len(matched) > limit:
                break
        if limit and len(matched) > limit:
            page = matched[:limit]
            last = page[-1]["metadata"]
            token = self._encode_continue(list_rv, (last.get("namespace", ""), last["name"]))
            remaining = None
            if accept is None:
                added_since = sum(1 for k, obj in then.items() if obj is None and (start is None or k > start)
                                  and self.store.get(key, *k) is not None)
                remaining = len(names) - first + len(gone) - added_since - limit
            return Page(page, str(list_rv), token, remaining)
        return Page(matched, str(list_rv), "", None)

    def _as_of(self, key: str, namespace: str | None, rv: int) -> dict[tuple[str, str], dict[str, Any] | None]:
        """What changed since `rv`, undone: (namespace, name) -> the object as it was then, or
        None where it did not exist yet."""
        then: dict[tuple[str, str], dict[str, Any] | None] = {}
        for event in reversed(self.store.events_since(rv)):  # newest first: the oldest change wins
            if event.key != key or (namespace is not None and event.namespace != namespace):
                continue
            where = (event.namespace, event.obj["metadata"]["name"])
            then[where] = None if event.type == ADDED else event.old
        return then

    def _encode_continue(self, rv: int, start: tuple[str, str]) -> str:
        raw = orjson.dumps({"v": "meta.k8s.io/v1", "rv": rv, "start": list(start)})
        return base64.urlsafe_b64encode(raw).decode().rstrip("=")

    def _decode_continue(self, token: str) -> tuple[int, tuple[str, str]]:
        try:
            data = orjson.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
            rv, (ns, name) = int(data["rv"]), data["start"]
        except (ValueError, KeyError, TypeError) as e:
            raise errors.bad_request(f"continue key is not valid: {e}") from None
        if rv < self.store.compacted_rv:
            raise errors.expired(
                "The provided continue parameter is too old to display a consistent list result. "
                "You can start a new list without the continue parameter."
            )
        return rv, (str(ns), str(name))

    # --- create --------------------------------------------------------------------
    async def create(
        self, rt: ResourceType, namespace: str, body: Any, dry_run: bool = False, subresource: str = "",
        managed_fields: ManagedFields | None = None, manager: str = "",
    ) -> dict[str, Any]:
        """`managed_fields`: server-side apply's; else `manager` (when given) owns what it created."""
        obj = self._check_body(rt, body)
        meta = obj["metadata"]
        if rt.namespaced:
            if meta.get("namespace") and meta["namespace"] != namespace:
                raise errors.bad_request(
                    "the namespace of the provided object does not match the namespace sent on the request")
            meta["namespace"] = namespace
        else:
            meta.pop("namespace", None)
        if meta.get("resourceVersion"):
            raise errors.bad_request("resourceVersion should not be set on objects to be created")
        if not meta.get("name"):
            prefix = meta.get("generateName")
            if not prefix:
                raise errors.invalid(rt, "", [("metadata.name", "Required value: name or generateName is required")])
            meta["name"] = prefix + "".join(random.choices(_NAME_CHARS, k=5))
        name = meta["name"]
        checks = crvalidation.validator_for(rt)
        name_causes = check_name(name, builtin.name_rule(rt))
        if name_causes and checks is None:
            raise errors.invalid(rt, name, name_causes)
        self._check_namespace_writable(rt, namespace, name)
        for attr in ("deletionTimestamp", "deletionGracePeriodSeconds", "managedFields", "selfLink"):
            meta.pop(attr, None)
        if managed_fields is not None:  # server-side apply's
            meta["managedFields"] = managed_fields
        meta["uid"] = str(uuid.uuid4())
        meta["creationTimestamp"] = now_rfc3339()
        if rt.from_crd or "spec" in obj:  # kinds without a spec (ConfigMap, Secret) have no generation
            meta["generation"] = 1
        else:
            meta.pop("generation", None)
        if rt.has_status and rt.from_crd:
            obj.pop("status", None)
        for hook in builtin.CREATE_HOOKS.get(rt.storage_key, ()):
            hook(obj)
        if rt.storage_key == CRD_KEY:
            self._prepare_crd(rt, obj)
        if rt.storage_key == POD_KEY and not subresource:
            priority.admit_create(self.store, rt, obj)
        if checks is not None:
            obj = checks.prepare(obj)
        elif causes := check_metadata(meta):
            raise errors.invalid(rt, name, causes)
        if self.admit is not None:
            obj = await self.admit("CREATE", rt, subresource, obj, None)
            self._check_admitted(rt, obj, namespace if rt.namespaced else "", name, checks is None)
        if checks is not None:
            obj = checks.prepare(obj)
        if managed_fields is None and manager:
            changed, _ = mf.changes(None, obj, rt, "")
            entries = mf.record_update(None, manager, rt.api_version, "", changed, {}, now_rfc3339())
            if entries:
                obj["metadata"]["managedFields"] = entries
        if checks is not None:
            found = checks.validate(obj, None, name_causes + check_metadata(obj["metadata"]))
            if found:
                raise errors.invalid(rt, name, found)
        if rt.group == c.DRA_GROUP and (causes := dra.create_causes(rt.storage_key, obj)):
            raise errors.invalid(rt, name, causes)
        if rt.storage_key == POD_KEY and not subresource:
            builtin.prepare_pod_for_create(obj)
            if causes := builtin.pod_create_causes(obj):
                raise errors.invalid(rt, name, causes)
        if self.admit_validating is not None:
            await self.admit_validating("CREATE", rt, subresource, obj, None)
        key = rt.storage_key
        if self.store.get(key, meta.get("namespace", ""), name) is not None:
            raise errors.already_exists(rt, name)
        self._check_namespace_writable(rt, namespace, name)
        if dry_run:
            return obj
        _check_stored_size(obj)
        return self.store.put(key, obj, None)

    def _check_body(self, rt: ResourceType, body: Any) -> dict[str, Any]:
        if not isinstance(body, dict):
            raise errors.bad_request(f"the object provided is not a JSON object: {type(body).__name__}")
        meta = body.get("metadata")
        if meta is None:
            body["metadata"] = meta = {}
        if not isinstance(meta, dict):
            raise errors.bad_request("metadata must be a JSON object")
        api_version, kind = body.get("apiVersion"), body.get("kind")
        if api_version and api_version != rt.api_version:
            raise errors.bad_request(
                f"the API version in the data ({api_version}) does not match the expected API version "
                f"({rt.api_version})")
        if kind and kind != rt.kind:
            raise errors.bad_request(f"the kind in the data ({kind}) does not match the expected kind ({rt.kind})")
        body["apiVersion"], body["kind"] = rt.api_version, rt.kind
        return body

    def _check_namespace_writable(self, rt: ResourceType, namespace: str, name: str) -> None:
        if not rt.namespaced:
            return
        ns = self.store.get(NAMESPACE_KEY, "", namespace)
        if ns is None:
            raise errors.namespace_not_found(namespace)
        if ns["metadata"].get("deletionTimestamp"):
            raise errors.forbidden(rt, name, f"unable to create new content in namespace {namespace} "
                                             "because it is being terminated")

    def _check_admitted(self, rt: ResourceType, obj: Any, namespace: str, name: str, check_meta: bool) -> None:
        if not isinstance(obj, dict) or not isinstance(obj.get("metadata"), dict):
            raise errors.internal("admission webhook returned an object that is not a JSON object")
        meta = obj["metadata"]
        if meta.get("name") != name or meta.get("namespace", "") != namespace:
            raise errors.internal("admission webhook changed the name or namespace of the object")
        causes = check_metadata(meta) if check_meta else []
        if causes:
            raise errors.invalid(rt, name, causes)

    def _prepare_crd(self, rt: ResourceType, obj: dict[str, Any]) -> None:
        causes = crd.validate_crd(obj)
        if causes:
            raise errors.invalid(rt, obj["metadata"].get("name", ""), causes)
        crd.defaults(obj)
        spec = obj["spec"]
        for other in self.registry.all():
            if (other.group, other.plural) == (spec["group"], spec["names"]["plural"]) and \
                    other.from_crd != obj["metadata"]["name"]:
                raise errors.invalid(rt, obj["metadata"]["name"], [(
                    "spec.names.plural", f'Invalid value: "{other.plural}": is already served by the server')])
        obj["status"] = crd.established_status(obj, now_rfc3339())

    def _sync_crds(self, event: Event) -> None:
        """Keep the registry in step with stored CRDs: what is stored is what is served."""
        if event.key != CRD_KEY:
            return
        name = event.obj["metadata"]["name"]
        for rt in self.registry.all():
            if rt.from_crd == name:
                self.registry.remove(rt.group, rt.version, rt.plural)
        if event.type != DELETED:
            for rt in crd.types_from_crd(event.obj):
                self.registry.add(rt)

    def load_crds(self) -> None:
        """Serve the CRDs found in storage (after a restart)."""
        for obj in self.store.items(CRD_KEY):
            for rt in crd.types_from_crd(obj):
                self.registry.add(rt)

    # --- update and patch ------------------------------------------------------------
    async def update(
        self, rt: ResourceType, namespace: str, name: str, body: Any, subresource: str = "",
        dry_run: bool = False, manager: str = "",
    ) -> dict[str, Any]:
        new = self._check_body(rt, body)
        meta = new["metadata"]
        if meta.get("name") and meta["name"] != name:
            raise errors.bad_request(f"the name of the object ({meta['name']}) does not match the name on the "
                                     f"URL ({name})")
        if rt.namespaced and meta.get("namespace") and meta["namespace"] != namespace:
            raise errors.bad_request(
                "the namespace of the provided object does not match the namespace sent on the request")
        if not meta.get("resourceVersion") and rt.from_crd:
            raise errors.invalid(rt, name, [("metadata.resourceVersion",
                                             "Invalid value: 0x0: must be specified for an update")])
        while True:
            old = self.get(rt, namespace, name)
            try:
                return await self._write_update(rt, old, deep_copy(new), subresource, dry_run, manager=manager)
            except _ChangedMeanwhile:
                continue  # done again on the object as it is now: a stale resourceVersion is a conflict then

    async def patch(
        self, rt: ResourceType, namespace: str, name: str, patch_type: str, body: bytes,
        subresource: str = "", dry_run: bool = False,
        check: Callable[[dict[str, Any], dict[str, Any]], Any] | None = None, manager: str = "",
    ) -> dict[str, Any]:
        """Apply a patch of `patch_type`; `check` sees the patched object (and the stored one) before
        it is written. Another write landing while admission ran has the patch applied again to the
        object as it is now, as kube-apiserver's GuaranteedUpdate does: a patch without a
        resourceVersion is never a conflict."""
        while True:
            try:
                return await self._patch_once(rt, namespace, name, patch_type, body, subresource, dry_run, check,
                                              manager)
            except _ChangedMeanwhile:
                continue

    async def _patch_once(
        self, rt: ResourceType, namespace: str, name: str, patch_type: str, body: bytes, subresource: str,
        dry_run: bool, check: Callable[[dict[str, Any], dict[str, Any]], Any] | None, manager: str,
    ) -> dict[str, Any]:
        old = self.get(rt, namespace, name)
        # Written through another served version of the resource: patched as this version serves
        # it (custom resources convert by apiVersion alone), as kube-apiserver converts it first.
        base = old if old.get("apiVersion") in (None, rt.api_version) else {**old, "apiVersion": rt.api_version}
        if patch_type == APPLY_PATCH or (patch_type == STRATEGIC_PATCH and rt.from_crd):
            raise errors.unsupported_media_type(patch_type, [JSON_PATCH, MERGE_PATCH] + (
                [] if rt.from_crd else [STRATEGIC_PATCH]))
        try:
            patch = orjson.loads(body)
        except orjson.JSONDecodeError as e:
            raise errors.bad_request(f"error decoding patch: {e}") from None
        try:
            if patch_type == JSON_PATCH:
                new = apply_json_patch(base, patch)
            elif not isinstance(patch, dict):
                raise errors.bad_request("patch must be a JSON object")
            elif patch_type == MERGE_PATCH and rt.from_crd:
                # What the patch leaves alone is shared with the stored object, never copied: custom
                # resources have no update hooks that change an object in place, and the metadata
                # written below is a copy of its own.
                new = merged(base, patch)
                if isinstance(new.get("metadata"), dict):
                    new["metadata"] = deep_copy(new["metadata"])
            else:
                merge = apply_merge_patch if patch_type == MERGE_PATCH else (
                    lambda o, p: apply_strategic_merge(o, p, rt))
                new = merge(base, patch)
        except PatchFormatError as e:
            raise errors.bad_request(str(e)) from None
        except PatchTooLarge as e:
            raise errors.request_entity_too_large(str(e)) from None
        except PatchCopyTooLarge:
            raise errors.APIError(422, "Invalid", errors.GENERIC_UNPROCESSABLE, {}) from None
        except PatchError as e:
            raise errors.unprocessable(str(e)) from None
        if not isinstance(new, dict) or not isinstance(new.get("metadata"), dict):
            raise errors.unprocessable("the patch made the object something other than a JSON object")
        new = self._check_body(rt, new)
        if check is not None:
            check(new, old)
        if new["metadata"].get("name") != name:
            raise errors.bad_request("the name of the object cannot be changed by a patch")
        return await self._write_update(rt, old, new, subresource, dry_run, manager=manager)

    async def apply(
        self, rt: ResourceType, namespace: str, name: str, body: Any, manager: str, dry_run: bool = False,
        check: Callable[[dict[str, Any]], Any] | None = None, force: bool = False,
    ) -> tuple[dict[str, Any], bool]:
        """Server-side apply of the configuration `body` by field manager `manager` (see apply.py);
        (the object, whether it was created). `check` sees the object before it is written; `force`
        takes over fields other managers own (else they are a 409 conflict). Like a patch, it is done
        again on the object as it is now when another write landed while admission ran."""
        if not isinstance(body, dict) or not body.get("apiVersion") or not body.get("kind"):
            raise errors.bad_request("apply configuration must be an object with apiVersion and kind")
        config = self._check_body(rt, deep_copy(body))
        meta = config["metadata"]
        if meta.get("name", name) != name:
            raise errors.bad_request(f"the name of the object ({meta['name']}) does not match the name on the "
                                     f"URL ({name})")
        if rt.namespaced and meta.get("namespace") and meta["namespace"] != namespace:
            raise errors.bad_request(
                "the namespace of the provided object does not match the namespace sent on the request")
        meta.pop("managedFields", None)
        fields = ssa.field_set(config, rt)
        while True:
            try:
                return await self._apply_once(rt, namespace, name, deep_copy(config), fields, manager, dry_run, check,
                                              force)
            except _ChangedMeanwhile:
                continue

    async def _apply_once(
        self, rt: ResourceType, namespace: str, name: str, config: dict[str, Any], fields: ssa.FieldSet,
        manager: str, dry_run: bool, check: Callable[[dict[str, Any]], Any] | None, force: bool,
    ) -> tuple[dict[str, Any], bool]:
        now = now_rfc3339()
        current = self.store.get(rt.storage_key, namespace if rt.namespaced else "", name)
        if current is None:
            new = ssa.merge({}, config, rt)
            new["metadata"]["name"] = name
            if check is not None:
                check(new)
            managed = mf.record_apply(None, manager, rt.api_version, fields, fields, {}, force, now)
            return await self.create(rt, namespace, new, dry_run, managed_fields=managed), True
        mine, others = ssa.applied_by(current["metadata"], manager)
        new = deep_copy(current)
        if mine:
            ssa.remove_unapplied(new, mine, fields, ssa.union(others))
        new = ssa.merge(new, config, rt)
        if check is not None:
            check(new)
        changed, removed = mf.changes(current, new, rt, "")
        managed = mf.record_apply(current["metadata"].get("managedFields"), manager, rt.api_version, fields,
                                  changed, removed, force, now)
        return await self._write_update(rt, current, new, "", dry_run, managed), False

    async def _write_update(
        self, rt: ResourceType, old: dict[str, Any], new: dict[str, Any], subresource: str, dry_run: bool,
        managed_fields: ManagedFields | None = None, manager: str = "",
    ) -> dict[str, Any]:
        """`managed_fields`: server-side apply's; else an Update by `manager` (when given) takes the
        fields it changed (managedfields.py). A request's own non-empty managedFields replace the
        stored ones first, as kube-apiserver lets a client set them (not through a subresource)."""
        name = old["metadata"]["name"]
        requested = new["metadata"].get("managedFields")
        rv = new["metadata"].get("resourceVersion")
        if rv and rv != old["metadata"]["resourceVersion"]:
            raise errors.conflict(rt, name, errors.STALE_OBJECT)
        checks = crvalidation.validator_for(rt)
        if subresource == "status":
            # All but metadata (written below) and status shared with the stored object, which is never mutated.
            result = {**old, "metadata": {**old["metadata"]}}
            if "status" in new:
                result["status"] = new["status"]
            else:
                result.pop("status", None)
        else:
            result = new
            meta, old_meta = result["metadata"], old["metadata"]
            for attr in _SYSTEM_META:
                if attr in old_meta:
                    meta[attr] = old_meta[attr]
                else:
                    meta.pop(attr, None)
            if managed_fields is not None:
                meta["managedFields"] = managed_fields
            elif isinstance(requested, list) and requested:
                meta["managedFields"] = requested
            elif "managedFields" in old_meta:
                meta["managedFields"] = old_meta["managedFields"]  # never mutated: entries are replaced whole
            else:
                meta.pop("managedFields", None)
            if rt.has_status:
                if "status" in old:
                    result["status"] = deep_copy(old["status"])
                else:
                    result.pop("status", None)
            if old_meta.get("deletionTimestamp"):
                added = set(meta.get("finalizers") or ()) - set(old_meta.get("finalizers") or ())
                if added:
                    raise errors.invalid(rt, name, [("metadata.finalizers", "Forbidden: no new finalizers can be "
                                                     "added if the object is being deleted")])
            for hook in builtin.UPDATE_HOOKS.get(rt.storage_key, ()):
                hook(result)
            if rt.storage_key == POD_KEY:
                priority.admit_update(result, old)
                if causes := builtin.pod_update_causes(result, old):
                    raise errors.invalid(rt, name, causes)
            if rt.group == c.DRA_GROUP and (causes := dra.update_causes(rt.storage_key, result, old)):
                raise errors.invalid(rt, name, causes)
            if checks is None and (causes := check_metadata(meta)):
                raise errors.invalid(rt, name, causes)
            if rt.storage_key == CRD_KEY:
                self._prepare_crd(rt, result)
        if checks is not None:
            result = checks.prepare(result, old)
        if self.admit is not None:
            result = await self.admit("UPDATE", rt, subresource, result, old)
            self._check_admitted(rt, result, old["metadata"].get("namespace", ""), name, checks is None)
        if checks is not None:
            result = checks.prepare(result, old)
        if managed_fields is None and manager:
            changed, removed = mf.changes(old, result, rt, subresource)
            entries = mf.record_update(result["metadata"].get("managedFields"), manager, rt.api_version, subresource,
                                       changed, removed, now_rfc3339())
            if entries is not None:
                result["metadata"] = {**result["metadata"], "managedFields": entries}
                if not entries:
                    del result["metadata"]["managedFields"]
        if checks is not None:
            meta_causes = check_metadata(result["metadata"])
            found = checks.validate_status(result, old, meta_causes) if subresource == "status" else \
                checks.validate(result, old, meta_causes)
            if found:
                raise errors.invalid(rt, name, found)
        if self.admit_validating is not None:
            await self.admit_validating("UPDATE", rt, subresource, result, old)
        current = self.store.get(rt.storage_key, old["metadata"].get("namespace", ""), name)
        if current is None:
            raise errors.not_found(rt, name)
        if current is not old:  # changed while admission ran: the caller does it again
            raise _ChangedMeanwhile
        if "generation" in old["metadata"] and _spec_of(result, rt) != _spec_of(old, rt):
            result["metadata"]["generation"] = int(old["metadata"].get("generation") or 0) + 1
        result["metadata"]["resourceVersion"] = old["metadata"]["resourceVersion"]
        if _same_ignoring_rv(result, old):
            return old
        if dry_run:
            return result
        if result["metadata"].get("deletionTimestamp") and not self._finalizers(result):
            return self.store.remove(rt.storage_key, result)
        _check_stored_size(result)
        return self.store.put(rt.storage_key, result, old)

    def _finalizers(self, obj: dict[str, Any]) -> builtins.list[str]:
        out = list(obj["metadata"].get("finalizers") or ())
        if obj["kind"] == "Namespace":
            out += (obj.get("spec") or {}).get("finalizers") or ()
        return out

    def write_system(self, rt: ResourceType, old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
        """A server-internal change (garbage collector, binding): no admission, no preconditions."""
        if new["metadata"].get("deletionTimestamp") and not self._finalizers(new):
            return self.store.remove(rt.storage_key, new)
        return self.store.put(rt.storage_key, new, old)

    # --- delete ----------------------------------------------------------------------
    def delete(self, rt: ResourceType, namespace: str, name: str, opts: DeleteOptions) -> tuple[dict[str, Any], bool]:
        """Delete or start deleting; returns (object, whether it is gone)."""
        obj = self.get(rt, namespace, name)
        meta = obj["metadata"]
        if opts.uid and opts.uid != meta["uid"]:
            raise errors.conflict(rt, name, f"Precondition failed: UID in precondition: {opts.uid}, UID in "
                                            f"object meta: {meta['uid']}")
        if opts.resource_version and opts.resource_version != meta["resourceVersion"]:
            raise errors.conflict(rt, name, "Precondition failed: ResourceVersion in precondition: "
                                            f"{opts.resource_version}, ResourceVersion in object meta: "
                                            f"{meta['resourceVersion']}")
        finalizers = list(meta.get("finalizers") or ())
        if opts.propagation == FOREGROUND and FOREGROUND_FINALIZER not in finalizers:
            finalizers.append(FOREGROUND_FINALIZER)
        elif opts.propagation == ORPHAN and ORPHAN_FINALIZER not in finalizers:
            finalizers.append(ORPHAN_FINALIZER)
        if rt.storage_key == NAMESPACE_KEY or finalizers:
            if meta.get("deletionTimestamp") and finalizers == list(meta.get("finalizers") or ()):
                return obj, False
            new = deep_copy(obj)
            new_meta = new["metadata"]
            new_meta.setdefault("deletionTimestamp", now_rfc3339())
            new_meta.setdefault("deletionGracePeriodSeconds", 0)
            if finalizers:
                new_meta["finalizers"] = finalizers
            if not meta.get("deletionTimestamp") and "generation" in meta:
                new_meta["generation"] = int(meta.get("generation") or 0) + 1
            if rt.storage_key == NAMESPACE_KEY:
                new.setdefault("status", {})["phase"] = "Terminating"
            if opts.dry_run:
                return new, False
            return self.store.put(rt.storage_key, new, obj), False
        if opts.dry_run:
            return obj, True
        if rt.storage_key == CRD_KEY:
            self._remove_instances(obj)
        return self.store.remove(rt.storage_key, obj), True

    def _remove_instances(self, crd_obj: dict[str, Any]) -> None:
        key = f"{crd_obj['spec']['group']}/{crd_obj['spec']['names']['plural']}"
        for obj in self.store.items(key):
            self.store.remove(key, obj)

    def delete_collection(
        self, rt: ResourceType, namespace: str | None, accept: Callable[[dict[str, Any]], bool] | None,
        opts: DeleteOptions,
    ) -> builtins.list[dict[str, Any]]:
        out = []
        for obj in self.store.items(rt.storage_key, namespace):
            if accept is None or accept(obj):
                meta = obj["metadata"]
                out.append(self.delete(rt, meta.get("namespace", ""), meta["name"], opts)[0])
        return out


def make_filter(labels: LabelSelector, fields: FieldSelector) -> Callable[[dict[str, Any]], bool] | None:
    """One predicate for a list or watch; None when it accepts everything."""
    if labels.empty and fields.empty:
        return None

    def accept(obj: dict[str, Any]) -> bool:
        meta = obj["metadata"]
        if not labels.empty and not labels.matches(meta.get("labels")):
            return False
        return fields.empty or fields.matches(lambda path: builtin.field_value(obj, path))

    return accept


def check_fields(rt: ResourceType, fields: FieldSelector) -> None:
    allowed = {"metadata.name", "metadata.namespace", *rt.selectable_fields}
    for req in fields.requirements:
        if req.field not in allowed:
            raise errors.bad_request(f'field label not supported: {req.field}')
