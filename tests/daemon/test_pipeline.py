"""Tests for klog.daemon.pipeline, without sockets: bytes go in, steps and answer bytes come
out (as h11's tests drive a connection from byte strings). The transport side is a fake
that records what the pipeline asks of it."""

from __future__ import annotations

import struct
import time
from collections.abc import Generator
from types import SimpleNamespace
from typing import Any

import pytest

from klog.daemon.handlers import Deferred, RequestContext, Response
from klog.daemon.handlers import api_versions as api_versions_handler
from klog.daemon.handlers import sasl_authenticate as sasl_authenticate_handler
from klog.daemon.handlers import sasl_handshake as sasl_handshake_handler
from klog.daemon.pipeline import (
    MAX_DEFERRED,
    READ_AHEAD_BYTES,
    Defer,
    LocalProtocolError,
    Regions,
    RemoteProtocolError,
    RequestPipeline,
    Waiting,
)
from klog.daemon.security.listener import ListenerSecurity
from klog.daemon.security.principal import ANONYMOUS, KafkaPrincipal
from klog.daemon.security.sasl import SaslServerConfig
from klog.protocol import apis, framing
from klog.protocol.entities import build
from tests.daemon.handlers.fakes import services

API_VERSIONS, METADATA, SASL_HANDSHAKE, SASL_AUTHENTICATE = 18, 3, 17, 36
UNSUPPORTED_VERSION = 35


class FakeIO:
    """The transport as the pipeline sees it: what it was asked to do."""

    def __init__(self) -> None:
        self.closed = False
        self.closes = 0
        self.close_after_delays: list[float] = []

    def close(self) -> None:
        self.closes += 1
        self.closed = True

    def close_after(self, delay: float) -> None:
        self.close_after_delays.append(delay)


class Wait:
    """Something a handler awaits: the pipeline passes it up to whoever drives it."""

    def __await__(self) -> Generator[Any, Any, Any]:
        return (yield self)


def frame(api_key: int, version: int, values: dict[str, Any], cid: int,
          client_id: str = "test") -> bytes:
    body = apis.encode_request(build(apis.spec_for(api_key).request_entity(version), values))
    return framing.encode_request(api_key, version, cid, client_id, body)


def api_versions(cid: int, version: int = 3) -> bytes:
    return frame(API_VERSIONS, version, {"client_software_name": "t",
                                         "client_software_version": "1"}, cid)


def metadata(cid: int, client_id: str = "test") -> bytes:
    return frame(METADATA, 12, {"topics": None, "allow_auto_topic_creation": False,
                                "include_topic_authorized_operations": False}, cid, client_id)


def cids(data: bytes) -> list[int]:
    """The correlation ids of the responses in ``data``, in order."""
    out = []
    while data:
        size, cid = struct.unpack(">ii", data[:8])
        out.append(cid)
        data = data[4 + size:]
    return out


def pipeline(metadata_handler: Any = None, security: ListenerSecurity | None = None,
             max_request_bytes: int = 100 << 20) -> tuple[RequestPipeline, FakeIO]:
    async def answer_metadata(ctx: RequestContext, request: Any) -> Response:
        return [b"metadata"]

    handlers = {API_VERSIONS: api_versions_handler.handle,
                METADATA: metadata_handler or answer_metadata,
                SASL_HANDSHAKE: sasl_handshake_handler.handle,
                SASL_AUTHENTICATE: sasl_authenticate_handler.handle}
    dispatch = SimpleNamespace(handlers=handlers, services=services(), request_metrics=None,
                               advertised=apis.ADVERTISED, max_request_bytes=max_request_bytes)
    io = FakeIO()
    return RequestPipeline(dispatch, io, "PLAINTEXT",
                           security or ListenerSecurity("PLAINTEXT", "PLAINTEXT")), io


def run(p: RequestPipeline, data: bytes) -> bytes:
    """Feed ``data``, start every frame it completes, and return the answers' bytes
    (every step must be an all-bytes answer or nothing)."""
    out = b""
    for f in p.receive_data(data):
        step = p.start(f)
        assert step is None or isinstance(step, list), step
        out += b"".join(step or [])
    return out


# -- frames in ------------------------------------------------------------------------------

def test_pipelined_requests_in_one_read_are_answered_in_order() -> None:
    p, _ = pipeline()
    answers = run(p, b"".join([api_versions(7), metadata(8), api_versions(9)]))
    assert cids(answers) == [7, 8, 9]


def test_a_frame_arriving_a_byte_at_a_time_is_one_request() -> None:
    p, _ = pipeline()
    data = api_versions(1) + api_versions(2)
    frames = []
    for i in range(len(data)):
        frames += p.receive_data(data[i:i + 1])
        if i < len(api_versions(1)) - 1:
            assert frames == []  # nothing before the first frame's last byte
    assert len(frames) == 2
    assert cids(b"".join(b"".join(p.start(f) or []) for f in frames)) == [1, 2]


def test_frames_split_anywhere_across_reads() -> None:
    data = b"".join(api_versions(cid) for cid in range(4))
    for cut in (1, 3, 4, 5, len(data) // 2, len(data) - 1):
        p, _ = pipeline()
        assert cids(run(p, data[:cut]) + run(p, data[cut:])) == [0, 1, 2, 3]


def test_an_oversized_frame_is_refused_before_its_body_arrives() -> None:
    p, _ = pipeline(max_request_bytes=1000)
    with pytest.raises(RemoteProtocolError):
        p.receive_data(struct.pack(">i", 1001))  # the size alone says it
    p, _ = pipeline(max_request_bytes=1000)
    with pytest.raises(RemoteProtocolError):
        p.receive_data(struct.pack(">i", -1))


def test_a_request_for_an_api_not_advertised_is_refused() -> None:
    p, _ = pipeline()
    header = struct.pack(">hhih", 999, 0, 1, -1)  # api key 999, v0, a null client id
    bad = struct.pack(">i", len(header)) + header
    with pytest.raises(RemoteProtocolError):
        run(p, bad)


def test_an_undecodable_body_is_refused_and_says_what() -> None:
    p, _ = pipeline()
    good = metadata(1)
    truncated = struct.pack(">i", len(good) - 4 - 3) + good[4:-3]
    with pytest.raises(RemoteProtocolError, match="cannot decode Metadata v12"):
        run(p, truncated)


def test_an_unsupported_api_versions_version_is_answered_in_v0() -> None:
    p, _ = pipeline()
    raw = bytearray(api_versions(5))
    struct.pack_into(">h", raw, 6, 99)  # request_api_version
    answer = run(p, bytes(raw))
    assert cids(answer) == [5]
    assert struct.unpack(">h", answer[8:10])[0] == UNSUPPORTED_VERSION


def test_an_advertised_api_without_a_handler_is_a_local_error() -> None:
    p, _ = pipeline()
    p.handlers = {}
    with pytest.raises(LocalProtocolError):
        run(p, api_versions(1))


def test_read_ahead_counts_the_frames_not_started() -> None:
    p, _ = pipeline()
    frames = p.receive_data(api_versions(1) + api_versions(2))
    p.enqueue(frames, 1.0)
    assert p.queued_bytes == sum(len(f) for f in frames) and not p.over_read_ahead()
    big = memoryview(bytes(READ_AHEAD_BYTES))
    p.enqueue([big], 2.0)
    assert p.over_read_ahead()
    assert p.next_request()[0] == frames[0]  # oldest first
    assert p.drop_queue() == 2 and p.queued_bytes == 0 and not p.over_read_ahead()


# -- the handler trampoline and the order of answers ---------------------------------------

def test_a_handler_that_waits_is_resumed_by_whoever_drives_it() -> None:
    waited = Wait()

    async def slow(ctx: RequestContext, request: Any) -> Response:
        value = await waited
        return [value]

    p, _ = pipeline(slow)
    (f,) = p.receive_data(metadata(3))
    step = p.start(f)
    assert isinstance(step, Waiting)
    handling: Any = step.handling
    assert handling.send(None) is waited  # the wait goes up to the driver (a task)
    with pytest.raises(StopIteration) as done:
        handling.send(b"late")
    answer = p.answer(step.header, done.value.value, step.timing)
    assert isinstance(answer, list) and cids(b"".join(answer)) == [3]
    assert b"".join(answer).endswith(b"late")


def test_answers_behind_a_deferred_one_wait_for_it() -> None:
    token = object()

    async def deferred(ctx: RequestContext, request: Any) -> Response:
        return Deferred(token)

    p, _ = pipeline(deferred)
    frames = p.receive_data(metadata(1) + api_versions(2) + api_versions(3))
    step = p.start(frames[0])
    assert isinstance(step, Defer) and step.response is token
    pending = SimpleNamespace(cancel=lambda msg=None: True)
    p.defer(step.header, pending)  # type: ignore[arg-type]
    # Ready at once, but behind the deferred answer: nothing to write yet.
    assert p.start(frames[1]) is None and p.start(frames[2]) is None
    assert [(h.correlation_id, a is pending) for h, a, _ in p.outbox] == \
        [(1, True), (2, False), (3, False)]
    # The drainer writes the oldest once it completes, and only then removes it.
    out = b""
    while p.outbox:
        header, answer, response = p.outbox[0]
        out += b"".join(p.encode(header, [b"acks"] if answer is not None else response))
        p.answer_sent()
    assert cids(out) == [1, 2, 3]
    # With the outbox empty again, answers are written at once.
    (f,) = p.receive_data(api_versions(4))
    assert cids(b"".join(p.start(f) or [])) == [4]


def test_the_outbox_is_bounded_and_dropped_on_close() -> None:
    async def deferred(ctx: RequestContext, request: Any) -> Response:
        return Deferred(object())

    p, _ = pipeline(deferred)
    cancelled: list[int] = []
    for cid in range(MAX_DEFERRED):
        assert not p.outbox_full()
        (f,) = p.receive_data(metadata(cid))
        step = p.start(f)
        assert isinstance(step, Defer)
        p.defer(step.header, SimpleNamespace(  # type: ignore[arg-type]
            cancel=lambda msg=None, cid=cid: cancelled.append(cid)))
    assert p.outbox_full()
    for answer in p.drop_outbox():
        answer.cancel()
    assert cancelled == list(range(MAX_DEFERRED)) and not p.outbox


def test_an_answer_with_file_regions_is_written_apart() -> None:
    region = SimpleNamespace(fd=0, position=0, size=10)

    async def regions(ctx: RequestContext, request: Any) -> Response:
        return [b"head", region]

    p, _ = pipeline(regions)
    (f,) = p.receive_data(metadata(6))
    step = p.start(f)
    assert isinstance(step, Regions)
    prefix, head, tail = step.chunks
    assert struct.unpack(">ii", prefix[:8]) == (len(prefix) - 4 + 4 + 10, 6)
    assert (head, tail) == (b"head", region)


def test_no_answer_is_made_once_the_transport_closed() -> None:
    async def deferred_coroutine(ctx: RequestContext, request: Any) -> Response:
        async def later() -> Response:
            return [b"x"]
        return Deferred(later())

    p, io = pipeline(deferred_coroutine)
    (f,) = p.receive_data(metadata(1))
    io.closed = True
    assert p.start(f) is None  # and the deferred coroutine is closed, never awaited


def test_a_handler_closing_the_connection_reaches_the_transport() -> None:
    async def refuse(ctx: RequestContext, request: Any) -> Response:
        ctx.close_connection("no")
        return None

    p, io = pipeline(refuse)
    assert run(p, metadata(1)) == b"" and io.closes == 1


# -- mute (KIP-219) --------------------------------------------------------------------------

def test_a_throttled_client_is_muted_until_its_time_has_passed() -> None:
    async def throttled(ctx: RequestContext, request: Any) -> Response:
        ctx.throttle(200)
        return [b"throttled"]

    p, _ = pipeline(throttled)
    assert p.mute_remaining(time.monotonic()) == 0.0  # not muted to begin with
    assert cids(run(p, metadata(1))) == [1]  # the answer itself goes out
    now = time.monotonic()
    assert 0.1 < p.mute_remaining(now) <= 0.2
    assert p.throttled_until  # the transport starts nothing more meanwhile
    assert p.mute_remaining(now + 0.25) == 0.0
    assert not p.throttled_until  # the mute is over
    p.throttle(50)
    p.throttle(10)  # a shorter throttle does not shorten the mute
    assert p.mute_remaining(time.monotonic()) > 0.02


# -- SASL before anything -------------------------------------------------------------------

def sasl_pipeline() -> tuple[RequestPipeline, FakeIO]:
    config = SaslServerConfig(mechanisms=("PLAIN",), plain_users={"alice": "secret"},
                              max_receive_size=2048)
    return pipeline(security=ListenerSecurity("SASL_PLAINTEXT", "SASL_PLAINTEXT", sasl=config,
                                              failed_authentication_delay_ms=300))


def authenticate(p: RequestPipeline, password: str) -> bytes:
    return run(p, frame(SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"}, 1)
               + frame(SASL_AUTHENTICATE, 2, {"auth_bytes": f"\0alice\0{password}".encode()}, 2))


def test_sasl_only_api_versions_and_sasl_requests_before_authentication() -> None:
    p, _ = sasl_pipeline()
    assert cids(run(p, api_versions(0))) == [0]  # allowed before authentication
    with pytest.raises(RemoteProtocolError, match="Metadata request before SASL"):
        run(p, metadata(1))
    assert p.principal == ANONYMOUS


def test_sasl_frames_are_small_until_authenticated() -> None:
    p, _ = sasl_pipeline()
    with pytest.raises(RemoteProtocolError):
        p.receive_data(struct.pack(">i", 4096))  # over sasl.server.max.receive.size
    p, _ = sasl_pipeline()
    assert cids(authenticate(p, "secret")) == [1, 2]
    assert p.principal == KafkaPrincipal("User", "alice")
    # Now socket.request.max.bytes: a request of 4 KiB (a long client id) is served.
    big = metadata(3, client_id="c" * 5000)
    assert len(big) > 4096 and cids(run(p, big)) == [3]


def test_sasl_authenticated_requests_are_served() -> None:
    p, _ = sasl_pipeline()
    assert cids(authenticate(p, "secret")) == [1, 2]
    assert cids(run(p, metadata(3))) == [3]


def test_a_failed_authentication_is_answered_then_nothing_more_is_served() -> None:
    p, io = sasl_pipeline()
    assert cids(authenticate(p, "wrong")) == [1, 2]  # the failure is answered
    assert p.authentication_failed and io.close_after_delays == [0.3]
    (f,) = p.receive_data(api_versions(3))
    assert p.start(f) is None  # closing after the delay: nothing more is served
    assert p.principal == ANONYMOUS
