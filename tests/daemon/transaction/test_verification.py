"""Tests for klog.daemon.transaction.verification (KIP-890 part 1): a partition leader's
question to the transaction coordinator -- in-process when it is this broker, else
AddPartitionsToTxn v4+ (verify_only) over a fake connection that hands each request, as
bytes, to the real AddPartitionsToTxn handler of a fake coordinator -- and Kafka's
translations of the answers, the batching per coordinator, the replacement of a waiting
verification of the same id, and the failures."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from types import SimpleNamespace
from typing import Any

import pytest

from klog.client.errors import KafkaConnectionError, KafkaTimeoutError
from klog.daemon.handlers import add_partitions_to_txn
from klog.daemon.metadata_cache import BrokerEndpoint, BrokerInfo, MetadataCache, PartitionState
from klog.daemon.transaction.verification import AddPartitionsToTxnManager, unverified
from klog.protocol import apis
from klog.protocol.entities import build
from klog.protocol.errors import ErrorCode
from klog.protocol.framing import RequestHeader
from tests.daemon.handlers.fakes import context

ME, OTHER = 1, 2
TP = tuple[str, int]


class FakeCoordinator:
    """The transaction coordinator's verification: ``added`` per transactional id, and an
    error for all its partitions when one is set (NOT_COORDINATOR, ...)."""

    def __init__(self) -> None:
        self.added: dict[str, set[TP]] = {}
        self.errors: dict[str, ErrorCode] = {}
        self.fenced_below: dict[str, int] = {}
        self.calls: list[tuple[str, int, int, list[TP]]] = []
        self.state_manager = SimpleNamespace(partition_for=lambda txn_id: 0)

    def verify_partitions_in_transaction(self, txn_id: str, pid: int, epoch: int,
                                         partitions: Iterable[TP]) -> dict[TP, ErrorCode]:
        wanted = list(partitions)
        self.calls.append((txn_id, pid, epoch, wanted))
        if txn_id in self.errors:
            return dict.fromkeys(wanted, self.errors[txn_id])
        if epoch < self.fenced_below.get(txn_id, 0):
            return dict.fromkeys(wanted, ErrorCode.PRODUCER_FENCED)
        added = self.added.get(txn_id, set())
        return {tp: ErrorCode.NONE if tp in added else ErrorCode.TRANSACTION_ABORTABLE
                for tp in wanted}


class WireConnection:
    """A connection to the coordinator's broker: each request is encoded, decoded by
    ``apis`` and answered by the real AddPartitionsToTxn handler over ``coordinator``."""

    def __init__(self, coordinator: FakeCoordinator, max_version: int = 5) -> None:
        self.api_versions = {24: (0, max_version)}
        self.coordinator = coordinator
        self.sent: list[tuple[int, Any]] = []
        self.gate: asyncio.Event | None = None
        self.fail: Exception | None = None
        self.top_error: ErrorCode | None = None

    async def request(self, api_key: int, version: int, entity: Any, *, timeout: float) -> Any:
        assert api_key == 24
        request = apis.decode_request(24, version, apis.encode_request(entity))
        self.sent.append((version, request))
        if self.gate is not None:
            await self.gate.wait()
        if self.fail is not None:
            raise self.fail
        if self.top_error is not None:
            response = build(apis.spec_for(24).response_entity(version), {
                "throttle_time": 0, "error_code": int(self.top_error),
                "results_by_transaction": []})
        else:
            ctx = context(RequestHeader(24, version, 1, "broker-1", 2),
                          transaction_coordinator=self.coordinator,
                          metadata_cache=SimpleNamespace(partition_state=lambda t, p: object()))
            response = await add_partitions_to_txn.handle(ctx, request)
        return apis.decode_response(24, version, apis.encode_response(response))


class FakeConnections:
    def __init__(self, conn: WireConnection) -> None:
        self.conn = conn
        self.timeout_s = 1.0
        self.unreachable: Exception | None = None
        self.dropped: list[int] = []
        self.closed = False

    async def get(self, broker_id: int) -> WireConnection:
        assert broker_id == OTHER
        if self.unreachable is not None:
            raise self.unreachable
        return self.conn

    def drop(self, broker_id: int) -> None:
        self.dropped.append(broker_id)

    def close(self) -> None:
        self.closed = True


class Env:
    def __init__(self, coordinator_broker: int = OTHER, max_version: int = 5) -> None:
        self.config = SimpleNamespace(current=SimpleNamespace(
            transaction_partition_verification_enable=True))
        self.cache = MetadataCache(ME)
        self.cache.update_brokers([BrokerInfo(b, (BrokerEndpoint("PLAINTEXT", "h", 9),))
                                   for b in (ME, OTHER)], ME)
        self.set_coordinator(coordinator_broker)
        self.coordinator = FakeCoordinator()
        self.conn = WireConnection(self.coordinator, max_version)
        self.connections = FakeConnections(self.conn)
        self.manager = AddPartitionsToTxnManager(
            ME, self.config, self.cache, self.coordinator,  # type: ignore[arg-type]
            self.connections)  # type: ignore[arg-type]

    def set_coordinator(self, leader: int) -> None:
        self.cache.update_partitions([PartitionState("__transaction_state", 0, leader, 0,
                                                     (ME, OTHER), (ME, OTHER))])


def test_unverified_translates_as_kafka_does_for_producers() -> None:
    answers = {("a", 0): int(ErrorCode.NONE), ("a", 1): int(ErrorCode.TRANSACTION_ABORTABLE),
               ("a", 2): int(ErrorCode.PRODUCER_FENCED),
               ("a", 3): int(ErrorCode.CONCURRENT_TRANSACTIONS), ("a", 4): 9999}
    assert unverified(answers, abortable=False) == {
        ("a", 1): ErrorCode.INVALID_TXN_STATE, ("a", 2): ErrorCode.INVALID_PRODUCER_EPOCH,
        ("a", 3): ErrorCode.CONCURRENT_TRANSACTIONS, ("a", 4): ErrorCode.UNKNOWN_SERVER_ERROR}
    assert unverified(answers, abortable=True)[("a", 1)] == ErrorCode.TRANSACTION_ABORTABLE


def test_this_brokers_own_transactions_are_verified_in_process() -> None:
    async def go() -> None:
        env = Env(coordinator_broker=ME)
        env.coordinator.added["t"] = {("a", 0)}
        result = await env.manager.verify("t", 7, 0, [("a", 0), ("a", 1)], False)
        assert result == {("a", 1): ErrorCode.INVALID_TXN_STATE}
        assert env.coordinator.calls == [("t", 7, 0, [("a", 0), ("a", 1)])]
        assert env.conn.sent == []

    asyncio.run(go())


def test_no_coordinator_alive_is_coordinator_not_available() -> None:
    async def go() -> None:
        env = Env()
        env.set_coordinator(-1)
        assert await env.manager.verify("t", 7, 0, [("a", 0)], False) == {
            ("a", 0): ErrorCode.COORDINATOR_NOT_AVAILABLE}
        env.set_coordinator(3)  # a leader the metadata knows no live broker for
        assert await env.manager.verify("t", 7, 0, [("a", 0)], False) == {
            ("a", 0): ErrorCode.COORDINATOR_NOT_AVAILABLE}
        assert env.conn.sent == []

    asyncio.run(go())


@pytest.mark.parametrize("max_version", [4, 5])
def test_another_brokers_transactions_are_verified_with_add_partitions_to_txn(
        max_version: int) -> None:
    async def go() -> None:
        env = Env(max_version=max_version)
        env.coordinator.added["t"] = {("a", 0), ("b", 2)}
        result = await env.manager.verify("t", 7, 3, [("a", 0), ("a", 1), ("b", 2)], False)
        assert result == {("a", 1): ErrorCode.INVALID_TXN_STATE}
        ((version, request),) = env.conn.sent
        assert version == max_version
        (txn,) = request.transactions
        assert (txn.transactional_id, txn.producer_id, txn.producer_epoch, txn.verify_only) \
            == ("t", 7, 3, True)
        assert {(t.name, tuple(t.partitions)) for t in txn.topics} == {("a", (0, 1)),
                                                                       ("b", (2,))}
        # A client that understands TRANSACTION_ABORTABLE gets it.
        assert await env.manager.verify("t", 7, 3, [("a", 1)], True) == {
            ("a", 1): ErrorCode.TRANSACTION_ABORTABLE}
        # PRODUCER_FENCED reaches producers as INVALID_PRODUCER_EPOCH.
        env.coordinator.fenced_below["t"] = 4
        assert await env.manager.verify("t", 7, 3, [("a", 0)], False) == {
            ("a", 0): ErrorCode.INVALID_PRODUCER_EPOCH}
        # The coordinator moved, or loads: its error for every partition.
        env.coordinator.errors["t"] = ErrorCode.NOT_COORDINATOR
        assert await env.manager.verify("t", 7, 3, [("a", 0), ("b", 2)], False) == {
            ("a", 0): ErrorCode.NOT_COORDINATOR, ("b", 2): ErrorCode.NOT_COORDINATOR}

    asyncio.run(go())


def test_one_request_in_flight_per_coordinator_the_rest_batched() -> None:
    async def go() -> None:
        env = Env()
        env.coordinator.added = {"t1": {("a", 0)}, "t2": {("a", 1)}, "t3": set()}
        env.conn.gate = asyncio.Event()
        first = asyncio.ensure_future(env.manager.verify("t1", 1, 0, [("a", 0)], False))
        await asyncio.sleep(0.01)
        second = asyncio.ensure_future(env.manager.verify("t2", 2, 0, [("a", 1)], False))
        third = asyncio.ensure_future(env.manager.verify("t3", 3, 0, [("a", 2)], False))
        await asyncio.sleep(0.01)
        assert len(env.conn.sent) == 1  # t2 and t3 wait for t1's request
        env.conn.gate.set()
        assert await first == {}
        assert await second == {}
        assert await third == {("a", 2): ErrorCode.INVALID_TXN_STATE}
        assert [sorted(t.transactional_id for t in r.transactions)
                for _v, r in env.conn.sent] == [["t1"], ["t2", "t3"]]

    asyncio.run(go())


def test_a_second_verification_of_one_id_replaces_the_waiting_one() -> None:
    """As Kafka's AddPartitionsToTxnManager: the same epoch (a retry) answers the waiting
    one NETWORK_EXCEPTION, a higher epoch INVALID_PRODUCER_EPOCH; a lower epoch is itself
    INVALID_PRODUCER_EPOCH at once."""
    async def go() -> None:
        env = Env()
        env.coordinator.added = {"t": {("a", 0)}, "busy": set()}
        env.conn.gate = asyncio.Event()
        busy = asyncio.ensure_future(env.manager.verify("busy", 9, 0, [("z", 0)], False))
        await asyncio.sleep(0.01)
        waiting = asyncio.ensure_future(env.manager.verify("t", 1, 2, [("a", 0)], False))
        await asyncio.sleep(0)
        retry = asyncio.ensure_future(env.manager.verify("t", 1, 2, [("a", 0)], False))
        await asyncio.sleep(0)
        assert await waiting == {("a", 0): ErrorCode.NETWORK_EXCEPTION}
        assert await env.manager.verify("t", 1, 1, [("a", 0)], False) == {
            ("a", 0): ErrorCode.INVALID_PRODUCER_EPOCH}
        bumped = asyncio.ensure_future(env.manager.verify("t", 1, 3, [("a", 0)], False))
        await asyncio.sleep(0)
        assert await retry == {("a", 0): ErrorCode.INVALID_PRODUCER_EPOCH}
        env.conn.gate.set()
        assert await busy == {("z", 0): ErrorCode.INVALID_TXN_STATE}
        assert await bumped == {}
        assert [(t.transactional_id, t.producer_epoch) for _v, r in env.conn.sent
                for t in r.transactions] == [("busy", 0), ("t", 3)]

    asyncio.run(go())


def test_failures_to_reach_the_coordinator() -> None:
    async def go() -> None:
        env = Env()
        env.connections.unreachable = KafkaConnectionError("cannot connect to h:9")
        assert await env.manager.verify("t", 1, 0, [("a", 0)], False) == {
            ("a", 0): ErrorCode.NETWORK_EXCEPTION}
        env.connections.unreachable = None
        env.conn.fail = KafkaTimeoutError("no answer within 1.0 s")
        assert await env.manager.verify("t", 1, 0, [("a", 0)], False) == {
            ("a", 0): ErrorCode.NETWORK_EXCEPTION}
        assert env.connections.dropped == [OTHER]
        env.conn.fail = None
        # The brokers' own authorization failed: what the producer can act on.
        env.conn.top_error = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        assert await env.manager.verify("t", 1, 0, [("a", 0)], False) == {
            ("a", 0): ErrorCode.INVALID_TXN_STATE}
        env.conn.top_error = ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        assert await env.manager.verify("t", 1, 0, [("a", 0)], False) == {
            ("a", 0): ErrorCode.COORDINATOR_LOAD_IN_PROGRESS}

    asyncio.run(go())


def test_a_coordinator_without_v4_cannot_verify_and_the_write_goes_on() -> None:
    async def go() -> None:
        env = Env(max_version=3)
        assert await env.manager.verify("t", 1, 0, [("a", 0)], False) == {}
        assert env.conn.sent == []

    asyncio.run(go())


def test_enabled_follows_the_dynamic_config_and_shutdown_answers_the_waiting() -> None:
    async def go() -> None:
        env = Env()
        assert env.manager.enabled
        env.config.current = SimpleNamespace(transaction_partition_verification_enable=False)
        assert not env.manager.enabled
        env.conn.gate = asyncio.Event()
        waiting = asyncio.ensure_future(env.manager.verify("t", 1, 0, [("a", 0)], False))
        await asyncio.sleep(0.01)
        await env.manager.shutdown()
        assert await waiting == {("a", 0): ErrorCode.NETWORK_EXCEPTION}
        assert env.connections.closed
        assert await env.manager.verify("t", 1, 0, [("a", 0)], False) == {
            ("a", 0): ErrorCode.COORDINATOR_NOT_AVAILABLE}

    asyncio.run(go())
