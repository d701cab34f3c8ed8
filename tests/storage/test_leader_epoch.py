"""Tests for klog.storage.leader_epoch."""

from __future__ import annotations

from pathlib import Path

import pytest

from klog.storage.leader_epoch import (
    EpochEntry,
    LeaderEpochCheckpointError,
    LeaderEpochFileCache,
    read_leader_epoch_checkpoint,
)


def test_assign_and_file_format(tmp_path: Path) -> None:
    path = tmp_path / "leader-epoch-checkpoint"
    cache = LeaderEpochFileCache(path)
    assert cache.latest_epoch is None and not path.exists()
    assert cache.assign(0, 0)
    assert not cache.assign(0, 5)  # same epoch, later offset: nothing changes
    assert cache.assign(3, 120)
    assert path.read_text() == "0\n2\n0 0\n3 120\n"
    assert LeaderEpochFileCache(path).entries == [EpochEntry(0, 0), EpochEntry(3, 120)]
    # An entry contradicting later ones replaces them.
    cache.assign(2, 100)
    assert cache.entries == [EpochEntry(0, 0), EpochEntry(2, 100)]
    with pytest.raises(ValueError):
        cache.assign(-1, 0)


def test_end_offset_for(tmp_path: Path) -> None:
    cache = LeaderEpochFileCache(tmp_path / "leader-epoch-checkpoint")
    for epoch, offset in ((1, 10), (3, 20), (5, 30)):
        cache.assign(epoch, offset)
    assert cache.end_offset_for(5, 99) == (5, 99)
    assert cache.end_offset_for(3, 99) == (3, 30)
    assert cache.end_offset_for(4, 99) == (3, 30)
    assert cache.end_offset_for(0, 99) == (0, 10)
    assert cache.end_offset_for(7, 99) == (-1, -1)
    assert cache.end_offset_for(-1, 99) == (-1, -1)
    assert cache.epoch_for_offset(25) == 3 and cache.epoch_for_offset(5) is None


def test_truncation(tmp_path: Path) -> None:
    cache = LeaderEpochFileCache(tmp_path / "leader-epoch-checkpoint")
    for epoch, offset in ((1, 10), (3, 20), (5, 30)):
        cache.assign(epoch, offset)
    cache.truncate_from_end(25)
    assert cache.entries == [EpochEntry(1, 10), EpochEntry(3, 20)]
    cache.truncate_from_start(15)
    assert cache.entries == [EpochEntry(1, 15), EpochEntry(3, 20)]
    cache.truncate_from_start(20)
    assert cache.entries == [EpochEntry(3, 20)]
    assert read_leader_epoch_checkpoint(cache.path) == [EpochEntry(3, 20)]
    cache.clear_and_flush()
    assert cache.path.read_text() == "0\n0\n"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "empty"),
        ("1\n0\n", "version"),
        ("0\n2\n0 0\n", "expected 2"),
        ("0\n1\n0 x\n", "not a number"),
        ("0\n1\n0 1 2\n", "malformed"),
    ],
)
def test_bad_checkpoint_files(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "leader-epoch-checkpoint"
    path.write_text(text)
    with pytest.raises(LeaderEpochCheckpointError, match=message):
        LeaderEpochFileCache(path)


def test_corpus_checkpoints(kafka_corpus: Path) -> None:
    for path in kafka_corpus.glob("*/leader-epoch-checkpoint"):
        entries = read_leader_epoch_checkpoint(path)
        assert entries == [EpochEntry(0, 0)] or entries == []
