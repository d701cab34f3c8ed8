"""Tests for klog/tools/verify/: verify and recover on built and real Kafka log dirs."""

from __future__ import annotations

import fcntl
import os
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from klog.protocol.records.batch import crc32c
from klog.storage import checkpoints as cp
from klog.storage.scan import rebuild_indexes
from klog.tools import verify as ins
from tests.storage.inspect_batches import (
    build_batch,
    record,
    segment_name,
    write_offset_index,
    write_segment,
)

# -- helpers --------------------------------------------------------------------------------


def snapshot(root: Path) -> dict[str, bytes]:
    """Every file under ``root`` with its bytes: compare trees byte for byte."""
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
    }


def make_partition(
    root: Path, name: str, segments: list[tuple[int, list[int]]], *, indexes: bool = True
) -> tuple[Path, dict[int, list[tuple[int, int, int]]]]:
    """A partition dir with the given (base offset, batch sizes) segments."""
    pdir = root / name
    layouts = {}
    for base, sizes in segments:
        log, layout = write_segment(pdir, base, sizes)
        layouts[base] = layout
        if indexes:
            rebuild_indexes(log, base, index_interval_bytes=1024)
    return pdir, layouts


def make_log_dir(root: Path, partitions: dict[str, list[tuple[int, list[int]]]]) -> Path:
    """A log dir: partitions, meta.properties, checkpoints saying recovery point = LEO."""
    root.mkdir(parents=True, exist_ok=True)
    leos = {}
    for name, segments in partitions.items():
        _pdir, layouts = make_partition(root, name, segments)
        topic, part = name.rsplit("-", 1)
        last_base = segments[-1][0]
        layout = layouts[last_base]
        leos[(topic, int(part))] = layout[-1][2] + 1 if layout else last_base
        cp.write_checkpoint_lines(root / name / cp.LEADER_EPOCH_CHECKPOINT, 0, ["0 0"])
    cp.write_offset_checkpoint(root / cp.RECOVERY_POINT_CHECKPOINT, leos)
    cp.write_offset_checkpoint(root / cp.REPLICATION_OFFSET_CHECKPOINT, leos)
    cp.write_offset_checkpoint(root / cp.LOG_START_OFFSET_CHECKPOINT, {})
    cp.write_offset_checkpoint(root / cp.CLEANER_OFFSET_CHECKPOINT, {})
    cp.write_meta_properties(root / cp.META_PROPERTIES, cp.MetaProperties(0, 0, "abc"))
    (root / cp.LOCK_FILE).touch()
    return root


def damage_findings(report: ins.VerifyReport) -> list[ins.Finding]:
    return [f for f in report.findings if f.severity == ins.DAMAGE]


def assert_recovered_losslessly(
    original: bytes, log: Path, report: ins.RecoveryReport
) -> Path:
    """The truncated log plus the saved tail are exactly the original bytes."""
    [truncate] = [a for a in report.actions if a.kind == "truncate"]
    saved = Path(truncate.saved_as or "")
    assert saved.parent == log.parent
    assert saved.name == f"{log.name}.truncated-at-{truncate.position}.bin"
    assert log.read_bytes() + saved.read_bytes() == original
    assert truncate.bytes == len(original) - truncate.position
    return saved


def recover_and_check_idempotent(path: Path, root: Path) -> ins.RecoveryReport:
    report = ins.recover(path)
    after_first = snapshot(root)
    second = ins.recover(path)
    assert second.actions == []
    assert snapshot(root) == after_first
    again = ins.verify(path)
    assert not again.damaged, again.findings
    return report


# -- the real Kafka corpus ------------------------------------------------------------------


@pytest.fixture
def corpus_copy(kafka_corpus: Path, tmp_path: Path) -> Path:
    dest = tmp_path / "kafka-logs"
    shutil.copytree(kafka_corpus, dest)
    for p in [dest, *dest.rglob("*")]:
        p.chmod(p.stat().st_mode | 0o200)  # the corpus is read-only
    return dest


def test_real_kafka_log_dir_verifies_intact(corpus_copy: Path) -> None:
    report = ins.verify(corpus_copy)
    assert report.kind == ins.KIND_LOG_DIR
    assert not report.damaged
    assert report.status == ins.STATUS_REBUILDABLE
    assert {f.severity for f in report.findings} == {ins.REBUILDABLE}
    assert len(report.findings) == 2 * 54  # .index and .timeindex of every segment
    assert report.meta == cp.MetaProperties(0, 0, "lRaQCIBoRh2xRKLuP9CAQg")
    by_name = {p.name: p for p in report.partitions}
    assert len(by_name) == 54
    expected = {
        "first_topic-0": 11, "first_topic-1": 12, "first_topic-2": 18, "new_topic-0": 2,
        "__consumer_offsets-12": 470, "__consumer_offsets-17": 3,
        "__consumer_offsets-18": 499, "__consumer_offsets-32": 50, "__consumer_offsets-33": 3,
    }
    for name, leo in expected.items():
        assert by_name[name].log_end_offset == leo
        assert by_name[name].records == leo  # uncompressed, offsets from 0
        assert by_name[name].log_start_offset == 0
    assert by_name["__consumer_offsets-0"].log_end_offset == 0


def test_real_kafka_single_partition_and_segment(kafka_corpus: Path) -> None:
    part = ins.verify(kafka_corpus / "first_topic-2")
    assert part.kind == ins.KIND_PARTITION
    assert [p.log_end_offset for p in part.partitions] == [18]
    seg = ins.verify(kafka_corpus / "first_topic-1" / "00000000000000000000.log")
    assert seg.kind == ins.KIND_SEGMENT
    assert seg.partitions[0].records == 12 and not seg.damaged


def test_recover_real_kafka_log_dir_rebuilds_indexes_once(corpus_copy: Path) -> None:
    logs_before = {k: v for k, v in snapshot(corpus_copy).items() if k.endswith(".log")}
    report = recover_and_check_idempotent(corpus_copy, corpus_copy)
    assert {a.kind for a in report.actions} == {"rebuild-index"}
    assert len(report.actions) == 54
    after = snapshot(corpus_copy)
    assert {k: v for k, v in after.items() if k.endswith(".log")} == logs_before
    assert (corpus_copy / "first_topic-0" / "00000000000000000000.index").exists()
    assert ins.verify(corpus_copy).status == ins.STATUS_OK


def test_dry_run_changes_nothing(corpus_copy: Path) -> None:
    before = snapshot(corpus_copy)
    report = ins.recover(corpus_copy, dry_run=True)
    assert report.dry_run and len(report.actions) == 54
    assert snapshot(corpus_copy) == before


# -- damage classes -------------------------------------------------------------------------


@pytest.fixture
def partition(tmp_path: Path) -> tuple[Path, Path, list[tuple[int, int, int]]]:
    """One partition dir (no log dir around it): 40 batches of 3 records, indexes built."""
    pdir, layouts = make_partition(tmp_path, "events-0", [(0, [3] * 40)])
    return pdir, pdir / segment_name(0), layouts[0]


def _single_damage(report: ins.VerifyReport) -> ins.Finding:
    found = damage_findings(report)
    assert len(found) == 1, found
    assert report.partitions[0].status == ins.STATUS_DAMAGED
    return found[0]


def test_intact_partition(partition: tuple[Path, Path, list]) -> None:
    pdir, _log, _layout = partition
    report = ins.verify(pdir)
    assert report.status == ins.STATUS_OK and report.findings == []
    [p] = report.partitions
    assert (p.batches, p.records, p.log_start_offset, p.log_end_offset) == (40, 120, 0, 120)
    assert ins.recover(pdir).actions == []


@pytest.mark.parametrize("damage", ["torn", "flip", "zeros", "huge", "garbage", "backwards"])
def test_damage_detected_and_recovered(
    damage: str, partition: tuple[Path, Path, list[tuple[int, int, int]]], tmp_path: Path
) -> None:
    pdir, log, layout = partition
    data = bytearray(log.read_bytes())
    k = 25  # the damaged batch
    position = layout[k][0]
    if damage == "torn":
        data = data[: layout[-1][0] + 30]
        position, k = layout[-1][0], len(layout) - 1
    elif damage == "flip":
        data[position + 70] ^= 0xFF  # inside the records: only the CRC notices
    elif damage == "zeros":
        position, k = len(data), len(layout)
        data += bytes(4096)
    elif damage == "huge":
        struct.pack_into(">i", data, position + 8, 0x7FFFFFF0)
    elif damage == "garbage":
        position, k = len(data), len(layout)
        data += b"this is not a record batch, just text appended to the log file"
    elif damage == "backwards":
        # Batch k claims offsets that the batch before it already used.
        batch = build_batch(layout[k - 2][1], [b"x" * 100] * 3)
        data[position:] = batch
    log.write_bytes(bytes(data))
    original = bytes(data)

    report = ins.verify(pdir)
    finding = _single_damage(report)
    assert finding.partition == "events-0"
    assert finding.file == str(log)
    assert finding.position == position
    if damage in ("flip", "huge"):
        assert finding.offset == layout[k][1]
    if damage == "backwards":
        assert finding.offset == layout[k - 2][1] and "offset" in finding.message

    recovered = recover_and_check_idempotent(pdir, tmp_path)
    assert_recovered_losslessly(original, log, recovered)
    assert log.stat().st_size == position
    assert any(a.kind == "rebuild-index" for a in recovered.actions)
    expected_leo = layout[k - 1][2] + 1
    assert ins.verify(pdir).partitions[0].log_end_offset == expected_leo


def undecodable(batch: bytes, kind: str) -> bytes:
    """``batch`` with its records made undecodable and its CRC made right again."""
    data = bytearray(batch)
    if kind == "varint":
        data[61:] = b"\xff" * (len(data) - 61)  # the first length: a varint of > 5 bytes
    elif kind == "codec-7":
        struct.pack_into(">h", data, 21, 7)
    elif kind == "gzip-garbage":
        struct.pack_into(">h", data, 21, 1)
        data[61:] = b"\x1f\x8b\x08" + bytes(len(data) - 64)
    struct.pack_into(">I", data, 17, crc32c(bytes(data[21:])))
    return bytes(data)


@pytest.mark.parametrize("kind", ["varint", "codec-7", "gzip-garbage"])
def test_a_batch_whose_records_do_not_decode_is_damage_that_recover_keeps(
    kind: str, partition: tuple[Path, Path, list[tuple[int, int, int]]]
) -> None:
    """CRC right, records undecodable (what a broker without record checks stored): verify
    names it; recover keeps it, as Kafka's recovery (CRC only) does."""
    pdir, log, layout = partition
    data = bytearray(log.read_bytes())
    position, base, _last = layout[25]
    end = layout[26][0]
    data[position:end] = undecodable(bytes(data[position:end]), kind)
    log.write_bytes(bytes(data))

    finding = _single_damage(ins.verify(pdir))
    assert (finding.file, finding.offset, finding.position) == (str(log), base, position)
    assert "do not decode" in finding.message and f"position {position}" in finding.message
    before = log.read_bytes()
    ins.recover(pdir)
    assert log.read_bytes() == before


def test_offset_gaps_left_by_compaction_are_not_damage(tmp_path: Path) -> None:
    body = b"".join(record(d, b"v", key=b"k") for d in (0, 3))
    batch = bytearray(build_batch(0, [b"v", b"v"]))
    batch[61:] = body
    struct.pack_into(">i", batch, 8, len(batch) - 12)
    struct.pack_into(">i", batch, 23, 3)  # lastOffsetDelta 3: records 1 and 2 compacted away
    struct.pack_into(">I", batch, 17, crc32c(bytes(batch[21:])))
    pdir = tmp_path / "compacted-0"
    pdir.mkdir()
    (pdir / segment_name(0)).write_bytes(bytes(batch))
    assert damage_findings(ins.verify(pdir)) == []


def test_empty_segment_is_fine(tmp_path: Path) -> None:
    pdir = tmp_path / "quiet-3"
    pdir.mkdir()
    (pdir / segment_name(42)).write_bytes(b"")
    report = ins.verify(pdir)
    assert not report.damaged
    [p] = report.partitions
    assert (p.log_start_offset, p.log_end_offset, p.records) == (42, 42, 0)


def test_index_pointing_at_wrong_position(
    partition: tuple[Path, Path, list[tuple[int, int, int]]], tmp_path: Path
) -> None:
    pdir, log, layout = partition
    index = log.with_suffix(".index")
    entries = [
        struct.unpack_from(">ii", index.read_bytes(), i) for i in range(0, index.stat().st_size, 8)
    ]
    assert len(entries) >= 3
    wrong = [(r, p) for r, p in entries]
    wrong[1] = (wrong[1][0], wrong[1][1] + 5)
    write_offset_index(index, 0, wrong)
    damaged = index.read_bytes()
    finding = _single_damage(ins.verify(pdir))
    assert finding.file == str(index)
    assert finding.position == wrong[1][1] and finding.offset == wrong[1][0]

    report = recover_and_check_idempotent(pdir, tmp_path)
    # The damaged index is kept aside, not overwritten; then a fresh one is built.
    assert [a.kind for a in report.actions] == ["save-index", "rebuild-index"]
    saved = Path(report.actions[0].saved_as or "")
    assert saved.name == f"{index.name}.before-recover"
    assert saved.read_bytes() == damaged
    assert log.stat().st_size == layout[-1][0] + len(build_batch(0, [b"x" * 100] * 3))


def test_index_naming_the_wrong_offset_and_zero_tail(
    partition: tuple[Path, Path, list[tuple[int, int, int]]],
) -> None:
    pdir, log, _layout = partition
    index = log.with_suffix(".index")
    good = index.read_bytes()
    # An entry that names an offset before its batch's last offset.
    rel, pos = struct.unpack_from(">ii", good, 0)
    index.write_bytes(struct.pack(">ii", rel - 2, pos) + good[8:])
    finding = _single_damage(ins.verify(pdir))
    assert finding.offset == rel - 2 and "ends at offset" in finding.message
    # A preallocated zero tail (unclean shutdown) is rebuildable, not damage.
    index.write_bytes(good + bytes(8 * 10))
    report = ins.verify(pdir)
    assert not report.damaged
    assert [f.severity for f in report.findings] == [ins.REBUILDABLE]
    assert "zero entries" in report.findings[0].message


def test_time_index_out_of_order_is_damage(
    partition: tuple[Path, Path, list[tuple[int, int, int]]],
) -> None:
    pdir, log, _layout = partition
    tindex = log.with_suffix(".timeindex")
    entries = tindex.read_bytes()
    assert len(entries) >= 24
    tindex.write_bytes(entries[12:24] + entries[:12] + entries[24:])
    finding = _single_damage(ins.verify(pdir))
    assert finding.file == str(tindex)


def test_missing_indexes_are_rebuildable(
    partition: tuple[Path, Path, list[tuple[int, int, int]]], tmp_path: Path
) -> None:
    pdir, log, _layout = partition
    log.with_suffix(".index").unlink()
    log.with_suffix(".timeindex").unlink()
    report = ins.verify(pdir)
    assert not report.damaged and report.status == ins.STATUS_REBUILDABLE
    recover_and_check_idempotent(pdir, tmp_path)
    assert log.with_suffix(".index").exists() and log.with_suffix(".timeindex").exists()


def test_later_segments_are_moved_aside_not_deleted(tmp_path: Path) -> None:
    pdir, layouts = make_partition(tmp_path, "t-0", [(0, [2] * 10), (20, [2] * 10), (40, [2])])
    first = pdir / segment_name(0)
    data = bytearray(first.read_bytes())
    bad = layouts[0][4][0]
    data[bad + 65] ^= 1
    first.write_bytes(bytes(data))
    originals = {n: (pdir / segment_name(n)).read_bytes() for n in (20, 40)}

    report = ins.verify(pdir)
    damage = damage_findings(report)
    assert [(Path(f.file or "").name, f.position) for f in damage] == [
        (segment_name(0), bad), (segment_name(20), 0), (segment_name(40), 0)
    ]
    assert report.partitions[0].log_end_offset == 8

    recovered = recover_and_check_idempotent(pdir, tmp_path)
    assert_recovered_losslessly(bytes(data), first, recovered)
    orphans = [a for a in recovered.actions if a.kind == "orphan"]
    assert len(orphans) == 2
    for base in (20, 40):
        log = pdir / segment_name(base)
        assert not log.exists()
        assert (pdir / f"{segment_name(base)}.orphaned").read_bytes() == originals[base]
        assert (pdir / f"{segment_name(base, '.index')}.orphaned").exists()
    assert ins.verify(pdir).partitions[0].log_end_offset == 8


def test_saved_files_are_never_overwritten(
    partition: tuple[Path, Path, list[tuple[int, int, int]]],
) -> None:
    pdir, log, layout = partition
    position = layout[-1][0]
    existing = log.with_name(f"{log.name}.truncated-at-{position}.bin")
    existing.write_bytes(b"an earlier rescue")
    with open(log, "r+b") as fh:
        fh.truncate(position + 20)
    report = ins.recover(pdir)
    [truncate] = [a for a in report.actions if a.kind == "truncate"]
    assert truncate.saved_as == str(log.with_name(f"{log.name}.truncated-at-{position}.1.bin"))
    assert existing.read_bytes() == b"an earlier rescue"


def test_overlapping_segments(tmp_path: Path) -> None:
    pdir, _ = make_partition(tmp_path, "t-1", [(0, [2] * 5), (5, [2] * 3)])
    finding = _single_damage(ins.verify(pdir))
    assert finding.file == str(pdir / segment_name(5)) and finding.offset == 5
    report = recover_and_check_idempotent(pdir, tmp_path)
    assert [a.kind for a in report.actions] == ["orphan"]


# -- log dirs and checkpoints ---------------------------------------------------------------


def test_log_dir_checkpoints_beyond_the_data(tmp_path: Path) -> None:
    root = make_log_dir(tmp_path / "logs", {"a-0": [(0, [2] * 30)], "b-0": [(0, [1] * 3)]})
    log = root / "a-0" / segment_name(0)
    layout_end = log.stat().st_size
    with open(log, "r+b") as fh:  # torn tail: the last batch is half there
        fh.truncate(layout_end - 40)
    report = ins.verify(root)
    damage = damage_findings(report)
    files = sorted(Path(f.file or "").name for f in damage)
    assert files == sorted([segment_name(0), cp.RECOVERY_POINT_CHECKPOINT,
                            cp.REPLICATION_OFFSET_CHECKPOINT])
    assert {p.name: p.log_end_offset for p in report.partitions} == {"a-0": 58, "b-0": 3}

    rp_before = (root / cp.RECOVERY_POINT_CHECKPOINT).read_bytes()
    recovered = recover_and_check_idempotent(root, root)
    kinds = [a.kind for a in recovered.actions]
    assert kinds.count("correct-checkpoint") == 2 and "truncate" in kinds
    assert cp.read_offset_checkpoint(root / cp.RECOVERY_POINT_CHECKPOINT) == {
        ("a", 0): 58, ("b", 0): 3
    }
    assert cp.read_offset_checkpoint(root / cp.REPLICATION_OFFSET_CHECKPOINT)[("a", 0)] == 58
    backup = root / (cp.RECOVERY_POINT_CHECKPOINT + ".before-recover")
    assert backup.read_bytes() == rp_before
    assert ins.verify(root).status == ins.STATUS_OK


def test_malformed_checkpoint_and_leader_epochs(tmp_path: Path) -> None:
    root = make_log_dir(tmp_path / "logs", {"a-0": [(0, [2] * 5)]})
    (root / cp.LOG_START_OFFSET_CHECKPOINT).write_text("0\n2\na 0 1\n")
    cp.write_checkpoint_lines(root / "a-0" / cp.LEADER_EPOCH_CHECKPOINT, 0, ["0 0", "4 99"])
    cp.write_offset_checkpoint(root / cp.CLEANER_OFFSET_CHECKPOINT, {("gone", 7): 3})
    report = ins.verify(root)
    by_file = {Path(f.file or "").name: f for f in report.findings}
    assert by_file[cp.LOG_START_OFFSET_CHECKPOINT].severity == ins.DAMAGE
    assert "expected 2 entries but found 1" in by_file[cp.LOG_START_OFFSET_CHECKPOINT].message
    assert by_file[cp.LEADER_EPOCH_CHECKPOINT].severity == ins.DAMAGE
    assert by_file[cp.LEADER_EPOCH_CHECKPOINT].offset == 99
    assert by_file[cp.CLEANER_OFFSET_CHECKPOINT].severity == ins.WARNING  # absent partition

    malformed = (root / cp.LOG_START_OFFSET_CHECKPOINT).read_bytes()
    recovered = recover_and_check_idempotent(root, root)
    assert {a.kind for a in recovered.actions} == {"replace-checkpoint", "correct-checkpoint"}
    assert (root / (cp.LOG_START_OFFSET_CHECKPOINT + ".malformed")).read_bytes() == malformed
    assert cp.read_offset_checkpoint(root / cp.LOG_START_OFFSET_CHECKPOINT) == {}
    epochs = ins.read_leader_epoch_entries(root / "a-0" / cp.LEADER_EPOCH_CHECKPOINT)
    assert epochs == [(0, 0)]


def test_recovery_point_limits_the_scan_unless_full(tmp_path: Path) -> None:
    root = make_log_dir(tmp_path / "logs", {"a-0": [(0, [2] * 10), (20, [2] * 10)]})
    first = root / "a-0" / segment_name(0)
    data = bytearray(first.read_bytes())
    data[200] ^= 0xFF
    first.write_bytes(bytes(data))
    assert damage_findings(ins.verify(root))
    # Like a broker: the recovery point (40) trusts the first segment.
    report = ins.recover(root)
    assert report.actions == [] and report.partitions[0].recovered_from == 40
    full = ins.recover(root, full=True)
    assert "truncate" in [a.kind for a in full.actions]
    assert not ins.verify(root).damaged


def test_locked_log_dir_is_refused(tmp_path: Path) -> None:
    root = make_log_dir(tmp_path / "logs", {"a-0": [(0, [2] * 5)]})
    before = snapshot(root)
    fd = os.open(root / cp.LOCK_FILE, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        with pytest.raises(ins.LogDirLockedError, match="broker is running"):
            ins.recover(root)
        with pytest.raises(ins.LogDirLockedError):
            ins.recover(root / "a-0")
        assert ins.log_dir_is_locked(root)
        report = ins.verify(root)
        assert any("locked" in f.message for f in report.findings if f.severity == ins.WARNING)
    finally:
        os.close(fd)
    assert snapshot(root) == before
    assert not ins.log_dir_is_locked(root)


def test_posix_lock_of_a_java_broker_is_seen(tmp_path: Path) -> None:
    # Kafka's FileChannel.tryLock is a POSIX record lock, held by another process.
    root = make_log_dir(tmp_path / "logs", {"a-0": [(0, [1])]})
    holder = subprocess.Popen(
        [sys.executable, "-c",
         "import fcntl,os,sys; fd=os.open(sys.argv[1], os.O_RDWR); "
         "fcntl.lockf(fd, fcntl.LOCK_EX); print('locked', flush=True); sys.stdin.read()",
         str(root / cp.LOCK_FILE)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        with pytest.raises(ins.LogDirLockedError):
            ins.recover(root)
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait(timeout=10)


def test_not_a_log_path(tmp_path: Path) -> None:
    with pytest.raises(ins.InspectError, match="no such file"):
        ins.verify(tmp_path / "missing")
    (tmp_path / "notes.txt").write_text("hello")
    with pytest.raises(ins.InspectError, match="not a Kafka segment file"):
        ins.verify(tmp_path / "notes.txt")
    (tmp_path / "plain").mkdir()
    with pytest.raises(ins.InspectError, match="not a log dir"):
        ins.recover(tmp_path / "plain")


def test_single_segment_recovery(tmp_path: Path) -> None:
    pdir, _layouts = make_partition(tmp_path, "s-0", [(100, [4] * 12)], indexes=False)
    log = pdir / segment_name(100)
    original = log.read_bytes() + b"\x00" * 50
    log.write_bytes(original)
    report = ins.verify(log)
    finding = _single_damage(report)
    assert finding.position == len(original) - 50
    recovered = recover_and_check_idempotent(log, tmp_path)
    assert_recovered_losslessly(original, log, recovered)
    assert recovered.partitions[0].log_end_offset == 148


@pytest.mark.parametrize("owner_module", [True, False])
def test_leader_epoch_reader_with_and_without_leader_epoch_module(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, owner_module: bool
) -> None:
    if not owner_module:
        monkeypatch.setitem(sys.modules, "klog.storage.leader_epoch", None)  # ImportError
    path = tmp_path / cp.LEADER_EPOCH_CHECKPOINT
    ins.write_leader_epoch_entries(path, [(0, 0), (2, 40)])
    assert path.read_text() == "0\n2\n0 0\n2 40\n"
    assert ins.read_leader_epoch_entries(path) == [(0, 0), (2, 40)]
    path.write_text("0\n3\n0 0\n")
    with pytest.raises(cp.CheckpointError):
        ins.read_leader_epoch_entries(path)
    root = make_log_dir(tmp_path / "logs", {"a-0": [(0, [1] * 3)]})
    (root / "a-0" / cp.LEADER_EPOCH_CHECKPOINT).write_text("0\nx\n")
    [finding] = damage_findings(ins.verify(root))
    assert finding.file == str(root / "a-0" / cp.LEADER_EPOCH_CHECKPOINT)


# -- what counts as Kafka's layout (issue 18, item 7) ---------------------------------------


def test_targets_must_be_named_and_laid_out_as_kafka(tmp_path: Path) -> None:
    log, _ = write_segment(tmp_path / "orders-3", 0, [1])
    assert ins.resolve_target(log).kind == ins.KIND_SEGMENT
    assert ins.resolve_target(log.parent).kind == ins.KIND_PARTITION
    # A log dir without broker files yet: recognised by partition dirs holding segments.
    assert ins.resolve_target(tmp_path).kind == ins.KIND_LOG_DIR
    # Kafka's suffixed dirs (awaiting deletion, future replicas) are partition dirs too.
    deleting = tmp_path / f"orders-4.{'a' * 32}-delete"
    write_segment(deleting, 0, [1])
    assert ins.resolve_target(deleting).kind == ins.KIND_PARTITION
    # "." has a name to match once made absolute.
    cwd = os.getcwd()
    os.chdir(log.parent)
    try:
        target = ins.resolve_target(".")
    finally:
        os.chdir(cwd)
    assert target.kind == ins.KIND_PARTITION and target.partitions[0].name == "orders-3"

    refused = {
        # index files: the segment is the .log
        log.with_suffix(".index"): "an index or snapshot file",
        # a 20-digit .log outside a partition dir ("my logs-1" is no legal topic name)
        write_segment(tmp_path / "my logs-1", 5, [1])[0]: "not in a partition dir",
    }
    log.with_suffix(".index").write_bytes(b"")
    for path, message in refused.items():
        with pytest.raises(ins.InspectError, match=message):
            ins.resolve_target(path)
    # With force, any .log is a segment and a dir with segments a partition dir.
    assert ins.resolve_target(tmp_path / "my logs-1", force=True).kind == ins.KIND_PARTITION
    with pytest.raises(ins.InspectError, match="an index or snapshot file"):
        ins.resolve_target(log.with_suffix(".index"), force=True)


def test_dirs_without_segments_are_not_log_dirs(tmp_path: Path) -> None:
    (tmp_path / "python-3").mkdir()
    (tmp_path / "python-3" / "app.log").write_text("x\n")
    with pytest.raises(ins.InspectError, match="not a log dir, partition dir or segment"):
        ins.recover(tmp_path)
    # Forced: the old reading (a log dir of one partition without segments), harmless.
    report = ins.recover(tmp_path, force=True)
    assert report.kind == ins.KIND_LOG_DIR and report.actions == []
    assert (tmp_path / "python-3" / "app.log").read_text() == "x\n"


def test_recover_keeps_an_index_naming_cut_bytes_aside(
    partition: tuple[Path, Path, list[tuple[int, int, int]]], tmp_path: Path
) -> None:
    pdir, log, _layout = partition
    index = log.with_suffix(".index")
    old_index = index.read_bytes()
    last_entry_position = struct.unpack_from(">ii", old_index, len(old_index) - 8)[1]
    # Garbage from inside the last indexed batch on: the entry naming it points at cut bytes.
    with open(log, "r+b") as fh:
        fh.seek(last_entry_position + 20)
        fh.write(b"\xee" * 40)
    report = recover_and_check_idempotent(pdir, tmp_path)
    kinds = [a.kind for a in report.actions]
    # The time index named the cut offsets too.
    assert kinds == ["truncate", "save-index", "save-index", "rebuild-index"]
    saved = {Path(a.saved_as or "").name: Path(a.saved_as or "") for a in report.actions[1:3]}
    assert saved[f"{index.name}.before-recover"].read_bytes() == old_index
    assert f"{segment_name(0, '.timeindex')}.before-recover" in saved
    # The rebuilt index only names what is left.
    assert len(index.read_bytes()) < len(old_index)


def test_recover_rewrites_a_zero_tail_index_in_place(
    partition: tuple[Path, Path, list[tuple[int, int, int]]], tmp_path: Path
) -> None:
    pdir, log, _layout = partition
    index = log.with_suffix(".index")
    good = index.read_bytes()
    index.write_bytes(good + bytes(8 * 100))  # preallocated by an unclean shutdown
    report = recover_and_check_idempotent(pdir, tmp_path)
    assert [a.kind for a in report.actions] == ["rebuild-index"]
    assert "zero entries" in report.actions[0].message
    assert not list(pdir.glob("*.before-recover"))


def test_recover_reports_a_damaged_txn_index_and_leaves_it(
    partition: tuple[Path, Path, list[tuple[int, int, int]]],
) -> None:
    pdir, log, _layout = partition
    txnindex = log.with_suffix(".txnindex")
    garbage = b"\x0f\xa0" + b"\x5a" * 32  # version 4000: not an entry recover can repair
    txnindex.write_bytes(garbage)
    report = ins.recover(pdir)
    [finding] = report.unresolved
    assert finding.file == str(txnindex) and "version 4000" in finding.message
    assert txnindex.read_bytes() == garbage
