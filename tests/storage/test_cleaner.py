"""Tests for klog.storage.cleaner: the offset map, what may be cleaned, cleaning, the swap."""

from __future__ import annotations

import os
import shutil
import struct
import threading
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from klog.protocol.errors import CorruptRecordError, KafkaStorageError
from klog.protocol.records.batch import (
    DELETE_HORIZON_FLAG_MASK,
    CompressionType,
    crc32c,
    iter_batch_headers,
)
from klog.protocol.records.control import (
    ControlRecordType,
    EndTransactionMarker,
    build_control_batch,
)
from klog.protocol.records.decode import iter_records
from klog.protocol.records.legacy import build_legacy_message_set
from klog.protocol.records.record import Record
from klog.protocol.records.v2 import build_batch
from klog.storage import offset_map as offset_map_module
from klog.storage.cleaner import (
    BYTES_PER_ENTRY,
    Cleaner,
    CleanerCheckpoints,
    CleanerStats,
    LogCleaningAbortedError,
    LogToClean,
    OffsetMap,
    Throttler,
    cleanable_offsets,
    group_segments_by_size,
    max_compaction_delay,
)
from klog.storage.config import LogConfig
from klog.storage.log import PartitionLog
from klog.storage.log_manager import LogManager
from klog.storage.validator import AppendOrigin
from klog.tools.verify import DAMAGE, verify

T0 = 1_600_000_000_000
DAY = 86_400_000
BACKENDS = [False, True] if offset_map_module._c is not None else [False]


class Clock:
    def __init__(self, now: int = T0) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


def make_log(path: Path, clock: Clock | None = None, **config: object) -> PartitionLog:
    config.setdefault("cleanup_policy", ("compact",))
    return PartitionLog(path / "topic-0", LogConfig(**config), clock=clock or Clock())


Item = tuple[bytes | None, bytes | None]  # (key, value)


def produce(log: PartitionLog, items: list[Item], ts: int = T0, **batch: object) -> None:
    log.append_as_leader(
        build_batch([(ts + i, k, v) for i, (k, v) in enumerate(items)], **batch), leader_epoch=1
    )
    log.update_high_watermark(log.log_end_offset)


def seen(r: Record) -> tuple[object, ...]:
    """What a consumer sees of a record (its encoded size may change: a delete horizon
    moves its timestamp delta)."""
    return (r.offset, r.timestamp, r.key, r.value, r.headers, r.timestamp_type)


def read_all(log: PartitionLog) -> list[Record]:
    records: list[Record] = []
    for header, buf in batches(log):
        records.extend(iter_records(buf, header))
    return records


def batches(log: PartitionLog) -> list[tuple[object, bytes]]:
    out = []
    for segment in log.segments:
        data = os.pread(segment.fd, segment.size, 0)
        for header in iter_batch_headers(data):
            out.append((header, data))
    return out


def latest(records: list[Record]) -> dict[bytes | None, bytes | None]:
    return {r.key: r.value for r in records}


def clean(
    log: PartitionLog,
    *,
    cleaner: Cleaner | None = None,
    checkpoint: int | None = None,
    now: int = T0,
    retention: int | None = None,
    use_c: bool | None = None,
    dry_run: bool = False,
) -> CleanerStats:
    cleaner = cleaner or Cleaner(1 << 20, use_c=use_c)
    offsets = cleanable_offsets(log, checkpoint, now)
    return cleaner.clean(
        LogToClean(log, offsets.first_dirty_offset, offsets.first_uncleanable_dirty_offset),
        now_ms=now,
        delete_retention_ms=retention,
        dry_run=dry_run,
    )


def fill(log: PartitionLog, n_batches: int, keys: int, per_batch: int = 4, seed: int = 0) -> None:
    for b in range(n_batches):
        items: list[Item] = [
            (b"k%d" % ((b * per_batch + i * 7 + seed) % keys), b"v%d-%d" % (b, i))
            for i in range(per_batch)
        ]
        produce(log, items, ts=T0 + b)


def no_damage(where: Path | PartitionLog) -> None:
    """``klog verify`` finds no damage (a log is closed first: its active segment's index
    lives in memory until then)."""
    if isinstance(where, PartitionLog):
        where.close()
        where = where.dir
    report = verify(where)
    damage = [f for f in report.findings if f.severity == DAMAGE]
    assert damage == []


# ============================================================================ offset map


@pytest.mark.parametrize("use_c", BACKENDS)
def test_offset_map_basics(use_c: bool) -> None:
    m = OffsetMap(10 * BYTES_PER_ENTRY + 5, use_c=use_c)
    assert (m.slots, m.size, m.latest_offset, m.bytes_per_entry) == (10, 0, -1, 24)
    assert m.is_c is use_c
    m.put(b"a", 5)
    m.put(b"b", 6)
    m.put(b"a", 9)
    assert (m.get(b"a"), m.get(b"b"), m.get(b"c"), m.get(b""), m.size) == (9, 6, -1, -1, 2)
    assert m.latest_offset == 9 and m.utilization == pytest.approx(0.2)
    m.put(b"", 11)  # the empty key is a key
    assert m.get(b"") == 11
    for i in range(7):
        m.put(b"x%d" % i, 20 + i)
    assert m.size == 10
    with pytest.raises(ValueError, match="full"):
        m.put(b"one too many", 40)
    m.put(b"a", 41)  # an existing key still updates
    m.clear()
    assert (m.size, m.latest_offset, m.get(b"a")) == (0, -1, -1)
    with pytest.raises(ValueError):
        OffsetMap(23)


def test_offset_map_backends_fill_the_same_table() -> None:
    if offset_map_module._c is None:
        pytest.skip("the C extension is not built")
    a, b = OffsetMap(100 * 24, use_c=False), OffsetMap(100 * 24, use_c=True)
    for i in range(90):
        for m in (a, b):
            m.put(b"key-%d" % (i * 31 % 57), i)
    assert a.table_bytes() == b.table_bytes() and a.size == b.size == 57


# ============================================================================ what may be cleaned


def test_cleanable_offsets_stop_at_active_segment_hw_and_lag(tmp_path: Path) -> None:
    log = make_log(tmp_path, segment_bytes=400)
    fill(log, 30, keys=5)
    segments = log.segments
    assert len(segments) > 4
    active = segments[-1].base_offset
    assert cleanable_offsets(log, None, T0) == (0, active, False)
    # Not past the high watermark (nor the LSO given instead).
    log.update_high_watermark(segments[2].base_offset + 1)
    hw = segments[2].base_offset + 1
    assert cleanable_offsets(log, None, T0).first_uncleanable_dirty_offset == hw
    assert cleanable_offsets(log, None, T0, last_stable_offset=7)[1] == 7
    log.update_high_watermark(log.log_end_offset)
    # min.compaction.lag.ms: the first segment holding a record newer than now - lag.
    lagging = make_log(tmp_path / "lag", segment_bytes=400, min_compaction_lag_ms=1000)
    fill(lagging, 30, keys=5)
    segs = lagging.segments
    newest_of = [s.largest_timestamp for s in segs]
    now = newest_of[3] + 1000  # segment 3's newest record is exactly `lag` old: not cleanable
    first_young = next(s.base_offset for s in segs if s.largest_timestamp > now - 1000)
    assert cleanable_offsets(lagging, None, now).first_uncleanable_dirty_offset == first_young
    # A checkpoint outside the log resets to the log start offset, and says so.
    assert cleanable_offsets(log, 10**9, T0) == (0, active, True)
    assert cleanable_offsets(log, 5, T0) == (5, active, False)


def test_log_to_clean_bytes_and_ratio(tmp_path: Path) -> None:
    log = make_log(tmp_path, segment_bytes=400)
    fill(log, 30, keys=5)
    segs = log.segments
    first_dirty = segs[2].base_offset
    ltc = LogToClean(log, first_dirty, segs[-1].base_offset)
    assert ltc.clean_bytes == segs[0].size + segs[1].size
    assert ltc.dirty_bytes == sum(s.size for s in segs[2:-1])
    assert ltc.first_uncleanable_offset == segs[-1].base_offset
    assert ltc.cleanable_ratio == pytest.approx(ltc.dirty_bytes / ltc.total_bytes)
    # An uncleanable offset inside a segment stops at that segment's base.
    inside = LogToClean(log, first_dirty, segs[4].base_offset + 1)
    assert inside.first_uncleanable_offset == segs[4].base_offset
    assert sorted([inside, ltc])[-1] is ltc


def test_max_compaction_delay(tmp_path: Path) -> None:
    log = make_log(tmp_path, segment_bytes=400, max_compaction_lag_ms=1000)
    fill(log, 30, keys=5)
    first_ts = log.segments[0].first_batch_timestamp()
    assert first_ts is not None
    assert max_compaction_delay(log, 0, first_ts + 1000) == 0
    assert max_compaction_delay(log, 0, first_ts + 1500) == 500


def test_group_segments_by_size(tmp_path: Path) -> None:
    log = make_log(tmp_path, segment_bytes=400)
    fill(log, 30, keys=5)
    segs = log.segments[:-1]
    sizes = [s.size for s in segs]
    groups = group_segments_by_size(segs, 2 * max(sizes), 10**6, log.segments[-1].base_offset)
    assert [s for g in groups for s in g] == segs
    for g in groups:
        assert sum(s.size for s in g) <= 2 * max(sizes)
    assert all(len(g) == 2 for g in groups[:-1])
    # One segment per group when segment.bytes is smaller than any two.
    assert all(len(g) == 1 for g in group_segments_by_size(segs, max(sizes), 10**6, 0))
    # The index budget (offset entries of 8 bytes, time entries of 12) also bounds a group.
    entries = [s.time_index.entries for s in segs]
    assert all(e >= 1 for e in entries)
    by_index = group_segments_by_size(segs, 10**9, 12 * max(entries), 0)
    assert all(len(g) == 1 for g in by_index)
    # A group never spans more than 2^31 offsets past its base.
    everything = group_segments_by_size(segs, 10**9, 10**9, segs[-1].base_offset + 2**31 + 5)
    assert [len(g) for g in everything] == [len(segs) - 1, 1]


# ============================================================================ cleaning


@pytest.mark.parametrize("use_c", BACKENDS)
def test_clean_keeps_the_latest_record_of_each_key(tmp_path: Path, use_c: bool) -> None:
    log = make_log(tmp_path, segment_bytes=600)
    fill(log, 60, keys=11)
    before = read_all(log)
    stats = clean(log, use_c=use_c)
    after = read_all(log)
    assert latest(after) == latest(before)
    by_offset = {r.offset: r for r in before}
    for r in after:  # same offsets, keys, values and timestamps
        assert seen(by_offset[r.offset]) == seen(r)
    active = log.segments[-1].base_offset
    cleaned = [r for r in after if r.offset < stats.end_offset]
    assert len({r.key for r in cleaned}) == len(cleaned)
    assert stats.end_offset == active
    assert stats.messages_read - stats.messages_written == len(before) - len(after)
    assert stats.bytes_read > stats.bytes_written > 0
    assert stats.map_entries == 11
    assert log.size < sum(len(b) for _h, b in batches(log)) or True
    no_damage(log)
    # A cleaned log loads again (clean and unclean shutdown) with the same records.
    for clean_shutdown in (True, False):
        again = PartitionLog(log.dir, log.config, had_clean_shutdown=clean_shutdown)
        assert [seen(r) for r in read_all(again)] == [seen(r) for r in after]
        again.close()


@pytest.mark.parametrize(
    "codec",
    [CompressionType.GZIP, CompressionType.SNAPPY, CompressionType.LZ4, CompressionType.ZSTD],
)
def test_batches_keep_their_fields_and_codec(tmp_path: Path, codec: CompressionType) -> None:
    log = make_log(tmp_path, segment_bytes=10_000)
    seq = 0
    for b in range(20):
        items: list[Item] = [(b"k%d" % ((b + i) % 3), b"v%d" % b) for i in range(3)]
        produce(log, items, ts=T0 + 10 * b, compression=codec, producer_id=77,
                producer_epoch=2, base_sequence=seq)
        seq += 3
    log.roll()
    produce(log, [(b"k0", b"last")])
    old = {h.base_offset: h for h, _b in batches(log)}
    clean(log)
    kept = batches(log)
    assert len(kept) < len(old)
    for header, _buf in kept:
        was = old[header.base_offset]
        assert header.compression_id in (codec, 0)  # emptied batches are uncompressed
        for attr in ("last_offset", "producer_id", "producer_epoch", "base_sequence",
                     "partition_leader_epoch"):
            assert getattr(header, attr) == getattr(was, attr)
        if header.records_count and header.producer_id == 77:
            assert header.compression_id == codec
    assert latest(read_all(log)) == {b"k0": b"last", b"k1": b"v19", b"k2": b"v19"}
    no_damage(log)


def test_records_without_a_key_are_removed(tmp_path: Path) -> None:
    # Written before the topic was compacted: a compacted topic refuses keyless records.
    log = make_log(tmp_path, cleanup_policy=("delete",))
    produce(log, [(None, b"a"), (b"k", b"b"), (None, b"c")])
    log.roll()
    produce(log, [(None, b"d")])
    log.update_config(LogConfig(cleanup_policy=("compact",)))
    stats = clean(log)
    assert [(r.key, r.value) for r in read_all(log)] == [(b"k", b"b"), (None, b"d")]
    assert stats.invalid_messages_read == 2


def test_tombstones_stay_until_delete_retention_after_their_first_cleaning(
    tmp_path: Path,
) -> None:
    log = make_log(tmp_path)
    produce(log, [(b"a", b"1"), (b"b", b"1")])
    produce(log, [(b"a", None), (b"c", b"1")])
    log.roll()
    produce(log, [(b"z", b"1")])
    # First cleaning: the tombstone is kept; its batch gets the horizon now + retention.
    clean(log, now=T0 + 5, retention=1000)
    assert latest(read_all(log)) == {b"a": None, b"b": b"1", b"c": b"1", b"z": b"1"}
    tomb = next(h for h, buf in batches(log) if any(r.value is None for r in iter_records(buf, h)))
    assert tomb.attributes & DELETE_HORIZON_FLAG_MASK
    assert tomb.base_timestamp == T0 + 5 + 1000
    # The records' own timestamps did not move.
    assert {r.key: r.timestamp for r in read_all(log)}[b"c"] == T0 + 1
    # Before the horizon: still there; at it: gone.
    clean(log, checkpoint=0, now=T0 + 1004, retention=1000)
    assert b"a" in latest(read_all(log))
    stats = clean(log, checkpoint=0, now=T0 + 1005, retention=1000)
    assert latest(read_all(log)) == {b"b": b"1", b"c": b"1", b"z": b"1"}
    assert stats.tombstones_removed == 1
    no_damage(log)


def test_legacy_tombstones_follow_the_segment_age(tmp_path: Path) -> None:
    """v0/v1 data has no delete horizon: a tombstone goes once its segment was last
    modified delete.retention.ms before the last clean segment (Kafka's legacy rule)."""

    def setup(name: str) -> PartitionLog:
        log = make_log(tmp_path / name, segment_bytes=10_000)
        for records in (
            [(T0, b"b", b"1"), (T0, b"a", None)],  # segment 0: clean, with a tombstone
            [(T0, b"x", b"1")],  # segment 2: the last clean segment
            [(T0, b"c", b"1")],  # segment 3: dirty
        ):
            log.append_as_follower(
                build_legacy_message_set(records, magic=1, base_offset=log.log_end_offset)
            )
            log.roll()
        log.update_high_watermark(log.log_end_offset)
        segs = log.segments
        segs[0].set_last_modified(T0)
        segs[1].set_last_modified(T0 + DAY)
        segs[2].set_last_modified(T0 + DAY)
        return log

    old_enough = setup("removed")
    stats = clean(old_enough, checkpoint=3, retention=1000)
    assert latest(read_all(old_enough)) == {b"b": b"1", b"x": b"1", b"c": b"1"}
    assert stats.tombstones_removed == 1
    no_damage(old_enough)
    young = setup("kept")
    clean(young, checkpoint=3, retention=2 * DAY)
    assert latest(read_all(young)) == {b"b": b"1", b"a": None, b"x": b"1", b"c": b"1"}


@pytest.mark.parametrize("magic", [0, 1])
def test_legacy_compressed_wrappers_are_rebuilt(tmp_path: Path, magic: int) -> None:
    log = make_log(tmp_path)
    log.append_as_follower(build_legacy_message_set(
        [(T0, b"a", b"1"), (T0 + 1, b"b", b"1"), (T0 + 2, b"a", b"2"), (T0 + 3, b"c", b"1")],
        magic=magic, compression=CompressionType.GZIP,
    ))
    log.roll()
    log.append_as_follower(build_legacy_message_set([(T0, b"c", b"2")], magic=magic,
                                                    base_offset=4))
    log.roll()
    log.update_high_watermark(log.log_end_offset)
    clean(log)
    after = read_all(log)
    assert [(r.offset, r.key, r.value) for r in after] == [
        (1, b"b", b"1"), (2, b"a", b"2"), (4, b"c", b"2")
    ]
    if magic == 1:
        assert [r.timestamp for r in after[:2]] == [T0 + 1, T0 + 2]
    assert batches(log)[0][0].compression_id == CompressionType.GZIP
    no_damage(log)


def test_last_batch_of_an_active_producer_stays_empty(tmp_path: Path) -> None:
    log = make_log(tmp_path)
    produce(log, [(b"k", b"1")], producer_id=9, producer_epoch=0, base_sequence=0)
    produce(log, [(b"k", b"2"), (b"k", b"3")], producer_id=9, producer_epoch=0, base_sequence=1)
    produce(log, [(b"k", b"4")])  # supersedes every record of producer 9
    log.roll()
    produce(log, [(b"other", b"x")])
    clean(log)
    headers = [h for h, _b in batches(log)]
    assert [(h.base_offset, h.records_count) for h in headers] == [(1, 0), (3, 1), (4, 1)]
    empty = headers[0]
    assert (empty.producer_id, empty.base_sequence, empty.last_offset) == (9, 1, 2)
    # The producer can go on with its next sequence after a reload.
    log.close()
    again = PartitionLog(log.dir, log.config)
    again.append_as_leader(
        build_batch([(T0, b"k", b"5")], producer_id=9, producer_epoch=0, base_sequence=3),
        leader_epoch=1,
    )
    again.close()


def test_transaction_markers_are_kept(tmp_path: Path) -> None:
    log = make_log(tmp_path)
    produce(log, [(b"k", b"1")], producer_id=4, producer_epoch=0, base_sequence=0,
            is_transactional=True)
    log.append_as_leader(
        build_control_batch(EndTransactionMarker(ControlRecordType.COMMIT, 0), producer_id=4,
                            producer_epoch=0, timestamp=T0),
        leader_epoch=1, origin=AppendOrigin.COORDINATOR,
    )
    produce(log, [(b"k", b"2")])
    log.roll()
    produce(log, [(b"other", b"x")])
    clean(log)
    # The producer's last data batch stays (emptied), the marker as it was, then k=2.
    assert [(h.is_control, h.records_count) for h, _b in batches(log)] == [
        (False, 0), (True, 1), (False, 1), (False, 1)
    ]


# ============================================================================ transactions


class Txns:
    """Transactional producers writing to a log, as the coordinator and producers would:
    data batches with the producer's sequence, markers with origin "coordinator"."""

    def __init__(self, log: PartitionLog) -> None:
        self.log = log
        self.sequence: dict[int, int] = {}

    def send(self, pid: int, items: list[Item], ts: int = T0) -> None:
        seq = self.sequence.get(pid, 0)
        produce(self.log, items, ts=ts, producer_id=pid, producer_epoch=0, base_sequence=seq,
                is_transactional=True)
        self.sequence[pid] = seq + len(items)

    def end(self, pid: int, commit: bool, ts: int = T0) -> None:
        kind = ControlRecordType.COMMIT if commit else ControlRecordType.ABORT
        self.log.append_as_leader(
            build_control_batch(EndTransactionMarker(kind, 0), producer_id=pid,
                                producer_epoch=0, timestamp=ts),
            leader_epoch=1, origin=AppendOrigin.COORDINATOR,
        )
        self.log.update_high_watermark(self.log.log_end_offset)


def consume(log: PartitionLog, *, committed: bool) -> list[Record]:
    """What a consumer fetching from the log start sees: read_committed stops at the last
    stable offset and skips aborted transactions with the fetch's aborted list (Kafka's
    Fetcher); read_uncommitted reads up to the high watermark. Markers are never seen."""
    from klog.storage.cleanable import _last_stable_offset

    end = _last_stable_offset(log) if committed else log.high_watermark
    out: list[Record] = []
    offset = log.log_start_offset
    aborted_pids: set[int] = set()
    while offset < end:
        info = log.read(offset, 1 << 20, max_offset=end, include_aborted_txns=committed)
        if info.size == 0:
            break
        data = info.read_bytes()
        aborted = sorted(info.aborted_transactions or [], key=lambda t: t.first_offset)
        for header in iter_batch_headers(data):
            offset = header.last_offset + 1
            while aborted and aborted[0].first_offset <= header.last_offset:
                aborted_pids.add(aborted.pop(0).producer_id)
            records = list(iter_records(data, header))
            if header.is_control:
                if records and EndTransactionMarker.from_record(records[0]).control_type is (
                    ControlRecordType.ABORT
                ):
                    aborted_pids.discard(header.producer_id)
                continue
            if committed and header.is_transactional and header.producer_id in aborted_pids:
                continue
            out.extend(r for r in records if r.offset < end)
    return out


def markers(log: PartitionLog) -> list[tuple[int, int, bool]]:
    """(offset, producer id, has a delete horizon) of every marker left in the log."""
    return [(h.base_offset, h.producer_id, bool(h.attributes & DELETE_HORIZON_FLAG_MASK))
            for h, _b in batches(log) if h.is_control and h.records_count]


def aborted_index(log: PartitionLog) -> list[tuple[int, int]]:
    return [(t.producer_id, t.first_offset) for s in log.segments
            for t in s.txn_index.all_aborted_txns()]


@pytest.mark.parametrize("use_c", BACKENDS)
def test_aborted_transactions_go_and_markers_follow_their_data(
    tmp_path: Path, use_c: bool
) -> None:
    log = make_log(tmp_path)
    txns = Txns(log)
    produce(log, [(b"k1", b"a0"), (b"k2", b"b0")])                      # 0-1
    txns.send(10, [(b"k3", b"c1")])                                     # 2
    txns.send(11, [(b"k1", b"aX"), (b"k2", b"bX"), (b"k4", b"dX")])     # 3-5 (aborted)
    produce(log, [(b"k5", b"e0")])                                      # 6
    txns.end(10, commit=True)                                           # 7 m1
    txns.end(11, commit=False)                                          # 8 m2
    produce(log, [(b"k3", b"c2")])                                      # 9
    txns.send(10, [(b"k1", b"a1"), (b"k2", b"b2")])                     # 10-11
    txns.send(11, [(b"k1", b"aY")])                                     # 12 (aborted)
    txns.end(10, commit=True)                                           # 13 m3
    txns.end(11, commit=False)                                          # 14 m4
    log.roll()
    produce(log, [(b"k9", b"z0")])                                      # 15
    expected = {b"k1": b"a1", b"k2": b"b2", b"k3": b"c2", b"k5": b"e0", b"k9": b"z0"}
    assert aborted_index(log) == [(11, 3), (11, 12)]

    stats = clean(log, now=T0 + 1000, retention=500, use_c=use_c)
    for committed in (True, False):
        assert latest(consume(log, committed=committed)) == expected
    values = {r.value for r in read_all(log)}
    assert not values & {b"aX", b"bX", b"dX", b"aY"}
    assert stats.aborted_messages_removed == 4
    # Every marker had data of its transaction before it: all stay, without a horizon; the
    # aborted transactions stay in the index with their markers.
    assert markers(log) == [(7, 10, False), (8, 11, False), (13, 10, False), (14, 11, False)]
    assert aborted_index(log) == [(11, 3), (11, 12)]
    # Producer 11's last batch (offset 12) stays, emptied: its sequence is still needed.
    assert [(h.base_offset, h.records_count) for h, _b in batches(log)
            if h.producer_id == 11 and not h.is_control] == [(12, 0)]

    # The next cleaning finds no data of the first two transactions: their markers get the
    # delete horizon; the others keep theirs (producer 10's batch at 10, 11's emptied one).
    produce(log, [(b"k9", b"z1")])
    log.roll()
    produce(log, [(b"k9", b"z2")])
    expected[b"k9"] = b"z2"
    clean(log, checkpoint=stats.end_offset, now=T0 + 2000, retention=500, use_c=use_c)
    assert markers(log) == [(7, 10, True), (8, 11, True), (13, 10, False), (14, 11, False)]
    assert aborted_index(log) == [(11, 12)]
    for committed in (True, False):
        assert latest(consume(log, committed=committed)) == expected
    # Before the horizon they stay; a cleaning past it removes them.
    produce(log, [(b"k9", b"z3")])
    log.roll()
    produce(log, [(b"k9", b"z4")])
    expected[b"k9"] = b"z4"
    stats = clean(log, checkpoint=0, now=T0 + 2499, retention=500, use_c=use_c)
    assert len(markers(log)) == 4 and stats.markers_removed == 0
    stats = clean(log, checkpoint=0, now=T0 + 2500, retention=500, use_c=use_c)
    assert markers(log) == [(13, 10, False), (14, 11, False)]
    assert stats.markers_removed == 2
    for committed in (True, False):
        assert latest(consume(log, committed=committed)) == expected
    no_damage(log)


def test_an_aborted_value_never_shadows_an_older_committed_one(tmp_path: Path) -> None:
    """The aborted record is the newest of its key, in the dirty section: it must not enter
    the offset map, or the committed value would be removed in its favour."""
    log = make_log(tmp_path)
    txns = Txns(log)
    produce(log, [(b"k", b"committed")])
    log.roll()
    clean(log)
    txns.send(5, [(b"k", b"aborted")])
    txns.end(5, commit=False)
    log.roll()
    produce(log, [(b"other", b"x")])
    stats = clean(log, checkpoint=1)
    assert stats.map_entries == 0
    for committed in (True, False):
        assert latest(consume(log, committed=committed)) == {b"k": b"committed",
                                                             b"other": b"x"}
    no_damage(log)


def test_the_cleaner_stops_at_an_open_transaction(tmp_path: Path) -> None:
    log = make_log(tmp_path)
    txns = Txns(log)
    produce(log, [(b"k", b"1")])
    log.roll()
    txns.send(5, [(b"k", b"2")])  # open: the last stable offset is 1
    log.roll()
    produce(log, [(b"k", b"3")])
    log.roll()
    produce(log, [(b"z", b"1")])
    offsets = cleanable_offsets(log, None, T0)
    assert offsets.first_uncleanable_dirty_offset == 1
    clean(log)
    assert [r.value for r in read_all(log)] == [b"1", b"2", b"3", b"1"]
    txns.end(5, commit=False)
    log.roll()
    produce(log, [(b"z", b"2")])
    clean(log)
    # Now decided: the aborted record goes (its emptied batch and marker stay, see above).
    data = [(r.key, r.value) for h, buf in batches(log) if not h.is_control
            for r in iter_records(buf, h)]
    assert data == [(b"k", b"3"), (b"z", b"1"), (b"z", b"2")]


TXN_OPS = st.lists(
    st.one_of(
        st.tuples(st.just("produce"), st.sampled_from([0, 1, 2]),
                  st.lists(st.tuples(st.integers(0, 5), st.booleans()), min_size=1, max_size=4)),
        st.tuples(st.just("end"), st.sampled_from([1, 2]), st.booleans()),
        st.tuples(st.just("roll"), st.none(), st.none()),
        st.tuples(st.just("clean"), st.integers(2, 40), st.integers(0, 3000)),
    ),
    min_size=1,
    max_size=30,
)


def run_txn_ops(
    log: PartitionLog, ops: list[tuple[str, object, object]], use_c: bool | None = None
) -> tuple[dict[bytes, bytes | None], set[int], dict[int, Record]]:
    """Apply ``ops`` (producer 0 non-transactional, 1 and 2 transactional), end every open
    transaction, roll and clean the whole log. Returns the latest committed value of each
    key (by offset), the offsets of aborted records, and every record written."""
    txns = Txns(log)
    committed: dict[bytes, tuple[int, bytes | None]] = {}
    open_txn: dict[int, list[tuple[int, bytes, bytes | None]]] = {}
    aborted: set[int] = set()
    written: dict[int, Record] = {}
    checkpoint: int | None = None
    now, n = T0, 0

    def apply(pid: int, commit: bool) -> None:
        txns.end(pid, commit, ts=now)
        for offset, key, value in open_txn.pop(pid):
            if not commit:
                aborted.add(offset)
            elif committed.get(key, (-1, None))[0] < offset:
                committed[key] = (offset, value)

    for op, a, b in ops:
        if op == "produce":
            items: list[Item] = []
            for key, tomb in b:  # type: ignore[union-attr]
                n += 1
                items.append((b"k%d" % key, None if tomb else b"v%d" % n))
            first = log.log_end_offset
            if a == 0:
                produce(log, items, ts=now)
                for i, (k, v) in enumerate(items):
                    assert k is not None
                    committed[k] = (first + i, v)
            else:
                txns.send(int(a), items, ts=now)  # type: ignore[call-overload]
                open_txn.setdefault(int(a), []).extend(  # type: ignore[call-overload]
                    (first + i, k, v) for i, (k, v) in enumerate(items) if k is not None
                )
        elif op == "end":
            if a in open_txn:
                apply(int(a), bool(b))  # type: ignore[call-overload]
        elif op == "roll":
            if log.active_segment.size:
                log.roll()
        else:
            now += int(b)  # type: ignore[call-overload]
            stats = clean(log, cleaner=Cleaner(int(a) * BYTES_PER_ENTRY, use_c=use_c),  # type: ignore[call-overload]
                          checkpoint=checkpoint, retention=1000, now=now)
            checkpoint = stats.end_offset
        for r in read_all(log):
            written.setdefault(r.offset, r)
    for pid in sorted(open_txn):
        apply(pid, pid == 1)
    for r in read_all(log):
        written.setdefault(r.offset, r)
    if log.active_segment.size:
        log.roll()
    clean(log, cleaner=Cleaner(1 << 16, use_c=use_c), checkpoint=checkpoint, retention=1000,
          now=now)
    return {k: v for k, (_o, v) in committed.items()}, aborted, written


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(ops=TXN_OPS, segment_bytes=st.integers(200, 2000))
def test_property_cleaning_with_transactions(
    tmp_path_factory: pytest.TempPathFactory, ops: list[tuple[str, object, object]],
    segment_bytes: int,
) -> None:
    """Committed and aborted transactions interleaved with plain writes of the same keys:
    after cleaning, both isolation levels read, per key, the latest committed value; no
    aborted record is left; what is kept is as it was written."""
    log = make_log(tmp_path_factory.mktemp("txnprop"), segment_bytes=segment_bytes)
    model, aborted, written = run_txn_ops(log, ops)
    for committed in (True, False):
        got = latest(consume(log, committed=committed))
        assert {k: v for k, v in got.items() if v is not None} == {
            k: v for k, v in model.items() if v is not None
        }
    after = read_all(log)
    assert not {r.offset for r in after} & aborted
    for r in after:
        assert seen(written[r.offset]) == seen(r)
    # A marker left has no horizon, or its transaction has no data before it.
    no_damage(log)


def test_dry_run_writes_nothing(tmp_path: Path) -> None:
    log = make_log(tmp_path, segment_bytes=600)
    fill(log, 40, keys=5)
    files = {p.name: p.read_bytes() for p in log.dir.iterdir()}
    dry = clean(log, dry_run=True)
    assert {p.name: p.read_bytes() for p in log.dir.iterdir()} == files
    real = clean(log)
    assert (dry.messages_read, dry.messages_written, dry.bytes_written) == (
        real.messages_read, real.messages_written, real.bytes_written
    )
    assert dry.dry_run and not real.dry_run


def test_a_small_map_cleans_in_steps(tmp_path: Path) -> None:
    log = make_log(tmp_path, segment_bytes=600)
    fill(log, 60, keys=40)
    before = read_all(log)
    cleaner = Cleaner(10 * BYTES_PER_ENTRY)  # 9 keys per round (load factor 0.9)
    checkpoint = None
    ends = []
    while True:
        offsets = cleanable_offsets(log, checkpoint, T0)
        if offsets.first_dirty_offset >= offsets.first_uncleanable_dirty_offset:
            break
        stats = cleaner.clean(LogToClean(log, *offsets[:2]), now_ms=T0)
        assert stats.map_entries <= 9
        checkpoint = stats.end_offset
        ends.append(checkpoint)
    assert len(ends) > 3 and ends == sorted(ends)
    after = read_all(log)
    assert latest(after) == latest(before)
    cleaned = [r for r in after if r.offset < log.segments[-1].base_offset]
    assert len({r.key for r in cleaned}) == len(cleaned)


def test_abort_leaves_the_log_as_it_was(tmp_path: Path) -> None:
    log = make_log(tmp_path, segment_bytes=600)
    fill(log, 40, keys=5)
    before = read_all(log)
    calls = 0

    def aborted(_tp: tuple[str, int]) -> bool:
        nonlocal calls
        calls += 1
        return calls > 30

    with pytest.raises(LogCleaningAbortedError):
        clean(log, cleaner=Cleaner(1 << 16, is_aborted=aborted))
    assert not list(log.dir.glob("*.cleaned"))
    assert latest(read_all(log)) == latest(before)


@pytest.mark.parametrize("use_c", BACKENDS)
def test_a_batch_whose_records_do_not_parse_stops_the_cleaning(
    tmp_path: Path, use_c: bool
) -> None:
    """CRC intact, records malformed (what a broker without record checks may have stored):
    CorruptRecordError naming the segment and batch, the log left as it was."""
    log = make_log(tmp_path)
    produce(log, [(b"a", b"1")])
    bad = bytearray(build_batch([(T0, b"b", b"1"), (T0, b"c", b"2")]))
    bad[-1] = 0x7F  # the last record's header count: more headers than bytes
    struct.pack_into(">I", bad, 17, crc32c(memoryview(bad)[21:]))
    log.append_as_follower(bytes(patch_offset(bad, log.log_end_offset)))
    log.roll()
    produce(log, [(b"a", b"2")])
    log.update_high_watermark(log.log_end_offset)
    files = {p.name: p.read_bytes() for p in log.dir.glob("*.log")}
    with pytest.raises(CorruptRecordError, match=r"00000000000000000000\.log: .*batch at position"):
        clean(log, use_c=use_c)
    assert {p.name: p.read_bytes() for p in log.dir.glob("*.log")} == files
    assert not list(log.dir.glob("*.cleaned"))


def patch_offset(batch: bytearray, base_offset: int) -> bytearray:
    struct.pack_into(">q", batch, 0, base_offset)
    return batch


def test_retention_during_cleaning_aborts_the_swap(tmp_path: Path) -> None:
    log = make_log(tmp_path, segment_bytes=600, cleanup_policy=("compact", "delete"))
    fill(log, 40, keys=5)
    fired = False

    def meanwhile(_tp: tuple[str, int]) -> bool:
        nonlocal fired
        if not fired:
            fired = True
            log.maybe_increment_log_start_offset(log.segments[2].base_offset)
            log.delete_old_segments()
        return False

    with pytest.raises(LogCleaningAbortedError, match="changed"):
        clean(log, cleaner=Cleaner(1 << 16, is_aborted=meanwhile))
    assert not list(log.dir.glob("*.cleaned"))
    no_damage(log)


def test_a_fetch_started_before_the_swap_still_reads(tmp_path: Path) -> None:
    log = make_log(tmp_path, segment_bytes=600)
    fill(log, 40, keys=5)
    info = log.read(0, 10**6)
    expected = info.read_bytes()
    clean(log)
    assert log.pending_deletes  # the old segments wait for file.delete.delay.ms
    assert info.read_bytes() == expected
    log.delete_pending(T0 + 10**9)
    assert not list(log.dir.glob("*.deleted"))


def test_appends_and_reads_go_on_while_cleaning(tmp_path: Path) -> None:
    """A cleaner thread cleaning again and again while this thread appends, rolls and reads
    the whole log: every read gives valid batches in offset order, and at the end every
    key's latest value is there (bounded: 150 appends)."""
    log = make_log(tmp_path, segment_bytes=500)
    fill(log, 10, keys=6)
    model = latest(read_all(log))
    stop = threading.Event()
    errors: list[BaseException] = []
    cleanings = 0

    def cleaning() -> None:
        nonlocal cleanings
        cleaner = Cleaner(1 << 16)
        checkpoint = None
        try:
            while not stop.is_set():
                offsets = cleanable_offsets(log, checkpoint, T0)
                if offsets.first_dirty_offset < offsets.first_uncleanable_dirty_offset:
                    checkpoint = cleaner.clean(
                        LogToClean(log, *offsets[:2]), now_ms=T0
                    ).end_offset
                    cleanings += 1
                log.delete_pending(T0 + 10**9)
        except BaseException as exc:  # reported below
            errors.append(exc)

    thread = threading.Thread(target=cleaning)
    thread.start()
    try:
        for n in range(150):
            key, value = b"k%d" % (n % 6), b"n%d" % n
            produce(log, [(key, value)], ts=T0 + n)
            model[key] = value
            offset, offsets = 0, []
            while offset < log.log_end_offset:
                data = log.read(offset, 1 << 20).read_bytes()
                headers = list(iter_batch_headers(data))
                assert headers, offset
                for h in headers:
                    assert h.is_valid(data)
                    offsets.extend(r.offset for r in iter_records(data, h))
                offset = headers[-1].last_offset + 1
            assert offsets == sorted(set(offsets))
    finally:
        stop.set()
        thread.join()
    assert not errors
    assert cleanings >= 1  # the log had dirty segments when the thread started
    assert latest(read_all(log)) == model
    no_damage(log)


class Crash(BaseException):
    """A process dying at that instant: no handler runs (it is not an Exception)."""


@pytest.mark.parametrize("failure", [Crash, OSError])
def test_crash_at_every_step_of_the_swap(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, failure: type[BaseException]
) -> None:
    """A crash (or a failing rename, OSError) at each rename of a cleaning (every
    .cleaned -> .swap, old -> .deleted, .swap -> live): reopening gives a consistent log
    with every key's latest record; after an OSError the open log still reads them all."""
    source = make_log(tmp_path / "source", segment_bytes=600)
    fill(source, 24, keys=7)
    source.close()
    real_replace = os.replace
    step = 0
    while True:
        step += 1
        work = tmp_path / f"step{step}"
        shutil.copytree(tmp_path / "source", work)
        log = PartitionLog(work / "topic-0", source.config, clock=Clock())
        log.update_high_watermark(log.log_end_offset)
        before = read_all(log)
        calls = 0

        def crashing(src: object, dst: object, _n: int = step) -> None:
            nonlocal calls
            calls += 1
            if calls == _n:
                raise failure("injected")
            real_replace(src, dst)  # type: ignore[arg-type]

        monkeypatch.setattr(os, "replace", crashing)
        try:
            clean(log)
            finished = True
        except (Crash, OSError, KafkaStorageError):
            finished = False
        finally:
            monkeypatch.setattr(os, "replace", real_replace)
        if failure is OSError:
            assert latest(read_all(log)) == latest(before), step
        reopened = PartitionLog(work / "topic-0", source.config, had_clean_shutdown=False)
        after = read_all(reopened)
        assert latest(after) == latest(before), step
        by_offset = {r.offset: r for r in before}
        assert all(seen(by_offset[r.offset]) == seen(r) for r in after)
        assert [r.offset for r in after] == sorted({r.offset for r in after})
        assert not [p for p in reopened.dir.iterdir() if p.suffix in (".swap", ".cleaned")]
        reopened.close()
        no_damage(work / "topic-0")
        if finished:
            break
    assert step > 10  # every rename of several groups was a crash point


# ============================================================================ property


OPS = st.lists(
    st.one_of(
        st.tuples(st.just("produce"),
                  st.lists(st.tuples(st.integers(0, 6), st.booleans()), min_size=1, max_size=5)),
        st.tuples(st.just("roll"), st.none()),
        st.tuples(st.just("clean"), st.integers(2, 40)),
    ),
    min_size=1,
    max_size=30,
)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(ops=OPS, segment_bytes=st.integers(200, 2000))
def test_property_cleaning_keeps_latest_values_and_offsets(
    tmp_path_factory: pytest.TempPathFactory, ops: list[tuple[str, object]], segment_bytes: int
) -> None:
    base = tmp_path_factory.mktemp("prop")
    log = make_log(base, segment_bytes=segment_bytes)
    written: dict[int, Record] = {}
    model: dict[bytes, bytes | None] = {}
    checkpoint: int | None = None
    n = 0
    for op, arg in ops:
        if op == "produce":
            items: list[Item] = []
            for key, tomb in arg:  # type: ignore[union-attr]
                n += 1
                items.append((b"k%d" % key, None if tomb else b"v%d" % n))
            produce(log, items, ts=T0 + n)
            for r in read_all(log):
                written.setdefault(r.offset, r)
            for k, v in items:
                assert k is not None
                model[k] = v
        elif op == "roll":
            if log.active_segment.size:
                log.roll()
        else:
            stats = clean(log, cleaner=Cleaner(int(arg) * BYTES_PER_ENTRY),  # type: ignore[call-overload]
                          checkpoint=checkpoint, retention=0, now=T0 + 10**6)
            checkpoint = stats.end_offset
    after = read_all(log)
    got = latest(after)
    for key, value in model.items():
        if value is None:
            assert got.get(key) is None  # a tombstone, or removed with its key
        else:
            assert got[key] == value
    assert set(got) <= set(model)
    for r in after:
        assert seen(written[r.offset]) == seen(r)
    no_damage(log)


# ============================================================================ checkpoints, throttle


def test_cleaner_checkpoints_and_partition_deletion(tmp_path: Path) -> None:
    checkpoints = CleanerCheckpoints()
    assert checkpoints.read(tmp_path) == {}
    checkpoints.update(tmp_path, ("t", 0), 42)
    checkpoints.update(tmp_path, ("t", 1), 7)
    assert checkpoints.read(tmp_path) == {("t", 0): 42, ("t", 1): 7}
    checkpoints.remove(tmp_path, ("t", 0))
    assert checkpoints.read(tmp_path) == {("t", 1): 7}
    assert (tmp_path / "cleaner-offset-checkpoint").read_text().splitlines() == ["0", "1", "t 1 7"]
    with LogManager([tmp_path]) as manager:
        manager.get_or_create_log("t", 1)
        manager.delete_log("t", 1)
        assert manager.cleaner_checkpoints.read(tmp_path) == {}


def test_throttler_sleeps_to_the_desired_rate() -> None:
    now = [0.0]
    slept: list[float] = []

    def sleep(s: float) -> None:
        slept.append(s)
        now[0] += s

    throttler = Throttler(1000.0, check_interval_ms=100, clock=lambda: now[0], sleep=sleep)
    throttler.maybe_throttle(500)  # within the first interval: no check yet
    now[0] += 0.2
    throttler.maybe_throttle(500)  # 1000 bytes in 0.2 s at 1000/s: sleep 0.8 s
    assert slept == [pytest.approx(0.8)]
    unlimited = Throttler(float("inf"), clock=lambda: now[0], sleep=sleep)
    unlimited.maybe_throttle(10**12)
    assert len(slept) == 1


# ============================================================================ Kafka's own data

@pytest.mark.corpus
def test_cleans_a_copy_of_kafka_written_consumer_offsets(
    tmp_path: Path, kafka_corpus: Path
) -> None:
    src = kafka_corpus / "__consumer_offsets-18"
    work = tmp_path / "__consumer_offsets-18"
    shutil.copytree(src, work)
    log = PartitionLog(work, LogConfig(cleanup_policy=("compact",)))
    log.update_high_watermark(log.log_end_offset)
    before = read_all(log)
    assert len(before) == 499
    log.roll()  # Kafka's data sits in its active segment: roll so that it may be cleaned
    stats = clean(log, now=T0 + 10**9)
    after = read_all(log)
    assert stats.messages_read == 499 and len(after) < len(before)
    assert latest(after) == {k: v for k, v in latest(before).items() if v is not None} | {
        k: v for k, v in latest(after).items() if v is None
    }
    no_damage(log)


def test_fill_helper_is_deterministic(tmp_path: Path) -> None:
    """The helper above makes the same log twice (tests compare runs)."""
    a, b = make_log(tmp_path / "a"), make_log(tmp_path / "b")
    fill(a, 5, keys=3)
    fill(b, 5, keys=3)
    assert read_all(a) == read_all(b)


@pytest.mark.parametrize("use_c", BACKENDS)
def test_a_rebuilt_batch_starts_at_its_first_kept_record(tmp_path: Path, use_c: bool) -> None:
    """As Kafka's MemoryRecordsBuilder: a batch that lost its first records has the first
    kept record's timestamp as its base (that record's delta 0), every timestamp kept (seen
    by the differential test: the CRCs differed)."""
    log = make_log(tmp_path, segment_bytes=10_000)
    produce(log, [(b"a", b"1"), (b"b", b"1"), (b"c", b"1")], ts=T0)
    produce(log, [(b"a", b"2")], ts=T0 + 100)
    log.roll()
    produce(log, [(b"z", b"z")], ts=T0 + 200)
    before = {r.offset: r.timestamp for r in read_all(log)}
    clean(log, use_c=use_c)
    (first, _buf), *_rest = batches(log)
    assert (first.base_offset, first.records_count) == (0, 2)
    assert first.base_timestamp == T0 + 1  # "b", the first record kept
    assert {r.offset: r.timestamp for r in read_all(log)} == {
        o: t for o, t in before.items() if o != 0}
    no_damage(log)
