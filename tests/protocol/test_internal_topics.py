"""Tests for klog.protocol.internal_topics: schemas of __consumer_offsets / __transaction_state."""

from __future__ import annotations

import contextlib
import json
import struct
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from klog.protocol import internal_topics as it
from klog.protocol.records.batch import iter_batch_headers

int8 = st.integers(-(2**7), 2**7 - 1)
int16 = st.integers(-(2**15), 2**15 - 1)
int32 = st.integers(-(2**31), 2**31 - 1)
int64 = st.integers(-(2**63), 2**63 - 1)
text = st.text(max_size=20)
blob = st.binary(max_size=40)
tagged = st.lists(
    st.tuples(st.integers(0, 1000), st.binary(max_size=8)), unique_by=lambda t: t[0], max_size=3
).map(lambda fields: tuple(sorted(fields)))


def _jsonish(message: object) -> str:
    return json.dumps(message, separators=(",", ":"), ensure_ascii=False)


# --------------------------------------------------------------------------------------------
# Round trips for every version


@given(group=text, topic=text, partition=int32, version=st.sampled_from([0, 1]))
def test_offset_commit_key_round_trip(group: str, topic: str, partition: int, version: int) -> None:
    key = it.OffsetCommitKey(group, topic, partition, version=version)
    data = key.encode()
    assert struct.unpack_from(">h", data)[0] == version
    assert it.read_offsets_key(data) == key


@given(group=text)
def test_group_metadata_key_round_trip(group: str) -> None:
    key = it.GroupMetadataKey(group)
    assert it.read_offsets_key(key.encode()) == key


@st.composite
def offset_commit_values(draw: st.DrawFn) -> it.OffsetCommitValue:
    version = draw(st.integers(0, 4))
    return it.OffsetCommitValue(
        offset=draw(int64),
        metadata=draw(text),
        commit_timestamp=draw(int64),
        leader_epoch=draw(int32) if version >= 3 else -1,
        expire_timestamp=draw(int64) if version == 1 else -1,
        version=version,
        tagged_fields=draw(tagged) if version >= 4 else (),
    )


@given(value=offset_commit_values())
def test_offset_commit_value_round_trip(value: it.OffsetCommitValue) -> None:
    data = value.encode()
    assert it.OffsetCommitValue.decode(data) == value
    assert it.read_offsets_value(it.OffsetCommitKey("g", "t", 0), data) == value


@st.composite
def group_metadata_values(draw: st.DrawFn) -> it.GroupMetadataValue:
    version = draw(st.integers(0, 4))
    flexible = version >= 4
    members = tuple(
        it.MemberMetadata(
            member_id=draw(text),
            group_instance_id=draw(st.none() | text) if version >= 3 else None,
            client_id=draw(text),
            client_host=draw(text),
            rebalance_timeout=draw(int32) if version >= 1 else 0,
            session_timeout=draw(int32),
            subscription=draw(blob),
            assignment=draw(blob),
            tagged_fields=draw(tagged) if flexible else (),
        )
        for _ in range(draw(st.integers(0, 3)))
    )
    return it.GroupMetadataValue(
        protocol_type=draw(text),
        generation=draw(int32),
        protocol=draw(st.none() | text),
        leader=draw(st.none() | text),
        current_state_timestamp=draw(int64) if version >= 2 else -1,
        members=members,
        version=version,
        tagged_fields=draw(tagged) if flexible else (),
    )


@given(value=group_metadata_values())
def test_group_metadata_value_round_trip(value: it.GroupMetadataValue) -> None:
    data = value.encode()
    assert it.GroupMetadataValue.decode(data) == value
    assert it.read_offsets_value(it.GroupMetadataKey("g"), data) == value


@given(transactional_id=text)
def test_transaction_log_key_round_trip(transactional_id: str) -> None:
    key = it.TransactionLogKey(transactional_id)
    assert it.read_transaction_log_key(key.encode()) == key


@st.composite
def transaction_log_values(draw: st.DrawFn) -> it.TransactionLogValue:
    version = draw(st.integers(0, 1))
    flexible = version >= 1
    partitions = draw(
        st.none()
        | st.lists(
            st.builds(
                it.TxnPartitions,
                topic=text,
                partition_ids=st.lists(int32, max_size=4).map(tuple),
                tagged_fields=tagged if flexible else st.just(()),
            ),
            max_size=3,
        ).map(tuple)
    )
    return it.TransactionLogValue(
        producer_id=draw(int64),
        producer_epoch=draw(int16),
        transaction_timeout_ms=draw(int32),
        transaction_status=draw(int8),
        transaction_partitions=partitions,
        transaction_last_update_timestamp_ms=draw(int64),
        transaction_start_timestamp_ms=draw(int64),
        version=version,
        tagged_fields=draw(tagged) if flexible else (),
    )


@given(value=transaction_log_values())
def test_transaction_log_value_round_trip(value: it.TransactionLogValue) -> None:
    assert it.read_transaction_log_value(value.encode()) == value


topic_partitions = st.builds(
    it.TopicPartitions, topic=text, partitions=st.lists(int32, max_size=4).map(tuple)
)


@st.composite
def subscriptions(draw: st.DrawFn) -> it.ConsumerProtocolSubscription:
    version = draw(st.integers(0, 3))
    return it.ConsumerProtocolSubscription(
        topics=tuple(draw(st.lists(text, max_size=3))),
        user_data=draw(st.none() | blob),
        owned_partitions=tuple(draw(st.lists(topic_partitions, max_size=3)))
        if version >= 1
        else (),
        generation_id=draw(int32) if version >= 2 else -1,
        rack_id=draw(st.none() | text) if version >= 3 else None,
        version=version,
    )


@given(value=subscriptions())
def test_subscription_round_trip(value: it.ConsumerProtocolSubscription) -> None:
    assert it.ConsumerProtocolSubscription.decode(value.encode()) == value


@given(
    partitions=st.lists(topic_partitions, max_size=3).map(tuple),
    user_data=st.none() | blob,
    version=st.integers(0, 3),
)
def test_assignment_round_trip(
    partitions: tuple[it.TopicPartitions, ...], user_data: bytes | None, version: int
) -> None:
    value = it.ConsumerProtocolAssignment(partitions, user_data, version=version)
    assert it.ConsumerProtocolAssignment.decode(value.encode()) == value


# --------------------------------------------------------------------------------------------
# Exact bytes and Kafka's JSON


def test_offset_commit_value_v1_layout() -> None:
    value = it.OffsetCommitValue(5, "m", 100, expire_timestamp=200, version=1)
    assert value.encode() == struct.pack(">hqh1sqq", 1, 5, 1, b"m", 100, 200)


def test_offset_commit_value_v4_is_flexible() -> None:
    value = it.OffsetCommitValue(5, "m", 100, leader_epoch=7, version=4)
    # offset, leaderEpoch, compact string (len+1 = 2), commitTimestamp, no tagged fields
    assert value.encode() == struct.pack(">hqiB1sqB", 4, 5, 7, 2, b"m", 100, 0)


def test_group_metadata_json_matches_kafka_dump_tool() -> None:
    # The expectation is Kafka's DumpLogSegmentsTest.testOffsetsMessageParser, for a group
    # whose member blobs are the consumer protocol's highest versions.
    subscription = it.ConsumerProtocolSubscription(
        topics=("foo",),
        owned_partitions=(it.TopicPartitions("foo", (0,)),),
        generation_id=0,
        rack_id="rack",
        version=3,
    )
    assignment = it.ConsumerProtocolAssignment((it.TopicPartitions("foo", (0,)),), version=3)
    value = it.GroupMetadataValue(
        protocol_type="consumer",
        generation=10,
        protocol="range",
        leader="member",
        members=(
            it.MemberMetadata(
                member_id="member",
                group_instance_id="instance",
                client_id="client",
                client_host="host",
                session_timeout=100,
                rebalance_timeout=1000,
                subscription=subscription.encode(),
                assignment=assignment.encode(),
            ),
        ),
        version=4,
    )
    assert _jsonish(value.to_kafka_json()) == (
        '{"protocolType":"consumer","generation":10,"protocol":"range",'
        '"leader":"member","currentStateTimestamp":-1,"members":[{"memberId":"member",'
        '"groupInstanceId":"instance","clientId":"client","clientHost":"host",'
        '"rebalanceTimeout":1000,"sessionTimeout":100,"subscription":{"topics":["foo"],'
        '"userData":null,"ownedPartitions":[{"topic":"foo","partitions":[0]}],'
        '"generationId":0,"rackId":"rack"},"assignment":{"assignedPartitions":'
        '[{"topic":"foo","partitions":[0]}],"userData":null}}]}'
    )
    # Malformed blobs stay as base64, as in Kafka.
    raw = replace(
        value,
        members=(
            replace(value.members[0], subscription=b"Subscription", assignment=b"Assignment"),
        ),
    )
    member = raw.to_kafka_json()["members"][0]
    assert member["subscription"] == "U3Vic2NyaXB0aW9u"
    assert member["assignment"] == "QXNzaWdubWVudA=="


def test_json_has_only_the_fields_of_the_version() -> None:
    v0 = it.OffsetCommitValue(1, "", 2, version=0).to_kafka_json()
    assert list(v0) == ["offset", "metadata", "commitTimestamp"]
    v1 = it.OffsetCommitValue(1, "", 2, version=1).to_kafka_json()
    assert list(v1) == ["offset", "metadata", "commitTimestamp", "expireTimestamp"]
    v3 = it.OffsetCommitValue(1, "", 2, version=3).to_kafka_json()
    assert list(v3) == ["offset", "leaderEpoch", "metadata", "commitTimestamp"]
    assert it.OffsetCommitKey("g", "t", 3).to_kafka_json() == {
        "group": "g",
        "topic": "t",
        "partition": 3,
    }


def test_transaction_state_names() -> None:
    value = it.TransactionLogValue(1, transaction_status=it.TransactionState.PREPARE_COMMIT)
    assert value.state_name == "PrepareCommit"
    with pytest.raises(it.InternalTopicError):
        _ = it.TransactionLogValue(1, transaction_status=42).state_name


def test_newer_consumer_protocol_versions_parse_with_the_newest_known_format() -> None:
    data = it.ConsumerProtocolSubscription(("t",), version=3).encode()
    newer = struct.pack(">h", 9) + data[2:] + b"future-field"
    parsed = it.ConsumerProtocolSubscription.decode(newer)
    assert parsed.version == 9
    assert parsed.topics == ("t",)


# --------------------------------------------------------------------------------------------
# Bad input: clear errors only


def test_unknown_versions_are_clear_errors() -> None:
    with pytest.raises(it.UnknownVersionError, match="record type 7") as info:
        it.read_offsets_key(struct.pack(">h", 7) + b"xx")
    assert info.value.version == 7
    with pytest.raises(it.UnknownVersionError, match="OffsetCommitValue version 5"):
        it.OffsetCommitValue.decode(struct.pack(">hq", 5, 1))
    with pytest.raises(it.UnknownVersionError):
        it.TransactionLogKey.decode(struct.pack(">h", 1))
    with pytest.raises(it.UnknownVersionError):
        it.ConsumerProtocolAssignment.decode(struct.pack(">h", -3))
    with pytest.raises(it.InternalTopicError, match="no version"):
        it.read_offsets_key(b"\x00")


def test_every_truncation_is_a_clear_error() -> None:
    value = it.GroupMetadataValue(
        "consumer",
        3,
        "range",
        "m",
        members=(it.MemberMetadata("m", "c", "h", 1, 2, b"s", b"a"),),
        version=4,
    )
    data = value.encode()
    for cut in range(len(data)):
        with pytest.raises(it.InternalTopicError):
            it.GroupMetadataValue.decode(data[:cut])


def test_huge_lengths_fail_before_allocating() -> None:
    # A string claiming 32767 bytes, an array claiming 2**31-1 members, bytes of 2**31-1.
    with pytest.raises(it.InternalTopicError, match="needs 32767"):
        it.GroupMetadataKey.decode(struct.pack(">hh", 2, 32767))
    huge_members = struct.pack(">hh8sihhi", 0, 8, b"consumer", 1, -1, -1, 2**31 - 1)
    with pytest.raises(it.InternalTopicError, match="cannot fit"):
        it.GroupMetadataValue.decode(huge_members)
    sub = struct.pack(">hii", 0, 0, 2**31 - 1)
    with pytest.raises(it.InternalTopicError, match="needs 2147483647"):
        it.ConsumerProtocolSubscription.decode(sub)
    with pytest.raises(it.InternalTopicError, match="invalid string length -2"):
        it.GroupMetadataKey.decode(struct.pack(">hh", 2, -2))
    with pytest.raises(it.InternalTopicError, match="varint"):
        it.OffsetCommitValue.decode(struct.pack(">hqi", 4, 1, 1) + b"\xff" * 6)


@settings(max_examples=300)
@given(data=st.binary(max_size=64))
def test_random_bytes_never_crash(data: bytes) -> None:
    for decode in (
        it.read_offsets_key,
        it.OffsetCommitValue.decode,
        it.GroupMetadataValue.decode,
        it.TransactionLogValue.decode,
        it.ConsumerProtocolSubscription.decode,
        it.ConsumerProtocolAssignment.decode,
    ):
        with contextlib.suppress(it.InternalTopicError):
            decode(data)


# --------------------------------------------------------------------------------------------
# Real data written by Kafka 2.x


def _corpus_records(datadir, partition: int):  # type: ignore[no-untyped-def]
    # kafka-python is an independent decoder of v2 batches: an oracle, not klog code.
    from kafka.record.default_records import DefaultRecordBatch

    buf = (datadir / f"__consumer_offsets-{partition}" / "00000000000000000000.log").read_bytes()
    for header in iter_batch_headers(buf):
        yield from DefaultRecordBatch(bytes(header.payload(buf)))


@pytest.mark.corpus
def test_real_consumer_offsets_decode_and_round_trip(kafka_corpus) -> None:  # type: ignore[no-untyped-def]
    counts = {}
    groups = set()
    kinds = set()
    for partition in (12, 17, 18, 32, 33):
        n = 0
        for record in _corpus_records(kafka_corpus, partition):
            key = it.read_offsets_key(record.key)
            value = it.read_offsets_value(key, record.value)
            assert key.encode() == record.key
            if value is not None:
                assert value.encode() == record.value
                kinds.add((type(value).__name__, value.version))
                json.dumps(value.to_kafka_json())
            groups.add(key.group)
            n += 1
        counts[partition] = n
    assert counts == {12: 470, 17: 3, 18: 499, 32: 50, 33: 3}
    assert "my-second-application" in groups
    assert ("OffsetCommitValue", 3) in kinds
    assert ("GroupMetadataValue", 3) in kinds
