"""ACLs in the metastore, where Kafka's ZooKeeper-mode AclAuthorizer keeps them.

Layout (kafka.zk.ZkAclStore; the local metastore holds the same tree standalone):

- a LITERAL pattern's entries: ``/kafka-acl/<ResourceType>/<name>``;
- a PREFIXED pattern's: ``/kafka-acl-extended/prefixed/<ResourceType>/<name>``;
- each znode's data, every entry of that pattern in one document:
  ``{"version":1,"acls":[{"principal":"User:alice","permissionType":"Allow",
  "operation":"Read","host":"*"}]}`` (``<ResourceType>`` is Kafka's CamelCase name);
- whoever changes a pattern's entries rewrites its znode (compare-and-set on its version,
  retried, so concurrent writers on two brokers both land) and then announces it with a
  sequential ``/kafka-acl-changes/acl_changes_<seq>`` whose data is ``Topic:name``
  (literal), or ``/kafka-acl-extended-changes/acl_changes_<seq>`` whose data is
  ``{"version":1,"resourceType":"TOPIC","name":"...","patternType":"PREFIXED"}``.
  Every broker watches both, re-reads the named pattern's znode (the notification is a
  pointer, not the change) and deletes notifications older than 15 minutes.

A pattern with no entries left has its znode deleted. Blocking: call from worker threads.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import Any

from klog.daemon.metastore.base import (
    BadVersionError,
    MetadataStore,
    NodeExistsError,
    NoNodeError,
)
from klog.protocol.acls import (
    OPERATION_NAMES,
    PERMISSION_NAMES,
    RESOURCE_TYPE_NAMES,
    AccessControlEntry,
    PatternType,
    ResourcePattern,
    ResourceType,
    operation_named,
    permission_named,
    resource_type_named,
)

ACL_PATH = "/kafka-acl"
EXTENDED_ACL_PATH = "/kafka-acl-extended/prefixed"
ACL_CHANGES = "/kafka-acl-changes"
EXTENDED_ACL_CHANGES = "/kafka-acl-extended-changes"
ACL_CHANGE_PREFIX = "acl_changes_"
#: Both change paths, literal first.
CHANGE_PATHS = (ACL_CHANGES, EXTENDED_ACL_CHANGES)
_STORES = ((PatternType.LITERAL, ACL_PATH), (PatternType.PREFIXED, EXTENDED_ACL_PATH))

Entries = frozenset[AccessControlEntry]


class AclDataError(ValueError):
    """A znode under the ACL paths that does not hold what Kafka writes there."""


def resource_path(pattern: ResourcePattern) -> str:
    base = ACL_PATH if pattern.pattern_type == PatternType.LITERAL else EXTENDED_ACL_PATH
    return f"{base}/{RESOURCE_TYPE_NAMES[pattern.resource_type]}/{pattern.name}"


def encode_entries(entries: Iterable[AccessControlEntry]) -> bytes:
    acls = [{"principal": e.principal, "permissionType": PERMISSION_NAMES[e.permission_type],
             "operation": OPERATION_NAMES[e.operation], "host": e.host}
            for e in sorted(entries, key=entry_order)]
    return json.dumps({"version": 1, "acls": acls}, separators=(",", ":")).encode()


def entry_order(e: AccessControlEntry) -> tuple[str, str, int, int]:
    return (e.principal, e.host, int(e.operation), int(e.permission_type))


def decode_entries(data: bytes) -> Entries:
    try:
        doc = json.loads(data.decode("utf-8")) if data else {"acls": []}
        return frozenset(
            AccessControlEntry(str(a["principal"]), str(a["host"]),
                               operation_named(str(a["operation"])),
                               permission_named(str(a["permissionType"])))
            for a in doc["acls"])
    except (ValueError, KeyError, TypeError, UnicodeDecodeError) as exc:
        raise AclDataError(f"unreadable ACL document: {exc}") from None


def encode_change(pattern: ResourcePattern) -> tuple[str, bytes]:
    """(sequential path prefix, data) of the notification announcing ``pattern``."""
    if pattern.pattern_type == PatternType.LITERAL:
        text = f"{RESOURCE_TYPE_NAMES[pattern.resource_type]}:{pattern.name}"
        return f"{ACL_CHANGES}/{ACL_CHANGE_PREFIX}", text.encode()
    doc = {"version": 1, "resourceType": pattern.resource_type.name, "name": pattern.name,
           "patternType": pattern.pattern_type.name}
    return (f"{EXTENDED_ACL_CHANGES}/{ACL_CHANGE_PREFIX}",
            json.dumps(doc, separators=(",", ":")).encode())


def decode_change(change_path: str, data: bytes) -> ResourcePattern:
    try:
        if change_path == ACL_CHANGES:
            kind, sep, name = data.decode("utf-8").partition(":")
            if not sep:
                raise ValueError("expected <ResourceType>:<name>")
            return ResourcePattern(resource_type_named(kind), name, PatternType.LITERAL)
        doc: Any = json.loads(data.decode("utf-8"))
        return ResourcePattern(ResourceType[doc["resourceType"]], str(doc["name"]),
                               PatternType[doc["patternType"]])
    except (ValueError, KeyError, TypeError, UnicodeDecodeError) as exc:
        raise AclDataError(f"unreadable ACL change notification: {exc}") from None


def read_resource(store: MetadataStore, pattern: ResourcePattern) -> tuple[Entries, int]:
    """The pattern's entries and its znode version (-1: no znode)."""
    try:
        data, stat = store.get(resource_path(pattern))
    except NoNodeError:
        return frozenset(), -1
    return decode_entries(data), stat.version


def read_all_with_errors(store: MetadataStore
                         ) -> tuple[dict[ResourcePattern, Entries], list[str]]:
    """Every stored pattern with its entries, and what could not be read (skipped)."""
    out: dict[ResourcePattern, Entries] = {}
    errors: list[str] = []
    for pattern_type, base in _STORES:
        try:
            kinds = store.get_children(base)
        except NoNodeError:
            continue
        for kind in kinds:
            try:
                resource_type = resource_type_named(kind)
            except ValueError:
                errors.append(f"{base}/{kind}: unknown resource type")
                continue
            try:
                names = store.get_children(f"{base}/{kind}")
            except NoNodeError:
                continue
            for name in names:
                pattern = ResourcePattern(resource_type, name, pattern_type)
                try:
                    entries, _version = read_resource(store, pattern)
                except AclDataError as exc:
                    errors.append(f"{resource_path(pattern)}: {exc}")
                    continue
                if entries:
                    out[pattern] = entries
    return out, errors


def update_resource(store: MetadataStore, pattern: ResourcePattern,
                    change: Callable[[Entries], Entries]) -> tuple[Entries, Entries]:
    """Apply ``change`` to the pattern's stored entries by compare-and-set (retried when
    another writer got there first) and announce the result; (before, after). Nothing is
    written or announced when ``change`` leaves the entries as they were."""
    path = resource_path(pattern)
    while True:
        current, version = read_resource(store, pattern)
        new = change(current)
        if new == current:
            return current, current
        try:
            if not new:
                store.delete(path, version=version)
            elif version < 0:
                store.create(path, encode_entries(new), make_parents=True)
            else:
                store.set(path, encode_entries(new), version=version)
        except (BadVersionError, NodeExistsError, NoNodeError):
            continue  # raced with another writer: read again
        break
    prefix, data = encode_change(pattern)
    store.create(prefix, data, sequential=True, make_parents=True)
    return current, new
