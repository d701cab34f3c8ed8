"""Tests for klog.storage.log.PartitionLog."""

from __future__ import annotations

import os
import struct
from pathlib import Path

import pytest

from klog.protocol.errors import CorruptRecordError, InvalidRecordError, RecordTooLargeError
from klog.protocol.records.batch import crc32c, iter_batch_headers, read_batch_header
from klog.storage.config import LogConfig
from klog.storage.log import (
    OffsetOutOfRangeError,
    PartitionLog,
    log_delete_dir_name,
    parse_partition_dir_name,
)
from klog.storage.producer_state import (
    InvalidTxnStateError,
    OutOfOrderSequenceError,
    VerificationGuard,
)
from klog.storage.scan import scan_segment
from klog.storage.validator import AppendOrigin, validate_records

from .batches import build_batch, build_control_batch

T0 = 1_600_000_000_000


COORD = AppendOrigin.COORDINATOR  # the transaction coordinator's markers


class Clock:
    def __init__(self, now: int = T0) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


def make_log(tmp_path: Path, clock: Clock | None = None, **config: object) -> PartitionLog:
    return PartitionLog(tmp_path / "topic-0", LogConfig(**config), clock=clock or Clock())


def append_n(log: PartitionLog, n: int, records: int = 3, value_size: int = 50, ts: int = T0):
    infos = []
    for i in range(n):
        batch = build_batch(0, count=records, value_size=value_size, base_timestamp=ts + i)
        infos.append(log.append_as_leader(batch, leader_epoch=1))
    return infos


def test_dir_names() -> None:
    assert parse_partition_dir_name("my-topic-12").topic == "my-topic"
    assert parse_partition_dir_name("my-topic-12").partition == 12
    name = log_delete_dir_name("t", 3)
    parsed = parse_partition_dir_name(name)
    assert (parsed.topic, parsed.partition, parsed.kind) == ("t", 3, "delete")
    for bad in ("topic", "-1", "topic-x"):
        with pytest.raises(ValueError):
            parse_partition_dir_name(bad)


def test_append_assigns_offsets_and_epochs(tmp_path: Path) -> None:
    log = make_log(tmp_path)
    batch = build_batch(999, count=3, leader_epoch=42)
    info = log.append_as_leader(batch + build_batch(5, count=2), leader_epoch=7)
    assert (info.first_offset, info.last_offset, info.record_count, info.batch_count) == (
        0,
        4,
        5,
        2,
    )
    assert log.log_end_offset == 5
    data = log.read(0, 10_000).read_bytes()
    headers = list(iter_batch_headers(data))
    assert [(h.base_offset, h.last_offset) for h in headers] == [(0, 2), (3, 4)]
    assert {h.partition_leader_epoch for h in headers} == {7}
    for h in headers:
        h.ensure_valid(data)  # the CRC still holds: it does not cover the patched fields
    # Only the offset and epoch fields differ from what the producer sent.
    assert data[12 + 4 :][: len(batch) - 16] == batch[16:]
    assert log.leader_epoch_cache.entries[0].epoch == 7


def test_append_rejects_bad_input(tmp_path: Path) -> None:
    log = make_log(tmp_path, max_message_bytes=500)
    good = build_batch(0, count=2)
    with pytest.raises(CorruptRecordError):
        log.append_as_leader(good[:-3], 0)
    flipped = bytearray(good)
    flipped[-1] ^= 1
    with pytest.raises(CorruptRecordError):
        log.append_as_leader(bytes(flipped), 0)
    with pytest.raises(RecordTooLargeError):
        log.append_as_leader(build_batch(0, count=1, value_size=600), 0)
    with pytest.raises(InvalidRecordError):
        log.append_as_leader(
            build_control_batch(0, commit=True, producer_id=1, producer_epoch=0), 0
        )
    with pytest.raises(CorruptRecordError):
        log.append_as_leader(b"\x00" * 40, 0)
    assert log.log_end_offset == 0 and log.size == 0


def test_log_append_time(tmp_path: Path) -> None:
    clock = Clock(T0 + 5000)
    log = make_log(tmp_path, clock, message_timestamp_type="LogAppendTime")
    info = log.append_as_leader(build_batch(0, count=2), 0)
    assert info.log_append_time == T0 + 5000
    data = log.read(0, 1000).read_bytes()
    header = read_batch_header(data, 0)
    header.ensure_valid(data)
    assert header.max_timestamp == T0 + 5000
    assert header.timestamp_type.kafka_name == "LogAppendTime"


def test_idempotent_duplicates_and_sequences(tmp_path: Path) -> None:
    log = make_log(tmp_path)
    b = build_batch(0, count=2, producer_id=9, producer_epoch=0, base_sequence=0)
    first = log.append_as_leader(b, 0)
    dup = log.append_as_leader(b, 0)
    assert dup.duplicate and (dup.first_offset, dup.last_offset) == (0, 1)
    assert log.log_end_offset == 2
    with pytest.raises(OutOfOrderSequenceError):
        log.append_as_leader(build_batch(0, producer_id=9, producer_epoch=0, base_sequence=7), 0)
    assert not first.duplicate


def test_read_whole_batches_and_min_one_message(tmp_path: Path) -> None:
    log = make_log(tmp_path)
    append_n(log, 10, value_size=100)
    sizes = [h.size for h in iter_batch_headers(log.read(0, 10**6).read_bytes())]
    one = log.read(4, 10)  # smaller than a batch
    assert one.size == sizes[0]
    nothing = log.read(4, 10, min_one_message=False)
    assert nothing.size == 0 and nothing.first_entry_incomplete
    two = log.read(3, sizes[0] * 2 + 5)
    assert two.size == sizes[0] * 2  # whole batches only
    assert [h.base_offset for h in iter_batch_headers(two.read_bytes())] == [3, 6]
    bounded = log.read(0, 10**6, max_offset=9)
    assert [h.base_offset for h in iter_batch_headers(bounded.read_bytes())] == [0, 3, 6]
    assert log.read(30, 100).size == 0  # at the LEO: empty
    for bad in (31, -1):
        with pytest.raises(OffsetOutOfRangeError):
            log.read(bad, 100)


def test_roll_on_size_and_reads_across_segments(tmp_path: Path) -> None:
    log = make_log(tmp_path, segment_bytes=1000)
    append_n(log, 20, value_size=60)
    assert log.number_of_segments > 3
    bases = [s.base_offset for s in log.segments]
    assert bases == sorted(bases) and bases[0] == 0
    for segment in log.segments[:-1]:
        assert segment.size <= 1000
        # Rolled segments have trimmed indexes.
        assert segment.offset_index_path.stat().st_size == 8 * segment.offset_index.entries
    everything = b"".join(s.log_path.read_bytes() for s in log.segments)
    offset, got = 0, b""
    while offset < log.log_end_offset:
        info = log.read(offset, 100_000)
        chunk = info.read_bytes()
        got += chunk
        offset = list(iter_batch_headers(chunk))[-1].last_offset + 1
    assert got == everything
    assert (tmp_path / "topic-0" / f"{bases[1]:020d}.snapshot").exists()


def test_roll_on_full_index(tmp_path: Path) -> None:
    # 16-byte indexes hold two entries; batches of ~1 KB pass index.interval.bytes often.
    log = make_log(tmp_path, segment_index_bytes=24, index_interval_bytes=100)
    append_n(log, 12, value_size=300)
    assert log.number_of_segments >= 3
    for segment in log.segments[:-1]:
        assert segment.offset_index.entries <= 3


def test_roll_on_time(tmp_path: Path) -> None:
    clock = Clock()
    log = make_log(tmp_path, clock, segment_ms=1000)
    append_n(log, 2, ts=T0)
    assert log.number_of_segments == 1
    append_n(log, 1, ts=T0 + 5000)  # the record timestamps span more than segment.ms
    assert log.number_of_segments == 2


def test_roll_on_relative_offset_overflow(tmp_path: Path) -> None:
    log = make_log(tmp_path)
    log.append_as_follower(build_batch(0, count=1))
    log.append_as_follower(build_batch(2**31 + 10, count=1))
    assert [s.base_offset for s in log.segments] == [0, 2**31 + 10]
    assert log.log_end_offset == 2**31 + 11


def test_follower_append_keeps_offsets(tmp_path: Path) -> None:
    log = make_log(tmp_path)
    data = build_batch(0, count=2, leader_epoch=3) + build_batch(5, count=1, leader_epoch=4)
    info = log.append_as_follower(data)
    assert (info.first_offset, info.last_offset) == (0, 5)
    assert log.read(0, 10**6).read_bytes() == data
    assert [e.epoch for e in log.leader_epoch_cache.entries] == [3, 4]
    with pytest.raises(Exception, match="below the log end offset"):
        log.append_as_follower(build_batch(3, count=1))


def test_truncate_to(tmp_path: Path) -> None:
    log = make_log(tmp_path, segment_bytes=700)
    append_n(log, 12, value_size=60)
    segments_before = log.number_of_segments
    assert log.truncate_to(15)
    assert log.log_end_offset == 15
    assert log.number_of_segments < segments_before
    assert list(log.segments[-1].log_path.parent.glob("*.deleted"))
    assert not log.truncate_to(100)
    info = append_n(log, 1)[0]
    assert info.first_offset == 15
    # Reopening gives the same LEO.
    log.flush()
    log.close()
    again = make_log(tmp_path, segment_bytes=700)
    assert again.log_end_offset == 18
    assert not list((tmp_path / "topic-0").glob("*.deleted"))  # cleaned at load


def test_truncate_fully_and_start_at(tmp_path: Path) -> None:
    log = make_log(tmp_path)
    append_n(log, 3)
    log.truncate_fully_and_start_at(100)
    assert (log.log_start_offset, log.log_end_offset) == (100, 100)
    assert append_n(log, 1)[0].first_offset == 100
    with pytest.raises(OffsetOutOfRangeError):
        log.read(50, 10)


def test_retention_by_time_and_pending_deletes(tmp_path: Path) -> None:
    clock = Clock()
    log = make_log(
        tmp_path, clock, segment_bytes=700, retention_ms=10_000, file_delete_delay_ms=500
    )
    append_n(log, 6, value_size=60, ts=T0)
    append_n(log, 6, value_size=60, ts=T0 + 20_000)
    n_before = log.number_of_segments
    clock.now = T0 + 15_000
    # Nothing past the high watermark is ever deleted (the replica manager moves it).
    assert log.delete_old_segments() == 0
    log.update_high_watermark(log.log_end_offset)
    deleted = log.delete_old_segments()
    assert deleted > 0 and log.number_of_segments == n_before - deleted
    assert log.log_start_offset == log.segments[0].base_offset
    pending = log.pending_deletes
    assert pending and all(p.name.endswith(".log.deleted") and p.exists() for p in pending)
    assert log.delete_pending(clock.now + 100) == 0
    assert log.delete_pending(clock.now + 500) == deleted
    assert not any(p.exists() for p in pending)
    with pytest.raises(OffsetOutOfRangeError):
        log.read(0, 100)
    # Once every record is past retention.ms, the active segment goes too (as Kafka):
    # rolled first, so an empty active segment remains at the log end offset.
    clock.now = T0 + 10**9
    assert log.delete_old_segments() > 0
    assert log.number_of_segments == 1 and log.active_segment.size == 0
    assert (log.log_start_offset, log.log_end_offset) == (36, 36)
    with pytest.raises(OffsetOutOfRangeError):
        log.read(35, 100)


def test_retention_of_the_active_segment(tmp_path: Path) -> None:
    clock = Clock()
    log = make_log(tmp_path, clock, retention_ms=10_000)
    append_n(log, 3, ts=T0)  # one segment: the active one, 9 records
    clock.now = T0 + 60_000
    # Past the high watermark: kept.
    assert log.delete_old_segments() == 0 and log.log_start_offset == 0
    log.update_high_watermark(log.log_end_offset)
    assert log.delete_old_segments() == 1
    assert (log.log_start_offset, log.log_end_offset, log.number_of_segments) == (9, 9, 1)
    assert log.read(9, 100).size == 0
    # An empty active segment is never rolled away, however often retention runs.
    base = log.active_segment.base_offset
    assert log.delete_old_segments() == 0 and log.active_segment.base_offset == base
    # Appends go on at the end offset; a newer record keeps its segment.
    append_n(log, 1, ts=clock.now - 1000)
    log.update_high_watermark(log.log_end_offset)
    assert log.delete_old_segments() == 0
    assert (log.log_start_offset, log.log_end_offset) == (9, 12)


def test_retention_keeps_an_active_segment_with_one_recent_record(tmp_path: Path) -> None:
    clock = Clock()
    log = make_log(tmp_path, clock, retention_ms=10_000)
    append_n(log, 2, ts=T0)
    append_n(log, 1, ts=T0 + 55_000)
    clock.now = T0 + 60_000
    log.update_high_watermark(log.log_end_offset)
    assert log.delete_old_segments() == 0 and log.log_start_offset == 0


def test_retention_by_bytes(tmp_path: Path) -> None:
    log = make_log(tmp_path, segment_bytes=700, retention_bytes=1500)
    append_n(log, 20, value_size=60)
    log.update_high_watermark(log.log_end_offset)
    log.delete_old_segments()
    assert log.size - log.active_segment.size <= 1500
    assert log.size > 0


def test_log_start_offset_and_delete_records(tmp_path: Path) -> None:
    log = make_log(tmp_path, segment_bytes=700)
    append_n(log, 12, value_size=60)
    second_base = log.segments[1].base_offset
    log.update_high_watermark(log.log_end_offset)
    assert log.maybe_increment_log_start_offset(second_base + 1)
    assert log.log_start_offset == second_base + 1
    with pytest.raises(OffsetOutOfRangeError):
        log.read(0, 100)
    assert log.delete_old_segments() == 1  # the first segment is wholly below
    with pytest.raises(OffsetOutOfRangeError):
        log.maybe_increment_log_start_offset(10**6)


def test_fetch_offset_by_timestamp(tmp_path: Path) -> None:
    log = make_log(tmp_path, segment_bytes=700)
    for i in range(10):
        log.append_as_leader(build_batch(0, count=2, base_timestamp=T0 + 1000 * i), 0)
    assert log.fetch_offset_by_timestamp(-2).offset == 0
    assert log.fetch_offset_by_timestamp(-1).offset == 20
    found = log.fetch_offset_by_timestamp(T0 + 4500)
    assert found is not None and found.offset == 10
    assert log.fetch_offset_by_timestamp(T0 + 10**6) is None
    latest = log.fetch_offset_by_timestamp(-3)
    assert (latest.timestamp, latest.offset) == (T0 + 9001, 19)


def test_flush_policy(tmp_path: Path) -> None:
    clock = Clock()
    log = make_log(tmp_path, clock, flush_messages=10, flush_ms=1000)
    append_n(log, 2)
    assert log.recovery_point == 0
    append_n(log, 2)  # 12 unflushed messages >= flush.messages
    assert log.recovery_point == 12
    append_n(log, 1)
    assert not log.maybe_flush(clock.now)
    clock.now += 1000
    assert log.maybe_flush(clock.now) and log.recovery_point == 15


def test_reopen_after_clean_and_unclean_shutdown(tmp_path: Path) -> None:
    log = make_log(tmp_path, segment_bytes=1000)
    append_n(log, 15, value_size=60)
    leo = log.log_end_offset
    log.flush()
    log.close()
    clean = make_log(tmp_path, segment_bytes=1000)
    assert clean.log_end_offset == leo
    clean.close()
    # Unclean: indexes preallocated and zero-filled, a torn batch at the end.
    active = sorted((tmp_path / "topic-0").glob("*.log"))[-1]
    with open(active, "ab") as f:
        f.write(build_batch(leo, count=2)[:30])
    index = active.with_suffix(".index")
    with open(index, "ab") as f:
        f.write(bytes(800))
    unclean = PartitionLog(
        tmp_path / "topic-0",
        LogConfig(segment_bytes=1000),
        recovery_point=0,
        had_clean_shutdown=False,
        clock=Clock(),
    )
    assert unclean.log_end_offset == leo
    assert unclean.bytes_truncated_on_load == 30
    assert scan_segment(active).is_clean
    assert unclean.append_as_leader(build_batch(0, count=1), 0).first_offset == leo


def test_missing_and_corrupt_indexes_are_rebuilt(tmp_path: Path) -> None:
    log = make_log(tmp_path, segment_bytes=2000)
    append_n(log, 30, value_size=60)
    leo = log.log_end_offset
    log.flush()
    log.close()
    directory = tmp_path / "topic-0"
    indexes = sorted(directory.glob("*.index"))
    reference = {p: p.read_bytes() for p in indexes[:-1]}
    indexes[0].unlink()
    indexes[1].write_bytes(struct.pack(">ii", 5, 10) + bytes(16))  # zero tail
    reopened = make_log(tmp_path, segment_bytes=2000)
    assert reopened.log_end_offset == leo
    reopened.close()
    for path, data in reference.items():
        assert path.read_bytes() == data


def test_leftover_files_are_resolved(tmp_path: Path) -> None:
    log = make_log(tmp_path, segment_bytes=700)
    append_n(log, 8, value_size=60)
    log.flush()
    log.close()
    directory = tmp_path / "topic-0"
    (directory / "00000000000000000003.log.deleted").write_bytes(b"x")
    (directory / "00000000000000000099.log.cleaned").write_bytes(b"x")
    (directory / "00000000000000000000.index.tmp").write_bytes(b"x")
    (directory / "00000000000000000077.index").write_bytes(bytes(8))  # orphan
    reopened = make_log(tmp_path, segment_bytes=700)
    assert reopened.log_end_offset == 24
    names = {p.name for p in directory.iterdir()}
    assert not any(n.endswith((".deleted", ".cleaned", ".tmp")) for n in names)
    assert "00000000000000000077.index" not in names


def test_swap_file_replaces_segments(tmp_path: Path) -> None:
    directory = tmp_path / "topic-0"
    directory.mkdir()
    (directory / "00000000000000000000.log").write_bytes(build_batch(0, count=3))
    (directory / "00000000000000000003.log").write_bytes(build_batch(3, count=3))
    cleaned = build_batch(1, count=1) + build_batch(5, count=1)
    (directory / "00000000000000000000.log.swap").write_bytes(cleaned)
    log = PartitionLog(directory, LogConfig(), clock=Clock())
    assert [s.base_offset for s in log.segments] == [0]
    assert log.read(0, 10**6).read_bytes() == cleaned
    assert log.log_end_offset == 6


def test_rename_dir_keeps_segments_usable(tmp_path: Path) -> None:
    log = make_log(tmp_path)
    append_n(log, 2)
    log.rename_dir(log_delete_dir_name("topic", 0))
    assert log.dir.name.endswith("-delete")
    assert log.read(0, 1000).read_bytes()
    assert log.segments[0].log_path.parent == log.dir
    log.delete()
    assert not log.dir.exists()
    assert os.listdir(tmp_path) == []


# -- LogConfig (klog.storage.config; tested here as the log is its consumer) ---------------


def test_log_config_defaults_and_properties() -> None:
    from klog.storage.config import LONG_MAX, LogConfig, LogConfigError

    config = LogConfig()
    assert config.segment_bytes == 1073741824 and config.segment_ms == 604800000
    assert config.segment_index_bytes == 10485760 and config.index_interval_bytes == 4096
    assert config.retention_ms == 604800000 and config.retention_bytes == -1
    assert config.file_delete_delay_ms == 60000 and config.max_message_bytes == 1048588
    assert config.flush_messages == config.flush_ms == LONG_MAX
    assert config.cleanup_policy == ("delete",) and config.min_insync_replicas == 1
    custom = LogConfig.from_properties(
        {
            "segment.bytes": "2048",
            "cleanup.policy": "compact,delete",
            "preallocate": "true",
            "message.timestamp.type": "LogAppendTime",
            "min.cleanable.dirty.ratio": "0.3",
        }
    )
    assert custom.segment_bytes == 2048 and custom.compact and custom.delete
    assert custom.preallocate and custom.log_append_time
    assert LogConfig.from_properties(custom.to_properties()) == custom
    for props, message in [
        ({"segment.bytes": "abc"}, "not a number"),
        ({"segment.bytes": "10"}, "at least 14"),
        ({"segment.bytes": str(2**31)}, "out of range"),
        ({"preallocate": "yes"}, "true or false"),
        ({"cleanup.policy": "archive"}, "must be one of"),
        ({"message.timestamp.type": "createtime"}, "must be one of"),
        ({"min.cleanable.dirty.ratio": "1.5"}, "no more than 1"),
        ({"no.such.config": "1"}, "unknown topic config"),
    ]:
        with pytest.raises(LogConfigError, match=message):
            LogConfig.from_properties(props)
    assert LogConfig.from_properties({"no.such.config": "1"}, ignore_unknown=True) == config


# -- the produce path's buffer discipline and the read path's region metadata ---------------


def test_append_patches_a_writable_buffer_in_place_and_copies_read_only_input(
    tmp_path: Path,
) -> None:
    log = make_log(tmp_path)
    original = build_batch(0, [b"v" * 10] * 3, leader_epoch=-1)
    log.append_as_leader(original, leader_epoch=7)  # bytes: copied, never mutated
    assert read_batch_header(original).base_offset == 0
    assert read_batch_header(original).partition_leader_epoch == -1

    writable = bytearray(original)
    info = log.append_as_leader(writable, leader_epoch=7)
    header = read_batch_header(writable)
    assert (info.first_offset, info.last_offset) == (3, 5)
    assert (header.base_offset, header.partition_leader_epoch) == (3, 7)
    header.ensure_valid(writable)  # the CRC does not cover what was patched
    assert log.read(3, 1 << 20).read_bytes() == bytes(writable)


def test_read_region_reports_its_last_offset_and_reads_into_a_buffer(tmp_path: Path) -> None:
    # Small index interval so reads jump through the index before walking headers.
    log = make_log(tmp_path, index_interval_bytes=256)
    for _ in range(200):
        log.append_as_leader(build_batch(0, [b"x" * 40] * 4), leader_epoch=0)
    buf = bytearray(1 << 16)
    offset = 0
    seen = 0
    for max_bytes in (1, 300, 1000, 4096, 1 << 16):
        offset = 0
        seen = 0
        while offset < log.log_end_offset:
            info = log.read(offset, max_bytes)
            data = info.read_bytes()
            assert info.readinto(buf) == len(data)
            assert buf[: len(data)] == data
            headers = list(iter_batch_headers(data))
            assert headers[-1].last_offset == info.last_offset
            assert headers[-1].end == len(data)  # whole batches only
            seen += sum(h.records_count or 0 for h in headers)
            offset = info.last_offset + 1
        assert seen == 800
    with pytest.raises(ValueError):
        log.read(0, 1 << 16).readinto(bytearray(10))


# -- the produce path's single-batch fast path --------------------------------------------


def _spy_general(log: PartitionLog) -> list[int]:
    calls: list[int] = []
    general = log._append_as_leader

    def spy(validated, leader_epoch, guard=None):  # type: ignore[no-untyped-def]
        calls.append(1)
        return general(validated, leader_epoch, guard)

    log._append_as_leader = spy  # type: ignore[method-assign]
    return calls


def _dir_bytes(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir()) if p.is_file()}


@pytest.mark.parametrize("segment_bytes", [1 << 30, 3000])
@pytest.mark.parametrize("index_interval_bytes", [1, 700, 4096])
def test_single_batch_fast_path_matches_the_general_path(
    tmp_path: Path, segment_bytes: int, index_interval_bytes: int
) -> None:
    import random

    rng = random.Random(segment_bytes + index_interval_bytes)
    config = dict(segment_bytes=segment_bytes, index_interval_bytes=index_interval_bytes)
    clock = Clock()
    fast = PartitionLog(tmp_path / "fast" / "t-0", LogConfig(**config), clock=clock)
    general = PartitionLog(tmp_path / "general" / "t-0", LogConfig(**config), clock=clock)
    calls = _spy_general(fast)
    epochs = [0, 0, 1, 1, 0, 3, 3, -1, 3, 5]
    kinds = [bytes, bytearray, lambda b: memoryview(bytearray(b)), memoryview]
    for i in range(120):
        count = rng.choice((1, 2, 7, 30))
        if i % 17 == 5:
            batch = build_batch(0, count=1, timestamps=[-1])  # no timestamp
        else:
            batch = build_batch(0, count=count, value_size=rng.choice((5, 50, 400)),
                                base_timestamp=T0 + rng.randrange(-5000, 5000))
        epoch = epochs[i % len(epochs)]
        kind = kinds[i % len(kinds)]
        clock.now += rng.choice((0, 1, 1000))
        got = fast.append_as_leader(kind(batch), leader_epoch=epoch)
        with general._lock:
            validated = validate_records(kind(batch), general.config, AppendOrigin.CLIENT,
                                         clock.now)
            want = general._append_as_leader(validated, epoch)
        assert got == want and type(got) is type(want)
    assert not calls  # every append above took the fast path
    assert fast.log_end_offset == general.log_end_offset
    assert fast.number_of_segments == general.number_of_segments
    assert fast.leader_epoch_cache.entries == general.leader_epoch_cache.entries
    for offset in range(0, fast.log_end_offset, 13):
        assert fast.read(offset, 5000).read_bytes() == general.read(offset, 5000).read_bytes()
    fast.close()
    general.close()
    fast_files = _dir_bytes(tmp_path / "fast" / "t-0")
    assert fast_files == _dir_bytes(tmp_path / "general" / "t-0")
    assert sum(name.endswith(".log") for name in fast_files) == fast.number_of_segments


def test_fast_path_leaves_everything_else_to_the_general_path(tmp_path: Path) -> None:
    log = make_log(tmp_path, max_message_bytes=2000)
    calls = _spy_general(log)
    good = build_batch(0, count=2)
    log.append_as_leader(good, 0)
    assert not calls and log.log_end_offset == 2
    size = log.size
    declined: list[tuple[bytes, type[Exception] | None]] = []
    flipped = bytearray(good)
    flipped[-1] ^= 1
    declined.append((bytes(flipped), CorruptRecordError))
    declined.append((good + b"\x00\x01", CorruptRecordError))  # trailing bytes
    declined.append((good[:-1], CorruptRecordError))
    declined.append((build_batch(0, count=1, value_size=3000), RecordTooLargeError))
    declined.append(
        (build_control_batch(0, commit=True, producer_id=1, producer_epoch=0), InvalidRecordError)
    )
    lying = bytearray(build_batch(0, count=3))
    struct.pack_into(">i", lying, 57, 4)  # recordsCount 4 with lastOffsetDelta 2
    struct.pack_into(">I", lying, 17, crc32c(memoryview(lying)[21:]))
    declined.append((bytes(lying), InvalidRecordError))
    for records, error in declined:
        before = bytearray(records)
        with pytest.raises(error):
            log.append_as_leader(bytearray(records), 0)
        assert bytes(before) == records  # refused by the validator: nothing patched
    assert log.log_end_offset == 2 and log.size == size
    assert not calls  # neither append path saw them
    # Valid input the fast path does not handle: several batches, a producer id.
    info = log.append_as_leader(build_batch(0, count=2) + build_batch(0, count=3), 0)
    assert (info.first_offset, info.last_offset, info.batch_count) == (2, 6, 2)
    idempotent = build_batch(0, count=2, producer_id=9, producer_epoch=0, base_sequence=0)
    assert log.append_as_leader(idempotent, 0).first_offset == 7
    assert log.append_as_leader(idempotent, 0).duplicate
    assert len(calls) == 3
    log.close()


def test_reads_up_to_a_high_watermark(tmp_path: Path) -> None:
    log = make_log(tmp_path, index_interval_bytes=300, segment_bytes=4000)
    batches = [build_batch(0, count=3, value_size=40, base_timestamp=T0 + i) for i in range(60)]
    for b in batches:
        log.append_as_leader(b, 0)
    end = log.log_end_offset
    assert log.number_of_segments > 3
    everything = {o: log.read(o, 1 << 20) for o in range(0, end, 3)}
    for hw in (1, 3, 5, 30, 31, 33, end - 4, end - 3, end - 1):
        for offset in range(0, end, 3):
            for max_bytes in (1, 500, 1 << 20):
                info = log.read(offset, max_bytes, max_offset=hw)
                if offset // 3 >= hw // 3:
                    # Nothing of the batch holding the high watermark is exposed.
                    assert info.size == 0
                    continue
                data = info.read_bytes()
                headers = list(iter_batch_headers(data))
                assert headers and headers[0].base_offset <= offset <= headers[0].last_offset
                # Batches wholly below the high watermark's batch, within max_bytes (or one).
                assert all(h.last_offset < hw or h is headers[0] for h in headers)
                assert len(data) <= max(max_bytes, headers[0].size)
                assert data == everything[offset].read_bytes()[: len(data)]
                assert headers[-1].last_offset == info.last_offset
    for max_offset in (end, end + 10):  # at or past the log end: no limit at all
        assert log.read(0, 5000, max_offset=max_offset) == log.read(0, 5000)
    log.close()


def _descriptors_of(directory: Path) -> int:
    """Descriptors this process holds open on files in ``directory``."""
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        count += target.startswith(str(directory))
    return count


def _read_all(log: PartitionLog) -> bytes:
    offset, got = log.log_start_offset, b""
    while offset < log.log_end_offset:
        chunk = log.read(offset, 100_000).read_bytes()
        got += chunk
        offset = list(iter_batch_headers(chunk))[-1].last_offset + 1
    return got


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc/self/fd")
def test_idle_segments_release_their_indexes_and_hold_one_descriptor(tmp_path: Path) -> None:
    log = make_log(tmp_path, segment_bytes=1000)
    append_n(log, 20, value_size=60)
    segments = log.segments
    assert len(segments) > 3
    directory = tmp_path / "topic-0"
    # Rolled segments map nothing; each segment holds its .log descriptor only.
    for segment in segments[:-1]:
        assert segment._offset_index is None and segment._time_index is None
    assert _descriptors_of(directory) == len(segments)
    everything = b"".join(s.log_path.read_bytes() for s in segments)
    # Reads map the old segments' indexes again, and find the same batches.
    assert _read_all(log) == everything
    middle = segments[1]
    found = log.fetch_offset_by_timestamp(T0 + 7)
    assert found is not None and found.offset >= middle.base_offset
    assert segments[0].translate_offset(2) is not None
    assert segments[0]._offset_index is not None
    assert _descriptors_of(directory) == len(segments)
    log.flush()
    log.close()
    assert _descriptors_of(directory) == 0
    # Loaded again: only the active segment's indexes are mapped.
    reopened = make_log(tmp_path, segment_bytes=1000)
    for segment in reopened.segments[:-1]:
        assert segment._offset_index is None and segment._time_index is None
    assert _descriptors_of(directory) == len(segments)
    assert _read_all(reopened) == everything
    assert reopened.append_as_leader(build_batch(0, count=1), 0).first_offset == 60
    reopened.close()


def test_crash_recovery_rebuilds_lazily_opened_indexes(tmp_path: Path) -> None:
    log = make_log(tmp_path, segment_bytes=1000)
    append_n(log, 20, value_size=60)
    log.flush()
    leo = log.log_end_offset
    everything = b"".join(s.log_path.read_bytes() for s in log.segments)
    directory = tmp_path / "topic-0"
    reference = {p: p.read_bytes() for p in sorted(directory.glob("*.index"))[:-1]}
    # A crash: descriptors and mappings gone without trimming anything; then an inactive
    # segment's index, not mapped at the time, is found damaged (a zero tail).
    for segment in log.segments:
        segment.close_handlers()
    damaged = sorted(reference)[1]
    with open(damaged, "ab") as f:
        f.write(bytes(64))
    recovered = PartitionLog(directory, LogConfig(segment_bytes=1000), recovery_point=0,
                             had_clean_shutdown=False, clock=Clock())
    assert recovered.log_end_offset == leo
    assert _read_all(recovered) == everything
    for segment in recovered.segments[:-1]:
        # Looked up lazily, after recovery, from the rebuilt files.
        position = segment.translate_offset(segment.base_offset)
        assert position is not None and position.position == 0
    recovered.close()
    for path, data in reference.items():
        assert path.read_bytes() == data


def test_transaction_markers_are_checked_and_complete_transactions(tmp_path: Path) -> None:
    """Kafka's appendEndTxnMarker: stale producer or coordinator epochs are refused; a
    marker ends the producer's transaction (LSO, .txnindex for an abort); a marker for a
    producer with no data here completes nothing; data without the transactional bit in
    the middle of a transaction is INVALID_TXN_STATE."""
    from klog.storage.producer_state import (
        InvalidProducerEpochError,
        InvalidTxnStateError,
        TransactionCoordinatorFencedError,
    )

    log = make_log(tmp_path)
    txn = build_batch(0, count=2, producer_id=5, producer_epoch=3, base_sequence=0,
                      attributes=0x10)
    log.append_as_leader(txn, 0)
    with pytest.raises(InvalidTxnStateError):
        log.append_as_leader(build_batch(0, count=1, producer_id=5, producer_epoch=3,
                                         base_sequence=2), 0)
    assert log.producer_state.first_unstable_offset == 0
    with pytest.raises(InvalidProducerEpochError):
        log.append_as_leader(build_control_batch(0, commit=False, producer_id=5,
                                                 producer_epoch=2), 0, origin=COORD)
    abort = build_control_batch(0, commit=False, producer_id=5, producer_epoch=3,
                                coordinator_epoch=4)
    log.append_as_leader(abort, 0, origin=COORD)
    # Completed, but unstable until the high watermark passes the marker.
    assert log.producer_state.first_unstable_offset == 0
    log.update_high_watermark(3)
    assert log.producer_state.first_unstable_offset is None
    info = log.read(0, 10_000, None, True, include_aborted_txns=True)
    assert [(a.producer_id, a.first_offset) for a in info.aborted_transactions] == [(5, 0)]
    with pytest.raises(TransactionCoordinatorFencedError):
        log.append_as_leader(build_control_batch(0, commit=True, producer_id=5,
                                                 producer_epoch=3, coordinator_epoch=3), 0,
                             origin=COORD)
    # An empty transaction's marker: no CompletedTxn, so nothing unstable is left behind.
    log.append_as_leader(build_control_batch(0, commit=True, producer_id=9, producer_epoch=0),
                         0, origin=COORD)
    assert log.producer_state.first_unstable_offset is None


def _crash(log: PartitionLog) -> None:
    """What kill -9 leaves: the files as written, no snapshot or clean-shutdown step."""
    for segment in log.segments:
        segment.close_handlers()


@pytest.mark.parametrize("high_watermark", [None, 3, 5])
def test_ended_transactions_replayed_after_a_crash_are_stable_below_the_high_watermark(
        tmp_path: Path, high_watermark: int | None) -> None:
    """A crash after a commit and an abort: the reload replays both markers, and a
    transaction that ended below the high watermark does not hold the last stable
    offset back (it did, until the high watermark next moved)."""
    log = make_log(tmp_path)
    log.append_as_leader(build_batch(0, count=2, producer_id=5, producer_epoch=0,
                                     base_sequence=0, attributes=0x10), 0)
    log.append_as_leader(build_control_batch(0, commit=True, producer_id=5,
                                             producer_epoch=0), 0, origin=COORD)
    log.append_as_leader(build_batch(0, count=1, producer_id=5, producer_epoch=0,
                                     base_sequence=2, attributes=0x10), 0)
    log.append_as_leader(build_control_batch(0, commit=False, producer_id=5,
                                             producer_epoch=0), 0, origin=COORD)
    log.update_high_watermark(log.log_end_offset)
    assert log.producer_state.first_unstable_offset is None
    _crash(log)
    again = PartitionLog(tmp_path / "topic-0", LogConfig(), clock=Clock(),
                         high_watermark=high_watermark, had_clean_shutdown=False)
    assert again.log_end_offset == 5
    state = again.producer_state
    if high_watermark == 3:
        # The abort (offsets 3-4) is above the high watermark: unstable until it moves.
        assert state.first_unstable_offset == 3
        again.update_high_watermark(5)
    assert state.first_unstable_offset is None
    info = again.read(0, 10_000, None, True, include_aborted_txns=True)
    assert [(a.producer_id, a.first_offset) for a in info.aborted_transactions] == [(5, 3)]
    again.close()


def test_an_open_transaction_replayed_after_a_crash_stays_unstable(tmp_path: Path) -> None:
    log = make_log(tmp_path)
    append_n(log, 1, records=2)
    log.append_as_leader(build_batch(0, count=2, producer_id=7, producer_epoch=0,
                                     base_sequence=0, attributes=0x10), 0)
    log.update_high_watermark(log.log_end_offset)
    _crash(log)
    again = PartitionLog(tmp_path / "topic-0", LogConfig(), clock=Clock(),
                         had_clean_shutdown=False)
    assert again.producer_state.first_unstable_offset == 2
    again.append_as_leader(build_control_batch(0, commit=False, producer_id=7,
                                               producer_epoch=0), 0, origin=COORD)
    again.update_high_watermark(again.log_end_offset)
    assert again.producer_state.first_unstable_offset is None
    again.close()


def test_truncation_releases_ended_transactions_below_the_high_watermark(
        tmp_path: Path) -> None:
    log = make_log(tmp_path)
    log.append_as_leader(build_batch(0, count=2, producer_id=5, producer_epoch=0,
                                     base_sequence=0, attributes=0x10), 0)
    log.append_as_leader(build_control_batch(0, commit=True, producer_id=5,
                                             producer_epoch=0), 0, origin=COORD)
    append_n(log, 2, records=1)
    log.update_high_watermark(log.log_end_offset)
    log.truncate_to(4)
    assert log.producer_state.first_unstable_offset is None
    log.close()


# -- KIP-890: transaction verification ----------------------------------------------------


def _txn(offset: int = 0, seq: int = 0, pid: int = 5, epoch: int = 0) -> bytes:
    return build_batch(offset, count=1, producer_id=pid, producer_epoch=epoch,
                       base_sequence=seq, attributes=0x10)


def test_the_first_transactional_append_presents_its_verification_guard(tmp_path: Path) -> None:
    log = make_log(tmp_path)
    guard = log.maybe_start_transaction_verification(5, 0, 0)
    assert guard is not VerificationGuard.SENTINEL
    # Asked again while it waits (a retry): the same verification.
    assert log.maybe_start_transaction_verification(5, 0, 0) is guard
    with pytest.raises(InvalidTxnStateError):
        log.append_as_leader(_txn(), 0, verification_guard=VerificationGuard.SENTINEL)
    assert log.log_end_offset == 0
    log.append_as_leader(_txn(), 0, verification_guard=guard)
    # Ongoing now: the next batches need no verification, and the guard is spent.
    assert log.maybe_start_transaction_verification(5, 1, 0) is VerificationGuard.SENTINEL
    log.append_as_leader(_txn(seq=1), 0, verification_guard=VerificationGuard.SENTINEL)
    assert log.log_end_offset == 2


def test_a_marker_between_verification_and_append_refuses_the_late_write(
        tmp_path: Path) -> None:
    """The coordinator confirmed the partition, then aborted the transaction: its marker
    reached the log before the verified write did. The write is refused instead of
    opening a transaction nobody ends (the last stable offset stays free)."""
    log = make_log(tmp_path)
    log.append_as_leader(_txn(), 0, verification_guard=log.maybe_start_transaction_verification(
        5, 0, 0))
    log.append_as_leader(build_control_batch(0, commit=False, producer_id=5, producer_epoch=0),
                         0, origin=COORD)
    guard = log.maybe_start_transaction_verification(5, 1, 0)
    log.append_as_leader(build_control_batch(0, commit=False, producer_id=5, producer_epoch=0),
                         0, origin=COORD)
    with pytest.raises(InvalidTxnStateError):
        log.append_as_leader(_txn(seq=1), 0, verification_guard=guard)
    assert log.log_end_offset == 3
    assert log.producer_state.first_unstable_offset == 0  # completed, not yet replicated
    log.update_high_watermark(3)
    assert log.producer_state.first_unstable_offset is None


def test_a_coordinators_transactional_data_is_verified_too(tmp_path: Path) -> None:
    """Transactional offset commits (origin coordinator) carry the guard as produces do;
    markers never need one; None (verification off, broker-internal appends) checks
    nothing."""
    log = make_log(tmp_path)
    with pytest.raises(InvalidTxnStateError):
        log.append_as_leader(_txn(), 0, origin=COORD,
                             verification_guard=VerificationGuard.SENTINEL)
    guard = log.maybe_start_transaction_verification(5, -1, 0)
    log.append_as_leader(_txn(), 0, origin=COORD, verification_guard=guard)
    log.append_as_leader(build_control_batch(0, commit=True, producer_id=5, producer_epoch=0),
                         0, origin=COORD, verification_guard=VerificationGuard.SENTINEL)
    log.append_as_leader(_txn(pid=9), 0)
    assert log.log_end_offset == 3
