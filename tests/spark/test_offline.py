"""klog.spark.offline and klog.spark.plan: reading log directories without Spark."""

from __future__ import annotations

import shutil
from pathlib import Path

import pyarrow as pa
import pytest

from klog.spark import offline
from klog.spark.arrow import arrow_schema
from klog.spark.options import parse_options
from klog.spark.plan import plan_tasks, read_task
from tests.spark.conftest import transactional_batches, write_partition
from tests.storage.batches import build_batch


def _rows(batches: list[pa.RecordBatch]) -> list[dict]:
    return pa.Table.from_batches(batches).to_pylist() if batches else []


def test_corpus_partitions_and_offsets(kafka_corpus: Path) -> None:
    parts = offline.list_partitions(kafka_corpus)
    assert {tp for tp in parts if tp[0] != "__consumer_offsets"} == {
        ("first_topic", 0), ("first_topic", 1), ("first_topic", 2), ("new_topic", 0)}
    counts = {}
    for p in range(3):
        files = parts[("first_topic", p)]
        assert offline.log_start_offset(files) == 0
        end = offline.log_end_offset(files)
        stats: dict[str, int] = {}
        rows = _rows(list(offline.read_range(files, 0, end, include_headers=True,
                                             stats=stats)))
        counts[p] = len(rows)
        assert [r["offset"] for r in rows] == list(range(end))
        assert stats["rows"] == end and stats["last_offset"] == end - 1
        assert {r["topic"] for r in rows} == {"first_topic"}
        assert all(r["headers"] == [] and r["timestampType"] == 0 for r in rows)
    assert counts == {0: 11, 1: 12, 2: 18}


def test_plan_is_one_task_per_segment_and_honours_options(tmp_path: Path) -> None:
    log_dir = tmp_path / "logs"
    # Three segments: PartitionLog rolls when asked (roll() between appends).
    from klog.storage.log import PartitionLog

    log = PartitionLog(log_dir / "t-0")
    for base in (0, 10, 20):
        log.append_as_follower(build_batch(base, [b"v%d" % i for i in range(10)]))
        log.roll()
    log.close()
    tasks = plan_tasks(parse_options({"path": str(log_dir), "subscribe": "t"}))
    assert [(t.range.start, t.range.end) for t in tasks] == [(0, 10), (10, 20), (20, 30)]
    tasks = plan_tasks(parse_options({"path": str(log_dir), "subscribe": "t",
                                      "startingOffsets": '{"t":{"0":5}}',
                                      "endingOffsets": '{"t":{"0":25}}',
                                      "minPartitions": "6"}))
    assert sum(t.range.size for t in tasks) == 20 and len(tasks) >= 6
    rows = [r for t in tasks for r in _rows(list(read_task(t)))]
    assert [r["offset"] for r in rows] == list(range(5, 25))
    assert [r["value"] for r in rows][:2] == [b"v5", b"v6"]
    with pytest.raises(Exception, match="no partition of topic"):
        plan_tasks(parse_options({"path": str(log_dir), "subscribe": "nope"}))


def test_read_committed_skips_aborted_and_control_and_stops_at_lso(tmp_path: Path) -> None:
    batches, committed = transactional_batches()
    write_partition(tmp_path, "tx", 0, batches)
    files = offline.list_partitions(tmp_path)[("tx", 0)]
    # klog's log wrote the aborted transaction into the .txnindex, as Kafka does.
    state = offline.transaction_state(files, offline.log_end_offset(files))
    assert state.aborted == ((8, 4, 8),)
    assert state.last_stable_offset == 12
    got = [r["offset"] for r in _rows(list(offline.read_range(
        files, 0, state.last_stable_offset, include_headers=False, aborted=state.aborted)))]
    assert got == committed
    # read_uncommitted: every data record, never a control record.
    got = [r["offset"] for r in _rows(list(offline.read_range(files, 0, 14,
                                                              include_headers=False)))]
    assert got == [0, 1, 2, 3, 4, 5, 6, 9, 11, 12, 13]
    # The plan applies both (and a start inside the aborted transaction still skips it).
    tasks = plan_tasks(parse_options({"path": str(tmp_path), "subscribe": "tx",
                                      "kafka.isolation.level": "read_committed",
                                      "startingOffsets": '{"tx":{"0":5}}'}))
    assert [r["offset"] for t in tasks for r in _rows(list(read_task(t)))] == [6, 9, 11]


def test_an_index_entry_skips_ahead_and_a_stale_one_is_not_trusted(tmp_path: Path) -> None:
    from klog.storage.log import LogConfig, PartitionLog

    log = PartitionLog(tmp_path / "t-0", LogConfig(index_interval_bytes=1))
    for base in range(0, 50, 5):
        log.append_as_follower(build_batch(base, [b"x" * 20] * 5))
    log.close()
    files = offline.list_partitions(tmp_path)[("t", 0)]
    assert offline._index_position(files, 0, 30) > 0
    rows = _rows(list(offline.read_range(files, 30, 40, include_headers=False)))
    assert [r["offset"] for r in rows] == list(range(30, 40))
    # An index pointing into the middle of a batch is caught: reading falls back to 0.
    index = tmp_path / "t-0" / f"{0:020d}.index"
    index.write_bytes(b"\x00\x00\x00\x1e\x00\x00\x00\x07")
    assert offline._index_position(files, 0, 30) == 0
    rows = _rows(list(offline.read_range(files, 30, 40, include_headers=False)))
    assert [r["offset"] for r in rows] == list(range(30, 40))


def test_a_torn_tail_ends_quietly_and_garbage_is_a_clear_error(tmp_path: Path,
                                                             kafka_corpus: Path) -> None:
    shutil.copytree(kafka_corpus / "first_topic-0", tmp_path / "first_topic-0")
    log = tmp_path / "first_topic-0" / f"{0:020d}.log"
    log.chmod(0o644)
    whole = log.read_bytes()
    log.write_bytes(whole + whole[:30])  # a write in progress
    files = offline.list_partitions(tmp_path)[("first_topic", 0)]
    assert offline.log_end_offset(files) == 11
    assert len(_rows(list(offline.read_range(files, 0, 11, include_headers=False)))) == 11
    log.write_bytes(whole[:100] + b"\xff" * 12 + whole[112:])
    with pytest.raises(offline.OfflineError, match="corrupt entry at position"):
        list(offline.read_range(files, 0, 11, include_headers=False))


def test_schema_is_sparks_kafka_schema() -> None:
    assert arrow_schema(False).names == [
        "key", "value", "topic", "partition", "offset", "timestamp", "timestampType"]
    assert arrow_schema(True).names[-1] == "headers"
    assert str(arrow_schema(True).field("headers").type) == (
        "list<item: struct<key: string, value: binary>>")


def test_every_message_format_and_codec(tmp_path: Path) -> None:
    from klog.protocol.records.batch import CompressionType, TimestampType
    from klog.protocol.records.legacy import build_legacy_message_set
    from klog.protocol.records.v2 import build_batch as build_v2

    def recs(base: int) -> list[tuple]:
        return [(1_600_000_000_000 + o, b"k%d" % o, b"v%d" % o) for o in range(base, base + 3)]

    log = b"".join([
        build_legacy_message_set(recs(0), magic=0, base_offset=0),
        build_legacy_message_set(recs(3), magic=1, compression=CompressionType.GZIP,
                                 base_offset=3),
        build_legacy_message_set(recs(6), magic=1, compression=CompressionType.SNAPPY,
                                 base_offset=6, timestamp_type=TimestampType.LOG_APPEND_TIME,
                                 log_append_time=42),
        build_legacy_message_set(recs(9), magic=1, compression=CompressionType.LZ4,
                                 base_offset=9),
        build_v2([(*r, [("h", b"x")]) for r in recs(12)], base_offset=12,
                 compression=CompressionType.ZSTD),
        build_v2(recs(15), base_offset=15, compression=CompressionType.LZ4,
                 timestamp_type=TimestampType.LOG_APPEND_TIME, log_append_time=43),
    ])
    (tmp_path / "m-0").mkdir()
    (tmp_path / "m-0" / f"{0:020d}.log").write_bytes(log)
    files = offline.list_partitions(tmp_path)[("m", 0)]
    assert offline.log_end_offset(files) == 18
    rows = _rows(list(offline.read_range(files, 1, 17, include_headers=True)))
    assert [r["offset"] for r in rows] == list(range(1, 17))
    assert [r["value"] for r in rows] == [b"v%d" % o for o in range(1, 17)]
    assert [r["key"] for r in rows] == [b"k%d" % o for o in range(1, 17)]
    types = [r["timestampType"] for r in rows]
    assert types == [-1, -1] + [0] * 3 + [1] * 3 + [0] * 3 + [0] * 3 + [1] * 2
    millis = [int(r["timestamp"].timestamp() * 1000) for r in rows]
    assert millis[2:5] == [1_600_000_000_000 + o for o in range(3, 6)]
    assert millis[5:8] == [42] * 3 and millis[14:] == [43] * 2
    assert rows[11]["headers"] == [{"key": "h", "value": b"x"}]
