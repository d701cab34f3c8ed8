"""Reading response frames off a socket: the one frame reader of klog's client side.

``FrameReader`` is the asyncio protocol of every connection klog opens to a broker: the
client's ``BrokerConnection`` (producers, consumers, admin, and through it the
controller's channel to other brokers) and the replica fetcher's ``LeaderConnection``.
Frames are ``size:int32 payload`` (klog.protocol.framing); each size is checked by
``framing.check_response_frame_size`` as soon as its four bytes are in, before anything is
allocated for the payload, and a bad one closes the connection (``FrameSizeError``).

Copies: the socket is read (``recv_into``) into one receive buffer; a frame that is whole
in it is copied out once. A frame too big for it gets a buffer of its own, allocated at
its checked size, and the rest of its bytes are received straight into it: a 50 MiB fetch
response is not copied at all after the socket (a StreamReader copies every byte in and
once more out). Frames are handed out as bytearrays the caller owns.

Writes go through the transport; ``drain`` waits while the transport's write buffer is
above its high-water mark (the flow control a StreamWriter gives).

The broker's own connections (daemon/connection.py) cut request frames with
``framing.FrameDecoder`` instead, by design: there the size comes from an untrusted
client, so memory follows the bytes received and is never allocated at the size claimed
(at most one 256 KiB chunk ahead on TLS listeners, whose transport decrypts into the
decoder's buffers); plaintext listeners read through data_received, tuned for many small
produce requests.

Errors: ``next_frame`` raises FrameSizeError, ``ConnectionClosed`` when the peer closed
the connection, or the OSError that broke it; then again on every later call.
"""

from __future__ import annotations

import asyncio
import collections
import struct

from klog.protocol.framing import FrameSizeError, check_response_frame_size

#: What one read may take: the most asyncio's own transports read at once.
RECEIVE_BUFFER_SIZE = 256 * 1024

_SIZE = struct.Struct(">i")


class ConnectionClosed(ConnectionError):
    """The peer closed the connection (end of stream)."""


class FrameReader(asyncio.BufferedProtocol):
    """Cuts the byte stream of one connection into response frames, in arrival order."""

    def __init__(self, max_frame_bytes: int) -> None:
        self.max_frame_bytes = max_frame_bytes
        self.transport: asyncio.Transport | None = None
        self._buf = bytearray(RECEIVE_BUFFER_SIZE)
        self._view = memoryview(self._buf)
        self._start = 0  # first byte in _buf not yet cut into a frame
        self._end = 0  # end of the bytes received into _buf
        self._big: bytearray | None = None  # a frame bigger than _buf, received in place
        self._big_filled = 0
        self._frames: collections.deque[bytearray] = collections.deque()
        self._waiter: asyncio.Future[None] | None = None
        self._error: BaseException | None = None
        self._paused = False
        self._drain_waiters: collections.deque[asyncio.Future[None]] = collections.deque()

    # -- asyncio.BufferedProtocol ------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # A stream connection's transport is always an asyncio.Transport.
        self.transport = transport  # type: ignore[assignment]

    def get_buffer(self, sizehint: int) -> memoryview:
        big = self._big
        if big is not None:
            return memoryview(big)[self._big_filled :]
        return self._view[self._end :]

    def buffer_updated(self, nbytes: int) -> None:
        big = self._big
        if big is not None:
            self._big_filled += nbytes
            if self._big_filled == len(big):
                self._big = None
                self._frames.append(big)
                self._wake()
            return
        self._end += nbytes
        self._cut()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._error is None:
            self._error = exc or ConnectionClosed("the connection was closed by the peer")
        self._wake()
        waiters, self._drain_waiters = self._drain_waiters, collections.deque()
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)  # drain() sees the error

    def pause_writing(self) -> None:
        self._paused = True

    def resume_writing(self) -> None:
        self._paused = False
        waiters, self._drain_waiters = self._drain_waiters, collections.deque()
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    # -- framing -----------------------------------------------------------------------------

    def _cut(self) -> None:
        buf, start, end = self._buf, self._start, self._end
        cut = False
        while end - start >= 4:
            (size,) = _SIZE.unpack_from(buf, start)
            try:
                check_response_frame_size(size, self.max_frame_bytes)
            except FrameSizeError as exc:  # the stream has lost its framing
                self._fail(exc)
                return
            stop = start + 4 + size
            if stop <= end:
                self._frames.append(buf[start + 4 : stop])  # a copy the caller owns
                start = stop
                cut = True
                continue
            if 4 + size > len(buf):
                # Too big for the receive buffer: its own buffer, at the checked size.
                big = bytearray(size)
                have = end - start - 4
                big[:have] = self._view[start + 4 : end]
                self._big, self._big_filled = big, have
                start = end
            break
        if start == end:
            start = end = 0
        elif start:
            # A partial frame (it fits in the buffer) moves to the front, to get room for
            # its rest: at most once per read, and only the bytes of that one frame.
            buf[: end - start] = buf[start:end]
            start, end = 0, end - start
        self._start, self._end = start, end
        if cut:
            self._wake()

    def _fail(self, exc: BaseException) -> None:
        self._error = exc
        if self.transport is not None:
            self.transport.close()
        self._wake()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    # -- the reader's side -------------------------------------------------------------------

    async def next_frame(self) -> bytearray:
        """The next frame's payload; raises once the stream is broken or closed."""
        while True:
            if self._frames:
                return self._frames.popleft()
            if self._error is not None:
                raise self._error
            waiter = self._waiter = asyncio.get_running_loop().create_future()
            try:
                await waiter
            finally:
                self._waiter = None

    async def drain(self) -> None:
        """Wait until the transport's write buffer is below its high-water mark."""
        while True:
            if self._error is not None:
                raise self._error
            if not self._paused:
                return
            waiter = asyncio.get_running_loop().create_future()
            self._drain_waiters.append(waiter)
            await waiter
