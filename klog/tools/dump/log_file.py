"""Dumping a ``.log`` file (or a KRaft ``.checkpoint``): its batches and records as events.

The file is walked by storage's ``BatchWalk`` in chunks of ``CHUNK_SIZE`` bytes and a batch
is only held whole when it is at most ``max(max_message_size, IN_MEMORY_BATCH_BOUND)``
bytes; a bigger one has its CRC computed in chunks and its records are not decoded (a
problem event says so). Memory therefore does not grow with the file; nothing is written.

With --deep-iteration each held batch's records are decoded once; a batch whose records
print as plain metadata lines can be rendered whole by C-level loops (``fast_text``: one
``RecordLinesEvent`` per batch, no event per record). This is the dump's hot loop.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from itertools import chain, repeat
from pathlib import Path
from typing import TYPE_CHECKING

from klog.protocol.errors import KafkaError
from klog.protocol.records.batch import LOG_OVERHEAD, MAGIC_V2, BatchHeader
from klog.protocol.records.v2 import record_columns
from klog.storage.files import (
    KRAFT_BOOTSTRAP_FILENAME,
    KRAFT_SNAPSHOT_FILE_NAME_RE,
    LOG_FILE_SUFFIX,
    offset_from_filename_or_none,
)
from klog.storage.walk import SHORT, TORN, BatchWalk
from klog.tools.dump.events import (
    BatchContext,
    BatchEvent,
    DumpEvent,
    LogStartOffsetEvent,
    ProblemEvent,
    RecordEvent,
    RecordLinesEvent,
    ReportTally,
    SnapshotHeaderEvent,
    TrailingBytesEvent,
    fmt_plain,
    java_path,
)
from klog.tools.dump.options import (
    CHUNK_SIZE,
    DEFAULT_MAX_BYTES,
    IN_MEMORY_BATCH_BOUND,
    MAX_DECOMPRESSED_SIZE,
    DumpOptions,
)

if TYPE_CHECKING:
    from klog.protocol.records.record import Record
    from klog.tools.dump.parsers import Parser


def dump_log(
    arg: str,
    path: Path,
    opts: DumpOptions,
    parse: Parser,
    tally: ReportTally,
    fast_text: bool = False,
) -> Iterator[DumpEvent]:
    """The events of a ``.log`` (or KRaft ``.checkpoint``): its header line, each batch,
    with ``deep`` each record (``fast_text``: plain record lines per batch as one
    RecordLinesEvent), and what stopped the walk; offsets that do not follow each other go
    to ``tally`` (Kafka's end-of-run report)."""
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
    parse_data = parse if opts.prints_data else None
    bound = MAX_DECOMPRESSED_SIZE
    new_event = RecordEvent
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
                    ctx = BatchContext(
                        h.timestamp_type.kafka_name,
                        h.magic,
                        show,
                        is_control and show,
                        parse_data if not is_control else None,
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
                                    map(fmt_plain, records, repeat(ctx.ts_type, len(records)))
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
        tally.non_consecutive[java_path(arg)] = pairs


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
