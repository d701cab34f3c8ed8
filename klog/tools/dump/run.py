"""One dump over a list of paths: files told apart by suffix, events in order, counters.

Files are told apart by suffix, as Kafka does: ``.log`` (and KRaft ``.checkpoint``
snapshots, which are record batches too), ``.index``, ``.timeindex``, ``.snapshot``
(producer state), ``.txnindex``; anything else is "Ignoring unknown file". A file with one
of these suffixes must also be named as Kafka names it (``<20-digit base offset>.log``,
``<offset>-<epoch>.checkpoint``): an application's ``app.log`` is refused as a file error
unless ``DumpOptions.force`` says to dump it anyway. The file's dir is not checked: dumping
only reads, and a segment copied out of its partition dir is a normal thing to inspect.

Each kind of file has its module (log_file.py, index_files.py; producer snapshots are read
by storage's producer_state.py); this one dispatches, counts and ends the run with Kafka's
reports.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from klog.protocol.errors import KafkaError
from klog.storage.files import (
    INDEX_FILE_SUFFIX,
    KRAFT_BOOTSTRAP_FILENAME,
    KRAFT_SNAPSHOT_FILE_NAME_RE,
    KRAFT_SNAPSHOT_FILE_SUFFIX,
    LOG_FILE_SUFFIX,
    PRODUCER_SNAPSHOT_FILE_SUFFIX,
    TIME_INDEX_FILE_SUFFIX,
    TXN_INDEX_FILE_SUFFIX,
    is_segment_file_name,
)
from klog.tools.dump.events import (
    DumpEvent,
    FileErrorEvent,
    FileEvent,
    ProblemEvent,
    ReportTally,
    UnknownFileEvent,
    snapshot_event,
)
from klog.tools.dump.index_files import dump_offset_index, dump_time_index, dump_txn_index
from klog.tools.dump.log_file import dump_log
from klog.tools.dump.options import DumpOptions
from klog.tools.dump.parsers import message_parser

_KNOWN_SUFFIXES = (
    LOG_FILE_SUFFIX,
    INDEX_FILE_SUFFIX,
    TIME_INDEX_FILE_SUFFIX,
    TXN_INDEX_FILE_SUFFIX,
    PRODUCER_SNAPSHOT_FILE_SUFFIX,
    KRAFT_SNAPSHOT_FILE_SUFFIX,
)


def _kafka_file_name(name: str, suffix: str) -> bool:
    """False for a file with a dumpable suffix that is not named as Kafka names them.

    Unknown suffixes pass: they are "Ignoring unknown file", as in Kafka.
    """
    if suffix not in _KNOWN_SUFFIXES:
        return True
    if suffix == KRAFT_SNAPSHOT_FILE_SUFFIX:
        return (
            name == KRAFT_BOOTSTRAP_FILENAME
            or KRAFT_SNAPSHOT_FILE_NAME_RE.match(name) is not None
        )
    return is_segment_file_name(name)


def _not_a_segment_message(arg: str, suffix: str) -> str:
    expected = (
        "<20-digit offset>-<10-digit epoch>.checkpoint"
        if suffix == KRAFT_SNAPSHOT_FILE_SUFFIX
        else f"<20-digit base offset>{suffix}"
    )
    return f"{arg}: not a Kafka segment file (expected {expected}); --force dumps it anyway"



@dataclass
class DumpRun:
    """One dump over ``paths``: iterate it for events; then read the counters.

    ``dumped`` counts files whose content was dumped, ``failed`` those that could not be
    opened at all (missing, a directory, unreadable, not named as a Kafka segment file),
    ``ignored`` those with an unknown suffix, ``damaged`` the index files found corrupt
    (dumped up to the fault, or failing ``index_sanity_check``). Not thread-safe; one
    consumer iterates it once.
    """

    paths: Iterable[str | os.PathLike[str]]
    options: DumpOptions = field(default_factory=DumpOptions)
    # For a consumer that only wants Kafka's text: plain record lines come per batch as one
    # RecordLinesEvent instead of one RecordEvent per record (faster, same text).
    text_fast_path: bool = False
    dumped: int = 0
    failed: int = 0
    ignored: int = 0
    _tally: ReportTally = field(default_factory=ReportTally)

    @property
    def damaged(self) -> int:
        return self._tally.damaged

    def __iter__(self) -> Iterator[DumpEvent]:
        self._parse = message_parser(self.options)
        for arg in self.paths:
            yield from self._dump_one(os.fspath(arg))
        yield from self._tally.events()

    def _dump_one(self, arg: str) -> Iterator[DumpEvent]:
        path = Path(arg)
        if not path.exists():
            self.failed += 1
            yield FileErrorEvent(arg, f"{arg}: no such file")
            return
        if path.is_dir():
            self.failed += 1
            yield FileErrorEvent(arg, f"{arg}: is a directory; give the segment files in it")
            return
        name = path.name
        suffix = name[name.rfind(".") :] if "." in name else ""
        if not self.options.force and not _kafka_file_name(name, suffix):
            self.failed += 1
            yield FileErrorEvent(arg, _not_a_segment_message(arg, suffix))
            return
        yield FileEvent(arg)
        opts, tally = self.options, self._tally
        try:
            if suffix in (LOG_FILE_SUFFIX, KRAFT_SNAPSHOT_FILE_SUFFIX):
                yield from dump_log(arg, path, opts, self._parse, tally, self.text_fast_path)
            elif suffix == INDEX_FILE_SUFFIX:
                yield from dump_offset_index(arg, path, opts, tally)
            elif suffix == TIME_INDEX_FILE_SUFFIX:
                yield from dump_time_index(arg, path, opts, tally)
            elif suffix == PRODUCER_SNAPSHOT_FILE_SUFFIX:
                yield from _dump_producer_snapshot(arg, path)
            elif suffix == TXN_INDEX_FILE_SUFFIX:
                yield from dump_txn_index(arg, path, tally)
            else:
                self.ignored += 1
                yield UnknownFileEvent(arg)
                return
        except OSError as exc:
            self.failed += 1
            yield FileErrorEvent(arg, f"{arg}: {exc.strerror or exc}")
            return
        self.dumped += 1


def _dump_producer_snapshot(arg: str, path: Path) -> Iterator[DumpEvent]:
    from klog.storage.producer_state import CorruptSnapshotError, read_snapshot

    try:
        entries = read_snapshot(path)
    except (CorruptSnapshotError, KafkaError) as exc:
        # Kafka prints the CorruptSnapshotException's message and carries on.
        yield ProblemEvent(arg, str(exc))
        return
    for entry in entries:
        yield snapshot_event(entry)


def dump_files(
    paths: Iterable[str | os.PathLike[str]], options: DumpOptions | None = None
) -> Iterator[DumpEvent]:
    """Every event of dumping ``paths`` in order (see DumpRun for the counters)."""
    return iter(DumpRun(paths, options or DumpOptions()))
