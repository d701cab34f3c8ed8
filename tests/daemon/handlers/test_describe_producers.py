"""The DescribeProducers handler with a fake replica manager: one
``ReplicaManager.active_producers`` call per partition, its producers and errors encoded."""

from __future__ import annotations

import asyncio
from typing import Any

from klog.daemon.handlers.describe_producers import handle
from klog.daemon.partition import ProducerStateInfo
from klog.protocol import apis
from klog.protocol.entities import build
from klog.protocol.errors import ErrorCode
from klog.protocol.framing import RequestHeader
from tests.daemon.handlers.fakes import context

DESCRIBE_PRODUCERS = 61
STATE = ProducerStateInfo(producer_id=9, producer_epoch=2, last_sequence=41,
                          last_timestamp=1_700_000_000_000, coordinator_epoch=4,
                          current_txn_start_offset=120)


class FakeReplicaManager:
    def __init__(self) -> None:
        self.calls: list[tuple[str, int]] = []

    def active_producers(self, topic: str, partition: int
                         ) -> tuple[ErrorCode, list[ProducerStateInfo]]:
        self.calls.append((topic, partition))
        if partition in (1, 2) or topic != "t":  # not hosted here
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, []
        return ErrorCode.NONE, [STATE]


class FakeCache:
    """Knows partitions 0 and 1 of "t" (2 is past its partition count)."""

    def partition_state(self, topic: str, partition: int) -> object | None:
        return object() if topic == "t" and partition < 2 else None

    def contains_topic(self, topic: str) -> bool:
        return topic == "t"


def test_producers_and_errors_per_partition() -> None:
    rm = FakeReplicaManager()
    request: Any = apis.decode_request(DESCRIBE_PRODUCERS, 0, apis.encode_request(build(
        apis.spec_for(DESCRIBE_PRODUCERS).request_entity(0),
        {"topics": [{"name": "t", "partition_indexes": [0, 1, 2]}]})))
    ctx = context(RequestHeader(DESCRIBE_PRODUCERS, 0, 1, "test", 1), replica_manager=rm,
                  metadata_cache=FakeCache())
    response = asyncio.run(handle(ctx, request))
    assert rm.calls == [("t", 0), ("t", 1), ("t", 2)]
    (topic,) = response.topics
    p0, p1, p2 = topic.partitions
    assert (p0.partition_index, p0.error_code) == (0, ErrorCode.NONE)
    (state,) = p0.active_producers
    assert (state.producer_id, state.producer_epoch, state.last_sequence, state.last_timestamp,
            state.coordinator_epoch, state.current_txn_start_offset) \
        == (9, 2, 41, 1_700_000_000_000, 4, 120)
    assert (p1.partition_index, p1.error_code, p1.active_producers) \
        == (1, ErrorCode.NOT_LEADER_OR_FOLLOWER, ())
    assert (p2.partition_index, p2.error_code) == (2, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
    # As Kafka: a partition of a known topic has no message.
    assert (p0.error_message, p1.error_message, p2.error_message) == (None, None, None)


def test_an_unknown_topic_says_so() -> None:
    rm = FakeReplicaManager()
    request: Any = apis.decode_request(DESCRIBE_PRODUCERS, 0, apis.encode_request(build(
        apis.spec_for(DESCRIBE_PRODUCERS).request_entity(0),
        {"topics": [{"name": "gone", "partition_indexes": [0]}]})))
    ctx = context(RequestHeader(DESCRIBE_PRODUCERS, 0, 1, "test", 1), replica_manager=rm,
                  metadata_cache=FakeCache())
    ((p,),) = [t.partitions for t in asyncio.run(handle(ctx, request)).topics]
    assert p.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert p.error_message is not None and "gone" in p.error_message
