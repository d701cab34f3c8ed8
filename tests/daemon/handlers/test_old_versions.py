"""The oldest API versions Kafka 3.x serves (klog.protocol.old_versions), over a real
socket: Produce v0-v2 with v0/v1 message sets (converted to v2, as Kafka's LogValidator),
Produce v3+ refusing them, ListOffsets v0, OffsetCommit
v0/v1 with OffsetFetch v0, CreateTopics v0/v1, DeleteTopics v0, OffsetForLeaderEpoch
v0/v1, DescribeConfigs v0, DescribeLogDirs v0 and Create/Describe/DeleteAcls v0. Fetch
v0-v3: test_down_conversion.py."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from klog.protocol.errors import ErrorCode
from klog.protocol.records.batch import (
    MAGIC_V2,
    CompressionType,
    iter_batch_headers,
)
from klog.protocol.records.decode import iter_records
from klog.protocol.records.legacy import build_legacy_message_set
from klog.protocol.records.v2 import build_batch
from tests.daemon.wire import InProcessBroker, WireClient, produce_values

PRODUCE, FETCH, LIST_OFFSETS, OFFSET_COMMIT, OFFSET_FETCH = 0, 1, 2, 8, 9
FIND_COORDINATOR, CREATE_TOPICS, DELETE_TOPICS, OFFSET_FOR_LEADER_EPOCH = 10, 19, 20, 23
DESCRIBE_CONFIGS, DESCRIBE_LOG_DIRS = 32, 35
DESCRIBE_ACLS, CREATE_ACLS, DELETE_ACLS = 29, 30, 31


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InProcessBroker]:
    b = InProcessBroker(Path(tmp_path_factory.mktemp("old-versions")),
                        {"num.partitions": 1})
    b.start()
    yield b
    b.stop()


@pytest.fixture
def client(broker: InProcessBroker) -> Iterator[WireClient]:
    with broker.connect() as c:
        yield c


def _records(data: bytes) -> list[Any]:
    out = []
    for h in iter_batch_headers(data):
        h.ensure_valid(data)
        out.extend((h.magic, r) for r in iter_records(data, h))
    return out


def _fetch_all(client: WireClient, topic: str, version: int = 12) -> list[Any]:
    response = client.fetch(topic, 0, 0, version=version)
    partition = response.responses[0].partitions[0]
    assert partition.error_code == ErrorCode.NONE
    return _records(partition.records or b"")


@pytest.mark.parametrize(("version", "magic", "codec"), [
    (0, 0, CompressionType.NONE), (1, 0, CompressionType.GZIP),
    (2, 1, CompressionType.NONE), (2, 1, CompressionType.SNAPPY),
    (2, 1, CompressionType.LZ4),
])
def test_produce_v0_v2_message_sets_are_converted_to_v2(
        client: WireClient, version: int, magic: int, codec: CompressionType) -> None:
    topic = f"legacy-produce-{version}-{magic}-{int(codec)}"
    client.create_topic(topic)
    message_set = build_legacy_message_set(
        [(1_700_000_000_000 + i, b"k%d" % i, b"v%d" % i) for i in range(3)],
        magic=magic, compression=codec)
    for round_ in range(2):
        response = client.call(PRODUCE, version, produce_values(topic, 0, message_set))
        part = response.responses[0].partition_responses[0]
        assert part.error_code == ErrorCode.NONE
        assert part.base_offset == 3 * round_
    stored = _fetch_all(client, topic)
    assert [m for m, _r in stored] == [MAGIC_V2] * 6
    assert [r.offset for _m, r in stored] == list(range(6))
    assert [r.value for _m, r in stored] == [b"v0", b"v1", b"v2"] * 2
    # v0 messages have no timestamp: -1, as Kafka converts them under CreateTime
    expected_ts = [-1] * 3 if magic == 0 else [1_700_000_000_000 + i for i in range(3)]
    assert [r.timestamp for _m, r in stored] == expected_ts * 2


def test_produce_v0_under_log_append_time_stamps_the_append_time(client: WireClient) -> None:
    topic = "legacy-append-time"
    response = client.call(CREATE_TOPICS, 0, {"topics": [{
        "name": topic, "num_partitions": 1, "replication_factor": 1, "assignments": [],
        "configs": [{"name": "message.timestamp.type", "value": "LogAppendTime"}]}],
        "timeout": 10_000})
    assert response.topics[0].error_code == ErrorCode.NONE
    client.create_topic(topic)
    before = int(time.time() * 1000)
    message_set = build_legacy_message_set([(-1, None, b"x")], magic=0)
    part = client.call(PRODUCE, 0, produce_values(topic, 0, message_set)) \
        .responses[0].partition_responses[0]
    assert part.error_code == ErrorCode.NONE
    (_m, record), = _fetch_all(client, topic)
    assert record.timestamp >= before


def test_produce_v3_refuses_legacy_message_sets(client: WireClient) -> None:
    topic = "legacy-refused"
    client.create_topic(topic)
    message_set = build_legacy_message_set([(1, b"k", b"v")], magic=1)
    part = client.call(PRODUCE, 3, produce_values(topic, 0, message_set)) \
        .responses[0].partition_responses[0]
    assert part.error_code == ErrorCode.INVALID_RECORD
    assert _fetch_all(client, topic) == []


def test_produce_v2_takes_a_v2_batch_as_kafka_does(client: WireClient) -> None:
    # Kafka checks the magic only for v3+ (ProduceRequest.validateRecords)
    topic = "legacy-v2-batch"
    client.create_topic(topic)
    part = client.call(PRODUCE, 2, produce_values(topic, 0, build_batch([(5, b"k", b"v")]))) \
        .responses[0].partition_responses[0]
    assert part.error_code == ErrorCode.NONE
    assert [r.value for _m, r in _fetch_all(client, topic)] == [b"v"]


def test_a_damaged_v0_message_is_corrupt(client: WireClient) -> None:
    topic = "legacy-corrupt"
    client.create_topic(topic)
    message_set = bytearray(build_legacy_message_set([(1, b"k", b"value")], magic=0))
    message_set[-1] ^= 0xFF
    part = client.call(PRODUCE, 0, produce_values(topic, 0, bytes(message_set))) \
        .responses[0].partition_responses[0]
    assert part.error_code == ErrorCode.CORRUPT_MESSAGE
    assert _fetch_all(client, topic) == []


def test_list_offsets_v0_answers_old_style_offsets(client: WireClient) -> None:
    topic = "legacy-list-offsets"
    client.create_topic(topic)
    client.produce(topic, 0, build_batch([(1, None, b"a"), (2, None, b"b")]))
    answers = {}
    for ts in (-1, -2):
        response = client.call(LIST_OFFSETS, 0, {"replica_id": -1, "topics": [{
            "name": topic, "partitions": [
                {"partition_index": 0, "timestamp": ts, "max_num_offsets": 1}]}]})
        part = response.topics[0].partitions[0]
        assert part.error_code == ErrorCode.NONE
        answers[ts] = list(part.old_style_offsets)
    assert answers == {-1: [2], -2: [0]}
    none = client.call(LIST_OFFSETS, 0, {"replica_id": -1, "topics": [{
        "name": topic, "partitions": [
            {"partition_index": 0, "timestamp": -1, "max_num_offsets": 0}]}]})
    assert list(none.topics[0].partitions[0].old_style_offsets) == []


def test_offset_commit_v0_v1_and_offset_fetch_v0(client: WireClient,
                                                 broker: InProcessBroker) -> None:
    topic = "legacy-offsets"
    client.create_topic(topic)
    group = "legacy-group"
    deadline = time.monotonic() + 10
    while True:
        found = client.call(FIND_COORDINATOR, 0, {"key": group})
        if found.error_code == ErrorCode.NONE:
            break
        assert time.monotonic() < deadline
        time.sleep(0.05)
    for version, offset in ((0, 5), (1, 9)):
        partition: dict[str, Any] = {"partition_index": 0, "committed_offset": offset,
                                     "committed_metadata": f"v{version}",
                                     "commit_timestamp": -1}
        values = {"group_id": group, "generation_id_or_member_epoch": -1, "member_id": "",
                  "topics": [{"name": topic, "partitions": [partition]}]}
        while True:
            response = client.call(OFFSET_COMMIT, version, values)
            error = response.topics[0].partitions[0].error_code
            if error != ErrorCode.COORDINATOR_LOAD_IN_PROGRESS:
                break
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert error == ErrorCode.NONE
        fetched = client.call(OFFSET_FETCH, 0, {"group_id": group, "topics": [
            {"name": topic, "partition_indexes": [0]}]})
        got = fetched.topics[0].partitions[0]
        assert (got.error_code, got.committed_offset, got.metadata) == (
            ErrorCode.NONE, offset, f"v{version}")


def test_create_topics_v0_v1_and_delete_topics_v0(client: WireClient) -> None:
    for version in (0, 1):
        topic = f"legacy-create-{version}"
        values: dict[str, Any] = {"topics": [{
            "name": topic, "num_partitions": 2, "replication_factor": 1, "assignments": [],
            "configs": []}], "timeout": 10_000, "validate_only": False}
        response = client.call(CREATE_TOPICS, version, values)
        assert response.topics[0].error_code == ErrorCode.NONE
        again = client.call(CREATE_TOPICS, version, values)
        assert again.topics[0].error_code == ErrorCode.TOPIC_ALREADY_EXISTS
        deleted = client.call(DELETE_TOPICS, 0, {"topic_names": [topic], "timeout": 10_000})
        assert deleted.responses[0].error_code == ErrorCode.NONE


def test_offset_for_leader_epoch_v0_v1(client: WireClient) -> None:
    topic = "legacy-epochs"
    client.create_topic(topic)
    client.produce(topic, 0, build_batch([(1, None, b"a")]))
    for version in (0, 1):
        response = client.call(OFFSET_FOR_LEADER_EPOCH, version, {"topics": [{
            "topic": topic, "partitions": [{"partition": 0, "leader_epoch": 0}]}]})
        part = response.topics[0].partitions[0]
        assert part.error_code == ErrorCode.NONE and part.end_offset == 1
        if version == 1:
            assert part.leader_epoch == 0


def test_describe_configs_v0_says_is_default(client: WireClient) -> None:
    topic = "legacy-configs"
    response = client.call(CREATE_TOPICS, 2, {"topics": [{
        "name": topic, "num_partitions": 1, "replication_factor": 1, "assignments": [],
        "configs": [{"name": "retention.ms", "value": "12345"}]}], "timeout": 10_000,
        "validate_only": False})
    assert response.topics[0].error_code == ErrorCode.NONE
    described = client.call(DESCRIBE_CONFIGS, 0, {"resources": [{
        "resource_type": 2, "resource_name": topic,
        "configuration_keys": ["retention.ms", "segment.bytes"]}]})
    result = described.results[0]
    assert result.error_code == ErrorCode.NONE
    entries = {c.name: (c.value, c.is_default) for c in result.configs}
    assert entries["retention.ms"] == ("12345", False)
    assert entries["segment.bytes"][1] is True


def test_describe_log_dirs_v0(client: WireClient) -> None:
    topic = "legacy-log-dirs"
    client.create_topic(topic)
    response = client.call(DESCRIBE_LOG_DIRS, 0, {"topics": None})
    assert response.results[0].error_code == ErrorCode.NONE
    names = {t.name for r in response.results for t in r.topics}
    assert topic in names


@pytest.fixture(scope="module")
def acl_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InProcessBroker]:
    b = InProcessBroker(Path(tmp_path_factory.mktemp("old-acls")), {
        "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
        "allow.everyone.if.no.acl.found": "true"})
    b.start()
    yield b
    b.stop()


def test_acls_v0_create_describe_delete_literal_bindings(acl_broker: InProcessBroker) -> None:
    # kafka-python with api_version below 2.0 speaks v0 of the ACL APIs (Kafka 3.x serves
    # v0-3); v0 has no pattern type: every binding and filter is LITERAL.
    topic, ace = 2, {"principal": "User:test", "host": "*", "operation": 3,  # READ
                     "permission_type": 3}  # ALLOW
    acl_filter = {"resource_type_filter": topic, "resource_name_filter": "orders",
                  "principal_filter": None, "host_filter": "*", "operation": 1,  # ANY
                  "permission_type": 1}  # ANY
    with acl_broker.connect() as client:
        created = client.call(CREATE_ACLS, 0, {"creations": [
            {"resource_type": topic, "resource_name": "orders", **ace}]})
        assert [r.error_code for r in created.results] == [ErrorCode.NONE]

        described = client.call(DESCRIBE_ACLS, 0, acl_filter)
        assert described.error_code == ErrorCode.NONE
        assert [(r.resource_type, r.resource_name, [a.principal for a in r.acls])
                for r in described.resources] == [(topic, "orders", ["User:test"])]

        deleted = client.call(DELETE_ACLS, 0, {"filters": [acl_filter]})
        (result,) = deleted.filter_results
        assert result.error_code == ErrorCode.NONE
        assert [(m.resource_name, m.principal) for m in result.matching_acls] == [
            ("orders", "User:test")]
        assert client.call(DESCRIBE_ACLS, 0, acl_filter).resources == ()
