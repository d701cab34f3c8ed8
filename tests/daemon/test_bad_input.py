"""Bad input against a live broker: each class gets the right error code or a closed
connection; no crash, no hang, no unbounded allocation, nothing appended, and other
connections unaffected.

One broker process (``klog.testing``) serves the whole module, so that a crash shows as a
dead process rather than taking pytest down, and its memory can be measured. Throughout,
a healthy client on its own connection produces and fetches in a background thread; every
test ends by checking that it never failed and kept making progress.

The two fuzzers are bounded for the suite; for a longer campaign set KLOG_FUZZ_FRAMES
(random frames, default 3000), KLOG_FUZZ_EXAMPLES (hypothesis examples per API version,
default 12) and KLOG_FUZZ_SEED (the random loop's seed; hypothesis is then not
derandomized either).
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import os
import random
import select
import socket
import struct
import time
from collections.abc import Iterator
from typing import Any

import pytest
import zstandard
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.schema.types import TopicName
from kio.static.primitive import Records, i8, i16, i32, i64

from klog.protocol import apis, framing
from klog.protocol.records.batch import (
    ATTRIBUTES_OFFSET,
    CRC_OFFSET,
    CompressionType,
    crc32c,
    iter_batch_headers,
)
from klog.protocol.records.compression import compress
from klog.protocol.records.legacy import build_legacy_message_set
from klog.protocol.records.v2 import build_batch, encode_record
from klog.protocol.records.varint import write_unsigned_varlong, write_varint
from klog.testing import KlogBroker
from tests.daemon.hostile import (
    BackgroundClient,
    module_broker,
    requested_wait,
    unexpected_log_lines,
)
from tests.daemon.wire import (
    WireClient,
    batch,
    closed_without_answer,
    drain_until_closed,
    fetch_values,
    proc_status_bytes,
    produce_values,
    reset_on_close,
    rss_bytes,
)

MESSAGE_MAX_BYTES = 64 * 1024
REQUEST_MAX_BYTES = 4 * 1024 * 1024
CORRUPT_MESSAGE = 2
INVALID_RECORD = 87
API_VERSIONS_BODY = {"client_software_name": "wire", "client_software_version": "1.0"}
FUZZ_FRAMES = int(os.environ.get("KLOG_FUZZ_FRAMES", "3000"))
FUZZ_EXAMPLES = int(os.environ.get("KLOG_FUZZ_EXAMPLES", "12"))
FUZZ_SEED = os.environ.get("KLOG_FUZZ_SEED")

for _primitive in (i8, i16, i32, i64):
    _primitive.__hypothesis_hook__()  # kio registers its int strategies lazily
# Generated requests name the module's "scratch" topic half of the time (so they reach
# the partitions, not just UNKNOWN_TOPIC_OR_PARTITION), and carry valid batches as often
# as random bytes.
st.register_type_strategy(TopicName, st.one_of(st.just(TopicName("scratch")),
                                               st.text(max_size=30).map(TopicName)))
st.register_type_strategy(Records, st.one_of(
    st.binary(max_size=256),
    st.integers(1, 5).map(lambda n: build_batch([(0, None, b"s")] * n)),
))


# --------------------------------------------------------------------------------------------
# The module's broker and its healthy client


class Live:
    """The module's broker, its healthy client, and helpers to talk to it."""

    def __init__(self, broker: KlogBroker, healthy: BackgroundClient) -> None:
        self.broker = broker
        self.healthy = healthy
        self.address = ("127.0.0.1", broker.port)

    def connect(self) -> WireClient:
        return WireClient(self.address, timeout=10)

    def alive(self) -> bool:
        return self.broker.process is not None and self.broker.process.poll() is None

    @property
    def pid(self) -> int:
        assert self.broker.process is not None
        return self.broker.process.pid

    def log_end_offset(self, topic: str, partition: int = 0) -> int:
        with self.connect() as client:
            response = client.call(2, 7, {
                "replica_id": -1, "isolation_level": 0,
                "topics": [{"name": topic, "partitions": [
                    {"partition_index": partition, "current_leader_epoch": -1,
                     "timestamp": -1}]}],
            })
        part = response.topics[0].partitions[0]
        assert part.error_code == 0, part
        return part.offset

    def peak_rss(self) -> int:
        return proc_status_bytes(self.pid, "VmHWM")

    def unexpected_errors(self) -> list[str]:
        return unexpected_log_lines(self.broker)


# Topics with configs of their own (made by ``live``; see "Records that do not decode").
CONFIGURED_TOPICS = {
    "recompressed": {"compression.type": "lz4", "max.message.bytes": str(16 << 20)},
    "compacted": {"cleanup.policy": "compact"},
}


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    with module_broker(tmp_path_factory.mktemp("bad-input"),
                       message_max_bytes=MESSAGE_MAX_BYTES,
                       request_max_bytes=REQUEST_MAX_BYTES,
                       topics=("healthy", "target", "other", "scratch"),
                       configured_topics=CONFIGURED_TOPICS) as broker:
        healthy = BackgroundClient(broker.port, "healthy", name="healthy-client",
                                   value_prefix=b"healthy", timeout=10, pause=0.01,
                                   round_limit=5)
        healthy.start()
        yield Live(broker, healthy)
        healthy.stop(15)
        assert not healthy.failures, healthy.failures


@pytest.fixture
def target(live: Live) -> Iterator[Live]:
    """Per test: the broker is alive afterwards, the healthy client is fine, and the
    target topic's log end offset is what the test says (checked by the test)."""
    assert live.alive()
    yield live
    assert live.alive(), live.broker.log_tail()
    live.healthy.check()
    assert live.unexpected_errors() == []


def _send_expect_close(live: Live, payload: bytes, *, raw: bool = False,
                       timeout: float = 5.0) -> float:
    """Send one frame (``payload`` with its size prefix, or ``raw`` bytes as they are);
    assert the broker closes the connection without answering; return how long it took."""
    with live.connect() as client:
        start = time.monotonic()
        client.send_raw(payload if raw else framing.encode_frame(payload))
        assert closed_without_answer(client.sock, timeout), payload[:64]
        return time.monotonic() - start


def _header(api_key: int, version: int, correlation_id: int = 1,
            client_id: str | None = "bad") -> bytes:
    return framing.encode_request_header(api_key, version, correlation_id, client_id)


# --------------------------------------------------------------------------------------------
# Framing


@pytest.mark.parametrize("size", [-1, -2**31, REQUEST_MAX_BYTES + 1, 2**31 - 1])
def test_frame_sizes_out_of_bounds_close_the_connection_at_once(target: Live, size: int
                                                                ) -> None:
    before = target.peak_rss()
    elapsed = _send_expect_close(target, struct.pack(">i", size) + b"\x00\x12\x00\x00",
                                 raw=True)
    assert elapsed < 2.0
    assert target.peak_rss() - before < 16 << 20  # nothing was allocated for the claim


def test_a_frame_within_the_limit_is_read(target: Live) -> None:
    """socket.request.max.bytes is the largest payload accepted, not one byte less."""
    body = apis.encode_request(apis.spec_for(18).request_entity(0)())
    header = _header(18, 0, 5)
    payload = header + body
    payload += b"\x00" * (REQUEST_MAX_BYTES - len(payload))  # trailing bytes are ignored
    with target.connect() as client:
        client.send_raw(framing.encode_frame(payload))
        got, response = client.recv_response(18, 0)
        assert got == 5 and response.error_code == 0


@pytest.mark.parametrize("payload", [
    b"",                                   # no header at all
    b"\x00\x12\x00",                       # 3 bytes of header
    b"\x00\x12\x00\x00\x00\x00\x00",       # 7 bytes: no correlation id end
    b"\x00\x12\x00\x00\x00\x00\x00\x01\x00",  # client_id length cut
    b"\x00\x12\x00\x00\x00\x00\x00\x01\x00\x10abc",  # client_id longer than the frame
    b"\x00\x12\x00\x00\x00\x00\x00\x01\xff\xfe",  # client_id length -2
    b"\x00\x03\x00\x0c\x00\x00\x00\x01\x00\x00",  # header v2 without its tagged fields
    b"\x00\x03\x00\x0c\x00\x00\x00\x01\x00\x00\xff\xff\xff\xff\x0f",  # 2**32-1 tags
    b"\x00\x03\x00\x0c\x00\x00\x00\x01\x00\x00\x01\x00\x7f",  # a tag longer than the frame
    b"\x00\x03\x00\x0c\x00\x00\x00\x01\x00\x00\xff\xff\xff\xff\xff\x01",  # 6-byte varint
], ids=["empty", "3-bytes", "7-bytes", "client-id-cut", "client-id-long",
        "client-id-negative", "no-tagged-fields", "tag-count-huge", "tag-size-huge",
        "varint-too-long"])
def test_truncated_or_malformed_headers_close_the_connection(target: Live, payload: bytes
                                                             ) -> None:
    _send_expect_close(target, payload)


def test_a_frame_cut_short_then_abandoned_leaves_nothing_behind(target: Live) -> None:
    for cut in (1, 3, 4, 5, 20):
        frame = framing.encode_request(18, 0, 1, "x", b"")
        with target.connect() as client:
            client.send_raw((struct.pack(">i", 200) + frame[4:])[:cut])
    with target.connect() as client:  # the broker is not stuck on any of them
        assert client.call(18, 3, API_VERSIONS_BODY).error_code == 0


# 4-7: the inter-broker control APIs, which a standalone broker does not serve. (27,
# WriteTxnMarkers, it serves: `klog transactions abort` sends it, as to Kafka's brokers.)
@pytest.mark.parametrize("api_key", [-1, 57, 62, 67, 999, 32767, 4, 5, 6, 7])
def test_unknown_or_unadvertised_api_keys_close_the_connection(target: Live, api_key: int
                                                               ) -> None:
    _send_expect_close(target, struct.pack(">hhi", api_key, 0, 1) + b"\x00\x03bad" + b"\0" * 16)


@pytest.mark.parametrize("api_key, version", [
    (0, 10), (0, 13), (0, -1), (1, 13), (1, 18), (3, 13),
    (2, 8), (19, 8), (20, 7), (60, 2), (24, 4), (26, 4), (29, 4), (30, 4), (31, 4),
])
def test_versions_not_advertised_close_the_connection(target: Live, api_key: int,
                                                      version: int) -> None:
    _send_expect_close(target, struct.pack(">hhi", api_key, version, 1) + b"\x00\x03bad"
                       + b"\0" * 32)


def test_garbage_bodies_for_every_advertised_api_and_version(target: Live) -> None:
    """Random bodies under a valid header: each is answered (then in the right format and
    correlation id) or its connection closed; nothing else happens. Every API this
    (standalone) broker advertises; the control APIs it does not are never answered."""
    rng = random.Random(1234)
    answered = closed = 0
    for api_key, (low, high) in sorted(apis.ADVERTISED.items()):
        if api_key == 0:
            continue  # Produce is fuzzed below with the target topic's guard
        for version in range(low, high + 1):
            for length in (0, 1, 7, 64, 300):
                body = bytes(rng.getrandbits(8) for _ in range(length))
                with target.connect() as client:
                    client.send_raw(framing.encode_frame(_header(api_key, version, 77) + body))
                    client.sock.shutdown(socket.SHUT_WR)
                    try:
                        got, _response = client.recv_response(api_key, version)
                    except ConnectionError:
                        closed += 1
                        continue
                    assert got == 77
                    assert api_key not in apis.INTER_BROKER_CONTROL_APIS, (api_key, version)
                    answered += 1
    assert closed > answered  # random bytes rarely make a valid request


# --------------------------------------------------------------------------------------------
# Huge length fields


def _i32(n: int) -> bytes:
    return struct.pack(">i", n)


_HUGE_UVARINT = b"\xff\xff\xff\xff\x0f"  # 2**32 - 1

HUGE_CLAIMS = {
    "metadata-v1-topics": (3, 1, _i32(2**31 - 1)),
    "metadata-v12-topics": (3, 12, _HUGE_UVARINT),
    "produce-v3-topics": (0, 3, b"\xff\xff\x00\x01" + _i32(5000) + _i32(2**31 - 1)),
    "produce-v9-topics": (0, 9, b"\x00\x00\x01" + _i32(5000) + _HUGE_UVARINT),
    "produce-v3-partitions": (0, 3, b"\xff\xff\x00\x01" + _i32(5000) + _i32(1)
                              + b"\x00\x06target" + _i32(2**31 - 1)),
    "produce-v3-records": (0, 3, b"\xff\xff\x00\x01" + _i32(5000) + _i32(1)
                           + b"\x00\x06target" + _i32(1) + _i32(0) + _i32(2**31 - 1)
                           + b"\x00" * 16),
    "produce-v9-records": (0, 9, b"\x00\x00\x01" + _i32(5000) + b"\x02\x07target\x02"
                           + _i32(0) + _HUGE_UVARINT + b"\x00" * 16),
    "fetch-v4-topics": (1, 4, _i32(-1) + _i32(500) + _i32(1) + _i32(1 << 20) + b"\x00"
                        + _i32(2**31 - 1)),
    "fetch-v12-topics": (1, 12, _i32(-1) + _i32(500) + _i32(1) + _i32(1 << 20) + b"\x00"
                         + _i32(0) + _i32(-1) + _HUGE_UVARINT),
    "list-offsets-v1-topics": (2, 1, _i32(-1) + _i32(2**31 - 1)),
    "api-versions-v3-name": (18, 3, _HUGE_UVARINT + b"x"),
    "create-topics-v2-topics": (19, 2, _i32(2**31 - 1)),
    "create-topics-v5-configs": (19, 5, b"\x02\x02x" + _i32(1) + b"\x00\x01\x01"
                                 + _HUGE_UVARINT),
    "delete-topics-v1-names": (20, 1, _i32(2**31 - 1)),
    "describe-configs-v1-keys": (32, 1, _i32(1) + b"\x02\x00\x01x" + _i32(2**31 - 1)),
    "metadata-v4-topic-name": (3, 4, _i32(1) + b"\x7f\xff" + b"abc"),
}


@pytest.mark.parametrize("name", sorted(HUGE_CLAIMS))
def test_huge_array_and_length_claims_close_the_connection_without_allocating(
        target: Live, name: str) -> None:
    api_key, version, body = HUGE_CLAIMS[name]
    before = target.peak_rss()
    elapsed = _send_expect_close(target, _header(api_key, version) + body)
    assert elapsed < 2.0
    assert target.peak_rss() - before < 16 << 20


# --------------------------------------------------------------------------------------------
# Produce: corrupt batches, sizes, missing partitions


def _produce(live: Live, records: bytes | None, topic: str = "target", partition: int = 0,
             acks: int = 1, version: int = 9) -> Any:
    with live.connect() as client:
        return client.produce(topic, partition, records, acks=acks, version=version) \
            .responses[0].partition_responses[0]


def _fix_crc(data: bytearray, position: int = 0) -> bytearray:
    length = struct.unpack_from(">i", data, position + 8)[0]
    crc = crc32c(memoryview(data)[position + ATTRIBUTES_OFFSET:position + 12 + length])
    struct.pack_into(">I", data, position + CRC_OFFSET, crc)
    return data


def _valid(n: int = 3) -> bytearray:
    return bytearray(batch(n, b"payload-bytes"))


def _corrupt_records_byte() -> bytes:
    b = _valid()
    b[-3] ^= 0x40
    return bytes(b)


def _corrupt_crc_field() -> bytes:
    b = _valid()
    b[CRC_OFFSET] ^= 0x01
    return bytes(b)


def _corrupt_attributes() -> bytes:
    b = _valid()
    b[ATTRIBUTES_OFFSET + 1] ^= 0x08  # the timestamp type bit, covered by the CRC
    return bytes(b)


def _length_claims_more() -> bytes:
    b = _valid()
    struct.pack_into(">i", b, 8, struct.unpack_from(">i", b, 8)[0] + 10)
    return bytes(b)


def _length_claims_less() -> bytes:
    b = _valid()
    struct.pack_into(">i", b, 8, struct.unpack_from(">i", b, 8)[0] - 5)
    return bytes(b)


def _length_huge() -> bytes:
    b = _valid()
    struct.pack_into(">i", b, 8, 2**31 - 1)
    return bytes(b)


def _length_tiny() -> bytes:
    b = _valid()
    struct.pack_into(">i", b, 8, 0)
    return bytes(b)


def _truncated_batch() -> bytes:
    return bytes(_valid()[:-7])


def _good_then_corrupt() -> bytes:
    return bytes(_valid()) + _corrupt_records_byte()


def _good_then_garbage_tail() -> bytes:
    return bytes(_valid()) + b"\x00\x00\x00"


def _negative_last_offset_delta() -> bytes:
    b = _valid()
    struct.pack_into(">i", b, 23, -1)
    return bytes(_fix_crc(b))


def _count_disagrees() -> bytes:
    b = _valid(3)
    struct.pack_into(">i", b, 57, 7)  # records count 7, lastOffsetDelta 2
    return bytes(_fix_crc(b))


def _unknown_magic() -> bytes:
    b = _valid()
    b[16] = 3
    return bytes(b)


def _legacy_v1() -> bytes:
    return build_legacy_message_set([(int(time.time() * 1000), b"k", b"v")], magic=1)


def _control_batch() -> bytes:
    return build_batch([(int(time.time() * 1000), b"\x00\x00\x00\x00", b"\x00" * 6)],
                       is_control=True, producer_id=1, producer_epoch=0)


def _garbage() -> bytes:
    return bytes(random.Random(5).getrandbits(8) for _ in range(200))


CORRUPT_BATCHES = {
    "crc-records-byte": (_corrupt_records_byte, {CORRUPT_MESSAGE}),
    "crc-field": (_corrupt_crc_field, {CORRUPT_MESSAGE}),
    "crc-attributes": (_corrupt_attributes, {CORRUPT_MESSAGE}),
    "length-claims-more": (_length_claims_more, {CORRUPT_MESSAGE, INVALID_RECORD}),
    "length-claims-less": (_length_claims_less, {CORRUPT_MESSAGE, INVALID_RECORD}),
    "length-huge": (_length_huge, {CORRUPT_MESSAGE, INVALID_RECORD}),
    "length-tiny": (_length_tiny, {CORRUPT_MESSAGE, INVALID_RECORD}),
    "truncated": (_truncated_batch, {CORRUPT_MESSAGE, INVALID_RECORD}),
    # a second batch at all is INVALID_RECORD from v3 (Kafka's ProduceRequest.validateRecords)
    "good-then-corrupt": (_good_then_corrupt, {INVALID_RECORD}),
    "good-then-garbage-tail": (_good_then_garbage_tail, {CORRUPT_MESSAGE, INVALID_RECORD}),
    "negative-last-offset-delta": (_negative_last_offset_delta,
                                   {CORRUPT_MESSAGE, INVALID_RECORD}),
    "count-disagrees": (_count_disagrees, {CORRUPT_MESSAGE, INVALID_RECORD}),
    "unknown-magic": (_unknown_magic, {CORRUPT_MESSAGE, INVALID_RECORD}),
    "legacy-magic-1": (_legacy_v1, {INVALID_RECORD}),
    "control-batch": (_control_batch, {INVALID_RECORD}),
    "garbage": (_garbage, {CORRUPT_MESSAGE, INVALID_RECORD}),
    "empty": (lambda: b"", {CORRUPT_MESSAGE, INVALID_RECORD}),
    "null": (lambda: None, {CORRUPT_MESSAGE, INVALID_RECORD}),
}


@pytest.mark.parametrize("name", sorted(CORRUPT_BATCHES))
@pytest.mark.parametrize("version", [3, 9])
def test_corrupt_batches_get_an_error_and_append_nothing(target: Live, name: str,
                                                         version: int) -> None:
    make, expected = CORRUPT_BATCHES[name]
    leo = target.log_end_offset("target")
    part = _produce(target, make(), version=version)
    assert int(part.error_code) in expected, part
    assert part.base_offset == -1
    assert target.log_end_offset("target") == leo


def test_corrupt_partition_beside_a_good_one_in_the_same_request(target: Live) -> None:
    """Errors are per partition: the good partition is appended, the corrupt one is not."""
    leo = [target.log_end_offset("target", p) for p in (0, 1)]
    with target.connect() as client:
        response = client.call(0, 9, {
            "transactional_id": None, "acks": 1, "timeout": 5000,
            "topic_data": [{"name": "target", "partition_data": [
                {"index": 0, "records": _corrupt_records_byte()},
                {"index": 1, "records": batch(2)},
            ]}],
        })
    parts = {p.index: p for p in response.responses[0].partition_responses}
    assert parts[0].error_code == CORRUPT_MESSAGE and parts[0].base_offset == -1
    assert parts[1].error_code == 0 and parts[1].base_offset == leo[1]
    assert target.log_end_offset("target", 0) == leo[0]
    assert target.log_end_offset("target", 1) == leo[1] + 2


def test_corrupt_batch_with_acks_0_closes_the_connection(target: Live) -> None:
    """acks=0 gets no answer, so Kafka closes the connection to tell the producer."""
    leo = target.log_end_offset("target")
    with target.connect() as client:
        client.send(0, 9, produce_values("target", 0, _corrupt_records_byte(), acks=0))
        assert closed_without_answer(client.sock)
    assert target.log_end_offset("target") == leo


def test_oversized_batch_gets_message_too_large(target: Live) -> None:
    leo = target.log_end_offset("target")
    big = batch(1, b"x" * MESSAGE_MAX_BYTES)
    part = _produce(target, big)
    assert part.error_code == 10  # MESSAGE_TOO_LARGE
    assert target.log_end_offset("target") == leo
    # exactly at the limit is accepted
    fits = batch(1, b"x" * (MESSAGE_MAX_BYTES - 200))
    fits = batch(1, b"x" * (MESSAGE_MAX_BYTES - 200 + MESSAGE_MAX_BYTES - len(fits)))
    assert len(fits) == MESSAGE_MAX_BYTES
    part = _produce(target, fits)
    assert part.error_code == 0
    assert target.log_end_offset("target") == leo + 1


def test_request_larger_than_socket_request_max_bytes_is_refused(target: Live) -> None:
    frame = framing.encode_request(0, 9, 1, "bad", b"\x00" * (REQUEST_MAX_BYTES + 1))
    with target.connect() as client:
        client.send_raw(frame[:64])  # the size alone decides
        assert closed_without_answer(client.sock)


@pytest.mark.parametrize("topic, partition", [("target", 7), ("target", -1),
                                              ("no-such-topic", 0)])
def test_produce_to_a_partition_that_does_not_exist(target: Live, topic: str,
                                                    partition: int) -> None:
    part = _produce(target, batch(1), topic=topic, partition=partition)
    assert part.error_code == 3  # UNKNOWN_TOPIC_OR_PARTITION
    with target.connect() as client:  # and produce did not create it
        response = client.metadata([topic], auto_create=False)
        if topic == "target":
            assert sorted(p.partition_index for p in response.topics[0].partitions) == [0, 1]
        else:
            assert response.topics[0].error_code == 3


def test_invalid_required_acks(target: Live) -> None:
    leo = target.log_end_offset("target")
    part = _produce(target, batch(1), acks=2)
    assert part.error_code == 21  # INVALID_REQUIRED_ACKS
    assert target.log_end_offset("target") == leo


@pytest.mark.parametrize("name", ["../escape", "a/b", ".", "..", "", "x" * 250, "caf\u00e9",
                                  "with space"])
def test_metadata_auto_creation_refuses_illegal_topic_names(target: Live, name: str) -> None:
    with target.connect() as client:
        response = client.metadata([name], auto_create=True)
    assert response.topics[0].error_code == 17  # INVALID_TOPIC_EXCEPTION
    log_dir = target.broker.log_dir
    assert not (log_dir.parent / "escape-0").exists()
    assert not (log_dir / "a").exists()
    assert not [p for p in log_dir.iterdir() if p.name.startswith((name + "-", "caf"))]


def test_fetch_of_a_missing_partition_or_offset(target: Live) -> None:
    with target.connect() as client:
        for topic, partition, offset, error in (("target", 9, 0, 3), ("nope", 0, 0, 3),
                                                ("target", 0, 10**12, 1),
                                                ("target", 0, -5, 1)):
            part = client.fetch(topic, partition, offset).responses[0].partitions[0]
            assert part.error_code == error, (topic, partition, offset, part)


# --------------------------------------------------------------------------------------------
# A bounded random fuzz loop


def _seed_frames(rng: random.Random) -> list[bytes]:
    """Valid request frames for the fuzzer to mutate: every read-only API at several
    versions, and produces/fetches on the target topic. (Admin APIs that change the
    cluster are fuzzed by the garbage and huge-claim tests, not mutated from valid
    requests: a mutation of a valid AlterConfigs may legitimately change the broker.)"""
    client = WireClient.__new__(WireClient)
    client._correlation = 0
    frames = []

    def add(api_key: int, version: int, values: Any) -> None:
        frames.append(client.request_frame(api_key, version, values,
                                           correlation_id=rng.randrange(2**31))[1])

    for version in (3, 5, 7, 9):
        add(0, version, produce_values("target", rng.randrange(2), batch(2, b"fz"), acks=1))
    for version in (4, 7, 11, 12):
        add(1, version, fetch_values("target", 0, 0, max_wait_ms=50))
    for version in (1, 4, 7):
        add(2, version, {"replica_id": -1, "isolation_level": 0, "topics": [
            {"name": "target", "partitions": [{"partition_index": 0,
                                               "current_leader_epoch": -1,
                                               "timestamp": -1}]}]})
    for version in (0, 1, 4, 8, 9, 12):
        add(3, version, {"topics": [{"name": "target", "topic_id": None}],
                         "allow_auto_topic_creation": False,
                         "include_cluster_authorized_operations": False,
                         "include_topic_authorized_operations": False})
    for version in (0, 3, 4):
        add(18, version, API_VERSIONS_BODY if version >= 3 else {})
    for version in (1, 4):
        add(32, version, {"resources": [{"resource_type": 2, "resource_name": "target",
                                         "configuration_keys": None}],
                          "include_synonyms": True, "include_documentation": False})
    for version in (1, 4):
        add(35, version, {"topics": [{"topic": "target", "partitions": [0]}]})
    for version in (0, 1):
        add(60, version, {"include_cluster_authorized_operations": False})
    return frames


_INTERESTING_32 = (0, 1, -1, 2**31 - 1, -2**31, 0x7FFF, 0x8000, 0xFFFF)


def _mutate(rng: random.Random, seeds: list[bytes]) -> bytes:
    """One fuzzed frame (size prefix included)."""
    kind = rng.random()
    if kind < 0.10:  # a random size prefix over random bytes
        return struct.pack(">i", rng.choice((-1, 0, 1, 3, 100, 2**31 - 1,
                                             rng.randrange(-2**31, 2**31)))) \
            + rng.randbytes(rng.randrange(0, 64))
    if kind < 0.25:  # a plausible header, any api and version, a random body
        api_key = rng.choice([*apis.ADVERTISED, 8, 17, 99, -1])
        version = rng.randrange(-2, 20)
        body = rng.randbytes(rng.choice((0, 1, 4, 16, 200)))
        try:
            header = _header(api_key, version, rng.randrange(2**31))
        except Exception:  # an api key klog does not know: header v1
            header = struct.pack(">hhi", api_key, version, 1) + b"\x00\x00"
        return framing.encode_frame(header + body)
    payload = bytearray(rng.choice(seeds)[4:])
    if kind < 0.35:  # splice two requests
        other = rng.choice(seeds)[4:]
        cut = rng.randrange(len(payload))
        payload = payload[:cut] + other[rng.randrange(len(other)):]
    for _ in range(rng.choice((1, 1, 2, 3, 8))):
        if not payload:
            break
        op = rng.random()
        pos = rng.randrange(len(payload))
        if op < 0.35:
            payload[pos] ^= 1 << rng.randrange(8)
        elif op < 0.55:
            payload[pos] = rng.choice((0x00, 0xFF, 0x7F, 0x80, 0x01))
        elif op < 0.75 and pos + 4 <= len(payload):
            struct.pack_into(">I", payload, pos, rng.choice(_INTERESTING_32) & 0xFFFFFFFF)
        elif op < 0.85 and pos + 2 <= len(payload):
            struct.pack_into(">H", payload, pos, rng.choice((0, 0x7FFF, 0x8000, 0xFFFF)))
        elif op < 0.93:
            del payload[pos:pos + rng.randrange(1, 16)]
        else:
            payload[pos:pos] = rng.randbytes(rng.randrange(1, 16))
    if rng.random() < 0.1:  # a size prefix that disagrees with what follows
        return struct.pack(">i", len(payload) + rng.choice((-3, -1, 1, 7))) + payload
    return framing.encode_frame(bytes(payload))


def _allowed_wait(stream: bytes) -> float:
    """Seconds the broker may legitimately spend on ``stream`` before answering: the
    waits the requests in it ask for (a fetch's max_wait, an admin request's timeout),
    found by cutting and decoding the stream exactly as the broker does."""
    try:
        frames = framing.FrameDecoder(REQUEST_MAX_BYTES).feed(stream)
    except framing.FrameSizeError:
        return 0.0
    total = 0.0
    for frame in frames:
        wait = requested_wait(frame, ("max_wait", "timeout"), 60_000)
        if wait is None:  # not a request the broker would process: closes at once
            break
        total += wait
    return total


def test_random_fuzz_loop(target: Live) -> None:
    """A few thousand fuzzed frames, a few per connection, each connection half-closed
    after its frames and read until the broker closes it: every one must end (no hang;
    unless its requests asked the broker to wait, as a mutated fetch's max_wait may),
    the broker must stay up and small, the healthy client must never notice, and nothing
    invalid may reach the target topic's log."""
    rng = random.Random(int(FUZZ_SEED) if FUZZ_SEED else 20240611)
    seeds = _seed_frames(rng)
    rss_before = target.peak_rss()
    frames = connections = long_polls = 0
    started = time.monotonic()
    while frames < FUZZ_FRAMES and time.monotonic() - started < max(60, FUZZ_FRAMES / 50):
        batch_frames = [_mutate(rng, seeds) for _ in range(rng.choice((1, 1, 2, 5)))]
        stream = b"".join(batch_frames)
        with target.connect() as client:
            client.send_raw(stream)
            with contextlib.suppress(OSError):  # already reset by the broker
                client.sock.shutdown(socket.SHUT_WR)
            if drain_until_closed(client.sock, time.monotonic() + 3) is None:
                # still open: only acceptable if the requests asked the broker to wait
                # (a mutated fetch may long-poll for up to 24 days: cut it short here)
                waits = _allowed_wait(stream)
                assert waits > 1.0, f"no answer and no close in 3 s for {stream[:200]!r}"
                long_polls += 1
                reset_on_close(client.sock)
        frames += len(batch_frames)
        connections += 1
        if connections % 100 == 0:
            assert target.alive(), target.broker.log_tail()
            assert not target.healthy.failures, target.healthy.failures
    elapsed = time.monotonic() - started
    print(f"fuzz: {frames} frames on {connections} connections in {elapsed:.1f} s "
          f"({long_polls} legitimately waiting); "
          f"broker peak RSS {rss_before / 2**20:.0f} -> {target.peak_rss() / 2**20:.0f} MiB")
    assert frames >= min(1000, FUZZ_FRAMES)
    assert target.peak_rss() - rss_before < 64 << 20
    # the target topic holds only whole, valid batches, at consecutive offsets
    with target.connect() as client:
        for partition in (0, 1):
            leo = target.log_end_offset("target", partition)
            offset = 0
            while offset < leo:
                part = client.fetch("target", partition, offset).responses[0].partitions[0]
                assert part.error_code == 0
                records = part.records
                for h in iter_batch_headers(records):
                    if h.end > len(records):
                        break
                    h.ensure_valid(records)
                    assert h.base_offset == offset
                    offset = h.last_offset + 1
    # every produce the healthy client made is there, in order
    assert target.log_end_offset("healthy") >= target.healthy.rounds


# --------------------------------------------------------------------------------------------
# Structure-aware fuzzing: valid requests with arbitrary values (hypothesis, via kio's types)


def _defuse(entity: Any) -> Any:
    """Keep a generated request from doing what a fuzzer must not: change the module's
    cluster for real, or wait longer than the test. Values are otherwise untouched."""
    name = type(entity).__module__.split(".")[2]
    changes: dict[str, Any] = {}
    if name == "metadata" and hasattr(entity, "allow_auto_topic_creation"):
        changes["allow_auto_topic_creation"] = False
    if name == "fetch":
        changes["max_wait"] = min(entity.max_wait, datetime.timedelta(milliseconds=200))
    if name in ("create_topics", "create_partitions", "alter_configs",
                "incremental_alter_configs") and hasattr(entity, "validate_only"):
        changes["validate_only"] = True
    if name == "create_topics":
        # validate_only still sizes the assignment: a count near 2**31 stalls the broker
        # (a known limit of the admin path, tested and reported separately)
        changes["topics"] = tuple(dataclasses.replace(
            t, num_partitions=min(t.num_partitions, 1000),
            replication_factor=min(t.replication_factor, 1000)) for t in entity.topics)
    if name == "create_partitions":
        changes["topics"] = tuple(dataclasses.replace(t, count=min(t.count, 1000))
                                  for t in entity.topics)
    return dataclasses.replace(entity, **changes) if changes else entity


_STRUCTURED = [(k, v) for k, (lo, hi) in sorted(apis.ADVERTISED.items())
               for v in sorted({lo, (lo + hi) // 2, hi})]


@pytest.mark.parametrize(("api_key", "version"), _STRUCTURED,
                         ids=[f"{apis.spec_for(k).name}-v{v}" for k, v in _STRUCTURED])
def test_structured_fuzz_valid_requests_with_arbitrary_values(target: Live, api_key: int,
                                                              version: int) -> None:
    """Every advertised API and version, with hypothesis-made values: each request is
    answered (in its version's format, with its correlation id) or refused by closing.
    The module's broker is standalone: the inter-broker control APIs (advertised only in
    cluster mode) are always refused by closing, whatever they carry."""
    cls = apis.spec_for(api_key).request_entity(version)
    outcomes = {"answered": 0, "closed": 0}

    @settings(max_examples=FUZZ_EXAMPLES, deadline=None, database=None,
              derandomize=FUZZ_SEED is None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                     HealthCheck.function_scoped_fixture])
    @given(entity=st.from_type(cls))
    def check(entity: Any) -> None:
        entity = _defuse(entity)
        body = apis.encode_request(entity)
        with target.connect() as client:
            # an ApiVersions request behind it: its answer shows the fuzzed one is done
            # even when that one gets none (a produce with acks=0)
            _cid, probe = client.request_frame(18, 0, {}, correlation_id=9999)
            client.send_raw(framing.encode_request(api_key, version, 4321, "fuzz", body)
                            + probe)
            client.sock.settimeout(5)
            try:
                frame = client.recv_frame()
                if frame[:4] != b"\x00\x00\x10\xe1":  # 4321
                    assert api_key == 0 and entity.acks == 0, frame[:16]
                    outcomes["answered"] += 1
                    return
                header_version = apis.response_header_version(api_key, version)
                _, offset = framing.parse_response_header(frame, header_version)
                apis.decode_response(api_key, version, memoryview(frame)[offset:])
                outcomes["answered"] += 1
                got, _ = client.recv_response(18, 0)
                assert got == 9999
            except ConnectionError:
                outcomes["closed"] += 1
            except TimeoutError:
                raise AssertionError(f"no answer and no close in 5 s for {entity}") from None

    check()
    assert sum(outcomes.values()) > 0
    if api_key in apis.INTER_BROKER_CONTROL_APIS:
        assert outcomes["answered"] == 0, outcomes
    assert target.alive()


# --------------------------------------------------------------------------------------------
# Records that do not decode, or break LogValidator's rules, behind a valid CRC (issue 18,
# items 3 and 4): each is refused with Kafka's code, nothing of it is written, and a valid
# batch beside it in the same request is appended. On a topic with compression.type=lz4
# the same batches reach the broker's recompression, off the event loop.

def _topic(live: Live, name: str) -> str:
    """``name``, created with its configs by the module's fixture (topics are made there,
    before anything in the module could upset the controller)."""
    assert name in CONFIGURED_TOPICS
    return name


def _with_section(section: bytes, attributes: int = 0, n: int = 3) -> bytes:
    """A valid header for ``n`` records (attributes as given) over ``section``, CRC right."""
    b = bytearray(_valid(n)[:61] + section)
    struct.pack_into(">i", b, 8, len(b) - 12)
    struct.pack_into(">h", b, ATTRIBUTES_OFFSET, attributes)
    return bytes(_fix_crc(b))


def _records(n: int = 3, key: bytes | None = None, deltas: list[int] | None = None,
             headers: list[tuple[str, bytes | None]] | None = None) -> bytes:
    return b"".join(encode_record(i if deltas is None else deltas[i], 0, key, b"value",
                                  headers or []) for i in range(n))


def _length_2_40() -> bytes:
    # the record: its length varint says 2^40 (zigzag 2^41, six bytes)
    return _with_section(write_unsigned_varlong(2**41) + _records()[1:])


def _null_header_key() -> bytes:
    section = bytearray(_records(1, headers=[("h", b"v")]))
    section[-4] = 0x01  # the header key's length: zigzag(-1), a null key
    return _with_section(bytes(section) + _records(3)[len(_records(1)):])


UNDECODABLE = {
    "record-length-2^40": (_length_2_40, CORRUPT_MESSAGE),
    "codec-id-7": (lambda: _with_section(_records(), attributes=7), CORRUPT_MESSAGE),
    "gzip-garbage": (lambda: _with_section(b"\x1f\x8b\x08" + bytes(range(60)), 1),
                     CORRUPT_MESSAGE),
    "zstd-of-a-bad-section": (lambda: _with_section(
        compress(CompressionType.ZSTD, _records() + b"\x00"), 4), CORRUPT_MESSAGE),
    "null-header-key": (_null_header_key, CORRUPT_MESSAGE),
    "header-count-beyond-record": (lambda: _with_section(
        _records(2) + _records(1)[:-1] + b"\x7e"), CORRUPT_MESSAGE),
    "offset-deltas-out-of-order": (lambda: _with_section(_records(deltas=[0, 2, 1])),
                                   INVALID_RECORD),
    "offset-deltas-compressed": (lambda: _with_section(
        compress(CompressionType.ZSTD, _records(deltas=[0, 1, 7])), 4), INVALID_RECORD),
    "offset-deltas-lz4": (lambda: _with_section(
        compress(CompressionType.LZ4, _records(deltas=[1, 2, 3])), 3), INVALID_RECORD),
}


@pytest.mark.parametrize("name", sorted(UNDECODABLE))
@pytest.mark.parametrize("topic", ["target", "recompressed"])
def test_records_that_do_not_decode_are_refused_and_the_valid_partition_appended(
        target: Live, name: str, topic: str) -> None:
    if topic != "target":
        _topic(target, topic)
    make, expected = UNDECODABLE[name]
    leo = [target.log_end_offset(topic, p) for p in (0, 1)]
    with target.connect() as client:
        response = client.call(0, 9, {
            "transactional_id": None, "acks": 1, "timeout": 5000,
            "topic_data": [{"name": topic, "partition_data": [
                {"index": 0, "records": make()},
                {"index": 1, "records": batch(2)},
            ]}],
        })
    parts = {p.index: p for p in response.responses[0].partition_responses}
    assert (parts[0].error_code, parts[0].base_offset) == (expected, -1), parts[0]
    assert parts[1].error_code == 0 and parts[1].base_offset == leo[1]
    assert target.log_end_offset(topic, 0) == leo[0]
    assert target.log_end_offset(topic, 1) == leo[1] + 2


def test_a_compacted_topic_refuses_records_without_a_key(target: Live) -> None:
    topic = _topic(target, "compacted")
    leo = target.log_end_offset(topic)
    part = _produce(target, batch(2, key=None), topic)
    assert (part.error_code, part.base_offset) == (INVALID_RECORD, -1)
    part = _produce(target, batch(2, key=b"k"), topic)
    assert (part.error_code, part.base_offset) == (0, leo)
    assert target.log_end_offset(topic) == leo + 2


def test_a_compression_bomb_is_refused_without_inflating_it(target: Live) -> None:
    """1 GiB of zeros in a ~32 KB zstd batch, on a topic that keeps the producer's codec
    (so nothing but the record check inflates it): refused at the decompression bound,
    nothing written, and the broker's peak memory barely moves."""
    compressor = zstandard.ZstdCompressor().compressobj()
    zeros = bytes(1 << 20)
    section = b"".join(compressor.compress(zeros) for _ in range(1024)) + compressor.flush()
    bomb = _with_section(section, int(CompressionType.ZSTD), n=1)
    assert len(bomb) < MESSAGE_MAX_BYTES
    leo = target.log_end_offset("target")
    peak = target.peak_rss()
    part = _produce(target, bomb)
    assert (part.error_code, part.base_offset) == (10, -1)  # MESSAGE_TOO_LARGE
    assert target.log_end_offset("target") == leo
    assert target.peak_rss() - peak < 256 << 20


def _tiny_records_zstd(count: int) -> bytes:
    """One zstd batch of ``count`` tiny records (null key and value), as the issue's 808 KB
    batch of 1M records."""
    section = b"".join([b"%c\x00\x00%s\x01\x01\x00" % (2 * (5 + len(v)), v)
                        for v in map(write_varint, range(count))])
    b = bytearray(build_batch([(int(time.time() * 1000), None, None)]))
    b = bytearray(b[:61] + compress(CompressionType.ZSTD, section))
    struct.pack_into(">i", b, 8, len(b) - 12)
    struct.pack_into(">h", b, ATTRIBUTES_OFFSET, int(CompressionType.ZSTD))
    struct.pack_into(">i", b, 23, count - 1)
    struct.pack_into(">i", b, 57, count)
    return bytes(_fix_crc(b))


def test_a_big_recompression_does_not_stall_other_clients(target: Live) -> None:
    """A zstd batch of 1M tiny records to an lz4 topic is checked and recompressed off the
    event loop: while it is, another connection keeps being answered. Ordering, not time:
    the other connection gets many answers before the big produce's answer exists (with
    the work on the loop it got none, bar one slipped in while the frame was arriving)."""
    topic = _topic(target, "recompressed")
    big = _tiny_records_zstd(1_000_000)
    leo = target.log_end_offset(topic)
    with target.connect() as producer, target.connect() as other:
        producer.send(0, 9, produce_values(topic, 0, big))
        answered_meanwhile = 0
        while not select.select([producer.sock], [], [], 0)[0]:
            assert other.call(18, 3, API_VERSIONS_BODY).error_code == 0
            answered_meanwhile += 1
        _, response = producer.recv_response(0, 9)
    part = response.responses[0].partition_responses[0]
    assert (part.error_code, part.base_offset) == (0, leo)
    assert target.log_end_offset(topic) == leo + 1_000_000
    assert answered_meanwhile >= 20, answered_meanwhile


def test_the_module_broker_still_answers_everything(target: Live) -> None:
    with target.connect() as client:
        assert client.call(18, 3, API_VERSIONS_BODY).error_code == 0
        assert client.metadata(None, auto_create=False).topics
    assert rss_bytes(target.pid) < 512 << 20


def test_broker_logs_no_unexpected_errors_in_this_module(target: Live) -> None:
    """Bad input is refused deliberately: no handler may have failed on it."""
    assert target.unexpected_errors() == []

