"""Cross-checks of klog's record formats against independent implementations.

Two oracles, both written without reference to klog: kafka-python (pure Python) and
aiokafka (C extension records). For every magic (0, 1, 2) and every codec each oracle
supports, batches built by the oracle must decode identically in klog (offsets,
timestamps, keys, values, headers, CRCs valid), and batches built by klog must decode in
the oracle. A codec is skipped for one oracle only when that oracle cannot do it, and the
skip reason says so.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from typing import Any

import pytest

from klog.protocol.records.batch import (
    CompressionType,
    TimestampType,
    iter_batch_headers,
    patch_base_offset,
    patch_legacy_offset,
)
from klog.protocol.records.control import (
    ControlRecordType,
    EndTransactionMarker,
    build_control_batch,
)
from klog.protocol.records.decode import iter_records
from klog.protocol.records.legacy import build_legacy_message_set
from klog.protocol.records.v2 import build_batch

kafka_default = pytest.importorskip("kafka.record.default_records")
kafka_legacy = pytest.importorskip("kafka.record.legacy_records")
kafka_memory = pytest.importorskip("kafka.record.memory_records")
kafka_codec = pytest.importorskip("kafka.codec")
aiokafka_default = pytest.importorskip("aiokafka.record.default_records")
aiokafka_legacy = pytest.importorskip("aiokafka.record.legacy_records")
aiokafka_memory = pytest.importorskip("aiokafka.record.memory_records")
aiokafka_codec = pytest.importorskip("aiokafka.codec")

BASE_OFFSET = 1_000
BATCH_SIZE = 1 << 30
CODECS = list(CompressionType)


@dataclass(frozen=True)
class Oracle:
    name: str
    default: Any
    legacy: Any
    memory: Any

    def missing(self, magic: int, codec: CompressionType) -> str | None:
        """Why this oracle cannot do (magic, codec), or None if it can."""
        if magic < 2 and codec is CompressionType.ZSTD:
            return "zstd needs magic 2 (Kafka rule, not an oracle gap)"
        if self.name == "kafka-python":
            if codec is CompressionType.SNAPPY and not kafka_codec.has_snappy():
                return "kafka-python lacks snappy (python-snappy not installed)"
            if codec is CompressionType.LZ4 and not kafka_codec.has_lz4():
                return "kafka-python lacks lz4"
            if codec is CompressionType.ZSTD and not kafka_codec.has_zstd():
                return "kafka-python lacks zstd"
            if (
                magic == 0
                and codec is CompressionType.LZ4
                and importlib.util.find_spec("xxhash") is None
            ):
                return "kafka-python needs xxhash for magic 0 lz4 (KAFKA-3160 framing)"
        else:
            if magic == 0 and codec is CompressionType.LZ4:
                return "aiokafka does not support lz4 with magic 0 (it refuses KAFKA-3160)"
            has = {
                CompressionType.SNAPPY: aiokafka_codec.has_snappy,
                CompressionType.LZ4: aiokafka_codec.has_lz4,
                CompressionType.ZSTD: aiokafka_codec.has_zstd,
            }.get(codec)
            if has is not None and not has():
                return f"aiokafka lacks {codec.kafka_name}"
        return None


ORACLES = [
    Oracle("kafka-python", kafka_default, kafka_legacy, kafka_memory),
    Oracle("aiokafka", aiokafka_default, aiokafka_legacy, aiokafka_memory),
]


def rows(magic: int) -> list[tuple[int, bytes | None, bytes | None, list]]:
    """Records exercising nulls, empties, binary, a big value (several codec blocks),
    timestamps out of order, and (v2) headers."""
    big = bytes(range(256)) * 400  # 100 KiB: more than one snappy/lz4 block
    out = [
        (1_600_000_000_000, b"key-0", b"value-0", [("trace", b"abc"), ("empty", b"")]),
        (1_600_000_000_500, None, b"no key", [("null", None)]),
        (1_599_999_999_000, b"no value", None, []),
        (1_600_000_001_000, b"", b"", [("\u00fcnicode", b"\x00\xff")]),
        (1_600_000_002_000, b"big", big, []),
    ]
    out += [(1_600_000_003_000 + i, b"k%d" % i, b"v" * i, []) for i in range(40)]
    if magic < 2:
        out = [(t, k, v, []) for t, k, v, _h in out]
    return out


def expected_timestamps(magic: int, data) -> list[int]:
    return [t if magic > 0 else -1 for t, *_ in data]


def klog_decode(buf: bytes) -> list:
    headers = list(iter_batch_headers(buf))
    assert headers and headers[-1].end == len(buf)
    for header in headers:
        assert header.is_valid(buf), f"entry at {header.position} fails its CRC"
    records = [r for h in headers for r in iter_records(buf, h)]
    assert all(r.is_valid for r in records)
    return records


def oracle_decode(oracle: Oracle, buf: bytes) -> list:
    memory = oracle.memory.MemoryRecords(bytes(buf))
    records = []
    while True:
        batch = memory.next_batch()
        if batch is None:
            break
        assert batch.validate_crc()
        records.extend(batch)
    return records


def _params():
    for oracle in ORACLES:
        for magic in (0, 1, 2):
            for codec in CODECS:
                reason = oracle.missing(magic, codec)
                marks = [pytest.mark.skip(reason=reason)] if reason else []
                if reason and "Kafka rule" in reason:
                    continue  # not a combination that exists at all
                yield pytest.param(
                    oracle, magic, codec, marks=marks,
                    id=f"{oracle.name}-v{magic}-{codec.kafka_name}",
                )


PARAMS = list(_params())


@pytest.mark.parametrize(("oracle", "magic", "codec"), PARAMS)
def test_oracle_built_decodes_in_klog(oracle: Oracle, magic: int, codec: CompressionType) -> None:
    data = rows(magic)
    if magic == 2:
        builder = oracle.default.DefaultRecordBatchBuilder(
            2, int(codec), 0, 123_456, 7, 41, BATCH_SIZE
        )
        for i, (ts, key, value, headers) in enumerate(data):
            builder.append(i, ts, key, value, headers)
        buf = bytearray(builder.build())
        # A broker assigns the base offset by patching it (outside the CRC).
        patch_base_offset(buf, 0, BASE_OFFSET)
    else:
        builder = oracle.legacy.LegacyRecordBatchBuilder(magic, int(codec), BATCH_SIZE)
        relative = magic == 1 and codec is not CompressionType.NONE
        for i, (ts, key, value, _headers) in enumerate(data):
            builder.append(i if relative else BASE_OFFSET + i, ts, key, value)
        buf = bytearray(builder.build())
        if codec is not CompressionType.NONE:
            # The wrapper carries the last inner offset once a broker has assigned it.
            patch_legacy_offset(buf, 0, BASE_OFFSET + len(data) - 1)
    records = klog_decode(bytes(buf))
    assert [r.offset for r in records] == [BASE_OFFSET + i for i in range(len(data))]
    assert [r.timestamp for r in records] == expected_timestamps(magic, data)
    assert [r.key for r in records] == [k for _t, k, _v, _h in data]
    assert [r.value for r in records] == [v for _t, _k, v, _h in data]
    assert [list(r.headers) for r in records] == [h for *_x, h in data]
    assert all(r.magic == magic for r in records)
    if magic == 2:
        assert [r.sequence for r in records] == [41 + i for i in range(len(data))]
        (header,) = iter_batch_headers(bytes(buf))
        assert (header.producer_id, header.producer_epoch, header.base_sequence) == (
            123_456, 7, 41,
        )
        assert header.compression is codec
        assert header.max_timestamp == max(t for t, *_ in data)


@pytest.mark.parametrize(("oracle", "magic", "codec"), PARAMS)
def test_klog_built_decodes_in_oracle(oracle: Oracle, magic: int, codec: CompressionType) -> None:
    data = rows(magic)
    if magic == 2:
        buf = build_batch(
            data, compression=codec, base_offset=BASE_OFFSET, producer_id=123_456,
            producer_epoch=7, base_sequence=41,
        )
    else:
        buf = build_legacy_message_set(
            [(t, k, v) for t, k, v, _h in data], magic=magic, compression=codec,
            base_offset=BASE_OFFSET,
        )
    records = oracle_decode(oracle, buf)
    assert [r.offset for r in records] == [BASE_OFFSET + i for i in range(len(data))]
    timestamps = [-1 if r.timestamp is None else r.timestamp for r in records]
    assert timestamps == expected_timestamps(magic, data)
    assert [r.key for r in records] == [k for _t, k, _v, _h in data]
    assert [r.value for r in records] == [v for _t, _k, v, _h in data]
    assert [list(r.headers) for r in records] == [h for *_x, h in data]
    if magic < 2 and oracle.name == "kafka-python":
        assert all(r.validate_crc() for r in records)


@pytest.mark.parametrize("oracle", ORACLES, ids=lambda o: o.name)
@pytest.mark.parametrize("magic", [1, 2])
def test_log_append_time_read_by_oracle(oracle: Oracle, magic: int) -> None:
    data = [(100 + i, None, b"v%d" % i, []) for i in range(3)]
    if magic == 2:
        buf = build_batch(
            data, timestamp_type=TimestampType.LOG_APPEND_TIME, log_append_time=5_555,
            compression=CompressionType.GZIP,
        )
    else:
        buf = build_legacy_message_set(
            [(t, k, v) for t, k, v, _h in data], magic=1, compression=CompressionType.GZIP,
            timestamp_type=TimestampType.LOG_APPEND_TIME, log_append_time=5_555,
        )
    records = oracle_decode(oracle, buf)
    assert [r.timestamp for r in records] == [5_555] * 3
    assert [r.timestamp_type for r in records] == [1] * 3
    assert [r.timestamp for r in klog_decode(buf)] == [5_555] * 3


@pytest.mark.parametrize("oracle", ORACLES, ids=lambda o: o.name)
@pytest.mark.parametrize("control_type", [ControlRecordType.ABORT, ControlRecordType.COMMIT])
def test_control_batch_read_by_oracle(oracle: Oracle, control_type: ControlRecordType) -> None:
    marker = EndTransactionMarker(control_type, coordinator_epoch=3)
    buf = build_control_batch(marker, producer_id=9, producer_epoch=2, timestamp=1)
    batch = oracle.memory.MemoryRecords(buf).next_batch()
    assert batch.is_control_batch and batch.is_transactional and batch.validate_crc()
    (record,) = list(batch)
    if oracle.name == "kafka-python":
        assert record.type == int(control_type)
    else:
        from aiokafka.record.control_record import ControlRecord

        assert ControlRecord.parse(record.key).type_ == int(control_type)
    assert record.value == marker.value()


def test_kafka_python_reads_the_real_corpus_like_klog(kafka_corpus) -> None:
    # A third view of the same bytes: what Kafka wrote, as two implementations see it.
    for partition in ("first_topic-0", "first_topic-1", "first_topic-2", "new_topic-0"):
        buf = (kafka_corpus / partition / "00000000000000000000.log").read_bytes()
        ours = [(r.offset, r.timestamp, r.key, r.value) for r in klog_decode(buf)]
        theirs = [(r.offset, r.timestamp, r.key, r.value) for r in oracle_decode(ORACLES[0], buf)]
        assert ours == theirs
