"""The transaction handlers with a fake coordinator, no socket: InitProducerId (with a
transactional id), AddPartitionsToTxn, AddOffsetsToTxn, EndTxn and WriteTxnMarkers decode,
make one call and encode; PRODUCER_FENCED becomes INVALID_PRODUCER_EPOCH for the versions
that predate it; AddPartitionsToTxn with an unknown partition fails as a whole; its v4-v5
(KIP-890, brokers only) add or verify a batch of transactions."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest

from klog.daemon.handlers import (
    add_offsets_to_txn,
    add_partitions_to_txn,
    end_txn,
    init_producer_id,
    write_txn_markers,
)
from klog.daemon.transaction.coordinator import InitProducerIdResult
from klog.protocol import apis
from klog.protocol.entities import build
from klog.protocol.errors import ErrorCode
from klog.protocol.framing import RequestHeader
from tests.daemon.handlers.fakes import context


class FakeCoordinator:
    def __init__(self, error: ErrorCode = ErrorCode.NONE) -> None:
        self.error = error
        self.calls: list[tuple[Any, ...]] = []

    async def init_producer_id(self, txn_id: str, timeout_ms: int,
                               expected: tuple[int, int] | None) -> InitProducerIdResult:
        self.calls.append(("init", txn_id, timeout_ms, expected))
        if self.error is not ErrorCode.NONE:
            return InitProducerIdResult(self.error)
        return InitProducerIdResult(ErrorCode.NONE, 42, 3)

    async def add_partitions(self, txn_id: str, pid: int, epoch: int,
                             partitions: Any) -> ErrorCode:
        self.calls.append(("add", txn_id, pid, epoch, sorted(partitions)))
        return self.error

    async def end_transaction(self, txn_id: str, pid: int, epoch: int,
                              committed: bool) -> ErrorCode:
        self.calls.append(("end", txn_id, pid, epoch, committed))
        return self.error

    def verify_partitions_in_transaction(self, txn_id: str, pid: int, epoch: int,
                                         partitions: Any) -> dict[tuple[str, int], ErrorCode]:
        self.calls.append(("verify", txn_id, pid, epoch, sorted(partitions)))
        return {tp: ErrorCode.NONE if tp[1] == 0 else ErrorCode.TRANSACTION_ABORTABLE
                for tp in partitions}


class FakeMetadataCache:
    def __init__(self, known: set[tuple[str, int]]) -> None:
        self.known = known

    def partition_state(self, topic: str, partition: int) -> Any:
        return object() if (topic, partition) in self.known else None


def _call(module: Any, api_key: int, version: int, values: dict[str, Any],
          **components: Any) -> Any:
    request = build(apis.spec_for(api_key).request_entity(version), values)
    ctx = context(RequestHeader(api_key, version, 1, "test", 2), **components)
    return asyncio.run(module.handle(ctx, request))


@pytest.mark.parametrize("version, fenced", [(3, ErrorCode.INVALID_PRODUCER_EPOCH),
                                             (4, ErrorCode.PRODUCER_FENCED)])
def test_init_producer_id_with_a_transactional_id(version: int, fenced: ErrorCode) -> None:
    coordinator = FakeCoordinator()
    values = {"transactional_id": "t", "transaction_timeout": 9000, "producer_id": 5,
              "producer_epoch": 2}
    r = _call(init_producer_id, 22, version, values, transaction_coordinator=coordinator)
    assert (r.error_code, r.producer_id, r.producer_epoch) == (0, 42, 3)
    assert coordinator.calls == [("init", "t", 9000, (5, 2))]
    coordinator = FakeCoordinator(ErrorCode.PRODUCER_FENCED)
    values.update(producer_id=-1, producer_epoch=-1)
    r = _call(init_producer_id, 22, version, values, transaction_coordinator=coordinator)
    assert (r.error_code, r.producer_id, r.producer_epoch) == (fenced, -1, -1)
    assert coordinator.calls == [("init", "t", 9000, None)]


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_add_partitions(version: int) -> None:
    coordinator = FakeCoordinator(ErrorCode.PRODUCER_FENCED)
    values = {"v3_and_below_transactional_id": "t", "v3_and_below_producer_id": 42,
              "v3_and_below_producer_epoch": 3,
              "v3_and_below_topics": [{"name": "a", "partitions": [0, 1]},
                                      {"name": "b", "partitions": [2]}]}
    cache = FakeMetadataCache({("a", 0), ("a", 1), ("b", 2)})
    r = _call(add_partitions_to_txn, 24, version, values, transaction_coordinator=coordinator,
              metadata_cache=cache)
    fenced = ErrorCode.INVALID_PRODUCER_EPOCH if version < 2 else ErrorCode.PRODUCER_FENCED
    assert {(t.name, p.partition_index, p.partition_error_code)
            for t in r.results_by_topic_v3_and_below for p in t.results_by_partition} == {
        ("a", 0, fenced), ("a", 1, fenced), ("b", 2, fenced)}
    assert coordinator.calls == [("add", "t", 42, 3, [("a", 0), ("a", 1), ("b", 2)])]
    # An unknown partition: nothing is added (Kafka's OPERATION_NOT_ATTEMPTED for the rest).
    coordinator = FakeCoordinator()
    r = _call(add_partitions_to_txn, 24, version, values, transaction_coordinator=coordinator,
              metadata_cache=FakeMetadataCache({("a", 0), ("a", 1)}))
    assert {(t.name, p.partition_index, p.partition_error_code)
            for t in r.results_by_topic_v3_and_below for p in t.results_by_partition} == {
        ("a", 0, ErrorCode.OPERATION_NOT_ATTEMPTED), ("a", 1, ErrorCode.OPERATION_NOT_ATTEMPTED),
        ("b", 2, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)}
    assert coordinator.calls == []


def _v4_results(response: Any) -> dict[str, set[tuple[str, int, int]]]:
    return {r.transactional_id: {(t.name, p.partition_index, p.partition_error_code)
                                 for t in r.topic_results for p in t.results_by_partition}
            for r in response.results_by_transaction}


@pytest.mark.parametrize("version", [4, 5])
def test_add_partitions_v4_adds_or_verifies_each_transaction_kip_890(version: int) -> None:
    """The brokers' batched form: per transaction, ``verify_only`` asks the coordinator
    whether each partition is in the ongoing transaction, else the partitions are added;
    a transaction with an unknown partition fails alone."""
    coordinator = FakeCoordinator(ErrorCode.CONCURRENT_TRANSACTIONS)
    values = {"transactions": [
        {"transactional_id": "verify", "producer_id": 1, "producer_epoch": 0,
         "verify_only": True, "topics": [{"name": "a", "partitions": [0, 1]}]},
        {"transactional_id": "add", "producer_id": 2, "producer_epoch": 5,
         "verify_only": False, "topics": [{"name": "a", "partitions": [0]},
                                          {"name": "b", "partitions": [2]}]},
        {"transactional_id": "unknown", "producer_id": 3, "producer_epoch": 0,
         "verify_only": True, "topics": [{"name": "a", "partitions": [0]},
                                         {"name": "gone", "partitions": [0]}]},
    ]}
    cache = FakeMetadataCache({("a", 0), ("a", 1), ("b", 2)})
    r = _call(add_partitions_to_txn, 24, version, values, transaction_coordinator=coordinator,
              metadata_cache=cache)
    assert r.error_code == 0
    abortable = int(ErrorCode.TRANSACTION_ABORTABLE)
    assert _v4_results(r) == {
        "verify": {("a", 0, 0), ("a", 1, abortable)},
        "add": {("a", 0, ErrorCode.CONCURRENT_TRANSACTIONS),
                ("b", 2, ErrorCode.CONCURRENT_TRANSACTIONS)},
        "unknown": {("a", 0, ErrorCode.OPERATION_NOT_ATTEMPTED),
                    ("gone", 0, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)}}
    assert sorted(coordinator.calls) == [("add", "add", 2, 5, [("a", 0), ("b", 2)]),
                                         ("verify", "verify", 1, 0, [("a", 0), ("a", 1)])]


@pytest.mark.parametrize("version", [0, 3, 4])
def test_add_offsets_adds_the_groups_offsets_partition(version: int) -> None:
    coordinator = FakeCoordinator()
    groups = SimpleNamespace(partition_for=lambda group: 17 if group == "g" else -1)
    values = {"transactional_id": "t", "producer_id": 42, "producer_epoch": 3, "group_id": "g"}
    r = _call(add_offsets_to_txn, 25, version, values, transaction_coordinator=coordinator,
              group_manager=groups)
    assert r.error_code == 0
    assert coordinator.calls == [("add", "t", 42, 3, [("__consumer_offsets", 17)])]


@pytest.mark.parametrize("version, fenced", [(0, ErrorCode.INVALID_PRODUCER_EPOCH),
                                             (1, ErrorCode.INVALID_PRODUCER_EPOCH),
                                             (2, ErrorCode.PRODUCER_FENCED),
                                             (3, ErrorCode.PRODUCER_FENCED),
                                             (4, ErrorCode.PRODUCER_FENCED)])
def test_end_txn(version: int, fenced: ErrorCode) -> None:
    coordinator = FakeCoordinator(ErrorCode.PRODUCER_FENCED)
    values = {"transactional_id": "t", "producer_id": 42, "producer_epoch": 3,
              "committed": True}
    r = _call(end_txn, 26, version, values, transaction_coordinator=coordinator)
    assert r.error_code == fenced
    assert coordinator.calls == [("end", "t", 42, 3, True)]


@pytest.mark.parametrize("version", [0, 1])
def test_write_txn_markers(version: int) -> None:
    class Writer:
        def __init__(self) -> None:
            self.calls: list[tuple[Any, ...]] = []

        async def write(self, pid: int, epoch: int, coordinator_epoch: int, committed: bool,
                        partitions: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
            self.calls.append((pid, epoch, coordinator_epoch, committed, partitions))
            return {tp: int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION) if tp[0] == "gone" else 0
                    for tp in partitions}

    writer = Writer()
    values = {"markers": [
        {"producer_id": 42, "producer_epoch": 3, "transaction_result": False,
         "coordinator_epoch": 7, "topics": [{"name": "a", "partition_indexes": [0, 1]},
                                            {"name": "gone", "partition_indexes": [4]}]},
        {"producer_id": 43, "producer_epoch": 0, "transaction_result": True,
         "coordinator_epoch": 7, "topics": [{"name": "a", "partition_indexes": [2]}]},
    ]}
    r = _call(write_txn_markers, 27, version, values, txn_marker_writer=writer)
    assert writer.calls == [(42, 3, 7, False, [("a", 0), ("a", 1), ("gone", 4)]),
                            (43, 0, 7, True, [("a", 2)])]
    assert [(m.producer_id, [(t.name, [(p.partition_index, p.error_code)
                                       for p in t.partitions]) for t in m.topics])
            for m in r.markers] == [
        (42, [("a", [(0, 0), (1, 0)]), ("gone", [(4, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)])]),
        (43, [("a", [(2, 0)])])]
