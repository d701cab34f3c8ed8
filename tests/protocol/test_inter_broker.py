"""Tests for klog.protocol.inter_broker: own kio-style entities for the controller APIs."""

from __future__ import annotations

import io
import struct
import uuid
from dataclasses import fields

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.schema.request_header.v1.header import RequestHeader as RequestHeaderV1
from kio.schema.request_header.v2.header import RequestHeader as RequestHeaderV2
from kio.schema.response_header.v0.header import ResponseHeader as ResponseHeaderV0
from kio.schema.response_header.v1.header import ResponseHeader as ResponseHeaderV1
from kio.serial import entity_reader, entity_writer
from kio.static.constants import EntityType
from kio.static.primitive import i8, i16, i32, i64

from klog.protocol import inter_broker as ib

# (api_key, version range, first flexible version) from Kafka 3.x's message specs
EXPECTED = {
    4: (0, 6, 4),
    5: (0, 3, 2),
    6: (0, 7, 6),
    7: (0, 3, 3),
}

ALL_CLASSES = [
    (api_key, version, cls)
    for api_key, (_name, requests, responses, _flex) in ib.INTER_BROKER_APIS.items()
    for version, cls in [*requests.items(), *responses.items()]
]


def _write(entity: object) -> bytes:
    buffer = io.BytesIO()
    entity_writer(type(entity))(buffer, entity)
    return buffer.getvalue()


def _read(cls: type, data: bytes) -> object:
    entity, size = entity_reader(cls)(data, 0)
    assert size == len(data)
    return entity


def _field_names(cls: type) -> list[str]:
    return [f.name for f in fields(cls)]


def _item_type(cls: type, name: str) -> type:
    (f,) = [f for f in fields(cls) if f.name == name]
    return f.type.__args__[0]


# --------------------------------------------------------------------------------------------
# Declarations


@pytest.mark.parametrize("api_key", sorted(EXPECTED))
def test_versions_and_flexibility(api_key: int) -> None:
    low, high, flexible_from = EXPECTED[api_key]
    _name, requests, responses, flex = ib.INTER_BROKER_APIS[api_key]
    assert flex == flexible_from
    assert sorted(requests) == sorted(responses) == list(range(low, high + 1))
    for version in range(low, high + 1):
        request, response = requests[version], responses[version]
        assert request.__version__ == response.__version__ == version
        assert request.__api_key__ == response.__api_key__ == api_key
        assert request.__type__ is EntityType.request
        assert response.__type__ is EntityType.response
        assert request.__flexible__ == response.__flexible__ == (version >= flexible_from)
        assert ib.request_entity(api_key, version) is request
        assert ib.response_entity(api_key, version) is response


@pytest.mark.parametrize("api_key", sorted(EXPECTED))
def test_header_schemas(api_key: int) -> None:
    _low, high, flexible_from = EXPECTED[api_key]
    for version in range(high + 1):
        request = ib.request_entity(api_key, version)
        response = ib.response_entity(api_key, version)
        flexible = version >= flexible_from
        if api_key == ib.CONTROLLED_SHUTDOWN and version == 0:
            assert request.__header_schema__ is ib.RequestHeaderV0
        else:
            assert request.__header_schema__ is (RequestHeaderV2 if flexible else RequestHeaderV1)
        assert response.__header_schema__ is (ResponseHeaderV1 if flexible else ResponseHeaderV0)


def test_unknown_versions_are_key_errors() -> None:
    with pytest.raises(KeyError):
        ib.request_entity(ib.LEADER_AND_ISR, 7)
    with pytest.raises(KeyError):
        ib.response_entity(ib.STOP_REPLICA, 4)
    with pytest.raises(KeyError):
        ib.request_entity(18, 0)


def test_leader_and_isr_fields_follow_the_versions() -> None:
    v0 = ib.LEADER_AND_ISR_REQUEST[0]
    assert _field_names(v0) == [
        "controller_id", "controller_epoch", "ungrouped_partition_states", "live_leaders",
    ]
    assert _field_names(_item_type(v0, "ungrouped_partition_states")) == [
        "topic_name", "partition_index", "controller_epoch", "leader", "leader_epoch", "isr",
        "zk_version", "replicas",
    ]
    v6 = ib.LEADER_AND_ISR_REQUEST[6]
    assert _field_names(v6) == [
        "controller_id", "controller_epoch", "broker_epoch", "type", "topic_states",
        "live_leaders",
    ]
    topic_state = _item_type(v6, "topic_states")
    assert _field_names(topic_state) == ["topic_name", "topic_id", "partition_states"]
    assert _field_names(_item_type(topic_state, "partition_states")) == [
        "partition_index", "controller_epoch", "leader", "leader_epoch", "isr", "zk_version",
        "replicas", "adding_replicas", "removing_replicas", "is_new", "leader_recovery_state",
    ]
    assert _field_names(ib.LEADER_AND_ISR_RESPONSE[4]) == ["error_code", "partition_errors"]
    v5 = ib.LEADER_AND_ISR_RESPONSE[5]
    assert _field_names(v5) == ["error_code", "topics"]
    assert _field_names(_item_type(_item_type(v5, "topics"), "partition_errors")) == [
        "partition_index", "error_code",
    ]


def test_stop_replica_and_update_metadata_fields() -> None:
    assert _field_names(ib.STOP_REPLICA_REQUEST[0]) == [
        "controller_id", "controller_epoch", "delete_partitions", "ungrouped_partitions",
    ]
    assert _field_names(ib.STOP_REPLICA_REQUEST[2]) == [
        "controller_id", "controller_epoch", "broker_epoch", "delete_partitions", "topics",
    ]
    assert _field_names(ib.STOP_REPLICA_REQUEST[3]) == [
        "controller_id", "controller_epoch", "broker_epoch", "topic_states",
    ]
    um0 = ib.UPDATE_METADATA_REQUEST[0]
    assert _field_names(_item_type(um0, "live_brokers")) == ["id", "v0_host", "v0_port"]
    um7 = ib.UPDATE_METADATA_REQUEST[7]
    broker = _item_type(um7, "live_brokers")
    assert _field_names(broker) == ["id", "endpoints", "rack"]
    assert _field_names(_item_type(broker, "endpoints")) == [
        "port", "host", "listener", "security_protocol",
    ]
    assert _field_names(ib.CONTROLLED_SHUTDOWN_REQUEST[0]) == ["broker_id"]
    assert _field_names(ib.CONTROLLED_SHUTDOWN_REQUEST[2]) == ["broker_id", "broker_epoch"]


# --------------------------------------------------------------------------------------------
# Exact bytes, written out by hand from the message specs


def _legacy_string(text: str) -> bytes:
    return struct.pack(">h", len(text)) + text.encode()


def _compact_string(text: str) -> bytes:
    return bytes([len(text) + 1]) + text.encode()


def test_leader_and_isr_v0_bytes() -> None:
    cls = ib.LEADER_AND_ISR_REQUEST[0]
    state_cls = _item_type(cls, "ungrouped_partition_states")
    leader_cls = _item_type(cls, "live_leaders")
    request = cls(
        controller_id=i32(1),
        controller_epoch=i32(7),
        ungrouped_partition_states=(
            state_cls(
                topic_name="t", partition_index=i32(2), controller_epoch=i32(7),
                leader=i32(1), leader_epoch=i32(3), isr=(i32(1), i32(2)),
                zk_version=i32(5), replicas=(i32(1), i32(2), i32(3)),
            ),
        ),
        live_leaders=(leader_cls(broker_id=i32(1), host_name="h", port=i32(9092)),),
    )
    expected = (
        struct.pack(">ii", 1, 7)
        + struct.pack(">i", 1) + _legacy_string("t") + struct.pack(">iiii", 2, 7, 1, 3)
        + struct.pack(">iii", 2, 1, 2) + struct.pack(">i", 5)
        + struct.pack(">iiii", 3, 1, 2, 3)
        + struct.pack(">ii", 1, 1) + _legacy_string("h") + struct.pack(">i", 9092)
    )
    assert _write(request) == expected
    assert _read(cls, expected) == request


def test_leader_and_isr_v6_bytes_are_compact_with_tag_sections() -> None:
    cls = ib.LEADER_AND_ISR_REQUEST[6]
    topic_cls = _item_type(cls, "topic_states")
    state_cls = _item_type(topic_cls, "partition_states")
    topic_id = uuid.UUID("0123456789abcdef0123456789abcdef")
    request = cls(
        controller_id=i32(1), controller_epoch=i32(7), broker_epoch=i64(99), type=i8(0),
        topic_states=(
            topic_cls(
                topic_name="t", topic_id=topic_id,
                partition_states=(
                    state_cls(
                        partition_index=i32(0), controller_epoch=i32(7), leader=i32(1),
                        leader_epoch=i32(3), isr=(i32(1),), zk_version=i32(5),
                        replicas=(i32(1),), is_new=True, leader_recovery_state=i8(1),
                    ),
                ),
            ),
        ),
        live_leaders=(),
    )
    partition = (
        struct.pack(">iiii", 0, 7, 1, 3) + b"\x02" + struct.pack(">i", 1)
        + struct.pack(">i", 5) + b"\x02" + struct.pack(">i", 1)
        + b"\x01" + b"\x01"  # adding_replicas, removing_replicas: empty compact arrays
        + b"\x01" + b"\x01"  # is_new, leader_recovery_state
        + b"\x00"  # tagged fields
    )
    expected = (
        struct.pack(">iiqb", 1, 7, 99, 0)
        + b"\x02" + _compact_string("t") + topic_id.bytes + b"\x02" + partition + b"\x00"
        + b"\x01"  # live_leaders: empty
        + b"\x00"
    )
    assert _write(request) == expected
    assert _read(cls, expected) == request


def test_defaults_match_the_specs() -> None:
    state_cls = _item_type(ib.STOP_REPLICA_REQUEST[3], "topic_states")
    partition_cls = _item_type(state_cls, "partition_states")
    partition = partition_cls(partition_index=i32(0))
    assert partition.leader_epoch == -1
    assert partition.delete_partition is False
    request = ib.CONTROLLED_SHUTDOWN_REQUEST[3](broker_id=i32(4))
    assert request.broker_epoch == -1
    assert _write(request) == struct.pack(">iq", 4, -1) + b"\x00"
    assert _write(ib.CONTROLLED_SHUTDOWN_REQUEST[0](broker_id=i32(4))) == struct.pack(">i", 4)


def test_update_metadata_rack_is_nullable() -> None:
    cls = ib.UPDATE_METADATA_REQUEST[2]
    broker_cls = _item_type(cls, "live_brokers")
    endpoint_cls = _item_type(broker_cls, "endpoints")
    broker = broker_cls(
        id=i32(1),
        endpoints=(endpoint_cls(port=i32(9092), host="h", security_protocol=i16(0)),),
        rack=None,
    )
    request = cls(controller_id=i32(1), controller_epoch=i32(1), live_brokers=(broker,))
    data = _write(request)
    assert data.endswith(b"\xff\xff")  # null legacy string
    assert _read(cls, data) == request


def test_request_header_v0_is_eight_bytes() -> None:
    header = ib.RequestHeaderV0(
        request_api_key=i16(7), request_api_version=i16(0), correlation_id=i32(11)
    )
    data = _write(header)
    assert data == struct.pack(">hhi", 7, 0, 11)
    assert _read(ib.RequestHeaderV0, data) == header


# --------------------------------------------------------------------------------------------
# Round trips of every entity


for _primitive in (i8, i16, i32, i64):
    _primitive.__hypothesis_hook__()  # kio registers its int strategies lazily


@pytest.mark.parametrize(
    ("api_key", "version", "cls"),
    ALL_CLASSES,
    ids=[f"{cls.__name__}-v{version}" for _key, version, cls in ALL_CLASSES],
)
def test_round_trip(api_key: int, version: int, cls: type) -> None:
    @settings(
        max_examples=8, deadline=None, database=None,
        suppress_health_check=[HealthCheck.too_slow],
    )
    @given(st.from_type(cls))
    def check(entity: object) -> None:
        data = _write(entity)
        assert _read(cls, data) == entity

    check()
