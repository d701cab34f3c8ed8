"""LogLoader: recovery after an unclean shutdown cuts a damaged segment and hands back the
segments after the cut (the log schedules their deletion); a clean load settles the
offsets without recovering; an interrupted cleaning's files are dropped."""

from __future__ import annotations

from pathlib import Path

from klog.storage.config import LogConfig
from klog.storage.files import CLEANED_FILE_SUFFIX, DELETED_FILE_SUFFIX, LOG_FILE_SUFFIX
from klog.storage.leader_epoch import LEADER_EPOCH_CHECKPOINT_FILENAME, LeaderEpochFileCache
from klog.storage.log import PartitionLog
from klog.storage.log_loader import LoadedLogOffsets, LogLoader
from klog.storage.producer_state import ProducerStateManager
from klog.storage.segment import LogSegment

from .batches import build_batch

T0 = 1_600_000_000_000


def _three_segments(directory: Path) -> list[Path]:
    log = PartitionLog(directory, LogConfig(), clock=lambda: T0)
    for i in range(3):
        log.append_as_leader(build_batch(0, count=5, base_timestamp=T0), 0)
        log.append_as_leader(build_batch(0, count=5, base_timestamp=T0), 0)
        if i < 2:
            log.roll()
    log.flush()
    log.close()
    return sorted(directory.glob(f"*{LOG_FILE_SUFFIX}"))


def _load(directory: Path, clean: bool) -> tuple[LoadedLogOffsets, list[int]]:
    base_offsets: list[int] = []
    segments: dict[int, LogSegment] = {}
    config = LogConfig()
    loader = LogLoader(directory, config, lambda: T0, base_offsets, segments,
                       ProducerStateManager(directory, 86_400_000),
                       LeaderEpochFileCache(directory / LEADER_EPOCH_CHECKPOINT_FILENAME),
                       lambda base: LogSegment.open(directory, base, config, now_ms=T0))
    loaded = loader.load(clean, 0, 0)
    for segment in list(segments.values()) + loaded.removed:
        segment.close()
    return loaded, base_offsets


def test_a_clean_load_settles_the_offsets_without_recovering(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    _three_segments(directory)
    loaded, bases = _load(directory, clean=True)
    assert bases == [0, 10, 20]
    assert (loaded.log_start_offset, loaded.recovery_point, loaded.log_end_offset) == (0, 30, 30)
    assert loaded.bytes_truncated == 0 and loaded.removed == []


def test_recovery_cuts_a_damaged_segment_and_hands_back_what_follows(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    files = _three_segments(directory)
    size = files[1].stat().st_size
    with open(files[1], "r+b") as f:  # the second batch of the middle segment damaged
        f.seek(size - 5)
        f.write(b"\xff\xff\xff\xff\xff")
    loaded, bases = _load(directory, clean=False)
    assert bases == [0, 10]
    assert loaded.log_end_offset == loaded.recovery_point == 15
    assert loaded.bytes_truncated == size // 2
    assert [s.base_offset for s in loaded.removed] == [20]


def test_an_interrupted_cleanings_files_are_dropped(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    files = _three_segments(directory)
    cleaned = files[0].with_name(files[0].name + CLEANED_FILE_SUFFIX)
    cleaned.write_bytes(files[0].read_bytes()[:10])
    deleted = files[1].with_name(files[1].name + DELETED_FILE_SUFFIX)
    deleted.write_bytes(b"old")
    loaded, bases = _load(directory, clean=True)
    assert not cleaned.exists() and not deleted.exists()
    assert bases == [0, 10, 20] and loaded.log_end_offset == 30
