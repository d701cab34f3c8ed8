"""Kafka's names for the files of a partition directory: the one place that spells them.

A segment's files are named after its base offset, zero-padded to 20 digits
(``00000000000000000042.log``), with Kafka's suffixes: ``.log``, ``.index``,
``.timeindex``, ``.txnindex``, and ``.snapshot`` for producer state snapshots (named after
the offset they were taken at). An operation in progress adds a second suffix
(``.deleted``, ``.cleaned``, ``.swap``, ``.tmp``) that loading finishes or removes, as
Kafka's LogLoader does. KRaft's metadata snapshots (``<offset>-<epoch>.checkpoint``) are
named here too: klog runs in ZooKeeper mode but ``klog dump-segment`` reads them.

Everything that names or recognises these files (segment.py, log.py, producer_state.py,
audit.py, the offline tools, spark/offline.py) takes the names from here, and the offline
tools take a partition dir's name pattern from here too. Pure functions on names and
paths: nothing here touches the file system.
"""

from __future__ import annotations

import re
from pathlib import Path

LOG_FILE_SUFFIX = ".log"
INDEX_FILE_SUFFIX = ".index"
TIME_INDEX_FILE_SUFFIX = ".timeindex"
TXN_INDEX_FILE_SUFFIX = ".txnindex"
PRODUCER_SNAPSHOT_FILE_SUFFIX = ".snapshot"
DELETED_FILE_SUFFIX = ".deleted"
CLEANED_FILE_SUFFIX = ".cleaned"
SWAP_FILE_SUFFIX = ".swap"
TMP_FILE_SUFFIX = ".tmp"

# A segment's three (rebuildable) index files.
INDEX_FILE_SUFFIXES = (INDEX_FILE_SUFFIX, TIME_INDEX_FILE_SUFFIX, TXN_INDEX_FILE_SUFFIX)
# What an interrupted deletion, clean or segment replacement leaves behind.
LEFTOVER_FILE_SUFFIXES = (SWAP_FILE_SUFFIX, CLEANED_FILE_SUFFIX, DELETED_FILE_SUFFIX)

KRAFT_SNAPSHOT_FILE_SUFFIX = ".checkpoint"
KRAFT_BOOTSTRAP_FILENAME = "bootstrap.checkpoint"

# A segment's .log, exactly as Kafka names it; group 1 is the base offset.
LOG_FILE_NAME_RE = re.compile(r"^([0-9]{20})\.log$")
# The other files named after a segment's base offset.
SEGMENT_COMPANION_FILE_NAME_RE = re.compile(r"^[0-9]{20}\.(index|timeindex|txnindex|snapshot)$")
# A partition dir: <topic>-<partition> (groups 1 and 2), optionally with the suffix Kafka
# gives dirs awaiting deletion, future replicas (alter-log-dirs) and strays:
# "<topic>-<p>.<32 hex>-delete" (groups 3 and 4). A topic name is Kafka's legal characters
# only, at most 249 of them (Topic.validate).
PARTITION_DIR_NAME_RE = re.compile(
    r"^([a-zA-Z0-9._-]{1,249})-([0-9]+)(?:\.([0-9a-f]{32})-(delete|future|stray))?$"
)
# A KRaft metadata snapshot: groups 1 and 2 are the end offset and the epoch.
KRAFT_SNAPSHOT_FILE_NAME_RE = re.compile(r"^(\d{20})-(\d{10})\.checkpoint$")


def filename_prefix_from_offset(offset: int) -> str:
    """Kafka's 20-digit, zero-padded base offset that names a segment's files."""
    return f"{offset:020d}"


def offset_from_filename(name: str) -> int:
    """The base offset of a segment file name such as ``00000000000000000042.log.deleted``."""
    prefix = Path(name).name.split(".", 1)[0]
    if not prefix.isdigit():
        raise ValueError(f"{name!r} is not named after a base offset")
    return int(prefix)


def offset_from_filename_or_none(name: str) -> int | None:
    """``offset_from_filename``, or None for a name that does not start with an offset."""
    try:
        return offset_from_filename(name)
    except ValueError:
        return None


def is_segment_file_name(name: str) -> bool:
    """A .log, index or producer snapshot file named exactly as Kafka names them."""
    return (
        LOG_FILE_NAME_RE.match(name) is not None
        or SEGMENT_COMPANION_FILE_NAME_RE.match(name) is not None
    )


def log_file_path(directory: Path, base_offset: int, suffix: str = "") -> Path:
    return directory / f"{filename_prefix_from_offset(base_offset)}{LOG_FILE_SUFFIX}{suffix}"


def offset_index_file_path(directory: Path, base_offset: int, suffix: str = "") -> Path:
    return directory / f"{filename_prefix_from_offset(base_offset)}{INDEX_FILE_SUFFIX}{suffix}"


def time_index_file_path(directory: Path, base_offset: int, suffix: str = "") -> Path:
    name = f"{filename_prefix_from_offset(base_offset)}{TIME_INDEX_FILE_SUFFIX}{suffix}"
    return directory / name


def txn_index_file_path(directory: Path, base_offset: int, suffix: str = "") -> Path:
    name = f"{filename_prefix_from_offset(base_offset)}{TXN_INDEX_FILE_SUFFIX}{suffix}"
    return directory / name


def producer_snapshot_file_path(directory: Path, offset: int) -> Path:
    """The producer state snapshot taken at ``offset`` (Kafka's UnifiedLog.producerSnapshotFile)."""
    return Path(directory) / f"{filename_prefix_from_offset(offset)}{PRODUCER_SNAPSHOT_FILE_SUFFIX}"
