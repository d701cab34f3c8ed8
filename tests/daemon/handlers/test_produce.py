"""The Produce handler with a fake replica manager, no socket: decode, one call
(``ReplicaManager.produce``), encode. acks=1 answers at once, acks=-1 answers through a
Deferred when the replica manager gives an awaitable, acks=0 answers nothing (and closes
the connection on an error), bad acks never reach it; a transactional produce goes with
its transactional id (KIP-890's verification is the replica manager's), and transactional
records without one are refused."""

from __future__ import annotations

import asyncio
from typing import Any

from klog.daemon.handlers import Deferred, RequestContext
from klog.daemon.handlers.produce import handle
from klog.daemon.quotas import QuotaManagers
from klog.daemon.replica_manager import ProduceResult
from klog.daemon.security.principal import KafkaPrincipal
from klog.protocol import produce
from klog.protocol.errors import ErrorCode
from klog.protocol.framing import RequestHeader
from tests.daemon.handlers.fakes import context
from tests.daemon.wire import batch

VERSION = 9
RECORDS = {("a", 0): batch(1), ("a", 2): batch(2), ("b", 1): batch(3)}


class FakeReplicaManager:
    def __init__(self, answer: Any) -> None:
        self.answer = answer
        self.calls: list[tuple[dict[tuple[str, int], bytes], int, int]] = []
        self.transactions: list[tuple[str | None, bool]] = []

    async def produce(self, entries: dict[tuple[str, int], Any], required_acks: int,
                      timeout_ms: int, transactional_id: str | None = None,
                      abortable: bool = False) -> Any:
        self.calls.append(({tp: bytes(r) for tp, r in entries.items()}, required_acks,
                           timeout_ms))
        self.transactions.append((transactional_id, abortable))
        return self.answer


class FakeConnection:
    closed = False

    def close(self) -> None:
        self.closed = True


def _request(acks: int, transactional_id: str | None = None) -> Any:
    topics = [("a", [(0, RECORDS[("a", 0)]), (2, RECORDS[("a", 2)])]),
              ("b", [(1, RECORDS[("b", 1)])])]
    body = b"".join(bytes(piece) for piece in produce.encode_produce_request(
        VERSION, acks, 1500, topics, transactional_id))
    return produce.decode_produce_request(VERSION, bytearray(body))


def _ctx(rm: FakeReplicaManager, connection: Any = None) -> RequestContext:
    return context(RequestHeader(0, VERSION, 7, "test", 2), connection, replica_manager=rm)


def _decoded(response: Any) -> dict[tuple[str, int], tuple[int, int]]:
    topics, _throttle = produce.decode_produce_response(VERSION, b"".join(response))
    return {(name, p.index): (p.error_code, p.base_offset) for name, parts in topics
            for p in parts}


OK = {("a", 0): ProduceResult(0, 10), ("a", 2): ProduceResult(0, 20),
      ("b", 1): ProduceResult(int(ErrorCode.NOT_LEADER_OR_FOLLOWER), error_message="moved")}
EXPECTED = {("a", 0): (0, 10), ("a", 2): (0, 20),
            ("b", 1): (int(ErrorCode.NOT_LEADER_OR_FOLLOWER), -1)}


def test_acks_1_is_one_call_and_its_results_encoded() -> None:
    rm = FakeReplicaManager(OK)
    response = asyncio.run(handle(_ctx(rm), _request(1)))
    assert rm.calls == [(RECORDS, 1, 0)]
    assert _decoded(response) == EXPECTED


def test_acks_all_answers_through_a_deferred_when_the_isr_is_awaited() -> None:
    async def go() -> None:
        waiting: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        rm = FakeReplicaManager(waiting)
        answer = await handle(_ctx(rm), _request(-1))
        assert isinstance(answer, Deferred) and rm.calls == [(RECORDS, -1, 1500)]
        waiting.set_result(OK)
        assert _decoded(await answer.response) == EXPECTED

    asyncio.run(go())


def test_acks_0_answers_nothing_and_closes_on_an_error() -> None:
    connection = FakeConnection()
    assert asyncio.run(handle(_ctx(FakeReplicaManager(OK), connection), _request(0))) is None
    assert connection.closed
    fine = {tp: ProduceResult(0, 1) for tp in OK}
    connection = FakeConnection()
    assert asyncio.run(handle(_ctx(FakeReplicaManager(fine), connection), _request(0))) is None
    assert not connection.closed


def test_bad_acks_never_reach_the_replica_manager() -> None:
    rm = FakeReplicaManager(OK)
    bad = _decoded(asyncio.run(handle(_ctx(rm), _request(2))))
    assert set(bad.values()) == {(int(ErrorCode.INVALID_REQUIRED_ACKS), -1)}
    assert rm.calls == []


def _txn_request(acks: int, transactional_id: str | None = "tx") -> Any:
    from klog.protocol.records.v2 import BatchBuilder

    def txn_batch(value: bytes) -> bytes:
        builder = BatchBuilder(producer_id=42, producer_epoch=3, base_sequence=0,
                               is_transactional=True)
        builder.append(1_700_000_000_000, None, value)
        return builder.build()

    topics = [("a", [(0, txn_batch(b"x")), (2, txn_batch(b"y"))]),
              ("b", [(1, txn_batch(b"z"))])]
    body = b"".join(bytes(piece) for piece in produce.encode_produce_request(
        VERSION, acks, 1500, topics, transactional_id))
    return produce.decode_produce_request(VERSION, bytearray(body))


def test_a_transactional_produce_is_verified_by_the_replica_manager_kip_890() -> None:
    """The transactional id goes with the partitions to ``ReplicaManager.produce``, which
    has the coordinator confirm them; before Produce v11 the client does not understand
    TRANSACTION_ABORTABLE. Its answers (INVALID_TXN_STATE here) are encoded as given."""
    answer = {("a", 0): ProduceResult(0, 10),
              ("a", 2): ProduceResult(int(ErrorCode.INVALID_TXN_STATE),
                                      error_message="Partition was not added to the "
                                                    "transaction"),
              ("b", 1): ProduceResult(0, 5)}
    rm = FakeReplicaManager(answer)
    answered = _decoded(asyncio.run(handle(_ctx(rm), _txn_request(1))))
    assert rm.transactions == [("tx", False)]
    assert answered == {("a", 0): (0, 10), ("a", 2): (int(ErrorCode.INVALID_TXN_STATE), -1),
                        ("b", 1): (0, 5)}
    # A plain produce is no transaction's.
    rm = FakeReplicaManager(OK)
    asyncio.run(handle(_ctx(rm), _request(1)))
    assert rm.transactions == [(None, False)]


def test_transactional_records_without_a_transactional_id_are_refused() -> None:
    """As Kafka's KafkaApis: transactional batches need a transactional id (or they would
    be appended unverified, a transaction no coordinator knows)."""
    rm = FakeReplicaManager(OK)
    answered = _decoded(asyncio.run(handle(_ctx(rm), _txn_request(1, None))))
    assert set(answered.values()) == {(int(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED),
                                       -1)}
    assert rm.calls == []


class ThrottledConnection(FakeConnection):
    principal = KafkaPrincipal("User", "alice")
    peer = "127.0.0.1:1"

    def __init__(self) -> None:
        self.throttled: list[int] = []

    def throttle(self, throttle_ms: int) -> None:
        self.throttled.append(throttle_ms)


def test_producer_byte_rate_meters_the_record_bytes_and_says_the_throttle_kip_219() -> None:
    clock = [0.0]
    quotas = QuotaManagers.create(clock=lambda: clock[0])
    size = sum(len(r) for r in RECORDS.values())
    # 10 s minimum window: twice the request's bytes per 10 s is twice the quota
    quotas.configs.set(("alice", "test"), {"producer_byte_rate": str(size / 10)})
    rm = FakeReplicaManager(OK)
    connection = ThrottledConnection()
    ctx = context(RequestHeader(0, VERSION, 7, "test", 2), connection, replica_manager=rm,
                  quotas=quotas)
    first = asyncio.run(handle(ctx, _request(1)))
    assert produce.decode_produce_response(VERSION, b"".join(first))[1] == 0
    second = asyncio.run(handle(ctx, _request(1)))
    # (2 x size / 10 - size / 10) / (size / 10) x 10 s = 10 s
    assert produce.decode_produce_response(VERSION, b"".join(second))[1] == 10_000
    assert connection.throttled == [10_000]
    assert _decoded(second) == EXPECTED  # appended all the same, as Kafka
    assert len(rm.calls) == 2
    # another user is not metered
    connection.principal = KafkaPrincipal("User", "bob")
    third = asyncio.run(handle(ctx, _request(1)))
    assert produce.decode_produce_response(VERSION, b"".join(third))[1] == 0
