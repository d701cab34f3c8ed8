"""Compression codecs of Kafka's record formats, with bounded decompression.

This module owns the bytes-to-bytes codecs named by the low three bits of a batch's (or
v0/v1 wrapper message's) attributes: gzip (1), snappy (2), lz4 (3), zstd (4). It knows the
Kafka-specific framings:

- gzip: a standard gzip stream (RFC 1952); concatenated members are read, as Java's
  GZIPInputStream does.
- snappy: the Java client writes the xerial "snappy-java" stream: a 16-byte header
  (``\\x82SNAPPY\\x00`` + version int32 + compatible-version int32, big-endian) then blocks of
  ``int32 length + raw snappy``. Other clients (librdkafka, older Pythons) may write one raw
  snappy block. Readers tell them apart by the magic header, like snappy-java itself.
- lz4: the LZ4 frame format (KIP-57), independent 64 KiB blocks, no content size. For magic
  v0 messages Kafka computed the frame header checksum (HC) over magic + descriptor instead
  of the descriptor only (KAFKA-3160); for magic 0 Kafka ignores the HC on read and writes
  the broken one, and so do we (``magic=0``).
- zstd: a zstd stream, possibly without content size (Java's streaming writer omits it),
  possibly several concatenated frames.

Decompression takes untrusted bytes. Output is produced incrementally and bounded by
``max_size``; a declared size is never trusted for allocation. Failures map onto:
CorruptRecordError (garbage, truncation), RecordTooLargeError (output beyond ``max_size``),
UnsupportedCompressionError (unknown codec id).
"""

from __future__ import annotations

import gzip
import struct
import traceback
import zlib

import cramjam
import lz4.frame as _lz4f
import zstandard as _zstd

from klog.protocol.errors import (
    CorruptRecordError,
    RecordTooLargeError,
    UnsupportedCompressionError,
)
from klog.protocol.records.batch import CompressionType

# Why 64 MiB: Kafka's default message.max.bytes is ~1 MiB of *compressed* batch, and real
# payloads compress 2-10x, rarely 50x; consumers' fetch.max.bytes defaults to 50 MiB. A
# bound of 64 MiB is above anything a sane producer emits yet caps what a decompression
# bomb (gigabytes from a few kilobytes) can make us allocate on a small machine. Callers
# that know better (message.max.bytes raised, or a tool with a flag) pass max_size.
DEFAULT_MAX_DECOMPRESSED_SIZE = 64 * 1024 * 1024

# Kafka's default levels (KIP-390): gzip -1 (= zlib's 6), lz4 9, zstd 3.
DEFAULT_GZIP_LEVEL = 6
DEFAULT_LZ4_LEVEL = 9
DEFAULT_ZSTD_LEVEL = 3

XERIAL_MAGIC = b"\x82SNAPPY\x00"
XERIAL_VERSION = 1
XERIAL_COMPATIBLE_VERSION = 1
XERIAL_HEADER_SIZE = 16
# snappy-java's default block size, which Kafka's SnappyOutputStream uses.
XERIAL_BLOCK_SIZE = 32 * 1024

LZ4_FRAME_MAGIC = b"\x04\x22\x4d\x18"

_CHUNK = 1024 * 1024
_INT32 = struct.Struct(">i")
_XERIAL_HEADER = struct.Struct(">8sii")


def _codec(codec: int | CompressionType) -> CompressionType:
    try:
        return CompressionType(codec)
    except ValueError:
        raise UnsupportedCompressionError(f"unknown compression codec id {codec}") from None


def _too_large(max_size: int) -> RecordTooLargeError:
    return RecordTooLargeError(f"decompressed data exceeds the bound of {max_size} bytes")


# ---------------------------------------------------------------------------------------
# compress


def compress(
    codec: int | CompressionType,
    data: bytes | bytearray | memoryview,
    *,
    level: int | None = None,
    magic: int = 2,
) -> bytes:
    """Compress ``data`` the way Kafka's Java client does for ``codec``.

    ``magic`` matters only for lz4: magic 0 writes the KAFKA-3160 header checksum that
    Kafka writes (and expects nobody to verify) for v0 messages.
    """
    kind = _codec(codec)
    if kind is CompressionType.NONE:
        return bytes(data)
    if kind is CompressionType.GZIP:
        # mtime=0 keeps output deterministic; Java writes 0 there too.
        return gzip.compress(
            data, compresslevel=DEFAULT_GZIP_LEVEL if level is None else level, mtime=0
        )
    if kind is CompressionType.SNAPPY:
        return compress_snappy_xerial(data)
    if kind is CompressionType.LZ4:
        return compress_lz4(data, level=level, broken_header_checksum=magic == 0)
    return _zstd.ZstdCompressor(level=DEFAULT_ZSTD_LEVEL if level is None else level).compress(
        bytes(data)
    )


def compress_snappy_raw(data: bytes | bytearray | memoryview) -> bytes:
    """One raw snappy block (what librdkafka and some other clients write)."""
    return bytes(cramjam.snappy.compress_raw(bytes(data)))


def compress_snappy_xerial(data: bytes | bytearray | memoryview) -> bytes:
    """The xerial snappy-java stream Kafka's Java client writes."""
    view = memoryview(data)
    parts = [_XERIAL_HEADER.pack(XERIAL_MAGIC, XERIAL_VERSION, XERIAL_COMPATIBLE_VERSION)]
    for start in range(0, len(view), XERIAL_BLOCK_SIZE):
        block = bytes(cramjam.snappy.compress_raw(bytes(view[start : start + XERIAL_BLOCK_SIZE])))
        parts.append(_INT32.pack(len(block)))
        parts.append(block)
    return b"".join(parts)


def compress_lz4(
    data: bytes | bytearray | memoryview,
    *,
    level: int | None = None,
    broken_header_checksum: bool = False,
) -> bytes:
    """An LZ4 frame as Kafka writes it: 64 KiB independent blocks, no content size.

    With ``broken_header_checksum`` the HC byte is computed over magic + descriptor
    (KAFKA-3160), as Kafka does for v0 messages.
    """
    frame: bytes = _lz4f.compress(
        bytes(data),
        compression_level=DEFAULT_LZ4_LEVEL if level is None else level,
        block_size=_lz4f.BLOCKSIZE_MAX64KB,
        block_linked=False,
        content_checksum=False,
        store_size=False,
    )
    if not broken_header_checksum:
        return frame
    # Without content size or dictionary id the descriptor is FLG + BD, so HC is byte 6.
    hc = (xxh32(frame[:6]) >> 8) & 0xFF
    return frame[:6] + bytes((hc,)) + frame[7:]


# ---------------------------------------------------------------------------------------
# decompress


def decompress(
    codec: int | CompressionType,
    data: bytes | bytearray | memoryview,
    *,
    max_size: int = DEFAULT_MAX_DECOMPRESSED_SIZE,
    magic: int = 2,
) -> bytes:
    """Decompress untrusted ``data``, producing at most ``max_size`` bytes.

    ``magic`` matters only for lz4: for magic 0 the frame header checksum is not checked
    (old producers wrote a wrong one, KAFKA-3160), exactly as Kafka reads it.
    """
    kind = _codec(codec)
    if kind is CompressionType.NONE:
        return bytes(data)
    try:
        return _inflate(kind, data, max_size, magic)
    except Exception as exc:
        # The inflating frames hold what they produced so far (up to max_size): release
        # it now. A caller may keep the exception (the broker answers a refused batch
        # after its worker thread returned the error), and a traceback cycle holding
        # bytes is freed only by a cyclic collection, which bytes never trigger.
        _release_frames(exc)
        raise


def _release_frames(exc: BaseException) -> None:
    """Clear the locals of the finished frames behind ``exc`` and the exceptions it
    chains to (frames still executing are left as they are)."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        traceback.clear_frames(current.__traceback__)
        current = current.__cause__ or current.__context__


def _inflate(kind: CompressionType, data: bytes | bytearray | memoryview, max_size: int,
             magic: int) -> bytes:
    try:
        if kind is CompressionType.GZIP:
            return _gunzip(data, max_size)
        if kind is CompressionType.SNAPPY:
            return _unsnappy(data, max_size)
        if kind is CompressionType.LZ4:
            return _unlz4(data, max_size, ignore_header_checksum=magic == 0)
        return _unzstd(data, max_size)
    except (CorruptRecordError, RecordTooLargeError):
        raise
    except (zlib.error, _zstd.ZstdError, RuntimeError, ValueError, EOFError, OSError) as exc:
        # Each library reports garbage its own way; to our callers it is one thing.
        raise CorruptRecordError(f"invalid {kind.kafka_name} compressed data: {exc}") from exc
    except Exception as exc:  # cramjam.DecompressionError and friends
        if type(exc).__module__.startswith("cramjam") or "Decompression" in type(exc).__name__:
            raise CorruptRecordError(
                f"invalid {kind.kafka_name} compressed data: {exc}"
            ) from exc
        raise


def _gunzip(data: bytes | bytearray | memoryview, max_size: int) -> bytes:
    out: list[bytes] = []
    produced = 0
    pending = bytes(data)
    if not pending:
        raise CorruptRecordError("empty gzip stream")
    while True:
        inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
        while True:
            chunk = inflater.decompress(pending, min(_CHUNK, max_size - produced + 1))
            produced += len(chunk)
            if produced > max_size:
                raise _too_large(max_size)
            out.append(chunk)
            pending = inflater.unconsumed_tail
            if inflater.eof:
                break
            if not pending and not chunk:
                raise CorruptRecordError("gzip stream is truncated")
        pending = inflater.unused_data
        # Java's GZIPInputStream reads concatenated members and ignores trailing bytes
        # that do not start another member; do the same.
        if len(pending) < 2 or pending[:2] != b"\x1f\x8b":
            return b"".join(out)


# snappy's densest element is a 3-byte copy of 64 bytes; anything claiming more output
# per input byte than that is lying, whatever max_size allows.
_SNAPPY_MAX_RATIO = 22


def _snappy_raw_block(block: bytes, budget: int, max_size: int) -> bytes:
    # The preamble is the uncompressed length as an unsigned varint (at most 5 bytes).
    declared = 0
    shift = 0
    for i in range(5):
        if i >= len(block):
            raise CorruptRecordError("snappy block ends inside its length preamble")
        b = block[i]
        declared |= (b & 0x7F) << shift
        if b < 0x80:
            break
        shift += 7
    else:
        raise CorruptRecordError("snappy length preamble is longer than 5 bytes")
    if declared > budget:
        raise _too_large(max_size)
    if declared > _SNAPPY_MAX_RATIO * len(block) + 32:
        raise CorruptRecordError(
            f"snappy block of {len(block)} bytes claims {declared} uncompressed bytes"
        )
    result = bytes(cramjam.snappy.decompress_raw(block))
    if len(result) != declared:
        raise CorruptRecordError("snappy block length does not match its preamble")
    return result


def _unsnappy(data: bytes | bytearray | memoryview, max_size: int) -> bytes:
    raw = bytes(data)
    if not raw.startswith(XERIAL_MAGIC):
        return _snappy_raw_block(raw, max_size, max_size)
    if len(raw) < XERIAL_HEADER_SIZE:
        raise CorruptRecordError("xerial snappy header is truncated")
    # Version and compatible-version are not checked: snappy-java ignores them on read and
    # some producers write them little-endian.
    out: list[bytes] = []
    produced = 0
    pos = XERIAL_HEADER_SIZE
    end = len(raw)
    while pos < end:
        if end - pos < 4:
            raise CorruptRecordError(f"xerial snappy block length truncated at {pos}")
        (length,) = _INT32.unpack_from(raw, pos)
        pos += 4
        if length < 0 or length > end - pos:
            raise CorruptRecordError(
                f"xerial snappy block of {length} bytes at {pos - 4} but {end - pos} left"
            )
        block = _snappy_raw_block(raw[pos : pos + length], max_size - produced, max_size)
        produced += len(block)
        out.append(block)
        pos += length
    return b"".join(out)


def _unlz4(
    data: bytes | bytearray | memoryview, max_size: int, *, ignore_header_checksum: bool
) -> bytes:
    raw = memoryview(data)
    hc_pos = _lz4_header_checksum_position(raw)
    pending: bytes | memoryview = raw
    if ignore_header_checksum:
        # Kafka skips the HC byte for v0; the library cannot, so write the right one in.
        correct = (xxh32(raw[4:hc_pos]) >> 8) & 0xFF
        pending = b"".join((raw[:hc_pos], bytes((correct,)), raw[hc_pos + 1 :]))
    inflater = _lz4f.LZ4FrameDecompressor()
    out: list[bytes] = []
    produced = 0
    while True:
        chunk = inflater.decompress(pending, max_length=min(_CHUNK, max_size - produced + 1))
        pending = b""
        produced += len(chunk)
        if produced > max_size:
            raise _too_large(max_size)
        out.append(chunk)
        if inflater.eof:
            # Kafka reads one frame and ignores what follows.
            return b"".join(out)
        if inflater.needs_input:
            raise CorruptRecordError("lz4 frame is truncated")


def _lz4_header_checksum_position(raw: memoryview) -> int:
    """Where the HC byte of the LZ4 frame in ``raw`` sits (validates magic and FLG)."""
    if len(raw) < 7:
        raise CorruptRecordError(f"lz4 frame of {len(raw)} bytes is shorter than a header")
    if raw[:4] != LZ4_FRAME_MAGIC:
        raise CorruptRecordError("lz4 frame magic number is wrong")
    flg = raw[4]
    if flg >> 6 != 1:
        raise CorruptRecordError(f"lz4 frame version {flg >> 6} is not supported")
    pos = 6
    if flg & 0x08:  # content size
        pos += 8
    if flg & 0x01:  # dictionary id
        pos += 4
    if len(raw) <= pos:
        raise CorruptRecordError("lz4 frame descriptor is truncated")
    return pos


_ZSTD_MAGIC = 0xFD2FB528
_ZSTD_SKIPPABLE_MASK = 0xFFFFFFF0
_ZSTD_SKIPPABLE_MAGIC = 0x184D2A50
_UINT32_LE = struct.Struct("<I")


def _zstd_frame_end(raw: memoryview, pos: int) -> tuple[int, bool]:
    """End of the zstd frame at ``pos`` and whether it holds data (not skippable).

    Walks the frame header and block headers only (one per <= 128 KiB block), so that
    truncation and trailing garbage are caught before decoding: the streaming decoder
    below reports neither.
    """
    end = len(raw)
    if end - pos < 4:
        raise CorruptRecordError(f"zstd frame at {pos} is truncated")
    (magic,) = _UINT32_LE.unpack_from(raw, pos)
    if magic & _ZSTD_SKIPPABLE_MASK == _ZSTD_SKIPPABLE_MAGIC:
        if end - pos < 8:
            raise CorruptRecordError(f"skippable zstd frame at {pos} is truncated")
        (size,) = _UINT32_LE.unpack_from(raw, pos + 4)
        if size > end - pos - 8:
            raise CorruptRecordError(f"skippable zstd frame at {pos} is truncated")
        return pos + 8 + size, False
    if magic != _ZSTD_MAGIC:
        raise CorruptRecordError(f"no zstd frame at {pos} (magic {magic:#010x})")
    if end - pos < 5:
        raise CorruptRecordError(f"zstd frame header at {pos} is truncated")
    descriptor = raw[pos + 4]
    single_segment = descriptor & 0x20
    fcs_size = (1 if single_segment else 0, 2, 4, 8)[descriptor >> 6]
    header = 1 + (0 if single_segment else 1) + (0, 1, 2, 4)[descriptor & 0x03] + fcs_size
    cursor = pos + 4 + header
    while True:
        if end - cursor < 3:
            raise CorruptRecordError(f"zstd frame at {pos} is truncated")
        block = raw[cursor] | (raw[cursor + 1] << 8) | (raw[cursor + 2] << 16)
        block_type = (block >> 1) & 0x03
        if block_type == 3:
            raise CorruptRecordError(f"reserved zstd block type in frame at {pos}")
        cursor += 3 + (1 if block_type == 1 else block >> 3)
        if cursor > end:
            raise CorruptRecordError(f"zstd frame at {pos} is truncated")
        if block & 1:
            break
    if descriptor & 0x04:
        cursor += 4
        if cursor > end:
            raise CorruptRecordError(f"zstd frame at {pos} is truncated")
    return cursor, True


def _unzstd(data: bytes | bytearray | memoryview, max_size: int) -> bytes:
    raw = memoryview(data)
    if not raw:
        raise CorruptRecordError("empty zstd stream")
    # The window is what the decoder allocates up front; frames may ask for up to the
    # bound (at least 8 MiB, the window of zstd levels <= 19) but never more than 128 MiB.
    window = 1 << max(23, min(27, (max(max_size, 1) - 1).bit_length()))
    decoder = _zstd.ZstdDecompressor(max_window_size=window)
    out: list[bytes] = []
    produced = 0
    pos = 0
    # Java's ZstdInputStream reads concatenated frames; so do we, one at a time.
    while pos < len(raw):
        frame_end, has_data = _zstd_frame_end(raw, pos)
        if has_data:
            # read_to_iter yields at most write_size bytes at a time: a bomb is stopped
            # within one chunk of the bound.
            chunks = decoder.read_to_iter(
                raw[pos:frame_end], read_size=_CHUNK, write_size=min(_CHUNK, max_size + 1)
            )
            try:
                for chunk in chunks:
                    produced += len(chunk)
                    if produced > max_size:
                        raise _too_large(max_size)
                    out.append(chunk)
            except _zstd.ZstdError as exc:
                if "too much memory" in str(exc):
                    raise RecordTooLargeError(
                        f"zstd frame at {pos} needs a window above {window} bytes"
                    ) from exc
                raise
        pos = frame_end
    return b"".join(out)


# ---------------------------------------------------------------------------------------
# xxHash32, only for LZ4 frame-header checksums (a few bytes): the lz4 package does not
# expose it and Kafka's v0 quirk needs it.

_P1 = 2654435761
_P2 = 2246822519
_P3 = 3266489917
_P4 = 668265263
_P5 = 374761393
_M32 = 0xFFFFFFFF


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & _M32


def xxh32(data: bytes | bytearray | memoryview, seed: int = 0) -> int:
    """xxHash32 of ``data`` (reference algorithm; fine for short inputs)."""
    buf = bytes(data)
    n = len(buf)
    i = 0
    if n >= 16:
        v1 = (seed + _P1 + _P2) & _M32
        v2 = (seed + _P2) & _M32
        v3 = seed & _M32
        v4 = (seed - _P1) & _M32
        while i <= n - 16:
            a, b, c, d = struct.unpack_from("<4I", buf, i)
            v1 = (_rotl((v1 + a * _P2) & _M32, 13) * _P1) & _M32
            v2 = (_rotl((v2 + b * _P2) & _M32, 13) * _P1) & _M32
            v3 = (_rotl((v3 + c * _P2) & _M32, 13) * _P1) & _M32
            v4 = (_rotl((v4 + d * _P2) & _M32, 13) * _P1) & _M32
            i += 16
        h = (_rotl(v1, 1) + _rotl(v2, 7) + _rotl(v3, 12) + _rotl(v4, 18)) & _M32
    else:
        h = (seed + _P5) & _M32
    h = (h + n) & _M32
    while i + 4 <= n:
        (word,) = struct.unpack_from("<I", buf, i)
        h = (_rotl((h + word * _P3) & _M32, 17) * _P4) & _M32
        i += 4
    while i < n:
        h = (_rotl((h + buf[i] * _P5) & _M32, 11) * _P1) & _M32
        i += 1
    h ^= h >> 15
    h = (h * _P2) & _M32
    h ^= h >> 13
    h = (h * _P3) & _M32
    h ^= h >> 16
    return h
