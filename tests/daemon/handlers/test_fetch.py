"""The Fetch handler with a fake replica manager, no socket: decode, one call
(``ReplicaManager.fetch_messages``) with the request's parameters, encode (record data as
the replica manager's regions, errors and offsets per partition); v13+ topics by id
(unknown ids, sessions keyed by id, v16's leader hints). Sessions themselves:
tests/daemon/test_fetch_session.py."""

from __future__ import annotations

import asyncio
import uuid
from types import SimpleNamespace
from typing import Any

import pytest

from klog.daemon.delayed import FetchParams
from klog.daemon.fetch_session import FetchSessionCache
from klog.daemon.handlers import RequestContext
from klog.daemon.handlers.fetch import handle
from klog.daemon.metadata_cache import BrokerEndpoint, BrokerInfo, MetadataCache, PartitionState
from klog.daemon.partition import FetchIsolation
from klog.daemon.quotas import DEFAULT, QuotaManagers
from klog.daemon.replica_results import FetchResult
from klog.daemon.replica_selector import ClientMetadata
from klog.daemon.security.principal import KafkaPrincipal
from klog.protocol import apis
from klog.protocol.entities import build
from klog.protocol.errors import ErrorCode
from klog.protocol.framing import RequestHeader
from tests.daemon.handlers.fakes import context
from tests.daemon.wire import batch

VERSION = 11
FETCH = 1
DATA = batch(3)


class Region:
    """Record data as the replica manager hands it: a region the connection sends."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.size = len(data)


class FakeReplicaManager:
    def __init__(self) -> None:
        self.calls: list[tuple[FetchParams, list[Any]]] = []

    async def fetch_messages(self, params: FetchParams, wanted: list[Any]
                             ) -> list[FetchResult]:
        self.calls.append((params, wanted))
        out = []
        for topic, partition, _offset, _max, _epoch in wanted:
            if topic == "gone":
                out.append(FetchResult(int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)))
            else:
                out.append(FetchResult(0, 30 + partition, 20 + partition, 5,
                                       Region(DATA), []))  # type: ignore[arg-type]
        return out


def _ctx(rm: FakeReplicaManager, version: int = VERSION) -> RequestContext:
    return context(RequestHeader(FETCH, version, 3, "test", 1), replica_manager=rm,
                   config={"fetch_max_bytes": 50_000,
                           "listeners": [SimpleNamespace(listener_name="PLAINTEXT")]},
                   fetch_sessions=FetchSessionCache(10))


def _request(replica_id: int = -1, isolation_level: int = 1, session_id: int = 0,
             session_epoch: int = -1, rack_id: str = "", version: int = VERSION,
             log_start_offset: int = -1) -> Any:
    values = {
        "replica_id": replica_id, "max_wait": 500, "min_bytes": 100, "max_bytes": 1 << 20,
        "isolation_level": isolation_level, "session_id": session_id,
        "session_epoch": session_epoch,
        "topics": [{"topic": "t", "partitions": [
            {"partition": p, "current_leader_epoch": 4, "fetch_offset": 10 * p,
             "log_start_offset": log_start_offset, "partition_max_bytes": 1000}
            for p in (0, 1)]},
            {"topic": "gone", "partitions": [
                {"partition": 0, "current_leader_epoch": -1, "fetch_offset": 0,
                 "log_start_offset": -1, "partition_max_bytes": 1000}]}],
        "forgotten_topics_data": [], "rack_id": rack_id,
    }
    entity = build(apis.spec_for(FETCH).request_entity(version), values)
    return apis.decode_request(FETCH, version, apis.encode_request(entity))


def _decoded(chunks: list[Any]) -> Any:
    body = b"".join(c.data if isinstance(c, Region) else c for c in chunks)
    return apis.decode_response(FETCH, VERSION, body)


def test_one_call_with_the_requests_parameters_and_its_results_encoded() -> None:
    rm = FakeReplicaManager()
    response = _decoded(asyncio.run(handle(_ctx(rm), _request())))
    ((params, wanted),) = rm.calls
    assert params == FetchParams(replica_id=-1, max_wait_ms=500, min_bytes=100,
                                 max_bytes=50_000,  # bounded by fetch.max.bytes
                                 isolation=FetchIsolation.TXN_COMMITTED,
                                 client_metadata=ClientMetadata("", "PLAINTEXT"))
    assert wanted == [("t", 0, 0, 1000, 4), ("t", 1, 10, 1000, 4), ("gone", 0, 0, 1000, -1)]
    parts = {(t.topic, p.partition_index): p for t in response.responses for p in t.partitions}
    assert parts[("t", 1)].error_code == 0
    assert (parts[("t", 1)].high_watermark, parts[("t", 1)].last_stable_offset,
            parts[("t", 1)].log_start_offset) == (31, 21, 5)
    assert bytes(parts[("t", 1)].records) == DATA
    assert parts[("gone", 0)].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert not parts[("gone", 0)].records


def test_a_followers_fetch_reads_to_the_log_end() -> None:
    rm = FakeReplicaManager()
    asyncio.run(handle(_ctx(rm), _request(replica_id=2, isolation_level=0)))
    params = rm.calls[0][0]
    assert params.replica_id == 2 and params.isolation is FetchIsolation.LOG_END
    asyncio.run(handle(_ctx(rm), _request(isolation_level=0)))
    assert rm.calls[1][0].isolation is FetchIsolation.HIGH_WATERMARK


def test_kip_392_client_metadata_and_follower_log_starts() -> None:
    # v11+: the consumer's rack and listener (a follower may answer it); v10: none (only
    # a leader may); a follower's fetch brings its log start offsets instead.
    rm = FakeReplicaManager()
    asyncio.run(handle(_ctx(rm), _request(rack_id="rack-b")))
    assert rm.calls[0][0].client_metadata == ClientMetadata("rack-b", "PLAINTEXT")
    asyncio.run(handle(_ctx(rm, 10), _request(version=10)))
    assert rm.calls[1][0].client_metadata is None
    asyncio.run(handle(_ctx(rm), _request(replica_id=2, isolation_level=0,
                                          log_start_offset=7)))
    params = rm.calls[2][0]
    assert params.client_metadata is None
    assert params.follower_log_start_offsets == {("t", 0): 7, ("t", 1): 7, ("gone", 0): -1}


def test_a_preferred_read_replica_is_answered() -> None:
    class Preferring(FakeReplicaManager):
        async def fetch_messages(self, params: FetchParams, wanted: list[Any]
                                 ) -> list[FetchResult]:
            return [FetchResult(0, 30, 30, 0, preferred_read_replica=3) for _ in wanted]

    response = _decoded(asyncio.run(handle(_ctx(Preferring()), _request(rack_id="c"))))
    parts = [p for t in response.responses for p in t.partitions]
    assert [p.preferred_read_replica for p in parts] == [3, 3, 3]
    assert all(not p.records for p in parts)


def test_an_unknown_fetch_session_is_refused_without_reading() -> None:
    rm = FakeReplicaManager()
    response = _decoded(asyncio.run(handle(_ctx(rm), _request(session_id=9, session_epoch=1))))
    assert response.error_code == ErrorCode.FETCH_SESSION_ID_NOT_FOUND
    assert response.session_id == 0 and rm.calls == []


class ThrottledConnection:
    principal = KafkaPrincipal("User", "ANONYMOUS")
    peer = "127.0.0.1:1"
    listener_name = "PLAINTEXT"

    def __init__(self) -> None:
        self.throttled: list[int] = []

    def throttle(self, throttle_ms: int) -> None:
        self.throttled.append(throttle_ms)


def test_consumer_byte_rate_answers_kafkas_throttled_response_kip_219() -> None:
    clock = [0.0]
    quotas = QuotaManagers.create(clock=lambda: clock[0])
    # each fetch answers 2 x len(DATA) bytes; the quota lets one through per 10 s window
    quotas.configs.set((None, "test"), {"consumer_byte_rate": str(2 * len(DATA) / 10)})
    rm = FakeReplicaManager()
    connection = ThrottledConnection()
    ctx = context(RequestHeader(FETCH, VERSION, 3, "test", 1), connection, replica_manager=rm,
                  config={"fetch_max_bytes": 50_000}, quotas=quotas)
    first = _decoded(asyncio.run(handle(ctx, _request())))
    assert first.throttle_time.total_seconds() == 0 and first.responses
    second = _decoded(asyncio.run(handle(ctx, _request())))
    # over the quota: no data, the throttle time, and the connection muted (Kafka's
    # handleFetchRequest: the bytes are taken back, the response is empty)
    assert second.throttle_time.total_seconds() == 10 and second.responses == ()
    assert connection.throttled == [10_000]
    # the bytes were taken back: the rate is at the quota again, not over it
    assert quotas.fetch.throttle_time("ANONYMOUS", "test") == 0
    # once the first fetch's sample leaves the 11-sample window, data flows again
    clock[0] += 11.0
    third = _decoded(asyncio.run(handle(ctx, _request())))
    assert third.responses and third.throttle_time.total_seconds() == 0


def test_a_followers_fetch_is_not_metered_by_client_quotas() -> None:
    quotas = QuotaManagers.create(clock=lambda: 0.0)
    quotas.configs.set((None, DEFAULT), {"consumer_byte_rate": "1"})
    connection = ThrottledConnection()
    ctx = context(RequestHeader(FETCH, VERSION, 3, "test", 1), connection,
                  replica_manager=FakeReplicaManager(), config={"fetch_max_bytes": 50_000},
                  quotas=quotas)
    for _ in range(3):
        response = _decoded(asyncio.run(handle(ctx, _request(replica_id=2))))
        assert response.responses and response.throttle_time.total_seconds() == 0
    assert connection.throttled == []


def test_a_consumers_max_bytes_is_bounded_by_its_quota_window() -> None:
    quotas = QuotaManagers.create(11, 1, clock=lambda: 0.0)
    quotas.configs.set((None, "test"), {"consumer_byte_rate": "100"})
    rm = FakeReplicaManager()
    ctx = context(RequestHeader(FETCH, VERSION, 3, "test", 1), ThrottledConnection(),
                  replica_manager=rm, config={"fetch_max_bytes": 50_000}, quotas=quotas)
    asyncio.run(handle(ctx, _request()))
    assert rm.calls[0][0].max_bytes == 1000  # 100 B/s x 10 windows of 1 s


# -- Fetch v13+: topics by id ------------------------------------------------------------------

T_ID = uuid.UUID("1b5c2f0e-8a40-4a7e-9d47-1f7b6f1d6a01")
GONE_ID = uuid.UUID("2c6d3a1f-9b51-4b8f-8e58-2a8c7a2e7b12")  # "gone" (the fake's unknown)


def _cache() -> MetadataCache:
    cache = MetadataCache(0)
    cache.set_topic_ids({"t": T_ID, "gone": GONE_ID})
    return cache


def _ctx_v(rm: FakeReplicaManager, version: int, cache: MetadataCache | None = None
           ) -> RequestContext:
    return context(RequestHeader(FETCH, version, 3, "test", 1), replica_manager=rm,
                   config={"fetch_max_bytes": 50_000}, fetch_sessions=FetchSessionCache(10),
                   metadata_cache=cache or _cache())


def _request_by_id(version: int, ids: list[uuid.UUID], session_id: int = 0,
                   session_epoch: int = -1) -> Any:
    values = {
        "replica_state": {"replica_id": -1, "replica_epoch": -1}, "max_wait": 500,
        "min_bytes": 100, "max_bytes": 1 << 20, "isolation_level": 0,
        "session_id": session_id, "session_epoch": session_epoch,
        "topics": [{"topic_id": tid, "partitions": [
            {"partition": 0, "current_leader_epoch": -1, "fetch_offset": 0,
             "log_start_offset": -1, "partition_max_bytes": 1000}]} for tid in ids],
        "forgotten_topics_data": [], "rack_id": "",
    }
    entity = build(apis.spec_for(FETCH).request_entity(version), values)
    return apis.decode_request(FETCH, version, apis.encode_request(entity))


def _decoded_v(chunks: list[Any], version: int) -> Any:
    body = b"".join(c.data if isinstance(c, Region) else c for c in chunks)
    return apis.decode_response(FETCH, version, body)


@pytest.mark.parametrize("version", [13, 14, 15, 16, 17])
def test_topic_ids_are_read_by_name_and_answered_by_id(version: int) -> None:
    rm = FakeReplicaManager()
    stranger = uuid.UUID(int=99)
    response = _decoded_v(asyncio.run(handle(
        _ctx_v(rm, version), _request_by_id(version, [T_ID, stranger, GONE_ID]))), version)
    # the replica manager reads by name; the unknown id is never read
    assert rm.calls[0][1] == [("t", 0, 0, 1000, -1), ("gone", 0, 0, 1000, -1)]
    assert [(t.topic_id, int(t.partitions[0].error_code)) for t in response.responses] == [
        (T_ID, 0), (stranger, ErrorCode.UNKNOWN_TOPIC_ID),
        (GONE_ID, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)]
    assert bytes(response.responses[0].partitions[0].records) == DATA


def test_an_incremental_session_by_id_follows_the_ids() -> None:
    rm = FakeReplicaManager()
    ctx = _ctx_v(rm, 13)
    full = _decoded_v(asyncio.run(handle(ctx, _request_by_id(13, [T_ID], 0, 0))), 13)
    assert full.session_id != 0 and full.responses[0].topic_id == T_ID
    nxt = _decoded_v(asyncio.run(handle(ctx, _request_by_id(13, [], full.session_id, 1))), 13)
    assert nxt.error_code == 0 and rm.calls[-1][1] == [("t", 0, 0, 1000, -1)]
    # the same session from a v12 request: refused, nothing read
    ctx12 = context(RequestHeader(FETCH, 12, 3, "test", 1), replica_manager=rm,
                    config={"fetch_max_bytes": 50_000}, fetch_sessions=ctx.services.fetch_sessions)
    calls = len(rm.calls)
    refused = _decoded_v(asyncio.run(handle(ctx12, _request_by_id(12, [], full.session_id, 2))),
                         12)
    assert refused.error_code == ErrorCode.FETCH_SESSION_TOPIC_ID_ERROR
    assert len(rm.calls) == calls


class MovedReplicaManager(FakeReplicaManager):
    async def fetch_messages(self, params: FetchParams, wanted: list[Any]
                             ) -> list[FetchResult]:
        return [FetchResult(int(ErrorCode.NOT_LEADER_OR_FOLLOWER)) for _ in wanted]


@pytest.mark.parametrize("version", [15, 16, 17])
def test_v16_names_the_new_leader_and_its_endpoint(version: int) -> None:
    # KIP-951 as Kafka 3.9 (ZooKeeper mode too): NOT_LEADER_OR_FOLLOWER carries the
    # leader the metadata cache knows, and NodeEndpoints its address on this listener
    cache = _cache()
    cache.update_brokers([BrokerInfo(2, (BrokerEndpoint("PLAINTEXT", "b2.local", 9093),),
                                     "r1")], controller_id=2)
    cache.update_partitions([PartitionState("t", 0, 2, 7, (1, 2), (1, 2))])
    ctx = _ctx_v(MovedReplicaManager(), version, cache)
    ctx.services.config.current.listeners = [SimpleNamespace(listener_name="PLAINTEXT")]
    response = _decoded_v(asyncio.run(handle(ctx, _request_by_id(version, [T_ID]))), version)
    part = response.responses[0].partitions[0]
    assert part.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
    if version < 16:
        assert part.current_leader.leader_id == -1
        return
    assert (part.current_leader.leader_id, part.current_leader.leader_epoch) == (2, 7)
    assert [(n.node_id, n.host, n.port, n.rack) for n in response.node_endpoints] == [
        (2, "b2.local", 9093, "r1")]
