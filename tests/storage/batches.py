"""A tiny v2 batch builder for storage tests (independent of klog.protocol.records.v2).

Builds valid RecordBatch bytes: the 61-byte header, uncompressed records in the v2 record
grammar (varint lengths), and the CRC-32C over attributes..end. Enough to exercise the
storage engine; the real builder lives in klog.protocol.records.v2.
"""

from __future__ import annotations

import struct

from klog.protocol.records.batch import crc32c

_HEADER = struct.Struct(">qiibIhiqqqhii")


def _varint(value: int) -> bytes:
    zigzag = (value << 1) ^ (value >> 63)
    out = bytearray()
    while True:
        byte = zigzag & 0x7F
        zigzag >>= 7
        if zigzag:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _record(
    offset_delta: int, timestamp_delta: int, key: bytes | None, value: bytes | None
) -> bytes:
    body = bytearray()
    body.append(0)  # attributes
    body += _varint(timestamp_delta)
    body += _varint(offset_delta)
    for part in (key, value):
        if part is None:
            body += _varint(-1)
        else:
            body += _varint(len(part)) + part
    body += _varint(0)  # headers
    return _varint(len(body)) + bytes(body)


def build_batch(
    base_offset: int = 0,
    values: list[bytes] | None = None,
    *,
    count: int | None = None,
    value_size: int = 10,
    base_timestamp: int = 1_600_000_000_000,
    timestamps: list[int] | None = None,
    leader_epoch: int = 0,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    attributes: int = 0,
    keys: list[bytes | None] | None = None,
) -> bytes:
    """One uncompressed v2 batch of ``values`` (or ``count`` values of ``value_size``)."""
    if values is None:
        n = 1 if count is None else count
        values = [bytes([65 + i % 26]) * value_size for i in range(n)]
    if timestamps is None:
        timestamps = [base_timestamp + i for i in range(len(values))]
    if keys is None:
        keys = [None] * len(values)
    first_ts = timestamps[0]
    records = b"".join(
        _record(i, ts - first_ts, k, v)
        for i, (ts, k, v) in enumerate(zip(timestamps, keys, values, strict=True))
    )
    last_delta = len(values) - 1
    header = bytearray(
        _HEADER.pack(
            base_offset,
            0,
            leader_epoch,
            2,
            0,
            attributes,
            last_delta,
            first_ts,
            max(timestamps),
            producer_id,
            producer_epoch,
            base_sequence,
            len(values),
        )
    )
    batch = header + records
    struct.pack_into(">i", batch, 8, len(batch) - 12)
    struct.pack_into(">I", batch, 17, crc32c(memoryview(batch)[21:]))
    return bytes(batch)


def build_control_batch(
    base_offset: int,
    *,
    commit: bool,
    producer_id: int,
    producer_epoch: int,
    timestamp: int = 1_600_000_000_000,
    coordinator_epoch: int = 0,
) -> bytes:
    """A transaction marker batch (control + transactional) with one control record."""
    key = struct.pack(">hh", 0, 1 if commit else 0)
    value = struct.pack(">hi", 0, coordinator_epoch)
    return build_batch(
        base_offset,
        [value],
        keys=[key],
        timestamps=[timestamp],
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        attributes=0x10 | 0x20,
    )


def build_log(batches: list[bytes]) -> bytes:
    return b"".join(batches)


def sequential_batches(
    n_batches: int,
    records_per_batch: int = 3,
    value_size: int = 10,
    start_offset: int = 0,
    base_timestamp: int = 1_600_000_000_000,
) -> list[bytes]:
    """``n_batches`` consecutive batches with offsets from ``start_offset``."""
    out = []
    offset = start_offset
    for i in range(n_batches):
        out.append(
            build_batch(
                offset,
                count=records_per_batch,
                value_size=value_size,
                base_timestamp=base_timestamp + 1000 * i,
            )
        )
        offset += records_per_batch
    return out
