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

    def __len__(self) -> int:
        return len(self.offsets)

    def flush(self) -> pa.RecordBatch:
        """The rows collected so far as one RecordBatch; the builder starts empty again."""
        n = len(self.offsets)
        # Milliseconds -> microseconds in C (int64 multiply), then a zero-copy cast.
        millis = pa.array(self.timestamps, pa.int64())
        micros = pc.multiply(millis, 1000).cast(TIMESTAMP_TYPE)
        keys = pa.array(self.keys, pa.binary())
        values = pa.array(self.values, pa.binary())
        if n:
            # Counted in C: per-record len() calls cost the decoding loop ~5%.
            for column in (keys, values):
                self.nbytes += pc.sum(pc.binary_length(column)).as_py() or 0
        columns = [
            keys,
            values,
            pa.array([self.topic] * n, pa.string()),
            pa.array([self.partition] * n, pa.int32()),
            pa.array(self.offsets, pa.int64()),
            micros,
            pa.array(self.timestamp_types, pa.int32()),
        ]
        if self.include_headers:
            columns.append(
                pa.array(
                    [[{"key": k, "value": v} for k, v in h] for h in self.headers],
                    HEADER_TYPE,
                )
            )
        batch = pa.RecordBatch.from_arrays(columns, schema=self.schema)
        self.keys, self.values, self.offsets = [], [], []
        self.timestamps, self.timestamp_types, self.headers = [], [], []
        return batch
