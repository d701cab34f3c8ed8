"""Broker-level checkpoint files and meta.properties, in Kafka's exact text formats.

This module owns the small text files a Kafka log dir keeps beside its partition dirs:

- the offset checkpoints (Kafka's ``OffsetCheckpointFile`` on top of ``CheckpointFile``)::

      0                       version, always 0
      3                       number of entries
      first_topic 0 11        topic, partition, offset; separated by whitespace
      ...

  written as ``recovery-point-offset-checkpoint``, ``log-start-offset-checkpoint``,
  ``replication-offset-checkpoint`` and ``cleaner-offset-checkpoint``. An empty file is an
  empty checkpoint (Kafka creates the file before it ever writes it);
- ``meta.properties`` (Java properties, parsed by storage/properties.py), version 0
  (``broker.id``, optional ``cluster.id``; ZooKeeper mode) or version 1 (``node.id`` and
  ``cluster.id`` required; KRaft), both with an optional ``directory.id``;
- the names of the ``.kafka_cleanshutdown`` marker and the ``.lock`` file.

Writes are atomic as Kafka makes them: write ``<name>.tmp``, fsync it, rename over the
target, fsync the directory, so a crash leaves either the old or the new file, never half
of one. Functions here hold no state and take no locks: the caller (LogManager, or the
offline tools with the log dir's ``.lock`` held) serialises writers of one file.

``read_checkpoint_entries`` / ``write_checkpoint_lines`` are the generic layer; the
per-partition ``leader-epoch-checkpoint`` (``epoch start_offset`` entries) uses the same
framing and may reuse them.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from klog.storage.properties import PropertiesError, format_properties, parse_properties

RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"
REPLICATION_OFFSET_CHECKPOINT = "replication-offset-checkpoint"
CLEANER_OFFSET_CHECKPOINT = "cleaner-offset-checkpoint"
OFFSET_CHECKPOINT_FILES = (
    RECOVERY_POINT_CHECKPOINT,
    LOG_START_OFFSET_CHECKPOINT,
    REPLICATION_OFFSET_CHECKPOINT,
    CLEANER_OFFSET_CHECKPOINT,
)
LEADER_EPOCH_CHECKPOINT = "leader-epoch-checkpoint"
META_PROPERTIES = "meta.properties"
CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"
LOCK_FILE = ".lock"

OFFSET_CHECKPOINT_VERSION = 0

# A checkpoint names partitions of this broker: a few hundred thousand lines at most. Bound
# the line length so a garbage file with no newlines cannot make us read gigabytes at once.
_MAX_LINE = 64 * 1024
_INT_RE = re.compile(r"[+-]?[0-9]+")
_INT32 = (-(2**31), 2**31 - 1)
_INT64 = (-(2**63), 2**63 - 1)

TopicPartition = tuple[str, int]
T = TypeVar("T")


class CheckpointError(ValueError):
    """A checkpoint or meta.properties file whose content is malformed.

    ``path`` and ``line`` (1-based, or None for whole-file problems) say where.
    """

    def __init__(self, path: Path | str, line: int | None, message: str) -> None:
        where = f"{path}" if line is None else f"{path}, line {line}"
        super().__init__(f"{where}: {message}")
        self.path = Path(path)
        self.line = line
        self.reason = message


def parse_int(text: str, bits: int = 64) -> int | None:
    """A base-10 integer as Java's parseInt/parseLong reads it, or None.

    Stricter than ``int()``: no underscores, no surrounding whitespace, range-checked.
    """
    if not _INT_RE.fullmatch(text):
        return None
    value = int(text)
    low, high = _INT32 if bits == 32 else _INT64
    return value if low <= value <= high else None


def _lines(path: Path) -> Iterable[tuple[int, str]]:
    with open(path, encoding="utf-8", errors="strict", newline=None) as fh:
        number = 0
        while True:
            raw = fh.readline(_MAX_LINE + 1)
            if not raw:
                return
            number += 1
            if len(raw) > _MAX_LINE and not raw.endswith("\n"):
                raise CheckpointError(path, number, f"line longer than {_MAX_LINE} characters")
            yield number, raw.rstrip("\r\n")


def read_checkpoint_entries(
    path: Path | str, version: int, parse_entry: Callable[[str], T | None]
) -> list[T]:
    """Entries of a ``CheckpointFile``: version line, count line, one entry per line.

    ``parse_entry`` returns None for a malformed line. An empty file, or one holding only
    the version line, has no entries (as in Kafka). Raises CheckpointError naming the file
    and line for a wrong version, a bad integer, a malformed entry or a count mismatch;
    OSError when the file cannot be read.
    """
    path = Path(path)
    expected: int | None = None
    entries: list[T] = []
    try:
        for number, line in _lines(path):
            if number == 1:
                found = parse_int(line, 32)
                if found is None:
                    raise CheckpointError(path, 1, f"malformed version line {line!r}")
                if found != version:
                    raise CheckpointError(
                        path, 1, f"unrecognised version {found}, expected {version}"
                    )
            elif number == 2:
                expected = parse_int(line, 32)
                if expected is None or expected < 0:
                    raise CheckpointError(path, 2, f"malformed entry count {line!r}")
            else:
                entry = parse_entry(line)
                if entry is None:
                    raise CheckpointError(path, number, f"malformed entry {line!r}")
                entries.append(entry)
    except UnicodeDecodeError as exc:
        raise CheckpointError(path, None, f"not UTF-8 text ({exc.reason})") from None
    if expected is not None and expected != len(entries):
        raise CheckpointError(
            path, None, f"expected {expected} entries but found {len(entries)}"
        )
    return entries


def _parse_offset_entry(line: str) -> tuple[TopicPartition, int] | None:
    parts = line.split()
    if len(parts) != 3:
        return None
    topic, partition_text, offset_text = parts
    partition = parse_int(partition_text, 32)
    offset = parse_int(offset_text, 64)
    if partition is None or offset is None:
        return None
    return (topic, partition), offset


def read_offset_checkpoint(path: Path | str) -> dict[TopicPartition, int]:
    """``{(topic, partition): offset}`` from one of the four offset checkpoint files.

    A later line for the same partition wins, as Kafka's map does.
    """
    return dict(read_checkpoint_entries(path, OFFSET_CHECKPOINT_VERSION, _parse_offset_entry))


def fsync_dir(directory: Path | str) -> None:
    """fsync a directory so a rename or a new file in it survives a crash."""
    try:
        fd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return  # platforms without directory fds: Kafka ignores this too
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def atomic_write_text(path: Path | str, text: str) -> None:
    """Replace ``path`` with ``text`` atomically: tmp file, fsync, rename, fsync dir."""
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_bytes(path: Path | str, data: bytes) -> None:
    """Replace ``path`` with ``data`` atomically: tmp file, fsync, rename, fsync dir.

    Every small metadata file klog writes (checkpoints, leader epochs, producer
    snapshots) goes through here, so a crash leaves either the old file or the new one.
    """
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    try:
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)


def write_checkpoint_lines(path: Path | str, version: int, lines: Iterable[str]) -> None:
    """Write a ``CheckpointFile`` (version, count, one line per entry) atomically."""
    body = list(lines)
    atomic_write_text(path, "".join(f"{line}\n" for line in [str(version), str(len(body)), *body]))


def write_offset_checkpoint(path: Path | str, offsets: Mapping[TopicPartition, int]) -> None:
    """Write ``{(topic, partition): offset}`` as an offset checkpoint file, atomically."""
    lines = []
    for (topic, partition), offset in offsets.items():
        if not topic or any(ch.isspace() for ch in topic):
            raise ValueError(f"topic name {topic!r} cannot be written to a checkpoint")
        lines.append(f"{topic} {int(partition)} {int(offset)}")
    write_checkpoint_lines(path, OFFSET_CHECKPOINT_VERSION, lines)


# --------------------------------------------------------------------------- meta.properties


@dataclass(frozen=True, slots=True)
class MetaProperties:
    """The per-log-dir identity in ``meta.properties`` (Kafka's MetaProperties).

    ``node_id`` is ``broker.id`` in version 0 (may be absent) and ``node.id`` in version 1
    (required, like ``cluster_id``). ``directory_id`` is a base64 Kafka Uuid, kept as text.
    """

    version: int = 0
    node_id: int | None = None
    cluster_id: str | None = None
    directory_id: str | None = None

    @property
    def broker_id(self) -> int | None:
        return self.node_id


_META_VERSIONS = (0, 1)
_DIRECTORY_ID_RE = re.compile(r"[A-Za-z0-9_-]{22}")


def read_meta_properties(path: Path | str) -> MetaProperties:
    """Parse ``meta.properties``; CheckpointError when a field is missing or malformed."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise CheckpointError(path, None, f"not UTF-8 text ({exc.reason})") from None
    try:
        props = parse_properties(text)
    except PropertiesError as exc:
        raise CheckpointError(path, exc.line, exc.reason) from None
    version_text = props.get("version", "0")
    version = parse_int(version_text, 32)
    if version not in _META_VERSIONS:
        raise CheckpointError(path, None, f"unknown meta.properties version {version_text!r}")
    id_key = "broker.id" if version == 0 else "node.id"
    node_id: int | None = None
    if id_key in props:
        node_id = parse_int(props[id_key], 32)
        if node_id is None:
            raise CheckpointError(path, None, f"{id_key} {props[id_key]!r} is not an integer")
    elif version == 1:
        raise CheckpointError(path, None, "node.id was not found")
    cluster_id = props.get("cluster.id")
    if version == 1 and cluster_id is None:
        raise CheckpointError(path, None, "cluster.id was not found")
    directory_id = props.get("directory.id")
    if directory_id is not None and not _DIRECTORY_ID_RE.fullmatch(directory_id):
        raise CheckpointError(path, None, f"directory.id {directory_id!r} is not a Kafka Uuid")
    return MetaProperties(version, node_id, cluster_id, directory_id)


def format_meta_properties(meta: MetaProperties, *, now: float | None = None) -> str:
    """The text Kafka's ``Properties.store(writer, "")`` writes: empty comment, date, keys."""
    if meta.version not in _META_VERSIONS:
        raise ValueError(f"unknown meta.properties version {meta.version}")
    if meta.version == 1 and (meta.node_id is None or meta.cluster_id is None):
        raise ValueError("meta.properties version 1 needs node.id and cluster.id")
    props: dict[str, str] = {}
    if meta.cluster_id is not None:
        props["cluster.id"] = meta.cluster_id
    props["version"] = str(meta.version)
    if meta.node_id is not None:
        props["broker.id" if meta.version == 0 else "node.id"] = str(meta.node_id)
    if meta.directory_id is not None:
        props["directory.id"] = meta.directory_id
    # Java's Date.toString(): "Wed Apr 22 11:14:59 CDT 2020".
    stamp = time.strftime("%a %b %d %H:%M:%S %Z %Y", time.localtime(now))
    lines = ["#", f"#{stamp}"]
    lines += format_properties(props)
    return "".join(f"{line}\n" for line in lines)


def write_meta_properties(path: Path | str, meta: MetaProperties) -> None:
    """Write ``meta.properties`` atomically, with Kafka's timestamp comment."""
    atomic_write_text(path, format_meta_properties(meta))
