"""Rows as Arrow: Spark's Kafka-source schema and the record batches that carry it.

This module owns the row shape every klog reader produces, offline or live: exactly the
columns of Spark's Kafka source, in its order (key, value, topic, partition, offset,
timestamp, timestampType, and headers when asked for), as a pyarrow schema and as the DDL
string a ``DataSource.schema()`` returns. ``ColumnBuilder`` collects one partition's rows
column-wise (lists, filled per record by the decoders) and cuts them into
``pyarrow.RecordBatch`` values; the conversion to Arrow is one C call per column.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

# Rows per Arrow batch handed to Spark: big enough to amortise the per-batch cost of
# Spark's Arrow-to-row conversion, small enough to keep a Python worker's memory flat.
DEFAULT_BATCH_ROWS = 65_536

# One binary column as Arrow buffers: (validity bytes or None, null count, int32 offsets,
# data), as klog.spark._columns.decode_v2 returns them.
ArrowColumn = tuple[bytes | None, int, bytes, bytes]

HEADER_TYPE = pa.list_(
    pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())])
)
# Spark's TimestampType is microseconds since the epoch in UTC.
TIMESTAMP_TYPE = pa.timestamp("us", tz="UTC")

_BASE_FIELDS = [
    pa.field("key", pa.binary()),
    pa.field("value", pa.binary()),
    pa.field("topic", pa.string()),
    pa.field("partition", pa.int32()),
    pa.field("offset", pa.int64()),
    pa.field("timestamp", TIMESTAMP_TYPE),
    pa.field("timestampType", pa.int32()),
]

_BASE_DDL = (
    "key binary, value binary, topic string, partition int, offset long, "
    "timestamp timestamp, timestampType int"
)
_HEADERS_DDL = "headers array<struct<key: string, value: binary>>"


def arrow_schema(include_headers: bool) -> pa.Schema:
    fields = list(_BASE_FIELDS)
    if include_headers:
        fields.append(pa.field("headers", HEADER_TYPE))
    return pa.schema(fields)


def spark_ddl(include_headers: bool) -> str:
    """The schema as Spark DDL (what DataSource.schema() returns)."""
    return f"{_BASE_DDL}, {_HEADERS_DDL}" if include_headers else _BASE_DDL


class ColumnBuilder:
    """One topic-partition's rows, column by column, until ``flush`` makes a RecordBatch.

    Decoders append to the public lists directly (one ``append`` per field and record is
    the cheapest thing Python offers). Not thread-safe; one per reading task.
    """

    __slots__ = (
        "_chunk_rows",
        "_chunks",
        "headers",
        "include_headers",
        "keys",
        "nbytes",
        "offsets",
        "partition",
        "schema",
        "timestamp_types",
        "timestamps",
        "topic",
        "values",
    )

    def __init__(self, topic: str, partition: int, include_headers: bool) -> None:
        self.topic = topic
        self.partition = partition
        self.include_headers = include_headers
        self.schema = arrow_schema(include_headers)
        self.keys: list[bytes | None] = []
        self.values: list[bytes | None] = []
        self.offsets: list[int] = []
        self.timestamps: list[int] = []
        self.timestamp_types: list[int] = []
        self.headers: list[Any] = []
        # Key + value bytes of every batch flushed so far (counted by Arrow, not per record).
        self.nbytes = 0
        # Rows already in Arrow form, in order before the lists' rows: (key, value, offset,
        # timestamp in ms, timestampType[, headers]) arrays, from the C decoder or from
        # lists sealed before a C chunk was added.
        self._chunks: list[list[pa.Array]] = []
        self._chunk_rows = 0

    def __len__(self) -> int:
        return self._chunk_rows + len(self.offsets)

    def first_offset(self) -> int:
        """The offset of the first row collected (there must be one)."""
        return self._chunks[0][2][0].as_py() if self._chunks else self.offsets[0]

    def last_offset(self) -> int:
        """The offset of the last row collected (there must be one)."""
        return self.offsets[-1] if self.offsets else self._chunks[-1][2][-1].as_py()

    def add_arrow(self, rows: int, key: ArrowColumn, value: ArrowColumn, offsets: bytes,
                  timestamps: bytes, timestamp_type: int) -> None:
        """Rows decoded into Arrow buffers (``klog.spark._columns.decode_v2``'s result):
        key and value as (validity or None, null count, int32 offsets, data); offsets and
        timestamps (ms) as int64 bytes. Not with headers (that decoder skips them)."""
        if self.include_headers:
            raise ValueError("Arrow buffers carry no headers; decode with columns.py")
        if not rows:
            return
        self._seal()
        self._chunks.append([
            _binary_array(rows, key),
            _binary_array(rows, value),
            pa.Array.from_buffers(pa.int64(), rows, [None, pa.py_buffer(offsets)]),
            pa.Array.from_buffers(pa.int64(), rows, [None, pa.py_buffer(timestamps)]),
            pa.repeat(pa.scalar(timestamp_type, pa.int32()), rows),
        ])
        self._chunk_rows += rows

    def _seal(self) -> None:
        """The lists' rows into an Arrow chunk (so that later chunks come after them)."""
        if not self.offsets:
            return
        chunk = [
            pa.array(self.keys, pa.binary()),
            pa.array(self.values, pa.binary()),
            pa.array(self.offsets, pa.int64()),
            pa.array(self.timestamps, pa.int64()),
            pa.array(self.timestamp_types, pa.int32()),
        ]
        if self.include_headers:
            chunk.append(
                pa.array(
                    [[{"key": k, "value": v} for k, v in h] for h in self.headers],
                    HEADER_TYPE,
                )
            )
        self._chunks.append(chunk)
        self._chunk_rows += len(self.offsets)
        self.keys, self.values, self.offsets = [], [], []
        self.timestamps, self.timestamp_types, self.headers = [], [], []

    def flush(self) -> pa.RecordBatch:
        """The rows collected so far as one RecordBatch; the builder starts empty again."""
        self._seal()
        n = self._chunk_rows
        if not self._chunks:
            self._chunks.append([pa.array([], t) for t in (
                pa.binary(), pa.binary(), pa.int64(), pa.int64(), pa.int32())])
            if self.include_headers:
                self._chunks[0].append(pa.array([], HEADER_TYPE))
        chunks, self._chunks, self._chunk_rows = self._chunks, [], 0
        keys, values, offsets, millis, types, *headers = (
            column[0] if len(chunks) == 1 else pa.concat_arrays(column)
            for column in zip(*chunks, strict=True))
        # Milliseconds -> microseconds in C (int64 multiply), then a zero-copy cast.
        micros = pc.multiply(millis, 1000).cast(TIMESTAMP_TYPE)
        if n:
            # Counted in C: per-record len() calls cost the decoding loop ~5%.
            for column in (keys, values):
                self.nbytes += pc.sum(pc.binary_length(column)).as_py() or 0
        columns = [
            keys,
            values,
            pa.repeat(pa.scalar(self.topic, pa.string()), n),
            pa.repeat(pa.scalar(self.partition, pa.int32()), n),
            offsets,
            micros,
            types,
            *headers,
        ]
        return pa.RecordBatch.from_arrays(columns, schema=self.schema)


def _binary_array(rows: int, column: ArrowColumn) -> pa.Array:
    validity, nulls, offsets, data = column
    return pa.Array.from_buffers(
        pa.binary(), rows,
        [None if validity is None else pa.py_buffer(validity), pa.py_buffer(offsets),
         pa.py_buffer(data)],
        nulls)
