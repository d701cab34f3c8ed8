"""Tests for klog.protocol.records.decode, including real Kafka 2.x log segments."""

from __future__ import annotations

from pathlib import Path

import pytest

from klog.protocol.records.batch import CompressionType, iter_batch_headers
from klog.protocol.records.decode import iter_records
from klog.protocol.records.legacy import build_legacy_message_set
from klog.protocol.records.v2 import build_batch


def test_dispatches_on_magic() -> None:
    buf = (
        build_legacy_message_set([(-1, b"a", b"0")], magic=0, base_offset=0)
        + build_legacy_message_set(
            [(5, b"b", b"1"), (6, b"c", b"2")], magic=1, compression=CompressionType.GZIP,
            base_offset=1,
        )
        + build_batch([(7, b"d", b"3", [("h", b"v")])], base_offset=3,
                      compression=CompressionType.ZSTD)
    )
    records = [r for h in iter_batch_headers(buf) for r in iter_records(buf, h)]
    assert [(r.offset, r.magic, r.key) for r in records] == [
        (0, 0, b"a"), (1, 1, b"b"), (2, 1, b"c"), (3, 2, b"d"),
    ]
    assert records[-1].headers == (("h", b"v"),)


def test_passes_the_decompression_bound_to_both_formats() -> None:
    from klog.protocol.errors import RecordTooLargeError

    big = b"x" * 100_000
    for buf in (
        build_batch([(1, None, big, ())], compression=CompressionType.GZIP),
        build_legacy_message_set([(1, None, big)], magic=1, compression=CompressionType.GZIP),
    ):
        (header,) = iter_batch_headers(buf)
        with pytest.raises(RecordTooLargeError):
            list(iter_records(buf, header, max_decompressed_size=50_000))


def _records(log: Path) -> tuple[list, list]:
    buf = log.read_bytes()
    headers = list(iter_batch_headers(buf))
    assert headers and headers[-1].end == len(buf), "segment has a torn or corrupt tail"
    assert all(h.is_valid(buf) for h in headers)
    return headers, [r for h in headers for r in iter_records(buf, h)]


@pytest.mark.corpus
@pytest.mark.parametrize(
    ("partition", "count"),
    [
        ("first_topic-0", 11),
        ("first_topic-1", 12),
        ("first_topic-2", 18),
        ("new_topic-0", 2),
        ("__consumer_offsets-12", 470),
        ("__consumer_offsets-17", 3),
        ("__consumer_offsets-18", 499),
        ("__consumer_offsets-32", 50),
        ("__consumer_offsets-33", 3),
    ],
)
def test_every_record_of_the_kafka_corpus(kafka_corpus: Path, partition: str, count: int) -> None:
    headers, records = _records(kafka_corpus / partition / "00000000000000000000.log")
    assert len(records) == count
    assert [r.offset for r in records] == list(range(count))
    assert sum(h.records_count for h in headers) == count
    for header in headers:
        assert header.magic == 2 and header.producer_id == -1
        assert header.compression is CompressionType.NONE
    assert all(r.magic == 2 and r.is_valid for r in records)
    # Kafka's rule: a record's sequence is baseSequence + offsetDelta when baseSequence is
    # set, even without a producer id (the 2.x broker wrote baseSequence 0 in
    # __consumer_offsets batches), else -1.
    by_offset = {r.offset: r for r in records}
    for header in headers:
        for offset in range(header.base_offset, header.last_offset + 1):
            expected = (
                header.base_sequence + offset - header.base_offset
                if header.base_sequence >= 0
                else -1
            )
            assert by_offset[offset].sequence == expected
    # Every record's timestamp lies within its batch's [base, max] (CreateTime, 2020).
    assert all(1_500_000_000_000 < r.timestamp < 1_700_000_000_000 for r in records)


@pytest.mark.corpus
def test_corpus_values_read_as_written(kafka_corpus: Path) -> None:
    _headers, records = _records(kafka_corpus / "new_topic-0" / "00000000000000000000.log")
    assert [(r.key, r.value) for r in records] == [
        (None, b"this is test message that doesnt exist"),
        (None, b"another message"),
    ]
    assert [r.timestamp for r in records] == [1587577031689, 1587577060776]
    _headers, records = _records(kafka_corpus / "first_topic-0" / "00000000000000000000.log")
    assert records[0].value == b"just for fun"
    assert records[-1].value == b"because lets try"
    assert sum(r.size_in_bytes for r in records) + 61 * 10 == 804
