"""Client quota entities in the metastore, the broker's copy of them, and the admin APIs.

Kafka's ZooKeeper-mode layout, which klog keeps in both modes (values are strings in the
entity's ``EntityConfig`` znode, beside any SCRAM credentials of the same user, which stay
as they are):

    /config/users/<user>                      /config/users/<default>
    /config/users/<user>/clients/<client-id>  /config/users/<default>/clients/<default> ...
    /config/clients/<client-id>               /config/clients/<default>

Names are sanitized as Kafka's Sanitizer does (klog/daemon/security/credentials.py);
``<default>`` stays literal. A change overwrites the znode and announces ``users/<u>``,
``clients/<c>`` or ``users/<u>/clients/<c>`` under /config/changes, so every broker
re-reads that entity (``ConfigChangeManager`` -> ``QuotaConfigLoader.reload``).

``ClientQuotaAdmin`` answers DescribeClientQuotas and AlterClientQuotas with the checks and
error codes of Kafka's ZkAdminManager (describeClientQuotas / alterClientQuotas).
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from klog.daemon.metastore import paths
from klog.daemon.metastore.base import MetadataStore, NoNodeError
from klog.daemon.metastore.change_listener import write_then_notify
from klog.daemon.quotas import DEFAULT, EntityKey, QuotaConfigs, entity_key
from klog.daemon.security.credentials import desanitize, sanitize
from klog.protocol.client_quotas import CLIENT_ID, IP, QUOTA_KEYS, USER
from klog.protocol.errors import ErrorCode

log = logging.getLogger(__name__)

_USERS = paths.config_entity_type_path(paths.CONFIG_TYPE_USER)
_CLIENTS = paths.config_entity_type_path(paths.CONFIG_TYPE_CLIENT)


def _znode_name(name: str) -> str:
    return name if name == DEFAULT else sanitize(name)


def _plain_name(znode: str) -> str:
    return znode if znode == DEFAULT else desanitize(znode)


def entity_path(entity: EntityKey) -> tuple[str, str]:
    """(znode path, notification entity path) of an entity."""
    user, client_id = entity
    if user is not None and client_id is not None:
        rel = f"{_znode_name(user)}/clients/{_znode_name(client_id)}"
        return f"{_USERS}/{rel}", f"{paths.CONFIG_TYPE_USER}/{rel}"
    if user is not None:
        rel = _znode_name(user)
        return f"{_USERS}/{rel}", f"{paths.CONFIG_TYPE_USER}/{rel}"
    if client_id is not None:
        rel = _znode_name(client_id)
        return f"{_CLIENTS}/{rel}", f"{paths.CONFIG_TYPE_CLIENT}/{rel}"
    raise ValueError("an empty quota entity")


def entity_of_notification(kind: str, name: str) -> EntityKey | None:
    """The entity a /config/changes notification names (None: not a quota entity)."""
    if kind == paths.CONFIG_TYPE_CLIENT and name and "/" not in name:
        return None, _plain_name(name)
    if kind == paths.CONFIG_TYPE_USER and name:
        user, sep, rest = name.partition("/clients/")
        if not sep:
            return (_plain_name(user), None) if "/" not in user else None
        if user and rest and "/" not in rest:
            return _plain_name(user), _plain_name(rest)
    return None


# -- the metastore side (blocking; worker threads) ------------------------------------------


def read_entity(store: MetadataStore, entity: EntityKey) -> dict[str, str]:
    path, _note = entity_path(entity)
    try:
        data, _stat = store.get(path)
    except NoNodeError:
        return {}
    try:
        return dict(paths.EntityConfig.decode(data).config)
    except paths.ZNodeDataError as exc:
        log.warning("ignored the config of quota entity %s: %s", path, exc)
        return {}


def write_entity(store: MetadataStore, entity: EntityKey, config: Mapping[str, str]) -> None:
    """Replace the entity's configs and announce the change (the config first, as Kafka's
    AdminZkClient.changeEntityConfig)."""
    path, note = entity_path(entity)
    write_then_notify(store, path, paths.EntityConfig(config=dict(config)).encode(),
                      paths.config_change_path(), paths.ConfigChangeNotification(note).encode())


def _children(store: MetadataStore, path: str) -> list[str]:
    try:
        return store.get_children(path)
    except NoNodeError:
        return []


def load_all(store: MetadataStore) -> list[tuple[EntityKey, dict[str, str]]]:
    """Every user, user/client and client entity with its stored configs."""
    out: list[tuple[EntityKey, dict[str, str]]] = []
    for u in _children(store, _USERS):
        user = _plain_name(u)
        out.append(((user, None), read_entity(store, (user, None))))
        for c in _children(store, f"{_USERS}/{u}/clients"):
            client = _plain_name(c)
            out.append(((user, client), read_entity(store, (user, client))))
    for c in _children(store, _CLIENTS):
        client = _plain_name(c)
        out.append(((None, client), read_entity(store, (None, client))))
    return out


# -- the broker's copy -----------------------------------------------------------------------


class QuotaConfigLoader:
    """Keeps the broker's QuotaConfigs equal to the metastore's quota entities."""

    def __init__(self, store: MetadataStore, configs: QuotaConfigs) -> None:
        self.store = store
        self.configs = configs

    async def load(self) -> None:
        self.configs.replace_all(await asyncio.to_thread(load_all, self.store))

    async def reload(self, kind: str, name: str) -> None:
        """A /config/changes notification for ``kind/name``."""
        entity = entity_of_notification(kind, name)
        if entity is None:
            return
        self.configs.set(entity, await asyncio.to_thread(read_entity, self.store, entity))


# -- DescribeClientQuotas / AlterClientQuotas ------------------------------------------------


MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED = 0, 1, 2


class QuotaRequestError(Exception):
    def __init__(self, error: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.error = error


@dataclass(frozen=True, slots=True)
class FilterComponent:
    entity_type: str
    match_type: int
    match: str | None


@dataclass(frozen=True, slots=True)
class QuotaOp:
    key: str
    value: float
    remove: bool


@dataclass(frozen=True, slots=True)
class AlterResult:
    entity: Sequence[tuple[str, str | None]]
    error: ErrorCode = ErrorCode.NONE
    message: str | None = None


def _part(entity: EntityKey, entity_type: str) -> str | None:
    return entity[0] if entity_type == USER else entity[1]


def _matches(entity: EntityKey, components: Sequence[FilterComponent], strict: bool) -> bool:
    for c in components:
        part = _part(entity, c.entity_type)
        if c.match_type == MATCH_EXACT:
            if part is None or part == DEFAULT or part != c.match:
                return False
        elif c.match_type == MATCH_DEFAULT:
            if part != DEFAULT:
                return False
        elif part is None:
            return False
    if strict:
        wanted = {c.entity_type for c in components}
        present = {t for t in (USER, CLIENT_ID) if _part(entity, t) is not None}
        if present - wanted:
            return False
    return True


def _check_filter(components: Sequence[FilterComponent]) -> None:
    seen: set[str] = set()
    for c in components:
        if c.entity_type in seen:
            raise QuotaRequestError(ErrorCode.INVALID_REQUEST,
                                    f"Duplicate {c.entity_type} filter component entity type")
        seen.add(c.entity_type)
        if c.entity_type not in (USER, CLIENT_ID, IP):
            # (Kafka's own answer for an entity type it does not know)
            raise QuotaRequestError(ErrorCode.UNSUPPORTED_VERSION,
                                    f"Unexpected quota entity type {c.entity_type!r}")
        if c.match_type not in (MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED):
            raise QuotaRequestError(ErrorCode.INVALID_REQUEST,
                                    f"Unexpected match type {c.match_type}")
        if c.match_type == MATCH_EXACT and c.match is None:
            raise QuotaRequestError(ErrorCode.INVALID_REQUEST,
                                    "Exact match filters need a name to match")


def _check_entity(entity: Sequence[tuple[str, str | None]]) -> EntityKey:
    types = [t for t, _n in entity]
    if not types:
        raise QuotaRequestError(ErrorCode.INVALID_REQUEST, "Invalid empty client quota entity")
    if len(set(types)) != len(types):
        raise QuotaRequestError(ErrorCode.INVALID_REQUEST,
                                "Duplicate entity types in a client quota entity")
    for t in types:
        if t == IP:
            # Kafka's connection_creation_rate per IP; klog limits connections through
            # max.connections.per.ip(.overrides) instead.
            raise QuotaRequestError(ErrorCode.INVALID_REQUEST,
                                    "ip quota entities are not supported by klog")
        if t not in (USER, CLIENT_ID):
            raise QuotaRequestError(ErrorCode.INVALID_REQUEST,
                                    f"Unhandled client quota entity type: {t}")
    names = dict(entity)
    for t, name in names.items():
        if name == "":
            raise QuotaRequestError(ErrorCode.INVALID_REQUEST,
                                    f"Empty {t} name in a client quota entity")
    return entity_key(names)


def _apply_ops(config: dict[str, str], ops: Sequence[QuotaOp]) -> None:
    keys = [op.key for op in ops]
    if len(set(keys)) != len(keys):
        raise QuotaRequestError(ErrorCode.INVALID_REQUEST, "Duplicate quota keys")
    for op in ops:
        whole = QUOTA_KEYS.get(op.key)
        if whole is None:
            raise QuotaRequestError(ErrorCode.INVALID_REQUEST,
                                    f"Invalid configuration key {op.key}")
        if op.remove:
            config.pop(op.key, None)
            continue
        value = op.value
        if math.isnan(value) or math.isinf(value) or value <= 0:
            raise QuotaRequestError(ErrorCode.INVALID_REQUEST,
                                    f"Quota {op.key} must be a positive number, not {value}")
        if whole:
            if abs(value - round(value)) > 1e-6:
                raise QuotaRequestError(ErrorCode.INVALID_REQUEST,
                                        f"Configuration {op.key} must be a Long value")
            config[op.key] = str(round(value))
        else:
            config[op.key] = repr(float(value))


class ClientQuotaAdmin:
    """DescribeClientQuotas and AlterClientQuotas (the metastore is the truth; the broker's
    QuotaConfigs is updated at once here and, on every broker, by the change notification)."""

    def __init__(self, store: MetadataStore, configs: QuotaConfigs) -> None:
        self.store = store
        self.configs = configs

    async def describe(self, components: Sequence[FilterComponent], strict: bool
                       ) -> list[tuple[list[tuple[str, str | None]], dict[str, float]]]:
        """Raises QuotaRequestError for a bad filter."""
        _check_filter(components)
        if any(c.entity_type == IP for c in components):
            return []  # klog keeps no ip quota entities
        entities = await asyncio.to_thread(load_all, self.store)
        out = []
        for entity, config in sorted(entities, key=lambda e: (e[0][0] or "", e[0][1] or "")):
            values = {k: float(v) for k, v in config.items() if k in QUOTA_KEYS
                      and _is_number(v)}
            if values and _matches(entity, components, strict):
                parts: list[tuple[str, str | None]] = []
                if entity[0] is not None:
                    parts.append((USER, None if entity[0] == DEFAULT else entity[0]))
                if entity[1] is not None:
                    parts.append((CLIENT_ID, None if entity[1] == DEFAULT else entity[1]))
                out.append((parts, values))
        return out

    async def alter(self, entries: Sequence[tuple[Sequence[tuple[str, str | None]],
                                                  Sequence[QuotaOp]]],
                    validate_only: bool) -> list[AlterResult]:
        results = []
        for entity_parts, ops in entries:
            try:
                entity = _check_entity(entity_parts)
                written = await asyncio.to_thread(self._alter_one, entity, ops, validate_only)
            except QuotaRequestError as exc:
                results.append(AlterResult(entity_parts, exc.error, str(exc)))
            else:
                if written is not None:
                    # This broker at once (standalone mode has no notification watcher).
                    self.configs.set(entity, written)
                results.append(AlterResult(entity_parts))
        return results

    def _alter_one(self, entity: EntityKey, ops: Sequence[QuotaOp], validate_only: bool
                   ) -> dict[str, str] | None:
        config = read_entity(self.store, entity)
        _apply_ops(config, ops)
        if validate_only:
            return None
        write_entity(self.store, entity, config)
        return config


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True
