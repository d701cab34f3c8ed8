"""OffsetCommit responses, v0-v8, encoded by hand for the group coordinator's hot path.

Owns the byte layout of OffsetCommitResponse (OffsetCommitResponse.json; v8 is the first
flexible version). kio writes the same bytes through a schema walk over entities built for
the purpose, which costs more than the commit itself for a one-partition commit; this
writes them straight from (topic, [(partition, error code)]) pairs. Tests hold the bytes
equal to kio's for every version.

    OffsetCommitResponse => throttle_time_ms:int32 (v3+) topics:[Topic] TAGS (v8+)
    Topic                => name:string partitions:[Partition] TAGS (v8+)
    Partition            => partition_index:int32 error_code:int16 TAGS (v8+)

v0-v7 (v0-v2 are the same bytes): strings are an int16 length + UTF-8, arrays an int32
count. v8: compact forms (uvarint length + 1) and an empty tagged-field section ending every struct.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

from klog.protocol.records.varint import append_unsigned

MIN_VERSION = 0
MAX_VERSION = 8
FLEXIBLE_FROM = 8

_I32 = struct.Struct(">i")
_I16 = struct.Struct(">h")
_PARTITION = struct.Struct(">ih")  # partition_index, error_code
_NO_TAGS = b"\x00"


def encode_offset_commit_response(
    version: int,
    topics: Sequence[tuple[str, Sequence[tuple[int, int]]]],
    throttle_time_ms: int = 0,
) -> bytes:
    """The OffsetCommitResponse body (no header): ``topics`` is a sequence of (topic name,
    [(partition index, error code)]) in the order the request named them."""
    if not MIN_VERSION <= version <= MAX_VERSION:
        raise ValueError(f"OffsetCommit v{version} is not encoded here (v{MIN_VERSION}-"
                         f"v{MAX_VERSION})")
    flexible = version >= FLEXIBLE_FROM
    out = bytearray()
    if version >= 3:
        out += _I32.pack(throttle_time_ms)
    if flexible:
        append_unsigned(out, len(topics) + 1)
    else:
        out += _I32.pack(len(topics))
    for name, partitions in topics:
        raw = name.encode()
        if flexible:
            append_unsigned(out, len(raw) + 1)
        else:
            if len(raw) > 0x7FFF:
                raise ValueError(f"topic name of {len(raw)} bytes is too long")
            out += _I16.pack(len(raw))
        out += raw
        if flexible:
            append_unsigned(out, len(partitions) + 1)
        else:
            out += _I32.pack(len(partitions))
        for index, error_code in partitions:
            out += _PARTITION.pack(index, error_code)
            if flexible:
                out += _NO_TAGS
        if flexible:
            out += _NO_TAGS
    if flexible:
        out += _NO_TAGS
    return bytes(out)
