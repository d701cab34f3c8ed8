"""Tests for klog/storage/checkpoints.py: offset checkpoints and meta.properties."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from klog.storage import checkpoints as cp
from klog.storage.checkpoints import CheckpointError, MetaProperties


def test_offset_checkpoint_round_trip(tmp_path: Path) -> None:
    path = tmp_path / cp.RECOVERY_POINT_CHECKPOINT
    offsets = {("first_topic", 0): 11, ("first_topic", 2): 18, ("__consumer_offsets", 49): 0}
    cp.write_offset_checkpoint(path, offsets)
    assert path.read_text() == (
        "0\n3\nfirst_topic 0 11\nfirst_topic 2 18\n__consumer_offsets 49 0\n"
    )
    assert cp.read_offset_checkpoint(path) == offsets
    assert not (tmp_path / (cp.RECOVERY_POINT_CHECKPOINT + ".tmp")).exists()


def test_offset_checkpoint_empty_mapping_and_empty_file(tmp_path: Path) -> None:
    path = tmp_path / cp.CLEANER_OFFSET_CHECKPOINT
    cp.write_offset_checkpoint(path, {})
    assert path.read_text() == "0\n0\n"
    assert cp.read_offset_checkpoint(path) == {}
    path.write_bytes(b"")  # Kafka creates the file empty before its first write
    assert cp.read_offset_checkpoint(path) == {}


def test_offset_checkpoint_overwrites_atomically(tmp_path: Path) -> None:
    path = tmp_path / cp.LOG_START_OFFSET_CHECKPOINT
    cp.write_offset_checkpoint(path, {("a", 0): 1})
    inode_before = os.stat(path).st_ino
    cp.write_offset_checkpoint(path, {("a", 0): 2, ("b", 1): 3})
    assert cp.read_offset_checkpoint(path) == {("a", 0): 2, ("b", 1): 3}
    # Replaced by rename, not rewritten in place.
    assert os.stat(path).st_ino != inode_before


def test_reads_the_real_kafka_checkpoints(kafka_corpus: Path) -> None:
    recovery = cp.read_offset_checkpoint(kafka_corpus / cp.RECOVERY_POINT_CHECKPOINT)
    assert len(recovery) == 54
    assert recovery[("first_topic", 0)] == 11
    assert recovery[("new_topic", 0)] == 2
    assert recovery[("__consumer_offsets", 18)] == 499
    assert cp.read_offset_checkpoint(kafka_corpus / cp.CLEANER_OFFSET_CHECKPOINT) == {}
    meta = cp.read_meta_properties(kafka_corpus / cp.META_PROPERTIES)
    assert meta == MetaProperties(0, 0, "lRaQCIBoRh2xRKLuP9CAQg", None)


@pytest.mark.parametrize(
    ("content", "line", "fragment"),
    [
        ("1\n0\n", 1, "unrecognised version 1"),
        ("zero\n0\n", 1, "malformed version"),
        ("0\nx\n", 2, "malformed entry count"),
        ("0\n-1\n", 2, "malformed entry count"),
        ("0\n2\nt 0 5\n", None, "expected 2 entries but found 1"),
        ("0\n1\nt 0 5\nt 1 6\n", None, "expected 1 entries but found 2"),
        ("0\n1\nt 0\n", 3, "malformed entry"),
        ("0\n1\nt zero 5\n", 3, "malformed entry"),
        ("0\n1\nt 0 5x\n", 3, "malformed entry"),
        ("0\n1\nt 0 99999999999999999999\n", 3, "malformed entry"),
        ("0\n1\nt 0 1_000\n", 3, "malformed entry"),
    ],
)
def test_malformed_offset_checkpoint(
    tmp_path: Path, content: str, line: int | None, fragment: str
) -> None:
    path = tmp_path / cp.REPLICATION_OFFSET_CHECKPOINT
    path.write_text(content)
    with pytest.raises(CheckpointError) as info:
        cp.read_offset_checkpoint(path)
    assert info.value.line == line
    assert fragment in str(info.value)
    assert str(path) in str(info.value)


def test_binary_garbage_is_a_checkpoint_error(tmp_path: Path) -> None:
    path = tmp_path / cp.RECOVERY_POINT_CHECKPOINT
    path.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(CheckpointError, match="not UTF-8"):
        cp.read_offset_checkpoint(path)


def test_very_long_line_is_bounded(tmp_path: Path) -> None:
    path = tmp_path / cp.RECOVERY_POINT_CHECKPOINT
    path.write_text("0" * (200 * 1024))
    with pytest.raises(CheckpointError, match="longer than"):
        cp.read_offset_checkpoint(path)


def test_topic_with_whitespace_cannot_be_written(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        cp.write_offset_checkpoint(tmp_path / "x", {("bad topic", 0): 1})


def test_meta_properties_v0_round_trip(tmp_path: Path) -> None:
    path = tmp_path / cp.META_PROPERTIES
    meta = MetaProperties(version=0, node_id=3, cluster_id="lRaQCIBoRh2xRKLuP9CAQg")
    cp.write_meta_properties(path, meta)
    lines = path.read_text().splitlines()
    assert lines[0] == "#"
    assert lines[1].startswith("#") and len(lines[1]) > 10  # the timestamp comment
    assert set(lines[2:]) == {"cluster.id=lRaQCIBoRh2xRKLuP9CAQg", "version=0", "broker.id=3"}
    assert cp.read_meta_properties(path) == meta


def test_meta_properties_v1_with_directory_id(tmp_path: Path) -> None:
    path = tmp_path / cp.META_PROPERTIES
    meta = MetaProperties(1, 7, "MkU3OEVBNTcwNTJENDM2Qk", "b2ZmW4fTT0aOUwEJ7M2UqA")
    cp.write_meta_properties(path, meta)
    text = path.read_text()
    assert "node.id=7" in text and "broker.id" not in text
    assert "directory.id=b2ZmW4fTT0aOUwEJ7M2UqA" in text
    assert cp.read_meta_properties(path) == meta


def test_meta_properties_java_syntax(tmp_path: Path) -> None:
    path = tmp_path / cp.META_PROPERTIES
    path.write_text(
        "# comment\n! another\n\n  version : 0\nbroker.id   5\ncluster.id=ab\\\n    cd\n"
    )
    assert cp.read_meta_properties(path) == MetaProperties(0, 5, "abcd")


@pytest.mark.parametrize(
    ("content", "fragment"),
    [
        ("version=2\nnode.id=1\ncluster.id=x\n", "unknown meta.properties version"),
        ("version=1\ncluster.id=x\n", "node.id was not found"),
        ("version=1\nnode.id=1\n", "cluster.id was not found"),
        ("version=0\nbroker.id=one\n", "broker.id 'one' is not an integer"),
        ("version=0\nbroker.id=1\ndirectory.id=nope\n", "not a Kafka Uuid"),
        ("version=0\nbroker.id=\\u12\n", "malformed \\uxxxx"),
    ],
)
def test_malformed_meta_properties(tmp_path: Path, content: str, fragment: str) -> None:
    path = tmp_path / cp.META_PROPERTIES
    path.write_text(content)
    with pytest.raises(CheckpointError) as info:
        cp.read_meta_properties(path)
    assert fragment in str(info.value)


def test_meta_properties_v0_without_broker_id_is_allowed(tmp_path: Path) -> None:
    path = tmp_path / cp.META_PROPERTIES
    path.write_text("version=0\n")
    assert cp.read_meta_properties(path) == MetaProperties(0, None, None, None)


def test_generic_entries_for_leader_epoch_format(tmp_path: Path) -> None:
    path = tmp_path / cp.LEADER_EPOCH_CHECKPOINT
    cp.write_checkpoint_lines(path, 0, ["0 0", "3 120"])

    def parse(line: str) -> tuple[int, int] | None:
        parts = line.split()
        return (int(parts[0]), int(parts[1])) if len(parts) == 2 else None

    assert cp.read_checkpoint_entries(path, 0, parse) == [(0, 0), (3, 120)]
