"""The leader epoch cache of one partition and its ``leader-epoch-checkpoint`` file.

This module owns Kafka's LeaderEpochFileCache: the ordered list of (leader epoch, start
offset) pairs that says which leader wrote which offsets, used to answer
OffsetsForLeaderEpoch and to truncate followers correctly. It persists to the partition's
``leader-epoch-checkpoint`` file, written atomically (temporary file, fsync, rename)::

    0                    version
    2                    number of entries
    0 0                  epoch start-offset
    3 120

The format is tiny, so it is implemented here rather than through checkpoints.py.

Locking: not thread-safe; the owning PartitionLog's lock serialises every call.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from pathlib import Path

from klog.storage.checkpoints import atomic_write_bytes

LEADER_EPOCH_CHECKPOINT_FILENAME = "leader-epoch-checkpoint"
CHECKPOINT_VERSION = 0
UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1
# A checkpoint is a few lines per leader change; this bounds what a corrupt file costs.
MAX_CHECKPOINT_BYTES = 64 * 1024 * 1024


class LeaderEpochCheckpointError(ValueError):
    """A leader-epoch-checkpoint file that cannot be parsed."""


@dataclass(frozen=True, slots=True)
class EpochEntry:
    epoch: int
    start_offset: int


def read_leader_epoch_checkpoint(path: Path | str) -> list[EpochEntry]:
    """The entries of a leader-epoch-checkpoint file (missing file -> empty)."""
    path = Path(path)
    if not path.exists():
        return []
    if path.stat().st_size > MAX_CHECKPOINT_BYTES:
        raise LeaderEpochCheckpointError(f"{path}: implausibly large checkpoint file")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise LeaderEpochCheckpointError(f"{path}: not a text file ({exc})") from None
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    if not lines:
        raise LeaderEpochCheckpointError(f"{path}: empty checkpoint file (no version line)")
    version = _int(lines[0], path, 1)
    if version != CHECKPOINT_VERSION:
        raise LeaderEpochCheckpointError(
            f"{path}: unrecognised version of the checkpoint file: {version}"
        )
    if len(lines) < 2:
        raise LeaderEpochCheckpointError(f"{path}: missing the entry count line")
    expected = _int(lines[1], path, 2)
    entries = []
    for number, line in enumerate(lines[2:], start=3):
        parts = line.split()
        if len(parts) != 2:
            raise LeaderEpochCheckpointError(f"{path}:{number}: malformed line {line!r}")
        entries.append(EpochEntry(_int(parts[0], path, number), _int(parts[1], path, number)))
    if len(entries) != expected:
        raise LeaderEpochCheckpointError(
            f"{path}: expected {expected} entries but found only {len(entries)}"
        )
    return entries


def _int(text: str, path: Path, number: int) -> int:
    try:
        return int(text.strip())
    except ValueError:
        raise LeaderEpochCheckpointError(f"{path}:{number}: not a number: {text!r}") from None


def write_leader_epoch_checkpoint(path: Path | str, entries: list[EpochEntry]) -> None:
    """Write the file atomically: ``path.tmp``, fsync, rename, fsync the directory."""
    path = Path(path)
    lines = [str(CHECKPOINT_VERSION), str(len(entries))]
    lines += [f"{e.epoch} {e.start_offset}" for e in entries]
    atomic_write_bytes(path, ("\n".join(lines) + "\n").encode())


class LeaderEpochFileCache:
    """Kafka's LeaderEpochFileCache: epochs and their start offsets, both increasing."""

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        self._epochs: list[int] = []
        self._offsets: list[int] = []
        for entry in read_leader_epoch_checkpoint(self.path):
            self._put(entry)

    # -- reading ---------------------------------------------------------------------------

    @property
    def entries(self) -> list[EpochEntry]:
        return [EpochEntry(e, o) for e, o in zip(self._epochs, self._offsets, strict=True)]

    @property
    def latest_epoch(self) -> int | None:
        return self._epochs[-1] if self._epochs else None

    @property
    def earliest_entry(self) -> EpochEntry | None:
        return EpochEntry(self._epochs[0], self._offsets[0]) if self._epochs else None

    @property
    def latest_entry(self) -> EpochEntry | None:
        return EpochEntry(self._epochs[-1], self._offsets[-1]) if self._epochs else None

    def epoch_for_offset(self, offset: int) -> int | None:
        """The epoch of the leader that wrote ``offset`` (None before the first entry)."""
        i = bisect.bisect_right(self._offsets, offset) - 1
        return self._epochs[i] if i >= 0 else None

    def end_offset_for(self, requested_epoch: int, log_end_offset: int) -> tuple[int, int]:
        """OffsetsForLeaderEpoch: (largest epoch <= requested, its end offset).

        The end offset is the start offset of the first epoch after the requested one,
        or the log end offset when the requested epoch is the latest; (-1, -1) when the
        epoch is undefined or newer than any known.
        """
        if requested_epoch == UNDEFINED_EPOCH:
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if self._epochs and self._epochs[-1] == requested_epoch:
            return requested_epoch, log_end_offset
        higher = bisect.bisect_right(self._epochs, requested_epoch)
        if higher == len(self._epochs):
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if higher == 0:
            return requested_epoch, self._offsets[0]
        return self._epochs[higher - 1], self._offsets[higher]

    # -- writing ---------------------------------------------------------------------------

    def _put(self, entry: EpochEntry) -> None:
        # Keep both lists increasing: a new entry replaces every entry it contradicts.
        while self._epochs and (
            self._epochs[-1] >= entry.epoch or self._offsets[-1] >= entry.start_offset
        ):
            self._epochs.pop()
            self._offsets.pop()
        self._epochs.append(entry.epoch)
        self._offsets.append(entry.start_offset)

    def assign(self, epoch: int, start_offset: int) -> bool:
        """Record that ``epoch`` starts at ``start_offset``; flush if that changed anything."""
        if epoch < 0 or start_offset < 0:
            raise ValueError(f"invalid leader epoch entry ({epoch}, {start_offset})")
        latest = self.latest_entry
        if latest is not None and latest.epoch == epoch and start_offset >= latest.start_offset:
            return False
        self._put(EpochEntry(epoch, start_offset))
        self.flush()
        return True

    def truncate_from_end(self, end_offset: int) -> None:
        """Drop entries starting at or after ``end_offset`` (log truncated to it)."""
        if end_offset < 0 or not self._offsets or self._offsets[-1] < end_offset:
            return
        keep = bisect.bisect_left(self._offsets, end_offset)
        del self._epochs[keep:], self._offsets[keep:]
        self.flush()

    def truncate_from_start(self, start_offset: int) -> None:
        """Log start moved to ``start_offset``: entries before it collapse into one entry
        for the epoch in force there, starting at ``start_offset``."""
        if not self._offsets or self._offsets[0] > start_offset:
            return
        last_before = bisect.bisect_right(self._offsets, start_offset) - 1
        epoch = self._epochs[last_before]
        del self._epochs[: last_before + 1], self._offsets[: last_before + 1]
        self._epochs.insert(0, epoch)
        self._offsets.insert(0, start_offset)
        self.flush()

    def clear_and_flush(self) -> None:
        self._epochs.clear()
        self._offsets.clear()
        self.flush()

    def flush(self) -> None:
        write_leader_epoch_checkpoint(self.path, self.entries)
