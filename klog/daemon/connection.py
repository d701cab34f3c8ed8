"""One client connection's transport: bytes from the socket into its request pipeline,
the pipeline's answers onto the socket.

The decisions about requests -- framing and size limits, the SASL gate, the handler
trampoline, the request metrics and quotas, the KIP-219 mute, the order of answers -- are
the sans-I/O request pipeline's (klog/daemon/pipeline.py, ``RequestPipeline``). This module
owns what touches the transport and the event loop: reading (and when not to read),
the task that starts queued requests and awaits the handlers that wait, the drainer of
deferred answers, writing (coalescing, sendfile, TLS), and closing. Its server is reached
through a small Protocol (``ConnectionOwner``), so it does not import server.py.

Requests are processed one at a time in arrival order, as Kafka's SocketServer does (it
mutes a channel while one of its requests is in flight), so responses go out in request
order -- pipelining clients may send ahead, and what they send ahead waits in the
pipeline's queue. One difference from Kafka, for speed: a handler may answer ``Deferred``
(an acks=-1 produce waiting for the ISR after its append); the connection then starts on
the next request while that answer waits, up to MAX_DEFERRED of them, and every answer
still goes out in request order. Kafka keeps the channel muted through the wait, which
makes replicated produce one round trip per request; nothing else changes, as the appends
themselves still happen in request order.

Requests that arrive on an idle connection are handled in the read callback itself, up to
their handler's first wait (most never wait: a produce with acks 0 or 1, metadata), and
their answers leave in one send at the end of that read: one event-loop iteration per
request instead of three (read, wake the connection's task, flush). A handler that does
wait is finished by the connection's task, which then takes over the queue as before.

Backpressure: every queued request counts against the broker-wide queued.max.requests;
when the broker is at that limit, connections that receive more stop reading from their
sockets (TCP then pushes back on the client) until the queue drains. A connection also
stops reading once it holds READ_AHEAD_BYTES of requests it has not started on: Kafka
reads one request per connection at a time, and without this bound a single pipelining
client could park queued.max.requests x socket.request.max.bytes in the broker. Writes
respect the transport's high-water mark (``pause_writing``). A fetch response's record data goes out
with ``sendfile`` from the segment file, through a descriptor of the connection's own
(dup'ed before the first byte is written), so a segment the log closes or deletes
mid-response is still read whole -- never through a descriptor number the process has
since reused for another file.

Security (klog/daemon/security/): on a TLS listener the transport is asyncio's TLS
transport, which decrypts straight into the frame decoder's buffers (``TlsConnection``),
and record regions are read and written through it in pieces
(``_write_regions_tls``) -- sendfile would put the file's bytes on the socket unencrypted;
plaintext keeps sendfile. A verified client certificate on an SSL listener names the
principal (``ssl.principal.mapping.rules``, decided by the pipeline). On a SASL listener a
failed authentication is answered, nothing more is read, and the connection is closed
after connection.failed.authentication.delay.ms (``close_after``).

Client quotas (KIP-219, klog/daemon/quotas.py): a handler that finds its client over a
quota says the throttle time in the response and calls ``throttle`` (on the pipeline); the
connection then starts none of that client's further requests until the time has passed
(they wait in its queue, whose read-ahead bound stops reading from the socket, as Kafka
mutes the channel).

What closes a connection, as in Kafka: what the pipeline refuses (``RemoteProtocolError``:
a frame size out of bounds, an unknown api key, a version not advertised -- except
ApiVersions, which is answered in v0 with UNSUPPORTED_VERSION --, a header or body that
does not decode, a request the SASL state does not allow), idleness beyond
connections.max.idle.ms, and a record region that shrank while being sent. A peer that
shuts down its sending side (end of stream) still has every whole request it sent
processed and answered -- an acks=0 producer that closes right after its last request
expects it in the log, and a half-closed client can still read -- and the connection is
closed once they are done.

A connection holds its slot in the connection limits (klog/daemon/connection_quotas.py)
until its socket is closed, whichever way it ends, and gives it back in
``connection_lost``. So every close ends: an abrupt one at once, a graceful one (after the
peer's end of stream, after a failed authentication: what is written still goes out, and
on TLS the peer's close_notify is awaited) within CLOSE_GRACE_SECONDS.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
from collections.abc import Callable, Coroutine, Sequence
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from klog.daemon.handlers import Response
from klog.daemon.pipeline import (
    MAX_DEFERRED,
    READ_AHEAD_BYTES,
    Chunk,
    Defer,
    Dispatch,
    LocalProtocolError,
    PendingAnswer,
    Regions,
    RemoteProtocolError,
    RequestPipeline,
    Step,
    Waiting,
    all_bytes,
)
from klog.daemon.security.listener import ListenerSecurity
from klog.daemon.security.principal import KafkaPrincipal
from klog.protocol.framing import RequestHeader

if TYPE_CHECKING:
    from klog.daemon.metrics.counters import RequestTiming

__all__ = ["CLOSE_GRACE_SECONDS", "MAX_DEFERRED", "READ_AHEAD_BYTES", "Connection",
           "ConnectionOwner", "FileRegion", "ShortSendError", "TlsConnection"]

log = logging.getLogger(__name__)

_T = TypeVar("_T")

# Answers to pipelined requests are gathered and handed to the socket together: one send
# for all the responses ready before the connection's task yields (up to this many bytes).
# On loopback a send costs as much CPU as handling a small produce request. Held no longer
# than _COALESCE_SECONDS after the first of them: after a stall the queue holds a backlog
# (tens of small produce requests), and without a bound its first answers would wait for
# the whole backlog to be handled -- the p99 produce latency benchmark's tail.
_COALESCE_BYTES = 64 << 10
_COALESCE_SECONDS = 0.0005

#: Longest a graceful close (after the peer's end of stream, after a failed authentication)
#: waits for the answers written to go out and, on TLS, for the peer's close_notify before
#: the connection is dropped; until then it holds its slot in the connection limits. Kafka
#: closes at once; a client still reading its last answers gets this long.
CLOSE_GRACE_SECONDS = 5.0


class FileRegion:
    """Bytes of an open file to send with sendfile (a fetch's record data)."""

    __slots__ = ("fd", "position", "size")

    def __init__(self, fd: int, position: int, size: int) -> None:
        self.fd = fd
        self.position = position
        self.size = size


class _FdFile:
    """The file-object face asyncio's sendfile wants, over a descriptor we do not own.

    asyncio seeks the descriptor after sending; segments read and write with pread and
    pwrite only, so the descriptor's own position is never relied upon.
    """

    __slots__ = ("_fd", "_pos", "mode")

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._pos = 0
        self.mode = "rb"

    def fileno(self) -> int:
        return self._fd

    def seek(self, pos: int, whence: int = 0) -> int:
        self._pos = pos
        return pos

    def readinto(self, buf: bytearray | memoryview) -> int:  # asyncio's fallback path
        data = os.pread(self._fd, len(buf), self._pos)
        buf[: len(data)] = data
        self._pos += len(data)
        return len(data)



class ShortSendError(ConnectionError):
    """A record region shrank while it was being sent (the log was truncated)."""


#: Bytes of a record region read per write on a TLS connection (sendfile cannot encrypt).
TLS_REGION_CHUNK = 256 << 10



class ConnectionOwner(Dispatch, Protocol):
    """What a connection uses of the server that accepted it (klog/daemon/server.py's
    Server): what its pipeline dispatches with (``Dispatch``), the queued-request count it
    shares with its sibling connections and their limit, and where it reports its end. A
    Protocol, so that this module does not import server.py, which imports it."""

    queued_max_requests: int
    queued: int
    connections: set[Connection]
    paused: set[Connection]

    def connection_closed(self, conn: Connection) -> None: ...

    def request_done(self) -> None: ...


class Connection(asyncio.Protocol):
    def __init__(self, server: ConnectionOwner, listener_name: str, address: str | None = None,
                 security: ListenerSecurity | None = None) -> None:
        self.server = server
        self.listener_name = listener_name
        self.security = security or ListenerSecurity(listener_name, "PLAINTEXT")
        #: TLS: record regions are read and written through the TLS transport.
        self.tls = self.security.ssl_context is not None
        # The peer's address as the connection limits count it; None: not counted.
        self.address = address
        self._counted = address is not None
        #: Every decision about this connection's requests (klog/daemon/pipeline.py).
        self.pipeline = RequestPipeline(server, self, listener_name, self.security)
        self.transport: asyncio.Transport | None = None
        self.peer: str = "?"
        self.closed = False
        self.reading_paused = False
        self.busy = False
        self._in_sendfile = False
        self._eof = False  # the peer will send nothing more
        self.last_active = time.monotonic()
        self._wakeup = asyncio.Event()
        self._can_write = asyncio.Event()
        self._can_write.set()
        self._task: asyncio.Task[None] | None = None
        # A request begun in the read callback whose handler waits: the task finishes it
        # before anything in the queue.
        self._started: Coroutine[Any, Any, None] | None = None
        self._out: list[Chunk] = []  # response bytes not yet handed to the transport
        self._out_size = 0
        self._out_since = 0.0  # perf_counter() when the oldest unsent answer was gathered
        self._flush_scheduled = False
        self._deferred_space = asyncio.Event()
        self._drainer: asyncio.Task[None] | None = None

    @property
    def task(self) -> asyncio.Task[None] | None:
        """The task processing this connection's requests (None before it is connected)."""
        return self._task

    @property
    def principal(self) -> KafkaPrincipal:
        """Who the connection authenticated as (the pipeline's; ANONYMOUS until then)."""
        return self.pipeline.principal

    @property
    def queue(self) -> Sequence[memoryview]:
        """The frames received and not yet started."""
        return self.pipeline.queue

    @property
    def deferred(self) -> Sequence[tuple[RequestHeader, PendingAnswer | None, Response]]:
        """The answers not yet written while a Deferred one waits (the pipeline's outbox)."""
        return self.pipeline.outbox

    # -- asyncio.Protocol -------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        peer = transport.get_extra_info("peername")
        self.peer = self.pipeline.peer = f"{peer[0]}:{peer[1]}" if peer else "?"
        self.server.connections.add(self)
        if self.security.principal_mapper is not None:
            try:
                self.pipeline.certificate_principal(transport.get_extra_info("peercert"))
            except RemoteProtocolError as exc:
                self._refused(exc)
        self._task = asyncio.get_running_loop().create_task(self._process())

    def data_received(self, data: bytes) -> None:
        self._received(self.pipeline.receive_data, data)

    def _received(self, step: Callable[[_T], list[memoryview]], received: _T) -> None:
        """Frame what arrived with the pipeline's ``step`` (bytes for a plain connection, a
        count of bytes in its buffer for TLS), and queue the frames."""
        try:
            frames = step(received)
        except RemoteProtocolError as exc:
            self._refused(exc)
            return
        self._frames_received(frames)

    def _frames_received(self, frames: list[memoryview]) -> None:
        self.last_active = received = time.monotonic()
        if not frames or self.closed:  # closing: nothing more is read into the queue
            return
        self.server.queued += len(frames)
        pipeline = self.pipeline
        if not self.busy and not pipeline.queue and self._started is None \
                and not pipeline.throttled_until:
            frames = self._handle_at_once(frames, received)
            if not frames:
                return
        pipeline.enqueue(frames, received)
        if self._over_limits():
            self.update_reading()
        self._wakeup.set()

    def _handle_at_once(self, frames: list[memoryview], received: float) -> list[memoryview]:
        """Handle requests of an idle connection here and now, in order, until one has to
        wait (for its handler, the socket, or room for deferred answers); the frames not
        handled are returned for the task. The answers gathered leave in one send."""
        handled = 0
        pipeline = self.pipeline
        for frame in frames:
            if self.closed or not self._can_write.is_set() or pipeline.outbox_full() \
                    or pipeline.throttled_until:
                break
            handled += 1
            self.busy = True
            try:
                started = self._start(frame, received)
            except Exception as exc:
                self._request_done()
                self._failed(exc)
                break
            if started is not None:
                self._started = started
                self._wakeup.set()
                break
            self._request_done()
        self._flush_out()
        if self.closed:
            # Nothing more is read from a closed connection; its unhandled frames are
            # dropped here as ``connection_lost`` drops the queue.
            self.server.queued -= len(frames) - handled
            return []
        return frames[handled:]

    def eof_received(self) -> bool:
        # Keep the transport open for writing: the queue is processed and answered first
        # (``_process`` closes the connection when it runs dry). asyncio may report the
        # end of stream again after resuming reading; this is idempotent.
        self._eof = True
        self._wakeup.set()
        # TLS has no half-close: asyncio's TLS transport closes after the peer's
        # close_notify whatever this returns (and warns when it returns True).
        return not self.tls

    def connection_lost(self, exc: Exception | None) -> None:
        # The one place a connected socket is known to be closed, however it ended (our
        # close or abort, a graceful close finished or cut short, the peer's reset or end
        # of stream): its slot in the connection limits is given back here.
        self.closed = True
        self.transport = None
        self.release()
        self.server.queued -= self.pipeline.drop_queue()
        self.server.connections.discard(self)
        self.server.paused.discard(self)
        self._wakeup.set()
        self._can_write.set()
        if self._in_sendfile:
            # asyncio's sendfile waits for the socket to become writable, which a closed
            # transport never reports: end that wait, or the task (and the region's
            # pinned descriptor) would wait forever. Soon, not now: the transport fails
            # its own waiter right after this call, and must find it not yet cancelled.
            asyncio.get_running_loop().call_soon(self._cancel_stuck_send)

    def release(self) -> None:
        """Stop counting against the connection limits (once; the socket is closed)."""
        if self._counted:
            self._counted = False
            self.server.connection_closed(self)

    def _cancel_stuck_send(self) -> None:
        if self._in_sendfile:
            for task in (self._task, self._drainer):
                if task is not None and not task.done():
                    task.cancel()

    def pause_writing(self) -> None:
        self._can_write.clear()

    def resume_writing(self) -> None:
        self._can_write.set()

    # -- flow control -----------------------------------------------------------------------

    def _over_limits(self) -> bool:
        return (self.server.queued >= self.server.queued_max_requests
                or self.pipeline.over_read_ahead())

    def update_reading(self) -> None:
        """Pause or resume reading the socket, as the broker's and this connection's
        queues require. Idempotent; the transport's own state is set every time, since
        asyncio's sendfile pauses and resumes reading behind our back."""
        transport = self.transport
        if transport is None or self.closed:
            self.server.paused.discard(self)
            return
        if self._over_limits():
            self.reading_paused = True
            transport.pause_reading()
            self.server.paused.add(self)
        elif self._eof:  # nothing more to read
            self.reading_paused = False
            self.server.paused.discard(self)
        elif not self._in_sendfile:  # after a send, asyncio restores reading; then we decide
            self.reading_paused = False
            transport.resume_reading()
            self.server.paused.discard(self)

    # -- closing ----------------------------------------------------------------------------

    def close(self) -> None:
        """Close at once, dropping anything not yet written (an error, shutdown, idle).
        Also cuts short a graceful close still under way (``_close_after_writes``)."""
        if self.transport is not None:  # not lost yet: abort is idempotent
            self.transport.abort()
        self.closed = True
        self._wakeup.set()
        self._deferred_space.set()
        drainer = self._drainer
        if drainer is not None and not drainer.done() and drainer is not asyncio.current_task():
            drainer.cancel()  # its answers have nowhere to go

    def close_after(self, delay: float) -> None:
        """Read nothing more, and close gracefully after ``delay`` seconds (a failed SASL
        authentication: the failure's answer goes out first)."""
        if self.transport is not None and not self.closed:
            self.transport.pause_reading()
        asyncio.get_running_loop().call_later(delay, self._close_after_writes)

    def _refused(self, exc: RemoteProtocolError) -> None:
        """The pipeline refused what the peer sent: close, as Kafka does."""
        log.info("closing connection from %s: %s", self.peer, exc)
        self.close()

    def _close_after_writes(self) -> None:
        """Close gracefully -- after the peer's end of stream, after a failed
        authentication's delay: what is written still goes out -- within
        CLOSE_GRACE_SECONDS. The connection holds its slot in the connection limits until
        the socket is closed (``connection_lost``), so a close must end even when the peer
        does not play along: a plaintext transport waits for its write buffer to drain, a
        TLS transport for the peer's close_notify; past the grace the transport is
        aborted. A TLS transport must also be reading: asyncio's TLS shutdown reads the
        peer's close_notify and end of stream only while its protocol reads, and a close
        begun while reading is paused (as a failed authentication pauses it) after the
        peer's end of stream never ends, nor times out -- the connection kept its slot for
        good, in CLOSE-WAIT."""
        self._flush_out()
        self.closed = True
        self._wakeup.set()
        transport = self.transport
        if transport is None:
            return
        if not transport.is_closing():  # else closing already (asyncio's TLS shutdown)
            if self.tls:
                transport.resume_reading()  # what arrives now is dropped: closed is set
            transport.close()
        asyncio.get_running_loop().call_later(CLOSE_GRACE_SECONDS, self._close_overdue)

    def _close_overdue(self) -> None:
        if self.transport is not None:
            log.debug("connection %s: not closed gracefully within %.0f s; dropping it",
                      self.peer, CLOSE_GRACE_SECONDS)
            self.transport.abort()

    # -- processing -------------------------------------------------------------------------

    async def _process(self) -> None:
        started: Coroutine[Any, Any, None] | None
        pipeline = self.pipeline
        try:
            while not self.closed:
                if self._started is not None:  # begun in the read callback
                    started, self._started = self._started, None
                    try:
                        await started
                        if self._out and not self._flush_scheduled:
                            self._schedule_flush()
                    finally:
                        self._request_done()
                    continue
                if not pipeline.queue:
                    if self._eof:
                        if self._drainer is not None and not self._drainer.done():
                            await asyncio.wait([self._drainer])
                        self._close_after_writes()
                        break
                    self._wakeup.clear()
                    await self._wakeup.wait()
                    continue
                if pipeline.outbox_full():
                    self._deferred_space.clear()
                    await self._deferred_space.wait()
                    continue
                if not self._can_write.is_set():
                    await self._can_write.wait()
                    continue
                if pipeline.throttled_until:
                    delay = pipeline.mute_remaining(time.monotonic())
                    if delay > 0:  # muted for a quota (KIP-219); close() wakes us
                        self._wakeup.clear()
                        with contextlib.suppress(TimeoutError):
                            await asyncio.wait_for(self._wakeup.wait(), delay)
                        continue
                frame, received = pipeline.next_request()
                if self.reading_paused:
                    self.update_reading()
                self.busy = True
                try:
                    started = self._start(frame, received)
                    if started is not None:
                        await started
                    if self._out and not self._flush_scheduled:
                        self._schedule_flush()
                finally:
                    self._request_done()
        except BaseException as exc:
            self._task_failed(exc)
        finally:
            if self._started is not None:  # closed before the task could finish it
                self._started.close()
                self._started = None
                self._request_done()

    def _task_failed(self, exc: BaseException) -> None:
        """How the request and answer tasks end on an exception: a cancellation (or an
        interrupt) closes the connection and goes on up; a failure is told by _failed."""
        if isinstance(exc, Exception):
            self._failed(exc)
            return
        self.close()
        raise exc

    def _request_done(self) -> None:
        self.busy = False
        self.last_active = time.monotonic()
        self.server.request_done()

    def _failed(self, exc: Exception) -> None:
        """A processing task ended on ``exc``: the peer went away, or a klog bug."""
        if isinstance(exc, RemoteProtocolError):
            self._refused(exc)
            return
        if isinstance(exc, (ConnectionError, OSError)):
            log.debug("connection %s: %s", self.peer, exc)
        elif isinstance(exc, LocalProtocolError):
            log.error("closing connection from %s: %s", self.peer, exc)
        else:
            log.error("unexpected error on connection %s; closing it", self.peer,
                      exc_info=exc)
        self.close()

    def _start(self, frame: memoryview, received: float = 0.0
               ) -> Coroutine[Any, Any, None] | None:
        """Start one request in the pipeline and carry out its step as far as it goes
        without waiting. Returns what is left to await (a handler that waits, or an answer
        with file regions to send), else None: the answer is gathered for the next send,
        deferred, or not due."""
        try:
            step = self.pipeline.start(frame, received)
        except RemoteProtocolError as exc:
            self._refused(exc)
            return None
        if step is None:
            return None
        if type(step) is list:  # most answers: all bytes, gathered for the next send
            self._gather(step)
            return None
        return self._take(step)

    def _take(self, step: Step) -> Coroutine[Any, Any, None] | None:
        """Carry out a pipeline step (klog/daemon/pipeline.py); what is left to await."""
        if type(step) is list:  # an answer, all bytes: the next send takes it
            self._gather(step)
            return None
        if type(step) is Waiting:
            return self._finish_waiting(step)
        if type(step) is Regions:
            writing = self._write(step.chunks)
            return writing if step.timing is None else _timed_send(writing, step.timing)
        assert type(step) is Defer
        answer = asyncio.ensure_future(step.response)
        if step.timing is not None:
            answer.add_done_callback(step.timing.remote_done)
        self.pipeline.defer(step.header, answer)
        if self._drainer is None or self._drainer.done():
            self._drainer = asyncio.get_running_loop().create_task(self._drain())
        return None

    async def _finish_waiting(self, waiting: Waiting) -> None:
        """The rest of a request whose handler waits, run by the connection's task."""
        response = await waiting.handling
        step = self.pipeline.answer(waiting.header, response, waiting.timing)
        if step is not None:
            started = self._take(step)
            if started is not None:
                await started

    async def _drain(self) -> None:
        """Send the deferred answers, and those behind them, in request order as each
        completes."""
        pipeline = self.pipeline
        outbox = pipeline.outbox
        try:
            while outbox and not self.closed:
                header, answer, response = outbox[0]
                if answer is not None:
                    response = await answer
                if response is not None and not self.closed:
                    await self.send_response(header, response)
                # Removed only once sent: while it is there, newer answers queue behind it.
                pipeline.answer_sent()
                self._deferred_space.set()
        except BaseException as exc:
            self._task_failed(exc)
        finally:
            if self.closed:
                for pending in pipeline.drop_outbox():
                    pending.cancel()
                self._deferred_space.set()

    async def send_response(self, header: RequestHeader, response: Response) -> None:
        await self._write(self.pipeline.encode(header, response))

    # -- writing ----------------------------------------------------------------------------

    def _gather(self, chunks: Sequence[Chunk]) -> None:
        """Add an answer's bytes to the next send; send now if the answers gathered are
        big enough or the oldest has waited long enough. Whoever gathers makes sure a
        send follows (the read callback at its end, the task through ``_schedule_flush``)."""
        if self.transport is None or self.closed:
            return
        now = time.perf_counter()
        if not self._out:
            self._out_since = now
        self._out.extend(chunks)
        self._out_size += sum(len(c) for c in chunks)
        if self._out_size >= _COALESCE_BYTES or now - self._out_since >= _COALESCE_SECONDS:
            self._flush_out()

    def _schedule_flush(self) -> None:
        # Runs as soon as this connection's task yields -- its queue is empty, or a
        # request waits (long poll, acks=-1) -- so no answer waits on anything but the CPU
        # handling the requests already received.
        self._flush_scheduled = True
        asyncio.get_running_loop().call_soon(self._flush_out)

    async def _write(self, chunks: Sequence[Chunk]) -> None:
        transport = self.transport
        if transport is None or self.closed:
            return
        if all_bytes(chunks):
            self._gather(chunks)
            if self._out and not self._flush_scheduled:
                self._schedule_flush()
        else:
            self._flush_out()  # answers gathered before go first
            # Pin every region's file before the first await: while earlier chunks are
            # being sent the log may close a segment (topic deletion, StopReplica,
            # truncation), and its descriptor number can be reused at once by another
            # file -- whose bytes sendfile would then send to this client.
            pinned = [_pin(c) for c in chunks
                      if not isinstance(c, (bytes, bytearray, memoryview))]
            if self.tls:
                try:
                    await self._write_regions_tls(transport, chunks, pinned)
                finally:
                    for fd in pinned:
                        os.close(fd)
                if not self._can_write.is_set():
                    await self._can_write.wait()
                return
            corked = _cork(transport, True)
            try:
                await self._write_regions(transport, chunks, pinned)
            finally:
                if corked:
                    _cork(transport, False)
                for fd in pinned:
                    os.close(fd)
        if not self._can_write.is_set():
            await self._can_write.wait()

    async def _write_regions(self, transport: asyncio.Transport, chunks: Sequence[Chunk],
                             pinned: list[int]) -> None:
        loop = asyncio.get_running_loop()
        fds = iter(pinned)
        pending: list[bytes | bytearray | memoryview] = []
        for chunk in chunks:
            if isinstance(chunk, (bytes, bytearray, memoryview)):
                pending.append(chunk)
                continue
            if pending:
                transport.write(b"".join(pending))
                pending = []
            fd = next(fds)
            if chunk.size <= 0:  # nothing to send (and asyncio's sendfile refuses 0)
                continue
            sent = _sendfile_now(transport, fd, chunk.position, chunk.size)
            if sent < chunk.size:
                self._in_sendfile = True
                try:
                    # asyncio's sendfile uses only what _FdFile has (fileno, seek, tell,
                    # mode); typeshed asks for a whole IO[bytes].
                    sent += await loop.sendfile(
                        transport, _FdFile(fd),  # type: ignore[arg-type]
                        chunk.position + sent, chunk.size - sent)
                finally:
                    self._in_sendfile = False
                    self.update_reading()
            if sent != chunk.size:
                raise ShortSendError(
                    f"record region shrank while sending ({sent} of {chunk.size} bytes)"
                )
            if self.closed:
                return
        if pending:
            transport.write(b"".join(pending) if len(pending) > 1 else pending[0])

    async def _write_regions_tls(self, transport: asyncio.Transport, chunks: Sequence[Chunk],
                                 pinned: list[int]) -> None:
        """Record regions through the TLS transport: sendfile would put the file's bytes on
        the socket unencrypted (the raw socket is what a TLS transport's "socket" extra
        is). Read with pread in TLS_REGION_CHUNK pieces, each written once the transport
        has room, so a large fetch holds at most a few pieces in memory."""
        fds = iter(pinned)
        for chunk in chunks:
            if isinstance(chunk, (bytes, bytearray, memoryview)):
                transport.write(chunk)
                continue
            fd = next(fds)
            sent = 0
            while sent < chunk.size:
                if self.closed:
                    return
                if not self._can_write.is_set():
                    await self._can_write.wait()
                    continue
                piece = os.pread(fd, min(TLS_REGION_CHUNK, chunk.size - sent),
                                 chunk.position + sent)
                if not piece:  # end of file: the region shrank
                    raise ShortSendError(
                        f"record region shrank while sending ({sent} of {chunk.size} bytes)")
                transport.write(piece)
                sent += len(piece)

    def _flush_out(self) -> None:
        self._flush_scheduled = False
        if not self._out:
            return
        out = self._out
        self._out, self._out_size = [], 0
        if self.transport is not None and not self.closed:
            self.transport.write(out[0] if len(out) == 1 else b"".join(out))



class TlsConnection(Connection, asyncio.BufferedProtocol):
    """A connection on a TLS listener. asyncio's TLS transport decrypts straight into the
    frame decoder's buffers when its protocol is a BufferedProtocol; given a plain
    Protocol it allocates a 256 KiB bytes object per TLS record read (16 KiB) and copies
    the data twice more before ``data_received``. Measured on the project's 2-core
    machine, receiving 1 GiB over TLS 1.3: 1.24 CPU s/GB through data_received, 0.55
    through a buffer -- about what a blocking ``ssl`` socket costs. Plaintext keeps
    ``data_received``: there the two cost the same, and bytes let frames be views."""

    def get_buffer(self, sizehint: int) -> memoryview:
        return self.pipeline.get_buffer()

    def buffer_updated(self, nbytes: int) -> None:
        self._received(self.pipeline.buffer_updated, nbytes)


async def _timed_send(writing: Coroutine[Any, Any, None], timing: RequestTiming) -> None:
    """Send an answer with file regions, then count its ResponseSendTimeMs."""
    await writing
    timing.finish(send_end=time.monotonic())


def _cork(transport: asyncio.Transport, on: bool) -> bool:
    """TCP_CORK on or off; True if it was set. While corked the kernel sends only full
    segments, so a fetch response's header, record regions and trailing bytes leave as
    full packets -- the reader is woken per 64 KiB, not once more for each short piece --
    and uncorking sends the rest."""
    sock = transport.get_extra_info("socket")
    if sock is None or (on and transport.get_write_buffer_size()):
        return False
    try:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_CORK, int(on))
    except OSError:
        return False
    return True


def _sendfile_now(transport: asyncio.Transport, fd: int, position: int, size: int) -> int:
    """As much of a region as the socket takes at once, sent without the event loop.

    On loopback and fast links that is usually all of it, which saves asyncio's sendfile
    set-up per fetch (pausing and resuming reading, a writer registration, a future). Only
    when nothing is queued in the transport, so bytes keep their order; the rest, if any,
    goes through asyncio's sendfile, which waits for the socket.
    """
    sock = transport.get_extra_info("socket")
    if sock is None or transport.get_write_buffer_size():
        return 0
    sent = 0
    try:
        while sent < size:
            n = os.sendfile(sock.fileno(), fd, position + sent, size - sent)
            if n == 0:  # end of file: the region shrank; the caller reports it
                break
            sent += n
    except (BlockingIOError, InterruptedError):
        pass
    return sent


def _pin(region: Chunk) -> int:
    """A descriptor of its own for a region's file, valid whatever happens to the log's.

    A FetchDataInfo carries the segment's descriptor (and its path, tried when the
    descriptor is already gone); a FileRegion only the descriptor.
    """
    fd = getattr(region, "fd", None)
    if fd is not None:
        try:
            return os.dup(fd)
        except OSError:
            if getattr(region, "path", None) is None:
                raise
    path = getattr(region, "path", None)
    if path is None:
        raise ShortSendError("a record region with neither a descriptor nor a path")
    return os.open(path, os.O_RDONLY | os.O_CLOEXEC)
