"""Tests for klog.protocol.framing: frames, headers, the ApiVersions fallback, and fuzzing."""

from __future__ import annotations

import contextlib
import io
import struct
import time
import tracemalloc
from collections.abc import Mapping

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.protocol.old import api_versions as kafka_python_api_versions
from kio.schema.api_versions.v0.response import ApiVersion, ApiVersionsResponse
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.errors import ErrorCode as KioErrorCode
from kio.schema.metadata.v12.request import MetadataRequest as MetadataRequestV12
from kio.schema.request_header.v1.header import RequestHeader as KioRequestHeaderV1
from kio.schema.request_header.v2.header import RequestHeader as KioRequestHeaderV2
from kio.schema.response_header.v0.header import ResponseHeader as KioResponseHeaderV0
from kio.schema.response_header.v1.header import ResponseHeader as KioResponseHeaderV1
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import Records, i8, i16, i32, i64

from klog.protocol import apis, framing
from klog.protocol.errors import InvalidRequestError, KafkaError

for _primitive in (i8, i16, i32, i64):
    _primitive.__hypothesis_hook__()  # kio registers its int strategies lazily
st.register_type_strategy(Records, st.binary(max_size=64))

EVERYTHING = apis.KNOWN  # accept every version klog decodes (tests only)


def _kio_bytes(entity: object) -> bytes:
    buffer = io.BytesIO()
    entity_writer(type(entity))(buffer, entity)
    return buffer.getvalue()


def _api_versions_v3_frame(correlation_id: int = 1, client_id: str | None = "rdkafka") -> bytes:
    body = apis.encode_request(
        ApiVersionsRequest(client_software_name="librdkafka", client_software_version="2.3.0")
    )
    return framing.encode_request(18, 3, correlation_id, client_id, body)


# --------------------------------------------------------------------------------------------
# Frames


def test_encode_frame_prefixes_the_size() -> None:
    assert framing.encode_frame(b"abc") == b"\x00\x00\x00\x03abc"
    assert framing.encode_frame(b"") == b"\x00\x00\x00\x00"
    assert framing.decode_frame_size(b"\x00\x00\x01\x00") == 256


def test_decode_frame_size_limits() -> None:
    assert framing.decode_frame_size(struct.pack(">i", 100), max_frame_bytes=100) == 100
    with pytest.raises(framing.FrameSizeError) as excinfo:
        framing.decode_frame_size(struct.pack(">i", 101), max_frame_bytes=100)
    assert excinfo.value.size == 101
    assert "exceeds the limit of 100 bytes" in str(excinfo.value)
    with pytest.raises(framing.FrameSizeError, match="invalid frame size -1"):
        framing.decode_frame_size(struct.pack(">i", -1))
    with pytest.raises(InvalidRequestError):
        framing.decode_frame_size(b"\x00\x00")
    assert framing.DEFAULT_MAX_REQUEST_BYTES == 104857600
    assert framing.check_frame_size(framing.DEFAULT_MAX_REQUEST_BYTES) == 104857600
    with pytest.raises(framing.FrameSizeError):
        framing.check_frame_size(framing.DEFAULT_MAX_REQUEST_BYTES + 1)


def test_frame_decoder_pipelined_frames_in_one_feed() -> None:
    payloads = [b"first", b"", b"third" * 100]
    stream = b"".join(framing.encode_frame(p) for p in payloads)
    decoder = framing.FrameDecoder()
    frames = decoder.feed(stream)
    assert [bytes(f) for f in frames] == payloads
    assert all(isinstance(f, memoryview) for f in frames)
    assert decoder.buffered == 0


def test_frame_decoder_every_split_point() -> None:
    payloads = [b"alpha", b"beta-beta", b"\x00" * 7]
    stream = b"".join(framing.encode_frame(p) for p in payloads)
    for cut in range(len(stream) + 1):
        decoder = framing.FrameDecoder()
        frames = decoder.feed(stream[:cut]) + decoder.feed(stream[cut:])
        assert [bytes(f) for f in frames] == payloads, cut
        assert decoder.buffered == 0


def test_frame_decoder_byte_at_a_time_and_partial_state() -> None:
    stream = framing.encode_frame(b"hello") + framing.encode_frame(b"world")
    decoder = framing.FrameDecoder()
    frames = []
    for index in range(len(stream)):
        frames += decoder.feed(stream[index : index + 1])
        if index == 6:
            assert decoder.buffered == 7 and frames == []
    assert [bytes(f) for f in frames] == [b"hello", b"world"]


def test_frames_survive_later_feeds() -> None:
    decoder = framing.FrameDecoder()
    (first,) = decoder.feed(framing.encode_frame(b"keep me") + b"\x00\x00")
    decoder.feed(b"\x00\x03abc" + b"\x00" * 100)  # the buffer is compacted under it
    assert bytes(first) == b"keep me"


def test_oversized_frame_is_refused_before_its_body_arrives() -> None:
    decoder = framing.FrameDecoder(max_frame_bytes=1000)
    assert decoder.feed(struct.pack(">i", 1000)[:3]) == []
    with pytest.raises(framing.FrameSizeError) as excinfo:
        decoder.feed(struct.pack(">i", 1001)[3:])
    assert excinfo.value.size == 1001
    assert excinfo.value.error_code == 42
    # the stream has lost its framing: it stays refused
    with pytest.raises(framing.FrameSizeError):
        decoder.feed(b"\x00\x00\x00\x01x")


def test_negative_frame_size_is_refused() -> None:
    decoder = framing.FrameDecoder()
    with pytest.raises(framing.FrameSizeError, match="invalid frame size"):
        decoder.feed(b"\xff\xff\xff\xfe")


def test_frame_exactly_at_the_limit_is_accepted() -> None:
    decoder = framing.FrameDecoder(max_frame_bytes=16)
    (frame,) = decoder.feed(framing.encode_frame(b"x" * 16))
    assert bytes(frame) == b"x" * 16


def test_memory_follows_received_bytes_not_the_claimed_size() -> None:
    decoder = framing.FrameDecoder()  # 100 MiB limit
    tracemalloc.start()
    try:
        assert decoder.feed(struct.pack(">i", framing.DEFAULT_MAX_REQUEST_BYTES) + b"x" * 10) == []
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert decoder.buffered == 14
    assert peak < 64_000


def test_large_frame_in_socket_sized_chunks() -> None:
    payload = bytes(range(256)) * 4096  # 1 MiB
    stream = framing.encode_frame(payload) + framing.encode_frame(b"next")
    decoder = framing.FrameDecoder()
    frames = []
    for start in range(0, len(stream), 65536):
        frames += decoder.feed(memoryview(stream)[start : start + 65536])
    assert [bytes(f) for f in frames] == [payload, b"next"]


def test_a_frame_claiming_2_31_bytes_allocates_nothing() -> None:
    decoder = framing.FrameDecoder()
    tracemalloc.start()
    try:
        with pytest.raises(framing.FrameSizeError):
            decoder.feed(struct.pack(">i", 2**31 - 1) + b"\x00" * 16)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 64_000


def _receive_buffered(decoder: framing.FrameDecoder, stream: bytes, most: int
                      ) -> list[memoryview]:
    """What a BufferedProtocol transport does: fill each buffer asked for with at most
    ``most`` bytes of ``stream``, then report the count."""
    frames: list[memoryview] = []
    position = 0
    while position < len(stream):
        buffer = decoder.get_buffer()
        count = min(len(buffer), most, len(stream) - position)
        buffer[:count] = stream[position : position + count]
        position += count
        frames += decoder.buffer_updated(count)
    return frames


@pytest.mark.parametrize("most", [1, 7, 4096, 16_384, 1 << 20])
def test_buffered_reception_gives_the_frames_feed_gives(most: int) -> None:
    payloads = [b"small", bytes(range(256)) * 300, b"", b"x" * framing.IN_PLACE_MIN,
                bytes(range(256)) * 4096, b"tail"]  # 76 KB, 64 KiB, 1 MiB among small ones
    stream = b"".join(framing.encode_frame(p) for p in payloads)
    if most == 1:  # byte by byte through the in-place path too, but not through 1 MiB
        payloads, stream = payloads[:4], stream[: sum(4 + len(p) for p in payloads[:4])]
    decoder = framing.FrameDecoder()
    frames = _receive_buffered(decoder, stream, most)
    assert [bytes(f) for f in frames] == payloads
    assert decoder.buffered == 0
    frames[1][0] = 0xFF  # writable: the broker patches offsets in place
    assert frames[1][0] == 0xFF


def test_buffered_reception_receives_large_bodies_in_place() -> None:
    payload = bytes(range(256)) * 512  # 128 KiB: one chunk
    decoder = framing.FrameDecoder()
    scratch = decoder.get_buffer()
    scratch[:4] = struct.pack(">i", len(payload))
    assert decoder.buffer_updated(4) == []
    body = decoder.get_buffer()
    assert len(body) == len(payload)  # the body's own buffer, not the scratch buffer
    body[:] = payload
    (frame,) = decoder.buffer_updated(len(payload))
    assert frame.obj is body.obj  # handed out without a copy
    assert bytes(frame) == payload


def test_buffered_reception_allocates_one_chunk_ahead_at_most() -> None:
    decoder = framing.FrameDecoder()  # 100 MiB limit
    decoder.get_buffer()  # the scratch buffer
    tracemalloc.start()
    try:
        decoder.get_buffer()[:4] = struct.pack(">i", framing.DEFAULT_MAX_REQUEST_BYTES)
        assert decoder.buffer_updated(4) == []
        for _ in range(3):
            buffer = decoder.get_buffer()
            buffer[:10] = b"x" * 10
            assert decoder.buffer_updated(10) == []
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert decoder.buffered == 34
    assert peak < framing.RECEIVE_CHUNK + 64_000


def test_buffered_reception_checks_sizes_first() -> None:
    decoder = framing.FrameDecoder(max_frame_bytes=1000)
    decoder.get_buffer()[:4] = struct.pack(">i", 1001)
    with pytest.raises(framing.FrameSizeError):
        decoder.buffer_updated(4)
    with pytest.raises(framing.FrameSizeError):  # and stays refused
        decoder.get_buffer()[:1] = b"x"
        decoder.buffer_updated(1)


def test_feed_after_a_partly_filled_body_keeps_the_bytes() -> None:
    payload = bytes(range(256)) * 400
    stream = framing.encode_frame(payload)
    decoder = framing.FrameDecoder()
    decoder.get_buffer()[:4] = stream[:4]
    decoder.buffer_updated(4)
    decoder.get_buffer()[:1000] = stream[4:1004]
    assert decoder.buffer_updated(1000) == []
    (frame,) = decoder.feed(stream[1004:])
    assert bytes(frame) == payload


# --------------------------------------------------------------------------------------------
# Request headers


@pytest.mark.parametrize("client_id", ["rdkafka", "", None, "ünïcode-client"])
def test_request_header_v1_matches_kio(client_id: str | None) -> None:
    ours = framing.encode_request_header(3, 4, 77, client_id)  # Metadata v4: header v1
    kio = _kio_bytes(
        KioRequestHeaderV1(
            request_api_key=i16(3), request_api_version=i16(4), correlation_id=i32(77),
            client_id=client_id,
        )
    )
    assert ours == kio
    header, offset = framing.parse_request_header(ours + b"body", EVERYTHING)
    assert header == framing.RequestHeader(3, 4, 77, client_id, 1)
    assert offset == len(ours)


@pytest.mark.parametrize("client_id", ["rdkafka", None])
def test_request_header_v2_matches_kio(client_id: str | None) -> None:
    ours = framing.encode_request_header(3, 12, 5, client_id)  # Metadata v12: header v2
    kio = _kio_bytes(
        KioRequestHeaderV2(
            request_api_key=i16(3), request_api_version=i16(12), correlation_id=i32(5),
            client_id=client_id,
        )
    )
    assert ours == kio
    assert ours.endswith(b"\x00")  # empty tagged fields; client_id stays a legacy string
    header, offset = framing.parse_request_header(ours, EVERYTHING)
    assert (header.header_version, header.client_id, offset) == (2, client_id, len(ours))


def test_request_header_v0_for_controlled_shutdown_v0() -> None:
    data = framing.encode_request_header(7, 0, 9, "ignored")
    assert data == struct.pack(">hhi", 7, 0, 9)
    header, offset = framing.parse_request_header(data + struct.pack(">i", 3), EVERYTHING)
    assert header == framing.RequestHeader(7, 0, 9, None, 0)
    assert offset == 8
    assert apis.decode_request(7, 0, (data + struct.pack(">i", 3))[offset:]).broker_id == 3


def test_request_header_v2_skips_unknown_tagged_fields() -> None:
    data = (
        struct.pack(">hhih", 3, 12, 5, 2) + b"id"
        + b"\x02" + b"\x07\x03abc" + b"\x81\x01\x00"  # tags 7 (3 bytes) and 129 (empty)
    )
    body = _kio_bytes(
        MetadataRequestV12(
            topics=None, allow_auto_topic_creation=False,
            include_topic_authorized_operations=False,
        )
    )
    header, offset = framing.parse_request_header(data + body, EVERYTHING)
    assert header.client_id == "id"
    assert offset == len(data)
    assert apis.decode_request(3, 12, (data + body)[offset:]).topics is None


def test_kafka_python_request_parses() -> None:
    # kafka-python as an independent encoder of the header, flexible and not
    for version in (0, 3):
        request_class = getattr(kafka_python_api_versions, f"ApiVersionsRequest_v{version}")
        kwargs = (
            {"client_software_name": "kafka-python", "client_software_version": "3.0"}
            if version == 3 else {}
        )
        request = request_class(**kwargs)
        request.with_header(correlation_id=12, client_id="kp")
        frame = request.encode(header=True, framed=True)
        (payload,) = framing.FrameDecoder().feed(frame)
        header, offset = framing.parse_request_header(payload)
        assert header == framing.RequestHeader(
            18, version, 12, "kp", 2 if version >= 3 else 1
        )
        decoded = apis.decode_request(18, version, payload[offset:])
        if version == 3:
            assert decoded.client_software_name == "kafka-python"


def test_malformed_client_id_is_decoded_leniently_as_kafka_does() -> None:
    data = struct.pack(">hhih", 18, 0, 1, 2) + b"\xff\xfe"
    header, _ = framing.parse_request_header(data)
    assert header.client_id == "\ufffd\ufffd"


def test_truncated_headers() -> None:
    data = framing.encode_request_header(3, 12, 5, "client")
    for cut in range(len(data)):
        with pytest.raises(InvalidRequestError):
            framing.parse_request_header(data[:cut], EVERYTHING)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (struct.pack(">hhih", 3, 4, 1, -2), "invalid client_id length"),
        (struct.pack(">hhih", 3, 12, 1, -1) + b"\x05", "cannot fit"),
        (struct.pack(">hhih", 3, 12, 1, -1) + b"\x01\x00\x7f", "past the end"),
        (struct.pack(">hhih", 3, 12, 1, -1) + b"\xff\xff\xff\xff\xff\x01", "longer than 5 bytes"),
    ],
)
def test_malformed_headers(data: bytes, message: str) -> None:
    with pytest.raises(InvalidRequestError, match=message):
        framing.parse_request_header(data, EVERYTHING)


def test_unknown_and_unadvertised_api_keys_close_the_connection() -> None:
    with pytest.raises(apis.UnknownApiKeyError, match="unknown api key 999"):
        framing.parse_request_header(struct.pack(">hhih", 999, 0, 1, -1))
    with pytest.raises(apis.UnknownApiKeyError, match="not enabled"):
        # a known api the broker does not accept (an advertised table without Produce)
        framing.parse_request_header(struct.pack(">hhih", 0, 9, 1, -1), {18: (0, 4)})
    with pytest.raises(apis.UnsupportedVersionError, match="Metadata v13"):
        framing.parse_request_header(
            framing.encode_request_header(3, 13, 1, None), {3: (0, 12), 18: (0, 4)}
        )


def _header_outcome(frame: bytes, full: bool,
                    table: Mapping[int, tuple[int, int]] = apis.ADVERTISED) -> object:
    parse = framing._parse_request_header if full else framing.parse_request_header
    try:
        header, offset = parse(frame, table)
    except KafkaError as exc:
        return type(exc), str(exc)
    return tuple(header), type(header), offset


@pytest.mark.parametrize("table", [apis.ADVERTISED, apis.STANDALONE_ADVERTISED],
                         ids=["cluster", "standalone"])
def test_the_common_case_gives_the_full_paths_result_for_any_bytes(
        table: Mapping[int, tuple[int, int]]) -> None:
    """parse_request_header's short path (advertised key and version, header v1/v2, no
    tagged field) against the full path, on every known key and version with several
    client ids, each byte changed, and every truncation; for both tables a broker serves
    with (standalone, the inter-broker control APIs are refused on either path)."""
    samples = []
    for api_key, (low, high) in apis.ADVERTISED.items():
        for version in (low, high, high + 1, -1):
            for client_id in (None, "", "rdkafka", "\u00e9t\u00e9"):
                with contextlib.suppress(Exception):
                    samples.append(framing.encode_request_header(api_key, version, 7,
                                                                 client_id) + b"\x00body")
    assert len(samples) > 500
    for frame in samples:
        assert _header_outcome(frame, False, table) == _header_outcome(frame, True, table)
    rng = __import__("random").Random(5)
    for frame in rng.sample(samples, 60):
        for cut in range(len(frame)):
            assert _header_outcome(frame[:cut], False, table) == \
                _header_outcome(frame[:cut], True, table)
        for position in range(min(len(frame), 16)):
            for value in (0x00, 0x01, 0x7F, 0x80, 0xFF):
                mutated = bytearray(frame)
                mutated[position] = value
                assert _header_outcome(bytes(mutated), False, table) == \
                    _header_outcome(bytes(mutated), True, table)
    if table is apis.STANDALONE_ADVERTISED:
        for api_key in apis.INTER_BROKER_CONTROL_APIS:
            frame = framing.encode_request_header(api_key, 1, 7, "x")
            with pytest.raises(apis.UnknownApiKeyError, match="not enabled"):
                framing.parse_request_header(frame, table)


# --------------------------------------------------------------------------------------------
# ApiVersions: the v0 fallback


FALLBACK_BYTES = bytes.fromhex(
    "00000010"  # size: 16
    "0000002a"  # correlation id 42, response header v0
    "0023"  # error_code 35 UNSUPPORTED_VERSION
    "00000001"  # api_keys: 1 entry (int32 count: v0 is not flexible)
    "0012" "0000" "0004"  # ApiVersions 0..4
)


def test_fallback_response_bytes() -> None:
    assert framing.api_versions_fallback_response(42) == FALLBACK_BYTES
    # the same bytes kio writes for ApiVersionsResponse v0 behind a v0 header
    body = _kio_bytes(
        ApiVersionsResponse(
            error_code=KioErrorCode.unsupported_version,
            api_keys=(ApiVersion(api_key=i16(18), min_version=i16(0), max_version=i16(4)),),
        )
    )
    header = _kio_bytes(KioResponseHeaderV0(correlation_id=i32(42)))
    assert framing.encode_frame(header + body) == FALLBACK_BYTES


def test_fallback_is_what_a_client_expects() -> None:
    # kafka-python reads any ApiVersions reply carrying an error as v0, whichever version
    # it asked for -- the contract librdkafka's fallback relies on too.
    response = kafka_python_api_versions.ApiVersionsResponse_v3.decode(
        FALLBACK_BYTES, header=True, framed=True
    )
    assert response.error_code == 35
    assert [tuple(k) for k in response.api_keys] == [(18, 0, 4)]


def test_librdkafka_style_negotiation() -> None:
    # v3 is spoken: parsed and decoded normally
    (payload,) = framing.FrameDecoder().feed(_api_versions_v3_frame(correlation_id=1))
    header, offset = framing.parse_request_header(payload)
    assert not framing.is_unsupported_api_versions(header)
    assert apis.decode_request(18, 3, payload[offset:]).client_software_name == "librdkafka"
    # a future v9 is parsed (header v2) but answered with the v0 fallback, not decoded
    future = framing.encode_request(18, 9, 2, "rdkafka", b"\x00\x00\x00")
    (payload,) = framing.FrameDecoder().feed(future)
    header, _ = framing.parse_request_header(payload)
    assert header.header_version == 2
    assert framing.is_unsupported_api_versions(header)
    assert framing.api_versions_fallback_response(header.correlation_id)[4:8] == b"\x00\x00\x00\x02"
    # negative versions too (Kafka: anything outside the supported range)
    header, _ = framing.parse_request_header(struct.pack(">hhih", 18, -1, 3, -1))
    assert framing.is_unsupported_api_versions(header)


def test_fallback_advertises_the_table_range() -> None:
    frame = framing.api_versions_fallback_response(1, {18: (0, 2)})
    assert frame.endswith(b"\x00\x12\x00\x00\x00\x02")


# --------------------------------------------------------------------------------------------
# Responses


@pytest.mark.parametrize("header_version", [0, 1])
def test_response_header_matches_kio(header_version: int) -> None:
    kio_class = KioResponseHeaderV1 if header_version else KioResponseHeaderV0
    expected = framing.encode_frame(_kio_bytes(kio_class(correlation_id=i32(-5))) + b"BODY")
    assert framing.encode_response(header_version, -5, b"BODY") == expected
    prefix = framing.response_prefix(header_version, -5, 4)
    assert prefix + b"BODY" == expected
    correlation_id, offset = framing.parse_response_header(expected[4:], header_version)
    assert correlation_id == -5
    assert expected[4 + offset :] == b"BODY"


def test_response_header_version_2_does_not_exist() -> None:
    with pytest.raises(ValueError):
        framing.response_prefix(2, 1, 0)


def test_response_round_trip_through_the_table() -> None:
    response = ApiVersionsResponse(error_code=KioErrorCode.none, api_keys=())
    body = apis.encode_response(response)
    frame = framing.encode_response(apis.response_header_version(18, 0), 3, body)
    (payload,) = framing.FrameDecoder().feed(frame)
    correlation_id, offset = framing.parse_response_header(payload, 0)
    assert correlation_id == 3
    assert apis.decode_response(18, 0, payload[offset:]) == response
    assert entity_reader(ApiVersionsResponse)(bytes(payload[offset:]), 0)[0] == response


# --------------------------------------------------------------------------------------------
# Fuzzing: only klog.protocol.errors exceptions, in bounded time


def _decode_frame(frame: bytes | memoryview) -> object:
    """What the daemon's connection will do with one frame."""
    header, offset = framing.parse_request_header(frame, EVERYTHING)
    return apis.decode_request(header.api_key, header.api_version, frame[offset:])


@settings(max_examples=300, deadline=None, database=None)
@given(stream=st.binary(max_size=200), chunk=st.integers(1, 50))
def test_fuzz_frame_decoder(stream: bytes, chunk: int) -> None:
    decoder = framing.FrameDecoder(max_frame_bytes=64)
    try:
        for start in range(0, len(stream), chunk):
            for frame in decoder.feed(stream[start : start + chunk]):
                assert len(frame) <= 64
    except framing.FrameSizeError:
        return
    assert decoder.buffered < 4 + 64


@settings(max_examples=400, deadline=None, database=None)
@given(
    api_key=st.sampled_from(sorted(apis.KNOWN)),
    version=st.integers(-2, 20),
    client_id=st.one_of(st.none(), st.text(max_size=10)),
    body=st.binary(max_size=120),
)
def test_fuzz_garbage_bodies(api_key: int, version: int, client_id: str | None,
                             body: bytes) -> None:
    frame = framing.encode_request_header(api_key, version, 1, client_id) + body
    with contextlib.suppress(KafkaError):
        _decode_frame(frame)


@settings(max_examples=300, deadline=None, database=None)
@given(raw=st.binary(min_size=0, max_size=64))
def test_fuzz_garbage_headers(raw: bytes) -> None:
    with contextlib.suppress(KafkaError):
        _decode_frame(raw)


MUTATION_TARGETS = [
    (0, 3), (0, 9), (1, 4), (1, 12), (2, 6), (3, 4), (3, 12), (4, 2), (4, 6), (6, 7),
    (8, 8), (11, 6), (14, 5), (19, 5), (32, 4), (35, 2), (9, 8),
]


@pytest.mark.parametrize(("api_key", "version"), MUTATION_TARGETS)
def test_fuzz_mutated_valid_requests(api_key: int, version: int) -> None:
    cls = apis.API_TABLE[api_key].request_entity(version)

    @settings(
        max_examples=25, deadline=None, database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(entity=st.from_type(cls), data=st.data())
    def check(entity: object, data: st.DataObject) -> None:
        body = bytearray(apis.encode_request(entity))
        position = data.draw(st.integers(0, len(body)))
        mutation = data.draw(st.sampled_from(["huge-int32", "huge-varint", "flip", "cut"]))
        if mutation == "huge-int32":
            body[position : position + 4] = b"\x7f\xff\xff\xff"
        elif mutation == "huge-varint":
            body[position:position] = b"\xff\xff\xff\xff\x0f"
        elif mutation == "flip" and position < len(body):
            body[position] ^= data.draw(st.integers(1, 255))
        else:
            del body[position:]
        started = time.perf_counter()
        with contextlib.suppress(KafkaError):
            apis.decode_request(api_key, version, bytes(body))
        assert time.perf_counter() - started < 1.0

    check()
