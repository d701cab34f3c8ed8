"""The events of a dump and their two renderings: Kafka's text and JSON.

Each event is something ``klog dump-segment`` found (a file header, a batch, a record, an
index entry, a snapshot entry, an aborted transaction, a problem, an end-of-run report);
``to_kafka_line`` gives Kafka 3.x's DumpLogSegments line character for character (scripts
that parse ``kafka-dump-log.sh`` keep working) and ``to_json`` one JSON object.
``stream`` says where Kafka prints it (stdout or stderr). ``ReportTally`` collects what the
end-of-run reports list while files are dumped.

``Any`` below: the events' ``to_json`` give JSON documents, and a parser's key and payload
are what --print-data-log shows.
"""

from __future__ import annotations

import json
import os
import struct
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from klog.protocol.errors import KafkaError
from klog.protocol.records.batch import MAGIC_V2, BatchHeader, CompressionType

if TYPE_CHECKING:
    from klog.protocol.records.record import Record
    from klog.storage.producer_state import ProducerSnapshotEntry
    from klog.tools.dump.parsers import Parser

OUT = "out"
ERR = "err"

_INT16 = struct.Struct(">h")



class DumpEvent:
    """Something the dump found; ``stream`` says where Kafka prints it (stdout or stderr)."""

    __slots__ = ()
    stream: ClassVar[str] = OUT
    kind: ClassVar[str] = "event"

    def to_kafka_line(self) -> str:
        """Kafka's text for this event, newline included (some reports span lines)."""
        raise NotImplementedError

    def to_json(self) -> dict[str, Any]:
        raise NotImplementedError


def _bool(value: bool) -> str:
    return "true" if value else "false"


def java_path(path: str) -> str:
    # java.io.File.getAbsolutePath: cwd prepended, nothing normalised.
    return path if os.path.isabs(path) else os.path.join(os.getcwd(), path)


@dataclass(frozen=True, slots=True)
class FileEvent(DumpEvent):
    """``Dumping <file>``: the start of a file."""

    kind: ClassVar[str] = "file"
    path: str

    def to_kafka_line(self) -> str:
        return f"Dumping {self.path}\n"

    def to_json(self) -> dict[str, Any]:
        return {"type": self.kind, "path": self.path}


@dataclass(frozen=True, slots=True)
class LogStartOffsetEvent(DumpEvent):
    kind: ClassVar[str] = "log_start_offset"
    base_offset: int

    def to_kafka_line(self) -> str:
        return f"Log starting offset: {self.base_offset}\n"

    def to_json(self) -> dict[str, Any]:
        return {"type": self.kind, "baseOffset": self.base_offset}


@dataclass(frozen=True, slots=True)
class SnapshotHeaderEvent(DumpEvent):
    """The first line of a KRaft snapshot (``.checkpoint``) dump."""

    kind: ClassVar[str] = "snapshot_header"
    end_offset: int | None
    epoch: int | None

    def to_kafka_line(self) -> str:
        if self.end_offset is None:
            return "KRaft bootstrap snapshot\n"
        return f"Snapshot end offset: {self.end_offset}, epoch: {self.epoch}\n"

    def to_json(self) -> dict[str, Any]:
        return {"type": self.kind, "endOffset": self.end_offset, "epoch": self.epoch}


def _codec_name(header: BatchHeader) -> str:
    codec = header.compression_id
    try:
        return CompressionType(codec).kafka_name
    except ValueError:
        return f"unknown({codec})"


@dataclass(frozen=True, slots=True)
class BatchEvent(DumpEvent):
    """One batch (v2) or shallow message (v0/v1); ``position`` is its place in the file."""

    kind: ClassVar[str] = "batch"
    header: BatchHeader
    position: int
    is_valid: bool

    @property
    def delete_horizon_ms(self) -> int | None:
        h = self.header
        return h.base_timestamp if h.has_delete_horizon else None

    def to_kafka_line(self) -> str:
        h = self.header
        tail = (
            f" position: {self.position} {h.timestamp_type.kafka_name}: {h.max_timestamp}"
            f" size: {h.size} magic: {h.magic} compresscodec: {_codec_name(h)}"
            f" crc: {h.crc} isvalid: {_bool(self.is_valid)}\n"
        )
        if h.magic < MAGIC_V2:
            return f"offset: {h.last_offset}{tail}"
        horizon = self.delete_horizon_ms
        # Kafka prints the OptionalLong itself.
        horizon_text = "OptionalLong.empty" if horizon is None else f"OptionalLong[{horizon}]"
        return (
            f"baseOffset: {h.base_offset} lastOffset: {h.last_offset} count: {h.records_count}"
            f" baseSequence: {h.base_sequence} lastSequence: {h.last_sequence}"
            f" producerId: {h.producer_id} producerEpoch: {h.producer_epoch}"
            f" partitionLeaderEpoch: {h.partition_leader_epoch}"
            f" isTransactional: {_bool(h.is_transactional)}"
            f" isControl: {_bool(h.is_control)} deleteHorizonMs: {horizon_text}{tail}"
        )

    def to_json(self) -> dict[str, Any]:
        h = self.header
        out: dict[str, Any] = {"type": self.kind}
        if h.magic >= MAGIC_V2:
            out.update(
                baseOffset=h.base_offset,
                lastOffset=h.last_offset,
                count=h.records_count,
                baseSequence=h.base_sequence,
                lastSequence=h.last_sequence,
                producerId=h.producer_id,
                producerEpoch=h.producer_epoch,
                partitionLeaderEpoch=h.partition_leader_epoch,
                isTransactional=h.is_transactional,
                isControl=h.is_control,
                deleteHorizonMs=self.delete_horizon_ms,
            )
        else:
            out["offset"] = h.last_offset
        out.update(
            position=self.position,
            timestampType=h.timestamp_type.kafka_name,
            maxTimestamp=h.max_timestamp,
            size=h.size,
            magic=h.magic,
            compresscodec=_codec_name(h),
            crc=h.crc,
            isvalid=self.is_valid,
        )
        return out


def _text(value: object) -> str:
    # Kafka's JSON (Jackson ObjectNode.toString): compact, non-ASCII kept as is.
    if isinstance(value, str):
        return value
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


class BatchContext:
    """What every record of one batch shares, so a RecordEvent carries two references.

    ``plain`` says the records print as bare v2 metadata lines (no data, not control):
    decided once per batch, so the per-record path has one branch.
    """

    __slots__ = ("is_control", "magic", "parse", "plain", "show_metadata", "ts_type")

    def __init__(
        self, ts_type: str, magic: int, show_metadata: bool, is_control: bool,
        parse: Parser | None,
    ) -> None:
        self.ts_type = ts_type
        self.magic = magic
        self.show_metadata = show_metadata
        self.is_control = is_control
        self.parse = parse
        self.plain = show_metadata and magic >= MAGIC_V2 and not is_control and parse is None


def _fmt_general(r: Record, ctx: BatchContext) -> str:
    prefix = "| "
    line = ""
    if ctx.show_metadata:
        k = r.key
        v = r.value
        line = (
            f"| offset: {r.offset} {ctx.ts_type}: {r.timestamp}"
            f" keySize: {-1 if k is None else len(k)} valueSize: {-1 if v is None else len(v)}"
        )
        if ctx.magic >= MAGIC_V2:
            hs = r.headers
            keys = "[" + ",".join([h[0] for h in hs]) + "]" if hs else "[]"
            line = f"{line} sequence: {r.sequence} headerKeys: {keys}"
        else:
            # Kafka's format string has a stray brace after the crc; scripts expect it.
            line = f"{line} isValid: {_bool(r.is_valid)} crc: {r.crc}}}"
        if ctx.is_control:
            line += _control_text(_control_of(r))
        prefix = " "
    if ctx.parse is not None:
        key, payload = ctx.parse(r)
        if key is not None:
            line = f"{line}{prefix}key: {_text(key)}"
        if payload is not None:
            line = f"{line} payload: {_text(payload)}"
    # With --skip-record-metadata and no data Kafka still ends the (empty) line.
    return line + "\n"


class RecordEvent(DumpEvent):
    """One record of a deep iteration (a ``| offset: ...`` line).

    A plain slotted class rather than a dataclass, holding the decoded record and its
    batch's shared context: this is the one event created per record, and its cost shows
    in the dump's records/s. Key/payload decoding (--print-data-log and the decoders)
    happens when the event is rendered.
    """

    __slots__ = ("ctx", "record")
    kind: ClassVar[str] = "record"

    def __init__(self, record: Record, ctx: BatchContext) -> None:
        self.record = record
        self.ctx = ctx

    @property
    def control(self) -> tuple[str, int] | None:
        """(marker or control type name, coordinator epoch or type id) of a control record."""
        return _control_of(self.record) if self.ctx.is_control else None

    def key_and_payload(self) -> tuple[Any, Any]:
        """What --print-data-log shows (None, None when it is off or for control records)."""
        parse = self.ctx.parse
        return (None, None) if parse is None else parse(self.record)

    def to_kafka_line(self) -> str:
        ctx = self.ctx
        if ctx.plain:
            return fmt_plain(self.record, ctx.ts_type)
        return _fmt_general(self.record, ctx)

    def to_json(self) -> dict[str, Any]:
        r = self.record
        ctx = self.ctx
        out: dict[str, Any] = {
            "type": self.kind,
            "offset": r.offset,
            "timestampType": ctx.ts_type,
            "timestamp": r.timestamp,
            "keySize": r.key_size,
            "valueSize": r.value_size,
        }
        if ctx.magic >= MAGIC_V2:
            out["sequence"] = r.sequence
            out["headerKeys"] = [h[0] for h in r.headers]
        else:
            out["isValid"] = r.is_valid
            out["crc"] = r.crc
        control = self.control
        if control is not None:
            name, number = control
            if name in ("COMMIT", "ABORT"):
                out["endTxnMarker"] = name
                out["coordinatorEpoch"] = number
            else:
                out["controlType"] = name
                out["controlTypeId"] = number
        key, payload = self.key_and_payload()
        if key is not None:
            out["key"] = key
        if payload is not None:
            out["payload"] = payload
        return out


def fmt_plain(r: Record, ts_type: str) -> str:
    # The --deep-iteration hot path: one f-string per record.
    k = r.key
    v = r.value
    hs = r.headers
    return (
        f"| offset: {r.offset} {ts_type}: {r.timestamp}"
        f" keySize: {-1 if k is None else len(k)} valueSize: {-1 if v is None else len(v)}"
        f" sequence: {r.sequence}"
        f" headerKeys: {'[' + ','.join([h[0] for h in hs]) + ']' if hs else '[]'}\n"
    )


class RecordLinesEvent(DumpEvent):
    """The Kafka lines of all records of one batch, already rendered.

    Yielded instead of RecordEvents when a DumpRun is asked for ``text_fast_path`` and the
    batch's records print as plain metadata lines: the text is built by C-level loops
    (map/join), with no per-record event object. ``to_json`` is not available on it; a
    run that wants JSON leaves the fast path off.
    """

    __slots__ = ("count", "text")
    kind: ClassVar[str] = "record_lines"

    def __init__(self, text: str, count: int) -> None:
        self.text = text
        self.count = count

    def to_kafka_line(self) -> str:
        return self.text

    def to_json(self) -> dict[str, Any]:
        raise TypeError("RecordLinesEvent has no JSON form; run without text_fast_path")


def _control_text(control: tuple[str, int]) -> str:
    name, number = control
    if name in ("COMMIT", "ABORT"):
        return f" endTxnMarker: {name} coordinatorEpoch: {number}"
    return f" controlType: {name}({number})"


@dataclass(frozen=True, slots=True)
class TrailingBytesEvent(DumpEvent):
    """``Found N invalid bytes at the end of <name>``: a torn or garbage tail."""

    kind: ClassVar[str] = "invalid_bytes"
    count: int
    file_name: str
    position: int

    def to_kafka_line(self) -> str:
        return f"Found {self.count} invalid bytes at the end of {self.file_name}\n"

    def to_json(self) -> dict[str, Any]:
        return {
            "type": self.kind,
            "count": self.count,
            "file": self.file_name,
            "position": self.position,
        }


@dataclass(frozen=True, slots=True)
class ProblemEvent(DumpEvent):
    """A problem found in a file's bytes (klog's addition; Kafka would often crash)."""

    stream: ClassVar[str] = ERR
    kind: ClassVar[str] = "problem"
    path: str
    message: str
    position: int | None = None

    def to_kafka_line(self) -> str:
        if self.position is None and self.path in self.message:
            return f"{self.message}\n"
        where = "" if self.position is None else f" at position {self.position}"
        return f"{self.path}{where}: {self.message}\n"

    def to_json(self) -> dict[str, Any]:
        return {
            "type": self.kind,
            "path": self.path,
            "position": self.position,
            "message": self.message,
        }


@dataclass(frozen=True, slots=True)
class FileErrorEvent(DumpEvent):
    """A file that could not be dumped at all (missing, a directory, unreadable)."""

    stream: ClassVar[str] = ERR
    kind: ClassVar[str] = "error"
    path: str
    message: str

    def to_kafka_line(self) -> str:
        return f"{self.message}\n"

    def to_json(self) -> dict[str, Any]:
        return {"type": self.kind, "path": self.path, "message": self.message}


@dataclass(frozen=True, slots=True)
class CorruptIndexEvent(DumpEvent):
    """An index file whose bytes are not a valid index from ``entry`` on (klog's addition).

    ``entry`` is the number of the first bad entry (None when the fault is the file as a
    whole, e.g. its size), ``byte`` where it starts in the file. Dumping that file stops
    there: what follows cannot be trusted to mean anything.
    """

    stream: ClassVar[str] = ERR
    kind: ClassVar[str] = "corrupt_index"
    path: str
    message: str
    entry: int | None = None
    byte: int | None = None

    def to_kafka_line(self) -> str:
        if self.path in self.message:
            return f"{self.message}\n"
        return f"{self.path}: {self.message}\n"

    def to_json(self) -> dict[str, Any]:
        return {
            "type": self.kind,
            "path": self.path,
            "entry": self.entry,
            "byte": self.byte,
            "message": self.message,
        }


@dataclass(frozen=True, slots=True)
class UnknownFileEvent(DumpEvent):
    stream: ClassVar[str] = ERR
    kind: ClassVar[str] = "unknown_file"
    path: str

    def to_kafka_line(self) -> str:
        return f"Ignoring unknown file {self.path}\n"

    def to_json(self) -> dict[str, Any]:
        return {"type": self.kind, "path": self.path}


@dataclass(frozen=True, slots=True)
class IndexEntryEvent(DumpEvent):
    kind: ClassVar[str] = "index_entry"
    offset: int
    position: int

    def to_kafka_line(self) -> str:
        return f"offset: {self.offset} position: {self.position}\n"

    def to_json(self) -> dict[str, Any]:
        return {"type": self.kind, "offset": self.offset, "position": self.position}


@dataclass(frozen=True, slots=True)
class TimeIndexEntryEvent(DumpEvent):
    kind: ClassVar[str] = "time_index_entry"
    timestamp: int
    offset: int

    def to_kafka_line(self) -> str:
        return f"timestamp: {self.timestamp} offset: {self.offset}\n"

    def to_json(self) -> dict[str, Any]:
        return {"type": self.kind, "timestamp": self.timestamp, "offset": self.offset}


@dataclass(frozen=True, slots=True)
class IndexEmptyEvent(DumpEvent):
    kind: ClassVar[str] = "index_empty"
    path: str

    def to_kafka_line(self) -> str:
        return f"{self.path} is empty.\n"

    def to_json(self) -> dict[str, Any]:
        return {"type": self.kind, "path": self.path}


@dataclass(frozen=True, slots=True)
class SanityCheckEvent(DumpEvent):
    kind: ClassVar[str] = "sanity_check"
    path: str

    def to_kafka_line(self) -> str:
        return f"{self.path} passed sanity check.\n"

    def to_json(self) -> dict[str, Any]:
        return {"type": self.kind, "path": self.path, "passed": True}


@dataclass(frozen=True, slots=True)
class SnapshotEntryEvent(DumpEvent):
    """One producer of a ``.snapshot`` file (Kafka's ProducerStateEntry)."""

    kind: ClassVar[str] = "producer_snapshot_entry"
    producer_id: int
    producer_epoch: int
    coordinator_epoch: int
    current_txn_first_offset: int | None
    last_timestamp: int
    # (firstSequence, lastSequence, lastOffset, offsetDelta, timestamp) of the newest batch
    batch: tuple[int, int, int, int, int] | None

    def to_kafka_line(self) -> str:
        first = self.current_txn_first_offset
        txn = "OptionalLong.empty" if first is None else f"OptionalLong[{first}]"
        line = (
            f"producerId: {self.producer_id} producerEpoch: {self.producer_epoch} "
            f"coordinatorEpoch: {self.coordinator_epoch} currentTxnFirstOffset: {txn} "
            f"lastTimestamp: {self.last_timestamp} "
        )
        if self.batch is not None:
            first_seq, last_seq, last_offset, delta, timestamp = self.batch
            line += (
                f"firstSequence: {first_seq} lastSequence: {last_seq} lastOffset: {last_offset} "
                f"offsetDelta: {delta} timestamp: {timestamp}"
            )
        return line + "\n"

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "type": self.kind,
            "producerId": self.producer_id,
            "producerEpoch": self.producer_epoch,
            "coordinatorEpoch": self.coordinator_epoch,
            "currentTxnFirstOffset": self.current_txn_first_offset,
            "lastTimestamp": self.last_timestamp,
        }
        if self.batch is not None:
            first_seq, last_seq, last_offset, delta, timestamp = self.batch
            out.update(
                firstSequence=first_seq,
                lastSequence=last_seq,
                lastOffset=last_offset,
                offsetDelta=delta,
                timestamp=timestamp,
            )
        return out


@dataclass(frozen=True, slots=True)
class TxnIndexEntryEvent(DumpEvent):
    kind: ClassVar[str] = "aborted_txn"
    version: int
    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int

    def to_kafka_line(self) -> str:
        return (
            f"version: {self.version} producerId: {self.producer_id} "
            f"firstOffset: {self.first_offset} lastOffset: {self.last_offset} "
            f"lastStableOffset: {self.last_stable_offset}\n"
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "type": self.kind,
            "version": self.version,
            "producerId": self.producer_id,
            "firstOffset": self.first_offset,
            "lastOffset": self.last_offset,
            "lastStableOffset": self.last_stable_offset,
        }


@dataclass(frozen=True, slots=True)
class ReportEvent(DumpEvent):
    """An end-of-run report (stderr in Kafka): a title line and ``pairs`` of numbers.

    ``report`` is one of: index_mismatch, time_index_mismatch, time_index_out_of_order,
    time_index_offset_not_found, non_consecutive_offsets.
    """

    stream: ClassVar[str] = ERR
    kind: ClassVar[str] = "report"
    report: str
    path: str
    pairs: tuple[tuple[int, int], ...]

    _TITLES: ClassVar[dict[str, str]] = {
        "index_mismatch": "Mismatches in :{path}",
        "time_index_mismatch": "Found timestamp mismatch in :{path}",
        "time_index_out_of_order": "Found out of order timestamp in :{path}",
        "time_index_offset_not_found": "The following indexed offsets are not found in the log.",
        "non_consecutive_offsets": "Non-consecutive offsets in {path}",
    }
    _ITEMS: ClassVar[dict[str, str]] = {
        "index_mismatch": "  Index offset: {0}, log offset: {1}",
        "time_index_mismatch": "  Index timestamp: {0}, log timestamp: {1}",
        "time_index_out_of_order": "  Index timestamp: {0}, Previously indexed timestamp: {1}",
        "time_index_offset_not_found": "Indexed offset: {0}, found log offset: {1}",
        "non_consecutive_offsets": "  {0} is followed by {1}",
    }
    _JSON_NAMES: ClassVar[dict[str, tuple[str, str]]] = {
        "index_mismatch": ("indexOffset", "logOffset"),
        "time_index_mismatch": ("indexTimestamp", "logTimestamp"),
        "time_index_out_of_order": ("indexTimestamp", "previousIndexTimestamp"),
        "time_index_offset_not_found": ("indexedOffset", "logOffset"),
        "non_consecutive_offsets": ("offset", "followedBy"),
    }

    def to_kafka_line(self) -> str:
        lines = [self._TITLES[self.report].format(path=self.path)]
        item = self._ITEMS[self.report]
        lines.extend(item.format(a, b) for a, b in self.pairs)
        return "\n".join(lines) + "\n"

    def to_json(self) -> dict[str, Any]:
        first, second = self._JSON_NAMES[self.report]
        return {
            "type": self.kind,
            "report": self.report,
            "path": self.path,
            "entries": [{first: a, second: b} for a, b in self.pairs],
        }


Pairs = list[tuple[int, int]]


@dataclass
class ReportTally:
    """What the end-of-run reports list, per file (Kafka's java path of it), and the index
    files found damaged. Filled while files are dumped; ``events`` in Kafka's order."""

    index_mismatches: dict[str, Pairs] = field(default_factory=dict)
    time_mismatches: dict[str, Pairs] = field(default_factory=dict)
    time_out_of_order: dict[str, Pairs] = field(default_factory=dict)
    time_not_found: dict[str, Pairs] = field(default_factory=dict)
    non_consecutive: dict[str, Pairs] = field(default_factory=dict)
    damaged: int = 0

    def events(self) -> Iterator[ReportEvent]:
        # Kafka's order: index mismatches, the three time-index reports, then
        # non-consecutive offsets (the latter also prepended, so newest first).
        for path, pairs in self.index_mismatches.items():
            yield ReportEvent("index_mismatch", path, tuple(pairs))
        for path, pairs in self.time_mismatches.items():
            yield ReportEvent("time_index_mismatch", path, tuple(pairs))
        for path, pairs in self.time_out_of_order.items():
            yield ReportEvent("time_index_out_of_order", path, tuple(pairs))
        for path, pairs in self.time_not_found.items():
            yield ReportEvent("time_index_offset_not_found", path, tuple(pairs))
        for path, pairs in self.non_consecutive.items():
            yield ReportEvent("non_consecutive_offsets", path, tuple(pairs[::-1]))


def _control_of(record: Record) -> tuple[str, int]:
    from klog.protocol.records.control import ControlRecordType, EndTransactionMarker

    key = record.key
    if key is None or len(key) < 4:
        return ("UNKNOWN", -1)
    type_id = _INT16.unpack_from(key, 2)[0]
    control_type = ControlRecordType.from_type_id(type_id)
    if control_type in (ControlRecordType.COMMIT, ControlRecordType.ABORT):
        try:
            marker = EndTransactionMarker.from_record(record)
        except KafkaError:
            return ("UNKNOWN", type_id)
        return (marker.control_type.name, marker.coordinator_epoch)
    return (control_type.name, type_id)


def snapshot_event(entry: ProducerSnapshotEntry) -> SnapshotEntryEvent:
    """Kafka's view of a snapshot entry (ProducerStateManager.readSnapshot)."""
    batch = None
    if entry.offset_delta >= 0:
        last_seq, delta = entry.last_sequence, entry.offset_delta
        # DefaultRecordBatch.decrementSequence: wraps below zero to Integer.MAX_VALUE.
        first_seq = last_seq - delta if last_seq >= delta else 2**31 - 1 - (delta - last_seq) + 1
        batch = (first_seq, last_seq, entry.last_offset, delta, entry.timestamp)
    first_offset = entry.current_txn_first_offset
    return SnapshotEntryEvent(
        entry.producer_id,
        entry.producer_epoch,
        entry.coordinator_epoch,
        first_offset if first_offset >= 0 else None,
        entry.timestamp,
        batch,
    )
