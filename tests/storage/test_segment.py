"""Tests for klog.storage.segment: LogSegment (and the values its reads return)."""

from __future__ import annotations

import os
import random
import struct
from pathlib import Path

import pytest

from klog.protocol.errors import CorruptRecordError
from klog.protocol.records.batch import read_batch_header
from klog.storage import files, values
from klog.storage import segment as seg

from .batches import build_batch, sequential_batches

# -- LogSegment ---------------------------------------------------------------------------


def make_segment(tmp_path: Path, base: int = 0, **kwargs: object) -> seg.LogSegment:
    return seg.LogSegment(tmp_path, base, **kwargs)


def fill(segment: seg.LogSegment, batches: list[bytes]) -> None:
    from klog.protocol.records.batch import read_batch_header

    for b in batches:
        h = read_batch_header(b, 0)
        segment.append(h.last_offset, h.max_timestamp, h.last_offset, b)


def test_segment_append_indexes_like_kafka(tmp_path: Path) -> None:
    segment = make_segment(tmp_path, index_interval_bytes=500)
    batches = sequential_batches(20, records_per_batch=2, value_size=100)
    fill(segment, batches)
    # Kafka's rule on append: an entry when more than 500 bytes were appended since the
    # last one, for the batch being appended (its last offset -> its position).
    expected, since, position = [], 0, 0
    for i, b in enumerate(batches):
        if since > 500:
            expected.append((2 * i + 1, position))
            since = 0
        since += len(b)
        position += len(b)
    assert list((e.offset, e.position) for e in segment.offset_index.iter_entries()) == expected
    # Recovery rebuilds the same index from the file.
    segment.close()
    reopened = make_segment(tmp_path, index_interval_bytes=500)
    assert reopened.recover() == 0
    got = [(e.offset, e.position) for e in reopened.offset_index.iter_entries()]
    assert got == expected
    assert reopened.read_next_offset() == 40
    reopened.close()


def test_segment_read_translate_and_timestamps(tmp_path: Path) -> None:
    segment = make_segment(tmp_path, base=100, index_interval_bytes=200)
    batches = sequential_batches(10, records_per_batch=3, value_size=50, start_offset=100)
    fill(segment, batches)
    size = len(batches[0])
    found = segment.translate_offset(104)
    assert found == values.LogOffsetPosition(105, size, size)
    assert segment.translate_offset(130) is None
    info = segment.read(104, size * 3 - 1)
    assert info is not None and info.size == size * 2
    assert info.read_bytes() == batches[1] + batches[2]
    assert info.fetch_offset_metadata == values.LogOffsetMetadata(104, 100, size)
    assert segment.read(104, 1).size == size  # at least one batch
    assert segment.read(104, size * 5, max_position=size * 3).size == size * 2
    assert segment.read(200, 100) is None
    hit = segment.find_offset_by_timestamp(1_600_000_000_000 + 3000)
    assert hit is not None and hit.offset == 109
    assert segment.find_offset_by_timestamp(1_600_000_000_000 + 10**6) is None

    # With a record locator the exact record is found.
    def locator(data: bytes):
        from klog.protocol.records.batch import read_batch_header
        from klog.protocol.records.v2 import iter_records

        h = read_batch_header(data, 0)
        for r in iter_records(data, h):
            yield r.offset, r.timestamp

    exact = segment.find_offset_by_timestamp(1_600_000_000_000 + 3001, record_locator=locator)
    assert exact is not None and (exact.offset, exact.timestamp) == (110, 1_600_000_000_000 + 3001)
    segment.close()


def test_segment_truncate_to(tmp_path: Path) -> None:
    segment = make_segment(tmp_path, index_interval_bytes=100)
    batches = sequential_batches(10)
    fill(segment, batches)
    removed = segment.truncate_to(13)  # inside the 5th batch (12..14): it goes whole
    assert removed == sum(map(len, batches[4:]))
    assert segment.size == sum(map(len, batches[:4]))
    assert segment.read_next_offset() == 12
    assert segment.offset_index.last_offset < 12
    assert segment.truncate_to(100) == 0
    segment.close()


@pytest.mark.parametrize(
    "damage",
    ["torn", "flipped", "zeros", "huge_length", "garbage"],
)
def test_segment_recover_truncates_only_at_the_first_invalid_byte(
    tmp_path: Path, damage: str
) -> None:
    batches = sequential_batches(8, value_size=100)
    good = b"".join(batches[:5])
    tail = b"".join(batches[5:])
    if damage == "torn":
        bad = tail[: len(batches[5]) - 7]
    elif damage == "flipped":
        bad = bytes([tail[0]]) + tail[1:70] + bytes([tail[70] ^ 0x40]) + tail[71:]
    elif damage == "zeros":
        bad = bytes(3000)
    elif damage == "huge_length":
        bad = tail[:8] + struct.pack(">i", 2**31 - 20) + tail[12:]
    else:
        bad = os.urandom(500)
    path = files.log_file_path(tmp_path, 0)
    path.write_bytes(good + bad)
    segment = make_segment(tmp_path)
    assert segment.recover() == len(bad)
    assert path.read_bytes() == good
    assert segment.read_next_offset() == 15
    segment.close()


def test_segment_recover_empty_file(tmp_path: Path) -> None:
    files.log_file_path(tmp_path, 7).write_bytes(b"")
    segment = make_segment(tmp_path, base=7)
    assert segment.recover() == 0
    assert segment.read_next_offset() == 7
    assert files.log_file_path(tmp_path, 7).exists()
    segment.close()


def test_segment_recover_refuses_offset_overflow(tmp_path: Path) -> None:
    data = build_batch(0, count=1) + build_batch(2**31 + 1, count=1)
    files.log_file_path(tmp_path, 0).write_bytes(data)
    segment = make_segment(tmp_path)
    with pytest.raises(seg.LogSegmentOffsetOverflowError):
        segment.recover()
    assert files.log_file_path(tmp_path, 0).read_bytes() == data  # nothing truncated
    segment.close()


def test_segment_roll_conditions(tmp_path: Path) -> None:
    segment = make_segment(tmp_path, base=10)
    fill(segment, sequential_batches(2, start_offset=10))

    def params(**kw: int) -> values.RollParams:
        base = dict(
            max_segment_ms=10**9,
            max_segment_bytes=10**9,
            max_timestamp_in_messages=1_600_000_000_000,
            max_offset_in_messages=20,
            messages_size=10,
            now_ms=0,
        )
        base.update(kw)
        return values.RollParams(**base)

    assert not segment.should_roll(params())
    assert segment.should_roll(params(max_segment_bytes=segment.size + 5))
    assert segment.should_roll(
        params(max_segment_ms=10, max_timestamp_in_messages=1_600_000_001_000)
    )
    assert segment.should_roll(params(max_offset_in_messages=10 + 2**31))
    segment.close()


def test_segment_close_trims_and_suffixes(tmp_path: Path) -> None:
    segment = make_segment(tmp_path, index_interval_bytes=10)
    fill(segment, sequential_batches(5))
    assert segment.offset_index_path.stat().st_size == 10 * 1024 * 1024
    segment.change_file_suffixes("", ".deleted")
    assert segment.has_suffix(".deleted")
    assert segment.log_path.name == "00000000000000000000.log.deleted"
    assert segment.read(0, 10**6).size == segment.size  # still readable after the rename
    segment.close()
    assert segment.offset_index_path.stat().st_size == 8 * 4
    segment.delete_if_exists()
    assert segment.deleted and not list(tmp_path.iterdir())


# -- reads against a model of the file ----------------------------------------------------


def _model(data: bytes) -> list[tuple[int, int, int]]:
    """(position, size, last offset) of every entry of a log, from its headers."""
    from klog.protocol.records.batch import iter_batch_headers

    return [(h.position, h.size, h.last_offset) for h in iter_batch_headers(data)]


def _expected_read(
    model: list[tuple[int, int, int]],
    file_size: int,
    start_offset: int,
    max_size: int,
    max_position: int | None,
    min_one: bool,
) -> tuple[int, int, int, bool] | None:
    """(position, size, last offset, first entry incomplete) that a read must answer."""
    first = next((i for i, (_p, _s, last) in enumerate(model) if last >= start_offset), None)
    if first is None:
        return None
    position, size, _last = model[first]
    limit = file_size if max_position is None else min(max_position, file_size)
    adjusted = max(max_size, size) if min_one else max_size
    if adjusted == 0 or position >= limit or adjusted < size:
        return position, 0, -1, adjusted < size
    budget_end = min(limit, position + adjusted)
    # The first batch is whole in the answer even when a max_position inside it (not a
    # batch boundary, which the log never passes) would cut it.
    end, last = position + size, model[first][2]
    for p, s, batch_last in model[first + 1 :]:
        if p + s > budget_end:
            break
        end, last = p + s, batch_last
    return position, end - position, last, False


def _check_read(
    segment: seg.LogSegment,
    model: list[tuple[int, int, int]],
    start_offset: int,
    max_size: int,
    max_position: int | None = None,
    min_one: bool = True,
) -> values.FetchDataInfo | None:
    info = segment.read(start_offset, max_size, max_position, min_one)
    want = _expected_read(model, segment.size, start_offset, max_size, max_position, min_one)
    if want is None:
        assert info is None, (start_offset, max_size, max_position)
        return None
    assert info is not None
    got = (info.position, info.size, info.last_offset, info.first_entry_incomplete)
    assert got == want, (start_offset, max_size, max_position, min_one)
    assert info.fetch_offset_metadata == values.LogOffsetMetadata(
        start_offset, segment.base_offset, want[0]
    )
    assert info.aborted_transactions is None and info.fd == segment.fd
    return info


def _random_batches(rng: random.Random, n: int, base: int, gaps: bool) -> list[bytes]:
    """Batches of very different sizes (tens of bytes to ~20 KB), with offset gaps (as
    compaction leaves) when ``gaps``."""
    out, offset = [], base
    for i in range(n):
        records = rng.choice((1, 1, 2, 5, 16))
        value_size = rng.choice((1, 20, 200, 1000, 1200))
        out.append(build_batch(offset, count=records, value_size=value_size,
                               base_timestamp=1_600_000_000_000 + i))
        offset += records + (rng.choice((0, 0, 1, 7)) if gaps else 0)
    return out


@pytest.mark.parametrize("interval", [1, 300, 4096, 100_000])
@pytest.mark.parametrize("gaps", [False, True])
@pytest.mark.parametrize("recovered", [False, True])
def test_reads_match_a_model_of_the_file(
    tmp_path: Path, interval: int, gaps: bool, recovered: bool
) -> None:
    # Appends of one or several batches (the index maps an append's last offset to its
    # first byte), or an index rebuilt by recovery (one entry per indexed batch): either
    # way every read, sequential or not, must answer exactly what the file holds.
    rng = random.Random(interval * 4 + gaps * 2 + recovered)
    base = 1000
    batches = _random_batches(rng, 150, base, gaps)
    segment = make_segment(tmp_path, base=base, index_interval_bytes=interval)
    i = 0
    while i < len(batches):
        group = batches[i : i + rng.choice((1, 1, 1, 3, 8))]
        i += len(group)
        last = read_batch_header(group[-1], 0).last_offset
        segment.append(last, 1_600_000_000_000 + i, last, b"".join(group))
    if recovered:
        segment.close()
        segment = make_segment(tmp_path, base=base, index_interval_bytes=interval)
        assert segment.recover() == 0
    data = b"".join(batches)
    model = _model(data)
    last_offset = model[-1][2]
    for max_size in (0, 1, 100, 2000, 9000, 65536, 10**7):
        for min_one in (True, False):
            # Sequential reads, as a consumer or follower makes them: the remembered
            # boundaries must agree with the file.
            offset, regions = base, 0
            while offset <= last_offset:
                info = _check_read(segment, model, offset, max_size, min_one=min_one)
                if info is None or info.size == 0:
                    break
                offset, regions = info.last_offset + 1, regions + 1
            if max_size >= 10**7:
                assert regions == 1
    offsets = list(range(base - 3, last_offset + 5))
    for _ in range(400):
        max_position = rng.choice((None, None, rng.randrange(len(data) + 100)))
        _check_read(segment, model, rng.choice(offsets), rng.choice((50, 3000, 40_000)),
                    max_position, rng.random() < 0.8)
    # Translation agrees too, in any order, remembered or not.
    for offset in rng.sample(offsets, 200) + offsets[:50]:
        found = segment.translate_offset(offset)
        entry = next(((p, s, last) for p, s, last in model if last >= offset), None)
        if entry is None:
            assert found is None
        else:
            assert found == values.LogOffsetPosition(entry[2], entry[0], entry[1])
    segment.close()


def test_reads_of_legacy_and_mixed_entries(tmp_path: Path) -> None:
    from klog.protocol.records.legacy import build_legacy_message

    # A segment written before and after a message format upgrade: v0/v1 messages, then
    # v2 batches; a v0/v1 entry's offset is its last offset and base offsets are unknown.
    entries = [build_legacy_message(i, i % 2, None, b"v" * (20 + 30 * i)) for i in range(40)]
    entries += sequential_batches(30, records_per_batch=4, value_size=150, start_offset=40)
    data = b"".join(entries)
    model = _model(data)
    segment = make_segment(tmp_path, index_interval_bytes=700)
    for entry, (_p, _s, last) in zip(entries, model, strict=True):
        segment.append(last, -1, last, entry)
    for max_size in (1, 500, 3000, 20_000):
        offset = 0
        while True:
            info = _check_read(segment, model, offset, max_size)
            if info is None or info.size == 0:
                break
            offset = info.last_offset + 1
    for offset in range(0, 165, 3):
        for max_size in (10, 800, 5000):
            _check_read(segment, model, offset, max_size)
            _check_read(segment, model, offset, max_size, max_position=model[45][0])
    segment.close()


def test_remembered_boundaries_are_forgotten_on_truncation_and_recovery(
    tmp_path: Path,
) -> None:
    segment = make_segment(tmp_path, index_interval_bytes=256)
    first = sequential_batches(40, records_per_batch=4, value_size=40)
    fill(segment, first)
    model = _model(b"".join(first))
    offset = 0
    while (info := _check_read(segment, model, offset, 1000)) is not None and info.size:
        offset = info.last_offset + 1
    # Rewrite the tail with batches of other sizes at the same offsets.
    segment.truncate_to(60)
    kept = [b for b in first if read_batch_header(b, 0).last_offset < 60]
    second = [
        build_batch(60 + 7 * i, count=7, value_size=90, base_timestamp=1_700_000_000_000 + i)
        for i in range(20)
    ]
    fill(segment, second)
    model = _model(b"".join(kept + second))
    offset = 0
    while (info := _check_read(segment, model, offset, 1000)) is not None and info.size:
        offset = info.last_offset + 1
    for offset in range(0, 200, 5):
        _check_read(segment, model, offset, 1500)
    # Recovery cuts a torn tail: what was remembered past it must go too.
    os.pwrite(segment.fd, b"\x00" * 50, segment.size - 50)
    segment.recover()
    model = _model(b"".join(kept + second[:-1]))
    for offset in range(0, 200, 5):
        _check_read(segment, model, offset, 1500)
    segment.close()


def test_fast_region_construction_sets_every_field() -> None:
    import dataclasses

    metadata = values.LogOffsetMetadata(5, 0, 10)
    fast = values._region(metadata, Path("x.log"), 7, 10, 20, 9)
    slow = values.FetchDataInfo(metadata, Path("x.log"), 7, 10, 20, False, None, 9)
    for field in dataclasses.fields(values.FetchDataInfo):
        assert getattr(fast, field.name) == getattr(slow, field.name), field.name
    assert fast == slow


def test_readinto_checks_the_buffer_and_falls_back_to_the_path(tmp_path: Path) -> None:
    segment = make_segment(tmp_path, index_interval_bytes=100)
    batches = sequential_batches(5, records_per_batch=2, value_size=30)
    fill(segment, batches)
    data = b"".join(batches)
    info = segment.read(0, 10_000)
    assert info is not None and info.size == len(data)
    with pytest.raises(ValueError):
        info.readinto(bytearray(info.size - 1))
    buf = bytearray(info.size + 5)
    assert info.readinto(buf) == len(data) and buf[: len(data)] == data
    stale = dataclasses_replace_fd(info, 987654)  # a closed descriptor: the path is used
    buf = bytearray(info.size)
    assert stale.readinto(buf) == len(data) and buf == data
    assert values.FetchDataInfo(info.fetch_offset_metadata).readinto(bytearray(3)) == 0
    segment.close()


def dataclasses_replace_fd(info: values.FetchDataInfo, fd: int) -> values.FetchDataInfo:
    import dataclasses

    return dataclasses.replace(info, fd=fd)


def test_a_reader_at_the_end_continues_into_new_appends(tmp_path: Path) -> None:
    # The boundary at the end of the file is remembered without a header; the next read
    # from there must find the batches appended since.
    segment = make_segment(tmp_path, index_interval_bytes=500)
    batches = sequential_batches(30, records_per_batch=3, value_size=60)
    fill(segment, batches[:10])
    model = _model(b"".join(batches[:10]))
    info = _check_read(segment, model, 0, 10**6)
    assert info is not None and info.last_offset == 29
    assert segment.read(30, 10**6) is None
    fill(segment, batches[10:])
    model = _model(b"".join(batches))
    offset = 30
    while (info := _check_read(segment, model, offset, 700)) is not None and info.size:
        offset = info.last_offset + 1
    assert offset == 90
    segment.close()


@pytest.mark.parametrize("damage", ["length", "magic"])
def test_reading_over_damaged_headers_raises_instead_of_hanging(
    tmp_path: Path, damage: str
) -> None:
    # Segments are validated when loaded; bytes damaged afterwards are reported.
    segment = make_segment(tmp_path, index_interval_bytes=10**6)
    batches = sequential_batches(20, records_per_batch=2, value_size=30)
    fill(segment, batches)
    position = sum(map(len, batches[:5]))
    if damage == "length":
        os.pwrite(segment.fd, struct.pack(">i", 3), position + 8)
    else:
        os.pwrite(segment.fd, b"\x07", position + 16)
    with pytest.raises(CorruptRecordError):
        segment.read(0, 10**6)
    with pytest.raises(CorruptRecordError):
        segment.translate_offset(25)
    segment.close()


def test_remembered_boundaries_stay_bounded(tmp_path: Path) -> None:
    segment = make_segment(tmp_path, index_interval_bytes=200)
    batches = sequential_batches(300, records_per_batch=2, value_size=30)
    fill(segment, batches)
    model = _model(b"".join(batches))
    rng = random.Random(5)
    for _ in range(500):
        _check_read(segment, model, rng.randrange(600), rng.choice((100, 1000, 5000)))
        assert len(segment._boundaries) <= seg._BOUNDARY_CACHE_SIZE
    segment.close()
