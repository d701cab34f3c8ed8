"""A small v2 batch builder and segment writer for the verify/recover tests.

Private to the tests: real v2 header + uncompressed records + CRC-32C from
``klog.protocol.records.batch``. Kept independent of the production encoder so that the
tests of the offline tools do not depend on it.
"""

from __future__ import annotations

import struct
from pathlib import Path

from klog.protocol.records.batch import crc32c
from klog.protocol.records.varint import write_varint, write_varlong

_HEADER_AFTER_CRC = struct.Struct(">hiqqqhii")


def record(offset_delta: int, value: bytes, key: bytes | None = None, ts_delta: int = 0) -> bytes:
    body = b"\x00" + write_varlong(ts_delta) + write_varint(offset_delta)
    body += write_varint(-1) if key is None else write_varint(len(key)) + key
    body += write_varint(len(value)) + value
    body += write_varint(0)  # no headers
    return write_varint(len(body)) + body


def build_batch(
    base_offset: int,
    values: list[bytes],
    *,
    base_timestamp: int = 1_600_000_000_000,
    leader_epoch: int = 0,
) -> bytes:
    """An uncompressed, non-transactional v2 batch holding ``values`` (one record each)."""
    records = b"".join(record(i, v, ts_delta=i) for i, v in enumerate(values))
    count = len(values)
    after_crc = _HEADER_AFTER_CRC.pack(
        0,  # attributes
        count - 1,  # lastOffsetDelta
        base_timestamp,
        base_timestamp + count - 1,  # maxTimestamp
        -1,
        -1,
        -1,
        count,
    ) + records
    crc = crc32c(after_crc)
    batch_length = 4 + 1 + 4 + len(after_crc)  # leader epoch, magic, crc, rest
    return struct.pack(">qiibI", base_offset, batch_length, leader_epoch, 2, crc) + after_crc


def segment_name(base_offset: int, suffix: str = ".log") -> str:
    return f"{base_offset:020d}{suffix}"


def write_segment(
    partition_dir: Path,
    base_offset: int,
    batch_sizes: list[int],
    *,
    value_size: int = 100,
    base_timestamp: int = 1_600_000_000_000,
) -> tuple[Path, list[tuple[int, int, int]]]:
    """Write a segment of batches holding ``batch_sizes`` records each.

    Returns the path and (position, base_offset, last_offset) of every batch.
    """
    partition_dir.mkdir(parents=True, exist_ok=True)
    path = partition_dir / segment_name(base_offset)
    layout: list[tuple[int, int, int]] = []
    data = bytearray()
    offset = base_offset
    for n, size in enumerate(batch_sizes):
        values = [bytes([65 + (offset + i) % 26]) * value_size for i in range(size)]
        batch = build_batch(offset, values, base_timestamp=base_timestamp + offset + n)
        layout.append((len(data), offset, offset + size - 1))
        data += batch
        offset += size
    path.write_bytes(bytes(data))
    return path, layout


def write_offset_index(path: Path, base_offset: int, entries: list[tuple[int, int]]) -> None:
    path.write_bytes(b"".join(struct.pack(">ii", o - base_offset, p) for o, p in entries))


def write_time_index(path: Path, base_offset: int, entries: list[tuple[int, int]]) -> None:
    path.write_bytes(b"".join(struct.pack(">qi", t, o - base_offset) for t, o in entries))
