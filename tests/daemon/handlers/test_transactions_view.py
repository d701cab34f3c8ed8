"""The DescribeTransactions and ListTransactions handlers over a fake transaction
coordinator (its read-only view: ``describe``, ``list_transactions``)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any

import pytest

from klog.daemon.handlers import describe_transactions, list_transactions
from klog.daemon.transaction.coordinator import (
    TransactionDescription,
    TransactionList,
    TransactionListing,
)
from klog.protocol import apis
from klog.protocol.entities import build
from klog.protocol.errors import ErrorCode
from klog.protocol.framing import RequestHeader
from tests.daemon.handlers.fakes import context

DESCRIBE, LIST = 65, 66
ONGOING = TransactionDescription("tx-1", 0, "Ongoing", 60_000, 1_700_000_000_000, 42, 3,
                                 {"in": [0, 2], "out": [1]})


class FakeTransactionCoordinator:
    def __init__(self) -> None:
        self.calls: list[Any] = []

    def describe(self, transactional_ids: Iterable[str]) -> list[TransactionDescription]:
        ids = list(transactional_ids)
        self.calls.append(ids)
        return [ONGOING if i == "tx-1" else
                TransactionDescription(i, int(ErrorCode.TRANSACTIONAL_ID_NOT_FOUND))
                for i in ids]

    def list_transactions(self, states_filter: Iterable[str] = (),
                          producer_ids_filter: Iterable[int] = (),
                          duration_filter_ms: int = -1) -> TransactionList:
        self.calls.append((list(states_filter), list(producer_ids_filter),
                           duration_filter_ms))
        return TransactionList(0, ["Bogus"], [TransactionListing("tx-1", 42, "Ongoing")])


def _call(module: Any, api_key: int, values: dict[str, Any], coordinator: Any,
          version: int = 0) -> Any:
    request = apis.decode_request(api_key, version, apis.encode_request(
        build(apis.spec_for(api_key).request_entity(version), values)))
    ctx = context(RequestHeader(api_key, version, 1, "test", 1),
                  transaction_coordinator=coordinator)
    response = asyncio.run(module.handle(ctx, request))
    # What goes on the wire decodes back.
    return apis.decode_response(api_key, version, apis.encode_response(response))


def test_describe_transactions() -> None:
    coordinator = FakeTransactionCoordinator()
    response = _call(describe_transactions, DESCRIBE,
                     {"transactional_ids": ["tx-1", "nope"]}, coordinator)
    assert coordinator.calls == [["tx-1", "nope"]]
    one, missing = response.transaction_states
    assert (one.transactional_id, one.error_code, one.transaction_state, one.producer_id,
            one.producer_epoch) == ("tx-1", ErrorCode.NONE, "Ongoing", 42, 3)
    assert (one.transaction_timeout, one.transaction_start_time) == (60_000, 1_700_000_000_000)
    # No transaction running: -1, as Kafka sends it (kio would refuse it; apis decodes it).
    assert missing.transaction_start_time == -1
    assert [(t.topic, list(t.partitions)) for t in one.topics] == [("in", [0, 2]), ("out", [1])]
    assert (missing.transactional_id, missing.error_code) \
        == ("nope", ErrorCode.TRANSACTIONAL_ID_NOT_FOUND)


@pytest.mark.parametrize("version", [0, 1])
def test_list_transactions_passes_the_filters(version: int) -> None:
    coordinator = FakeTransactionCoordinator()
    response = _call(list_transactions, LIST,
                     {"state_filters": ["Ongoing", "Bogus"], "producer_id_filters": [42],
                      "duration_filter": 5000}, coordinator, version)
    # v0 has no duration filter: all (-1); v1 carries it (KIP-994).
    assert coordinator.calls == [(["Ongoing", "Bogus"], [42], 5000 if version else -1)]
    assert response.error_code == ErrorCode.NONE
    assert list(response.unknown_state_filters) == ["Bogus"]
    assert [(t.transactional_id, t.producer_id, t.transaction_state)
            for t in response.transaction_states] == [("tx-1", 42, "Ongoing")]


def test_list_transactions_v1_without_a_duration_filter_lists_all() -> None:
    coordinator = FakeTransactionCoordinator()
    _call(list_transactions, LIST, {"state_filters": [], "producer_id_filters": []},
          coordinator, 1)
    assert coordinator.calls == [([], [], -1)]

