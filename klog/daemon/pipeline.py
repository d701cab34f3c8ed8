"""One connection's request pipeline, without I/O: bytes in, requests started in order,
answers out in request order.

Rules of this module (as h11's ``_state.py`` states its own):

1. No I/O. Nothing here touches a socket, a transport, a file region's bytes or the event
   loop (asyncio is not imported). The transport side, klog/daemon/connection.py, feeds
   the bytes it reads (``receive_data``; on TLS ``get_buffer``/``buffer_updated``), takes
   the frames it may start (``enqueue``/``next_request``), starts each here (``start``)
   and writes what comes out. So every decision below is testable from plain bytes
   (tests/daemon/test_pipeline.py drives it without sockets).
2. Everything that decides what a request gets lives here: frame size limits
   (socket.request.max.bytes; sasl.server.max.receive.size until SASL completes), the
   request header and the advertised versions, the SASL gate, decoding, the handler
   table, the request metrics' counts and the request_percentage quota, the KIP-219
   mute, the response encoding, and the order of answers.
3. Errors say who misbehaved: ``RemoteProtocolError`` -- the peer sent what Kafka
   answers by closing the connection (a frame size out of bounds, a header or body that
   does not decode, a version not advertised, a request the SASL state does not allow, a
   certificate no mapping rule names); ``LocalProtocolError`` -- a klog bug (an
   advertised API without a handler). Either way the connection closes; only the second
   is logged as an error.

What ``start`` returns -- the next step for the transport, one of:

- ``None``: nothing to write now (no answer is due -- acks=0, a raw SASL token that asks
  for none --, or the answer waits behind an earlier one still waiting in ``outbox``);
- a ``list`` of bytes: an answer whose bytes are all ready, header included, to write now;
- ``Regions``: an answer with file regions (a fetch's record data) to write now with
  sendfile, whose timing ends once written;
- ``Waiting``: the handler waits (a long poll, a coordinator, a ZooKeeper call); the
  transport awaits ``handling`` in its task and hands the result to ``answer``, which
  returns one of these steps again;
- ``Defer``: the handler answered ``Deferred`` (an acks=-1 produce after its append);
  the transport runs ``response`` as a future, puts it in ``outbox`` (``defer``) and may
  start the next request meanwhile.

Order: answers leave in request order. While ``outbox`` holds an answer still waiting,
every later answer joins it there instead of being returned (``answer``); the transport's
drainer awaits the oldest, writes it (``encode``) and only then removes it
(``answer_sent``), so newer answers stay behind it. A handler runs up to its first wait
right in ``start`` (``handling.send(None)``, outside any task): most never wait, and their
answers are ready in the same call; one that waits is resumed by the connection's task
through ``_resume``, which passes what it waits on up to that task.
"""

from __future__ import annotations

import collections
import dataclasses
import datetime
import logging
import time
import types
from collections.abc import Awaitable, Coroutine, Generator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from klog.daemon.handlers import BrokerServices, Deferred, Handler, RequestContext, Response
from klog.daemon.metrics.counters import FETCH, SAMPLE_MASK
from klog.daemon.security.listener import ListenerSecurity
from klog.daemon.security.principal import ANONYMOUS, USER_TYPE, KafkaPrincipal
from klog.daemon.security.sasl import SASL_AUTHENTICATE, SASL_HANDSHAKE, SaslAuthenticator
from klog.daemon.security.ssl_principal import NoMatchingRuleError, distinguished_name
from klog.protocol import apis
from klog.protocol.errors import InvalidRequestError, KafkaError
from klog.protocol.fetch import request_replica_id
from klog.protocol.framing import (
    FrameDecoder,
    FrameSizeError,
    RequestHeader,
    api_versions_fallback_response,
    is_unsupported_api_versions,
    parse_request_header,
    response_prefix,
)

if TYPE_CHECKING:
    from klog.daemon.metrics.counters import RequestMetrics, RequestTiming
    from klog.daemon.quotas import ClientQuotaManager

log = logging.getLogger(__name__)

#: A piece of an answer: bytes, or a file region sent with sendfile (a FetchDataInfo from
#: klog/storage/values.py or connection.py's FileRegion; what they share -- size, fd,
#: position -- is read by duck typing, as the fetch path hands either).
Chunk = Any

#: Bytes of complete requests one connection may hold, not yet started, before the broker
#: stops reading its socket: enough for a pipelining client's next requests to be ready
#: when the current one finishes (one more request always fits, whatever its size).
READ_AHEAD_BYTES = 1 << 20

#: Answers one connection may have waiting in ``outbox`` before it starts no new request:
#: more than a producer keeps in flight with idempotence (5).
MAX_DEFERRED = 16


class RemoteProtocolError(Exception):
    """The peer sent something Kafka answers by closing the connection (the message says
    what, for the log line)."""


class LocalProtocolError(Exception):
    """klog cannot serve what it advertised: a bug, logged as an error; the connection
    closes."""


class Dispatch(Protocol):
    """What the pipeline uses of the server behind it (klog/daemon/server.py's Server):
    the handler table and the services handed to handlers, the versions advertised, the
    frame size limit, and the request metrics (None: off)."""

    handlers: Mapping[int, Handler]
    services: BrokerServices
    request_metrics: RequestMetrics | None
    advertised: Mapping[int, apis.VersionRange]
    max_request_bytes: int


class PipelineIO(Protocol):
    """What the pipeline asks of the transport under it (klog/daemon/connection.py)."""

    #: Nothing more is written or served (the transport closed or is closing).
    closed: bool

    def close(self) -> None:
        """Close at once (a handler's ``close_connection``)."""

    def close_after(self, delay: float) -> None:
        """Read nothing more, and close gracefully after ``delay`` seconds (a failed
        SASL authentication: Kafka's connection.failed.authentication.delay.ms)."""


class PendingAnswer(Protocol):
    """A deferred answer as the transport runs it (an asyncio future)."""

    def __await__(self) -> Generator[Any, None, Any]: ...

    def cancel(self, msg: Any | None = None) -> bool: ...


class Waiting:
    """``start``'s step for a handler that waits: await ``handling`` in the connection's
    task, then give its result to ``RequestPipeline.answer``."""

    __slots__ = ("handling", "header", "timing")

    def __init__(self, header: RequestHeader, handling: Awaitable[Any],
                 timing: RequestTiming | None) -> None:
        self.header = header
        self.handling = handling
        self.timing = timing


class Regions:
    """An answer with file regions, to write now; its timing (if any) ends once written
    (ResponseSendTimeMs)."""

    __slots__ = ("chunks", "timing")

    def __init__(self, chunks: list[Chunk], timing: RequestTiming | None) -> None:
        self.chunks = chunks
        self.timing = timing


class Defer:
    """A ``Deferred`` answer: run ``response`` and hand it to ``RequestPipeline.defer``."""

    __slots__ = ("header", "response", "timing")

    def __init__(self, header: RequestHeader, response: Any,
                 timing: RequestTiming | None) -> None:
        self.header = header
        self.response = response
        self.timing = timing


#: What ``start`` and ``answer`` return (module docstring).
Step = list[Chunk] | Regions | Waiting | Defer | None


class _RequestCounting:
    """A connection's side of Kafka's RequestMetrics (klog/daemon/metrics/counters.py):
    where it counts its requests, and the receipt time of each frame in its queue (same
    order), for RequestQueueTimeMs."""

    __slots__ = ("counts", "received", "requests")

    def __init__(self, requests: RequestMetrics) -> None:
        self.requests = requests
        self.counts = requests.counts
        self.received: collections.deque[float] = collections.deque()


class RequestPipeline:
    """One connection's requests, from bytes to ordered answers (module docstring). It is
    also the connection as handlers see it (``handlers.ClientConnection``: principal,
    authenticator, peer, listener name, ``throttle``, ``close``). Not thread-safe: the
    event loop's thread drives it."""

    def __init__(self, dispatch: Dispatch, io: PipelineIO, listener_name: str,
                 security: ListenerSecurity) -> None:
        self._io = io
        self.listener_name = listener_name
        self.security = security
        self.peer = "?"
        self.handlers = dispatch.handlers
        self.services = dispatch.services
        self.advertised = dispatch.advertised
        self.max_request_bytes = dispatch.max_request_bytes
        self.decoder = FrameDecoder(dispatch.max_request_bytes)
        #: Frames received and not yet started, in arrival order.
        self.queue: collections.deque[memoryview] = collections.deque()
        self.queued_bytes = 0  # sum of the sizes of the frames in ``queue``
        #: Answers not yet written, in request order, while the oldest of them is a
        #: Deferred one still waiting: (header, its future or None, a ready response).
        self.outbox: collections.deque[
            tuple[RequestHeader, PendingAnswer | None, Response]] = collections.deque()
        # Who this connection is: ANONYMOUS until an authentication says otherwise.
        self.principal: KafkaPrincipal = ANONYMOUS
        # SASL listeners: the authentication state; until it completes only ApiVersions
        # and the SASL requests are served, in frames of at most sasl.server.max.receive.size.
        self.authenticator: SaslAuthenticator | None = None
        self.authentication_failed = False
        sasl = security.sasl
        if sasl is not None:
            self.authenticator = SaslAuthenticator(sasl, self._authenticated,
                                                   self._authentication_failure)
            self.decoder.max_frame_bytes = min(dispatch.max_request_bytes,
                                               sasl.max_receive_size)
        # KIP-219: a client over its quota has its next request held until this time
        # (time.monotonic(); 0: not throttled).
        self.throttled_until = 0.0
        quotas = self.services.quotas
        self._request_quota = None if quotas is None else quotas.request
        self._metrics = None if dispatch.request_metrics is None \
            else _RequestCounting(dispatch.request_metrics)

    # -- bytes in -----------------------------------------------------------------------

    def receive_data(self, data: bytes) -> list[memoryview]:
        """The whole frames ``data`` completes (their sizes checked before buffering)."""
        try:
            return self.decoder.feed(data)
        except FrameSizeError as exc:
            raise RemoteProtocolError(str(exc)) from None

    def get_buffer(self) -> memoryview:
        """Where the next bytes go (TLS: decrypted straight into the decoder's buffer)."""
        return self.decoder.get_buffer()

    def buffer_updated(self, nbytes: int) -> list[memoryview]:
        """The whole frames that ``nbytes`` written into ``get_buffer`` complete."""
        try:
            return self.decoder.buffer_updated(nbytes)
        except FrameSizeError as exc:
            raise RemoteProtocolError(str(exc)) from None

    # -- frames waiting -----------------------------------------------------------------

    def enqueue(self, frames: list[memoryview], received: float) -> None:
        """Frames received at ``received`` (time.monotonic), to start later in order."""
        self.queue.extend(frames)
        if self._metrics is not None:
            self._metrics.received.extend([received] * len(frames))
        self.queued_bytes += sum(len(f) for f in frames) if len(frames) > 1 else len(frames[0])

    def next_request(self) -> tuple[memoryview, float]:
        """The oldest frame not started, and when it was received (0.0: metrics off)."""
        frame = self.queue.popleft()
        received = 0.0 if self._metrics is None else self._metrics.received.popleft()
        self.queued_bytes -= len(frame)
        return frame, received

    def drop_queue(self) -> int:
        """Forget the frames not started (the connection is gone); how many there were."""
        dropped = len(self.queue)
        self.queue.clear()
        if self._metrics is not None:
            self._metrics.received.clear()
        self.queued_bytes = 0
        return dropped

    def over_read_ahead(self) -> bool:
        """Whether the frames not started fill this connection's read-ahead."""
        return self.queued_bytes >= READ_AHEAD_BYTES

    def mute_remaining(self, now: float) -> float:
        """Seconds this connection stays muted for a quota (KIP-219) as of ``now``
        (time.monotonic); 0.0 once the time has passed, which ends the mute."""
        delay = self.throttled_until - now
        if delay > 0:
            return delay
        self.throttled_until = 0.0
        return 0.0

    def outbox_full(self) -> bool:
        return len(self.outbox) >= MAX_DEFERRED

    # -- the connection as handlers see it ----------------------------------------------

    def close(self) -> None:
        self._io.close()

    def throttle(self, throttle_ms: int) -> None:
        """KIP-219: after this request's response, hold the connection's next request for
        ``throttle_ms`` (Kafka mutes the channel; here the frames wait in the queue, whose
        read-ahead bound stops reading from the socket)."""
        until = time.monotonic() + throttle_ms / 1000.0
        if until > self.throttled_until:
            self.throttled_until = until

    # -- authentication -----------------------------------------------------------------

    def certificate_principal(self, peercert: Any) -> None:
        """SSL listeners: a verified client certificate names the principal (its DN through
        ssl.principal.mapping.rules); without one the connection stays ANONYMOUS."""
        if not peercert:
            return
        mapper = self.security.principal_mapper
        assert mapper is not None
        try:
            self.principal = KafkaPrincipal(USER_TYPE, mapper.name(distinguished_name(peercert)))
        except NoMatchingRuleError as exc:
            raise RemoteProtocolError(str(exc)) from None

    def _authenticated(self, principal: KafkaPrincipal) -> None:
        self.principal = principal
        self.decoder.max_frame_bytes = self.max_request_bytes
        log.debug("connection %s authenticated as %s", self.peer, principal)

    def _authentication_failure(self) -> None:
        """Kafka's delayed close: the failure's answer goes out, nothing more is read or
        served, and the connection closes after connection.failed.authentication.delay.ms
        (a client retrying a wrong password cannot spin the broker)."""
        if self.authentication_failed:
            return
        self.authentication_failed = True
        log.info("authentication of connection %s failed; closing it", self.peer)
        self._io.close_after(self.security.failed_authentication_delay_ms / 1000)

    def _raw_sasl_token(self, frame: memoryview) -> list[Chunk] | None:
        """A SASL token sent bare after a v0 SaslHandshake; answered bare (a size, the
        token), as Kafka's SaslServerAuthenticator does."""
        assert self.authenticator is not None
        answer = self.authenticator.raw_token(bytes(frame))
        return None if answer is None else [len(answer).to_bytes(4, "big") + answer]

    def _check_authentication(self, auth: SaslAuthenticator, header: RequestHeader) -> None:
        """SASL listeners: refuse a request the connection may not send now (before
        authentication, or after its session expired without re-authentication)."""
        if not auth.allows(header.api_key):
            raise RemoteProtocolError(f"{apis.spec_for(header.api_key).name} request before "
                                      "SASL authentication completed")
        if (auth.authenticated and header.api_key not in (SASL_HANDSHAKE, SASL_AUTHENTICATE)
                and auth.session_expired()):
            raise RemoteProtocolError("SASL session expired without re-authentication "
                                      "(connections.max.reauth.ms)")

    # -- requests -----------------------------------------------------------------------

    def start(self, frame: memoryview, received: float = 0.0) -> Step:
        """Handle one request as far as it goes without waiting; the next step (module
        docstring). ``received``: when its frame was read (time.monotonic), for the
        request metrics."""
        if self.authentication_failed:
            return None  # closing after the failure's delay: nothing more is served
        auth = self.authenticator
        if auth is not None and auth.raw_tokens:
            return self._raw_sasl_token(frame)
        try:
            header, offset = parse_request_header(frame, self.advertised)
        except KafkaError as exc:
            raise RemoteProtocolError(str(exc)) from None
        if auth is not None:
            self._check_authentication(auth, header)
        if is_unsupported_api_versions(header, self.advertised):
            return [api_versions_fallback_response(header.correlation_id, self.advertised)]
        try:
            request = apis.decode_request(header.api_key, header.api_version, frame[offset:])
        except InvalidRequestError as exc:
            raise RemoteProtocolError(
                f"cannot decode {apis.spec_for(header.api_key).name} v{header.api_version}: "
                f"{exc}") from None
        handler = self.handlers.get(header.api_key)
        if handler is None:  # advertised without a handler: a klog bug; refuse loudly
            raise LocalProtocolError(f"no handler for api key {header.api_key}")
        timing = None
        m = self._metrics
        if m is not None:  # metrics on: count inline, time one in SAMPLE_EVERY
            by_version = m.counts[header.api_key]
            n = by_version[header.api_version] = by_version[header.api_version] + 1
            if n & SAMPLE_MASK == 1 or header.api_key == FETCH:
                timing = m.requests.begin(header.api_key, header.api_version, request,
                                          received)
        handling = handler(RequestContext(header, self.services, self), request)
        request_quota = self._request_quota
        if request_quota is not None and request_quota.active and not _exempt(header, request):
            return self._start_metered(header, handling, request_quota, timing)
        try:
            waits_on = handling.send(None)
        except StopIteration as done:
            return self.answer(header, done.value, timing)
        return Waiting(header, _resume(handling, waits_on), timing)

    def _start_metered(self, header: RequestHeader, handling: Coroutine[Any, Any, Any],
                       request_quota: ClientQuotaManager, timing: RequestTiming | None
                       ) -> Step:
        """``start``'s last step under a request_percentage quota: the handler's time up
        to its first wait is recorded as a percentage of one thread (Kafka's
        ClientRequestQuotaManager), and a client over its quota is muted."""
        started = time.perf_counter()
        try:
            waits_on = handling.send(None)
        except StopIteration as done:
            throttle_ms = self._record_request_time(header, request_quota, started)
            response = done.value
            if throttle_ms > 0:
                response = _with_throttle_time(response, throttle_ms)
            return self.answer(header, response, timing)
        self._record_request_time(header, request_quota, started)
        return Waiting(header, _resume(handling, waits_on), timing)

    def _record_request_time(self, header: RequestHeader, request_quota: ClientQuotaManager,
                             started: float) -> int:
        percent_seconds = (time.perf_counter() - started) * 100.0
        throttle_ms = request_quota.record(self.principal.name, header.client_id or "",
                                           percent_seconds)
        if throttle_ms > 0:
            self.throttle(throttle_ms)
        return throttle_ms

    # -- answers out, in order ----------------------------------------------------------

    def answer(self, header: RequestHeader, response: Response,
               timing: RequestTiming | None = None) -> Step:
        """A handler's response to ``header``: the step that writes it now, or None when
        it is not due or must wait behind an earlier answer (``outbox``)."""
        if self._io.closed:
            if isinstance(response, Deferred) and isinstance(response.response, Coroutine):
                response.response.close()  # nobody to answer: do not leave it unawaited
            return None
        if timing is not None:
            timing.local_done()
        if isinstance(response, Deferred):
            return Defer(header, response.response, timing)
        if self.outbox:  # behind an answer still waiting: keep the order
            if response is not None:
                self.outbox.append((header, None, response))
        elif response is not None:
            chunks = self.encode(header, response)
            if not all_bytes(chunks):
                return Regions(chunks, timing)
            if timing is not None:
                timing.finish()
            return chunks
        if timing is not None:
            timing.finish()
        return None

    def defer(self, header: RequestHeader, answer: PendingAnswer) -> None:
        """A Deferred answer under way: it, and every answer after it, leave in order."""
        self.outbox.append((header, answer, None))

    def answer_sent(self) -> None:
        """The oldest answer in ``outbox`` is written (or given up): the next may go."""
        self.outbox.popleft()

    def drop_outbox(self) -> list[PendingAnswer]:
        """Forget the answers not written (the connection closed); those still under way,
        for the transport to cancel."""
        pending = [answer for _, answer, _ in self.outbox if answer is not None]
        self.outbox.clear()
        return pending

    @staticmethod
    def encode(header: RequestHeader, response: Response) -> list[Chunk]:
        """A response's chunks, with its size and response header in front."""
        header_version = apis.response_header_version(header.api_key, header.api_version)
        if isinstance(response, list):
            if len(response) == 1 and isinstance(response[0], bytes):  # most answers
                size = len(response[0])
            else:
                size = sum(len(c) if isinstance(c, (bytes, bytearray, memoryview)) else c.size
                           for c in response)
            return [response_prefix(header_version, header.correlation_id, size), *response]
        body = apis.encode_response(response)
        return [response_prefix(header_version, header.correlation_id, len(body)) + body]


def _exempt(header: RequestHeader, request: Any) -> bool:
    """Requests no request_percentage quota throttles, as Kafka exempts them: the
    inter-broker APIs and followers' fetches (replication has its own throttles)."""
    api_key = header.api_key
    return (api_key in apis.INTER_BROKER_CONTROL_APIS or api_key == _WRITE_TXN_MARKERS
            or (api_key == _FETCH and request_replica_id(request) >= 0))


_FETCH, _WRITE_TXN_MARKERS = 1, 27


def _with_throttle_time(response: Any, throttle_ms: int) -> Any:
    """A kio response entity with its throttle_time set (request_percentage: the time is
    known only after the handler ran). Answers encoded by hand (produce, fetch: chunks)
    keep their own, the byte quotas'."""
    if dataclasses.is_dataclass(response) and not isinstance(response, type) and any(
            f.name == "throttle_time" for f in dataclasses.fields(response)):
        current = getattr(response, "throttle_time", None)
        wanted = datetime.timedelta(milliseconds=throttle_ms)
        if current is None or current < wanted:
            return dataclasses.replace(response, throttle_time=wanted)
    return response


def all_bytes(chunks: Sequence[Chunk]) -> bool:
    """Whether an answer is bytes only (no file region to send with sendfile)."""
    if len(chunks) == 1:  # most answers: one piece
        return isinstance(chunks[0], (bytes, bytearray, memoryview))
    return all(isinstance(c, (bytes, bytearray, memoryview)) for c in chunks)


@types.coroutine
def _resume(handling: Coroutine[Any, Any, Any], waits_on: Any) -> Generator[Any, Any, Any]:
    """Go on with a coroutine begun outside any task (``handling.send(None)`` gave
    ``waits_on``) inside the task that awaits this: what the coroutine waits for is passed
    up to that task, and what the task sends or throws (a result, a cancellation) is
    passed down."""
    while True:
        try:
            value = yield waits_on
        except BaseException as exc:
            try:
                waits_on = handling.throw(exc)
            except StopIteration as done:
                return done.value
        else:
            try:
                waits_on = handling.send(value)
            except StopIteration as done:
                return done.value
