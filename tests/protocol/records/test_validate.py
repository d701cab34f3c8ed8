"""klog.protocol.records.validate: LogValidator's record checks, and the C twin against the
Python reference on the same (valid, mutated and hostile) records sections."""

from __future__ import annotations

import gzip
import struct
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from klog.protocol.errors import (
    CorruptRecordError,
    InvalidRecordError,
    InvalidTimestampError,
    KafkaError,
    RecordTooLargeError,
)
from klog.protocol.records import validate
from klog.protocol.records.batch import (
    ATTRIBUTES_OFFSET,
    CRC_OFFSET,
    RECORD_BATCH_OVERHEAD,
    CompressionType,
    TimestampType,
    crc32c,
    read_batch_header,
)
from klog.protocol.records.v2 import build_batch, encode_record, iter_records
from klog.protocol.records.varint import write_unsigned_varlong

NOW = 1_700_000_000_000
native_only = pytest.mark.skipif(validate.native is None, reason="built without a C compiler")

_CASE = settings(max_examples=300, deadline=None, database=None,
                 suppress_health_check=[HealthCheck.too_slow])


def _outcome(fn: Any, data: bytes, count: int, require_keys: bool, **rules: Any) -> Any:
    try:
        return fn(data, count, require_keys=require_keys, batch_position=7, **rules)
    except KafkaError as exc:
        return type(exc), str(exc), exc.record_errors


def _native(data: bytes, count: int, *, require_keys: bool, batch_position: int,
            offset_rule: bool = True, base_timestamp: int = 0,
            timestamp_range: tuple[int, int] | None = None) -> Any:
    assert validate.native is not None
    answer = validate.native.check_v2(data, count, offset_rule, require_keys, batch_position,
                                      base_timestamp, timestamp_range)
    if len(answer) == 2:
        return answer
    raise validate._refusal(*answer)


def _same(data: bytes, count: int, require_keys: bool = False, **rules: Any) -> Any:
    """The reference's outcome, after checking the C twin's is the same (when built)."""
    python = _outcome(validate.check_records, data, count, require_keys, python=True, **rules)
    if validate.native is not None:
        assert _outcome(_native, data, count, require_keys, **rules) == python, (
            data.hex(), count, rules)
    return python


record = st.tuples(
    st.integers(-(2**40), 2**40),  # timestamp delta
    st.one_of(st.none(), st.binary(max_size=20)),
    st.one_of(st.none(), st.binary(max_size=300)),  # some lengths need two-byte varints
    st.lists(st.tuples(st.text(max_size=5), st.one_of(st.none(), st.binary(max_size=5))),
             max_size=3),
)


def _section(records: list[Any], deltas: list[int] | None = None) -> bytes:
    return b"".join(
        encode_record(i if deltas is None else deltas[i], ts, key, value, headers)
        for i, (ts, key, value, headers) in enumerate(records))


@native_only
@_CASE
@given(st.lists(record, max_size=6), st.booleans(), st.data())
def test_native_and_reference_agree_on_mutated_sections(records: list[Any], keys: bool,
                                                        data: st.DataObject) -> None:
    section = bytearray(_section(records))
    _same(bytes(section), len(records), keys)
    for _ in range(data.draw(st.integers(0, 4))):
        if not section:
            break
        kind = data.draw(st.sampled_from(["flip", "cut", "insert", "big"]))
        at = data.draw(st.integers(0, len(section) - 1))
        if kind == "flip":
            section[at] = data.draw(st.integers(0, 255))
        elif kind == "cut":
            del section[at:at + data.draw(st.integers(1, 8))]
        elif kind == "insert":
            section[at:at] = data.draw(st.binary(min_size=1, max_size=6))
        else:  # a long varint, the hostile lengths
            section[at:at] = write_unsigned_varlong(data.draw(st.integers(0, 2**64 - 1)))
    count = data.draw(st.sampled_from([len(records), len(records) + 1,
                                       max(len(records) - 1, 0)]))
    _same(bytes(section), count, keys)


@native_only
@_CASE
@given(st.lists(record, min_size=1, max_size=5), st.data())
def test_native_and_reference_agree_on_offset_deltas_and_keys(records: list[Any],
                                                             data: st.DataObject) -> None:
    deltas = data.draw(st.lists(st.integers(-3, 8), min_size=len(records),
                                max_size=len(records)))
    _same(_section(records, deltas), len(records), data.draw(st.booleans()))


HOSTILE = {
    # the record whose length varint says 2^40 (more than 5 bytes: malformed)
    "length 2^40": write_unsigned_varlong(2**41) + bytes(20),
    "length 2^31-1": bytes.fromhex("feffffff0f") + bytes(20),
    "negative length": b"\x03" + bytes(20),
    "varint of 6 bytes": b"\x0c\x00\x00\xff\xff\xff\xff\xff\x01\x00\x00\x00",
    "timestamp varlong of 11 bytes": b"\x20\x00" + b"\xff" * 10 + b"\x01" + bytes(3),
    "header count huge": b"\x0e\x00\x00\x00\x01\x01\xfe\xff\xff\xff\x07" + bytes(3),
    "null header key": b"\x0e\x00\x00\x00\x01\x01\x02\x01\x01" + bytes(5),
    "header value overruns": b"\x0e\x00\x00\x00\x01\x01\x02\x00\x10" + bytes(5),
    "two-byte varint cut": b"\x80",
    "empty": b"",
}


@native_only
@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_native_and_reference_agree_on_hostile_sections(name: str) -> None:
    outcome = _same(HOSTILE[name], 1)
    assert outcome[0] is CorruptRecordError, outcome


def test_a_valid_section_gives_its_timestamp_range() -> None:
    section = _section([(5, b"k", b"v", []), (-3, None, b"w", [("h", None)]), (9, b"", None, [])])
    assert _same(section, 3) == (-3, 9)
    assert validate.check_records(section, 3) == (-3, 9)


def test_offset_deltas_must_be_0_to_n_minus_1_in_order() -> None:
    records = [(0, b"k", b"v", [])] * 3
    for deltas, offenders in (([0, 2, 1], [1, 2]), ([1, 2, 3], [0, 1, 2]), ([0, 0, 1], [1, 2]),
                              ([0, 1, 5], [2])):
        kind, message, errors = _same(_section(records, deltas), 3)
        assert kind is InvalidRecordError and "offset delta" in message
        assert [index for index, _ in errors] == offenders
        assert message.startswith(f"{len(offenders)} of the 3 records of batch at position 7")
    # a batch at rest (compacted) may have gaps: without the offset rule they pass
    assert _same(_section(records, [0, 4, 9]), 3, offset_rule=False) == (0, 0)


def test_a_compacted_topic_needs_a_key_on_every_record() -> None:
    section = _section([(0, b"k", b"v", []), (0, None, b"v", [])])
    assert _same(section, 2) == (0, 0)
    no_key = ("record 1 of batch at position 7 has no key: a compacted topic cannot accept a "
              "record without a key")
    assert _same(section, 2, True) == (
        InvalidRecordError, f"1 of the 2 records of batch at position 7 were refused; the "
        f"first: {no_key}", ((1, no_key),))


def test_every_keyless_record_is_named_and_no_other() -> None:
    """librdkafka's case (test 0011): 100 records, every tenth without a key, to a
    compacted topic: the ten are named, by their index in the batch, in order."""
    records = [(i, None if i % 10 == 0 else b"key-%d" % i, b"value", []) for i in range(100)]
    kind, message, errors = _same(_section(records), 100, True)
    assert kind is InvalidRecordError
    assert [index for index, _ in errors] == list(range(0, 100, 10))
    assert all("has no key" in text for _, text in errors)
    assert message.startswith("10 of the 100 records of batch at position 7 were refused")


BASE = NOW - 1000  # the batch's base timestamp in the timestamp tests


def test_timestamps_out_of_range_are_named_as_timestamp_errors() -> None:
    records = [(0, b"k", b"v", []), (-60_000, b"k", b"v", []), (1000, b"k", b"v", []),
               (10**7, b"k", b"v", [])]
    section = _section(records)
    window = (NOW - 30_000, NOW + 5_000)
    kind, _message, errors = _same(section, 4, base_timestamp=BASE, timestamp_range=window)
    assert kind is InvalidTimestampError
    assert [index for index, _ in errors] == [1, 3]
    assert f"has timestamp {BASE - 60_000}, outside [{window[0]}, {window[1]}]" in errors[0][1]
    # within the range (its ends included), all pass and the deltas come back
    assert _same(section, 4, base_timestamp=BASE,
                 timestamp_range=(BASE - 60_000, BASE + 10**7)) == (-60_000, 10**7)
    # no range: no timestamp rule at all
    assert _same(section, 4, base_timestamp=BASE) == (-60_000, 10**7)


def test_a_record_without_a_timestamp_is_not_judged() -> None:
    """-1 (NO_TIMESTAMP) passes any range, as in Kafka; other negative timestamps do not."""
    records = [(0, b"k", b"v", []), (-1 - BASE, b"k", b"v", []), (-2 - BASE, b"k", b"v", [])]
    kind, _message, errors = _same(_section(records), 3, base_timestamp=BASE,
                                   timestamp_range=(NOW - 10_000, NOW + 10_000))
    assert kind is InvalidTimestampError and [index for index, _ in errors] == [2]


def test_each_record_is_told_the_first_rule_it_breaks() -> None:
    """Offset delta, then key, then timestamp; one timestamp offender makes the batch's
    error INVALID_TIMESTAMP (Kafka's processRecordErrors), the rest stay named."""
    records = [(0, None, b"v", []), (10**9, b"k", b"v", []), (10**9, None, b"v", []),
               (10**9, b"k", b"v", [])]
    deltas = [0, 1, 2, 7]
    kind, _message, errors = _same(_section(records, deltas), 4, True, base_timestamp=BASE,
                                   timestamp_range=(NOW - 10_000, NOW + 10_000))
    assert kind is InvalidTimestampError
    assert [(index, text.split(": ")[0].split(" has ")[1]) for index, text in errors] == [
        (0, "no key"), (1, f"timestamp {BASE + 10**9}, outside [{NOW - 10_000}, "
                           f"{NOW + 10_000}], the range the topic's timestamp limits allow now"),
        (2, "no key"), (3, "offset delta 7")]
    # without a timestamp offender the batch's error is INVALID_RECORD
    kind, _message, errors = _same(_section(records, deltas), 4, True, base_timestamp=BASE)
    assert kind is InvalidRecordError and [index for index, _ in errors] == [0, 2, 3]


def test_timestamps_wrap_around_as_javas_longs() -> None:
    """A hostile delta: base + delta is computed as Kafka computes it (int64), on both sides."""
    base = 2**62
    wrapped = base + 2**63 - 1 - 2**64  # -(2**62) - 1
    records = [(2**63 - 1, b"k", b"v", [])]
    assert _same(_section(records), 1, base_timestamp=base,
                 timestamp_range=(wrapped - 5, wrapped + 5)) == (2**63 - 1, 2**63 - 1)
    kind, _message, errors = _same(_section(records), 1, base_timestamp=base,
                                   timestamp_range=(0, 2**63 - 1))
    assert kind is InvalidTimestampError and f"timestamp {wrapped}," in errors[0][1]
    # the check clamps a range beyond int64 before either side sees it
    assert validate.check_records(_section(records), 1, base_timestamp=0,
                                  timestamp_range=(-(2**70), 2**70)) == (2**63 - 1, 2**63 - 1)


@native_only
@_CASE
@given(st.lists(st.tuples(st.integers(-(2**45), 2**45), st.booleans()), min_size=1,
                max_size=8), st.lists(st.integers(-2, 9), min_size=8, max_size=8),
       st.booleans(), st.booleans(), st.integers(-(2**62), 2**62),
       st.one_of(st.none(), st.tuples(st.integers(-(2**63), 2**63 - 1),
                                      st.integers(-(2**63), 2**63 - 1))))
def test_native_and_reference_agree_on_every_rule(
        rows: list[tuple[int, bool]], deltas: list[int], keys: bool, offsets: bool,
        base: int, window: tuple[int, int] | None) -> None:
    records = [(ts, b"k" if keyed else None, b"v", []) for ts, keyed in rows]
    section = _section(records, deltas[:len(records)])
    _same(section, len(records), keys, offset_rule=offsets, base_timestamp=base,
          timestamp_range=window)


def test_malformation_wins_over_a_broken_rule() -> None:
    """As the reference decides: the whole section must decode before a rule is judged."""
    section = _section([(0, b"k", b"v", [])] * 2, [3, 1]) + b"\x00"
    assert _same(section, 2)[0] is CorruptRecordError


# -- check_batch --------------------------------------------------------------------------


def _batch(**kwargs: Any) -> bytes:
    return build_batch([(NOW, b"k", b"v" * 50), (NOW + 5, b"k2", b"w")], **kwargs)


def _fix_crc(b: bytearray) -> bytes:
    struct.pack_into(">I", b, CRC_OFFSET, crc32c(memoryview(b)[ATTRIBUTES_OFFSET:]))
    return bytes(b)


def _with_section(batch: bytes, section: bytes, attributes: int | None = None) -> bytes:
    b = bytearray(batch[:RECORD_BATCH_OVERHEAD] + section)
    struct.pack_into(">i", b, 8, len(b) - 12)
    if attributes is not None:
        struct.pack_into(">h", b, ATTRIBUTES_OFFSET, attributes)
    return _fix_crc(b)


def _check(batch: bytes, **kwargs: Any) -> validate.CheckedBatch:
    return validate.check_batch(batch, read_batch_header(batch), **kwargs)


@pytest.mark.parametrize("codec", list(CompressionType))
def test_check_batch_inflates_and_gives_timestamps(codec: CompressionType) -> None:
    checked = _check(_batch(compression=codec))
    assert (checked.min_timestamp, checked.max_timestamp) == (NOW, NOW + 5)
    plain = _batch()
    assert bytes(checked.records) == plain[RECORD_BATCH_OVERHEAD:]


@pytest.mark.parametrize(("name", "make", "error"), [
    ("codec id 7", lambda b: _with_section(b, b[RECORD_BATCH_OVERHEAD:], 7),
     CorruptRecordError),
    ("gzip garbage", lambda b: _with_section(b, b"\x1f\x8b" + bytes(range(40)), 1),
     CorruptRecordError),
    ("gzip of a bad section", lambda b: _with_section(
        b, gzip.compress(b[RECORD_BATCH_OVERHEAD:] + b"\x00"), 1), CorruptRecordError),
    ("length 2^40", lambda b: _with_section(b, HOSTILE["length 2^40"]), CorruptRecordError),
    ("count above the bytes", lambda b: _with_section(b, b[RECORD_BATCH_OVERHEAD:][:10]),
     CorruptRecordError),
])
def test_check_batch_refuses_sections_that_do_not_decode(name: str, make: Any,
                                                         error: type) -> None:
    with pytest.raises(error):
        _check(make(_batch()))


def test_check_batch_applies_the_client_count_rules() -> None:
    b = bytearray(_batch())
    struct.pack_into(">i", b, 57, 3)  # recordsCount 3, lastOffsetDelta 1
    with pytest.raises(InvalidRecordError, match="inconsistent"):
        _check(_fix_crc(b))
    with pytest.raises(CorruptRecordError):  # without them the walk finds too few records
        _check(_fix_crc(b), from_client=False)


def test_a_bad_crc_is_reported_before_a_bad_record() -> None:
    b = bytearray(_with_section(_batch(), HOSTILE["length 2^40"]))
    b[-1] ^= 1
    with pytest.raises(CorruptRecordError, match="crc"):
        _check(bytes(b))


def test_a_compression_bomb_stops_at_the_bound() -> None:
    bomb = _with_section(_batch(), gzip.compress(bytes(64 << 20)), 1)
    with pytest.raises(RecordTooLargeError):
        _check(bomb, max_decompressed_size=1 << 20)


def test_control_batches_need_no_key_on_a_compacted_topic() -> None:
    marker = build_batch([(NOW, None, b"\x00" * 6)], is_control=True, producer_id=1,
                         producer_epoch=0)
    _check(marker, require_keys=True)
    with pytest.raises(InvalidRecordError):
        _check(build_batch([(NOW, None, b"v")]), require_keys=True)


@pytest.mark.parametrize("codec", [CompressionType.NONE, CompressionType.ZSTD])
def test_check_batch_judges_each_record_of_a_create_time_batch(codec: CompressionType) -> None:
    window = (NOW - 60_000, NOW + 60_000)
    late = build_batch([(NOW, b"k", b"v"), (NOW - 3_600_000, b"k", b"v"), (NOW, None, b"v"),
                        (NOW + 3_600_000, b"k", b"v"), (NOW + 3_600_000, None, b"v")],
                       compression=codec)
    with pytest.raises(InvalidTimestampError) as caught:
        _check(late, timestamp_range=window, require_keys=True)
    assert [index for index, _ in caught.value.record_errors] == [1, 2, 3, 4]
    assert ["timestamp" in text for _, text in caught.value.record_errors] == [
        True, False, True, False]  # a record without a key is told so first
    # a LogAppendTime batch's records carry no producer's time to judge
    stamped = build_batch([(NOW - 3_600_000, b"k", b"v")], compression=codec,
                          timestamp_type=TimestampType.LOG_APPEND_TIME, log_append_time=NOW)
    _check(stamped, timestamp_range=window)


@pytest.mark.parametrize("target", list(CompressionType))
def test_recompressed_keeps_records_and_header_fields(target: CompressionType) -> None:
    original = _batch(compression=CompressionType.ZSTD, producer_id=9, producer_epoch=2,
                      base_sequence=40)
    out = validate.recompressed(original, _check(original), target)
    header = read_batch_header(out)
    header.ensure_valid(out)
    assert header.compression is target
    before, after = read_batch_header(original), header
    for field in ("producer_id", "producer_epoch", "base_sequence", "base_timestamp",
                  "max_timestamp", "last_offset_delta", "records_count"):
        assert getattr(before, field) == getattr(after, field)
    assert [(r.offset, r.timestamp, r.key, r.value) for r in iter_records(out, header)] == [
        (r.offset, r.timestamp, r.key, r.value) for r in iter_records(original, before)]
