"""OffsetFetch over a real socket (v1-v8, several groups, coordinator errors) and through
real clients' admin APIs (kafka-python, confluent-kafka)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from klog.daemon.group.metadata_manager import GroupMetadataManager, OffsetAndMetadata
from klog.protocol.errors import ErrorCode
from tests.daemon.wire import InProcessBroker

OFFSET_FETCH = 9
FIND_COORDINATOR = 10
GROUP = "fetch-group"
COMMITTED = {
    ("t", 0): OffsetAndMetadata(42, 3, "meta-0", 1_700_000_000_000),
    ("t", 2): OffsetAndMetadata(7, -1, "", 1_700_000_000_000),
    ("u", 1): OffsetAndMetadata(100, 5, "u", 1_700_000_000_000),
}


def _manager(broker: InProcessBroker) -> GroupMetadataManager:
    return broker.broker.group_manager


def _ready(broker: InProcessBroker, *groups: str) -> None:
    mgr = _manager(broker)
    with broker.connect() as client:
        client.call(FIND_COORDINATOR, 3, {"key": groups[0], "key_type": 0})
    deadline = time.monotonic() + 10
    while any(broker.call(lambda g=g: mgr.coordinator_error(g)) for g in groups):
        assert time.monotonic() < deadline, "offsets partitions did not load"
        time.sleep(0.02)


def _commit(broker: InProcessBroker, group: str,
            offsets: dict[tuple[str, int], OffsetAndMetadata]) -> None:
    mgr = _manager(broker)
    result = asyncio.run_coroutine_threadsafe(mgr.store_offsets(group, offsets),
                                              broker.loop).result(10)
    assert set(result.values()) == {ErrorCode.NONE}


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[InProcessBroker]:
    b = InProcessBroker(tmp_path, {"offsets.topic.num.partitions": "10"}).start()
    try:
        _ready(b, GROUP)
        _commit(b, GROUP, COMMITTED)
        yield b
    finally:
        b.stop()


def _flatten(topics: Any, version: int) -> dict[tuple[str, int], tuple]:
    out = {}
    for t in topics:
        for p in t.partitions:
            epoch = p.committed_leader_epoch if version >= 5 else None
            out[(t.name, p.partition_index)] = (p.committed_offset, epoch, p.metadata,
                                                p.error_code)
    return out


REQUESTED = [{"name": "t", "partition_indexes": [0, 1, 2]},
             {"name": "missing", "partition_indexes": [0]}]


@pytest.mark.parametrize("version", range(1, 8))
def test_partitions(broker: InProcessBroker, version: int) -> None:
    values: dict[str, Any] = {"group_id": GROUP, "topics": REQUESTED, "require_stable": True}
    with broker.connect() as client:
        response = client.call(OFFSET_FETCH, version, values)
    epoch = (lambda e: e) if version >= 5 else (lambda e: None)
    assert _flatten(response.topics, version) == {
        ("t", 0): (42, epoch(3), "meta-0", ErrorCode.NONE),
        ("t", 1): (-1, epoch(-1), "", ErrorCode.NONE),
        ("t", 2): (7, epoch(-1), "", ErrorCode.NONE),
        ("missing", 0): (-1, epoch(-1), "", ErrorCode.NONE),
    }
    if version >= 2:
        assert response.error_code == ErrorCode.NONE


@pytest.mark.parametrize("version", range(2, 8))
def test_all_partitions(broker: InProcessBroker, version: int) -> None:
    with broker.connect() as client:
        response = client.call(OFFSET_FETCH, version, {"group_id": GROUP, "topics": None})
        unknown = client.call(OFFSET_FETCH, version, {"group_id": "nobody", "topics": None})
    got = _flatten(response.topics, version)
    assert {tp: v[0] for tp, v in got.items()} == {tp: om.offset for tp, om in COMMITTED.items()}
    assert response.error_code == ErrorCode.NONE
    # A group without offsets (or no group at all): nothing, and no error.
    assert (unknown.topics, unknown.error_code) == ((), ErrorCode.NONE)


def test_several_groups_v8(broker: InProcessBroker) -> None:
    mgr = _manager(broker)
    # Two groups on other partitions: one coordinated here, one whose partition moved away.
    other = next(g for g in (f"g{i}" for i in range(100))
                 if mgr.partition_for(g) != mgr.partition_for(GROUP))
    away = next(g for g in (f"h{i}" for i in range(100))
                if mgr.partition_for(g) not in (mgr.partition_for(GROUP),
                                                mgr.partition_for(other)))
    _ready(broker, other, away)
    _commit(broker, other, {("t", 1): OffsetAndMetadata(11, -1, "o", 1)})
    broker.call(lambda: mgr.resign(mgr.partition_for(away)))
    values = {"groups": [
        {"group_id": GROUP, "topics": [{"name": "t", "partition_indexes": [0]}]},
        {"group_id": other, "topics": None},
        {"group_id": away, "topics": None},
    ], "require_stable": False}
    with broker.connect() as client:
        response = client.call(OFFSET_FETCH, 8, values)
    groups = {g.group_id: g for g in response.groups}
    assert list(groups) == [GROUP, other, away]
    assert _flatten(groups[GROUP].topics, 8) == {("t", 0): (42, 3, "meta-0", ErrorCode.NONE)}
    assert _flatten(groups[other].topics, 8) == {("t", 1): (11, -1, "o", ErrorCode.NONE)}
    assert groups[GROUP].error_code == groups[other].error_code == ErrorCode.NONE
    assert (groups[away].error_code, groups[away].topics) == (ErrorCode.NOT_COORDINATOR, ())


def test_coordinator_errors(broker: InProcessBroker) -> None:
    mgr = _manager(broker)
    partition = mgr.partition_for(GROUP)
    broker.call(lambda: mgr._loading.__setitem__(partition, -1))  # as while loading
    try:
        with broker.connect() as client:
            v1 = client.call(OFFSET_FETCH, 1, {"group_id": GROUP, "topics": REQUESTED})
            v6 = client.call(OFFSET_FETCH, 6, {"group_id": GROUP, "topics": REQUESTED})
    finally:
        broker.call(lambda: mgr._loading.pop(partition))
    loading = ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
    # v1 has no top-level error: each requested partition carries it.
    assert {tp: (v[0], v[3]) for tp, v in _flatten(v1.topics, 1).items()} == {
        ("t", 0): (-1, loading), ("t", 1): (-1, loading), ("t", 2): (-1, loading),
        ("missing", 0): (-1, loading)}
    assert (v6.error_code, v6.topics) == (loading, ())
    broker.call(lambda: mgr.resign(partition))
    with broker.connect() as client:
        v7 = client.call(OFFSET_FETCH, 7, {"group_id": GROUP, "topics": None,
                                            "require_stable": True})
    assert (v7.error_code, v7.topics) == (ErrorCode.NOT_COORDINATOR, ())


def test_kafka_python_admin(broker: InProcessBroker) -> None:
    from kafka import KafkaAdminClient
    from kafka.structs import TopicPartition

    admin = KafkaAdminClient(bootstrap_servers=f"127.0.0.1:{broker.port}",
                             request_timeout_ms=10000)
    try:
        # Two groups in one OffsetFetch v8: all of one, some partitions of the other.
        got = admin.list_group_offsets({GROUP: None, "stranger": [TopicPartition("t", 0)]})
        assert {(tp.topic, tp.partition): (om.offset, om.metadata)
                for tp, om in got[GROUP].items()} \
            == {tp: (om.offset, om.metadata) for tp, om in COMMITTED.items()}
        assert {(tp.topic, tp.partition): om.offset for tp, om in got["stranger"].items()} \
            in ({("t", 0): -1}, {})
        some = admin.list_group_offsets({GROUP: [TopicPartition("t", 0),
                                                 TopicPartition("t", 1)]})
        assert {(tp.topic, tp.partition): om.offset for tp, om in some[GROUP].items()} \
            in ({("t", 0): 42, ("t", 1): -1}, {("t", 0): 42})
    finally:
        admin.close()


def test_confluent_admin(broker: InProcessBroker) -> None:
    from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{broker.port}"})
    futures = admin.list_consumer_group_offsets(
        [ConsumerGroupTopicPartitions(GROUP, [TopicPartition("t", 0), TopicPartition("t", 1),
                                              TopicPartition("u", 1)])],
        request_timeout=10)
    result = futures[GROUP].result(timeout=15)
    assert result.group_id == GROUP
    # Offsets and errors only: confluent-kafka-python reads a partition's metadata with
    # strdup, as a NUL-terminated string, while librdkafka (2.16 here) hands it over as
    # length-delimited bytes without a terminator. Metadata that another client committed
    # (no trailing NUL) then comes back with whatever follows it in the client's heap: 21
    # of 300 tries here. The broker's bytes are right (the socket tests above and
    # kafka-python check them), so no broker could avoid it; confluent-kafka itself commits
    # the NUL, which is why its own metadata round-trips (next test).
    assert {(tp.topic, tp.partition): (tp.offset, tp.error)
            for tp in result.topic_partitions} == {
        ("t", 0): (42, None), ("t", 1): (-1001, None), ("u", 1): (100, None)}
    every = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(GROUP)],
                                              request_timeout=10)[GROUP].result(timeout=15)
    assert {(tp.topic, tp.partition): tp.offset for tp in every.topic_partitions} == {
        tp: om.offset for tp, om in COMMITTED.items()}


def test_confluent_metadata_round_trip(broker: InProcessBroker) -> None:
    """Metadata committed by confluent-kafka itself (which sends the terminating NUL) reads
    back intact through the same client, and the broker keeps the bytes as sent."""
    from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{broker.port}"})
    admin.create_topics([NewTopic("c", 2, 1)])["c"].result(timeout=15)
    group = "confluent-group"
    _ready(broker, group)
    committed = [TopicPartition("c", 0, 5, "via-confluent"), TopicPartition("c", 1, 9)]
    admin.alter_consumer_group_offsets(
        [ConsumerGroupTopicPartitions(group, committed)])[group].result(timeout=15)
    for _ in range(20):  # the over-read above is intermittent: ask more than once
        got = admin.list_consumer_group_offsets(
            [ConsumerGroupTopicPartitions(group, [TopicPartition("c", 0),
                                                  TopicPartition("c", 1)])],
            request_timeout=10)[group].result(timeout=15)
        assert {(tp.topic, tp.partition): (tp.offset, tp.metadata)
                for tp in got.topic_partitions} == {("c", 0): (5, "via-confluent"),
                                                     ("c", 1): (9, None)}
    stored = broker.call(lambda: _manager(broker).fetch_offsets(group, [("c", 0)]))
    assert [om.metadata for om in stored.values()] == ["via-confluent\x00"]


class _PendingTxnManager:
    """A group manager (fake) where ("t", 1) has a transactional commit pending."""

    def coordinator_error(self, group_id: str) -> ErrorCode | None:
        return None

    def fetch_offsets(self, group_id: str, partitions: Any
                      ) -> dict[tuple[str, int], OffsetAndMetadata]:
        return {("t", 0): OffsetAndMetadata(5), ("t", 1): OffsetAndMetadata(6)}

    def has_pending_txn_offset(self, group_id: str, tp: tuple[str, int]) -> bool:
        return tp == ("t", 1)


@pytest.mark.parametrize("version,require_stable", [(7, True), (8, True), (7, False)])
def test_require_stable_with_a_pending_transaction(version: int, require_stable: bool) -> None:
    from klog.daemon.handlers.offset_fetch import handle
    from klog.protocol import apis
    from klog.protocol.entities import build
    from klog.protocol.framing import RequestHeader
    from tests.daemon.handlers.fakes import context

    topics = [{"name": "t", "partition_indexes": [0, 1]}]
    values: dict[str, Any] = {"require_stable": require_stable}
    if version >= 8:
        values["groups"] = [{"group_id": GROUP, "topics": topics}]
    else:
        values.update(group_id=GROUP, topics=topics)
    request = apis.decode_request(OFFSET_FETCH, version, apis.encode_request(
        build(apis.spec_for(OFFSET_FETCH).request_entity(version), values)))
    ctx = context(RequestHeader(OFFSET_FETCH, version, 1, "test", 1),
                  group_manager=_PendingTxnManager())
    response = asyncio.run(handle(ctx, request))
    topics_out = response.groups[0].topics if version >= 8 else response.topics
    parts = {p.partition_index: (p.committed_offset, p.error_code)
             for p in topics_out[0].partitions}
    assert parts[0] == (5, ErrorCode.NONE)
    assert parts[1] == ((-1, ErrorCode.UNSTABLE_OFFSET_COMMIT) if require_stable
                        else (6, ErrorCode.NONE))
