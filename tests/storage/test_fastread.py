"""klog/storage/_fastread.c: PartitionLog.read and FetchDataInfo.readinto in C, checked
against the batches actually on disk and against the Python methods they stand in front of
(klog.storage.log.python_read, klog.storage.segment.python_readinto); and
LogSegment._chained_from, the index property the C read trusts instead of reading headers.
"""

from __future__ import annotations

import os
import random
import shutil
from pathlib import Path

import pytest

from klog.protocol.records.batch import iter_batch_headers
from klog.storage.config import LogConfig
from klog.storage.log import PartitionLog, python_read
from klog.storage.segment import LogSegment, fastread, python_readinto
from klog.storage.values import FetchDataInfo

from .batches import build_batch

T0 = 1_600_000_000_000

needs_c = pytest.mark.skipif(
    fastread is None, reason="KLOG_PURE_PYTHON=1: the C read path is turned off on purpose"
)


def test_the_extension_is_built_and_in_use() -> None:
    # `make setup` builds it (gcc and the Python headers come with scripts/setup-system.sh);
    # a build without it would pass every other test on the slower Python path.
    if os.environ.get("KLOG_PURE_PYTHON"):
        assert fastread is None
        return
    assert fastread is not None, "klog.storage._fastread was not built"
    assert PartitionLog.read is not python_read
    assert FetchDataInfo.readinto is not python_readinto


# -- ground truth: the batches on disk ------------------------------------------------------


def disk_batches(segment: LogSegment) -> list[tuple[int, int, int]]:
    """(position, size, last offset) of every batch of a segment's .log."""
    data = segment.log_path.read_bytes()[: segment.size]
    return [(h.position, h.end - h.position, h.last_offset) for h in iter_batch_headers(data)]


def expected_region(log: PartitionLog, offset: int, max_bytes: int) -> tuple[int, int, int] | None:
    """(position, size, last offset) PartitionLog.read must answer for a reader of the
    active segment: whole batches from the one holding ``offset``, as many as fit in
    ``max_bytes``, at least one."""
    active = log._segments[log._base_offsets[-1]]
    batches = disk_batches(active)
    first = next((i for i, b in enumerate(batches) if b[2] >= offset), None)
    if first is None:
        return None
    position, size, last = batches[first]
    budget = max(max_bytes, size)
    for at, more, batch_last in batches[first + 1 :]:
        if size + more > budget:
            break
        size += more
        last = batch_last
        assert at == position + size - more
    return position, size, last


def assert_chain_holds(segment: LogSegment) -> None:
    """What LogSegment._chained_from promises, checked against the .log and .index."""
    chained_from = segment._chained_from
    index = segment.offset_index
    entries = index.entries
    if chained_from >= entries:
        return
    batches = {position: (size, last) for position, size, last in disk_batches(segment)}
    for slot in range(chained_from, entries):
        entry = index.entry(slot)
        assert entry.position in batches, (slot, entry)
        size, last = batches[entry.position]
        assert entry.offset == last, (slot, entry, last)
        following = index.entry(slot + 1).position if slot + 1 < entries else segment.size
        assert entry.position + size == following, (slot, entry, size, following)


# -- scenarios ------------------------------------------------------------------------------


def _batch(rng: random.Random, ts: int, big: bool = True) -> bytes:
    # Big: over 4 KiB (index.interval.bytes), whatever the draw.
    return build_batch(
        0,
        count=rng.randint(6, 12) if big else rng.randint(1, 12),
        value_size=rng.randint(700, 1800) if big else rng.randint(5, 120),
        base_timestamp=ts,
    )


def grow(
    log: PartitionLog, rng: random.Random, steps: int, odd: float, small: bool = True
) -> PartitionLog:
    """Appends of one batch bigger than index.interval.bytes (each gets its own index
    entry), and with probability ``odd`` per step something else: a small batch (if
    ``small``), several batches in one append, a follower's append, a truncation, a clean
    or unclean restart."""
    for step in range(steps):
        ts = T0 + step
        if rng.random() >= odd:
            log.append_as_leader(_batch(rng, ts), leader_epoch=1)
            continue
        roll = rng.random()
        if roll < 0.3 and not small:
            continue
        if roll < 0.3:
            log.append_as_leader(_batch(rng, ts, big=False), leader_epoch=1)
        elif roll < 0.5:  # several batches in one append (the general path)
            records = b"".join(
                _batch(rng, ts, rng.random() < 0.5) for _ in range(rng.randint(2, 4))
            )
            log.append_as_leader(records, leader_epoch=1)
        elif roll < 0.7:  # a follower's fetch answer: batches with their offsets
            offset = log.log_end_offset
            parts = []
            for _ in range(rng.randint(1, 3)):
                count = rng.randint(1, 8)
                parts.append(build_batch(offset, count=count, value_size=700, base_timestamp=ts))
                offset += count
            log.append_as_follower(b"".join(parts))
        elif roll < 0.85 and log.log_end_offset > 10:
            log.truncate_to(rng.randint(log.log_end_offset // 2, log.log_end_offset - 1))
        else:
            directory, config = log.dir, log.config
            clean = rng.random() < 0.5
            log.close()
            # Not clean: recovered from the start, as after kill -9.
            log = PartitionLog(directory, config, recovery_point=0, had_clean_shutdown=clean)
    return log


def read_all(log: PartitionLog, max_bytes: int) -> int:
    """Read the active segment sequentially; check every answer; return reads done."""
    active_base = log._base_offsets[-1]
    offset = active_base
    reads = 0
    buf = bytearray(max(max_bytes, 1 << 16) + (1 << 20))
    while offset < log.log_end_offset:
        info = log.read(offset, max_bytes)
        want = expected_region(log, offset, max_bytes)
        assert want is not None
        got = (info.position, info.size, info.last_offset)
        assert got == want, (offset, max_bytes, got, want)
        assert info.fetch_offset_metadata == (offset, active_base, info.position)
        assert not info.first_entry_incomplete and info.aborted_transactions is None
        # The Python method gives the same answer (sharing what the segment remembered).
        ref = python_read(log, offset, max_bytes)
        assert (ref.position, ref.size, ref.last_offset, ref.fetch_offset_metadata) == (
            info.position,
            info.size,
            info.last_offset,
            info.fetch_offset_metadata,
        )
        n = info.readinto(buf)
        assert n == info.size and bytes(buf[:n]) == info.read_bytes()
        offset = info.last_offset + 1
        reads += 1
    return reads


@pytest.mark.parametrize(
    ("seed", "odd", "small"),
    [
        (0, 0.02, True),
        (1, 0.05, True),
        (2, 0.1, True),
        (3, 0.2, True),
        (4, 0.4, True),
        (5, 0.03, False),
        (6, 0.1, False),
        (7, 0.3, False),
    ],
)
def test_sequential_reads_match_the_batches_on_disk(
    tmp_path: Path, seed: int, odd: float, small: bool
) -> None:
    rng = random.Random(seed)
    log = PartitionLog(tmp_path / "t-0", LogConfig(segment_bytes=8 << 20))
    before = fastread.read_stats() if fastread is not None else None
    sizes = [1, 700, 4096, 10_000, 65_536, 1 << 20]
    for _round in range(8):
        # Reads between growth: what earlier reads remembered meets appends, truncations
        # and restarts.
        log = grow(log, rng, 50, odd, small)
        assert_chain_holds(log._segments[log._base_offsets[-1]])
        for max_bytes in rng.sample(sizes, 3):
            read_all(log, max_bytes)
    if before is not None:
        after = fastread.read_stats()
        # The C path answered reads itself (the rest went to Python, checked the same).
        assert sum(after[k] - before[k] for k in ("chained", "header", "first_batch")) > 0
    log.close()


def log_of_big_batches(directory: Path, count: int) -> PartitionLog:
    """A log of ``count`` appends of one batch bigger than index.interval.bytes each."""
    log = PartitionLog(directory, LogConfig())
    for i in range(count):
        log.append_as_leader(build_batch(0, count=8, value_size=600, base_timestamp=T0 + i), 1)
    return log


@needs_c
def test_reads_over_a_chained_index_read_no_headers(tmp_path: Path) -> None:
    # Batches bigger than index.interval.bytes, one per append: each has its own entry.
    log = log_of_big_batches(tmp_path / "t-0", 300)
    active = log._segments[log._base_offsets[-1]]
    assert active._chained_from == 0
    assert_chain_holds(active)
    before = fastread.read_stats()
    reads = read_all(log, 40_000)
    after = fastread.read_stats()
    # Only the first read (nothing remembered yet) and the last (the end of the log) are
    # not the C path's; the others use the index alone.
    assert after["chained"] - before["chained"] >= reads - 3
    assert after["header"] == before["header"]
    log.close()


@needs_c
def test_an_unchained_index_is_confirmed_by_a_header_read(tmp_path: Path) -> None:
    log = log_of_big_batches(tmp_path / "t-0", 300)
    log.close()
    # Reopened after a clean shutdown: the index is the file's, not known to be chained.
    log = PartitionLog(tmp_path / "t-0", LogConfig(), had_clean_shutdown=True)
    active = log._segments[log._base_offsets[-1]]
    assert active._chained_from > active.offset_index.entries
    before = fastread.read_stats()
    reads = read_all(log, 40_000)
    after = fastread.read_stats()
    assert after["chained"] == before["chained"]
    assert after["header"] - before["header"] >= reads - 3
    log.close()
    # After an unclean one, recovery rebuilds the index and knows it is chained.
    shutil.copytree(tmp_path / "t-0", tmp_path / "u-0")
    (tmp_path / "u-0" / ".kafka_cleanshutdown").unlink(missing_ok=True)
    log = PartitionLog(tmp_path / "u-0", LogConfig(), recovery_point=0, had_clean_shutdown=False)
    active = log._segments[log._base_offsets[-1]]
    assert active._chained_from == 0
    assert_chain_holds(active)
    log.close()


def test_chained_from_follows_appends_truncation_and_recovery(tmp_path: Path) -> None:
    log = PartitionLog(tmp_path / "t-0", LogConfig())
    active = log._segments[log._base_offsets[-1]]
    big = dict(count=8, value_size=600)
    for i in range(20):
        log.append_as_leader(build_batch(0, **big, base_timestamp=T0 + i), 1)
    assert active._chained_from == 0
    assert_chain_holds(active)
    # A small batch after a big one still gets an entry (the bytes since the last entry
    # decide); the batch after it does not: the chain can only go on from the next entry.
    log.append_as_leader(build_batch(0, count=1, value_size=10), 1)
    assert active._chained_from == 0
    log.append_as_leader(build_batch(0, **big), 1)
    entries = active.offset_index.entries
    assert active._chained_from == entries
    assert_chain_holds(active)
    for i in range(5):
        log.append_as_leader(build_batch(0, **big, base_timestamp=T0 + i), 1)
    assert active._chained_from == entries and active.offset_index.entries == entries + 5
    assert_chain_holds(active)
    # Several batches in one append share one entry: not chained.
    log.append_as_leader(b"".join(build_batch(0, **big) for _ in range(3)), 1)
    assert active._chained_from == active.offset_index.entries
    assert_chain_holds(active)
    # Truncation keeps what is left of a chain.
    for i in range(5):
        log.append_as_leader(build_batch(0, **big, base_timestamp=T0 + i), 1)
    chained = active._chained_from
    log.truncate_to(log.log_end_offset - 20)
    assert active._chained_from == min(chained, active.offset_index.entries)
    assert_chain_holds(active)
    log.close()
    log = PartitionLog(tmp_path / "t-0", LogConfig(), recovery_point=0, had_clean_shutdown=False)
    assert_chain_holds(log._segments[log._base_offsets[-1]])
    log.close()


@needs_c
def test_readinto_falls_back_to_python_for_what_it_does_not_do(tmp_path: Path) -> None:
    log = PartitionLog(tmp_path / "t-0", LogConfig())
    for i in range(10):
        log.append_as_leader(build_batch(0, count=4, value_size=300, base_timestamp=T0 + i), 1)
    info = log.read(0, 1 << 20)
    data = info.read_bytes()
    with pytest.raises(ValueError):
        info.readinto(bytearray(info.size - 1))  # too small: Python's error
    with pytest.raises(BufferError):
        info.readinto(bytes(info.size))  # read-only: Python's error
    with pytest.raises(TypeError):
        info.readinto()  # type: ignore[call-arg]
    view = memoryview(bytearray(info.size + 10))[5:]
    assert info.readinto(view) == info.size and bytes(view[: info.size]) == data
    log.close()


@needs_c
def test_read_takes_keywords_and_declines_what_it_does_not_do(tmp_path: Path) -> None:
    log = log_of_big_batches(tmp_path / "t-0", 50)
    info = log.read(0, 20_000)
    hw = log.log_end_offset
    same = log.read(info.last_offset + 1, max_bytes=20_000, max_offset=hw, min_one_message=True)
    ref = python_read(log, info.last_offset + 1, 20_000, hw, True)
    assert (same.position, same.size, same.last_offset) == (ref.position, ref.size, ref.last_offset)
    # A limit below the log end, aborted transactions, errors: the Python method's.
    held = log.read(info.last_offset + 1, 1 << 20, max_offset=hw - 5)
    assert held.last_offset < hw - 5
    with_txns = log.read(0, 20_000, include_aborted_txns=True)
    assert with_txns.aborted_transactions == []
    with pytest.raises(TypeError):
        log.read(0, 100, bogus=1)  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        log.read(0, 100, max_offset=None, **{"max_bytes": 5})  # type: ignore[misc]
    not_fitting = log.read(info.last_offset + 1, 10, min_one_message=False)
    assert not_fitting.size == 0 and not_fitting.first_entry_incomplete
    log.close()
