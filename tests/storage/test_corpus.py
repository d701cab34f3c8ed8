"""The storage engine on a log dir written by a real Apache Kafka 2.x broker."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from klog.protocol.records.batch import iter_batch_headers
from klog.storage.checkpoints import read_offset_checkpoint
from klog.storage.log_manager import CLEAN_SHUTDOWN_FILE, LogManager
from klog.storage.producer_state import read_snapshot
from klog.storage.scan import scan_segment

pytestmark = pytest.mark.corpus

# From the corpus README: records per non-empty partition.
RECORD_COUNTS = {
    ("first_topic", 0): 11,
    ("first_topic", 1): 12,
    ("first_topic", 2): 18,
    ("new_topic", 0): 2,
    ("__consumer_offsets", 12): 470,
    ("__consumer_offsets", 17): 3,
    ("__consumer_offsets", 18): 499,
    ("__consumer_offsets", 32): 50,
    ("__consumer_offsets", 33): 3,
}


@pytest.fixture
def datadir(kafka_corpus: Path, tmp_path: Path) -> Path:
    target = tmp_path / "datadir"
    shutil.copytree(kafka_corpus, target)
    for path in [target, *target.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)  # the corpus is read-only
    return target


def test_corpus_has_no_index_files(kafka_corpus: Path) -> None:
    assert not list(kafka_corpus.glob("*/*.index"))
    assert not list(kafka_corpus.glob("*/*.timeindex"))


@pytest.mark.parametrize("clean", [True, False])
def test_log_manager_loads_kafka_datadir(datadir: Path, clean: bool) -> None:
    if not clean:
        (datadir / CLEAN_SHUTDOWN_FILE).unlink()
    expected = read_offset_checkpoint(datadir / "recovery-point-offset-checkpoint")
    original = {p: p.read_bytes() for p in datadir.glob("*/*.log")}
    manager = LogManager([datadir]).startup()
    try:
        logs = manager.all_logs()
        assert len(logs) == 54
        summary = manager.load_summaries[0]
        assert summary.had_clean_shutdown is clean
        assert summary.bytes_truncated == 0 and summary.skipped == ()
        for tp, log in logs.items():
            # The LEO is what the last batch of the log says, and what Kafka checkpointed.
            scan = scan_segment(log.active_segment.log_path, expected_min_offset=0)
            assert scan.is_clean
            last = -1 if scan.last_offset is None else scan.last_offset
            assert log.log_end_offset == last + 1 == expected[tp], tp
            assert scan.records == RECORD_COUNTS.get(tp, 0), tp
            assert log.log_start_offset == 0
            # The missing indexes were rebuilt next to the log and pass their checks.
            segment = log.active_segment
            assert segment.offset_index_path.exists() and segment.time_index_path.exists()
            segment.offset_index.sanity_check(log_size=segment.size)
            segment.time_index.sanity_check()
            if tp in RECORD_COUNTS:
                assert segment.time_index.last_entry.timestamp == scan.max_timestamp
        assert (datadir / CLEAN_SHUTDOWN_FILE).exists() is False  # removed after loading
    finally:
        manager.close()
    # Nothing of the data changed.
    assert {p: p.read_bytes() for p in datadir.glob("*/*.log")} == original
    assert (datadir / CLEAN_SHUTDOWN_FILE).exists()
    assert read_offset_checkpoint(datadir / "recovery-point-offset-checkpoint") == expected


def test_reads_are_byte_identical(datadir: Path) -> None:
    with LogManager([datadir]) as manager:
        for (topic, partition), count in RECORD_COUNTS.items():
            log = manager.get_log(topic, partition)
            assert log is not None
            data = (datadir / f"{topic}-{partition}" / "00000000000000000000.log").read_bytes()
            first = next(iter_batch_headers(data))
            info = log.read(0, 1)  # smaller than a batch: min_one_message gives one
            assert info.read_bytes() == data[: first.end]
            everything = log.read(0, 10 * 1024 * 1024)
            assert everything.read_bytes() == data
            # A read from the middle starts at the batch holding that offset.
            middle = count // 2
            info = log.read(middle, 10 * 1024 * 1024)
            headers = list(iter_batch_headers(info.read_bytes()))
            assert headers[0].base_offset <= middle <= headers[0].last_offset
            assert headers[-1].last_offset == log.log_end_offset - 1


def test_large_partition_index_lookups(datadir: Path) -> None:
    with LogManager([datadir]) as manager:
        log = manager.get_log("__consumer_offsets", 18)
        assert log is not None
        segment = log.active_segment
        assert segment.offset_index.entries > 5  # 57 KB of log, an entry every 4 KB
        data = segment.log_path.read_bytes()
        positions = {h.last_offset: h.position for h in iter_batch_headers(data)}
        for offset in range(0, log.log_end_offset, 7):
            found = segment.translate_offset(offset)
            assert found is not None
            assert positions[found.offset] == found.position
            assert found.offset >= offset


def test_corpus_snapshots_and_epochs(datadir: Path) -> None:
    for snapshot in datadir.glob("*/*.snapshot"):
        assert read_snapshot(snapshot) == []
    with LogManager([datadir]) as manager:
        log = manager.get_log("first_topic", 2)
        assert log is not None
        assert log.producer_state.map_end_offset == 18
        assert log.leader_epoch_cache.latest_epoch == 0
        assert log.fetch_offset_by_timestamp(-1).offset == 18
        assert log.fetch_offset_by_timestamp(-2).offset == 0
