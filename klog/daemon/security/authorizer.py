"""AclAuthorizer: Kafka's ACL authorizer (kafka.security.authorizer.AclAuthorizer).

Turned on by ``authorizer.class.name`` = ``kafka.security.authorizer.AclAuthorizer`` or its
KRaft-era synonym ``org.apache.kafka.metadata.authorizer.StandardAuthorizer``
(``ACL_AUTHORIZER_CLASSES``; any other non-empty value refuses start-up, in
klog/daemon/config/broker.py). Without it BrokerServices.authorizer is None and every
check in the handlers is skipped (``RequestContext.authorize`` answers True).

The decision for (principal, host, operation, resource), as AclAuthorizer.authorize:

1. a principal named in ``super.users`` (``User:alice;User:bob``) may do anything;
2. the ACLs that apply to the resource are those of its literal name, of the literal
   wildcard ``*`` of its type, and of every PREFIXED pattern its name starts with -- of any
   principal. None at all: ``allow.everyone.if.no.acl.found`` decides (default false);
3. a DENY entry for the principal (or ``User:*``), the host (or ``*``) and the operation
   (or All) denies: deny wins over any allow;
4. else an ALLOW entry for the principal/host and the operation, All, or an operation
   that implies it (Describe from Read, Write, Delete, Alter; DescribeConfigs from
   AlterConfigs) allows; nothing else does.

Fast path: ACLs are indexed by (resource type, literal name) and by (resource type,
prefix), the prefixes probed only at the lengths that exist, so 10,000 ACLs on other
resources cost nothing per check; each decision is cached per (principal, host,
operation, resource type, name) until the next ACL change (the cache is bounded: a client
naming endless topics cannot grow it without limit).

ACLs live in the metastore (klog/daemon/security/acl_store.py: Kafka's /kafka-acl
layout), loaded at start-up; CreateAcls/DeleteAcls write them there and apply them here;
in cluster mode every broker also watches /kafka-acl-changes and
/kafka-acl-extended-changes and re-reads the patterns they name, as Kafka's
AclAuthorizer does. Runs on the event loop; metastore calls go to worker threads; watch
callbacks only schedule work on the loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from typing import Any

from klog.daemon.config.specs import ACL_AUTHORIZER_CLASSES
from klog.daemon.metastore.base import MetadataStore, MetastoreError
from klog.daemon.metastore.change_listener import ChangeNotificationListener, purge_obsolete
from klog.daemon.security import acl_store
from klog.daemon.security.principal import KafkaPrincipal
from klog.protocol.acls import (
    IMPLIED_BY,
    SUPPORTED_OPERATIONS,
    WILDCARD_HOST,
    WILDCARD_PRINCIPAL,
    WILDCARD_RESOURCE,
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
    operations_bitfield,
)
from klog.protocol.errors import ErrorCode

log = logging.getLogger(__name__)

__all__ = ["ACL_AUTHORIZER_CLASSES", "AclAuthorizer", "parse_super_users"]

#: Decisions kept before the cache starts over (a few MB at most).
CACHE_LIMIT = 50_000
_ALL, _ALLOW, _DENY = AclOperation.ALL, AclPermissionType.ALLOW, AclPermissionType.DENY
Entries = frozenset[AccessControlEntry]


def parse_super_users(text: str | None) -> frozenset[str]:
    """``super.users``: principals separated by ';' (Kafka's format), e.g. User:admin."""
    out = set()
    for item in (text or "").split(";"):
        item = item.strip()
        if not item:
            continue
        KafkaPrincipal.parse(item)  # ValueError names the bad one
        out.add(item)
    return frozenset(out)


class AclAuthorizer:
    """The ACLs in memory (indexed), the decisions cached, and the ACL store's writer and
    watcher (module docstring)."""

    def __init__(self, metastore: MetadataStore | None, *, super_users: Iterable[str] = (),
                 allow_everyone_if_no_acl_found: bool = False, watch_changes: bool = False
                 ) -> None:
        self.store = metastore
        self.super_users = frozenset(super_users)
        self.allow_everyone_if_no_acl_found = allow_everyone_if_no_acl_found
        self.watch_changes = watch_changes
        self._acls: dict[ResourcePattern, Entries] = {}
        self._literal: dict[tuple[ResourceType, str], Entries] = {}
        self._prefixed: dict[tuple[ResourceType, str], Entries] = {}
        #: The lengths of the prefixes each resource type has (how many of each): a check
        #: probes the resource name's prefixes of these lengths only.
        self._prefix_counts: defaultdict[ResourceType, Counter[int]] = defaultdict(Counter)
        self._prefix_lengths: dict[ResourceType, tuple[int, ...]] = {}
        self._cache: dict[tuple[Any, ...], bool] = {}
        # One listener per change path (literal, extended), cluster mode only.
        self._listeners: list[ChangeNotificationListener] = []

    @classmethod
    def from_config(cls, config: Any, metastore: MetadataStore) -> AclAuthorizer | None:
        """The authorizer ``config`` asks for, or None (authorizer.class.name empty)."""
        if not config.get("authorizer.class.name"):
            return None
        return cls(metastore, super_users=parse_super_users(config.get("super.users")),
                   allow_everyone_if_no_acl_found=config.get("allow.everyone.if.no.acl.found"),
                   watch_changes=not config.standalone)

    # -- lifecycle -------------------------------------------------------------------------

    async def startup(self) -> None:
        """Load every ACL; in cluster mode listen for changes first, so none is missed."""
        store = self.store
        if store is None:
            return
        if self.watch_changes:
            for i, path in enumerate(acl_store.CHANGE_PATHS):
                listener = ChangeNotificationListener(
                    store, path, acl_store.ACL_CHANGE_PREFIX, "ACL",
                    functools.partial(self._handle, path), data_error=acl_store.AclDataError,
                    ensure_path=True,
                    # A new session: every ACL read again, once (before the first path's
                    # notifications).
                    on_new_session=self.reload if i == 0 else None)
                await listener.start()
                self._listeners.append(listener)
        await self.reload()

    async def reload(self) -> None:
        """Read every ACL from the metastore again (start-up, a new session)."""
        if self.store is None:
            return
        acls, errors = await asyncio.to_thread(acl_store.read_all_with_errors, self.store)
        for error in errors:
            log.warning("ignored ACLs in %s", error)
        self._acls = acls
        self._rebuild()
        log.info("loaded %d ACLs on %d resource patterns",
                 sum(len(e) for e in acls.values()), len(acls))

    def shutdown(self) -> None:
        for listener in self._listeners:
            listener.close()

    # -- decisions -------------------------------------------------------------------------

    def authorize(self, principal: KafkaPrincipal, host: str, operation: AclOperation,
                  resource_type: ResourceType, name: str) -> bool:
        key = (principal.principal_type, principal.name, host, operation, resource_type, name)
        decision = self._cache.get(key)
        if decision is None:
            decision = self._decide(str(principal), host, operation, resource_type, name)
            if len(self._cache) >= CACHE_LIMIT:
                self._cache.clear()
            self._cache[key] = decision
            if not decision:
                log.debug("principal %s from %s denied %s on %s:%s", principal, host,
                          operation.name, resource_type.name, name)
        return decision

    def denied(self, principal: KafkaPrincipal, host: str, operation: AclOperation,
               resource_type: ResourceType, names: Iterable[str | None]) -> set[str]:
        """The names the principal may not do ``operation`` on (the per-request check of
        Produce, Fetch, Metadata...: one cache probe per name once decided)."""
        cache = self._cache
        out: set[str] = set()
        # The key hashes in C: the principal's two strings, not the dataclass.
        kind, who = principal.principal_type, principal.name
        for name in names:
            if name is None:
                continue
            decision = cache.get((kind, who, host, operation, resource_type, name))
            if decision is None:
                decision = self.authorize(principal, host, operation, resource_type, name)
            if not decision:
                out.add(name)
        return out

    def _decide(self, principal: str, host: str, operation: AclOperation,
                resource_type: ResourceType, name: str) -> bool:
        if principal in self.super_users:
            return True
        entries = self.matching_entries(resource_type, name)
        if not entries:
            return self.allow_everyone_if_no_acl_found
        principals = (principal, WILDCARD_PRINCIPAL)
        hosts = (host, WILDCARD_HOST)
        allowing = IMPLIED_BY.get(operation, (operation,))
        allowed = False
        for e in entries:
            if e.principal not in principals or e.host not in hosts:
                continue
            if e.permission_type == _DENY:
                if e.operation == operation or e.operation == _ALL:
                    return False  # deny wins
            elif e.operation == _ALL or e.operation in allowing:
                allowed = True
        return allowed

    def matching_entries(self, resource_type: ResourceType, name: str) -> list[
            AccessControlEntry]:
        """Every entry that applies to the resource: literal, wildcard, prefixes."""
        out: list[AccessControlEntry] = []
        literal = self._literal
        found = literal.get((resource_type, name))
        if found:
            out.extend(found)
        if name != WILDCARD_RESOURCE:
            found = literal.get((resource_type, WILDCARD_RESOURCE))
            if found:
                out.extend(found)
        lengths = self._prefix_lengths.get(resource_type)
        if lengths:
            prefixed = self._prefixed
            for n in lengths:
                if n > len(name):
                    break
                found = prefixed.get((resource_type, name[:n]))
                if found:
                    out.extend(found)
        return out

    def authorized_operations(self, principal: KafkaPrincipal, host: str,
                              resource_type: ResourceType, name: str) -> int:
        """KIP-430: the bit field of the supported operations allowed on the resource."""
        return operations_bitfield([
            op for op in SUPPORTED_OPERATIONS[resource_type]
            if self.authorize(principal, host, op, resource_type, name)])

    def authorize_by_resource_type(self, principal: KafkaPrincipal, host: str,
                                   operation: AclOperation,
                                   resource_type: ResourceType) -> bool:
        """May the principal do ``operation`` on at least one resource of the type?
        (Kafka's Authorizer.authorizeByResourceType default: InitProducerId for an
        idempotent producer with Write on some topic but no IdempotentWrite.)"""
        # A name no ACL can name literally: super users, and allow.everyone with no
        # wildcard or prefix ACL, pass here as Kafka's "hardcode" probe passes.
        if self._decide(str(principal), host, operation, resource_type, "\0hardcode"):
            return True
        who = (str(principal), WILDCARD_PRINCIPAL)
        hosts = (host, WILDCARD_HOST)
        deny: dict[PatternType, set[str]] = defaultdict(set)
        allow: dict[PatternType, set[str]] = defaultdict(set)
        for pattern, entries in self._acls.items():
            if pattern.resource_type != resource_type:
                continue
            for e in entries:
                if e.principal not in who or e.host not in hosts:
                    continue
                if e.operation != operation and e.operation != _ALL:
                    continue
                if e.permission_type == _DENY:
                    if pattern.pattern_type == PatternType.LITERAL and \
                            pattern.name == WILDCARD_RESOURCE:
                        return False
                    deny[pattern.pattern_type].add(pattern.name)
                else:
                    allow[pattern.pattern_type].add(pattern.name)
        if WILDCARD_RESOURCE in allow[PatternType.LITERAL]:
            return True
        for pattern_type, names in allow.items():
            for allowed in names:
                if pattern_type == PatternType.LITERAL and allowed in deny[PatternType.LITERAL]:
                    continue
                if not any(allowed[:n] in deny[PatternType.PREFIXED]
                           for n in range(1, len(allowed) + 1)):
                    return True
        return False

    # -- the ACLs --------------------------------------------------------------------------

    def acls(self, acl_filter: AclBindingFilter = AclBindingFilter()) -> list[AclBinding]:
        return [AclBinding(pattern, entry)
                for pattern, entries in self._acls.items()
                if acl_filter.matches_pattern(pattern)
                for entry in entries if acl_filter.matches_entry(entry)]

    async def create_acls(self, bindings: Sequence[AclBinding]
                          ) -> list[tuple[int, str | None]]:
        """Store each binding: (error code, message) per binding, in order."""
        results: list[tuple[int, str | None]] = [(0, None)] * len(bindings)
        by_pattern: dict[ResourcePattern, list[int]] = defaultdict(list)
        for i, binding in enumerate(bindings):
            reason = binding.invalid_reason()
            if reason is not None:
                results[i] = (int(ErrorCode.INVALID_REQUEST), reason)
            else:
                by_pattern[binding.pattern].append(i)
        for pattern, indexes in by_pattern.items():
            added = frozenset(bindings[i].entry for i in indexes)
            try:
                await self._update(pattern, lambda current, a=added: current | a)
            except (MetastoreError, acl_store.AclDataError) as exc:
                for i in indexes:
                    results[i] = (int(ErrorCode.UNKNOWN_SERVER_ERROR),
                                  f"Failed to create ACL: {exc}")
        await self._purge_own_notifications()
        return results

    async def _purge_own_notifications(self) -> None:
        """Standalone, no listener purges the notifications this broker writes (Kafka
        format kept for tools that read the tree): expire them here."""
        if self.store is None or self.watch_changes:
            return
        for path in acl_store.CHANGE_PATHS:
            with contextlib.suppress(MetastoreError):
                await asyncio.to_thread(purge_obsolete, self.store, path,
                                        acl_store.ACL_CHANGE_PREFIX)

    async def delete_acls(self, filters: Sequence[AclBindingFilter]
                          ) -> list[tuple[int, str | None, list[AclBinding]]]:
        """Delete what each filter matches: (error code, message, deleted bindings) per
        filter. A binding two filters match is reported under the first."""
        results: list[tuple[int, str | None, list[AclBinding]]] = [
            (0, None, []) for _ in filters]
        valid = []
        for i, f in enumerate(filters):
            reason = f.invalid_reason()
            if reason is not None:
                results[i] = (int(ErrorCode.INVALID_REQUEST), reason, [])
            else:
                valid.append(i)
        patterns = [p for p in self._acls if any(filters[i].matches_pattern(p) for i in valid)]
        for pattern in patterns:
            def remove(current: Entries, pattern: ResourcePattern = pattern) -> Entries:
                return frozenset(e for e in current if not any(
                    filters[i].matches(AclBinding(pattern, e)) for i in valid))
            try:
                before, after = await self._update(pattern, remove)
            except (MetastoreError, acl_store.AclDataError) as exc:
                for i in valid:
                    if filters[i].matches_pattern(pattern):
                        results[i] = (int(ErrorCode.UNKNOWN_SERVER_ERROR),
                                      f"Failed to delete ACLs: {exc}", results[i][2])
                continue
            for entry in sorted(before - after, key=acl_store.entry_order):
                binding = AclBinding(pattern, entry)
                first = next(i for i in valid if filters[i].matches(binding))
                results[first][2].append(binding)
        await self._purge_own_notifications()
        return results

    async def _update(self, pattern: ResourcePattern, change: Any) -> tuple[Entries, Entries]:
        if self.store is None:
            before = self._acls.get(pattern, frozenset())
            after = change(before)
        else:
            before, after = await asyncio.to_thread(acl_store.update_resource, self.store,
                                                    pattern, change)
        self._apply(pattern, after)
        return before, after

    def _apply(self, pattern: ResourcePattern, entries: Entries) -> None:
        """One pattern's entries changed: its index slot alone is updated."""
        if entries:
            self._acls[pattern] = entries
        else:
            self._acls.pop(pattern, None)
        key = (pattern.resource_type, pattern.name)
        if pattern.pattern_type == PatternType.LITERAL:
            index = self._literal
        elif pattern.pattern_type == PatternType.PREFIXED:
            index = self._prefixed
            if bool(entries) != (key in index):  # a prefix appears or goes
                counts = self._prefix_counts[pattern.resource_type]
                counts[len(pattern.name)] += 1 if entries else -1
                if counts[len(pattern.name)] <= 0:
                    del counts[len(pattern.name)]
                self._prefix_lengths[pattern.resource_type] = tuple(sorted(counts))
        else:
            return
        if entries:
            index[key] = entries
        else:
            index.pop(key, None)
        self._cache = {}

    def _rebuild(self) -> None:
        literal: dict[tuple[ResourceType, str], Entries] = {}
        prefixed: dict[tuple[ResourceType, str], Entries] = {}
        lengths: dict[ResourceType, list[int]] = defaultdict(list)
        for pattern, entries in self._acls.items():
            key = (pattern.resource_type, pattern.name)
            if pattern.pattern_type == PatternType.LITERAL:
                literal[key] = entries
            elif pattern.pattern_type == PatternType.PREFIXED:
                prefixed[key] = entries
                lengths[pattern.resource_type].append(len(pattern.name))
        self._literal, self._prefixed = literal, prefixed
        self._prefix_counts = defaultdict(Counter, {t: Counter(n) for t, n in lengths.items()})
        self._prefix_lengths = {t: tuple(sorted(n)) for t, n in self._prefix_counts.items()}
        self._cache = {}

    # -- listening (cluster mode) ------------------------------------------------------------

    async def _handle(self, path: str, child: str, data: bytes) -> None:
        """One notification: re-read the pattern it names and apply it."""
        assert self.store is not None
        pattern = acl_store.decode_change(path, data)
        entries, _version = await asyncio.to_thread(acl_store.read_resource, self.store,
                                                    pattern)
        self._apply(pattern, entries)
