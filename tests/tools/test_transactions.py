"""klog.tools.transactions over a fake admin client: which transaction ``abort`` picks and
which open transactions ``find-hanging`` reports (Kafka's TransactionsCommand rules)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import pytest

from klog.client.admin import (
    PartitionDescription,
    ProducerState,
    TopicDescription,
    TransactionDescription,
    TransactionListing,
)
from klog.client.errors import KafkaClientError, error_for
from klog.protocol.errors import ErrorCode
from klog.tools.transactions import (
    TransactionToolError,
    abort_spec,
    duration_minutes,
    find_hanging,
)

NOW = 1_800_000_000_000
HOUR = 3_600_000
OLD, RECENT = NOW - 2 * HOUR, NOW - 1000


def _state(pid: int, start: int, last_ts: int, coordinator_epoch: int = -1) -> ProducerState:
    return ProducerState(pid, 1, 5, last_ts, coordinator_epoch, start)


class FakeAdmin:
    """Topic "t": partitions 0-3 with replicas on broker 1, partition 4 on broker 2 only."""

    def __init__(self) -> None:
        self.producers: dict[tuple[str, int], Any] = {
            ("t", 0): [_state(1, 10, OLD), _state(9, -1, OLD)],  # 9: no open transaction
            ("t", 1): [_state(2, 20, OLD)],
            ("t", 2): [_state(3, 30, OLD)],
            ("t", 3): [_state(4, 40, RECENT), _state(5, 50, OLD)],
            ("t", 4): [_state(6, 60, OLD)],
        }
        self.listings = [TransactionListing("a", 2, "Ongoing", 1),
                         TransactionListing("b", 3, "Ongoing", 1),
                         TransactionListing("c", 5, "Ongoing", 1),
                         TransactionListing("other", 99, "Ongoing", 1)]
        self.descriptions: dict[str, Any] = {
            "a": TransactionDescription("a", 1, "Ongoing", 2, 1, 60000, OLD, (("t", 1),)),
            "b": TransactionDescription("b", 1, "Ongoing", 3, 1, 60000, OLD, (("u", 0),)),
            "c": error_for(ErrorCode.TRANSACTIONAL_ID_NOT_FOUND, "c"),
        }
        self.calls: list[Any] = []

    async def list_topics(self) -> dict[str, Any]:
        return {"t": None}

    async def describe_topics(self, names: Sequence[str]) -> dict[str, TopicDescription]:
        parts = tuple(PartitionDescription(p, 1, 0, (1,) if p < 4 else (2,), (1,), (), 0)
                      for p in range(5))
        return {"t": TopicDescription("t", False, None, parts)}

    async def describe_producers(self, partitions: Sequence[tuple[str, int]], *,
                                 broker_id: int | None = None) -> dict[Any, Any]:
        self.calls.append(("describe_producers", list(partitions), broker_id))
        return {tp: self.producers[tp] for tp in partitions}

    async def list_transactions(self, states: Sequence[str] = (),
                                producer_ids: Sequence[int] = ()) -> list[TransactionListing]:
        self.calls.append(("list_transactions", list(producer_ids)))
        return self.listings

    async def describe_transactions(self, ids: Sequence[str]) -> dict[str, Any]:
        self.calls.append(("describe_transactions", list(ids)))
        return {i: self.descriptions[i] for i in ids}


def _hanging(admin: FakeAdmin, **kw: Any) -> list[tuple[str, int, int]]:
    found = asyncio.run(find_hanging(admin, now_ms=NOW,  # type: ignore[arg-type]
                                     max_transaction_timeout_ms=15 * 60_000, **kw))
    return [(h.topic, h.partition, h.producer.producer_id) for h in found]


def test_find_hanging_by_broker() -> None:
    admin = FakeAdmin()
    # 1: no coordinator knows its producer id; 3: its transaction does not hold t-2;
    # 5: its transactional id is gone. 2 is still in its transaction (the coordinator will
    # write the marker), 4 is recent, 9 has nothing open, 6 is on another broker.
    assert _hanging(admin, broker_id=1, topic=None, partition=None) \
        == [("t", 0, 1), ("t", 2, 3), ("t", 3, 5)]
    assert admin.calls[0] == ("describe_producers", [("t", p) for p in range(4)], 1)
    assert admin.calls[1] == ("list_transactions", [1, 2, 3, 5])
    assert admin.calls[2] == ("describe_transactions", ["a", "b", "c"])


def test_find_hanging_one_partition_and_nothing_to_ask() -> None:
    admin = FakeAdmin()
    assert _hanging(admin, broker_id=None, topic="t", partition=4) == [("t", 4, 6)]
    admin = FakeAdmin()
    admin.producers[("t", 3)] = [_state(4, 40, RECENT)]
    assert _hanging(admin, broker_id=None, topic="t", partition=3) == []
    assert [c[0] for c in admin.calls] == ["describe_producers"]  # no candidate: no more


def test_find_hanging_errors() -> None:
    admin = FakeAdmin()
    with pytest.raises(TransactionToolError, match="--topic or --broker-id"):
        _hanging(admin, broker_id=None, topic=None, partition=None)
    with pytest.raises(TransactionToolError, match="requires --topic"):
        _hanging(admin, broker_id=1, topic=None, partition=2)
    admin.producers[("t", 1)] = error_for(ErrorCode.NOT_LEADER_OR_FOLLOWER, "t-1")
    with pytest.raises(TransactionToolError, match="Failed to describe producers for 4 "
                       "partitions on broker 1"):
        _hanging(admin, broker_id=1, topic=None, partition=None)
    admin = FakeAdmin()
    admin.descriptions["b"] = error_for(ErrorCode.COORDINATOR_NOT_AVAILABLE, "b")
    with pytest.raises(TransactionToolError, match="Failed to describe 3 transactions"):
        _hanging(admin, broker_id=1, topic=None, partition=None)


def test_abort_spec() -> None:
    admin = FakeAdmin()
    spec = asyncio.run(abort_spec(admin, ("t", 3), 50))  # type: ignore[arg-type]
    # No marker written yet: coordinator epoch -1 becomes 0, as Kafka's tool does.
    assert (spec.producer_id, spec.producer_epoch, spec.coordinator_epoch) == (5, 1, 0)
    admin.producers[("t", 3)] = [_state(5, 50, OLD, coordinator_epoch=7)]
    assert asyncio.run(abort_spec(admin, ("t", 3), 50)).coordinator_epoch == 7  # type: ignore[arg-type]
    with pytest.raises(TransactionToolError, match="Could not find any open transactions "
                       "starting at offset 51 on partition t-3"):
        asyncio.run(abort_spec(admin, ("t", 3), 51))  # type: ignore[arg-type]
    admin.producers[("t", 3)] = KafkaClientError("boom")
    with pytest.raises(TransactionToolError, match="Failed to validate producer state"):
        asyncio.run(abort_spec(admin, ("t", 3), 50))  # type: ignore[arg-type]


def test_duration_minutes() -> None:
    assert duration_minutes(NOW, NOW - 2 * HOUR - 59_999) == 120
