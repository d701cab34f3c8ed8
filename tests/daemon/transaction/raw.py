"""A transactional producer spelled out request by request over ``WireClient``s, for the
KIP-890 tests: it can do what no well-behaved client does -- write to a partition after
its transaction was aborted, as a hung or zombie producer's late batch arrives -- and it
names the broker each request goes to (the coordinator, a partition's leader).

``RawTransaction(coordinator, "tx")``: ``init()`` (InitProducerId, retried while the
coordinator loads), ``add(partitions)`` (AddPartitionsToTxn v3), ``produce(leader, topic,
partition, value)`` (Produce v9 with the transactional id, the producer's next sequence
for that partition; returns the partition's response), ``end(commit)`` (EndTxn v3).
``offsets(client, topic, partition)`` -> (high watermark, last stable offset) by
ListOffsets; ``wait_for_state(coordinator, txn_id, state)`` polls DescribeTransactions.
"""

from __future__ import annotations

import time
from typing import Any

from klog.protocol.errors import ErrorCode
from klog.protocol.records.v2 import BatchBuilder
from tests.daemon.wire import WireClient

FIND_COORDINATOR, INIT_PRODUCER_ID, ADD_PARTITIONS, END_TXN = 10, 22, 24, 26
PRODUCE, LIST_OFFSETS, DESCRIBE_TRANSACTIONS = 0, 2, 65
_RETRY = {ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.COORDINATOR_NOT_AVAILABLE,
          ErrorCode.NOT_COORDINATOR, ErrorCode.CONCURRENT_TRANSACTIONS}


def retried(call: Any, code_of: Any = lambda r: r.error_code, timeout: float = 30.0) -> Any:
    """``call()`` again while its answer is a coordinator's retriable error."""
    deadline = time.monotonic() + timeout
    while True:
        response = call()
        if int(code_of(response)) not in _RETRY or time.monotonic() > deadline:
            return response
        time.sleep(0.1)


def find_coordinator(client: WireClient, txn_id: str) -> int:
    """The broker id coordinating ``txn_id`` (FindCoordinator v3, key type 1)."""
    response = retried(lambda: client.call(FIND_COORDINATOR, 3,
                                           {"key": txn_id, "key_type": 1}))
    assert response.error_code == 0, response
    return int(response.node_id)


class RawTransaction:
    """See the module docstring."""

    def __init__(self, coordinator: WireClient, txn_id: str, timeout_ms: int = 60_000) -> None:
        self.coordinator = coordinator
        self.txn_id = txn_id
        self.timeout_ms = timeout_ms
        self.producer_id = -1
        self.producer_epoch = -1
        self.sequences: dict[tuple[str, int], int] = {}

    def init(self) -> tuple[int, int]:
        response = retried(lambda: self.coordinator.call(INIT_PRODUCER_ID, 3, {
            "transactional_id": self.txn_id, "transaction_timeout": self.timeout_ms,
            "producer_id": -1, "producer_epoch": -1}))
        assert response.error_code == 0, response
        self.producer_id, self.producer_epoch = int(response.producer_id), \
            int(response.producer_epoch)
        return self.producer_id, self.producer_epoch

    def add(self, partitions: list[tuple[str, int]]) -> None:
        topics: dict[str, list[int]] = {}
        for topic, partition in partitions:
            topics.setdefault(topic, []).append(partition)

        def codes(response: Any) -> int:  # the first error, else 0
            return next((int(p.partition_error_code)
                         for t in response.results_by_topic_v3_and_below
                         for p in t.results_by_partition if p.partition_error_code), 0)

        response = retried(lambda: self.coordinator.call(ADD_PARTITIONS, 3, {
            "v3_and_below_transactional_id": self.txn_id,
            "v3_and_below_producer_id": self.producer_id,
            "v3_and_below_producer_epoch": self.producer_epoch,
            "v3_and_below_topics": [{"name": t, "partitions": ps}
                                    for t, ps in topics.items()]}), codes)
        assert codes(response) == 0, response

    def batch(self, topic: str, partition: int, value: bytes) -> bytes:
        seq = self.sequences.get((topic, partition), 0)
        builder = BatchBuilder(producer_id=self.producer_id,
                               producer_epoch=self.producer_epoch, base_sequence=seq,
                               is_transactional=True)
        builder.append(int(time.time() * 1000), None, value)
        return builder.build()

    def produce(self, leader: WireClient, topic: str, partition: int, value: bytes,
                acks: int = -1) -> Any:
        """One batch to ``leader``; the partition's response (error_code, error_message,
        base_offset). The sequence moves on only when it was appended."""
        response = leader.call(PRODUCE, 9, {
            "transactional_id": self.txn_id, "acks": acks, "timeout": 10_000,
            "topic_data": [{"name": topic, "partition_data": [
                {"index": partition, "records": self.batch(topic, partition, value)}]}]})
        result = response.responses[0].partition_responses[0]
        if result.error_code == 0:
            self.sequences[(topic, partition)] = self.sequences.get((topic, partition), 0) + 1
        return result

    def end(self, commit: bool) -> None:
        response = retried(lambda: self.coordinator.call(END_TXN, 3, {
            "transactional_id": self.txn_id, "producer_id": self.producer_id,
            "producer_epoch": self.producer_epoch, "committed": commit}))
        assert response.error_code == 0, response


def offsets(client: WireClient, topic: str, partition: int) -> tuple[int, int]:
    """(high watermark, last stable offset) of a partition, from its leader."""
    out = []
    for isolation in (0, 1):
        response = client.call(LIST_OFFSETS, 7, {
            "replica_id": -1, "isolation_level": isolation,
            "topics": [{"name": topic, "partitions": [
                {"partition_index": partition, "current_leader_epoch": -1,
                 "timestamp": -1}]}]})
        p = response.topics[0].partitions[0]
        assert p.error_code == 0, p
        out.append(int(p.offset))
    return out[0], out[1]


def wait_for_state(coordinator: WireClient, txn_id: str, state: str,
                   timeout: float = 20.0) -> None:
    """Until DescribeTransactions says ``txn_id`` is in ``state`` (e.g. CompleteAbort:
    every marker written)."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        response = coordinator.call(DESCRIBE_TRANSACTIONS, 0, {"transactional_ids": [txn_id]})
        last = response.transaction_states[0]
        if last.error_code == 0 and last.transaction_state == state:
            return
        time.sleep(0.05)
    raise AssertionError(f"{txn_id} not in {state} after {timeout} s: {last}")
