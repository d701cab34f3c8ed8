"""Tests for klog.protocol.records.v2 (record decoding and BatchBuilder)."""

from __future__ import annotations

import struct
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from klog.protocol.errors import CorruptRecordError, KafkaError, RecordTooLargeError
from klog.protocol.records.batch import (
    CompressionType,
    TimestampType,
    crc32c,
    iter_batch_headers,
    read_batch_header,
)
from klog.protocol.records.compression import compress
from klog.protocol.records.record import Record
from klog.protocol.records.v2 import (
    BatchBuilder,
    RecordColumns,
    RecordFieldsRow,
    build_batch,
    decode_record_fields,
    encode_record,
    iter_records,
    record_columns,
    records_data,
    walk_records,
)
from klog.protocol.records.varint import write_varint

CODECS = list(CompressionType)


def decode(buf: bytes, **kwargs) -> list[Record]:
    return list(iter_records(buf, read_batch_header(buf), **kwargs))


def raw_batch(records: bytes, count: int, *, codec: int = 0, base_offset: int = 0) -> bytes:
    """A v2 batch around an arbitrary records section, with a correct CRC."""
    body = struct.pack(">hiqqqhii", codec, max(count - 1, 0), 1000, 1000, -1, -1, -1, count)
    body += records
    crc = crc32c(body)
    return struct.pack(">qiibI", base_offset, len(body) + 9, -1, 2, crc) + body


def test_decodes_every_field() -> None:
    builder = BatchBuilder(base_offset=1000, producer_id=7, producer_epoch=1, base_sequence=40)
    assert builder.append(1_000, b"k0", b"v0") == 0
    assert builder.append(999, None, b"v1", [("a", b"1"), ("b", None)]) == 1
    assert builder.append(1_070, b"k2", None, [("ü", b"")]) == 2
    buf = builder.build()
    records = decode(buf)
    assert [r.offset for r in records] == [1000, 1001, 1002]
    assert [r.timestamp for r in records] == [1_000, 999, 1_070]
    assert [r.key for r in records] == [b"k0", None, b"k2"]
    assert [r.value for r in records] == [b"v0", b"v1", None]
    assert [r.headers for r in records] == [(), (("a", b"1"), ("b", None)), (("ü", b""),)]
    assert [r.sequence for r in records] == [40, 41, 42]
    assert [r.key_size for r in records] == [2, -1, 2]
    assert [r.value_size for r in records] == [2, 2, -1]
    assert all(r.magic == 2 and r.crc is None and r.is_valid for r in records)
    assert all(r.timestamp_type is TimestampType.CREATE_TIME for r in records)
    # size_in_bytes is the record's encoded size, length prefix included; they tile the
    # records section.
    assert sum(r.size_in_bytes for r in records) == len(buf) - 61
    header = read_batch_header(buf)
    assert header.base_timestamp == 1_000 and header.max_timestamp == 1_070


def test_record_size_matches_encoding() -> None:
    encoded = encode_record(0, 0, b"key", b"x" * 200, [("h", b"v")])
    buf = raw_batch(encoded, 1)
    assert decode(buf)[0].size_in_bytes == len(encoded)


def test_log_append_time_replaces_record_timestamps() -> None:
    buf = build_batch(
        [(1, b"a", b"b", ()), (2, b"c", b"d", ())],
        timestamp_type=TimestampType.LOG_APPEND_TIME,
        log_append_time=9_999,
    )
    records = decode(buf)
    assert [r.timestamp for r in records] == [9_999, 9_999]
    assert all(r.timestamp_type is TimestampType.LOG_APPEND_TIME for r in records)


def test_log_append_time_defaults_to_now() -> None:
    before = int(time.time() * 1000)
    buf = build_batch([(1, None, b"x", ())], timestamp_type=TimestampType.LOG_APPEND_TIME)
    assert before <= read_batch_header(buf).max_timestamp <= int(time.time() * 1000)


def test_sequence_wraps_and_none_without_producer() -> None:
    buf = build_batch([(1, None, b"x", ())] * 3, base_sequence=2**31 - 2, producer_id=1)
    assert [r.sequence for r in decode(buf)] == [2**31 - 2, 2**31 - 1, 0]
    assert [r.sequence for r in decode(build_batch([(1, None, b"x", ())] * 2))] == [-1, -1]


def test_offset_gaps_as_after_compaction() -> None:
    builder = BatchBuilder(base_offset=50)
    builder.append(1, b"a", b"1")
    builder.append(2, b"b", b"2", offset=55)
    with pytest.raises(ValueError):
        builder.append(3, b"c", b"3", offset=55)
    buf = builder.build()
    assert [r.offset for r in decode(buf)] == [50, 55]
    assert read_batch_header(buf).last_offset == 55


def test_empty_batch() -> None:
    buf = BatchBuilder(base_offset=3).build()
    header = read_batch_header(buf)
    assert header.records_count == 0
    assert header.base_timestamp == header.max_timestamp == -1
    assert header.is_valid(buf)
    assert decode(buf) == []


def test_builder_refuses_other_magics() -> None:
    with pytest.raises(ValueError, match="legacy"):
        BatchBuilder(magic=1)


@pytest.mark.parametrize("codec", CODECS)
def test_every_codec(codec: CompressionType) -> None:
    rows = [(1_000 + i, b"key%d" % i, b"value-%d" % i * 20, [("i", b"%d" % i)]) for i in range(300)]
    buf = build_batch(rows, compression=codec, base_offset=10)
    header = read_batch_header(buf)
    assert header.compression is codec
    assert header.is_valid(buf)
    records = decode(buf)
    assert [(r.timestamp, r.key, r.value, list(r.headers)) for r in records] == rows
    assert [r.offset for r in records] == list(range(10, 310))


def test_batches_in_a_buffer_at_nonzero_positions() -> None:
    one = build_batch([(1, b"a", b"b", ())], base_offset=0)
    two = build_batch([(2, b"c", b"d", ())], base_offset=1, compression=CompressionType.GZIP)
    buf = bytearray(one + two)
    got = [r.key for h in iter_batch_headers(buf) for r in iter_records(memoryview(buf), h)]
    assert got == [b"a", b"c"]


def test_rejects_legacy_headers() -> None:
    from klog.protocol.records.legacy import build_legacy_message

    buf = build_legacy_message(0, 1, None, b"x")
    with pytest.raises(ValueError):
        iter_records(buf, read_batch_header(buf))


headers_strategy = st.lists(
    st.tuples(st.text(max_size=8), st.one_of(st.none(), st.binary(max_size=8))), max_size=3
)
record_strategy = st.tuples(
    st.integers(0, 2**45),
    st.one_of(st.none(), st.binary(max_size=40)),
    st.one_of(st.none(), st.binary(max_size=300)),
    headers_strategy,
)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(record_strategy, max_size=25),
    st.sampled_from(CODECS),
    st.integers(0, 2**40),
    st.integers(-1, 2**31 - 1),
)
def test_round_trip_property(rows, codec, base_offset, base_sequence) -> None:
    buf = build_batch(
        rows, compression=codec, base_offset=base_offset, base_sequence=base_sequence,
        producer_id=1 if base_sequence >= 0 else -1,
    )
    header = read_batch_header(buf)
    assert header.is_valid(buf)
    assert header.records_count == len(rows)
    records = decode(buf)
    assert [(r.timestamp, r.key, r.value, list(r.headers)) for r in records] == [
        (t, k, v, list(h)) for t, k, v, h in rows
    ]
    assert [r.offset for r in records] == [base_offset + i for i in range(len(rows))]
    if rows:
        assert header.max_timestamp == max(r[0] for r in rows)
        assert header.base_timestamp == rows[0][0]


# --- bad input ---------------------------------------------------------------------------


def _sample() -> bytes:
    return build_batch([(1_000 + i, b"k%d" % i, b"v" * 30, [("h", b"x")]) for i in range(5)])


def test_record_count_larger_than_records() -> None:
    buf = bytearray(_sample())
    struct.pack_into(">i", buf, 57, 6)
    with pytest.raises(CorruptRecordError, match="truncated"):
        decode(bytes(buf))


def test_record_count_smaller_than_records() -> None:
    buf = bytearray(_sample())
    struct.pack_into(">i", buf, 57, 4)
    with pytest.raises(CorruptRecordError, match="bytes after"):
        decode(bytes(buf))


@pytest.mark.parametrize("count", [-1, 2**31 - 1, 10_000_000])
def test_absurd_record_counts_fail_before_looping(count: int) -> None:
    buf = bytearray(_sample())
    struct.pack_into(">i", buf, 57, count)
    started = time.monotonic()
    with pytest.raises(CorruptRecordError):
        decode(bytes(buf))
    assert time.monotonic() - started < 0.5


def test_truncated_records_section() -> None:
    full = _sample()
    records = full[61:]
    for cut in range(1, len(records), 7):
        buf = raw_batch(records[:cut], 5)
        with pytest.raises(CorruptRecordError):
            decode(buf)


@pytest.mark.parametrize(
    "record",
    [
        # record length says 2 GiB
        write_varint(2**31 - 1) + b"\x00" * 20,
        # key length says 1 GiB in a small record
        write_varint(10) + b"\x00\x00\x00" + write_varint(2**30) + b"\x00" * 5,
        # value length 1 GiB
        write_varint(10) + b"\x00\x00\x00\x02k" + write_varint(2**30) + b"\x00" * 3,
        # header count 1 billion
        write_varint(12) + b"\x00\x00\x00\x01\x01" + write_varint(10**9) + b"\x00" * 3,
        # header key length 1 GiB
        write_varint(12) + b"\x00\x00\x00\x01\x01\x02" + write_varint(2**30) + b"\x00" * 3,
        # header value length 1 GiB
        write_varint(12) + b"\x00\x00\x00\x01\x01\x02\x02h" + write_varint(2**30) + b"\x00",
    ],
    ids=["record", "key", "value", "header-count", "header-key", "header-value"],
)
def test_huge_length_fields_fail_fast_without_allocating(record: bytes) -> None:
    buf = raw_batch(record, 1)
    started = time.monotonic()
    with pytest.raises(CorruptRecordError):
        decode(buf)
    assert time.monotonic() - started < 0.5


@pytest.mark.parametrize(
    "record",
    [
        write_varint(-5) + b"\x00" * 10,  # negative record length
        write_varint(3) + b"\x00\x00\x00",  # shorter than any record body
        write_varint(8) + b"\x00\x00\x00\x01\x01\x01" + b"\x00\x00",  # 2 unread bytes
        write_varint(7) + b"\x00\x00\x00\x01\x01\x01" + write_varint(-1),  # negative hdrs
        write_varint(6) + b"\x00\xff\xff\xff\xff\xff",  # overlong varint inside
    ],
    ids=["negative-length", "too-short", "size-mismatch", "negative-headers", "overlong"],
)
def test_malformed_records(record: bytes) -> None:
    with pytest.raises(CorruptRecordError):
        decode(raw_batch(record, 1))


def test_zero_filled_records_section() -> None:
    # A zero byte is a record length of 0: less than any record body.
    with pytest.raises(CorruptRecordError):
        decode(raw_batch(bytes(500), 5))


@pytest.mark.parametrize("codec", [1, 2, 3, 4])
def test_garbage_compressed_records(codec: int) -> None:
    with pytest.raises(CorruptRecordError):
        decode(raw_batch(b"definitely not compressed data" * 3, 2, codec=codec))


@pytest.mark.parametrize("codec", [1, 2, 3, 4])
def test_decompression_bomb(codec: int) -> None:
    payload = compress(codec, bytes(8 * 1024 * 1024))
    buf = raw_batch(payload, 1, codec=codec)
    with pytest.raises(RecordTooLargeError):
        decode(buf, max_decompressed_size=1024 * 1024)


def test_compressed_section_with_fewer_records_than_declared() -> None:
    encoded = encode_record(0, 0, b"k", b"v")
    buf = raw_batch(compress(CompressionType.LZ4, encoded), 3, codec=3)
    with pytest.raises(CorruptRecordError):
        decode(buf)


def test_malformed_header_keys_decode_leniently_like_java() -> None:
    record = encode_record(0, 0, None, b"v", [("k", b"v")]).replace(b"\x02k", b"\x02\xff")
    (record_obj,) = decode(raw_batch(record, 1))
    assert record_obj.headers == (("\ufffd", b"v"),)


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_random_damage_raises_only_corrupt(data) -> None:
    codec = data.draw(st.sampled_from([0, 0, 1, 3, 4]))
    original = build_batch(
        [(i, b"key%d" % i, b"val" * i, [("h", b"v")]) for i in range(6)], compression=codec
    )
    records = bytearray(original[61:])
    for _ in range(data.draw(st.integers(1, 4))):
        index = data.draw(st.integers(0, len(records) - 1))
        records[index] = data.draw(st.integers(0, 255))
    buf = raw_batch(bytes(records), 6, codec=codec)
    try:
        decoded = decode(buf, max_decompressed_size=1 << 20)
    except (CorruptRecordError, RecordTooLargeError):
        return
    assert len(decoded) == 6


@pytest.mark.parametrize("codec", [5, 6, 7])
def test_unknown_codec_id_is_corrupt(codec: int) -> None:
    with pytest.raises(CorruptRecordError, match="unknown compression"):
        decode(raw_batch(b"\x00" * 20, 1, codec=codec))


# --- record_columns: the metadata walk must agree with iter_records ----------------------


def columns_from_records(records: list[Record]) -> RecordColumns:
    return RecordColumns(
        [r.offset for r in records],
        [r.timestamp for r in records],
        [r.key_size for r in records],
        [r.value_size for r in records],
        [r.sequence for r in records],
        [tuple(h[0] for h in r.headers) for r in records],
    )


def assert_columns_agree(buf: bytes, **kwargs) -> RecordColumns | None:
    """record_columns gives iter_records' metadata, or both reject ``buf`` alike."""
    header = read_batch_header(buf)
    try:
        expected = columns_from_records(list(iter_records(buf, header, **kwargs)))
    except KafkaError as exc:
        with pytest.raises(type(exc)):
            record_columns(buf, header, **kwargs)
        return None
    got = record_columns(buf, header, **kwargs)
    assert [list(column) for column in got] == [list(column) for column in expected]
    assert isinstance(got.offsets, list)
    return got


def test_columns_of_every_field() -> None:
    builder = BatchBuilder(base_offset=1000, producer_id=7, producer_epoch=1, base_sequence=40)
    builder.append(1_000, b"k0", b"v0")
    builder.append(999, None, b"v1", [("a", b"1"), ("b", None)])
    builder.append(1_070, b"k2", None, [("\u00fc", b"")])
    builder.append(5, b"", b"x" * 9000, offset=1000 + 20_000)  # 3-byte varints
    columns = assert_columns_agree(builder.build())
    assert columns == RecordColumns(
        [1000, 1001, 1002, 21000],
        [1_000, 999, 1_070, 5],
        (2, -1, 2, 0),
        (2, 2, -1, 9000),
        [40, 41, 42, 20040],
        ((), ("a", "b"), ("\u00fc",), ()),
    )


def test_columns_of_log_append_time_and_wrapping_sequences() -> None:
    buf = build_batch(
        [(1, b"a", b"b", ()), (2, None, None, ())],
        timestamp_type=TimestampType.LOG_APPEND_TIME,
        log_append_time=9_999,
        producer_id=1,
        base_sequence=2**31 - 1,
    )
    columns = assert_columns_agree(buf)
    assert columns is not None
    assert columns.timestamps == [9_999, 9_999]
    assert columns.sequences == [2**31 - 1, 0]


def test_columns_of_an_empty_batch() -> None:
    assert assert_columns_agree(build_batch([])) == RecordColumns([], [], [], [], [], [])


@pytest.mark.parametrize(
    "record",
    [
        # key length -1 written as a two-byte varint; value length -5 (null, as in Java)
        write_varint(7) + b"\x00\x00\x00\x81\x00" + write_varint(-5) + b"\x00",
        # a 2-byte record length for a small record
        b"\x8c\x00" + b"\x00\x00\x00\x01\x01\x00",
        # a header whose key holds "%" (a formatting character downstream)
        encode_record(3, -7, b"k", b"v", [("%d%s", b"x"), ("", None)]),
    ],
    ids=["non-canonical-null-key", "non-canonical-length", "percent-header"],
)
def test_columns_of_unusual_but_valid_records(record: bytes) -> None:
    assert assert_columns_agree(raw_batch(record, 1, base_offset=7)) is not None


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(st.tuples(record_strategy, st.integers(1, 20_000)), max_size=25),
    st.sampled_from(CODECS),
    st.integers(0, 2**40),
    st.integers(-1, 2**31 - 1),
    st.booleans(),
)
def test_columns_agree_with_iter_records(rows, codec, base_offset, base_sequence, log_append):
    builder = BatchBuilder(
        compression=codec,
        base_offset=base_offset,
        base_sequence=base_sequence,
        producer_id=1 if base_sequence >= 0 else -1,
        timestamp_type=(
            TimestampType.LOG_APPEND_TIME if log_append else TimestampType.CREATE_TIME
        ),
        log_append_time=123,
    )
    offset = base_offset
    for (timestamp, key, value, headers), gap in rows:
        builder.append(timestamp, key, value, headers, offset=offset)
        offset += gap if gap < 5 else 1  # mostly consecutive, some gaps as after compaction
    assert assert_columns_agree(builder.build()) is not None


@pytest.mark.parametrize(
    "record",
    [
        write_varint(2**31 - 1) + b"\x00" * 20,
        write_varint(10) + b"\x00\x00\x00" + write_varint(2**30) + b"\x00" * 5,
        write_varint(10) + b"\x00\x00\x00\x02k" + write_varint(2**30) + b"\x00" * 3,
        write_varint(12) + b"\x00\x00\x00\x01\x01" + write_varint(10**9) + b"\x00" * 3,
        write_varint(12) + b"\x00\x00\x00\x01\x01\x02" + write_varint(2**30) + b"\x00" * 3,
        write_varint(12) + b"\x00\x00\x00\x01\x01\x02\x02h" + write_varint(2**30) + b"\x00",
        write_varint(-5) + b"\x00" * 10,
        write_varint(3) + b"\x00\x00\x00",
        write_varint(8) + b"\x00\x00\x00\x01\x01\x01" + b"\x00\x00",
        write_varint(7) + b"\x00\x00\x00\x01\x01\x01" + write_varint(-1),
        write_varint(6) + b"\x00\xff\xff\xff\xff\xff",
        # the key ends exactly at the record's end: no room for the value length
        write_varint(6) + b"\x00\x00\x00\x04kk",
        # key and value fit the batch but overrun the record's length
        write_varint(6) + b"\x00\x00\x00\x02k\x02v\x00" + encode_record(0, 0, None, b""),
        bytes(500),
    ],
)
def test_columns_reject_what_iter_records_rejects(record: bytes) -> None:
    started = time.monotonic()
    assert assert_columns_agree(raw_batch(record, 1)) is None
    assert time.monotonic() - started < 0.5


def test_columns_reject_bad_counts_and_truncation_alike() -> None:
    full = _sample()
    for count in (-1, 0, 4, 6, 2**31 - 1):
        buf = bytearray(full)
        struct.pack_into(">i", buf, 57, count)
        assert assert_columns_agree(bytes(buf)) is None
    for cut in range(1, len(full) - 61):
        assert assert_columns_agree(raw_batch(full[61 : 61 + cut], 5)) is None
    with pytest.raises(RecordTooLargeError):
        buf = raw_batch(compress(1, bytes(8 << 20)), 1, codec=1)
        record_columns(buf, read_batch_header(buf), max_decompressed_size=1 << 20)


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_columns_and_iter_records_agree_on_random_damage(data) -> None:
    codec = data.draw(st.sampled_from([0, 0, 0, 1, 3]))
    original = build_batch(
        [
            (
                i * 7 - 20,
                None if i % 3 == 0 else b"key%d" % i,
                b"v" * (i * 40),
                [(f"h{j}", None if j else b"v") for j in range(i % 3)],
            )
            for i in range(6)
        ],
        compression=codec,
    )
    records = bytearray(original[61:])
    for _ in range(data.draw(st.integers(1, 4))):
        index = data.draw(st.integers(0, len(records) - 1))
        records[index] = data.draw(st.integers(0, 255))
    count = data.draw(st.sampled_from([6, 6, 6, 5, 7]))
    buf = raw_batch(bytes(records), count, codec=codec)
    assert_columns_agree(buf, max_decompressed_size=1 << 20)


@pytest.mark.parametrize(("start", "end"), [(0, 1 << 62), (52, 1 << 62), (0, 55), (53, 54)])
@pytest.mark.parametrize("codec", [CompressionType.NONE, CompressionType.GZIP])
def test_decode_record_fields_is_iter_records_as_columns(
    codec: CompressionType, start: int, end: int
) -> None:
    # The columns Spark's export reads (and _columns.c's reference): the same records as
    # iter_records gives, those in [start, end), and whether the end was reached.
    records = [
        (1_700_000_000_000 + i, None if i % 3 == 0 else f"k{i}".encode(),
         None if i == 4 else b"v" * i, [("h", b"x")] if i % 2 else [])
        for i in range(8)
    ]
    batch = build_batch(records, base_offset=50, compression=codec)
    header = next(iter_batch_headers(batch))
    expected = [r for r in iter_records(batch, header) if start <= r.offset < end]
    fields = decode_record_fields(
        records_data(batch, header, 1 << 20), header.records_count or 0, 50, False,
        header.base_timestamp, start=start, end=end, last_offset=header.last_offset,
        include_headers=True,
    )
    assert fields.offsets == [r.offset for r in expected]
    assert fields.timestamps == [r.timestamp for r in expected]
    assert fields.keys == [r.key for r in expected]
    assert fields.values == [r.value for r in expected]
    assert fields.headers == [r.headers for r in expected]
    assert fields.past_end is (end <= header.last_offset)


def test_decode_record_fields_refuses_what_iter_records_refuses() -> None:
    batch = build_batch([(0, b"k", b"value", [])] * 3)
    header = next(iter_batch_headers(batch))
    section = bytearray(records_data(batch, header, 1 << 20))
    section[0] = 0x7E  # the first record's length, far beyond the section
    with pytest.raises(CorruptRecordError):
        decode_record_fields(bytes(section), 3, 0, False, 0, start=0, end=1 << 62,
                             last_offset=2)


# --- one grammar: every reader is walk_records, and keeps its own way of stopping ----------


def test_iter_records_yields_the_records_before_a_malformed_one() -> None:
    # dump --deep-iteration prints what precedes the damage, as Kafka's tool does.
    good = [encode_record(i, 0, b"k%d" % i, b"v") for i in range(3)]
    section = b"".join(good) + write_varint(-5) + b"\x00" * 10
    header = read_batch_header(raw_batch(section, 4))
    records = iter_records(raw_batch(section, 4), header)
    assert [next(records).key for _ in range(3)] == [b"k0", b"k1", b"k2"]
    with pytest.raises(CorruptRecordError, match="record 3 of batch at position 0 has a bad"):
        next(records)


def test_decode_record_fields_does_not_read_past_the_end_of_its_range() -> None:
    # Records 0-2 are sound, record 3 is not: a range that ends at offset 2 stops at the
    # record of offset 2 and never meets it; a range that takes record 3 does.
    section = b"".join(encode_record(i, 0, None, b"v%d" % i) for i in range(3))
    section += write_varint(7) + b"\x00" * 3
    fields = decode_record_fields(section, 4, 0, False, 0, start=0, end=2, last_offset=3)
    assert (fields.values, fields.past_end) == ([b"v0", b"v1"], True)
    with pytest.raises(CorruptRecordError, match="record 3 of batch at offset 0"):
        decode_record_fields(section, 4, 0, False, 0, start=0, end=4, last_offset=3)


def test_walk_records_gives_fields_as_positions_and_sizes() -> None:
    section = encode_record(0, -3, None, b"val", [("h", None)]) + encode_record(1, 9, b"k", None)
    rows: list[RecordFieldsRow] = []
    walk_records(section, 2, 0, rows)
    (ts0, delta0, _, key0, value_pos, value0, headers0, body0, end0), second = rows
    assert (ts0, delta0, key0, value0, headers0) == (-3, 0, -1, 3, (("h", None),))
    assert section[value_pos : value_pos + value0] == b"val" and section[body0] == 0
    assert (second[0], second[1], second[3], second[5], second[8]) == (9, 1, 1, -1, len(section))
    assert section[second[2] : second[2] + 1] == b"k" and end0 == second[7] - 1
