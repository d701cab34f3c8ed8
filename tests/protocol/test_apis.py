"""Tests for klog.protocol.apis: the API table, header versions, request/response codecs."""

from __future__ import annotations

import datetime
import io
import struct
import subprocess
import sys
import textwrap
import time
import tracemalloc
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.index import api_key_map, schema_name_map
from kio.schema.metadata.v12.request import MetadataRequest as MetadataRequestV12
from kio.schema.produce.v3.request import ProduceRequest as ProduceRequestV3
from kio.serial import entity_writer
from kio.static.constants import EntityType
from kio.static.primitive import Records, i8, i16, i32, i64

from klog.protocol import apis, inter_broker, old_versions, transactions
from klog.protocol.errors import InvalidRequestError

# The client APIs the broker milestone lists, plus the inter-broker four, plus security's
# SaslHandshake, SaslAuthenticate, Describe/AlterUserScramCredentials.
BROKER_APIS = {
    0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24,
    25, 26, 27, 29, 30, 31, 32, 33, 35, 36, 37, 42, 43, 44, 45, 46, 47, 50, 51, 60,
}
# Issue 33's JBOD moves: AlterReplicaLogDirs.
BROKER_APIS |= {34}
# Issue 21's tools side: TxnOffsetCommit, DescribeProducers, DescribeTransactions,
# ListTransactions.
BROKER_APIS |= {28, 61, 65, 66}
# Issue 22's client quotas: DescribeClientQuotas, AlterClientQuotas.
BROKER_APIS |= {48, 49}

for _primitive in (i8, i16, i32, i64):
    _primitive.__hypothesis_hook__()  # kio registers its int strategies lazily
st.register_type_strategy(Records, st.binary(max_size=64))


# --------------------------------------------------------------------------------------------
# The table


def test_table_covers_the_broker_apis() -> None:
    assert set(apis.API_TABLE) == BROKER_APIS
    for api_key, spec in apis.API_TABLE.items():
        assert spec.api_key == api_key
        assert spec.min_version <= spec.max_version


def test_advertised_apis_are_exactly_those_with_handlers() -> None:
    # Rule: an API is advertised only once its handler is implemented and tested -- and
    # one with a handler must be announced, or clients would never use it.
    from klog.daemon.handlers.table import HANDLERS

    assert set(apis.ADVERTISED) == set(HANDLERS)
    assert apis.ADVERTISED[18] == (0, 4)
    for spec in apis.API_TABLE.values():
        if spec.advertised is not None:
            assert spec.knows(spec.advertised[0]) and spec.knows(spec.advertised[1])


# What a Kafka 3.9 broker in ZooKeeper mode serves, per api key: "validVersions" of
# clients/src/main/resources/common/message/<Name>Request.json in apache/kafka 3.9
# (the minimums are the same in every 3.x: Kafka 4.0 raised them, KIP-896; 3.7+ marks the
# oldest "deprecatedVersions" but still serves them).
KAFKA_3_RANGES = {
    0: (0, 11),  # Produce
    1: (0, 17),  # Fetch
    2: (0, 9),  # ListOffsets
    3: (0, 12),  # Metadata
    4: (0, 7),  # LeaderAndIsr
    5: (0, 4),  # StopReplica
    6: (0, 8),  # UpdateMetadata
    7: (0, 3),  # ControlledShutdown
    8: (0, 9),  # OffsetCommit
    9: (0, 9),  # OffsetFetch
    10: (0, 6),  # FindCoordinator
    11: (0, 9),  # JoinGroup
    12: (0, 4),  # Heartbeat
    13: (0, 5),  # LeaveGroup
    14: (0, 5),  # SyncGroup
    15: (0, 5),  # DescribeGroups
    16: (0, 5),  # ListGroups
    18: (0, 4),  # ApiVersions
    19: (0, 7),  # CreateTopics
    20: (0, 6),  # DeleteTopics
    21: (0, 2),  # DeleteRecords
    22: (0, 5),  # InitProducerId
    23: (0, 4),  # OffsetForLeaderEpoch
    24: (0, 5),  # AddPartitionsToTxn (v4-5: KIP-890's broker-to-broker form)
    25: (0, 4),  # AddOffsetsToTxn
    26: (0, 4),  # EndTxn
    27: (0, 1),  # WriteTxnMarkers
    28: (0, 4),  # TxnOffsetCommit
    29: (0, 3),  # DescribeAcls
    30: (0, 3),  # CreateAcls
    31: (0, 3),  # DeleteAcls
    32: (0, 4),  # DescribeConfigs
    33: (0, 2),  # AlterConfigs
    34: (0, 2),  # AlterReplicaLogDirs
    35: (0, 4),  # DescribeLogDirs
    37: (0, 3),  # CreatePartitions
    42: (0, 2),  # DeleteGroups
    43: (0, 2),  # ElectLeaders
    44: (0, 1),  # IncrementalAlterConfigs
    45: (0, 1),  # AlterPartitionReassignments (v1, KIP-860, is 4.0's; klog serves it)
    46: (0, 0),  # ListPartitionReassignments
    47: (0, 0),  # OffsetDelete
    60: (0, 1),  # DescribeCluster
    61: (0, 0),  # DescribeProducers
    65: (0, 0),  # DescribeTransactions
    66: (0, 1),  # ListTransactions (v1: KIP-994's duration filter)
}


@pytest.mark.parametrize("api_key", sorted(KAFKA_3_RANGES))
def test_advertised_ranges_start_where_kafka_3_starts(api_key: int) -> None:
    # Issue 23: clients of the 0.9/0.10 era time out against a broker that advertises
    # Kafka 4's raised minimums. Every API klog serves starts at Kafka 3.x's minimum and
    # ends at most at Kafka 3.9's maximum.
    lo, hi = apis.ADVERTISED[api_key]
    kafka_lo, kafka_hi = KAFKA_3_RANGES[api_key]
    assert lo == kafka_lo
    assert hi <= kafka_hi
    for version in range(lo, hi + 1):  # and every advertised version can be decoded
        apis.spec_for(api_key).request_entity(version)
        apis.spec_for(api_key).response_entity(version)


def test_known_is_every_decodable_range() -> None:
    assert dict(apis.KNOWN) == {
        key: (spec.min_version, spec.max_version) for key, spec in apis.API_TABLE.items()
    }


@pytest.mark.parametrize("api_key", sorted(BROKER_APIS))
def test_rows_agree_with_the_entities(api_key: int) -> None:
    spec = apis.API_TABLE[api_key]
    if spec.kio_name is None:
        _name, requests, _responses, _flex = inter_broker.INTER_BROKER_APIS[api_key]
        versions = sorted(requests)
    else:
        assert api_key_map[api_key] == spec.kio_name
        # kio's versions, and below them those klog.protocol.old_versions derives
        versions = sorted(set(schema_name_map[spec.kio_name])
                          | {v for v in range(16) if old_versions.handles(api_key, v)})
    assert versions == list(range(spec.min_version, spec.max_version + 1))
    for version in versions:
        request = spec.request_entity(version)
        response = spec.response_entity(version)
        assert request.__api_key__ == response.__api_key__ == api_key
        assert request.__version__ == response.__version__ == version
        assert request.__type__ is EntityType.request
        assert response.__type__ is EntityType.response
        assert request.__flexible__ == response.__flexible__ == spec.is_flexible(version)


def test_unknown_keys_and_versions() -> None:
    with pytest.raises(apis.UnknownApiKeyError) as excinfo:
        apis.spec_for(57)  # UpdateFeatures: not in klog's table
    assert excinfo.value.error_code == 42
    with pytest.raises(apis.UnknownApiKeyError):
        apis.decode_request(-1, 0, b"")
    with pytest.raises(apis.UnsupportedVersionError) as version_info:
        apis.decode_request(0, 14, b"")  # Produce v14: klog has none
    assert version_info.value.error_code == 35
    with pytest.raises(apis.UnsupportedVersionError):
        apis.API_TABLE[4].request_entity(7)


# --------------------------------------------------------------------------------------------
# Header versions


@pytest.mark.parametrize(
    ("api_key", "api_version", "request_header", "response_header"),
    [
        (0, 8, 1, 0),  # Produce, last non-flexible
        (0, 9, 2, 1),
        (1, 12, 2, 1),  # Fetch, first flexible
        (3, 8, 1, 0),
        (3, 9, 2, 1),  # Metadata
        (18, 0, 1, 0),
        (18, 2, 1, 0),
        (18, 3, 2, 0),  # ApiVersions: flexible request, response header v0 regardless
        (18, 4, 2, 0),
        (18, 9, 2, 0),  # a future ApiVersions version is still parsed with header v2
        (7, 0, 0, 0),  # ControlledShutdown v0: the last user of request header v0
        (7, 1, 1, 0),
        (7, 3, 2, 1),
        (4, 3, 1, 0),
        (4, 4, 2, 1),
        (47, 0, 1, 0),  # OffsetDelete: never flexible
        (60, 0, 2, 1),  # DescribeCluster: flexible from v0
    ],
)
def test_header_versions(
    api_key: int, api_version: int, request_header: int, response_header: int
) -> None:
    assert apis.request_header_version(api_key, api_version) == request_header
    assert apis.response_header_version(api_key, api_version) == response_header


# --------------------------------------------------------------------------------------------
# Round trips at the lowest and highest version of every API


def _edge_versions() -> list[tuple[int, int, EntityType]]:
    cases = []
    for spec in apis.API_TABLE.values():
        for version in sorted({spec.min_version, spec.max_version}):
            cases.extend((spec.api_key, version, kind)
                         for kind in (EntityType.request, EntityType.response))
    return cases


EDGE_VERSIONS = _edge_versions()


def _ms(value: Any) -> int:
    if isinstance(value, datetime.timedelta):
        return value // datetime.timedelta(milliseconds=1)
    return (value - datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)) \
        // datetime.timedelta(milliseconds=1)


def _plain_describe_transactions(entity: Any) -> transactions.DescribeTransactionsResponse:
    return transactions.DescribeTransactionsResponse(_ms(entity.throttle_time), tuple(
        transactions.DescribedTransaction(
            s.error_code, s.transactional_id, s.transaction_state, _ms(s.transaction_timeout),
            _ms(s.transaction_start_time), s.producer_id, s.producer_epoch,
            tuple(transactions.DescribedTopic(t.topic, tuple(t.partitions)) for t in s.topics))
        for s in entity.transaction_states))


@pytest.mark.parametrize(
    ("api_key", "version", "kind"),
    EDGE_VERSIONS,
    ids=[f"{apis.API_TABLE[k].name}-v{v}-{kind.name}" for k, v, kind in EDGE_VERSIONS],
)
def test_round_trip(api_key: int, version: int, kind: EntityType) -> None:
    spec = apis.API_TABLE[api_key]
    cls = spec.request_entity(version) if kind is EntityType.request else spec.response_entity(
        version
    )

    @settings(
        max_examples=5, deadline=None, database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(st.from_type(cls))
    def check(entity: object) -> None:
        if kind is EntityType.request:
            data = apis.encode_request(entity)
            decoded = apis.decode_request(api_key, version, data)
        else:
            data = apis.encode_response(entity)
            decoded = apis.decode_response(api_key, version, data)
        if kind is EntityType.response and api_key == transactions.DESCRIBE_TRANSACTIONS:
            # Decoded by hand into plain values (klog/protocol/transactions.py).
            assert decoded == _plain_describe_transactions(entity)
            return
        assert decoded == entity
        assert type(decoded) is cls

    check()


def test_records_stay_bytes() -> None:
    batch = bytes(range(61)) * 3  # opaque: the decoder must not look inside
    body = (
        struct.pack(">hhi", -1, 1, 1000)  # transactional_id null, acks, timeout
        + struct.pack(">i", 1) + struct.pack(">h", 1) + b"t"
        + struct.pack(">i", 1) + struct.pack(">i", 0)
        + struct.pack(">i", len(batch)) + batch
    )
    request = apis.decode_request(0, 3, memoryview(body))
    records = request.topic_data[0].partition_data[0].records
    # Produce v3-v11 take klog.protocol.produce's path: a slice of the body, not a copy.
    assert isinstance(records, memoryview)
    assert records == batch


def test_decode_accepts_memoryview_slices_and_ignores_trailing_bytes() -> None:
    body = apis.encode_request(
        ApiVersionsRequest(client_software_name="kcat", client_software_version="1.7")
    )
    framed = memoryview(b"\x00" * 9 + body + b"trailing")[9:]
    request = apis.decode_request(18, 3, framed)
    assert request.client_software_name == "kcat"


# --------------------------------------------------------------------------------------------
# Bad input: typed errors only


def test_truncated_bodies_are_invalid_requests() -> None:
    body = apis.encode_request(
        ApiVersionsRequest(client_software_name="kcat", client_software_version="1.7")
    )
    for cut in range(len(body)):
        with pytest.raises(InvalidRequestError):
            apis.decode_request(18, 3, body[:cut])


def test_null_where_the_schema_forbids_it() -> None:
    # Produce v3 with topic_data encoded as a null array: kio hands back None; Kafka refuses.
    body = struct.pack(">hhi", -1, 1, 1000) + struct.pack(">i", -1)
    with pytest.raises(InvalidRequestError, match="not nullable"):
        apis.decode_request(0, 3, body)
    # ...and nested: a topic whose partition_data array is null
    body = struct.pack(">hhi", -1, 1, 1000) + struct.pack(">ih", 1, 1) + b"t" + struct.pack(
        ">i", -1
    )
    with pytest.raises(InvalidRequestError, match="partition_data"):
        apis.decode_request(0, 3, body)
    # a nullable array may be null: Metadata v12 topics=null means "all topics"
    body = b"\x00" + b"\x00" + b"\x00" + b"\x00"  # topics null, two bools, no tags
    assert apis.decode_request(3, 12, body).topics is None


def test_null_string_where_forbidden() -> None:
    with pytest.raises(InvalidRequestError):
        apis.decode_request(18, 3, b"\x00\x01\x00")  # compact string length 0 = null


def test_unknown_tagged_field_is_an_invalid_request_not_a_crash() -> None:
    # kio's reader refuses tags it does not know (the spec says skip them): it must at
    # least surface as a typed error.
    body = b"\x02a\x021" + b"\x01" + b"\x05\x03xyz"
    with pytest.raises(InvalidRequestError):
        apis.decode_request(18, 3, body)


def test_unknown_error_code_in_a_response_is_invalid() -> None:
    with pytest.raises(InvalidRequestError):
        apis.decode_response(18, 0, struct.pack(">hi", 0x7F00, 0))


def _measure(fn: object) -> tuple[int, float]:
    tracemalloc.start()
    started = time.perf_counter()
    try:
        fn()  # type: ignore[operator]
    finally:
        elapsed = time.perf_counter() - started
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    return peak, elapsed


HOSTILE_BODIES = [
    # Produce v3: topic_data claims 2**31 - 1 topics, then nothing
    (0, 3, struct.pack(">hhi", -1, 1, 1000) + struct.pack(">i", 2**31 - 1)),
    # Produce v3: a records field claiming 2**31 - 1 bytes
    (0, 3, struct.pack(">hhi", -1, 1, 1000) + struct.pack(">ih", 1, 1) + b"t"
     + struct.pack(">ii", 1, 0) + struct.pack(">i", 2**31 - 1) + b"xx"),
    # Produce v9 (flexible): compact records claiming 2**32 - 2 bytes
    (0, 9, b"\x00" + struct.pack(">hi", 1, 1000) + b"\x02\x02t\x02" + struct.pack(">i", 0)
     + b"\xff\xff\xff\xff\x0f"),
    # Metadata v12: compact topics array claiming 2**32 - 2 items (5 bytes in all)
    (3, 12, b"\xff\xff\xff\xff\x0f"),
    # Metadata v4: a topic name claiming 32767 bytes
    (3, 4, struct.pack(">ih", 1, 0x7FFF) + b"ab"),
    # Fetch v12: a tagged field claiming more bytes than remain
    (1, 12, struct.pack(">iiiibii", -1, -1, 500, 1, 1, 0, 0) + b"\x01\x01\x01"
     + b"\x01\x01\x00\xff\xff\x0f"),
    # LeaderAndIsr v2 (own entity): partition states claiming 2**31 - 1 items
    (4, 2, struct.pack(">iiq", 1, 1, 1) + struct.pack(">ih", 1, 1) + b"t"
     + struct.pack(">i", 2**31 - 1)),
    # UpdateMetadata v6 (flexible): live brokers claiming 2**32 - 2 items
    (6, 6, struct.pack(">iiq", 1, 1, 1) + b"\x01" + b"\xff\xff\xff\xff\x0f"),
]
HOSTILE_IDS = [
    "array", "records", "compact-records", "compact-array", "string", "tagged-field",
    "own-array", "own-compact-array",
]


@pytest.mark.parametrize(("api_key", "version", "body"), HOSTILE_BODIES, ids=HOSTILE_IDS)
def test_huge_claimed_lengths_never_reach_kio(
    api_key: int, version: int, body: bytes, monkeypatch: pytest.MonkeyPatch
) -> None:
    # kio's native reader reserves storage for a claimed array count before reading any
    # item (Vec::with_capacity): on the 5-byte Metadata body it asks for 32 GiB and Rust
    # aborts the process. The pre-check walk must stop every such body first.
    def kio_must_not_run(entity_type: type) -> object:
        raise AssertionError(f"kio reader reached for {entity_type.__name__}")

    monkeypatch.setattr(apis, "_reader", kio_must_not_run)

    def decode() -> None:
        with pytest.raises(InvalidRequestError):
            apis.decode_request(api_key, version, body)

    peak, elapsed = _measure(decode)
    assert peak < 1_000_000, f"decoder allocated {peak} bytes for a {len(body)}-byte body"
    assert elapsed < 1.0


def test_hostile_bodies_under_an_address_space_limit(tmp_path: Path) -> None:
    # tracemalloc cannot see the native allocator; a 1 GiB RLIMIT_AS can: without the
    # pre-check the child aborts (SIGABRT) on the first compact-array body.
    script = tmp_path / "hostile.py"
    script.write_text(textwrap.dedent(f"""
        import resource
        resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))
        from klog.protocol import apis
        from klog.protocol.errors import InvalidRequestError
        for api_key, version, body in {HOSTILE_BODIES!r}:
            try:
                apis.decode_request(api_key, version, body)
            except InvalidRequestError:
                pass
            else:
                raise SystemExit(f"accepted {{api_key}} v{{version}}")
        print("all refused")
    """))
    result = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=60,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip() == "all refused"


def test_precheck_plans_compile_for_every_version() -> None:
    for spec in apis.API_TABLE.values():
        for version in range(spec.min_version, spec.max_version + 1):
            for cls in (spec.request_entity(version), spec.response_entity(version)):
                plan = apis._plan(cls)
                assert plan.flexible == cls.__flexible__
                assert plan.min_size >= (1 if cls.__flexible__ else 0)


def test_encode_is_kio_encoding() -> None:
    entity = MetadataRequestV12(
        topics=None, allow_auto_topic_creation=True, include_topic_authorized_operations=False
    )
    buffer = io.BytesIO()
    entity_writer(MetadataRequestV12)(buffer, entity)
    assert apis.encode_request(entity) == buffer.getvalue() == b"\x00\x01\x00\x00"
    assert apis.decode_request(3, 12, buffer.getvalue()) == entity


def test_decode_request_checks_version_before_bytes() -> None:
    with pytest.raises(apis.UnsupportedVersionError):
        apis.decode_request(0, 14, b"garbage")
    assert ProduceRequestV3.__version__ == apis.API_TABLE[0].min_version + 3
