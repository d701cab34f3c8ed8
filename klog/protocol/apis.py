"""The API table: api_key -> version range -> request/response entity, and the codecs.

Owns which Kafka APIs klog knows, which versions of each it can decode (the entities kio
carries, or klog.protocol.inter_broker's own for the ZooKeeper-era controller APIs), which
versions it ADVERTISES, and the header versions each (api_key, api_version) uses.

Rule -- advertise only what is implemented and tested. ``ApiSpec.advertised`` is the
version range the broker announces in ApiVersions and accepts on the wire; everything
else is refused before decoding. It starts as None for every API except ApiVersions. An API
is switched on by the change that lands its handler and the tests that drive it, by editing
its row below -- never at run time. Clients pick the highest version both sides advertise,
so announcing a version we merely *decode* would make them use it.

Entity classes load lazily (importing all of kio's ~360 entity modules costs ~2 s of
start-up): the table stores kio's dotted paths, resolved and cached on first use.

Decoding untrusted bytes: ``decode_request``/``decode_response`` turn every failure of the
decoder into ``InvalidRequestError`` (kio's native reader raises its own SerialError family,
KeyError for an unknown tagged field, ValueError for an unknown error code, and a Rust
panic would surface as a BaseException), and reject a null where the schema forbids one
(kio returns None for a non-nullable array encoded as null; Kafka refuses that request).
kio checks every claimed length against the bytes that remain before building anything
(verified by tests/protocol/test_apis.py), so a frame claiming 2**31 array items fails fast.
Records fields (Produce, Fetch) come back as ``bytes``: one copy of the batch bytes, never
decoded into records.
"""

from __future__ import annotations

import functools
import io
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, fields, is_dataclass
from types import MappingProxyType
from typing import Any

from kio.schema.index import schema_name_map
from kio.serial import entity_reader, entity_writer
from kio.static.constants import EntityType

from klog.protocol import inter_broker
from klog.protocol.errors import ErrorCode, InvalidRequestError, KafkaError


class UnsupportedVersionError(KafkaError):
    """An api version klog does not decode or does not advertise (the peer's fault)."""

    # Local until klog/protocol/errors.py grows it (that file belongs to another helper).
    error_code = ErrorCode.UNSUPPORTED_VERSION


class UnknownApiKeyError(InvalidRequestError):
    """An api key klog does not know at all; Kafka closes the connection for these."""


VersionRange = tuple[int, int]


@dataclass(frozen=True, slots=True)
class ApiSpec:
    """One row of the table.

    ``min_version``-``max_version``: what klog can decode and encode (kio's or our own
    entities). ``advertised``: the subset the broker announces and accepts, or None while
    the API has no tested handler. ``flexible_from``: first version using compact encodings
    and tagged fields (request header v2 / response header v1); None if no version is.
    """

    api_key: int
    name: str
    min_version: int
    max_version: int
    flexible_from: int | None
    advertised: VersionRange | None = None
    kio_name: str | None = None  # kio's schema package; None for inter_broker entities

    def is_flexible(self, version: int) -> bool:
        return self.flexible_from is not None and version >= self.flexible_from

    def knows(self, version: int) -> bool:
        return self.min_version <= version <= self.max_version

    def is_advertised(self, version: int) -> bool:
        return self.advertised is not None and (
            self.advertised[0] <= version <= self.advertised[1]
        )

    def request_entity(self, version: int) -> type:
        return _entity(self.api_key, version, EntityType.request)

    def response_entity(self, version: int) -> type:
        return _entity(self.api_key, version, EntityType.response)


API_VERSIONS = 18
CONTROLLED_SHUTDOWN = inter_broker.CONTROLLED_SHUTDOWN


def _kio(api_key: int, name: str, kio_name: str, lo: int, hi: int, flex: int | None,
         advertised: VersionRange | None = None) -> ApiSpec:
    return ApiSpec(api_key, name, lo, hi, flex, advertised, kio_name)


# Ranges are what kio 0.6 carries (generated from Kafka 4.x specs: Kafka 4.0 dropped the
# oldest versions, e.g. Produce v0-2 and Fetch v0-3, so kio has none of them).
# tests/protocol/test_apis.py checks every row against kio's schema index.
_TABLE: tuple[ApiSpec, ...] = (
    _kio(0, "Produce", "produce", 3, 13, 9),
    _kio(1, "Fetch", "fetch", 4, 18, 12),
    _kio(2, "ListOffsets", "list_offsets", 1, 11, 6),
    _kio(3, "Metadata", "metadata", 0, 13, 9),
    ApiSpec(4, "LeaderAndIsr", 0, 6, 4),
    ApiSpec(5, "StopReplica", 0, 3, 2),
    ApiSpec(6, "UpdateMetadata", 0, 7, 6),
    ApiSpec(7, "ControlledShutdown", 0, 3, 3),
    _kio(8, "OffsetCommit", "offset_commit", 2, 10, 8),
    _kio(9, "OffsetFetch", "offset_fetch", 1, 10, 6),
    _kio(10, "FindCoordinator", "find_coordinator", 0, 6, 3),
    _kio(11, "JoinGroup", "join_group", 0, 9, 6),
    _kio(12, "Heartbeat", "heartbeat", 0, 4, 4),
    _kio(13, "LeaveGroup", "leave_group", 0, 5, 4),
    _kio(14, "SyncGroup", "sync_group", 0, 5, 4),
    _kio(15, "DescribeGroups", "describe_groups", 0, 6, 5),
    _kio(16, "ListGroups", "list_groups", 0, 5, 3),
    # ApiVersions is the one API advertised from the start: every client opens with it.
    _kio(18, "ApiVersions", "api_versions", 0, 4, 3, advertised=(0, 4)),
    _kio(19, "CreateTopics", "create_topics", 2, 7, 5),
    _kio(20, "DeleteTopics", "delete_topics", 1, 6, 4),
    _kio(21, "DeleteRecords", "delete_records", 0, 2, 2),
    _kio(22, "InitProducerId", "init_producer_id", 0, 6, 2),
    _kio(23, "OffsetForLeaderEpoch", "offset_for_leader_epoch", 2, 4, 4),
    _kio(32, "DescribeConfigs", "describe_configs", 1, 4, 4),
    _kio(33, "AlterConfigs", "alter_configs", 0, 2, 2),
    _kio(35, "DescribeLogDirs", "describe_log_dirs", 1, 5, 2),
    _kio(37, "CreatePartitions", "create_partitions", 0, 3, 2),
    _kio(42, "DeleteGroups", "delete_groups", 0, 2, 2),
    _kio(43, "ElectLeaders", "elect_leaders", 0, 2, 2),
    _kio(44, "IncrementalAlterConfigs", "incremental_alter_configs", 0, 1, 1),
    _kio(45, "AlterPartitionReassignments", "alter_partition_reassignments", 0, 1, 0),
    _kio(46, "ListPartitionReassignments", "list_partition_reassignments", 0, 0, 0),
    _kio(47, "OffsetDelete", "offset_delete", 0, 0, None),
    _kio(60, "DescribeCluster", "describe_cluster", 0, 2, 0),
)

API_TABLE: Mapping[int, ApiSpec] = MappingProxyType({spec.api_key: spec for spec in _TABLE})

#: api_key -> advertised (min, max): what ApiVersions announces and the wire accepts.
ADVERTISED: Mapping[int, VersionRange] = MappingProxyType(
    {spec.api_key: spec.advertised for spec in _TABLE if spec.advertised is not None}
)


def spec_for(api_key: int) -> ApiSpec:
    """The table row for ``api_key``; UnknownApiKeyError if klog has none."""
    try:
        return API_TABLE[api_key]
    except KeyError:
        raise UnknownApiKeyError(f"unknown api key {api_key}") from None


@functools.cache
def _entity(api_key: int, version: int, kind: EntityType) -> type:
    spec = spec_for(api_key)
    if not spec.knows(version):
        raise UnsupportedVersionError(
            f"{spec.name} v{version} is not supported "
            f"(klog decodes v{spec.min_version}-v{spec.max_version})"
        )
    if spec.kio_name is None:
        if kind is EntityType.request:
            return inter_broker.request_entity(api_key, version)
        return inter_broker.response_entity(api_key, version)
    path = schema_name_map[spec.kio_name][version][kind]
    module_name, _, class_name = path.partition(":")
    module = __import__(module_name, fromlist=[class_name])
    return getattr(module, class_name)


# --- header versions ----------------------------------------------------------------------


def request_header_version(api_key: int, api_version: int) -> int:
    """0, 1 or 2: which request header a request of this key and version carries.

    Flexible versions use v2 (tagged fields); ControlledShutdown v0 alone keeps v0 (no
    client id). For ApiVersions this also holds for versions klog does not know, as in
    Kafka: a newer client's ApiVersions request must still be parsed to be answered.
    """
    spec = spec_for(api_key)
    if api_key == CONTROLLED_SHUTDOWN and api_version == 0:
        return 0
    return 2 if spec.is_flexible(api_version) else 1


def response_header_version(api_key: int, api_version: int) -> int:
    """0 or 1: which response header answers this key and version.

    ApiVersions responses always carry header v0, even in flexible versions: a client that
    does not yet know the broker's versions must be able to read the reply (KIP-511).
    """
    if api_key == API_VERSIONS:
        return 0
    return 1 if spec_for(api_key).is_flexible(api_version) else 0


# --- codecs -------------------------------------------------------------------------------


def decode_request(api_key: int, api_version: int, body: Any) -> Any:
    """Decode a request body (bytes/memoryview after the header) into its entity.

    Raises UnknownApiKeyError, UnsupportedVersionError (version outside what klog decodes;
    checking what is *advertised* is the caller's job, see framing.parse_request_header),
    or InvalidRequestError for bytes that do not fit the schema. Trailing bytes after the
    body are ignored, as Kafka does.
    """
    entity_type = spec_for(api_key).request_entity(api_version)
    return _decode(entity_type, body)


def decode_response(api_key: int, api_version: int, body: Any) -> Any:
    """Decode a response body (client side); same errors as ``decode_request``."""
    entity_type = spec_for(api_key).response_entity(api_version)
    return _decode(entity_type, body)


def encode_response(entity: Any) -> bytes:
    """Serialize a response entity (body only; framing adds header and size)."""
    return _encode(entity)


def encode_request(entity: Any) -> bytes:
    """Serialize a request entity (body only; framing adds header and size)."""
    return _encode(entity)


def _encode(entity: Any) -> bytes:
    # An exception here is klog's own bug (a handler built a bad entity), not the peer's:
    # it is left to propagate rather than be dressed up as a Kafka error code.
    buffer = io.BytesIO()
    entity_writer(type(entity))(buffer, entity)
    return buffer.getvalue()


def _decode(entity_type: type, body: Any) -> Any:
    try:
        entity, _size = _reader(entity_type)(body, 0)
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as exc:
        # Untrusted bytes into a native decoder: any failure means "does not fit the
        # schema". BaseException because a pyo3 panic is not an Exception.
        raise InvalidRequestError(
            f"cannot decode {entity_type.__name__} v{entity_type.__version__}: "
            f"{type(exc).__name__}: {exc}"
        ) from exc
    _reject_forbidden_nulls(entity)
    return entity


@functools.cache
def _reader(entity_type: type) -> Any:
    return entity_reader(entity_type)


# --- null checks --------------------------------------------------------------------------
# kio reads a null array (length -1, or compact length 0) as None even where the schema
# says the array is not nullable; Kafka rejects such a request. One pass over the decoded
# tree (entities and arrays of entities only; records stay bytes) restores that rule.

_ENTITY, _ENTITY_ARRAY, _VALUE = 0, 1, 2


@functools.cache
def _null_plan(entity_type: type) -> tuple[tuple[str, bool, int], ...]:
    plan = []
    hints = typing.get_type_hints(entity_type) if _has_string_annotations(entity_type) else {}
    for f in fields(entity_type):
        annotation = hints.get(f.name, f.type)
        nullable, inner = _split_optional(annotation)
        if typing.get_origin(inner) is tuple:
            item = typing.get_args(inner)[0]
            if is_dataclass(item):
                plan.append((f.name, nullable, _ENTITY_ARRAY))
                continue
            plan.append((f.name, nullable, _VALUE))
        elif is_dataclass(inner):
            plan.append((f.name, nullable, _ENTITY))
        elif not nullable:
            plan.append((f.name, nullable, _VALUE))
    return tuple(plan)


def _has_string_annotations(entity_type: type) -> bool:
    return any(isinstance(f.type, str) for f in fields(entity_type))


def _split_optional(annotation: Any) -> tuple[bool, Any]:
    origin = typing.get_origin(annotation)
    if origin is types.UnionType or origin is typing.Union:
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        nullable = len(args) != len(typing.get_args(annotation))
        return nullable, args[0] if len(args) == 1 else annotation
    return False, annotation


def _reject_forbidden_nulls(entity: Any) -> None:
    stack = [entity]
    while stack:
        current = stack.pop()
        for name, nullable, kind in _null_plan(type(current)):
            value = getattr(current, name)
            if value is None:
                if not nullable:
                    raise InvalidRequestError(
                        f"null {type(current).__name__}.{name}, which is not nullable"
                    )
                continue
            if kind == _ENTITY:
                stack.append(value)
            elif kind == _ENTITY_ARRAY:
                stack.extend(value)
