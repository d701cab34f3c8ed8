"""Entities of the ZooKeeper-era controller-to-broker APIs that kio does not carry.

Owns: LeaderAndIsr (api key 4), StopReplica (5), UpdateMetadata (6) and ControlledShutdown
(7), requests and responses, every version a Kafka 3.x ZooKeeper-mode controller speaks;
and the request header v0 that ControlledShutdown v0 alone still uses.

kio generated its entities from Kafka's JSON message specs; it stopped at Kafka 4.0, which
removed these four APIs. We declare them the same way Kafka does -- a message is a list of
fields, each present in a version range -- and derive, per version, a frozen dataclass shaped
exactly like kio's generated ones (``__version__``, ``__flexible__``, ``__api_key__``,
``__header_schema__``, ``kafka_type`` field metadata, ``tuple`` arrays, ``X | None`` for
nullable fields). kio's own ``entity_reader``/``entity_writer`` then read and write them:
one codec for every entity klog speaks.

Versions (from clients/src/main/resources/common/message/*.json of Kafka 3.x):

  LeaderAndIsr       0-6, flexible 4+   (v7 is KIP-866 ZK->KRaft migration: left out)
  StopReplica        0-3, flexible 2+   (v4 likewise)
  UpdateMetadata     0-7, flexible 6+   (v8 likewise)
  ControlledShutdown 0-3, flexible 3+   (v0 uses request header v0: no client id)

The migration versions are left out on purpose: a ZooKeeper-mode cluster never sends them,
and Kafka changed their layout between 3.4 and 3.5 (KRaftControllerId int32 became
isKRaftController bool), so there is no single layout to be compatible with.

Error codes are plain ``i16`` here (Kafka's specs type them int16); kio's ``ErrorCode``
enum would refuse a code it does not know, and these responses come from other brokers.

Entity classes are built on first use; look them up with ``request_entity(api_key,
version)`` / ``response_entity(api_key, version)`` or the per-API mappings below.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Mapping
from dataclasses import MISSING, dataclass, field, make_dataclass
from types import GenericAlias, MappingProxyType
from typing import Any, ClassVar, cast

from kio.schema.request_header.v1.header import RequestHeader as RequestHeaderV1
from kio.schema.request_header.v2.header import RequestHeader as RequestHeaderV2
from kio.schema.response_header.v0.header import ResponseHeader as ResponseHeaderV0
from kio.schema.response_header.v1.header import ResponseHeader as ResponseHeaderV1
from kio.static.constants import EntityType
from kio.static.primitive import i8, i16, i32, i64
from kio.static.protocol import Entity

LEADER_AND_ISR = 4
STOP_REPLICA = 5
UPDATE_METADATA = 6
CONTROLLED_SHUTDOWN = 7


def _request_header_v0() -> type:
    """Request header v0: api key, api version, correlation id -- no client id.

    Kafka 3.x still uses it for ControlledShutdown v0 only. Named ``RequestHeader`` like
    kio's header entities so that kio's codecs treat it as one; built with make_dataclass
    because kio reads ``Field.type`` at run time, which this module's postponed
    annotations would turn into strings.
    """
    cls = make_dataclass(
        "RequestHeader",
        [
            ("request_api_key", i16, field(metadata={"kafka_type": "int16"})),
            ("request_api_version", i16, field(metadata={"kafka_type": "int16"})),
            ("correlation_id", i32, field(metadata={"kafka_type": "int32"})),
        ],
        namespace={
            "__type__": EntityType.header,
            "__version__": i16(0),
            "__flexible__": False,
            "__module__": __name__,
        },
        frozen=True,
        slots=True,
        kw_only=True,
    )
    cls.__annotations__.update(dict.fromkeys(("__type__", "__version__", "__flexible__"), ClassVar))
    return cls


RequestHeader = _request_header_v0()
RequestHeaderV0 = RequestHeader


# --- the declarative schema ---------------------------------------------------------------

_PRIMITIVES: Mapping[str, type] = {
    "int8": i8,
    "int16": i16,
    "int32": i32,
    "int64": i64,
    "bool": bool,
    "string": str,
    "uuid": uuid.UUID,
}


_NO_DEFAULT: Any = object()


@dataclass(frozen=True, slots=True)
class _Field:
    """One field of a message spec, as in Kafka's JSON: a type present in ``versions``.

    ``kafka_type`` is a primitive name, ``[]<primitive>``, or ``[]`` with ``struct`` set.
    ``last`` None means "and every later version".
    """

    name: str
    kafka_type: str
    first: int = 0
    last: int | None = None
    nullable: bool = False
    default: Any = _NO_DEFAULT
    struct: _Struct | None = None

    def present_in(self, version: int) -> bool:
        return version >= self.first and (self.last is None or version <= self.last)


@dataclass(frozen=True, slots=True)
class _Struct:
    name: str
    fields: tuple[_Field, ...]


def _f(name: str, kafka_type: str, versions: str = "0+", **kw: Any) -> _Field:
    """``versions`` in Kafka's notation: "3+", "0-1", "5"."""
    if versions.endswith("+"):
        first, last = int(versions[:-1]), None
    elif "-" in versions:
        lo, hi = versions.split("-")
        first, last = int(lo), int(hi)
    else:
        first = last = int(versions)
    return _Field(name, kafka_type, first, last, **kw)


@dataclass(frozen=True, slots=True)
class _Message:
    api_key: int
    name: str
    kind: EntityType  # request or response
    min_version: int
    max_version: int
    flexible_from: int
    fields: tuple[_Field, ...]


def _header_schema(message: _Message, version: int) -> type:
    flexible = version >= message.flexible_from
    if message.kind is EntityType.response:
        return ResponseHeaderV1 if flexible else ResponseHeaderV0
    if message.api_key == CONTROLLED_SHUTDOWN and version == 0:
        return RequestHeaderV0
    return RequestHeaderV2 if flexible else RequestHeaderV1


def _build_class(
    name: str,
    fields: tuple[_Field, ...],
    message: _Message,
    version: int,
    entity_type: EntityType,
    built: dict[str, type],
) -> type:
    specs: list[tuple[str, Any, Any]] = []
    for spec in fields:
        if not spec.present_in(version):
            continue
        metadata: dict[str, str] = {}
        if spec.kafka_type == "[]":
            assert spec.struct is not None
            key = f"{spec.struct.name}"
            if key not in built:
                built[key] = _build_class(
                    spec.struct.name, spec.struct.fields, message, version,
                    EntityType.nested, built,
                )
            item: Any = built[key]
            annotation: Any = tuple[item, ...]
        elif spec.kafka_type.startswith("[]"):
            metadata["kafka_type"] = spec.kafka_type[2:]
            # tuple[primitive, ...] built at runtime (a type expression would not take a
            # value looked up in a dict).
            annotation = GenericAlias(tuple, (_PRIMITIVES[spec.kafka_type[2:]], ...))
        else:
            metadata["kafka_type"] = spec.kafka_type
            annotation = _PRIMITIVES[spec.kafka_type]
        # kio (like Kafka) reads the all-zero uuid as "no id": such fields are nullable.
        if spec.nullable or spec.kafka_type == "uuid":
            annotation = annotation | None
        default = spec.default
        if default is _NO_DEFAULT and spec.kafka_type == "uuid":
            default = None
        elif default is _NO_DEFAULT and spec.kafka_type.startswith("[]"):
            default = ()
        elif default is _NO_DEFAULT:
            default = MISSING
        specs.append((_snake(spec.name), annotation, field(default=default, metadata=metadata)))
    namespace = {
        "__type__": entity_type,
        "__version__": i16(version),
        "__flexible__": version >= message.flexible_from,
        "__api_key__": i16(message.api_key),
        "__header_schema__": _header_schema(message, version),
        "__module__": __name__,
    }
    cls = make_dataclass(
        name, specs, namespace=namespace, frozen=True, slots=True, kw_only=True
    )
    cls.__qualname__ = name
    # make_dataclass takes the ClassVars as plain attributes; declare them as ClassVars so
    # dataclass introspection (and kio) never mistake them for fields.
    cls.__annotations__.update({k: ClassVar for k in namespace if k != "__module__"})
    return cls


def _snake(name: str) -> str:
    out = []
    for i, ch in enumerate(name):
        if ch.isupper() and i and not name[i - 1].isupper():
            out.append("_")
        out.append(ch.lower())
    return "".join(out)


class _Versions(Mapping[int, type]):
    """A message's classes by version, each built on first use: building them all costs
    ~0.15 s, which every broker start would pay for APIs a standalone broker never
    decodes. Read-only; a class, once built, is the one returned ever after."""

    def __init__(self, message: _Message) -> None:
        self._message = message
        self._versions = range(message.min_version, message.max_version + 1)
        self._built: dict[int, type] = {}

    def __getitem__(self, version: int) -> type:
        cls = self._built.get(version)
        if cls is None:
            if version not in self._versions:
                raise KeyError(version)
            m = self._message
            cls = self._built[version] = _build_class(m.name, m.fields, m, version, m.kind, {})
        return cls

    def __iter__(self) -> Iterator[int]:
        return iter(self._versions)

    def __len__(self) -> int:
        return len(self._versions)


def _build(message: _Message) -> Mapping[int, type]:
    return _Versions(message)


# --- LeaderAndIsr (4) ---------------------------------------------------------------------

# The fields both LeaderAndIsr's and UpdateMetadata's partition states carry, in that order:
# the leadership the controller decided.
_PARTITION_LEADERSHIP = (
    _f("PartitionIndex", "int32"),
    _f("ControllerEpoch", "int32"),
    _f("Leader", "int32"),
    _f("LeaderEpoch", "int32"),
    _f("Isr", "[]int32"),
    _f("ZkVersion", "int32"),
    _f("Replicas", "[]int32"),
)

_LEADER_AND_ISR_PARTITION_STATE = _Struct("LeaderAndIsrPartitionState", (
    _f("TopicName", "string", "0-1"),
    *_PARTITION_LEADERSHIP,
    _f("AddingReplicas", "[]int32", "3+"),
    _f("RemovingReplicas", "[]int32", "3+"),
    _f("IsNew", "bool", "1+", default=False),
    _f("LeaderRecoveryState", "int8", "6+", default=i8(0)),
))

LEADER_AND_ISR_REQUEST = _build(_Message(
    LEADER_AND_ISR, "LeaderAndIsrRequest", EntityType.request, 0, 6, 4, (
        _f("ControllerId", "int32"),
        _f("ControllerEpoch", "int32"),
        _f("BrokerEpoch", "int64", "2+", default=i64(-1)),
        # 0: incremental, 1: full (KIP-516); Kafka 3.x sends 0 from the ZK controller.
        _f("Type", "int8", "5+", default=i8(0)),
        _f("UngroupedPartitionStates", "[]", "0-1", struct=_LEADER_AND_ISR_PARTITION_STATE),
        _f("TopicStates", "[]", "2+", struct=_Struct("LeaderAndIsrTopicState", (
            _f("TopicName", "string", "2+"),
            _f("TopicId", "uuid", "5+"),
            _f("PartitionStates", "[]", "2+", struct=_LEADER_AND_ISR_PARTITION_STATE),
        ))),
        _f("LiveLeaders", "[]", struct=_Struct("LeaderAndIsrLiveLeader", (
            _f("BrokerId", "int32"),
            _f("HostName", "string"),
            _f("Port", "int32"),
        ))),
    ),
))

_LEADER_AND_ISR_PARTITION_ERROR = _Struct("LeaderAndIsrPartitionError", (
    _f("TopicName", "string", "0-4"),
    _f("PartitionIndex", "int32"),
    _f("ErrorCode", "int16"),
))

LEADER_AND_ISR_RESPONSE = _build(_Message(
    LEADER_AND_ISR, "LeaderAndIsrResponse", EntityType.response, 0, 6, 4, (
        _f("ErrorCode", "int16"),
        _f("PartitionErrors", "[]", "0-4", struct=_LEADER_AND_ISR_PARTITION_ERROR),
        _f("Topics", "[]", "5+", struct=_Struct("LeaderAndIsrTopicError", (
            _f("TopicId", "uuid", "5+"),
            _f("PartitionErrors", "[]", "5+", struct=_LEADER_AND_ISR_PARTITION_ERROR),
        ))),
    ),
))

# --- StopReplica (5) ----------------------------------------------------------------------

STOP_REPLICA_REQUEST = _build(_Message(
    STOP_REPLICA, "StopReplicaRequest", EntityType.request, 0, 3, 2, (
        _f("ControllerId", "int32"),
        _f("ControllerEpoch", "int32"),
        _f("BrokerEpoch", "int64", "1+", default=i64(-1)),
        _f("DeletePartitions", "bool", "0-2", default=False),
        _f("UngroupedPartitions", "[]", "0", struct=_Struct("StopReplicaPartitionV0", (
            _f("TopicName", "string"),
            _f("PartitionIndex", "int32"),
        ))),
        _f("Topics", "[]", "1-2", struct=_Struct("StopReplicaTopicV1", (
            _f("Name", "string"),
            _f("PartitionIndexes", "[]int32"),
        ))),
        _f("TopicStates", "[]", "3+", struct=_Struct("StopReplicaTopicState", (
            _f("TopicName", "string"),
            _f("PartitionStates", "[]", struct=_Struct("StopReplicaPartitionState", (
                _f("PartitionIndex", "int32"),
                _f("LeaderEpoch", "int32", default=i32(-1)),
                _f("DeletePartition", "bool", default=False),
            ))),
        ))),
    ),
))

STOP_REPLICA_RESPONSE = _build(_Message(
    STOP_REPLICA, "StopReplicaResponse", EntityType.response, 0, 3, 2, (
        _f("ErrorCode", "int16"),
        _f("PartitionErrors", "[]", struct=_Struct("StopReplicaPartitionError", (
            _f("TopicName", "string"),
            _f("PartitionIndex", "int32"),
            _f("ErrorCode", "int16"),
        ))),
    ),
))

# --- UpdateMetadata (6) -------------------------------------------------------------------

_UPDATE_METADATA_PARTITION_STATE = _Struct("UpdateMetadataPartitionState", (
    _f("TopicName", "string", "0-4"),
    *_PARTITION_LEADERSHIP,
    _f("OfflineReplicas", "[]int32", "4+"),
))

UPDATE_METADATA_REQUEST = _build(_Message(
    UPDATE_METADATA, "UpdateMetadataRequest", EntityType.request, 0, 7, 6, (
        _f("ControllerId", "int32"),
        _f("ControllerEpoch", "int32"),
        _f("BrokerEpoch", "int64", "5+", default=i64(-1)),
        _f("UngroupedPartitionStates", "[]", "0-4", struct=_UPDATE_METADATA_PARTITION_STATE),
        _f("TopicStates", "[]", "5+", struct=_Struct("UpdateMetadataTopicState", (
            _f("TopicName", "string"),
            _f("TopicId", "uuid", "7+"),
            _f("PartitionStates", "[]", struct=_UPDATE_METADATA_PARTITION_STATE),
        ))),
        _f("LiveBrokers", "[]", struct=_Struct("UpdateMetadataBroker", (
            _f("Id", "int32"),
            # v0 knew one host:port per broker; v1+ a list of endpoints.
            _f("V0Host", "string", "0"),
            _f("V0Port", "int32", "0"),
            _f("Endpoints", "[]", "1+", struct=_Struct("UpdateMetadataEndpoint", (
                _f("Port", "int32"),
                _f("Host", "string"),
                _f("Listener", "string", "3+"),
                _f("SecurityProtocol", "int16"),
            ))),
            _f("Rack", "string", "2+", nullable=True, default=None),
        ))),
    ),
))

UPDATE_METADATA_RESPONSE = _build(_Message(
    UPDATE_METADATA, "UpdateMetadataResponse", EntityType.response, 0, 7, 6, (
        _f("ErrorCode", "int16"),
    ),
))

# --- ControlledShutdown (7) ---------------------------------------------------------------

CONTROLLED_SHUTDOWN_REQUEST = _build(_Message(
    CONTROLLED_SHUTDOWN, "ControlledShutdownRequest", EntityType.request, 0, 3, 3, (
        _f("BrokerId", "int32"),
        _f("BrokerEpoch", "int64", "2+", default=i64(-1)),
    ),
))

CONTROLLED_SHUTDOWN_RESPONSE = _build(_Message(
    CONTROLLED_SHUTDOWN, "ControlledShutdownResponse", EntityType.response, 0, 3, 3, (
        _f("ErrorCode", "int16"),
        _f("RemainingPartitions", "[]", struct=_Struct("RemainingPartition", (
            _f("TopicName", "string"),
            _f("PartitionIndex", "int32"),
        ))),
    ),
))

# --- lookup -------------------------------------------------------------------------------

#: api_key -> (name, request classes by version, response classes by version, first
#: flexible version)
INTER_BROKER_APIS: Mapping[int, tuple[str, Mapping[int, type], Mapping[int, type], int]] = (
    MappingProxyType({
        LEADER_AND_ISR: ("LeaderAndIsr", LEADER_AND_ISR_REQUEST, LEADER_AND_ISR_RESPONSE, 4),
        STOP_REPLICA: ("StopReplica", STOP_REPLICA_REQUEST, STOP_REPLICA_RESPONSE, 2),
        UPDATE_METADATA: (
            "UpdateMetadata", UPDATE_METADATA_REQUEST, UPDATE_METADATA_RESPONSE, 6,
        ),
        CONTROLLED_SHUTDOWN: (
            "ControlledShutdown", CONTROLLED_SHUTDOWN_REQUEST, CONTROLLED_SHUTDOWN_RESPONSE, 3,
        ),
    })
)


# The classes are made by make_dataclass with kio's class attributes (__version__,
# __flexible__, ...), so they are kio Entities; the checker sees only ``type``.
def request_entity(api_key: int, version: int) -> type[Entity]:
    """The request class of an inter-broker API at ``version`` (KeyError if none)."""
    return cast("type[Entity]", INTER_BROKER_APIS[api_key][1][version])


def response_entity(api_key: int, version: int) -> type[Entity]:
    """The response class of an inter-broker API at ``version`` (KeyError if none)."""
    return cast("type[Entity]", INTER_BROKER_APIS[api_key][2][version])
