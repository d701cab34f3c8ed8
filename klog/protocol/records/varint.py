"""Variable-length integers of the v2 record format (Kafka's ByteUtils, protobuf style).

This module owns the varint grammar: base-128 little-endian groups with the high bit as
the continuation flag, and zigzag mapping for signed values (0, -1, 1, -2 -> 0, 1, 2, 3).

- varint / unsigned varint: at most 5 bytes (32-bit values)
- varlong / unsigned varlong: at most 10 bytes (64-bit values)

Readers take ``(buf, position)`` and return ``(value, new_position)``; ``read_unsigned``
is the one loop they all run, which the protocol's request and internal-topic readers
call too (each with its own error), as ``append_unsigned`` is the one writer. They raise
CorruptRecordError when the buffer ends inside a varint or when a varint runs past its
maximum length (Kafka's "Varint is too long"). As in Kafka, bits that overflow the 32/64-bit
width in the last byte are dropped rather than rejected: a 5-byte varint can carry 35 bits,
and Kafka keeps the low 32. The v2 record decoder inlines the one-byte case of these
readers for speed and falls back to them otherwise, so both must agree.
"""

from __future__ import annotations

from klog.protocol.errors import CorruptRecordError

MAX_VARINT_BYTES = 5
MAX_VARLONG_BYTES = 10

_MASK32 = 0xFFFFFFFF
_MASK64 = 0xFFFFFFFFFFFFFFFF

Buffer = bytes | bytearray | memoryview


def zigzag_encode(value: int) -> int:
    """Map a signed integer to an unsigned one (any width; Python ints are unbounded)."""
    return value << 1 if value >= 0 else ((-value) << 1) - 1


def zigzag_decode(value: int) -> int:
    """Inverse of zigzag_encode."""
    return (value >> 1) ^ -(value & 1)


def read_unsigned(buf: Buffer, position: int, end: int | None = None,
                  max_bytes: int = MAX_VARINT_BYTES,
                  error: type[Exception] = CorruptRecordError) -> tuple[int, int]:
    """The one reader of unsigned varints in klog: the value at ``position`` of
    ``buf[:end]`` (at most ``max_bytes`` bytes) and the position after it.

    The value is not masked to 32/64 bits (a 5-byte varint may carry 35): the protocol's
    readers bound every count and length by what remains, the record readers below mask
    it as Kafka does. Raises ``error`` -- each grammar's own (CorruptRecordError here,
    InvalidRequestError for requests, ...) -- when the buffer ends inside the varint or it
    runs past ``max_bytes``.
    """
    if end is None:
        end = len(buf)
    value = 0
    shift = 0
    pos = position
    for _ in range(max_bytes):
        if pos >= end:
            raise error(
                f"buffer ends inside a varint at position {position} ({end - position} bytes left)"
            )
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, pos
        shift += 7
    kind = "varint" if max_bytes == MAX_VARINT_BYTES else "varlong"
    raise error(f"{kind} at position {position} is longer than {max_bytes} bytes")


def read_unsigned_varint(buf: Buffer, position: int) -> tuple[int, int]:
    """Read an unsigned varint (at most 5 bytes, value in [0, 2**32))."""
    raw, pos = read_unsigned(buf, position)
    return raw & _MASK32, pos


def read_unsigned_varlong(buf: Buffer, position: int) -> tuple[int, int]:
    """Read an unsigned varlong (at most 10 bytes, value in [0, 2**64))."""
    raw, pos = read_unsigned(buf, position, max_bytes=MAX_VARLONG_BYTES)
    return raw & _MASK64, pos


def read_varint(buf: Buffer, position: int) -> tuple[int, int]:
    """Read a zigzag varint: a signed 32-bit value in at most 5 bytes."""
    raw, pos = read_unsigned(buf, position)
    raw &= _MASK32
    return (raw >> 1) ^ -(raw & 1), pos


def read_varlong(buf: Buffer, position: int) -> tuple[int, int]:
    """Read a zigzag varlong: a signed 64-bit value in at most 10 bytes."""
    raw, pos = read_unsigned(buf, position, max_bytes=MAX_VARLONG_BYTES)
    raw &= _MASK64
    return (raw >> 1) ^ -(raw & 1), pos


def append_unsigned(out: bytearray, value: int) -> None:
    """Append the unsigned varint/varlong of ``value`` (>= 0, unchecked) to ``out``: the one
    writer, which the checked ``write_*`` below and the protocol's encoders use."""
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


def _write_unsigned(value: int) -> bytes:
    if value < 0x80:
        return bytes((value,))
    out = bytearray()
    append_unsigned(out, value)
    return bytes(out)


def write_unsigned_varint(value: int) -> bytes:
    """Encode an unsigned 32-bit value; ValueError outside [0, 2**32)."""
    if not 0 <= value <= _MASK32:
        raise ValueError(f"unsigned varint out of range: {value}")
    return _write_unsigned(value)


def write_unsigned_varlong(value: int) -> bytes:
    """Encode an unsigned 64-bit value; ValueError outside [0, 2**64)."""
    if not 0 <= value <= _MASK64:
        raise ValueError(f"unsigned varlong out of range: {value}")
    return _write_unsigned(value)


def write_varint(value: int) -> bytes:
    """Encode a signed 32-bit value with zigzag; ValueError outside int32."""
    if not -(2**31) <= value < 2**31:
        raise ValueError(f"varint out of int32 range: {value}")
    return _write_unsigned(zigzag_encode(value))


def write_varlong(value: int) -> bytes:
    """Encode a signed 64-bit value with zigzag; ValueError outside int64."""
    if not -(2**63) <= value < 2**63:
        raise ValueError(f"varlong out of int64 range: {value}")
    return _write_unsigned(zigzag_encode(value))


def size_of_unsigned_varint(value: int) -> int:
    """Bytes write_unsigned_varint/varlong needs for ``value`` (>= 0)."""
    size = 1
    while value >= 0x80:
        value >>= 7
        size += 1
    return size


def size_of_varint(value: int) -> int:
    """Bytes write_varint/write_varlong needs for the signed ``value``."""
    return size_of_unsigned_varint(zigzag_encode(value))
