"""One entry point to the records of any log entry, whatever its magic.

This module owns nothing but the dispatch: a v2 batch goes to ``v2``, a v0/v1 shallow
entry (a message or a compressed wrapper) to ``legacy``. Callers get ``Record`` values
either way.
"""

from __future__ import annotations

from collections.abc import Iterator

from klog.protocol.records.batch import MAGIC_V2, BatchHeader
from klog.protocol.records.compression import DEFAULT_MAX_DECOMPRESSED_SIZE
from klog.protocol.records.legacy import iter_legacy_records
from klog.protocol.records.record import Record
from klog.protocol.records.v2 import iter_records as iter_v2_records


def iter_records(
    buf: bytes | bytearray | memoryview,
    header: BatchHeader,
    *,
    max_decompressed_size: int = DEFAULT_MAX_DECOMPRESSED_SIZE,
) -> Iterator[Record]:
    """Yield the records of the entry ``header`` describes (bytes in ``buf``).

    CRCs are not checked at the entry level (``header.ensure_valid``); v0/v1 records
    report their own message CRC in ``is_valid``.
    """
    if header.magic == MAGIC_V2:
        return iter_v2_records(buf, header, max_decompressed_size=max_decompressed_size)
    return iter_legacy_records(buf, header, max_decompressed_size=max_decompressed_size)
