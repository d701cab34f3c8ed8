"""The ElectLeaders handler (klog/daemon/handlers/elect_leaders.py) over a fake controller:
results grouped by topic, ELECTION_NOT_NEEDED left out of "all partitions" answers only,
NOT_CONTROLLER off the controller, v0 (no election type) is PREFERRED."""

from __future__ import annotations

import asyncio
from typing import Any

from klog.daemon.handlers import elect_leaders
from klog.protocol import apis
from klog.protocol.entities import build
from klog.protocol.errors import ErrorCode
from klog.protocol.framing import RequestHeader
from tests.daemon.handlers.fakes import context

NOT_NEEDED = int(ErrorCode.ELECTION_NOT_NEEDED)


class FakeController:
    def __init__(self, active: bool = True) -> None:
        self.active = active
        self.calls: list[tuple[int, Any]] = []

    async def elect_leaders(self, election_type: int, tps: Any) -> dict[Any, Any]:
        self.calls.append((election_type, tps))
        return {("a", 0): (0, None), ("a", 1): (NOT_NEEDED, "not needed"),
                ("b", 2): (int(ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE), "failed")}


def call(controller: FakeController, version: int, values: dict[str, Any]) -> Any:
    request = build(apis.spec_for(43).request_entity(version), values)
    ctx = context(RequestHeader(43, version, 1, "t", 2 if version >= 2 else 1),
                  controller=controller)
    return asyncio.run(elect_leaders.handle(ctx, request))


def rows(response: Any) -> dict[tuple[str, int], int]:
    return {(r.topic, int(p.partition_id)): int(p.error_code)
            for r in response.replica_election_results for p in r.partition_result}


def test_named_partitions_get_every_result() -> None:
    c = FakeController()
    response = call(c, 2, {"election_type": 1, "timeout": 1000, "topic_partitions": [
        {"topic": "a", "partitions": [0, 1, 1]}, {"topic": "b", "partitions": [2]}]})
    assert c.calls == [(1, [("a", 0), ("a", 1), ("b", 2)])]
    assert rows(response) == {("a", 0): 0, ("a", 1): NOT_NEEDED,
                              ("b", 2): int(ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE)}
    assert int(response.error_code) == 0


def test_all_partitions_leave_out_those_needing_no_election() -> None:
    c = FakeController()
    response = call(c, 1, {"election_type": 0, "timeout": 1000, "topic_partitions": None})
    assert c.calls == [(0, None)]
    assert set(rows(response)) == {("a", 0), ("b", 2)}


def test_v0_is_preferred() -> None:
    c = FakeController()
    call(c, 0, {"timeout": 1000, "topic_partitions": [{"topic": "a", "partitions": [0]}]})
    assert c.calls == [(0, [("a", 0)])]


def test_not_the_controller() -> None:
    c = FakeController(active=False)
    named = call(c, 2, {"election_type": 0, "timeout": 1000,
                        "topic_partitions": [{"topic": "a", "partitions": [0]}]})
    assert rows(named) == {("a", 0): int(ErrorCode.NOT_CONTROLLER)}
    everything = call(c, 2, {"election_type": 0, "timeout": 1000, "topic_partitions": None})
    assert int(everything.error_code) == int(ErrorCode.NOT_CONTROLLER)
    assert rows(everything) == {} and c.calls == []


def test_unknown_election_type_is_invalid_request() -> None:
    c = FakeController()
    response = call(c, 2, {"election_type": 5, "timeout": 1000,
                           "topic_partitions": [{"topic": "a", "partitions": [0]}]})
    assert rows(response) == {("a", 0): int(ErrorCode.INVALID_REQUEST)}
    assert c.calls == []


class BusyController(FakeController):
    """A controller whose election finishes only when ``release`` is set (busy elsewhere)."""

    def __init__(self) -> None:
        super().__init__()
        self.release = asyncio.Event()
        self.finished = False

    async def elect_leaders(self, election_type: int, tps: Any) -> dict[Any, Any]:
        await self.release.wait()
        self.finished = True
        return await super().elect_leaders(election_type, tps)


def _call_busy(version: int, values: dict[str, Any]) -> tuple[Any, BusyController]:
    c = BusyController()

    async def run() -> Any:
        request = build(apis.spec_for(43).request_entity(version), values)
        ctx = context(RequestHeader(43, version, 1, "t", 2 if version >= 2 else 1),
                      controller=c)
        response = await elect_leaders.handle(ctx, request)
        # The election goes on after the timed-out answer, as Kafka's does.
        c.release.set()
        for _ in range(10):
            await asyncio.sleep(0)
        return response

    return asyncio.run(run()), c


def test_a_busy_controller_answers_request_timed_out_within_the_timeout() -> None:
    response, c = _call_busy(2, {"election_type": 0, "timeout": 20, "topic_partitions": [
        {"topic": "a", "partitions": [0, 1]}]})
    assert rows(response) == {("a", 0): int(ErrorCode.REQUEST_TIMED_OUT),
                              ("a", 1): int(ErrorCode.REQUEST_TIMED_OUT)}
    assert int(response.error_code) == 0
    assert c.finished


def test_a_busy_controller_times_out_an_all_partitions_request_at_the_top() -> None:
    response, _ = _call_busy(1, {"election_type": 0, "timeout": 20,
                                 "topic_partitions": None})
    assert int(response.error_code) == int(ErrorCode.REQUEST_TIMED_OUT)
    assert rows(response) == {}
