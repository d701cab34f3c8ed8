"""The TxnOffsetCommit handler with fakes, no socket: unknown partitions answered at once,
the rest in one call to ``GroupCoordinator.commit_txn_offsets`` with the request's
producer, member and offsets (v0: no member fields; v3: all of them)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest

from klog.daemon.group.metadata_manager import OffsetAndMetadata
from klog.daemon.handlers.txn_offset_commit import handle
from klog.protocol import apis
from klog.protocol.entities import build
from klog.protocol.errors import ErrorCode
from klog.protocol.framing import RequestHeader
from tests.daemon.handlers.fakes import context

TXN_OFFSET_COMMIT = 28


class FakeCache:
    def partition_state(self, topic: str, partition: int) -> Any:
        return None if topic == "gone" else SimpleNamespace()


class FakeCoordinator:
    def __init__(self, error: ErrorCode = ErrorCode.NONE) -> None:
        self.calls: list[tuple[Any, ...]] = []
        self.error = error

    async def commit_txn_offsets(self, *args: Any) -> dict[tuple[str, int], ErrorCode]:
        self.calls.append(args)
        return dict.fromkeys(args[6], self.error)  # the offsets


def _request(version: int) -> Any:
    values = {
        "transactional_id": "tx", "group_id": "g", "producer_id": 42, "producer_epoch": 3,
        "generation_id": 5, "member_id": "m-1", "group_instance_id": None,
        "topics": [
            {"name": "t", "partitions": [
                {"partition_index": 0, "committed_offset": 10, "committed_leader_epoch": 7,
                 "committed_metadata": None},
                {"partition_index": 1, "committed_offset": 11, "committed_leader_epoch": -1,
                 "committed_metadata": "meta"}]},
            {"name": "gone", "partitions": [
                {"partition_index": 0, "committed_offset": 1, "committed_leader_epoch": -1,
                 "committed_metadata": ""}]}],
    }
    entity = build(apis.spec_for(TXN_OFFSET_COMMIT).request_entity(version), values)
    return apis.decode_request(TXN_OFFSET_COMMIT, version, apis.encode_request(entity))


def _run(version: int, coordinator: FakeCoordinator) -> Any:
    ctx = context(RequestHeader(TXN_OFFSET_COMMIT, version, 1, "test", 1),
                  metadata_cache=FakeCache(), group_coordinator=coordinator)
    response = asyncio.run(handle(ctx, _request(version)))
    return {(t.name, p.partition_index): p.error_code
            for t in response.topics for p in t.partitions}


@pytest.mark.parametrize("version", [0, 1, 2, 3, 4])
def test_one_call_with_the_transactions_offsets(version: int) -> None:
    coordinator = FakeCoordinator()
    errors = _run(version, coordinator)
    assert errors == {("t", 0): ErrorCode.NONE, ("t", 1): ErrorCode.NONE,
                      ("gone", 0): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
    ((group, pid, epoch, generation, member, instance, offsets, txn_id, abortable),) = \
        coordinator.calls
    assert (group, pid, epoch) == ("g", 42, 3)
    # The transactional id, for KIP-890's verification of the offsets partition; v4
    # clients understand TRANSACTION_ABORTABLE.
    assert (txn_id, abortable) == ("tx", version >= 4)
    # v3 (KIP-447) names the member; before, the defaults mean "not checked".
    assert (generation, member, instance) == ((5, "m-1", None) if version >= 3
                                              else (-1, "", None))
    assert set(offsets) == {("t", 0), ("t", 1)}
    om: OffsetAndMetadata = offsets[("t", 0)]
    assert (om.offset, om.metadata, om.expire_timestamp) == (10, "", None)
    assert om.leader_epoch == (7 if version >= 2 else -1)
    assert offsets[("t", 1)].metadata == "meta"


def test_coordinator_errors_are_answered_per_partition() -> None:
    errors = _run(3, FakeCoordinator(ErrorCode.INVALID_PRODUCER_EPOCH))
    assert errors[("t", 0)] == errors[("t", 1)] == ErrorCode.INVALID_PRODUCER_EPOCH
    assert errors[("gone", 0)] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
