"""The logic behind ``klog dump-segment``: Kafka's DumpLogSegments as a stream of events.

``dump_files(paths, options)`` (or a ``DumpRun``, for its counters) yields typed events,
one per file header, batch, record, index entry, snapshot entry, aborted transaction and
end-of-run report; each event renders itself as Kafka's line (``to_kafka_line``,
character for character, so scripts that parse ``kafka-dump-log.sh`` keep working) or as
one JSON object (``to_json``). The CLI only prints. One concern per module:

- options.py: Kafka's options and the key/value decoders;
- events.py: the events, their Kafka text and JSON, the end-of-run reports' tally;
- parsers.py: the message parsers of --print-data-log (decoders, offsets, transactions);
- log_file.py: a ``.log`` / ``.checkpoint``, streamed batch by batch;
- index_files.py: ``.index``, ``.timeindex``, ``.txnindex``, judged by storage's one rule
  set of a sound index (storage/index_entries.py) before their entries are used;
- run.py: the run over the paths (files told apart by suffix) and its counters.

Where Kafka's tool would die with a stack trace on bad bytes (a length field below the
minimum, an index entry pointing past the log, an undecodable internal-topic record), the
dump reports the problem as an event and carries on. Stdout lines stay Kafka's; the
explanations are extra lines on stderr. Nothing is ever written: every file is opened
read-only.
"""

from __future__ import annotations

from klog.tools.dump.events import (
    ERR,
    OUT,
    BatchEvent,
    CorruptIndexEvent,
    DumpEvent,
    FileErrorEvent,
    FileEvent,
    IndexEmptyEvent,
    IndexEntryEvent,
    LogStartOffsetEvent,
    ProblemEvent,
    RecordEvent,
    RecordLinesEvent,
    ReportEvent,
    SanityCheckEvent,
    SnapshotEntryEvent,
    SnapshotHeaderEvent,
    TimeIndexEntryEvent,
    TrailingBytesEvent,
    TxnIndexEntryEvent,
    UnknownFileEvent,
)
from klog.tools.dump.options import (
    CHUNK_SIZE,
    DECODER_NAMES,
    DEFAULT_DECODER,
    DEFAULT_MAX_BYTES,
    DEFAULT_MAX_MESSAGE_SIZE,
    IN_MEMORY_BATCH_BOUND,
    MAX_DECOMPRESSED_SIZE,
    DumpOptions,
    make_decoder,
)
from klog.tools.dump.parsers import (
    Parser,
    message_parser,
    parse_offsets_record,
    parse_transaction_log_record,
)
from klog.tools.dump.run import DumpRun, dump_files

__all__ = [
    "CHUNK_SIZE",
    "DECODER_NAMES",
    "DEFAULT_DECODER",
    "DEFAULT_MAX_BYTES",
    "DEFAULT_MAX_MESSAGE_SIZE",
    "ERR",
    "IN_MEMORY_BATCH_BOUND",
    "MAX_DECOMPRESSED_SIZE",
    "OUT",
    "BatchEvent",
    "CorruptIndexEvent",
    "DumpEvent",
    "DumpOptions",
    "DumpRun",
    "FileErrorEvent",
    "FileEvent",
    "IndexEmptyEvent",
    "IndexEntryEvent",
    "LogStartOffsetEvent",
    "Parser",
    "ProblemEvent",
    "RecordEvent",
    "RecordLinesEvent",
    "ReportEvent",
    "SanityCheckEvent",
    "SnapshotEntryEvent",
    "SnapshotHeaderEvent",
    "TimeIndexEntryEvent",
    "TrailingBytesEvent",
    "TxnIndexEntryEvent",
    "UnknownFileEvent",
    "dump_files",
    "make_decoder",
    "message_parser",
    "parse_offsets_record",
    "parse_transaction_log_record",
]
