"""A segment's files as a set: renamed together, moved with their dir, deleted together.

``SegmentFiles`` is the part of ``LogSegment`` (segment.py) that treats its four files
(``.log``, ``.index``, ``.timeindex``, ``.txnindex``) as one: flushing them, letting them
go without writing (the disk may have failed), adding or removing a suffix
(``.deleted``, ``.cleaned``, ``.swap``: Kafka's crash-safe deletion and replacement steps,
whose names files.py spells), following a renamed partition dir, deleting them. Open
descriptors and index mappings stay valid across a rename.

A mixin without slots of its own (``LogSegment``'s slots, which klog/storage/_fastread.c
reads at fixed offsets, keep their layout). Not thread-safe: the owning PartitionLog's
lock serialises every call, as for the rest of the segment.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from klog.storage.index import OffsetIndex, TimeIndex, TransactionIndex


class SegmentFiles:
    """Renaming and deleting a segment's files as one (see the module docstring)."""

    # No slots of its own, so LogSegment's keep their layout; hidden from mypy, which
    # would refuse assignments to LogSegment's attributes here otherwise.
    if not TYPE_CHECKING:
        __slots__ = ()

    directory: Path
    log_path: Path
    offset_index_path: Path
    time_index_path: Path
    txn_index: TransactionIndex
    _fd: int | None
    _offset_index: OffsetIndex | None
    _time_index: TimeIndex | None

    @property
    def fd(self) -> int:
        """The open .log's descriptor (LogSegment's; raises once closed)."""
        raise NotImplementedError

    def flush(self) -> None:
        """fsync the log and flush the index mappings."""
        os.fsync(self.fd)
        if self._offset_index is not None:
            self._offset_index.flush()
        if self._time_index is not None:
            self._time_index.flush()
        self.txn_index.flush()

    def _close_indexes(self) -> None:
        for index in (self._offset_index, self._time_index):
            if index is not None:
                index.close_handler()
        self._offset_index = self._time_index = None

    def close_handlers(self) -> None:
        """Release files without writing (the disk may have failed)."""
        self._close_indexes()
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = None

    def change_file_suffixes(self, old_suffix: str, new_suffix: str) -> None:
        """Rename every file of the segment, e.g. "" -> ".deleted" (the fd stays valid)."""

        def renamed(path: Path) -> Path:
            name = path.name
            if old_suffix and not name.endswith(old_suffix):
                raise ValueError(f"{path} does not end with {old_suffix!r}")
            base = name[: len(name) - len(old_suffix)] if old_suffix else name
            return path.with_name(base + new_suffix)

        new_log = renamed(self.log_path)
        os.replace(self.log_path, new_log)
        self.log_path = new_log
        for attr, index in (
            ("offset_index_path", self._offset_index),
            ("time_index_path", self._time_index),
        ):
            old_path: Path = getattr(self, attr)
            new_path = renamed(old_path)
            if index is not None:
                index.rename_to(new_path)
            elif old_path.exists():
                os.replace(old_path, new_path)
            setattr(self, attr, new_path)
        self.txn_index.rename_to(renamed(self.txn_index.path))

    def update_parent_dir(self, directory: Path) -> None:
        """The partition directory was renamed (open files are unaffected)."""
        self.directory = Path(directory)
        self.log_path = self.directory / self.log_path.name
        self.offset_index_path = self.directory / self.offset_index_path.name
        self.time_index_path = self.directory / self.time_index_path.name
        for index in (self._offset_index, self._time_index):
            if index is not None:
                index.path = self.directory / index.path.name
        self.txn_index.path = self.directory / self.txn_index.path.name

    def has_suffix(self, suffix: str) -> bool:
        return all(
            p.name.endswith(suffix)
            for p in (
                self.log_path,
                self.offset_index_path,
                self.time_index_path,
                self.txn_index.path,
            )
        )

    def delete_if_exists(self) -> None:
        """Close and delete the segment's files."""
        self.close_handlers()
        for path in (
            self.log_path,
            self.offset_index_path,
            self.time_index_path,
            self.txn_index.path,
        ):
            path.unlink(missing_ok=True)

    @property
    def deleted(self) -> bool:
        return not any(
            p.exists()
            for p in (
                self.log_path,
                self.offset_index_path,
                self.time_index_path,
                self.txn_index.path,
            )
        )
