"""Entities of the old API versions Kafka 3.x still serves and kio does not carry.

Owns: Produce v0-2, Fetch v0-3, ListOffsets v0, OffsetCommit v0-1, OffsetFetch v0,
CreateTopics v0-1, DeleteTopics v0, OffsetForLeaderEpoch v0-1, WriteTxnMarkers v0,
DescribeAcls v0, CreateAcls v0, DeleteAcls v0, DescribeConfigs v0, AlterReplicaLogDirs v0
and DescribeLogDirs v0, requests and responses.

kio generated its entities from Kafka 4.0's JSON specs, and Kafka 4.0 removed these versions
(KIP-896); Kafka 3.x (ZooKeeper mode) serves them, and the clients of Kafka 0.9-0.11's era
speak nothing newer. Each old version differs from the oldest one kio has only by a few
fields (Kafka's specs say in which versions each field exists), so each is *derived* from
kio's class: the same dataclass, field for field, with the fields that version lacks
dropped and the few it alone has added, rebuilt recursively through nested structs. The
classes keep kio's field types (timedeltas, ``ErrorCode``, ``Records``), so handlers read
and build them exactly as they do kio's, and kio's own ``entity_reader``/``entity_writer``
code them.

The differences, from clients/src/main/resources/common/message/*.json of Kafka 3.x
("versions" of each field):

  ProduceRequest         TransactionalId 3+
  ProduceResponse        ThrottleTimeMs 1+, LogAppendTimeMs 2+
  FetchRequest           MaxBytes 3+, IsolationLevel 4+
  FetchResponse          ThrottleTimeMs 1+, LastStableOffset 4+, AbortedTransactions 4+
  ListOffsetsRequest     MaxNumOffsets 0 only
  ListOffsetsResponse    OldStyleOffsets 0 only; Timestamp 1+, Offset 1+
  OffsetCommitRequest    GenerationIdOrMemberEpoch 1+, MemberId 1+, RetentionTimeMs 2-4,
                         CommitTimestamp 1 only
  OffsetFetch            v0 is v1 (v0 read ZooKeeper-stored offsets, see handler)
  CreateTopicsRequest    ValidateOnly 1+
  CreateTopicsResponse   ThrottleTimeMs 2+, ErrorMessage 1+
  DeleteTopicsResponse   ThrottleTimeMs 1+ (the request's v0 is v1)
  OffsetForLeaderEpochRequest   CurrentLeaderEpoch 2+
  OffsetForLeaderEpochResponse  ThrottleTimeMs 2+, LeaderEpoch 1+
  WriteTxnMarkers        v0 is v1 without flexible encodings (v1 only enabled them)
  DescribeAclsRequest    PatternTypeFilter 1+ (absent: LITERAL, its default)
  DescribeAclsResponse   PatternType 1+
  CreateAclsRequest      ResourcePatternType 1+ (absent: LITERAL)
  DeleteAclsRequest      PatternTypeFilter 1+ (absent: LITERAL)
  DeleteAclsResponse     PatternType 1+
  DescribeConfigsRequest IncludeSynonyms 1+
  DescribeConfigsResponse  IsDefault 0 only; ConfigSource 1+, Synonyms 1+
  AlterReplicaLogDirs    v0 is v1 (v1 changed only how throttling is applied)
  DescribeLogDirs        v0 is v1 (v1 changed only how throttling is applied)
"""

from __future__ import annotations

import dataclasses
import functools
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, ClassVar, Literal

from kio.schema.request_header.v1.header import RequestHeader as RequestHeaderV1
from kio.schema.request_header.v2.header import RequestHeader as RequestHeaderV2
from kio.schema.response_header.v0.header import ResponseHeader as ResponseHeaderV0
from kio.schema.response_header.v1.header import ResponseHeader as ResponseHeaderV1
from kio.static.constants import EntityType
from kio.static.primitive import i16, i32, i64
from kio.static.protocol import Entity

from klog.protocol.entities import kio_class


@dataclass(frozen=True, slots=True)
class _Add:
    """A field only the old version has, placed after ``after`` (None: first)."""

    name: str
    annotation: Any
    kafka_type: str
    after: str | None
    default: Any = dataclasses.MISSING


@dataclass(frozen=True, slots=True)
class _Derivation:
    """How ``version`` of an API differs from kio's ``base`` version of it: per class name
    (the request/response class or a nested struct), the fields dropped and added."""

    base: int
    drop: Mapping[str, frozenset[str]]
    add: Mapping[str, tuple[_Add, ...]]


def _d(base: int, drop: Mapping[str, set[str]] | None = None,
       add: Mapping[str, tuple[_Add, ...]] | None = None) -> _Derivation:
    return _Derivation(base, MappingProxyType({k: frozenset(v) for k, v in (drop or {}).items()}),
                       MappingProxyType(dict(add or {})))


_KIO_NAMES: Mapping[int, str] = MappingProxyType({
    0: "produce", 1: "fetch", 2: "list_offsets", 8: "offset_commit", 9: "offset_fetch",
    19: "create_topics", 20: "delete_topics", 23: "offset_for_leader_epoch",
    27: "write_txn_markers",
    29: "describe_acls", 30: "create_acls", 31: "delete_acls", 32: "describe_configs",
    34: "alter_replica_log_dirs", 35: "describe_log_dirs",
})

_REQ, _RESP = EntityType.request, EntityType.response

# (api_key, kind) -> version -> derivation
_DERIVATIONS: Mapping[tuple[int, EntityType], Mapping[int, _Derivation]] = MappingProxyType({
    (0, _REQ): {v: _d(3, {"ProduceRequest": {"transactional_id"}}) for v in (0, 1, 2)},
    (0, _RESP): {
        2: _d(3),
        1: _d(3, {"PartitionProduceResponse": {"log_append_time"}}),
        0: _d(3, {"PartitionProduceResponse": {"log_append_time"},
                  "ProduceResponse": {"throttle_time"}}),
    },
    (1, _REQ): {
        3: _d(4, {"FetchRequest": {"isolation_level"}}),
        **{v: _d(4, {"FetchRequest": {"isolation_level", "max_bytes"}}) for v in (0, 1, 2)},
    },
    (1, _RESP): {
        **{v: _d(4, {"PartitionData": {"last_stable_offset", "aborted_transactions"}})
           for v in (1, 2, 3)},
        0: _d(4, {"PartitionData": {"last_stable_offset", "aborted_transactions"},
                  "FetchResponse": {"throttle_time"}}),
    },
    (2, _REQ): {0: _d(1, add={"ListOffsetsPartition": (
        _Add("max_num_offsets", i32, "int32", "timestamp", i32(1)),)})},
    (2, _RESP): {0: _d(1, {"ListOffsetsPartitionResponse": {"timestamp", "offset"}},
                       {"ListOffsetsPartitionResponse": (
                           _Add("old_style_offsets", tuple[i64, ...], "int64", "error_code",
                                ()),)})},
    (8, _REQ): {
        1: _d(2, {"OffsetCommitRequest": {"retention_time"}},
              {"OffsetCommitRequestPartition": (
                  _Add("commit_timestamp", i64, "int64", "committed_offset", i64(-1)),)}),
        0: _d(2, {"OffsetCommitRequest": {"retention_time", "generation_id_or_member_epoch",
                                          "member_id"}}),
    },
    (8, _RESP): {v: _d(2) for v in (0, 1)},
    (9, _REQ): {0: _d(1)},
    (9, _RESP): {0: _d(1)},
    (19, _REQ): {v: _d(2, {"CreateTopicsRequest": {"validate_only"}}) for v in (0, 1)},
    (19, _RESP): {
        1: _d(2, {"CreateTopicsResponse": {"throttle_time"}}),
        0: _d(2, {"CreateTopicsResponse": {"throttle_time"},
                  "CreatableTopicResult": {"error_message"}}),
    },
    (20, _REQ): {0: _d(1)},
    (20, _RESP): {0: _d(1, {"DeleteTopicsResponse": {"throttle_time"}})},
    (23, _REQ): {v: _d(2, {"OffsetForLeaderPartition": {"current_leader_epoch"}})
                 for v in (0, 1)},
    (23, _RESP): {
        1: _d(2, {"OffsetForLeaderEpochResponse": {"throttle_time"}}),
        0: _d(2, {"OffsetForLeaderEpochResponse": {"throttle_time"},
                  "EpochEndOffset": {"leader_epoch"}}),
    },
    (27, _REQ): {0: _d(1)},
    (27, _RESP): {0: _d(1)},
    # ACLs v0 predate prefixed patterns (KIP-290): every pattern and filter is LITERAL,
    # which the handlers assume when the field is absent.
    (29, _REQ): {0: _d(1, {"DescribeAclsRequest": {"pattern_type_filter"}})},
    (29, _RESP): {0: _d(1, {"DescribeAclsResource": {"pattern_type"}})},
    (30, _REQ): {0: _d(1, {"AclCreation": {"resource_pattern_type"}})},
    (30, _RESP): {0: _d(1)},
    (31, _REQ): {0: _d(1, {"DeleteAclsFilter": {"pattern_type_filter"}})},
    (31, _RESP): {0: _d(1, {"DeleteAclsMatchingAcl": {"pattern_type"}})},
    (32, _REQ): {0: _d(1, {"DescribeConfigsRequest": {"include_synonyms"}})},
    (32, _RESP): {0: _d(1, {"DescribeConfigsResourceResult": {"config_source", "synonyms"}},
                        {"DescribeConfigsResourceResult": (
                            _Add("is_default", bool, "bool", "read_only", False),)})},
    (34, _REQ): {0: _d(1)},
    (34, _RESP): {0: _d(1)},
    (35, _REQ): {0: _d(1)},
    (35, _RESP): {0: _d(1)},
})

#: api_key -> the oldest version klog decodes (Kafka 3.x's minimum: 0 for every API here).
OLDEST: Mapping[int, int] = MappingProxyType({
    api_key: min(by_version) for (api_key, _kind), by_version in _DERIVATIONS.items()
})


def handles(api_key: int, version: int) -> bool:
    """True when ``version`` of ``api_key`` is one this module derives."""
    return version in _DERIVATIONS.get((api_key, _REQ), {})


@functools.cache
def entity(api_key: int, version: int,
           kind: Literal[EntityType.request, EntityType.response]) -> type[Entity]:
    """The class of ``version`` (request or response) of ``api_key``; KeyError if none."""
    derivation = _DERIVATIONS[(api_key, kind)][version]
    base = kio_class(_KIO_NAMES[api_key], derivation.base, kind)
    built: dict[type, type] = {}
    return typing.cast("type[Entity]", _derive(base, version, derivation, built))


def _derive(base: type, version: int, derivation: _Derivation, built: dict[type, type]) -> type:
    if base in built:
        return built[base]
    name = base.__name__
    dropped = derivation.drop.get(name, frozenset())
    added = {a.after: a for a in derivation.add.get(name, ())}
    specs: list[tuple[str, Any, Any]] = []

    def add_after(after: str | None) -> None:
        extra = added.get(after)
        if extra is not None:
            specs.append((extra.name, extra.annotation, dataclasses.field(
                default=extra.default, metadata={"kafka_type": extra.kafka_type})))

    add_after(None)
    for f in dataclasses.fields(base):
        if f.name in dropped:
            add_after(f.name)
            continue
        annotation = _rebuild_type(f.type, version, derivation, built)
        kw: dict[str, Any] = {"metadata": f.metadata}
        if f.default is not dataclasses.MISSING:
            kw["default"] = f.default
        elif f.default_factory is not dataclasses.MISSING:
            kw["default_factory"] = f.default_factory
        specs.append((f.name, annotation, dataclasses.field(**kw)))
        add_after(f.name)
    namespace = {
        "__type__": base.__type__,  # type: ignore[attr-defined]
        "__version__": i16(version),
        # Every version derived here predates flexible versions (WriteTxnMarkers v0 is
        # derived from the flexible v1: the same fields, compact encodings off).
        "__flexible__": False,
        "__api_key__": base.__api_key__,  # type: ignore[attr-defined]
        "__header_schema__": _plain_header(base),
        "__module__": __name__,
    }
    cls = dataclasses.make_dataclass(name, specs, namespace=namespace, frozen=True,
                                     slots=True, kw_only=True)
    cls.__qualname__ = name
    cls.__annotations__.update({k: ClassVar for k in namespace if k != "__module__"})
    built[base] = cls
    return cls


def _plain_header(base: type) -> type:
    """The header schema of a non-flexible version: the base's own, unless the base is
    flexible (request header v2 / response header v1), then v1 / v0."""
    header: type = base.__header_schema__  # type: ignore[attr-defined]
    if not base.__flexible__:  # type: ignore[attr-defined]
        return header
    if header is RequestHeaderV2:
        return RequestHeaderV1
    if header is ResponseHeaderV1:
        return ResponseHeaderV0
    return header


def _rebuild_type(annotation: Any, version: int, derivation: _Derivation,
                  built: dict[type, type]) -> Any:
    """``annotation`` with every nested kio struct replaced by its derived class."""
    if dataclasses.is_dataclass(annotation) and isinstance(annotation, type):
        return _derive(annotation, version, derivation, built)
    origin = typing.get_origin(annotation)
    if origin is tuple:
        args = typing.get_args(annotation)
        if args and dataclasses.is_dataclass(args[0]):
            return tuple[_rebuild_type(args[0], version, derivation, built), ...]  # type: ignore[misc]
        return annotation
    if origin is not None and type(None) in typing.get_args(annotation):
        inner = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(inner) == 1:
            rebuilt = _rebuild_type(inner[0], version, derivation, built)
            if rebuilt is not inner[0]:
                return rebuilt | None
    return annotation
