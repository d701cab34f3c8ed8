"""The Produce handler with a fake replica manager, no socket: decode, one call
(``ReplicaManager.produce``), encode. acks=1 answers at once, acks=-1 answers through a
Deferred when the replica manager gives an awaitable, acks=0 answers nothing (and closes
the connection on an error), bad acks never reach it; a transactional produce goes with
its transactional id (KIP-890's verification is the replica manager's), and transactional
records without one are refused; record errors (v8+) and CurrentLeader / NodeEndpoints
(v10+) reach the answer."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

from klog.daemon.handlers import Deferred, RequestContext
from klog.daemon.handlers.produce import handle
from klog.daemon.metadata_cache import BrokerEndpoint, BrokerInfo, MetadataCache, PartitionState
from klog.daemon.quotas import QuotaManagers
from klog.daemon.replica_results import ProduceResult
from klog.daemon.security.principal import KafkaPrincipal
from klog.protocol import apis, produce
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


# -- KIP-467 record errors, KIP-951 CurrentLeader / NodeEndpoints, KIP-890 v11 ---------------


class HostingReplicaManager(FakeReplicaManager):
    """A fake that also hosts partitions (as followers here) for the CurrentLeader lookup."""

    def __init__(self, answer: Any, hosted: dict[tuple[str, int], tuple[int, int]]) -> None:
        super().__init__(answer)
        self.hosted = hosted

    def get_partition(self, topic: str, partition: int) -> Any:
        view = self.hosted.get((topic, partition))
        return None if view is None else SimpleNamespace(leader_id=view[0],
                                                         leader_epoch=view[1])


def _cache() -> MetadataCache:
    cache = MetadataCache(broker_id=0)
    cache.update_brokers([
        BrokerInfo(1, (BrokerEndpoint("PLAINTEXT", "one.example", 9091),
                       BrokerEndpoint("INTERNAL", "one.internal", 19091)), rack="r1"),
        BrokerInfo(2, (BrokerEndpoint("PLAINTEXT", "two.example", 9092),)),
        BrokerInfo(3, (BrokerEndpoint("INTERNAL", "three.internal", 19093),)),
    ], controller_id=1)
    cache.update_partitions([PartitionState("a", 0, 2, 11, (0, 2), (0, 2)),
                             PartitionState("a", 2, 3, 4, (0, 3), (0, 3)),
                             PartitionState("b", 1, 2, 6, (0, 2), (0, 2))])
    return cache


class ListenerConnection(FakeConnection):
    listener_name = "PLAINTEXT"


def _versioned(version: int, acks: int = 1) -> Any:
    topics = [("a", [(0, RECORDS[("a", 0)]), (2, RECORDS[("a", 2)])]),
              ("b", [(1, RECORDS[("b", 1)])])]
    body = b"".join(bytes(piece) for piece in produce.encode_produce_request(
        version, acks, 1500, topics))
    return produce.decode_produce_request(version, bytearray(body))


def _answer(version: int, rm: Any, cache: Any = None) -> Any:
    """The response as kio reads it (the reference decoder, tagged fields included)."""
    ctx = context(RequestHeader(0, version, 7, "test", 2), ListenerConnection(),
                  replica_manager=rm, metadata_cache=cache)
    response = asyncio.run(handle(ctx, _versioned(version)))
    return apis.decode_response(0, version, b"".join(response))


NOT_LEADER = int(ErrorCode.NOT_LEADER_OR_FOLLOWER)


def test_v10_names_the_current_leader_of_a_moved_partition_kip_951() -> None:
    """Kafka 3.9's handleProduceRequest: NOT_LEADER_OR_FOLLOWER carries the leader and epoch
    (this broker's replica's view first, else the metadata cache's), and NodeEndpoints the
    leaders' addresses on the request's listener."""
    results = {("a", 0): ProduceResult(NOT_LEADER, error_message="moved"),
               ("a", 2): ProduceResult(NOT_LEADER, error_message="moved"),
               ("b", 1): ProduceResult(0, 5)}
    # a-0 hosted here as a follower of broker 1 at epoch 12 (newer than the cache's 2/11);
    # a-2 not hosted: the cache says broker 3, which has no PLAINTEXT endpoint
    rm = HostingReplicaManager(results, {("a", 0): (1, 12)})
    for version in (10, 11):
        decoded = _answer(version, rm, _cache())
        parts = {(t.name, p.index): p for t in decoded.responses
                 for p in t.partition_responses}
        assert (parts[("a", 0)].current_leader.leader_id,
                parts[("a", 0)].current_leader.leader_epoch) == (1, 12)
        assert (parts[("a", 2)].current_leader.leader_id,
                parts[("a", 2)].current_leader.leader_epoch) == (3, 4)
        assert parts[("b", 1)].current_leader.leader_id == -1  # no error: left out
        assert [(n.node_id, n.host, n.port, n.rack) for n in decoded.node_endpoints] == [
            (1, "one.example", 9091, "r1")]
    # before v10 there is nowhere to say it (and nothing is looked up)
    decoded = _answer(9, FakeReplicaManager(results))
    assert [p.error_code for t in decoded.responses for p in t.partition_responses] == [
        NOT_LEADER, NOT_LEADER, 0]


def test_v10_without_a_leader_anywhere_says_minus_one() -> None:
    results = {tp: ProduceResult(NOT_LEADER) for tp in RECORDS}
    decoded = _answer(10, HostingReplicaManager(results, {}), MetadataCache(broker_id=0))
    for part in (p for t in decoded.responses for p in t.partition_responses):
        assert (part.current_leader.leader_id, part.current_leader.leader_epoch) == (-1, -1)
    assert decoded.node_endpoints == ()


def test_a_batch_refused_for_some_records_names_them_kip_467() -> None:
    """v8+: the record errors of a refused batch reach the producer, in the order the
    replica manager gave them; the other partitions answer as usual."""
    errors = ((0, "record 0 has no key"), (10, "record 10 has no key"))
    results = {("a", 0): ProduceResult(int(ErrorCode.INVALID_RECORD),
                                       error_message="2 of the 20 records ... refused",
                                       record_errors=errors),
               ("a", 2): ProduceResult(0, 3), ("b", 1): ProduceResult(0, 4)}
    for version in (8, 9, 10, 11):
        decoded = _answer(version, HostingReplicaManager(results, {}), _cache())
        parts = {(t.name, p.index): p for t in decoded.responses
                 for p in t.partition_responses}
        refused = parts[("a", 0)]
        assert refused.error_code == ErrorCode.INVALID_RECORD
        assert [(e.batch_index, e.batch_index_error_message)
                for e in refused.record_errors] == list(errors)
        assert refused.error_message == "2 of the 20 records ... refused"
        assert parts[("a", 2)].record_errors == () and parts[("a", 2)].base_offset == 3
    # v3-v7 have no record errors: the partition's error alone
    decoded = _answer(7, FakeReplicaManager(results))
    assert decoded.responses[0].partition_responses[0].error_code == ErrorCode.INVALID_RECORD


def test_v11_producers_are_told_transaction_abortable() -> None:
    """Kafka 3.9 (KIP-890): from Produce v11 the replica manager may answer
    TRANSACTION_ABORTABLE (a partition outside the ongoing transaction); before, it maps it
    to INVALID_TXN_STATE. The handler says which the producer understands."""
    for version, abortable in ((10, False), (11, True)):
        rm = FakeReplicaManager({("a", 0): ProduceResult(0, 10),
                                 ("a", 2): ProduceResult(int(ErrorCode.TRANSACTION_ABORTABLE)),
                                 ("b", 1): ProduceResult(0, 5)})
        ctx = context(RequestHeader(0, version, 7, "test", 2), None, replica_manager=rm)
        request = _txn_request(1)
        body = b"".join(bytes(piece) for piece in produce.encode_produce_request(
            version, 1, 1500, [(t.name, [(p.index, bytes(p.records)) for p in t.partition_data])
                               for t in request.topic_data], "tx"))
        response = asyncio.run(handle(ctx, produce.decode_produce_request(version,
                                                                          bytearray(body))))
        assert rm.transactions == [("tx", abortable)]
        topics, _ = produce.decode_produce_response(version, b"".join(response))
        codes = {(name, p.index): p.error_code for name, parts in topics for p in parts}
        assert codes == {("a", 0): 0, ("a", 2): int(ErrorCode.TRANSACTION_ABORTABLE),
                         ("b", 1): 0}
