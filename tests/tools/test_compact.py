"""Tests for klog/tools/compact.py: offline compaction of a stopped broker's log dirs."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from klog.protocol.records.batch import iter_batch_headers
from klog.protocol.records.decode import iter_records
from klog.protocol.records.v2 import build_batch
from klog.storage import checkpoints as cp
from klog.storage.config import LogConfig
from klog.storage.log_manager import LogManager
from klog.tools.compact import CompactError, compact, compaction_policy
from klog.tools.verify import DAMAGE, LogDirLockedError, verify

T0 = 1_600_000_000_000
COMPACT = LogConfig(cleanup_policy=("compact",), segment_bytes=600)
DELETE = LogConfig(segment_bytes=600)


def make_log_dir(path: Path, topics: dict[str, LogConfig], batches: int = 30) -> Path:
    """A stopped broker's log dir: each topic's partition 0 gets keyed batches, then a
    clean shutdown (marker and checkpoints written)."""
    manager = LogManager([path], topic_config=lambda t: topics.get(t, DELETE)).startup()
    for topic in topics:
        log = manager.get_or_create_log(topic, 0)
        for b in range(batches):
            items = [(T0 + b, b"k%d" % ((b + i) % 5), b"v%d" % b) for i in range(3)]
            log.append_as_leader(build_batch(items), leader_epoch=0)
        manager.update_high_watermark(topic, 0, log.log_end_offset)
    manager.close()
    return path


def records(partition: Path) -> list[tuple[int, bytes | None, bytes | None]]:
    out = []
    for seg in sorted(partition.glob("*.log")):
        data = seg.read_bytes()
        for header in iter_batch_headers(data):
            out.extend((r.offset, r.key, r.value) for r in iter_records(data, header))
    return out


def files(path: Path) -> dict[str, bytes]:
    return {str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*"))
            if p.is_file()}


def test_compacts_compacted_topics_only(tmp_path: Path) -> None:
    log_dir = make_log_dir(tmp_path / "logs", {"changelog": COMPACT, "events": DELETE})
    before = records(log_dir / "changelog-0")
    events = files(log_dir / "events-0")
    report = compact([log_dir], compaction_policy(configs={"changelog": COMPACT}), now_ms=T0)
    by_name = {p.partition: p for p in report.partitions}
    done = by_name["changelog-0"]
    assert by_name["events-0"].skipped == "not a compacted topic"
    assert files(log_dir / "events-0") == events
    after = records(log_dir / "changelog-0")
    assert {k: v for _o, k, v in after} == {k: v for _o, k, v in before}
    assert done.records_removed > 0 and done.bytes_after < done.bytes_before
    assert done.records_read - done.records_kept == done.records_removed
    # The broker goes on from where compaction stopped.
    checkpoint = cp.read_offset_checkpoint(log_dir / cp.CLEANER_OFFSET_CHECKPOINT)
    assert checkpoint == {("changelog", 0): done.next_dirty_offset}
    assert not [f for f in verify(log_dir).findings if f.severity == DAMAGE]
    # Nothing is dirty any more: a second run changes nothing.
    snapshot = files(log_dir)
    again = compact([log_dir], compaction_policy(configs={"changelog": COMPACT}), now_ms=T0)
    assert {p.partition: p.skipped for p in again.partitions}["changelog-0"] == (
        "nothing dirty to clean"
    )
    assert files(log_dir) == snapshot


def test_topics_named_by_hand_and_internal_topics(tmp_path: Path) -> None:
    log_dir = make_log_dir(tmp_path / "logs", {"a": DELETE, "__consumer_offsets": DELETE})
    report = compact([log_dir], compaction_policy(("a",)), now_ms=T0)
    assert all(p.passes == 1 for p in report.partitions), report


def test_dry_run_changes_nothing_and_says_what_would_go(tmp_path: Path) -> None:
    log_dir = make_log_dir(tmp_path / "logs", {"changelog": COMPACT})
    snapshot = files(log_dir)
    dry = compact([log_dir], compaction_policy(("changelog",)), dry_run=True, now_ms=T0)
    assert files(log_dir) == snapshot
    real = compact([log_dir], compaction_policy(("changelog",)), now_ms=T0)
    d, r = dry.partitions[0], real.partitions[0]
    assert (d.records_read, d.records_kept, d.bytes_after) == (
        r.records_read, r.records_kept, r.bytes_after
    )
    assert dry.to_dict()["dry_run"] is True


def test_roll_cleans_the_active_segment_too(tmp_path: Path) -> None:
    log_dir = make_log_dir(tmp_path / "logs", {"changelog": COMPACT}, batches=3)
    report = compact([log_dir], compaction_policy(("changelog",)), roll=True, now_ms=T0)
    p = report.partitions[0]
    assert p.rolled and p.records_kept == 5  # one record per key
    assert len(records(log_dir / "changelog-0")) == 5


def test_refuses_a_running_broker_and_an_unclean_shutdown(tmp_path: Path) -> None:
    log_dir = make_log_dir(tmp_path / "logs", {"changelog": COMPACT})
    policy = compaction_policy(("changelog",))
    with LogManager([log_dir]), pytest.raises(LogDirLockedError, match="running"):
        compact([log_dir], policy)
    (log_dir / cp.CLEAN_SHUTDOWN_FILE).unlink()
    with pytest.raises(CompactError, match="klog recover"):
        compact([log_dir], policy)
    with pytest.raises(CompactError):
        compact([tmp_path / "nothing-here"], policy)


@pytest.mark.corpus
def test_compacts_a_copy_of_kafka_written_data(kafka_corpus: Path, tmp_path: Path) -> None:
    log_dir = tmp_path / "kafka-logs"
    shutil.copytree(kafka_corpus, log_dir)
    for p in [log_dir, *log_dir.rglob("*")]:
        p.chmod(p.stat().st_mode | 0o200)
    before = records(log_dir / "__consumer_offsets-18")
    report = compact([log_dir], compaction_policy(), roll=True, now_ms=T0 + 10**12)
    done = {p.partition: p for p in report.partitions if p.passes}
    # The five non-empty __consumer_offsets partitions; first_topic / new_topic are not
    # compacted (Kafka's default cleanup.policy=delete).
    assert sorted(done) == [f"__consumer_offsets-{n}" for n in (12, 17, 18, 32, 33)]
    assert not report.failed
    after = records(log_dir / "__consumer_offsets-18")
    assert done["__consumer_offsets-18"].records_read == 499 and len(after) < len(before)
    latest_before = {k: v for _o, k, v in before}
    latest_after = {k: v for _o, k, v in after}
    assert {k: v for k, v in latest_before.items() if v is not None} == {
        k: v for k, v in latest_after.items() if v is not None
    }
    assert not [f for f in verify(log_dir).findings if f.severity == DAMAGE]
