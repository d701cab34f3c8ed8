"""Tests for klog.protocol.fetch: the FetchResponse encoder with record regions.

The reference is kio's own FetchResponse encoder (generated from Kafka's JSON schemas):
for every version 0-17 (v0-v3: klog.protocol.old_versions' entities), the chunks
``encode_fetch_response`` returns, with each region replaced by the bytes it stands for,
must be byte-for-byte what kio writes for the same response -- and what kio reads back
must be the values we put in.
"""

from __future__ import annotations

import datetime
import itertools
import uuid
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from klog.protocol import apis
from klog.protocol.entities import build
from klog.protocol.fetch import (
    MAX_VERSION,
    MIN_VERSION,
    FetchPartitionData,
    FetchTopicData,
    NodeEndpoint,
    chunks_size,
    encode_fetch_response,
    records_size,
    request_replica_id,
)

VERSIONS = list(range(MIN_VERSION, MAX_VERSION + 1))


@dataclass
class FakeRegion:
    """A region the encoder must not look inside: only its size is public."""

    size: int
    content: bytes

    def __bytes__(self) -> bytes:  # for the test's own substitution only
        return self.content


def _region(data: bytes) -> FakeRegion:
    return FakeRegion(len(data), data)


def _flatten(chunks: list[Any]) -> bytes:
    return b"".join(c if isinstance(c, (bytes, bytearray, memoryview)) else bytes(c)
                    for c in chunks)


def _kio_bytes(version: int, topics: list[FetchTopicData], throttle_time_ms: int = 0,
               error_code: int = 0, session_id: int = 0,
               node_endpoints: list[NodeEndpoint] | None = None) -> bytes:
    entity_type = apis.spec_for(1).response_entity(version)
    values = {
        "throttle_time": throttle_time_ms,
        "error_code": error_code,
        "session_id": session_id,
        "node_endpoints": [{"node_id": n.node_id, "host": n.host, "port": n.port,
                            "rack": n.rack} for n in node_endpoints or ()],
        "responses": [{
            "topic": t.topic,
            "topic_id": t.topic_id or uuid.UUID(int=0),
            "partitions": [{
                "partition_index": p.partition_index,
                "error_code": p.error_code,
                "high_watermark": p.high_watermark,
                "last_stable_offset": p.last_stable_offset,
                "log_start_offset": p.log_start_offset,
                "aborted_transactions": None if p.aborted_transactions is None else [
                    {"producer_id": pid, "first_offset": first}
                    for pid, first in p.aborted_transactions],
                "preferred_read_replica": p.preferred_read_replica,
                "records": None if p.records is None else bytes(p.records),
                **({} if p.current_leader is None else {"current_leader": {
                    "leader_id": p.current_leader[0], "leader_epoch": p.current_leader[1]}}),
            } for p in t.partitions],
        } for t in topics],
    }
    return apis.encode_response(build(entity_type, values))


def _with_regions(topics: list[FetchTopicData]) -> list[FetchTopicData]:
    """The same response with every non-empty records field as a region."""
    return [FetchTopicData(t.topic, [
        FetchPartitionData(
            p.partition_index, p.error_code, p.high_watermark, p.last_stable_offset,
            p.log_start_offset, p.aborted_transactions, p.preferred_read_replica,
            _region(bytes(p.records)) if p.records else p.records, p.current_leader,
        ) for p in t.partitions], t.topic_id) for t in topics]


# --------------------------------------------------------------------------------------------
# Against kio, example by example


def _sample_topics() -> list[FetchTopicData]:
    return [
        FetchTopicData("orders", [
            FetchPartitionData(0, 0, 42, 40, 3, None, -1, b"\x01" * 70),
            FetchPartitionData(1, 0, 7, 7, 0, [], -1, b""),
            FetchPartitionData(2, 1, 9, 9, 2, [(1000, 5), (1001, 8)], 2, None),
        ], uuid.UUID(int=0x1234)),
        FetchTopicData("caf\u00e9-\u00fc", [
            FetchPartitionData(5, 6, -1, -1, -1, None, -1, b"x" * 300,  # 2-byte varint
                               current_leader=(3, 17)),
        ], uuid.UUID("8d7b4a4e-2f0a-4c4e-9b8a-0e6f7d1c2b3a")),
        FetchTopicData("empty", [], uuid.UUID(int=2**128 - 1)),
    ]


@pytest.mark.parametrize("version", VERSIONS)
def test_bytes_records_match_kio(version: int) -> None:
    topics = _sample_topics()
    chunks = encode_fetch_response(version, topics, throttle_time_ms=17, error_code=0,
                                   session_id=0)
    assert all(isinstance(c, bytes) for c in chunks)
    assert _flatten(chunks) == _kio_bytes(version, topics, throttle_time_ms=17)


@pytest.mark.parametrize("version", VERSIONS)
def test_regions_stand_where_the_records_go(version: int) -> None:
    topics = _sample_topics()
    regions = _with_regions(topics)
    chunks = encode_fetch_response(version, regions, throttle_time_ms=17)
    # the regions are handed back as they are, in wire order, never copied
    handed_back = [c for c in chunks if isinstance(c, FakeRegion)]
    assert [r.size for r in handed_back] == [70, 300]
    assert handed_back[0] is regions[0].partitions[0].records
    assert handed_back[1] is regions[1].partitions[0].records
    # and the whole is exactly the bytes version
    assert _flatten(chunks) == _kio_bytes(version, topics, throttle_time_ms=17)
    assert chunks_size(chunks) == len(_flatten(chunks))


@pytest.mark.parametrize("version", VERSIONS)
def test_what_kio_reads_back(version: int) -> None:
    topics = _sample_topics()
    body = _flatten(encode_fetch_response(version, _with_regions(topics), throttle_time_ms=3))
    decoded = apis.decode_response(1, version, body)
    if version >= 1:
        assert decoded.throttle_time == datetime.timedelta(milliseconds=3)
    if version >= 13:
        assert [t.topic_id for t in decoded.responses] == [t.topic_id for t in topics]
    else:
        assert [t.topic for t in decoded.responses] == ["orders", "caf\u00e9-\u00fc", "empty"]
    first = decoded.responses[0].partitions
    assert [p.partition_index for p in first] == [0, 1, 2]
    assert first[0].records == b"\x01" * 70
    assert first[1].records == b""
    assert first[2].records is None
    assert first[0].high_watermark == 42
    if version < 4:
        return
    assert first[0].last_stable_offset == 40
    assert first[2].aborted_transactions[1].first_offset == 8
    assert first[0].aborted_transactions is None
    assert first[1].aborted_transactions == ()
    if version >= 5:
        assert first[0].log_start_offset == 3
    if version >= 11:
        assert first[2].preferred_read_replica == 2
    if version >= 12:
        leader = decoded.responses[1].partitions[0].current_leader
        assert (leader.leader_id, leader.leader_epoch) == (3, 17)
        assert first[0].current_leader.leader_id == -1  # left out: the default


_ENDPOINTS = [NodeEndpoint(3, "broker-3.example", 9092, "rack-a"),
              NodeEndpoint(4, "b4", 19092, None)]


@pytest.mark.parametrize("version", [v for v in VERSIONS if v >= 12])
def test_node_endpoints_from_v16(version: int) -> None:
    topics = _sample_topics()
    chunks = encode_fetch_response(version, _with_regions(topics), node_endpoints=_ENDPOINTS)
    body = _flatten(chunks)
    if version < 16:  # not in the schema: left out, as Kafka's serializer does
        assert body == _flatten(encode_fetch_response(version, topics))
        return
    assert body == _kio_bytes(version, topics, node_endpoints=_ENDPOINTS)
    decoded = apis.decode_response(1, version, body)
    assert [(n.node_id, n.host, n.port, n.rack) for n in decoded.node_endpoints] == [
        (3, "broker-3.example", 9092, "rack-a"), (4, "b4", 19092, None)]


@pytest.mark.parametrize("version", VERSIONS)
def test_request_replica_id_in_every_version(version: int) -> None:
    """v0-v14 carry ReplicaId at the top; v15+ in the tagged ReplicaState (KIP-903):
    a follower's id must be read from either, and a consumer's is -1."""
    entity_type = apis.spec_for(1).request_entity(version)
    topic = {"topic": "t", "topic_id": uuid.UUID(int=7),
             "partitions": [{"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1}]}
    common = {"max_wait": 10, "min_bytes": 1, "topics": [topic], "forgotten_topics_data": []}
    for replica_id in (-1, 2):
        values = dict(common, replica_id=replica_id,
                      replica_state={"replica_id": replica_id, "replica_epoch": -1})
        body = apis.encode_request(build(entity_type, values))
        assert request_replica_id(apis.decode_request(1, version, body)) == replica_id


@pytest.mark.parametrize("version", [v for v in VERSIONS if v >= 7])
def test_top_level_error_and_session_id(version: int) -> None:
    chunks = encode_fetch_response(version, [], error_code=70, session_id=123456)
    assert _flatten(chunks) == _kio_bytes(version, [], error_code=70, session_id=123456)
    decoded = apis.decode_response(1, version, _flatten(chunks))
    assert int(decoded.error_code) == 70 and decoded.session_id == 123456


def test_versions_4_to_6_have_no_top_level_error() -> None:
    for version in (4, 5, 6):
        assert encode_fetch_response(version, [], error_code=70, session_id=9) \
            == encode_fetch_response(version, [])


@pytest.mark.parametrize("version", [18, -1])
def test_versions_outside_0_to_17_are_refused(version: int) -> None:
    with pytest.raises(ValueError, match=f"v{version}"):
        encode_fetch_response(version, [])


def test_an_empty_region_sends_no_chunk() -> None:
    topics = [FetchTopicData("t", [FetchPartitionData(0, records=_region(b""))])]
    for version in VERSIONS:
        chunks = encode_fetch_response(version, topics)
        assert all(isinstance(c, bytes) for c in chunks)
        decoded = apis.decode_response(1, version, _flatten(chunks))
        assert decoded.responses[0].partitions[0].records == b""


def test_consecutive_regions_are_separate_chunks() -> None:
    """Two partitions' regions back to back (no framing bytes between them would be
    wrong: each partition ends with fields, and v12 with tagged fields)."""
    topics = [FetchTopicData("t", [FetchPartitionData(0, records=_region(b"a" * 10)),
                                   FetchPartitionData(1, records=_region(b"b" * 20))])]
    for version in VERSIONS:
        chunks = encode_fetch_response(version, topics)
        kinds = ["region" if isinstance(c, FakeRegion) else "bytes" for c in chunks]
        # after the last region: nothing, or (v12+) the tagged-field sections
        tail = ["bytes"] if version >= 12 else []
        assert kinds == ["bytes", "region", "bytes", "region", *tail]
        assert _flatten(chunks) == _kio_bytes(version, [FetchTopicData("t", [
            FetchPartitionData(0, records=b"a" * 10), FetchPartitionData(1, records=b"b" * 20),
        ])])


def test_records_size() -> None:
    assert records_size(None) == 0
    assert records_size(b"abc") == 3
    assert records_size(memoryview(b"abcd")) == 4
    assert records_size(bytearray(5)) == 5
    assert records_size(_region(b"x" * 9)) == 9


# --------------------------------------------------------------------------------------------
# Against kio, generated


_i32 = st.integers(-2**31, 2**31 - 1)
_i64 = st.integers(-2**63, 2**63 - 1)
_records = st.one_of(st.none(), st.binary(max_size=300))
_partitions = st.builds(
    FetchPartitionData,
    partition_index=_i32,
    error_code=st.sampled_from([0, 1, 3, 6, 74, 75]),
    high_watermark=_i64,
    last_stable_offset=_i64,
    log_start_offset=_i64,
    aborted_transactions=st.one_of(st.none(), st.lists(st.tuples(_i64, _i64), max_size=3)),
    preferred_read_replica=_i32,
    records=_records,
    current_leader=st.one_of(st.none(), st.just((-1, -1)), st.tuples(_i32, _i32)),
)
_topics = st.lists(st.builds(FetchTopicData, topic=st.text(max_size=40),
                             partitions=st.lists(_partitions, max_size=4),
                             topic_id=st.one_of(st.none(), st.uuids())), max_size=4)


@settings(max_examples=60, deadline=None, database=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(version=st.sampled_from(VERSIONS), topics=_topics, throttle=_i32,
       session_id=_i32, regions=st.booleans())
def test_generated_responses_match_kio(version: int, topics: list[FetchTopicData],
                                       throttle: int, session_id: int, regions: bool
                                       ) -> None:
    # kio's throttle_time is a timedelta of milliseconds: non-negative in practice
    throttle = abs(throttle) if throttle != -2**31 else 0
    sent = _with_regions(topics) if regions else topics
    chunks = encode_fetch_response(version, sent, throttle_time_ms=throttle,
                                   session_id=session_id)
    expected = _kio_bytes(version, topics, throttle_time_ms=throttle,
                          session_id=session_id if version >= 7 else 0)
    assert _flatten(chunks) == expected
    assert chunks_size(chunks) == len(expected)
    # no two bytes chunks in a row: the encoder only cuts where a region goes
    for a, b in itertools.pairwise(chunks):
        assert not (isinstance(a, bytes) and isinstance(b, bytes))
