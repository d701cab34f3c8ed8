"""klog.client.records: fetched record data -> ConsumerRecords (no network)."""

from __future__ import annotations

import pytest

from klog.client.records import decode_fetched
from klog.protocol.errors import CorruptRecordError, KafkaError, RecordTooLargeError
from klog.protocol.records.batch import CompressionType, TimestampType
from klog.protocol.records.control import (
    ControlRecordType,
    EndTransactionMarker,
    build_control_batch,
)
from klog.protocol.records.legacy import build_legacy_message_set
from klog.protocol.records.v2 import BatchBuilder

T0 = 1_700_000_000_000


def _batch(base: int, n: int, *, codec: CompressionType = CompressionType.NONE,
           pid: int = -1, txn: bool = False, epoch: int = 3, **kw: object) -> bytes:
    b = BatchBuilder(base_offset=base, compression=codec, producer_id=pid, producer_epoch=0,
                     base_sequence=0 if pid >= 0 else -1, is_transactional=txn,
                     partition_leader_epoch=epoch, **kw)  # type: ignore[arg-type]
    for i in range(n):
        off = base + i
        b.append(T0 + off, f"k{off}".encode(), f"v{off}".encode(), [("h", f"{off}".encode())])
    return b.build()


def _decode(data: bytes, offset: int = 0, **kw: object):  # type: ignore[no-untyped-def]
    return decode_fetched(data, topic="t", partition=1, fetch_offset=offset, **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize("codec", list(CompressionType))
def test_every_codec_round_trips(codec: CompressionType) -> None:
    data = _batch(0, 5, codec=codec) + _batch(5, 3, codec=codec)
    out = _decode(data)
    assert out.error is None
    assert [r.offset for r in out.records] == list(range(8))
    r = out.records[6]
    assert (r.topic, r.partition, r.key, r.value, r.timestamp) == ("t", 1, b"k6", b"v6", T0 + 6)
    assert r.headers == [("h", b"6")]
    assert r.timestamp_type == 0 and r.leader_epoch == 3
    assert (r.serialized_key_size, r.serialized_value_size) == (2, 2)
    assert out.next_offset == 8


def test_nulls_and_log_append_time() -> None:
    b = BatchBuilder(base_offset=10, timestamp_type=TimestampType.LOG_APPEND_TIME,
                     log_append_time=T0 + 99)
    b.append(T0, None, None, [("n", None)])
    out = _decode(b.build(), 10)
    (r,) = out.records
    assert (r.key, r.value, r.headers) == (None, None, [("n", None)])
    assert (r.timestamp, r.timestamp_type) == (T0 + 99, 1)
    assert (r.serialized_key_size, r.serialized_value_size) == (-1, -1)


def test_records_before_the_fetch_offset_are_dropped() -> None:
    data = _batch(0, 10, codec=CompressionType.LZ4)
    out = _decode(data, 7)
    assert [r.offset for r in out.records] == [7, 8, 9]
    assert out.next_offset == 10


def test_partial_trailing_batch_is_ignored() -> None:
    whole = _batch(0, 4)
    data = whole + _batch(4, 4)[:-5]
    out = _decode(data)
    assert out.error is None
    assert [r.offset for r in out.records] == [0, 1, 2, 3]
    assert out.next_offset == 4


def test_only_a_partial_batch_is_an_error_not_a_hang() -> None:
    data = _batch(0, 50)[:30]
    out = _decode(data)
    assert out.records == [] and out.next_offset == 0
    assert isinstance(out.error, RecordTooLargeError)


def test_empty_data() -> None:
    for data in (b"", None):
        out = _decode(data, 42)  # type: ignore[arg-type]
        assert out.records == [] and out.next_offset == 42 and out.error is None


def test_compacted_gap_at_the_end_moves_past_the_batch() -> None:
    b = BatchBuilder(base_offset=0)
    b.append(T0, b"a", b"1", offset=0)
    b.append(T0, b"b", b"2", offset=2)
    data = bytearray(b.build())
    # lastOffsetDelta says 5: records 3-5 were compacted away.
    import struct
    struct.pack_into(">i", data, 23, 5)
    from klog.protocol.records.batch import read_batch_header
    header = read_batch_header(data)
    struct.pack_into(">I", data, 17, header.compute_crc(data))
    out = _decode(bytes(data))
    assert [r.offset for r in out.records] == [0, 2]
    assert out.next_offset == 6


def test_crc_checked_when_asked() -> None:
    good = _batch(0, 3)
    bad = bytearray(_batch(3, 3))
    bad[-1] ^= 0xFF
    data = good + bytes(bad)
    out = _decode(data)
    assert [r.offset for r in out.records] == [0, 1, 2]
    assert isinstance(out.error, CorruptRecordError)
    assert out.next_offset == 3
    unchecked = _decode(data, check_crcs=False)
    assert unchecked.error is None or [r.offset for r in unchecked.records][:3] == [0, 1, 2]


def test_garbage_is_an_error() -> None:
    out = _decode(b"\x00" * 8 + b"\xff\xff\xff\xff" + b"x" * 100)
    assert out.records == [] and isinstance(out.error, CorruptRecordError)


@pytest.mark.parametrize("magic", [0, 1])
@pytest.mark.parametrize("codec", [CompressionType.NONE, CompressionType.GZIP,
                                   CompressionType.SNAPPY, CompressionType.LZ4])
def test_legacy_messages(magic: int, codec: CompressionType) -> None:
    items = [(T0 + i, f"k{i}".encode(), f"v{i}".encode()) for i in range(4)]
    data = build_legacy_message_set(items, magic=magic, compression=codec, base_offset=20)
    data += build_legacy_message_set(items[:2], magic=magic, compression=codec, base_offset=24)
    out = _decode(data, 21)
    assert out.error is None
    assert [r.offset for r in out.records] == [21, 22, 23, 24, 25]
    r = out.records[0]
    assert (r.key, r.value, r.headers, r.leader_epoch) == (b"k1", b"v1", [], None)
    assert r.timestamp == (T0 + 1 if magic == 1 else -1)
    assert r.timestamp_type == (0 if magic == 1 else -1)
    assert out.next_offset == 26


def test_control_batches_are_skipped() -> None:
    commit = EndTransactionMarker(ControlRecordType.COMMIT, 0)
    data = (_batch(0, 2, pid=7, txn=True)
            + build_control_batch(commit, producer_id=7, producer_epoch=0, base_offset=2)
            + _batch(3, 1))
    for committed in (False, True):
        out = _decode(data, read_committed=committed, aborted_transactions=[])
        assert [r.offset for r in out.records] == [0, 1, 3]
        assert out.next_offset == 4
    only_marker = build_control_batch(commit, producer_id=7, producer_epoch=0, base_offset=2)
    out = _decode(only_marker, 2)
    assert out.records == [] and out.next_offset == 3


def test_read_committed_drops_aborted_transactions() -> None:
    abort = EndTransactionMarker(ControlRecordType.ABORT, 0)
    commit = EndTransactionMarker(ControlRecordType.COMMIT, 0)
    data = (
        _batch(0, 2, pid=5, txn=True)                     # aborted (pid 5)
        + _batch(2, 2, pid=6, txn=True)                   # committed (pid 6)
        + _batch(4, 1)                                    # plain
        + build_control_batch(abort, producer_id=5, producer_epoch=0, base_offset=5)
        + build_control_batch(commit, producer_id=6, producer_epoch=0, base_offset=6)
        + _batch(7, 2, pid=5, txn=True)                   # pid 5 again, committed later
        + build_control_batch(commit, producer_id=5, producer_epoch=0, base_offset=9)
    )
    aborted = [(5, 0)]
    committed = _decode(data, read_committed=True, aborted_transactions=aborted)
    assert [r.offset for r in committed.records] == [2, 3, 4, 7, 8]
    assert committed.next_offset == 10
    uncommitted = _decode(data, read_committed=False, aborted_transactions=aborted)
    assert [r.offset for r in uncommitted.records] == [0, 1, 2, 3, 4, 7, 8]


def test_read_committed_aborted_batch_only_moves_the_position() -> None:
    data = _batch(0, 3, pid=5, txn=True)
    out = _decode(data, read_committed=True, aborted_transactions=[(5, 0)])
    assert out.records == [] and out.next_offset == 3 and out.error is None


def test_deserializers_and_their_failures() -> None:
    data = _batch(0, 2)
    out = _decode(data, key_deserializer=lambda b: b.decode(),
                  value_deserializer=lambda b: b.upper())
    assert [(r.key, r.value) for r in out.records] == [("k0", b"V0"), ("k1", b"V1")]

    def boom(b: bytes | None) -> object:
        raise ValueError("nope")

    failed = _decode(data, value_deserializer=boom)
    assert failed.records == [] and isinstance(failed.error, KafkaError)
    assert "nope" in str(failed.error)
