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
    KafkaError,
    RecordTooLargeError,
)
from klog.protocol.records import validate
from klog.protocol.records.batch import (
    ATTRIBUTES_OFFSET,
    CRC_OFFSET,
    RECORD_BATCH_OVERHEAD,
    CompressionType,
    crc32c,
    read_batch_header,
)
from klog.protocol.records.v2 import build_batch, encode_record, iter_records
from klog.protocol.records.varint import write_unsigned_varlong

NOW = 1_700_000_000_000
native_only = pytest.mark.skipif(validate.native is None, reason="built without a C compiler")

_CASE = settings(max_examples=300, deadline=None, database=None,
                 suppress_health_check=[HealthCheck.too_slow])


def _outcome(fn: Any, data: bytes, count: int, require_keys: bool) -> Any:
    try:
        return fn(data, count, require_keys=require_keys, batch_position=7)
    except KafkaError as exc:
        return type(exc), str(exc)


def _native(data: bytes, count: int, *, require_keys: bool, batch_position: int) -> Any:
    kind, message, low, high = validate.native.check_v2(data, count, require_keys,  # type: ignore
                                                        batch_position)
    if kind:
        raise (CorruptRecordError if kind == 1 else InvalidRecordError)(message)
    return low, high


def _same(data: bytes, count: int, require_keys: bool = False) -> Any:
    """The reference's outcome, after checking the C twin's is the same (when built)."""
    python = _outcome(validate.check_records_reference, data, count, require_keys)
    if validate.native is not None:
        assert _outcome(_native, data, count, require_keys) == python, (data.hex(), count)
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
    for deltas in ([0, 2, 1], [1, 2, 3], [0, 0, 1], [0, 1, 5]):
        kind, message = _same(_section(records, deltas), 3)
        assert kind is InvalidRecordError and "offset delta" in message


def test_a_compacted_topic_needs_a_key_on_every_record() -> None:
    section = _section([(0, b"k", b"v", []), (0, None, b"v", [])])
    assert _same(section, 2) == (0, 0)
    assert _same(section, 2, True) == (
        InvalidRecordError, "record 1 of batch at position 7 has no key: a compacted topic "
        "cannot accept a record without a key")


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
