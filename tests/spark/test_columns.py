"""Tests for klog.spark.columns: the C decoder (klog.spark._columns) against the Python loop.

The Python loop is the reference. Every case decodes the same batches both ways and
compares the Arrow record batches; a fuzz run mutates real records sections and requires
the two to agree on every input: the same rows, or both refusing it as corrupt.
"""

from __future__ import annotations

import functools
import os
import random
from typing import Any

import pyarrow as pa
import pytest

from klog.protocol.errors import CorruptRecordError
from klog.protocol.records.batch import CompressionType, TimestampType, iter_batch_headers
from klog.protocol.records.legacy import build_legacy_message_set
from klog.protocol.records.v2 import build_batch as build_v2
from klog.protocol.records.v2 import records_data
from klog.spark import columns
from klog.spark.arrow import ColumnBuilder

pytestmark = pytest.mark.skipif(
    columns._decode_v2 is None and bool(os.environ.get("KLOG_PURE_PYTHON")),
    reason="KLOG_PURE_PYTHON=1: the C decoder is turned off on purpose")

BIG = 1 << 20


def test_the_extension_is_built_and_in_use() -> None:
    # `make setup` builds it; without it every other test here would compare the Python
    # loop with itself.
    assert columns._decode_v2 is not None, "klog.spark._columns was not built"


def _decode(batches: bytes, start: int, end: int, use_c: bool,
            monkeypatch: pytest.MonkeyPatch) -> tuple[pa.RecordBatch, list[bool], int, int]:
    """(record batch, past_end per batch, first offset, last offset) of ``batches``."""
    with monkeypatch.context() as patch:
        if not use_c:
            patch.setattr(columns, "_decode_v2", None)
        builder = ColumnBuilder("t", 3, include_headers=False)
        past = [columns.append_v2_batch(batches, h, builder, start, end, BIG)
                for h in iter_batch_headers(batches)]
        first = builder.first_offset() if len(builder) else -1
        last = builder.last_offset() if len(builder) else -1
        return builder.flush(), past, first, last


def _both(batches: bytes, monkeypatch: pytest.MonkeyPatch, start: int = 0,
          end: int = 1 << 62) -> pa.RecordBatch:
    c = _decode(batches, start, end, True, monkeypatch)
    python = _decode(batches, start, end, False, monkeypatch)
    assert c[0].equals(python[0]), (c[0].to_pylist()[:3], python[0].to_pylist()[:3])
    assert c[1:] == python[1:]
    return c[0]


def _records(n: int, seed: int = 1) -> list[tuple]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        key = None if i % 7 == 3 else rng.randbytes(rng.choice([0, 1, 5, 200]))
        value = None if i % 11 == 5 else rng.randbytes(rng.choice([0, 3, 100, 20_000]))
        headers = [("h", b"x"), ("e", None)] if i % 5 == 0 else []
        # Timestamps before and after the first record's: negative and positive deltas.
        out.append((1_700_000_000_000 + rng.randint(-5_000, 5_000), key, value, headers))
    return out


@pytest.mark.parametrize("compression", list(CompressionType)[:5])
def test_the_c_decoder_gives_the_python_loops_rows(compression: CompressionType,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    batches = (build_v2(_records(40), base_offset=100, compression=compression)
               + build_v2(_records(30, seed=2), base_offset=140, compression=compression,
                          timestamp_type=TimestampType.LOG_APPEND_TIME,
                          log_append_time=1_700_000_123_456))
    rows = _both(batches, monkeypatch).to_pylist()
    assert [r["offset"] for r in rows] == list(range(100, 170))
    expected = _records(40) + _records(30, seed=2)
    assert [r["key"] for r in rows] == [r[1] for r in expected]
    assert [r["value"] for r in rows] == [r[2] for r in expected]
    assert [r["timestampType"] for r in rows] == [0] * 40 + [1] * 30
    millis = [int(r["timestamp"].timestamp() * 1000) for r in rows]
    assert millis[:40] == [r[0] for r in expected[:40]]
    assert millis[40:] == [1_700_000_123_456] * 30
    assert {r["topic"] for r in rows} == {"t"} and {r["partition"] for r in rows} == {3}


@pytest.mark.parametrize(("start", "end"), [(0, 1 << 62), (105, 1 << 62), (0, 120),
                                            (110, 111), (130, 1 << 62), (100, 100)])
def test_offset_ranges_inside_batches(start: int, end: int,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    batches = (build_v2(_records(20), base_offset=100)
               + build_v2(_records(10), base_offset=120))
    rows = _both(batches, monkeypatch, start, end).to_pylist()
    assert [r["offset"] for r in rows] == list(range(max(start, 100), min(end, 130)))


def test_rows_of_older_formats_and_c_chunks_keep_their_order(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # A v1 message set (decoded onto the lists), then v2 batches (C chunks), then v1 again.
    legacy = [(1_600_000_000_000 + o, b"k%d" % o, b"v%d" % o) for o in range(3)]
    later = [(1_600_000_000_000 + o, b"k%d" % o, b"v%d" % o) for o in range(9, 12)]
    log = [build_legacy_message_set(legacy, magic=1, base_offset=0),
           build_v2(_records(3), base_offset=3), build_v2(_records(3, seed=5), base_offset=6),
           build_legacy_message_set(later, magic=1, base_offset=9)]
    from klog.spark.offline import RangeDecoder

    builder = ColumnBuilder("t", 0, include_headers=False)
    decoder = RangeDecoder(builder, 0, 100)
    for buf in log:
        for header in iter_batch_headers(buf):
            decoder.entry(header, buf)
    assert len(builder) == 12
    assert (builder.first_offset(), builder.last_offset()) == (0, 11)
    rows = builder.flush().to_pylist()
    assert [r["offset"] for r in rows] == list(range(12))
    assert [r["value"] for r in rows[:3]] == [b"v0", b"v1", b"v2"]
    assert [r["value"] for r in rows[3:6]] == [r[2] for r in _records(3)]
    assert [r["value"] for r in rows[9:]] == [b"v9", b"v10", b"v11"]
    assert len(builder) == 0 and builder.flush().num_rows == 0


def test_buffers_are_refused_with_headers_wanted() -> None:
    builder = ColumnBuilder("t", 0, include_headers=True)
    with pytest.raises(ValueError, match="headers"):
        builder.add_arrow(1, (None, 0, b"\0" * 8, b""), (None, 0, b"\0" * 8, b""),
                          b"\0" * 8, b"\0" * 8, 0)


def _outcome(decode: Any) -> Any:
    try:
        return decode()
    except (CorruptRecordError, ValueError) as exc:
        # The message too: both walk v2.py's grammar (C: klog/_v2records.h), so they name
        # the same malformation in the same words (the C side raises ValueError, which
        # spark/columns.py turns into CorruptRecordError).
        return ("corrupt", str(exc))


def _python_rows(data: bytes, count: int, start: int, end: int) -> Any:
    builder = ColumnBuilder("t", 0, include_headers=False)
    past = columns._append_rows(data, count, 100, False, 1_700_000_000_000, 0, builder,
                                start, end, 100 + count - 1)
    wrap = [((t + (1 << 63)) % (1 << 64)) - (1 << 63) for t in builder.timestamps]
    return past, builder.keys, builder.values, builder.offsets, wrap


def _c_rows(data: bytes, count: int, start: int, end: int) -> Any:
    assert columns._decode_v2 is not None
    rows, past, key, value, offsets, timestamps = columns._decode_v2(
        data, count, 100, 1_700_000_000_000, False, start, end)

    def column(c: tuple) -> list[bytes | None]:
        validity, _, offs, raw = c
        ends = memoryview(offs).cast("i")
        return [None if validity is not None and not validity[i >> 3] >> (i & 7) & 1
                else raw[ends[i]:ends[i + 1]] for i in range(rows)]

    return (past, column(key), column(value), list(memoryview(offsets).cast("q")),
            list(memoryview(timestamps).cast("q")))


def test_fuzzed_records_sections_get_the_same_answer_from_both(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # Valid sections mutated at random (bytes changed, cut short, extended): on each, the
    # C decoder and the Python loop give the same rows, or both call it corrupt alike.
    rng = random.Random(20261122)
    batch = build_v2(_records(12, seed=9), base_offset=100)
    header = next(iter_batch_headers(batch))
    section = records_data(batch, header, BIG)
    count = header.records_count or 0
    agreed_valid = agreed_corrupt = 0
    for case in range(3000):
        data = bytearray(section)
        for _ in range(rng.randint(1, 4)):
            kind = rng.random()
            if kind < 0.6:
                data[rng.randrange(len(data))] = rng.randrange(256)
            elif kind < 0.8:
                del data[rng.randrange(len(data)):]
            else:
                data[rng.randrange(len(data) + 1):0] = rng.randbytes(rng.randint(1, 4))
        start, end = rng.choice([(0, 1 << 62), (104, 1 << 62), (0, 107)])
        raw = bytes(data)
        python = _outcome(functools.partial(_python_rows, raw, count, start, end))
        c = _outcome(functools.partial(_c_rows, raw, count, start, end))
        assert c == python, (case, raw.hex())
        if python[0] == "corrupt":
            agreed_corrupt += 1
        else:
            agreed_valid += 1
    # Both kinds of input were met (mutations of lengths and values both happen).
    assert agreed_corrupt > 100 and agreed_valid > 100
