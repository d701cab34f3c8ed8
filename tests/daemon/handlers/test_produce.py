"""The Produce handler with a fake replica manager, no socket: decode, one call
(``ReplicaManager.produce``), encode. acks=1 answers at once, acks=-1 answers through a
Deferred when the replica manager gives an awaitable, acks=0 answers nothing (and closes
the connection on an error), bad acks and transactional produces never reach it."""

from __future__ import annotations

import asyncio
from typing import Any

from klog.daemon.handlers import Deferred, RequestContext
from klog.daemon.handlers.produce import handle
from klog.daemon.replica_manager import ProduceResult
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

    async def produce(self, entries: dict[tuple[str, int], Any], required_acks: int,
                      timeout_ms: int) -> Any:
        self.calls.append(({tp: bytes(r) for tp, r in entries.items()}, required_acks,
                           timeout_ms))
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


def test_bad_acks_and_transactional_produces_never_reach_the_replica_manager() -> None:
    rm = FakeReplicaManager(OK)
    bad = _decoded(asyncio.run(handle(_ctx(rm), _request(2))))
    assert set(bad.values()) == {(int(ErrorCode.INVALID_REQUIRED_ACKS), -1)}
    txn = _decoded(asyncio.run(handle(_ctx(rm), _request(1, transactional_id="tx"))))
    assert set(txn.values()) == {(int(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED), -1)}
    assert rm.calls == []
