"""The logic behind ``klog dump-segment``: Kafka's DumpLogSegments as a stream of events.

This module owns what the dump tool finds in a segment's files and how Kafka 3.x words it.
``dump_files(paths, options)`` yields typed events, one per file header, batch, record, index
entry, snapshot entry, aborted transaction and end-of-run report; each event renders itself
as Kafka's line (``to_kafka_line``, character for character, so scripts that parse
``kafka-dump-log.sh`` keep working) or as one JSON object (``to_json``). The CLI only prints.

Files are told apart by suffix, as Kafka does: ``.log`` (and KRaft ``.checkpoint``
snapshots, which are record batches too), ``.index``, ``.timeindex``, ``.snapshot``
(producer state), ``.txnindex``; anything else is "Ignoring unknown file". A file with one
of these suffixes must also be named as Kafka names it (``<20-digit base offset>.log``,
``<offset>-<epoch>.checkpoint``): an application's ``app.log`` is refused as a file error
unless ``DumpOptions.force`` says to dump it anyway. The file's dir is not checked: dumping
only reads, and a segment copied out of its partition dir is a normal thing to inspect.

Index files are checked for their shape before their entries are used: a size that is not
a whole number of entries, an entry below the base offset or with a negative position, or
entries that stop increasing (other than a preallocated zero tail) end the dump of that
file with a ``CorruptIndexEvent`` naming the entry and the fault, and count the file in
``DumpRun.damaged``.

Logs are streamed: the file is read in chunks of ``CHUNK_SIZE`` bytes and a batch is only
held whole when it is at most ``max(max_message_size, IN_MEMORY_BATCH_BOUND)`` bytes; a
bigger one has its CRC computed in chunks and its records are not decoded (a warning says
so). Memory therefore does not grow with the file. Nothing is ever written: every file is
opened read-only.

Where Kafka's tool would die with a stack trace on bad bytes (a length field below the
minimum, an index entry pointing past the log, an undecodable internal-topic record), this
module reports the problem as an event and carries on. Stdout lines stay Kafka's; the
explanations are extra lines on stderr.

``Any`` below: the events' ``to_json`` give JSON documents (``--json``), and a parser's key
and payload are what --print-data-log shows (decoded text, a JSON object of an internal
topic's record, or None).
"""

from __future__ import annotations

import base64
import json
import os
import struct
from bisect import bisect_right
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from itertools import chain, repeat
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, ClassVar

from klog.protocol import internal_topics as it
from klog.protocol.errors import KafkaError
from klog.protocol.records.batch import (
    LOG_OVERHEAD,
    MAGIC_V2,
    RECORD_BATCH_OVERHEAD,
    BatchHeader,
    CompressionType,
    read_batch_header,
)
from klog.protocol.records.v2 import record_columns
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
    offset_from_filename_or_none,
)
from klog.storage.index import ABORTED_TXN_SIZE, OFFSET_INDEX_ENTRY_SIZE, TIME_INDEX_ENTRY_SIZE
from klog.storage.walk import SHORT, TORN, BatchWalk

if TYPE_CHECKING:
    from klog.protocol.records.record import Record
    from klog.storage.index import AbortedTxn, OffsetIndex, TimeIndex
    from klog.storage.producer_state import ProducerSnapshotEntry

DEFAULT_MAX_MESSAGE_SIZE = 5 * 1024 * 1024  # Kafka's --max-message-size default
DEFAULT_MAX_BYTES = 2**31 - 1  # Kafka's --max-bytes default (Integer.MAX_VALUE)
CHUNK_SIZE = 1 << 20
# Batches up to this size (or --max-message-size, if larger) are read whole and can be
# decoded; Kafka's own limits (message.max.bytes ~1 MiB) sit far below it.
IN_MEMORY_BATCH_BOUND = 64 * 1024 * 1024
# Bound on one batch's decompressed records (a decompression bomb is refused, not expanded).
MAX_DECOMPRESSED_SIZE = 256 * 1024 * 1024

OUT = "out"
ERR = "err"

_NONE = CompressionType.NONE

# --------------------------------------------------------------------------------------------
# Options and decoders


DEFAULT_DECODER = "kafka.serializer.StringDecoder"

_STRING_NAMES = (
    "string",
    "kafka.serializer.StringDecoder",
    "org.apache.kafka.tools.api.StringDecoder",
)
_HEX_NAMES = (
    "hex",
    # Kafka's DefaultDecoder returns the raw byte[], which Java prints as "[B@<hash>";
    # hex is the useful rendering of "the bytes as they are".
    "kafka.serializer.DefaultDecoder",
    "org.apache.kafka.tools.api.DefaultDecoder",
)
_INT_NAMES = (
    "int",
    "kafka.serializer.IntegerDecoder",
    "org.apache.kafka.tools.api.IntegerDecoder",
)
_LONG_NAMES = (
    "long",
    "kafka.serializer.LongDecoder",
    "org.apache.kafka.tools.api.LongDecoder",
)
_BASE64_NAMES = ("base64",)

DECODER_NAMES = _STRING_NAMES + _HEX_NAMES + _INT_NAMES + _LONG_NAMES + _BASE64_NAMES

_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
_INT64 = struct.Struct(">q")


def _decode_string(data: bytes) -> str:
    # Java's new String(bytes, UTF_8) replaces malformed sequences; so does this.
    return data.decode("utf-8", "replace")


def _decode_hex(data: bytes) -> str:
    return data.hex()


def _decode_base64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _decode_int(data: bytes) -> str:
    # Like ByteBuffer.wrap(bytes).getInt(): the first four bytes, big-endian.
    if len(data) < 4:
        return f"<not an int32: {len(data)} byte(s)>"
    return str(_INT32.unpack_from(data)[0])


def _decode_long(data: bytes) -> str:
    if len(data) < 8:
        return f"<not an int64: {len(data)} byte(s)>"
    return str(_INT64.unpack_from(data)[0])


def make_decoder(name: str) -> Callable[[bytes], str]:
    """The decoder for a ``--key-decoder-class`` / ``--value-decoder-class`` name.

    Kafka takes Java class names; the common ones are accepted, plus klog's short names
    ``string``, ``hex``, ``base64``, ``int``, ``long``. Raises ValueError otherwise.
    """
    for names, decoder in (
        (_STRING_NAMES, _decode_string),
        (_HEX_NAMES, _decode_hex),
        (_INT_NAMES, _decode_int),
        (_LONG_NAMES, _decode_long),
        (_BASE64_NAMES, _decode_base64),
    ):
        if name in names:
            return decoder
    raise ValueError(
        f"unknown decoder {name!r}; use one of: string, hex, base64, int, long, or "
        "kafka.serializer.{String,Default,Integer,Long}Decoder"
    )


@dataclass(frozen=True, slots=True)
class DumpOptions:
    """The dump tool's switches, named after Kafka's options.

    ``key_decoder`` / ``value_decoder`` are None when not given; giving one (like giving
    any decoder option) implies ``print_data_log``, which implies ``deep_iteration``.
    """

    print_data_log: bool = False
    deep_iteration: bool = False
    verify_index_only: bool = False
    index_sanity_check: bool = False
    max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE
    max_bytes: int = DEFAULT_MAX_BYTES
    offsets_decoder: bool = False
    transaction_log_decoder: bool = False
    key_decoder: str | None = None
    value_decoder: str | None = None
    skip_record_metadata: bool = False
    # Dump a file with a known suffix even if it is not named as Kafka names segments.
    force: bool = False

    def __post_init__(self) -> None:
        for name in (self.key_decoder, self.value_decoder):
            if name is not None:
                make_decoder(name)  # fail early on an unknown name
        if self.max_message_size <= 0:
            raise ValueError("max_message_size must be positive")
        if self.max_bytes < 0:
            raise ValueError("max_bytes must not be negative")

    @property
    def prints_data(self) -> bool:
        return (
            self.print_data_log
            or self.offsets_decoder
            or self.transaction_log_decoder
            or self.key_decoder is not None
            or self.value_decoder is not None
        )

    @property
    def deep(self) -> bool:
        return self.deep_iteration or self.prints_data


# --------------------------------------------------------------------------------------------
# Events


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


def _java_path(path: str) -> str:
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


class _BatchContext:
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


def _fmt_general(r: Record, ctx: _BatchContext) -> str:
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

    def __init__(self, record: Record, ctx: _BatchContext) -> None:
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
            return _fmt_plain(self.record, ctx.ts_type)
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


def _fmt_plain(r: Record, ts_type: str) -> str:
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


# --------------------------------------------------------------------------------------------
# Message parsers (Kafka's MessageParser): record -> (key, payload), each None or printable

Parser = Callable[["Record"], tuple[Any, Any]]


def _decoder_parser(key_decoder: str | None, value_decoder: str | None) -> Parser:
    decode_key = make_decoder(key_decoder or DEFAULT_DECODER)
    decode_value = make_decoder(value_decoder or DEFAULT_DECODER)

    def parse(record: Record) -> tuple[Any, Any]:
        k = record.key
        v = record.value
        return (
            None if k is None else decode_key(k),
            None if v is None else decode_value(v),
        )

    return parse


def parse_offsets_record(record: Record) -> tuple[Any, Any]:
    """Kafka 3.x's OffsetsMessageParser: key/value of ``__consumer_offsets`` as JSON objects.

    Key ``{"type": "<key version>", "data": {...}}``, payload ``{"version": "<value
    version>", "data": {...}}`` or ``<DELETE>`` for a tombstone; an undecodable record
    becomes a one-line explanation in place of the key, as in Kafka.
    """
    offset = record.offset
    if record.key is None:
        return (
            f"Failed to decode message at offset {offset} using offset topic decoder "
            "(message had a missing key)",
            None,
        )
    try:
        key = it.read_offsets_key(record.key)
        value = it.read_offsets_value(key, record.value)
    except it.UnknownVersionError as exc:
        if exc.version not in (0, 1, 2):
            return (f"Unknown record type {exc.version} at offset {offset}, skipping.", None)
        return (f"Error at offset {offset}, skipping. {exc}", None)
    except it.InternalTopicError as exc:
        return (f"Error at offset {offset}, skipping. {exc}", None)
    key_json = {"type": str(key.version), "data": key.to_kafka_json()}
    if value is None:
        return key_json, "<DELETE>"
    return key_json, {"version": str(value.version), "data": value.to_kafka_json()}


def parse_transaction_log_record(record: Record) -> tuple[Any, Any]:
    """Kafka 3.x's TransactionLogMessageParser (``TransactionLog.formatRecordKeyAndValue``)."""
    offset = record.offset
    if record.key is None:
        return (f"Error at offset {offset}, skipping. the record has no key", None)
    try:
        key = it.read_transaction_log_key(record.key)
    except it.UnknownVersionError as exc:
        return (f"unknown::version={exc.version}", None)
    except it.InternalTopicError as exc:
        return (f"Error at offset {offset}, skipping. {exc}", None)
    key_text = f"transaction_metadata::transactionalId={key.transactional_id}"
    try:
        value = it.read_transaction_log_value(record.value)
        if value is None:
            return key_text, "<DELETE>"
        state = value.state_name
    except it.InternalTopicError as exc:
        return (key_text, f"Error at offset {offset}, skipping. {exc}")
    partitions: list[str] = []
    # Kafka does not list the partitions of an Empty transaction.
    if value.transaction_status != it.TransactionState.EMPTY and value.transaction_partitions:
        for tp in value.transaction_partitions:
            partitions.extend(f"{tp.topic}-{p}" for p in tp.partition_ids)
    payload = (
        f"producerId:{value.producer_id},producerEpoch:{value.producer_epoch},"
        f"state={state},partitions=[{','.join(partitions)}],"
        f"txnLastUpdateTimestamp={value.transaction_last_update_timestamp_ms},"
        f"txnTimeoutMs={value.transaction_timeout_ms}"
    )
    return key_text, payload


def message_parser(options: DumpOptions) -> Parser:
    if options.offsets_decoder:
        return parse_offsets_record
    if options.transaction_log_decoder:
        return parse_transaction_log_record
    return _decoder_parser(options.key_decoder, options.value_decoder)


# --------------------------------------------------------------------------------------------
# Streaming a log file


def _walk_problem(walk: BatchWalk) -> str | None:
    """What the dump says about where ``walk`` stopped: nothing at a torn tail (Kafka's
    tool just stops there), the framing error, or that the file shrank under us."""
    stop = walk.stop
    if stop is None:
        if walk.position + LOG_OVERHEAD <= walk.end:
            return _FILE_ENDED  # it ended at an entry boundary, before its size said
        return None
    if stop.kind == TORN:
        return None
    if stop.kind == SHORT:
        return _FILE_ENDED
    return stop.reason


_FILE_ENDED = "the file ended while reading it (was it truncated?)"


def _decode_records(
    buf: bytes | bytearray | memoryview, header: BatchHeader, bound: int
) -> tuple[list[Record], KafkaError | None]:
    """The records of one batch, and the error that stopped decoding them (if any)."""
    from klog.protocol.records.decode import iter_records

    try:
        return list(iter_records(buf, header, max_decompressed_size=bound)), None
    except KafkaError:
        pass
    # Decoding failed part way: decode again one by one to keep what came before the error,
    # as Kafka's tool prints those records before it stops.
    records: list[Record] = []
    try:
        for record in iter_records(buf, header, max_decompressed_size=bound):
            records.append(record)
    except KafkaError as exc:
        return records, exc
    return records, None


def _plain_v2_lines(
    buf: bytes | bytearray | memoryview, header: BatchHeader, bound: int, ts_type: str
) -> tuple[str, Sequence[int]] | None:
    """The plain metadata lines of a v2 batch's records and their offsets, rendered without
    Record objects; None when the batch cannot be decoded whole (the caller then takes the
    record-by-record path, which prints what precedes the damage and the error)."""
    try:
        columns = record_columns(buf, header, max_decompressed_size=bound)
    except KafkaError:
        return None
    offsets = columns.offsets
    count = len(offsets)
    if not count:
        return None
    header_keys = columns.header_keys
    if header_keys.count(header_keys[0]) == count:
        header_texts: Sequence[str] = [_header_keys_text(header_keys[0])]
    else:
        header_texts = list(map(_header_keys_text, header_keys))
    # Byte-identical to _fmt_plain, but rendered for the whole batch by one C-level
    # `(template * count) % values`: a field with one value across the batch (keySize,
    # valueSize, sequence, often the timestamp) is written into the template once; only
    # the others (the offset, at least) are formatted per record.
    template: list[str] = []
    varying: list[Sequence[object]] = []
    for label, column, spec in (
        ("| offset: ", offsets, "%d"),
        (f" {ts_type}: ", columns.timestamps, "%d"),
        (" keySize: ", columns.key_sizes, "%d"),
        (" valueSize: ", columns.value_sizes, "%d"),
        (" sequence: ", columns.sequences, "%d"),
        (" headerKeys: ", header_texts, "%s"),
    ):
        template.append(label.replace("%", "%%"))
        first = column[0]
        if len(column) < count or column.count(first) == count:
            template.append(str(first).replace("%", "%%"))
        else:
            template.append(spec)
            varying.append(column)
    template.append("\n")
    if len(varying) == 1:
        values = tuple(varying[0])
    else:
        values = tuple(chain.from_iterable(zip(*varying, strict=True)))
    return ("".join(template) * count) % values, offsets


def _header_keys_text(keys: tuple[str, ...]) -> str:
    return "[" + ",".join(keys) + "]"


def _track_offsets(offsets: Sequence[int], last_offset: int, pairs: list[tuple[int, int]]) -> int:
    """Note each place where an offset does not follow the previous one; return the last."""
    first = offsets[0]
    count = len(offsets)
    if last_offset != -1 and first != last_offset + 1:
        pairs.append((last_offset, first))
    # The common case (consecutive offsets) is checked by C-level comparisons.
    if offsets[-1] - first != count - 1 or offsets != list(range(first, first + count)):
        previous = first
        for offset in offsets[1:]:
            if offset != previous + 1:
                pairs.append((previous, offset))
            previous = offset
    return offsets[-1]


def _read_header_at(f: BinaryIO, position: int, limit: int) -> BatchHeader | None:
    """The header of the entry at ``position`` if it lies whole within ``limit`` bytes."""
    if position < 0:
        return None
    f.seek(position)
    head = f.read(RECORD_BATCH_OVERHEAD)
    if len(head) < LOG_OVERHEAD:
        return None
    size = LOG_OVERHEAD + _INT32.unpack_from(head, 8)[0]
    if size > limit:
        return None
    try:
        if size <= len(head):
            return read_batch_header(head[:size])
        if len(head) < RECORD_BATCH_OVERHEAD:
            return None
        shrunk = head[:8] + _INT32.pack(len(head) - LOG_OVERHEAD) + head[12:]
        return replace(read_batch_header(shrunk), batch_length=size - LOG_OVERHEAD)
    except KafkaError:
        return None


# --------------------------------------------------------------------------------------------
# Index shape: what a file must look like before its entries are used


@dataclass(frozen=True, slots=True)
class IndexShape:
    """How many leading entries of an index file are sound, and the first fault after them.

    ``usable`` entries may be shown and checked against the log; a preallocated zero tail
    after them is not a fault (Kafka stops there too). ``problem`` names the first bad entry
    (``entry``, its ``byte`` in the file) or, with ``entry`` None, a size that is not a
    whole number of entries.
    """

    usable: int
    problem: str | None = None
    entry: int | None = None
    byte: int | None = None
    # Entries from the fault on, which are not used.
    dropped: int = 0


def _zero_tail_from(entries: Sequence[tuple[int, ...]], start: int, zero: tuple[int, ...]) -> int:
    """Index of the first entry from ``start`` that is not ``zero``; len(entries) if none."""
    for n in range(start, len(entries)):
        if entries[n] != zero:
            return n
    return len(entries)


def _shape(
    entries: Sequence[tuple[int, ...]],
    size: int,
    entry_size: int,
    zero: tuple[int, ...],
    fault: Callable[[int, tuple[int, ...], tuple[int, ...] | None], str | None],
    describe: Callable[[tuple[int, ...]], str],
) -> IndexShape:
    """The shared walk: entry 0 may be the zero entry; a zero entry after it starts a tail
    that must stay zero to the end; ``fault(n, entry, previous)`` judges the others."""
    previous: tuple[int, ...] | None = None
    for n, entry in enumerate(entries):
        if n > 0 and entry == zero:
            bad = _zero_tail_from(entries, n, zero)
            if bad == len(entries):
                break
            return IndexShape(
                n,
                f"entry {bad} (byte {bad * entry_size}: {describe(entries[bad])}) is not zero, "
                f"but follows the zero-filled tail that starts at entry {n}",
                bad,
                bad * entry_size,
                len(entries) - n,
            )
        why = fault(n, entry, previous)
        if why is not None:
            return IndexShape(
                n,
                f"entry {n} (byte {n * entry_size}: {describe(entry)}) is corrupt: {why}",
                n,
                n * entry_size,
                len(entries) - n,
            )
        previous = entry
    else:
        n = len(entries)
    extra = size % entry_size
    if extra:
        whole = size - extra
        return IndexShape(
            n,
            f"{size} bytes is not a whole number of {entry_size}-byte entries: the last "
            f"{extra} bytes (from byte {whole}) are not an entry",
            None,
            whole,
        )
    return IndexShape(n)


def offset_index_shape(entries: Sequence[tuple[int, int]], base: int, size: int) -> IndexShape:
    """Check (absolute offset, position) entries of an .index file of ``size`` bytes.

    Kafka appends an entry only for a later batch, so offsets and positions strictly
    increase, offsets are not below the base offset and positions are not negative.
    """

    def fault(n: int, entry: tuple[int, ...], prev: tuple[int, ...] | None) -> str | None:
        offset, position = entry
        if offset < base:
            return f"offset {offset} is below the segment's base offset {base}"
        if position < 0:
            return f"position {position} is negative"
        if prev is not None and offset <= prev[0]:
            return f"offset {offset} is not above entry {n - 1}'s offset {prev[0]}"
        if prev is not None and position <= prev[1]:
            return f"position {position} is not above entry {n - 1}'s position {prev[1]}"
        return None

    return _shape(
        entries, size, OFFSET_INDEX_ENTRY_SIZE, (base, 0), fault,
        lambda e: f"offset {e[0]}, position {e[1]}",
    )


def time_index_shape(entries: Sequence[tuple[int, int]], base: int, size: int) -> IndexShape:
    """Check (timestamp, absolute offset) entries of a .timeindex file of ``size`` bytes.

    Kafka appends an entry only for a larger timestamp at an offset not below the last
    one, never below the base offset and never with a negative timestamp. Timestamps that
    do not increase are left to Kafka's "out of order" report, as its tool does.
    """

    def fault(n: int, entry: tuple[int, ...], prev: tuple[int, ...] | None) -> str | None:
        timestamp, offset = entry
        if offset < base:
            return f"offset {offset} is below the segment's base offset {base}"
        if timestamp < 0:
            return f"timestamp {timestamp} is negative"
        if prev is not None and offset < prev[1]:
            return f"offset {offset} is below entry {n - 1}'s offset {prev[1]}"
        if prev is not None and offset == base:
            return f"offset {offset} repeats the base offset (only a zero-filled tail may)"
        return None

    return _shape(
        entries, size, TIME_INDEX_ENTRY_SIZE, (0, base), fault,
        lambda e: f"timestamp {e[0]}, offset {e[1]}",
    )


def txn_index_shape(
    entries: Sequence[AbortedTxn], base: int | None, size: int
) -> IndexShape:
    """Check the AbortedTxn entries of a .txnindex file of ``size`` bytes.

    Version 0, a producer id, first offset <= last offset, last offsets not decreasing and
    (with a base offset from the file name) not below it, as Kafka's sanity check has it.
    """
    rows = [
        (t.version, t.producer_id, t.first_offset, t.last_offset, t.last_stable_offset)
        for t in entries
    ]

    def fault(n: int, entry: tuple[int, ...], prev: tuple[int, ...] | None) -> str | None:
        version, producer_id, first, last, _lso = entry
        if version != 0:
            return f"version {version} is not 0"
        if producer_id < 0:
            return f"producer id {producer_id} is negative"
        if first < 0 or first > last:
            return f"first offset {first} is negative or after its last offset {last}"
        if base is not None and last < base:
            return f"last offset {last} is below the segment's base offset {base}"
        if prev is not None and last < prev[3]:
            return f"last offset {last} is below entry {n - 1}'s last offset {prev[3]}"
        return None

    # A .txnindex is appended to, never preallocated: a zero entry is judged like any
    # other (the "zero" below is no possible entry).
    return _shape(
        rows, size, ABORTED_TXN_SIZE, (-1,), fault,
        lambda e: f"producerId {e[1]}, firstOffset {e[2]}, lastOffset {e[3]}",
    )


# --------------------------------------------------------------------------------------------
# The run


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
    damaged: int = 0
    _index_mismatches: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
    _time_mismatches: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
    _time_out_of_order: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
    _time_not_found: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
    _non_consecutive: dict[str, list[tuple[int, int]]] = field(default_factory=dict)

    def __iter__(self) -> Iterator[DumpEvent]:
        self._parse = message_parser(self.options)
        for arg in self.paths:
            yield from self._dump_one(os.fspath(arg))
        yield from self._reports()

    # -- one file -------------------------------------------------------------------------

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
        try:
            if suffix in (LOG_FILE_SUFFIX, KRAFT_SNAPSHOT_FILE_SUFFIX):
                yield from self._dump_log(arg, path)
            elif suffix == INDEX_FILE_SUFFIX:
                yield from self._dump_index(arg, path)
            elif suffix == TIME_INDEX_FILE_SUFFIX:
                yield from self._dump_time_index(arg, path)
            elif suffix == PRODUCER_SNAPSHOT_FILE_SUFFIX:
                yield from self._dump_producer_snapshot(arg, path)
            elif suffix == TXN_INDEX_FILE_SUFFIX:
                yield from self._dump_txn_index(arg, path)
            else:
                self.ignored += 1
                yield UnknownFileEvent(arg)
                return
        except OSError as exc:
            self.failed += 1
            yield FileErrorEvent(arg, f"{arg}: {exc.strerror or exc}")
            return
        self.dumped += 1

    # -- .log -----------------------------------------------------------------------------

    def _dump_log(self, arg: str, path: Path) -> Iterator[DumpEvent]:
        opts = self.options
        name = path.name
        if name.endswith(LOG_FILE_SUFFIX):
            base = offset_from_filename_or_none(name)
            if base is None:
                yield ProblemEvent(arg, "the file name does not start with a base offset")
            else:
                yield LogStartOffsetEvent(base)
        elif name == KRAFT_BOOTSTRAP_FILENAME:
            yield SnapshotHeaderEvent(None, None)
        else:
            match = KRAFT_SNAPSHOT_FILE_NAME_RE.match(name)
            if match is None:
                yield ProblemEvent(arg, "not a KRaft snapshot name (<offset>-<epoch>.checkpoint)")
            else:
                yield SnapshotHeaderEvent(int(match.group(1)), int(match.group(2)))
        deep = opts.deep
        show = not opts.skip_record_metadata
        parse = self._parse if opts.prints_data else None
        bound = MAX_DECOMPRESSED_SIZE
        new_event = RecordEvent
        fast_text = self.text_fast_path
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            end = min(size, opts.max_bytes)
            walk = BatchWalk(
                f.fileno(),
                0,
                end,
                chunk_size=CHUNK_SIZE,
                hold_bound=max(opts.max_message_size, IN_MEMORY_BATCH_BOUND),
            )
            valid_bytes = 0
            last_offset = -1
            pairs: list[tuple[int, int]] = []
            for position, h, buf in walk:
                is_valid = walk.streamed_crc_ok if buf is None else h.is_valid(buf)
                yield BatchEvent(h, position, is_valid)
                if deep:
                    if buf is None:
                        yield ProblemEvent(
                            arg,
                            f"batch of {h.size} bytes is too large to decode "
                            "in memory; its records are not shown (raise --max-message-size)",
                            position,
                        )
                    else:
                        # The hot loop of --deep-iteration, kept inline: one generator
                        # frame less per record is measurable.
                        is_control = h.is_control
                        ctx = _BatchContext(
                            h.timestamp_type.kafka_name,
                            h.magic,
                            show,
                            is_control and show,
                            parse if not is_control else None,
                        )
                        fast = (
                            _plain_v2_lines(buf, h, bound, ctx.ts_type)
                            if fast_text and ctx.plain and h.magic == MAGIC_V2
                            else None
                        )
                        if fast is not None:
                            lines, offsets = fast
                            last_offset = _track_offsets(offsets, last_offset, pairs)
                            yield RecordLinesEvent(lines, len(offsets))
                        else:
                            records, problem = _decode_records(buf, h, bound)
                            if records:
                                last_offset = _track_offsets(
                                    [r.offset for r in records], last_offset, pairs
                                )
                                if fast_text and ctx.plain:
                                    text = "".join(
                                        map(_fmt_plain, records, repeat(ctx.ts_type, len(records)))
                                    )
                                    yield RecordLinesEvent(text, len(records))
                                else:
                                    # map() builds the events in C: no Python loop per record.
                                    yield from map(new_event, records, repeat(ctx, len(records)))
                            if problem is not None:
                                yield ProblemEvent(
                                    arg,
                                    f"cannot decode the records of this batch: {problem}",
                                    position,
                                )
                valid_bytes += h.size
            why = _walk_problem(walk)
            if why is not None:
                stop = walk.stop
                yield ProblemEvent(arg, why, walk.position if stop is None else stop.position)
            trailing = end - valid_bytes
            if trailing > 0 and opts.max_bytes == DEFAULT_MAX_BYTES:
                yield TrailingBytesEvent(trailing, name, valid_bytes)
        if pairs:
            self._non_consecutive[_java_path(arg)] = pairs

    # -- .index ---------------------------------------------------------------------------

    def _dump_index(self, arg: str, path: Path) -> Iterator[DumpEvent]:
        from klog.storage.index import OffsetIndex, read_offset_index_entries

        opts = self.options
        base = offset_from_filename_or_none(path.name)
        if base is None:
            yield ProblemEvent(arg, "the file name does not start with a base offset")
            return
        entries = read_offset_index_entries(path, base)
        shape = offset_index_shape(entries, base, path.stat().st_size)
        if not entries:
            yield IndexEmptyEvent(arg)
            yield from self._corrupt(arg, shape)
            return
        if opts.index_sanity_check:
            yield from self._sanity_check(
                arg, shape, lambda: OffsetIndex(path, base, writable=False)
            )
            return
        total = len(entries)
        del entries[shape.usable :]
        log_path = path.with_name(path.name.split(".", 1)[0] + LOG_FILE_SUFFIX)
        log = open(log_path, "rb") if log_path.is_file() else None  # noqa: SIM115
        if log is None:
            yield ProblemEvent(arg, f"no log file {log_path.name} beside it; entries not verified")
        mismatches: list[tuple[int, int]] = []
        try:
            log_size = os.fstat(log.fileno()).st_size if log is not None else 0
            # Only the sound entries (the shape check stopped at a zero-filled tail, as
            # Kafka does, or at the first corrupt entry).
            for n, (offset, position) in enumerate(entries):
                if log is not None and position >= log_size:
                    # Positions increase: this entry and all after it point past the log.
                    # Kafka reports it as a mismatch; it also ends the index.
                    mismatches.append((offset, -1))
                    shape = IndexShape(
                        n,
                        f"entry {n} (byte {n * OFFSET_INDEX_ENTRY_SIZE}: offset {offset}, "
                        f"position {position}) is corrupt: position {position} is past the "
                        f"end of {log_path.name} ({log_size} bytes)",
                        n,
                        n * OFFSET_INDEX_ENTRY_SIZE,
                        total - n,
                    )
                    break
                if log is not None:
                    limit = min(opts.max_message_size, max(0, log_size - position))
                    header = _read_header_at(log, position, limit)
                    found = -1 if header is None else header.last_offset
                    if found != offset:
                        mismatches.append((offset, found))
                if not opts.verify_index_only:
                    yield IndexEntryEvent(offset, position)
        finally:
            if log is not None:
                log.close()
        if mismatches:
            # Kafka prepends to a list, so its report lists the last mismatch first.
            self._index_mismatches[_java_path(arg)] = mismatches[::-1]
        yield from self._corrupt(arg, shape)

    def _corrupt(self, arg: str, shape: IndexShape) -> Iterator[DumpEvent]:
        if shape.problem is None:
            return
        self.damaged += 1
        message = shape.problem
        first, last = shape.usable, shape.usable + shape.dropped - 1
        if shape.dropped == 1:
            message += f"; entry {first} is not dumped"
        elif shape.dropped:
            message += f"; entries {first} to {last} are not dumped"
        yield CorruptIndexEvent(arg, message, shape.entry, shape.byte)

    def _sanity_check(
        self, arg: str, shape: IndexShape, open_index: Callable[[], OffsetIndex | TimeIndex]
    ) -> Iterator[DumpEvent]:
        """Kafka's --index-sanity-check: the shape first (it names the bad entry), then
        the index class's own check (which also refuses a zero-filled tail)."""
        from klog.storage.index import CorruptIndexError

        if shape.problem is not None:
            self.damaged += 1
            yield CorruptIndexEvent(
                arg, f"failed sanity check: {shape.problem}", shape.entry, shape.byte
            )
            return
        try:
            index = open_index()
            try:
                index.sanity_check()
            finally:
                index.close()
        except CorruptIndexError as exc:
            self.damaged += 1
            yield CorruptIndexEvent(arg, f"failed sanity check: {exc}")
        else:
            yield SanityCheckEvent(arg)

    # -- .timeindex -----------------------------------------------------------------------

    def _dump_time_index(self, arg: str, path: Path) -> Iterator[DumpEvent]:
        from klog.storage.index import TimeIndex, read_time_index_entries

        opts = self.options
        base = offset_from_filename_or_none(path.name)
        if base is None:
            yield ProblemEvent(arg, "the file name does not start with a base offset")
            return
        entries = read_time_index_entries(path, base)
        shape = time_index_shape(entries, base, path.stat().st_size)
        if opts.index_sanity_check:
            yield from self._sanity_check(arg, shape, lambda: TimeIndex(path, base, writable=False))
            return
        del entries[shape.usable :]
        stem = path.name.split(".", 1)[0]
        log_path = path.with_name(stem + LOG_FILE_SUFFIX)
        index_path = path.with_name(stem + INDEX_FILE_SUFFIX)
        log = open(log_path, "rb") if log_path.is_file() else None  # noqa: SIM115
        if log is None and entries:
            yield ProblemEvent(arg, f"no log file {log_path.name} beside it; entries not verified")
        # Kafka's tool would create a missing .index as a side effect; we never write, and
        # an absent offset index means every lookup starts at position 0, as an empty one.
        # Only the sound entries of the .index beside are used: a damaged one would send
        # the search into the middle of a batch.
        lookup: list[tuple[int, int]] = []
        if log is not None and entries and index_path.is_file():
            lookup, problem = self._sound_offset_index(index_path, base, log)
            if problem is not None:
                yield ProblemEvent(
                    arg, f"{index_path.name} beside it is damaged ({problem}); lookups use "
                    "only its entries before the fault"
                )
        lookup_offsets = [o for o, _ in lookup]
        key = _java_path(arg)
        mismatches: list[tuple[int, int]] = []
        out_of_order: list[tuple[int, int]] = []
        not_found: list[tuple[int, int]] = []
        try:
            previous = -1
            for timestamp, offset in entries:
                if log is not None:
                    # OffsetIndex.lookup: the largest entry at or below the offset.
                    slot = bisect_right(lookup_offsets, offset) - 1
                    position = lookup[slot][1] if slot >= 0 else 0
                    found = self._find_batch(log, position, offset)
                    if found is None:
                        not_found.append((offset, -1))
                    elif found[0] != offset:
                        not_found.append((offset, found[0]))
                    else:
                        if found[1] != timestamp:
                            mismatches.append((timestamp, found[1]))
                        if previous >= timestamp:
                            out_of_order.append((timestamp, previous))
                if not opts.verify_index_only:
                    yield TimeIndexEntryEvent(timestamp, offset)
                previous = timestamp
        finally:
            if log is not None:
                log.close()
        for report, pairs in (
            (self._time_mismatches, mismatches),
            (self._time_out_of_order, out_of_order),
            (self._time_not_found, not_found),
        ):
            if pairs:
                report[key] = pairs
        yield from self._corrupt(arg, shape)

    @staticmethod
    def _sound_offset_index(
        path: Path, base: int, log: BinaryIO
    ) -> tuple[list[tuple[int, int]], str | None]:
        """The leading entries of an .index that are sound and point inside ``log``, and
        the fault that ended them (None when the whole file is sound)."""
        from klog.storage.index import read_offset_index_entries

        entries = read_offset_index_entries(path, base)
        shape = offset_index_shape(entries, base, path.stat().st_size)
        del entries[shape.usable :]
        log_size = os.fstat(log.fileno()).st_size
        for n, (_offset, position) in enumerate(entries):
            if position >= log_size:
                del entries[n:]
                return entries, f"entry {n} points past the end of the log"
        return entries, shape.problem

    def _find_batch(self, log: BinaryIO, position: int, offset: int) -> tuple[int, int] | None:
        """(lastOffset, max record timestamp) of the first batch at/after ``position`` whose
        last offset reaches ``offset``; None when there is none."""
        from klog.protocol.records.decode import iter_records

        log_size = os.fstat(log.fileno()).st_size
        if position >= log_size:
            return None
        walk = BatchWalk(
            log.fileno(), position, log_size, chunk_size=CHUNK_SIZE,
            hold_bound=IN_MEMORY_BATCH_BOUND,
        )
        for _position, h, buf in walk:
            if h.last_offset < offset:
                continue
            if h.last_offset != offset or buf is None:
                return h.last_offset, h.max_timestamp
            max_timestamp = -1
            try:
                for r in iter_records(buf, h, max_decompressed_size=MAX_DECOMPRESSED_SIZE):
                    max_timestamp = max(max_timestamp, r.timestamp)
            except KafkaError:
                max_timestamp = h.max_timestamp
            return h.last_offset, max_timestamp
        return None

    # -- .snapshot, .txnindex ---------------------------------------------------------------

    def _dump_producer_snapshot(self, arg: str, path: Path) -> Iterator[DumpEvent]:
        from klog.storage.producer_state import CorruptSnapshotError, read_snapshot

        try:
            entries = read_snapshot(path)
        except (CorruptSnapshotError, KafkaError) as exc:
            # Kafka prints the CorruptSnapshotException's message and carries on.
            yield ProblemEvent(arg, str(exc))
            return
        for entry in entries:
            yield _snapshot_event(entry)

    def _dump_txn_index(self, arg: str, path: Path) -> Iterator[DumpEvent]:
        from klog.storage.index import read_txn_index_entries

        entries = read_txn_index_entries(path)
        base = offset_from_filename_or_none(path.name)
        shape = txn_index_shape(entries, base, path.stat().st_size)
        for txn in entries[: shape.usable]:
            yield TxnIndexEntryEvent(
                txn.version,
                txn.producer_id,
                txn.first_offset,
                txn.last_offset,
                txn.last_stable_offset,
            )
        yield from self._corrupt(arg, shape)

    # -- end of run -------------------------------------------------------------------------

    def _reports(self) -> Iterator[DumpEvent]:
        # Kafka's order: index mismatches, the three time-index reports, then
        # non-consecutive offsets (the latter also prepended, so newest first).
        for path, pairs in self._index_mismatches.items():
            yield ReportEvent("index_mismatch", path, tuple(pairs))
        for path, pairs in self._time_mismatches.items():
            yield ReportEvent("time_index_mismatch", path, tuple(pairs))
        for path, pairs in self._time_out_of_order.items():
            yield ReportEvent("time_index_out_of_order", path, tuple(pairs))
        for path, pairs in self._time_not_found.items():
            yield ReportEvent("time_index_offset_not_found", path, tuple(pairs))
        for path, pairs in self._non_consecutive.items():
            yield ReportEvent("non_consecutive_offsets", path, tuple(pairs[::-1]))


def dump_files(
    paths: Iterable[str | os.PathLike[str]], options: DumpOptions | None = None
) -> Iterator[DumpEvent]:
    """Every event of dumping ``paths`` in order (see DumpRun for the counters)."""
    return iter(DumpRun(paths, options or DumpOptions()))


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


def _snapshot_event(entry: ProducerSnapshotEntry) -> SnapshotEntryEvent:
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
