"""Walking the entries of a log file: the one batch walker of klog.

``BatchWalk`` reads a ``.log`` file (or a KRaft ``.checkpoint``) from a position in big
chunks and yields every whole entry -- a v2 batch or a v0/v1 message -- with its header.
Everything that reads a log file front to back uses it: ``scan.scan_segment`` and
``rebuild_indexes`` (recovery, ``klog verify`` / ``klog recover``), the producer-state
rebuild in ``log.py``, ``dump.py`` (``klog dump-segment``) and ``spark/offline.py``.

What it checks is the framing only: each length within [minimum, ``max_batch_size``] and a
known magic (``records.batch``). CRCs, offset order and the like are the callers' rules;
a caller that rejects an entry simply stops iterating, and ``position`` is then that
entry's file position (the end of the valid prefix). Where and why the walk ended early
is in ``stop``:

- ``corrupt``: an impossible length or magic at ``stop.position``;
- ``torn``: the entry at ``stop.position`` runs past ``end`` (a torn write at the end of
  the file, or the end the caller chose);
- ``short``: the file ended before ``end`` although the entry fits before it (the file
  shrank under the walk).

A walk that stops for none of these has ``stop`` None and ``position`` at ``end``, or
before it when the file ended exactly at an entry boundary.

Memory: one window of ``chunk_size`` bytes; an entry bigger than the window is read into a
buffer of its own, allocated only after its length was checked against ``max_batch_size``
and the bytes left before ``end``. An entry bigger than ``hold_bound`` (when given) is not
held at all: it is yielded with ``None`` for its buffer, its header read alone and its CRC
computed while streaming it (``streamed_crc_ok``).

Buffers: with ``reuse_buffer`` the window is one buffer refilled in place, so an entry's
bytes are valid only until the next item (recovery and verify walk gigabytes and keep
nothing); without it every window is a new buffer, never written after it is yielded, so
entries stay valid as long as the caller holds them (dump, Spark).

A walk reads with ``os.pread`` on a descriptor it does not own: it never moves the file's
offset and never closes it.
"""

from __future__ import annotations

import os
import struct
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace

import crc32c as _crc32c

from klog.protocol.errors import CorruptRecordError
from klog.protocol.records.batch import (
    DEFAULT_MAX_BATCH_SIZE,
    LOG_OVERHEAD,
    MAGIC_V2,
    RECORD_BATCH_OVERHEAD,
    BatchHeader,
    iter_batch_headers,
    read_batch_header,
)

WALK_CHUNK_SIZE = 8 * 1024 * 1024

CORRUPT = "corrupt"
TORN = "torn"
SHORT = "short"

_LOG_OVERHEAD = struct.Struct(">qi")
_INT32 = struct.Struct(">i")
_INT64 = struct.Struct(">q")

@dataclass(frozen=True, slots=True)
class WalkStop:
    """Why a walk ended before ``end``: ``kind`` (CORRUPT, TORN or SHORT), a one-line
    ``reason`` without the position (``truncated batch: N bytes of M`` for TORN and
    SHORT), the entry's file ``position`` and its offset field when 8 bytes of it were
    there (``offset_field``)."""

    kind: str
    reason: str
    position: int
    offset_field: int | None


def read_fully(fd: int, view: memoryview, position: int) -> int:
    """Fill ``view`` from ``position`` (short only at end of file); return bytes read."""
    done = 0
    while done < len(view):
        n = os.preadv(fd, [view[done:]], position + done)
        if n == 0:
            break
        done += n
    return done


def header_of_large_entry(head: bytes | bytearray, size: int) -> BatchHeader:
    """The header of an entry of ``size`` bytes from its first ``RECORD_BATCH_OVERHEAD``
    bytes alone (``header.position`` 0). CorruptRecordError as ``read_batch_header``."""
    # read_batch_header wants the whole entry in its buffer: give it the header alone with
    # the length field shrunk to match, then restore the real length.
    head = bytes(head[:RECORD_BATCH_OVERHEAD])
    shrunk = head[:8] + _INT32.pack(len(head) - LOG_OVERHEAD) + head[12:]
    return replace(read_batch_header(shrunk), batch_length=size - LOG_OVERHEAD)


def read_entry_at(
    fd: int, position: int, limit: int, *, max_batch_size: int, whole: bool
) -> BatchHeader | None:
    """The header of the entry that starts exactly at ``position`` and lies whole within
    the first ``limit`` bytes of the file, else None: the one read of one entry that an
    index entry names.

    ``whole``: the entry is read whole and its CRC checked (None when it fails; what
    ``klog verify`` asks of a batch an offset index names). Otherwise only its header is
    read (at most 61 bytes; what ``klog dump-segment`` compares an index entry with).
    Nothing is allocated from an untrusted length before it was checked against
    ``limit`` and ``max_batch_size``.
    """
    if position < 0 or position + LOG_OVERHEAD > limit:
        return None
    head = os.pread(fd, RECORD_BATCH_OVERHEAD, position)
    if len(head) < LOG_OVERHEAD:
        return None
    length = _INT32.unpack_from(head, 8)[0]
    size = LOG_OVERHEAD + length
    if whole and (length <= 0 or length > max_batch_size):
        return None
    if position + size > limit:
        return None
    try:
        if not whole:
            if size <= len(head):
                return read_batch_header(head[:size], max_batch_size=max_batch_size)
            if len(head) < RECORD_BATCH_OVERHEAD:
                return None
            return header_of_large_entry(head, size)
        buf = head[:size] if size <= len(head) else head + os.pread(
            fd, size - len(head), position + len(head)
        )
        if len(buf) < size:
            return None
        header = read_batch_header(buf, 0, max_batch_size=max_batch_size)
    except CorruptRecordError:
        return None
    return header if header.is_valid(buf) else None


def _offset_field(buf: bytes | bytearray | memoryview, position: int) -> int | None:
    if len(buf) - position >= 8:
        return int(_INT64.unpack_from(buf, position)[0])
    return None


def _strip_position(exc: CorruptRecordError, position: int) -> str:
    # batch.py appends the buffer-relative position; a walk reports the file position.
    return str(exc).removesuffix(f" at position {position}")


class BatchWalk:
    """The entries of the file open as ``fd`` in [start, end), as (file position, header,
    buffer) with ``header.position`` relative to the buffer (None: see ``hold_bound``)."""

    __slots__ = (
        "chunk_size",
        "end",
        "fd",
        "hold_bound",
        "max_batch_size",
        "position",
        "progress",
        "reuse_buffer",
        "stop",
        "streamed_crc_ok",
    )

    def __init__(
        self,
        fd: int,
        start: int,
        end: int,
        *,
        max_batch_size: int = DEFAULT_MAX_BATCH_SIZE,
        chunk_size: int = WALK_CHUNK_SIZE,
        hold_bound: int | None = None,
        reuse_buffer: bool = False,
        progress: Callable[[int], None] | None = None,
    ) -> None:
        self.fd = fd
        self.position = start  # file position of the next entry
        self.end = end
        self.max_batch_size = max_batch_size
        self.chunk_size = chunk_size
        self.hold_bound = hold_bound
        self.reuse_buffer = reuse_buffer
        self.progress = progress  # called with the bytes of each read
        self.stop: WalkStop | None = None
        self.streamed_crc_ok = False  # for the last entry yielded without its buffer

    def _stop(self, kind: str, reason: str, position: int, offset_field: int | None) -> None:
        self.stop = WalkStop(kind, reason, position, offset_field)

    def _truncated(self, available: int, size: int | None, offset_field: int | None) -> None:
        needed = LOG_OVERHEAD if size is None else size
        kind = TORN if self.position + needed > self.end else SHORT
        of = f"at least {LOG_OVERHEAD}" if size is None else str(size)
        self._stop(kind, f"truncated batch: {available} bytes of {of}", self.position,
                   offset_field)

    def _read(self, view: memoryview, position: int) -> int:
        got = read_fully(self.fd, view, position)
        if self.progress is not None and got:
            self.progress(got)
        return got

    def __iter__(self) -> Iterator[tuple[int, BatchHeader, memoryview | None]]:
        end, max_batch_size = self.end, self.max_batch_size
        size_hint = max(RECORD_BATCH_OVERHEAD, min(self.chunk_size, max(end - self.position, 0)))
        buf = bytearray(size_hint)
        view = memoryview(buf)
        # The window holds file bytes [win_start, win_start + win_len).
        win_start = self.position
        win_len = 0
        while self.position < end:
            # Refill the window so that it starts at the next entry.
            keep = max(win_start + win_len - self.position, 0)
            offset_in_win = self.position - win_start
            if not self.reuse_buffer:
                # A new buffer: what was yielded from the old one stays as it was.
                old = view
                buf = bytearray(size_hint)
                view = memoryview(buf)
                if keep:
                    view[:keep] = old[offset_in_win : offset_in_win + keep]
            elif keep and offset_in_win:
                buf[:keep] = buf[offset_in_win : offset_in_win + keep]
            want = min(len(buf), end - self.position)
            got = self._read(view[keep:want], self.position + keep) if want > keep else 0
            win_start, win_len = self.position, keep + got
            if win_len == 0:
                return  # the file ended at an entry boundary
            consumed = 0
            try:
                for header in iter_batch_headers(view, 0, win_len, max_batch_size=max_batch_size):
                    yield win_start + header.position, header, view
                    consumed = header.end
                    self.position = win_start + consumed
            except CorruptRecordError as exc:
                pos = getattr(exc, "position", consumed)
                self._stop(CORRUPT, _strip_position(exc, pos), win_start + pos,
                           _offset_field(view[:win_len], pos))
                return
            if self.position >= end:
                return
            # A partial entry remains at the end of the window.
            partial = win_len - consumed
            # The file may have been shorter than its size said (it shrank under us): what
            # was read is then all there is.
            available = partial if win_len < want else end - self.position
            if partial < LOG_OVERHEAD:
                if partial == available:
                    self._truncated(partial, None, _offset_field(view[:win_len], consumed))
                    return
                continue  # the window was just short; refill
            offset_field, length = _LOG_OVERHEAD.unpack_from(view, consumed)
            size = length + LOG_OVERHEAD  # bounds were checked by iter_batch_headers
            if size > available:
                self._truncated(available, size, offset_field)
                return
            if self.hold_bound is not None and size > self.hold_bound:
                header_or_none = self._stream(bytes(view[consumed:win_len]), size)
                if header_or_none is None:
                    return
                yield self.position, header_or_none, None
            else:
                if size <= len(buf):
                    continue  # fits in the window once refilled
                # A batch bigger than the window: read it whole (size <= max_batch_size + 12
                # and <= the bytes left before end, both checked above).
                big = bytearray(size)
                big[:partial] = view[consumed:win_len]
                got = self._read(memoryview(big)[partial:], self.position + partial)
                if got != size - partial:
                    self._truncated(partial + got, size, offset_field)
                    return
                try:
                    header = read_batch_header(big, 0, max_batch_size=max_batch_size)
                except CorruptRecordError as exc:
                    self._stop(CORRUPT, _strip_position(exc, 0), self.position, offset_field)
                    return
                yield self.position, header, memoryview(big)
            self.position += size
            win_start, win_len = self.position, 0

    def _stream(self, tail: bytes, size: int) -> BatchHeader | None:
        """The header of the entry at ``position`` that is too big to hold, with its CRC
        computed in chunks (``streamed_crc_ok``); None when the walk stops there."""
        position = self.position
        head = tail[:RECORD_BATCH_OVERHEAD]
        if len(head) < RECORD_BATCH_OVERHEAD:
            more = bytearray(RECORD_BATCH_OVERHEAD - len(head))
            got = self._read(memoryview(more), position + len(head))
            head += bytes(more[:got])
        offset_field = _offset_field(head, 0)
        try:
            header = header_of_large_entry(head, size)
        except CorruptRecordError as exc:
            self._stop(CORRUPT, _strip_position(exc, 0), position, offset_field)
            return None
        start, stop = header.crc_span()
        chunk = bytearray(min(self.chunk_size, stop - start) or 1)
        chunk_view = memoryview(chunk)
        v2 = header.magic >= MAGIC_V2
        crc = 0
        done = start
        while done < stop:
            want = min(len(chunk), stop - done)
            got = self._read(chunk_view[:want], position + done)
            if got == 0:
                self._truncated(done, size, offset_field)
                return None
            part = chunk_view[:got]
            crc = _crc32c.crc32c(part, crc) if v2 else zlib.crc32(part, crc)
            done += got
        self.streamed_crc_ok = crc == header.crc
        return header
