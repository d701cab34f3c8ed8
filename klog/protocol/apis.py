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

Decoding untrusted bytes happens in two passes. First ``_precheck`` walks the body along
the entity's schema without building anything, checking every length and array count
against the bytes that remain. This pass is not optional: kio's native reader sizes an
array's storage from the count it reads (``Vec::with_capacity``) before reading any item,
so a 5-byte body claiming 2**32 compact-array items makes it request 32 GiB, and Rust
aborts the whole process on the failed allocation -- no exception to catch. Only a body
that passes the walk goes to kio, so its allocations are bounded by the real item count.
Then ``decode_request``/``decode_response`` turn every failure of kio's decoder into
``InvalidRequestError`` (its SerialError family, KeyError for an unknown tagged field,
ValueError for an unknown error code, and a pyo3 panic, which is a BaseException), and
reject a null where the schema forbids one (kio returns None for a non-nullable array
encoded as null; Kafka refuses that request). Records fields come back as ``bytes``: one
copy of the batch bytes, never decoded into records -- except Produce v3-v11 requests, the
hot path, which klog.protocol.produce decodes in one pass into the same kio classes with
records as memoryview slices of the body (no copy; rejects what this path rejects).
"""

from __future__ import annotations

import functools
import io
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, fields, is_dataclass
from types import MappingProxyType
from typing import Any, Literal

from kio.serial import entity_reader, entity_writer
from kio.static.constants import EntityType
from kio.static.protocol import Entity

from klog.protocol import inter_broker, old_versions, produce, transactions
from klog.protocol.entities import kio_class
from klog.protocol.errors import (
    InvalidRequestError,
    UnsupportedVersionError,
)
from klog.protocol.records.varint import read_unsigned


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

    def request_entity(self, version: int) -> type[Entity]:
        return _entity(self.api_key, version, EntityType.request)

    def response_entity(self, version: int) -> type[Entity]:
        return _entity(self.api_key, version, EntityType.response)


PRODUCE = 0
API_VERSIONS = 18
CONTROLLED_SHUTDOWN = inter_broker.CONTROLLED_SHUTDOWN


def _kio(api_key: int, name: str, kio_name: str, lo: int, hi: int, flex: int | None,
         advertised: VersionRange | None = None) -> ApiSpec:
    return ApiSpec(api_key, name, lo, hi, flex, advertised, kio_name)


# Ranges start where Kafka 3.x (ZooKeeper mode) starts serving: version 0 of every API here.
# kio 0.6 carries what Kafka 4.x specs define (4.0 dropped the oldest versions, e.g. Produce
# v0-2 and Fetch v0-3); klog.protocol.old_versions derives the versions below kio's from
# kio's oldest. tests/protocol/test_apis.py checks every row against kio's schema index
# and old_versions, and the advertised ranges against Kafka 3.x's.
_TABLE: tuple[ApiSpec, ...] = (
    # Produce v10 adds KIP-951's CurrentLeader/NodeEndpoints to the answer, v11 KIP-890's
    # TRANSACTION_ABORTABLE (klog.protocol.produce codes both, as v3-v9).
    _kio(0, "Produce", "produce", 0, 13, 9, advertised=(0, 11)),
    _kio(1, "Fetch", "fetch", 0, 18, 12, advertised=(0, 17)),
    _kio(2, "ListOffsets", "list_offsets", 0, 11, 6, advertised=(0, 7)),
    _kio(3, "Metadata", "metadata", 0, 13, 9, advertised=(0, 12)),
    ApiSpec(4, "LeaderAndIsr", 0, 6, 4, advertised=(0, 6)),
    ApiSpec(5, "StopReplica", 0, 3, 2, advertised=(0, 3)),
    ApiSpec(6, "UpdateMetadata", 0, 7, 6, advertised=(0, 7)),
    ApiSpec(7, "ControlledShutdown", 0, 3, 3, advertised=(0, 3)),
    _kio(8, "OffsetCommit", "offset_commit", 0, 10, 8, advertised=(0, 8)),
    _kio(9, "OffsetFetch", "offset_fetch", 0, 10, 6, advertised=(0, 8)),
    _kio(10, "FindCoordinator", "find_coordinator", 0, 6, 3, advertised=(0, 6)),
    _kio(11, "JoinGroup", "join_group", 0, 9, 6, advertised=(0, 9)),
    _kio(12, "Heartbeat", "heartbeat", 0, 4, 4, advertised=(0, 4)),
    _kio(13, "LeaveGroup", "leave_group", 0, 5, 4, advertised=(0, 5)),
    _kio(14, "SyncGroup", "sync_group", 0, 5, 4, advertised=(0, 5)),
    _kio(15, "DescribeGroups", "describe_groups", 0, 6, 5, advertised=(0, 5)),
    _kio(16, "ListGroups", "list_groups", 0, 5, 3, advertised=(0, 5)),
    _kio(17, "SaslHandshake", "sasl_handshake", 0, 1, None, advertised=(0, 1)),
    # ApiVersions is the one API advertised from the start: every client opens with it.
    _kio(18, "ApiVersions", "api_versions", 0, 4, 3, advertised=(0, 4)),
    _kio(19, "CreateTopics", "create_topics", 0, 7, 5, advertised=(0, 7)),
    _kio(20, "DeleteTopics", "delete_topics", 0, 6, 4, advertised=(0, 6)),
    _kio(21, "DeleteRecords", "delete_records", 0, 2, 2, advertised=(0, 2)),
    _kio(22, "InitProducerId", "init_producer_id", 0, 6, 2, advertised=(0, 5)),
    _kio(23, "OffsetForLeaderEpoch", "offset_for_leader_epoch", 0, 4, 4, advertised=(0, 4)),
    # Transactions: Kafka 3.9's ranges. AddPartitionsToTxn v4-5 is KIP-890's batched
    # broker-to-broker form (verify_only); AddOffsetsToTxn, EndTxn and TxnOffsetCommit v4
    # mean the client understands TRANSACTION_ABORTABLE. WriteTxnMarkers v0 is derived
    # (old_versions: kio's oldest is v1).
    _kio(24, "AddPartitionsToTxn", "add_partitions_to_txn", 0, 5, 3, advertised=(0, 5)),
    _kio(25, "AddOffsetsToTxn", "add_offsets_to_txn", 0, 4, 3, advertised=(0, 4)),
    _kio(26, "EndTxn", "end_txn", 0, 5, 3, advertised=(0, 4)),
    _kio(27, "WriteTxnMarkers", "write_txn_markers", 0, 2, 1, advertised=(0, 1)),
    _kio(28, "TxnOffsetCommit", "txn_offset_commit", 0, 5, 3, advertised=(0, 4)),
    # The ACL APIs (KIP-140): kio has v1-3; v0, before PREFIXED patterns, went in Kafka 4
    # and is derived by old_versions (kafka-python before api_version 2.0 sends it).
    _kio(29, "DescribeAcls", "describe_acls", 0, 3, 2, advertised=(0, 3)),
    _kio(30, "CreateAcls", "create_acls", 0, 3, 2, advertised=(0, 3)),
    _kio(31, "DeleteAcls", "delete_acls", 0, 3, 2, advertised=(0, 3)),
    _kio(32, "DescribeConfigs", "describe_configs", 0, 4, 4, advertised=(0, 4)),
    _kio(33, "AlterConfigs", "alter_configs", 0, 2, 2, advertised=(0, 2)),
    _kio(34, "AlterReplicaLogDirs", "alter_replica_log_dirs", 0, 2, 2, advertised=(0, 2)),
    _kio(35, "DescribeLogDirs", "describe_log_dirs", 0, 5, 2, advertised=(0, 4)),
    _kio(36, "SaslAuthenticate", "sasl_authenticate", 0, 2, 2, advertised=(0, 2)),
    _kio(37, "CreatePartitions", "create_partitions", 0, 3, 2, advertised=(0, 3)),
    _kio(42, "DeleteGroups", "delete_groups", 0, 2, 2, advertised=(0, 2)),
    _kio(43, "ElectLeaders", "elect_leaders", 0, 2, 2, advertised=(0, 2)),
    _kio(44, "IncrementalAlterConfigs", "incremental_alter_configs", 0, 1, 1,
         advertised=(0, 1)),
    _kio(45, "AlterPartitionReassignments", "alter_partition_reassignments", 0, 1, 0,
         advertised=(0, 1)),
    _kio(46, "ListPartitionReassignments", "list_partition_reassignments", 0, 0, 0,
         advertised=(0, 0)),
    _kio(47, "OffsetDelete", "offset_delete", 0, 0, None, advertised=(0, 0)),
    _kio(48, "DescribeClientQuotas", "describe_client_quotas", 0, 1, 1, advertised=(0, 1)),
    _kio(49, "AlterClientQuotas", "alter_client_quotas", 0, 1, 1, advertised=(0, 1)),
    _kio(50, "DescribeUserScramCredentials", "describe_user_scram_credentials", 0, 0, 0,
         advertised=(0, 0)),
    _kio(51, "AlterUserScramCredentials", "alter_user_scram_credentials", 0, 0, 0,
         advertised=(0, 0)),
    _kio(60, "DescribeCluster", "describe_cluster", 0, 2, 0, advertised=(0, 1)),
    _kio(61, "DescribeProducers", "describe_producers", 0, 0, 0, advertised=(0, 0)),
    _kio(65, "DescribeTransactions", "describe_transactions", 0, 0, 0, advertised=(0, 0)),
    _kio(66, "ListTransactions", "list_transactions", 0, 2, 0, advertised=(0, 1)),
)

API_TABLE: Mapping[int, ApiSpec] = MappingProxyType({spec.api_key: spec for spec in _TABLE})
# A key listed twice (two changes adding the same API) would let the later row silently
# replace the other's advertised range: refuse to start instead.
if len(API_TABLE) != len(_TABLE):
    _seen = sorted(spec.api_key for spec in _TABLE)
    raise RuntimeError("api keys listed twice in the API table: "
                       f"{sorted({k for k in _seen if _seen.count(k) > 1})}")

#: api_key -> advertised (min, max): what ApiVersions announces and the wire accepts.
ADVERTISED: Mapping[int, VersionRange] = MappingProxyType(
    {spec.api_key: spec.advertised for spec in _TABLE if spec.advertised is not None}
)


#: The inter-broker control APIs of a ZooKeeper-mode cluster (Kafka's ClusterAction APIs
#: among those klog has): LeaderAndIsr, StopReplica, UpdateMetadata (controller -> broker)
#: and ControlledShutdown (broker -> controller). They decide what a broker stores, serves
#: and deletes, so only a cluster's own brokers may send them.
INTER_BROKER_CONTROL_APIS: frozenset[int] = frozenset({
    inter_broker.LEADER_AND_ISR, inter_broker.STOP_REPLICA, inter_broker.UPDATE_METADATA,
    inter_broker.CONTROLLED_SHUTDOWN})

#: What a standalone broker (no zookeeper.connect) advertises and accepts: ADVERTISED
#: without INTER_BROKER_CONTROL_APIS. It has no other broker, its controller serves it
#: in-process, so any such request on the wire comes from a client, and an api key not
#: advertised closes the connection before its body is decoded (as Kafka's KRaft brokers,
#: which do not expose these APIs either).
#: WriteTxnMarkers stays: a standalone broker's coordinator writes its markers
#: in-process, but the admin tools send it too (``klog transactions abort``, Kafka's
#: kafka-transactions.sh abort: an ABORT marker for a hanging transaction, to the
#: partition's leader), and Kafka's KRaft brokers expose it on their client listeners.

STANDALONE_ADVERTISED: Mapping[int, VersionRange] = MappingProxyType(
    {k: v for k, v in ADVERTISED.items() if k not in INTER_BROKER_CONTROL_APIS}
)


#: api_key -> every (min, max) klog can decode: for klog's own client side and for tests,
#: never for what a broker announces.
KNOWN: Mapping[int, VersionRange] = MappingProxyType(
    {spec.api_key: (spec.min_version, spec.max_version) for spec in _TABLE}
)


def spec_for(api_key: int) -> ApiSpec:
    """The table row for ``api_key``; UnknownApiKeyError if klog has none."""
    try:
        return API_TABLE[api_key]
    except KeyError:
        raise UnknownApiKeyError(f"unknown api key {api_key}") from None


@functools.cache
def _entity(
    api_key: int, version: int, kind: Literal[EntityType.request, EntityType.response]
) -> type[Entity]:
    spec = spec_for(api_key)
    if not spec.knows(version):
        raise UnsupportedVersionError(
            f"{spec.name} v{version} is not supported "
            f"(klog decodes v{spec.min_version}-v{spec.max_version})"
        )
    if old_versions.handles(api_key, version):
        return old_versions.entity(api_key, version, kind)
    if spec.kio_name is None:
        if kind is EntityType.request:
            return inter_broker.request_entity(api_key, version)
        return inter_broker.response_entity(api_key, version)
    entity: type[Entity] = kio_class(spec.kio_name, version, kind)
    return entity


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


# Any (entities in and out, here and below): kio picks each entity's class by api key and
# version at runtime, so no one static type names them; handlers read their fields.
def decode_request(api_key: int, api_version: int, body: Any) -> Any:
    """Decode a request body (bytes/memoryview after the header) into its entity.

    Raises UnknownApiKeyError, UnsupportedVersionError (version outside what klog decodes;
    checking what is *advertised* is the caller's job, see framing.parse_request_header),
    or InvalidRequestError for bytes that do not fit the schema. Trailing bytes after the
    body are ignored, as Kafka does.
    """
    if api_key == PRODUCE and produce.handles(api_version):
        # The hot path: one hand-written pass; records are slices of ``body`` (writable
        # when the frame is, so the log patches the receive buffer in place).
        return produce.decode_produce_request(api_version, body)
    entity_type = spec_for(api_key).request_entity(api_version)
    return _decode(entity_type, body)


def decode_response(api_key: int, api_version: int, body: Any) -> Any:
    """Decode a response body (client side); same errors as ``decode_request``."""
    if api_key == transactions.DESCRIBE_TRANSACTIONS and api_version == 0:
        # kio refuses the -1 start time Kafka sends when no transaction runs.
        return transactions.decode_describe_transactions_response(body)
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


def _decode(entity_type: type[Entity], body: Any) -> Any:
    if isinstance(body, (bytearray, memoryview)) and not memoryview(body).readonly:
        body = memoryview(body).toreadonly()  # kio's reader refuses writable buffers (frames)
    _precheck(entity_type, body)
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
def _reader(entity_type: type[Entity]) -> Any:
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
    stack: list[object] = [entity]
    while stack:
        current = stack.pop()
        entity_type: type = type(current)
        for name, nullable, kind in _null_plan(entity_type):
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


# --- the pre-check walk -------------------------------------------------------------------
# A plan per entity class, compiled once from the same field metadata kio reads: a tuple of
# steps, the known tagged fields (flexible entities only), and the fewest bytes an instance
# can take (which bounds how many items an array can claim).

_FIXED_SIZES: Mapping[str, int] = MappingProxyType({
    "int8": 1, "uint8": 1, "bool": 1,
    "int16": 2, "uint16": 2, "error_code": 2,
    "int32": 4, "uint32": 4, "timedelta_i32": 4,
    "int64": 8, "uint64": 8, "float64": 8, "timedelta_i64": 8, "datetime_i64": 8,
    "uuid": 16,
})
# int16 length for strings, int32 for bytes; flexible versions use a uvarint length + 1.
_LEGACY_LENGTH_SIZES: Mapping[str, int] = MappingProxyType(
    {"string": 2, "bytes": 4, "records": 4}
)

_FIXED, _BLOB, _FIXED_ARRAY, _ENTITY_STEP, _ENTITY_ARRAY_STEP = range(5)


@dataclass(frozen=True, slots=True)
class _Plan:
    flexible: bool
    steps: tuple[tuple[Any, ...], ...]
    tags: Mapping[int, tuple[Any, ...]]
    min_size: int


@functools.cache
def _plan(entity_type: type[Entity]) -> _Plan:
    flexible = bool(entity_type.__flexible__)
    hints = typing.get_type_hints(entity_type) if _has_string_annotations(entity_type) else {}
    steps: list[tuple[Any, ...]] = []
    tags: dict[int, tuple[Any, ...]] = {}
    min_size = 1 if flexible else 0  # the tagged-field count
    for f in fields(entity_type):
        tag = f.metadata.get("tag")
        annotation = hints.get(f.name, f.type)
        nullable, inner = _split_optional(annotation)
        step, size = _step(f.metadata.get("kafka_type"), inner, flexible,
                           marker=nullable and tag is None)
        if tag is None:
            steps.append(step)
            min_size += size
        else:
            tags[int(tag)] = step
    return _Plan(flexible, _merge_fixed(steps), MappingProxyType(tags), min_size)


def _step(kafka_type: str | None, inner: Any, flexible: bool, marker: bool
          ) -> tuple[tuple[Any, ...], int]:
    length_size = 1 if flexible else 4  # array counts: uvarint + 1, or int32
    if typing.get_origin(inner) is tuple:
        item = typing.get_args(inner)[0]
        if is_dataclass(item):
            return (_ENTITY_ARRAY_STEP, flexible, item), length_size
        return (_FIXED_ARRAY, flexible, _fixed_size(kafka_type)), length_size
    if is_dataclass(inner):
        # a nullable struct is preceded by an int8 marker (-1 null), KIP-893
        nested: type[Entity] = typing.cast("type[Entity]", inner)  # a kio entity class
        return (_ENTITY_STEP, marker, inner), (1 if marker else _plan(nested).min_size)
    if kafka_type is None:
        raise TypeError(f"no pre-check for kafka_type {kafka_type!r}")
    if kafka_type in _FIXED_SIZES:
        return (_FIXED, _FIXED_SIZES[kafka_type]), _FIXED_SIZES[kafka_type]
    if kafka_type in _LEGACY_LENGTH_SIZES:
        legacy = 0 if flexible else _LEGACY_LENGTH_SIZES[kafka_type]
        return (_BLOB, legacy), (1 if flexible else legacy)
    raise TypeError(f"no pre-check for kafka_type {kafka_type!r}")


def _fixed_size(kafka_type: str | None) -> int:
    if kafka_type is None:
        raise TypeError(f"no pre-check for array of {kafka_type!r}")
    if kafka_type not in _FIXED_SIZES:
        # Kafka has arrays of strings too (e.g. []string topic names); walked item by item.
        if kafka_type in _LEGACY_LENGTH_SIZES:
            return -_LEGACY_LENGTH_SIZES[kafka_type]
        raise TypeError(f"no pre-check for array of {kafka_type!r}")
    return _FIXED_SIZES[kafka_type]


def _merge_fixed(steps: list[tuple[Any, ...]]) -> tuple[tuple[Any, ...], ...]:
    merged: list[tuple[Any, ...]] = []
    for step in steps:
        if step[0] == _FIXED and merged and merged[-1][0] == _FIXED:
            merged[-1] = (_FIXED, merged[-1][1] + step[1])
        else:
            merged.append(step)
    return tuple(merged)


def _precheck(entity_type: type[Entity], body: Any) -> None:
    try:
        view = memoryview(body).cast("B") if not isinstance(body, bytes) else body
    except TypeError as exc:
        raise InvalidRequestError(f"request body is not bytes: {type(body).__name__}") from exc
    _walk(_plan(entity_type), view, 0, len(view))


def _truncated() -> InvalidRequestError:
    return InvalidRequestError("request body is truncated or claims more than it holds")


# (buf, offset, end) -> (value, offset after it): at most 5 bytes, InvalidRequestError else.
_uvarint = functools.partial(read_unsigned, error=InvalidRequestError)


def _count(buf: Any, offset: int, end: int, flexible: bool) -> tuple[int, int]:
    """An array count (-1 for null) and the offset after it."""
    if flexible:
        raw, offset = _uvarint(buf, offset, end)
        return raw - 1, offset
    if end - offset < 4:
        raise _truncated()
    return int.from_bytes(buf[offset:offset + 4], "big", signed=True), offset + 4


def _blob(buf: Any, offset: int, end: int, legacy: int) -> int:
    if legacy == 0:
        raw, offset = _uvarint(buf, offset, end)
        length = raw - 1
    else:
        if end - offset < legacy:
            raise _truncated()
        length = int.from_bytes(buf[offset:offset + legacy], "big", signed=True)
        offset += legacy
    if length > end - offset:
        raise _truncated()
    return offset + max(length, 0)


def _walk(plan: _Plan, buf: Any, offset: int, end: int) -> int:
    for step in plan.steps:
        offset = _walk_step(step, buf, offset, end)
    if plan.flexible:
        count, offset = _uvarint(buf, offset, end)
        if count > (end - offset) // 2:  # a tag and a size, at least one byte each
            raise _truncated()
        for _ in range(count):
            tag, offset = _uvarint(buf, offset, end)
            size, offset = _uvarint(buf, offset, end)
            if size > end - offset:
                raise _truncated()
            tagged = plan.tags.get(tag)
            if tagged is not None:
                _walk_step(tagged, buf, offset, offset + size)
            offset += size
    if offset > end:
        raise _truncated()
    return offset


def _walk_step(step: tuple[Any, ...], buf: Any, offset: int, end: int) -> int:
    kind = step[0]
    if kind == _FIXED:
        offset += step[1]
        if offset > end:
            raise _truncated()
        return offset
    if kind == _BLOB:
        return _blob(buf, offset, end, step[1])
    if kind == _ENTITY_STEP:
        if step[1]:  # nullable: int8 marker
            if offset >= end:
                raise _truncated()
            marker = buf[offset]
            offset += 1
            if marker == 0xFF:  # -1: null
                return offset
        return _walk(_plan(step[2]), buf, offset, end)
    count, offset = _count(buf, offset, end, step[1])
    if count <= 0:
        return offset
    if kind == _FIXED_ARRAY:
        size: int = step[2]
        if size > 0:
            if count > (end - offset) // size:
                raise _truncated()
            return offset + count * size
        if count > (end - offset) // (1 if step[1] else -size):
            raise _truncated()
        legacy = 0 if step[1] else -size
        for _ in range(count):
            offset = _blob(buf, offset, end, legacy)
        return offset
    item_plan = _plan(step[2])
    if count > (end - offset) // max(item_plan.min_size, 1):
        raise _truncated()
    for _ in range(count):
        offset = _walk(item_plan, buf, offset, end)
    return offset
