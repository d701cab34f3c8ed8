"""Tests for klog.protocol.produce: the hand-written ProduceRequest decoder and
ProduceResponse encoder, checked against kio (behind apis' checks) as the reference."""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import io
import random
import struct
import time
import tracemalloc
from collections.abc import Sequence
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode as KioErrorCode
from kio.serial import entity_writer
from kio.static.primitive import Records, i8, i16, i32, i64

from klog.protocol import apis, produce
from klog.protocol.entities import build
from klog.protocol.errors import InvalidRequestError
from klog.protocol.fetch import NodeEndpoint

VERSIONS = list(range(produce.MIN_VERSION, produce.MAX_VERSION + 1))

for _primitive in (i8, i16, i32, i64):
    _primitive.__hypothesis_hook__()  # kio registers its int strategies lazily
st.register_type_strategy(Records, st.binary(max_size=64))

_CASE = settings(max_examples=20, deadline=None, database=None,
                 suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def request_class(version: int) -> type:
    return apis.spec_for(0).request_entity(version)


def response_class(version: int) -> type:
    return apis.spec_for(0).response_entity(version)


def kio_decode(version: int, body: bytes) -> Any:
    """The reference: kio's reader behind apis' pre-check and null checks."""
    return apis._decode(request_class(version), body)


def encode(entity: Any) -> bytes:
    buffer = io.BytesIO()
    entity_writer(type(entity))(buffer, entity)
    return buffer.getvalue()


def make_request(version: int, topics: list[tuple[str, list[tuple[int, bytes | None]]]],
                 transactional_id: str | None = None, acks: int = 1,
                 timeout_ms: int = 30_000) -> Any:
    return build(request_class(version), {
        "transactional_id": transactional_id,
        "acks": acks,
        "timeout": timeout_ms,
        "topic_data": [
            {"name": name,
             "partition_data": [{"index": i, "records": r} for i, r in partitions]}
            for name, partitions in topics
        ],
    })


def outcome(fn: Any, *args: Any) -> Any:
    try:
        return ("ok", fn(*args))
    except InvalidRequestError:
        return ("invalid", None)


def same_outcome(version: int, body: bytes) -> None:
    ours = outcome(produce.decode_produce_request, version, body)
    theirs = outcome(kio_decode, version, body)
    assert ours[0] == theirs[0], (version, body.hex(), ours, theirs)
    assert ours[1] == theirs[1], (version, body.hex())
    same_in_c_and_python(version, body)


def same_in_c_and_python(version: int, body: bytes) -> None:
    """The C decoder gives what the Python one gives, and declines whatever it refuses."""
    if not produce._native_ready(version):
        return
    view = memoryview(body)
    native = produce._native.decode(version, view)
    python = outcome(produce.python_decode, version, view)
    if python[0] == "invalid":
        assert native is None, (version, body.hex())
    elif native is not None:
        assert native == python[1], (version, body.hex())
        assert type(native) is type(python[1])


EDGE_REQUESTS = [
    ([], None, 1, 0),
    ([("t", [(0, b"")])], None, 0, -1),
    ([("t", [(0, None)])], "", -1, 2**31 - 1),
    ([("topic.with-dots_and_1", [(2**31 - 1, bytes(range(256)) * 3), (-1, b"x")])], "tx-1",
     1, -(2**31)),
    ([("a", [(0, b"1")]), ("b", []), ("c", [(5, b"22"), (6, None), (7, b"")])], None, 1, 5),
    ([("\u00e9\u4e2d\U0001f600", [(0, b"\x00" * 61)])], "\u00fc" * 300, 2**15 - 1, 100),
    ([("x" * 249, [(i, bytes([i]) * i) for i in range(20)])], None, -(2**15), 1),
]


# --- decoding: the same entities as kio ---------------------------------------------------


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("case", range(len(EDGE_REQUESTS)))
def test_edge_requests_decode_as_kio_does(version: int, case: int) -> None:
    topics, transactional_id, acks, timeout_ms = EDGE_REQUESTS[case]
    entity = make_request(version, topics, transactional_id, acks, timeout_ms)
    body = encode(entity)
    decoded = produce.decode_produce_request(version, body)
    assert decoded == entity == kio_decode(version, body)
    assert type(decoded) is request_class(version)
    assert decoded.timeout == datetime.timedelta(milliseconds=timeout_ms)
    for topic, original in zip(decoded.topic_data, entity.topic_data, strict=True):
        assert type(topic) is type(original)
        for part, original_part in zip(topic.partition_data, original.partition_data,
                                       strict=True):
            assert type(part) is type(original_part)
            assert type(part.index) is int
            if original_part.records is None:
                assert part.records is None
            else:
                assert isinstance(part.records, memoryview)
                assert part.records.tobytes() == original_part.records


@pytest.mark.parametrize("version", VERSIONS)
def test_random_requests_decode_as_kio_does(version: int) -> None:
    @_CASE
    @given(st.from_type(request_class(version)))
    def check(entity: Any) -> None:
        body = encode(entity)
        assert produce.decode_produce_request(version, body) == kio_decode(version, body)
        assert produce.decode_produce_request(version, body) == entity
        # trailing bytes are ignored, by both
        same_outcome(version, body + b"\x00\xff")

    check()


def test_records_are_slices_of_the_frame() -> None:
    # A writable frame yields writable records: the log patches offsets in place, in the
    # receive buffer, without a copy.
    batch = bytes(range(70))
    body = encode(make_request(9, [("t", [(0, batch), (1, b"abc")])]))
    frame = bytearray(b"HEADER" + body)
    request = produce.decode_produce_request(9, memoryview(frame)[6:])
    records = request.topic_data[0].partition_data[0].records
    assert isinstance(records, memoryview) and not records.readonly
    assert records.obj is frame
    records[0:8] = b"\xaa" * 8
    assert frame.find(b"\xaa" * 8 + batch[8:]) > 0
    # a read-only body gives read-only slices
    request = produce.decode_produce_request(3, encode(make_request(3, [("t", [(0, b"z")])])))
    assert request.topic_data[0].partition_data[0].records.readonly


@pytest.mark.parametrize("version", [3, 9])
def test_accepts_bytes_bytearray_and_memoryview(version: int) -> None:
    entity = make_request(version, [("t", [(0, b"records")])])
    body = encode(entity)
    for form in (body, bytearray(body), memoryview(body), memoryview(bytearray(body))):
        assert produce.decode_produce_request(version, form) == entity


def test_decode_request_takes_the_fast_path_for_v3_to_v11(monkeypatch) -> None:
    calls = []
    original = produce.decode_produce_request

    def spy(version: int, body: Any) -> Any:
        calls.append(version)
        return original(version, body)

    monkeypatch.setattr(produce, "decode_produce_request", spy)
    for version in VERSIONS:
        body = encode(make_request(version, [("t", [(0, b"r")])]))
        assert apis.decode_request(0, version, memoryview(bytearray(body))).acks == 1
    assert calls == VERSIONS
    body = encode(make_request(12, [("t", [(0, b"r")])]))
    assert apis.decode_request(0, 12, body).acks == 1  # kio's path beyond v11
    assert calls == VERSIONS


def test_writable_frames_still_decode_through_kio() -> None:
    # kio's reader refuses writable buffers; decode_request hands it a read-only view.
    body = encode(make_request(12, [("t", [(0, b"r")])]))
    assert apis.decode_request(0, 12, memoryview(bytearray(body))).acks == 1
    assert apis.decode_request(0, 12, bytearray(body)).acks == 1


def test_versions_outside_the_range_are_not_decoded_here() -> None:
    for version in (2, 12, 13):
        assert not produce.handles(version)
        with pytest.raises(ValueError):
            produce.decode_produce_request(version, b"")


# --- bad input: rejected where kio rejects ------------------------------------------------


def _sample_bodies(version: int) -> list[bytes]:
    return [encode(make_request(version, *case[:1], *case[1:])) for case in EDGE_REQUESTS[:5]]


@pytest.mark.parametrize("version", VERSIONS)
def test_every_truncation_is_invalid(version: int) -> None:
    for body in _sample_bodies(version):
        for cut in range(len(body)):
            with pytest.raises(InvalidRequestError):
                produce.decode_produce_request(version, body[:cut])
            with pytest.raises(InvalidRequestError):
                kio_decode(version, body[:cut])


@pytest.mark.parametrize("version", VERSIONS)
def test_every_single_byte_change_has_kios_outcome(version: int) -> None:
    # Each byte of each sample replaced by values that hit the length/varint edges.
    for body in _sample_bodies(version)[:4]:
        for position in range(min(len(body), 120)):
            for value in (0x00, 0x01, 0x02, 0x7F, 0x80, 0xFE, 0xFF, body[position] ^ 0x01):
                mutated = bytearray(body)
                mutated[position] = value
                same_outcome(version, bytes(mutated))


@pytest.mark.parametrize("version", VERSIONS)
def test_random_damage_has_kios_outcome(version: int) -> None:
    rng = random.Random(version)
    bodies = _sample_bodies(version)
    for _ in range(400):
        body = bytearray(rng.choice(bodies))
        for _ in range(rng.randint(1, 4)):
            op = rng.randrange(3)
            position = rng.randrange(len(body) + 1)
            if op == 0 and body:  # overwrite
                body[min(position, len(body) - 1)] = rng.randrange(256)
            elif op == 1:  # insert
                body[position:position] = bytes(rng.randrange(256)
                                                for _ in range(rng.randint(1, 4)))
            elif body:  # delete
                del body[position:position + rng.randint(1, 4)]
        same_outcome(version, bytes(body))


@pytest.mark.parametrize("version", VERSIONS)
def test_garbage_has_kios_outcome(version: int) -> None:
    rng = random.Random(1000 + version)
    for _ in range(300):
        same_outcome(version, bytes(rng.randrange(256) for _ in range(rng.randint(0, 40))))


def _legacy(*parts: bytes) -> bytes:
    return b"".join(parts)


NULL_TXN_HEAD_LEGACY = struct.pack(">hhi", -1, 1, 1000)
NULL_TXN_HEAD_FLEX = b"\x00" + struct.pack(">hi", 1, 1000)

MALFORMED = {
    # legacy (v3-v8)
    "null topic_data": (3, NULL_TXN_HEAD_LEGACY + struct.pack(">i", -1)),
    "negative topic count": (3, NULL_TXN_HEAD_LEGACY + struct.pack(">i", -2)),
    "null topic name": (3, NULL_TXN_HEAD_LEGACY + struct.pack(">ih", 1, -1)
                        + struct.pack(">i", 0)),
    "negative name length": (5, NULL_TXN_HEAD_LEGACY + struct.pack(">ih", 1, -7) + b"t"),
    "negative transactional id length": (4, struct.pack(">hhi", -3, 1, 1000)
                                         + struct.pack(">i", 0)),
    "null partition_data": (3, NULL_TXN_HEAD_LEGACY + struct.pack(">ih", 1, 1) + b"t"
                            + struct.pack(">i", -1)),
    "negative records length": (8, NULL_TXN_HEAD_LEGACY + struct.pack(">ih", 1, 1) + b"t"
                                + struct.pack(">iii", 1, 0, -2)),
    "records longer than the body": (3, NULL_TXN_HEAD_LEGACY + struct.pack(">ih", 1, 1) + b"t"
                                     + struct.pack(">iii", 1, 0, 100) + b"short"),
    "bad utf-8 topic": (3, NULL_TXN_HEAD_LEGACY + struct.pack(">ih", 1, 2) + b"\xc3\x28"
                        + struct.pack(">i", 0)),
    "surrogate in transactional id": (6, struct.pack(">h", 3) + b"\xed\xa0\x80"
                                      + struct.pack(">hii", 1, 1000, 0)),
    "huge topic count": (3, NULL_TXN_HEAD_LEGACY + struct.pack(">i", 2**31 - 1)),
    "huge partition count": (3, NULL_TXN_HEAD_LEGACY + struct.pack(">ih", 1, 1) + b"t"
                             + struct.pack(">i", 2**31 - 1)),
    # flexible (v9)
    "compact null topic_data": (9, NULL_TXN_HEAD_FLEX + b"\x00"),
    "compact null topic name": (9, NULL_TXN_HEAD_FLEX + b"\x02" + b"\x00" + b"\x01\x00"
                                + b"\x00"),
    "compact null partition_data": (9, NULL_TXN_HEAD_FLEX + b"\x02" + b"\x02t" + b"\x00"),
    "compact huge topic count": (9, NULL_TXN_HEAD_FLEX + b"\xff\xff\xff\xff\x0f"),
    "compact huge partition count": (9, NULL_TXN_HEAD_FLEX + b"\x02\x02t"
                                     + b"\xff\xff\xff\xff\x07"),
    "compact records past the end": (9, NULL_TXN_HEAD_FLEX + b"\x02\x02t\x02"
                                     + struct.pack(">i", 0) + b"\xff\xff\x03" + b"abc"),
    "six-byte varint": (9, NULL_TXN_HEAD_FLEX + b"\x80\x80\x80\x80\x80\x01"),
    "tagged field on the request": (9, NULL_TXN_HEAD_FLEX + b"\x01" + b"\x01\x00\x00"),
    "tagged field on a topic": (9, NULL_TXN_HEAD_FLEX + b"\x02\x02t\x01" + b"\x01\x00\x00"
                                + b"\x00"),
    "tagged field on a partition": (9, NULL_TXN_HEAD_FLEX + b"\x02\x02t\x02"
                                    + struct.pack(">i", 0) + b"\x00" + b"\x01\x05\x00"
                                    + b"\x00\x00"),
    "huge tagged field count": (9, NULL_TXN_HEAD_FLEX + b"\x01" + b"\xff\xff\xff\xff\x0f"),
    "compact string past the end": (9, b"\xff\x7f" + b"tx"),
}


@pytest.mark.parametrize("name", sorted(MALFORMED))
def test_malformed_requests_are_invalid_as_in_kio(name: str) -> None:
    version, body = MALFORMED[name]
    with pytest.raises(InvalidRequestError):
        produce.decode_produce_request(version, body)
    with pytest.raises(InvalidRequestError):
        kio_decode(version, body)


@pytest.mark.parametrize("name", sorted(k for k in MALFORMED if "huge" in k))
def test_huge_counts_are_refused_before_any_work(name: str) -> None:
    version, body = MALFORMED[name]
    tracemalloc.start()
    start = time.perf_counter()
    try:
        with pytest.raises(InvalidRequestError):
            produce.decode_produce_request(version, body)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 100_000
    assert time.perf_counter() - start < 1.0


def test_a_count_near_the_frame_size_costs_no_more_than_the_bytes() -> None:
    # 100k partitions claimed, 100k - 1 present: every item is read, then the last fails.
    part = struct.pack(">ii", 0, 0)
    body = NULL_TXN_HEAD_LEGACY + struct.pack(">ih", 1, 1) + b"t" + struct.pack(
        ">i", 100_000) + part * 99_999 + b"\x00\x00"
    with pytest.raises(InvalidRequestError):
        produce.decode_produce_request(3, body)


# --- responses: the bytes kio writes ------------------------------------------------------


def _kio_response(version: int, topics: list[tuple[str, list[produce.PartitionResponse]]],
                  throttle_ms: int, nodes: Sequence[NodeEndpoint] = ()) -> bytes:
    def partition(p: produce.PartitionResponse) -> dict[str, Any]:
        fields: dict[str, Any] = {
            "index": p.index, "error_code": p.error_code, "base_offset": p.base_offset,
            "log_append_time": None if p.log_append_time_ms == -1 else p.log_append_time_ms,
            "log_start_offset": p.log_start_offset,
            "record_errors": [{"batch_index": i, "batch_index_error_message": m}
                              for i, m in p.record_errors],
            "error_message": p.error_message}
        if version >= 10 and p.current_leader is not None:
            fields["current_leader"] = {"leader_id": p.current_leader[0],
                                        "leader_epoch": p.current_leader[1]}
        return fields

    values: dict[str, Any] = {
        "responses": [{"name": name, "partition_responses": [partition(p) for p in partitions]}
                      for name, partitions in topics],
        "throttle_time": throttle_ms,
    }
    if version >= 10:
        values["node_endpoints"] = [{"node_id": n.node_id, "host": n.host, "port": n.port,
                                     "rack": n.rack} for n in nodes]
    return encode(build(response_class(version), values))


_ERROR_CODES = [int(code) for code in KioErrorCode]

partition_responses = st.builds(
    produce.PartitionResponse,
    index=st.integers(-(2**31), 2**31 - 1),
    error_code=st.sampled_from(_ERROR_CODES),
    base_offset=st.integers(-1, 2**63 - 1),
    log_append_time_ms=st.one_of(st.just(-1), st.integers(0, 2**45)),
    log_start_offset=st.integers(-1, 2**63 - 1),
    error_message=st.one_of(st.none(), st.text(max_size=40)),
    record_errors=st.lists(st.tuples(st.integers(0, 2**31 - 1),
                                     st.one_of(st.none(), st.text(max_size=20))),
                           max_size=3),
    current_leader=st.one_of(st.none(), st.just((-1, -1)),
                             st.tuples(st.integers(-(2**31), 2**31 - 1),
                                       st.integers(-(2**31), 2**31 - 1))),
)
node_endpoints = st.lists(st.builds(
    NodeEndpoint, node_id=st.integers(-(2**31), 2**31 - 1), host=st.text(max_size=20),
    port=st.integers(-(2**31), 2**31 - 1), rack=st.one_of(st.none(), st.text(max_size=8))),
    max_size=3)
response_topics = st.lists(
    st.tuples(st.text(min_size=1, max_size=30), st.lists(partition_responses, max_size=4)),
    max_size=4,
)


@pytest.mark.parametrize("version", VERSIONS)
def test_responses_are_the_bytes_kio_writes(version: int) -> None:
    @_CASE
    @given(response_topics, st.integers(0, 2**31 - 1), node_endpoints)
    def check(topics: list[tuple[str, list[produce.PartitionResponse]]], throttle: int,
              nodes: list[NodeEndpoint]) -> None:
        ours = produce.encode_produce_response(version, topics, throttle, nodes)
        assert ours == _kio_response(version, topics, throttle, nodes)
        assert ours == produce.python_encode(version, topics, throttle, nodes)
        decoded = apis.decode_response(0, version, ours)
        assert [t.name for t in decoded.responses] == [name for name, _ in topics]

    check()


@pytest.mark.parametrize("version", VERSIONS)
def test_typical_responses_are_the_bytes_kio_writes(version: int) -> None:
    topics = [
        ("t", [produce.PartitionResponse(0, 0, 42, -1, 0)]),
        ("errors", [produce.PartitionResponse(3, 6, error_message="not the leader",
                                              current_leader=(2, 7)),
                    produce.PartitionResponse(4, 87, record_errors=[(0, "bad"), (2, None)])]),
        ("empty", []),
    ]
    nodes = [NodeEndpoint(2, "broker-2.example", 9092, "rack-a")]
    assert produce.encode_produce_response(version, topics, 0, nodes) == _kio_response(
        version, topics, 0, nodes)


native_only = pytest.mark.skipif(
    not produce._native_ready(produce.MAX_VERSION),
    reason="the C codec (klog/protocol/_produce.c) is not built or KLOG_PURE_PYTHON=1")


@native_only
@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("case", range(len(EDGE_REQUESTS)))
def test_the_c_decoder_takes_well_formed_requests(version: int, case: int) -> None:
    topics, transactional_id, acks, timeout_ms = EDGE_REQUESTS[case]
    body = encode(make_request(version, topics, transactional_id, acks, timeout_ms))
    frame = bytearray(b"\x00" * 3 + body)  # a writable buffer, as the broker's frames are
    view = memoryview(frame)[3:]
    native = produce._native.decode(version, view)
    assert native is not None
    assert native == produce.python_decode(version, view) == kio_decode(version, body)
    assert native.timeout is produce._timeout(timeout_ms)
    for topic in native.topic_data:
        for part in topic.partition_data:
            if part.records is not None:  # a writable slice of the caller's buffer
                assert part.records.obj is frame and not part.records.readonly


@native_only
def test_the_c_decoder_declines_what_it_does_not_take() -> None:
    body = encode(make_request(9, [("t", [(0, b"x")])]))
    assert produce._native.decode(9, body) is None  # bytes, not a memoryview
    assert produce._native.decode(9, memoryview(body).cast("B", (len(body),))) is not None
    assert produce._native.decode(2, memoryview(body)) is None  # not a version it handles
    assert produce._native.decode(12, memoryview(body)) is None
    tagged = body[:-1] + b"\x01\x00\x00"  # a tagged field closing the request
    assert produce._native.decode(9, memoryview(tagged)) is None
    with pytest.raises(InvalidRequestError, match="tagged field"):
        produce.decode_produce_request(9, tagged)


@native_only
@pytest.mark.parametrize("version", VERSIONS)
def test_the_c_encoder_writes_the_python_encoders_bytes(version: int) -> None:
    """Every response, record errors and KIP-951's fields included: the C encoder declines
    nothing well-formed."""
    @_CASE
    @given(response_topics, st.integers(-(2**31), 2**31 - 1), node_endpoints)
    def check(topics: list[tuple[str, list[produce.PartitionResponse]]], throttle: int,
              nodes: list[NodeEndpoint]) -> None:
        topics = [(name, [dataclasses.replace(p, record_errors=tuple(p.record_errors))
                          for p in parts]) for name, parts in topics]
        native = produce._native.encode(
            version, topics, throttle,
            [(n.node_id, n.host, n.port, n.rack) for n in nodes] if nodes else None)
        assert native is not None
        assert native == produce.python_encode(version, topics, throttle, nodes)

    check()


@native_only
def test_the_c_encoder_declines_what_python_refuses() -> None:
    P = produce.PartitionResponse
    for bad in ([("t", [P(2**31)])], [("t", [P(0, 2**15)])], [("t", [P(0, 0, 2**63)])],
                [("t", [P(0, 0, 0, 0, 0, "\ud800")])], [("t", [object()])], [("t",)],
                [("x" * 0x8000, [])]):
        version = 8
        assert produce._native.encode(version, bad, 0, None) is None
        with pytest.raises((ValueError, TypeError, AttributeError, struct.error,
                            UnicodeEncodeError)):
            produce.python_encode(version, bad, 0)
    assert produce._native.encode(9, [("x" * 0x8000, [])], 0, None) == \
        produce.python_encode(9, [("x" * 0x8000, [])], 0)  # compact strings have no limit
    # out of range in the new fields: declined, and the Python encoder refuses them too
    for bad_part, nodes in ((P(0, record_errors=[(2**31, "x")]), None),
                            (P(0, record_errors=[(1, "\ud800")]), None),
                            (P(0, current_leader=(2**31, 0)), None),
                            (P(0), [(2**31, "h", 1, None)]),
                            (P(0), [(1, "h", -(2**31) - 1, None)])):
        assert produce._native.encode(10, [("t", [bad_part])], 0, nodes) is None
        with pytest.raises((struct.error, UnicodeEncodeError)):
            produce.python_encode(10, [("t", [bad_part])], 0,
                                  [NodeEndpoint(*n) for n in nodes or ()])


def test_response_versions_outside_the_range_are_refused() -> None:
    with pytest.raises(ValueError):
        produce.encode_produce_response(12, [])


def test_frames_from_the_frame_decoder_give_writable_records() -> None:
    # The path of a produced batch through the broker: socket bytes -> FrameDecoder ->
    # header -> this decoder; the records must be patchable in place, whether the frame
    # arrived whole or in pieces.
    from klog.protocol import framing

    batch = bytes(range(100))
    body = encode(make_request(9, [("t", [(0, batch)])]))
    wire = framing.encode_request(0, 9, 7, "client", body)
    for pieces in ([wire], [wire[:10], wire[10:50], wire[50:]]):
        decoder = framing.FrameDecoder()
        frames = [f for piece in pieces for f in decoder.feed(piece)]
        assert len(frames) == 1
        header, offset = framing.parse_request_header(frames[0], {0: (3, 9)})
        request = apis.decode_request(0, header.api_version, frames[0][offset:])
        records = request.topic_data[0].partition_data[0].records
        assert not records.readonly and records == batch
        records[0] = 0xEE
        assert bytes(frames[0]).count(b"\xee" + batch[1:]) == 1


def test_entity_maker_falls_back_to_the_constructor_for_other_shapes() -> None:
    import dataclasses

    @dataclasses.dataclass(frozen=True)
    class NotSlotted:
        index: int
        records: Any

    @dataclasses.dataclass(frozen=True, slots=True)
    class Checked:
        index: int
        records: Any

        def __post_init__(self) -> None:
            if self.index < 0:
                raise ValueError("negative")

    for cls in (NotSlotted, Checked):
        make = produce._maker(cls, ("index", "records"))
        assert make(3, b"r") == cls(index=3, records=b"r")
    with pytest.raises(ValueError):
        produce._maker(Checked, ("index", "records"))(-1, b"r")
    # kio's own classes take the fast path and still compare, hash and print as kio's
    _, _, partition_cls = produce._request_classes(9)
    fast = produce._maker(partition_cls, ("index", "records"))(7, b"x")
    assert type(fast) is partition_cls and fast == partition_cls(index=7, records=b"x")
    assert hash(fast) == hash(partition_cls(index=7, records=b"x"))
    assert repr(fast) == repr(partition_cls(index=7, records=b"x"))


# --- the client's side: requests kio reads, responses as kio wrote them ---------------------


def _expected_fields(version: int, p: produce.PartitionResponse) -> produce.PartitionResponse:
    """What a version carries of ``p``: older versions have no log start offset or errors,
    v10+ a CurrentLeader when it is not the default."""
    leader = p.current_leader if version >= 10 and p.current_leader != (-1, -1) else None
    return produce.PartitionResponse(
        p.index, p.error_code, p.base_offset, p.log_append_time_ms,
        p.log_start_offset if version >= 5 else -1,
        p.error_message if version >= 8 else None,
        list(p.record_errors) if version >= 8 else [], leader)


@pytest.mark.parametrize("version", VERSIONS)
def test_client_requests_are_read_by_kio(version: int) -> None:
    @_CASE
    @given(st.lists(st.tuples(st.text(min_size=1, max_size=20),
                              st.lists(st.tuples(st.integers(0, 2**31 - 1),
                                                 st.binary(max_size=64)), max_size=3)),
                    max_size=3),
           st.one_of(st.none(), st.text(max_size=10)), st.sampled_from([-1, 0, 1]),
           st.integers(0, 2**31 - 1))
    def check(topics: list[tuple[str, list[tuple[int, bytes]]]], transactional_id: str | None,
              acks: int, timeout_ms: int) -> None:
        pieces = produce.encode_produce_request(version, acks, timeout_ms, topics,
                                                transactional_id)
        body = b"".join(bytes(p) for p in pieces)
        assert body == encode(make_request(version, topics, transactional_id, acks, timeout_ms))
        decoded = kio_decode(version, body)
        assert [t.name for t in decoded.topic_data] == [name for name, _ in topics]

    check()


def test_client_request_records_are_not_copied() -> None:
    records = bytearray(b"x" * 100)
    pieces = produce.encode_produce_request(9, 1, 1000, [("t", [(0, records)])])
    assert any(piece is records for piece in pieces)


@pytest.mark.parametrize("version", VERSIONS)
def test_client_decodes_responses_kio_wrote(version: int) -> None:
    @_CASE
    @given(response_topics, st.integers(0, 2**31 - 1), node_endpoints)
    def check(topics: list[tuple[str, list[produce.PartitionResponse]]], throttle: int,
              nodes: list[NodeEndpoint]) -> None:
        decoded, throttle_ms = produce.decode_produce_response(
            version, _kio_response(version, topics, throttle, nodes))
        assert throttle_ms == throttle
        assert decoded == [(name, [_expected_fields(version, p) for p in partitions])
                           for name, partitions in topics]

    check()


@pytest.mark.parametrize("version", VERSIONS)
def test_every_truncated_response_is_invalid(version: int) -> None:
    topics = [("t", [produce.PartitionResponse(0, 0, 42, -1, 0)]),
              ("errors", [produce.PartitionResponse(4, 87, record_errors=[(0, "bad")],
                                                    error_message="no"),
                          produce.PartitionResponse(5, 6, current_leader=(3, 9))])]
    body = _kio_response(version, topics, 0, [NodeEndpoint(3, "h", 9092)])
    for cut in range(len(body)):
        with pytest.raises(produce.InvalidResponseError):
            produce.decode_produce_response(version, body[:cut])


@pytest.mark.parametrize("version", [3, 9])
def test_huge_response_counts_are_refused(version: int) -> None:
    huge = b"\xff\xff\xff\x7f" if version < 9 else b"\xff\xff\xff\xff\x07"
    with pytest.raises(produce.InvalidResponseError, match="topics"):
        produce.decode_produce_response(version, huge + b"\x00" * 8)


def test_random_damage_to_responses_never_escapes_as_another_error() -> None:
    rng = random.Random(5)
    for version in VERSIONS:
        body = bytearray(_kio_response(version, [
            ("t", [produce.PartitionResponse(0, 0, 42, -1, 0, "m", [(1, "x")])])], 0))
        for _ in range(300):
            damaged = bytearray(body)
            for _ in range(rng.randint(1, 4)):
                damaged[rng.randrange(len(damaged))] = rng.randrange(256)
            # anything but InvalidResponseError escaping fails the test
            with contextlib.suppress(produce.InvalidResponseError):
                produce.decode_produce_response(version, damaged)
