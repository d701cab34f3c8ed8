"""Tests for klog.daemon.connection against a real broker over raw sockets.

Pipelining and ordering, request headers v1/v2 (tagged fields, null and odd client ids),
ApiVersions v0-v4 and the v0 fallback for unknown versions, a client that goes away in the
middle of a large sendfile, and a segment truncated or closed under a fetch in flight.
"""

from __future__ import annotations

import asyncio
import os
import socket
import struct
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from klog.daemon import connection
from klog.protocol import apis, framing
from klog.protocol.records.batch import iter_batch_headers
from tests.daemon.wire import (
    InProcessBroker,
    WireClient,
    batch,
    fetch_values,
    produce_values,
    reset_on_close,
    running_broker,
)

API_VERSIONS_BODY = {"client_software_name": "wire", "client_software_version": "1.0"}


@pytest.fixture
def broker(tmp_path: Path) -> Any:
    with running_broker(tmp_path) as running:
        yield running


def _healthy(broker: InProcessBroker) -> None:
    """A fresh connection still gets answers (the broker is up and serving)."""
    with broker.connect() as client:
        response = client.call(18, 3, API_VERSIONS_BODY)
        assert response.error_code == 0


def _connections(broker: InProcessBroker) -> int:
    return broker.call(lambda: len(broker.broker.server.connections))


def _wait_until(predicate: Any, timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.01)
    return predicate()


# --------------------------------------------------------------------------------------------
# Pipelining and order


def test_pipelined_requests_are_answered_in_order(broker: InProcessBroker) -> None:
    with broker.connect() as client:
        client.create_topic("pipe")
        frames, expected = [], []
        for i in range(100):
            kind = i % 4
            if kind == 0:
                api, version, values = 18, 3, API_VERSIONS_BODY
            elif kind == 1:
                api, version, values = 0, 9, produce_values("pipe", 0, batch(1, b"%d" % i))
            elif kind == 2:
                api, version, values = 1, 12, fetch_values("pipe", 0, 0)
            else:
                api, version = 3, 12
                values = {"topics": [{"name": "pipe", "topic_id": None}],
                          "allow_auto_topic_creation": False,
                          "include_topic_authorized_operations": False}
            cid, frame = client.request_frame(api, version, values,
                                              correlation_id=1000 + i * 7)
            frames.append(frame)
            expected.append((cid, api, version))
        client.send_raw(b"".join(frames))  # all 100 at once, without waiting
        offsets = []
        for cid, api, version in expected:
            got, response = client.recv_response(api, version)
            assert got == cid
            if api == 0:
                part = response.responses[0].partition_responses[0]
                assert part.error_code == 0
                offsets.append(part.base_offset)
        # the 25 produces were appended in the order they were sent
        assert offsets == list(range(25))
    assert broker.log_end_offset("pipe") == 25


def test_a_long_poll_holds_back_the_answers_behind_it(broker: InProcessBroker) -> None:
    """Fetch waiting in the purgatory, ApiVersions pipelined after it: the fetch answers
    first, after its max_wait, as Kafka's per-connection ordering requires."""
    with broker.connect() as client:
        client.create_topic("poll")
        fetch_cid, fetch = client.request_frame(1, 12, fetch_values("poll", 0, 0,
                                                                    max_wait_ms=300))
        av_cid, av = client.request_frame(18, 3, API_VERSIONS_BODY)
        start = time.monotonic()
        client.send_raw(fetch + av)
        got, response = client.recv_response(1, 12)
        assert got == fetch_cid
        assert time.monotonic() - start >= 0.25
        assert response.responses[0].partitions[0].records in (None, b"")
        got, _ = client.recv_response(18, 3)
        assert got == av_cid


def test_acks_all_produces_waiting_for_the_isr_do_not_hold_back_the_next_appends(
        broker: InProcessBroker) -> None:
    """A follower (2) in the ISR that has not fetched: three pipelined acks=-1 produces
    are all appended while the first waits, and an ApiVersions behind them waits its turn;
    once the follower's fetch moves the high watermark, the answers go out in order."""
    from klog.daemon.metadata_cache import PartitionState

    with broker.connect() as client, broker.connect() as follower:
        client.create_topic("isr")
        me = broker.broker.broker_id

        def two_replicas() -> None:
            p = broker.broker.replica_manager.get_partition("isr", 0)
            broker.broker.control_requests.become_leader_or_follower([PartitionState(
                "isr", 0, me, p.leader_epoch + 1, (me, 2), (me, 2), p.controller_epoch,
                p.zk_version)], {})

        broker.call(two_replicas)
        frames = [client.request_frame(0, 9, produce_values("isr", 0, batch(1), acks=-1))
                  for _ in range(3)]
        av_cid, av = client.request_frame(18, 3, API_VERSIONS_BODY)
        client.send_raw(b"".join(f for _, f in frames) + av)
        deadline = time.monotonic() + 10
        while broker.log_end_offset("isr") < 3:
            assert time.monotonic() < deadline, "the pipelined produces were not appended"
            time.sleep(0.01)
        client.sock.settimeout(0.3)
        with pytest.raises(TimeoutError):  # nothing is answered before the ISR has it
            client.sock.recv(1, socket.MSG_PEEK)
        client.sock.settimeout(10.0)
        values = fetch_values("isr", 0, 3)
        values["replica_id"] = 2
        assert follower.call(1, 12, values).responses[0].partitions[0].high_watermark == 3
        for offset, (cid, _) in enumerate(frames):
            got, response = client.recv_response(0, 9)
            part = response.responses[0].partition_responses[0]
            assert (got, part.error_code, part.base_offset) == (cid, 0, offset)
        assert client.recv_response(18, 3)[0] == av_cid


def test_a_produce_completes_a_waiting_fetch_on_another_connection(
        broker: InProcessBroker) -> None:
    with broker.connect() as consumer, broker.connect() as producer:
        consumer.create_topic("wake")
        cid = consumer.send(1, 12, fetch_values("wake", 0, 0, max_wait_ms=5000))
        time.sleep(0.05)
        start = time.monotonic()
        assert producer.produce("wake", 0, batch(2)).responses[0].partition_responses[0] \
            .error_code == 0
        got, response = consumer.recv_response(1, 12)
        assert got == cid and time.monotonic() - start < 2.0
        part = response.responses[0].partitions[0]
        assert part.high_watermark == 2
        assert [h.last_offset for h in iter_batch_headers(part.records)] == [1]


def test_requests_split_into_single_bytes_are_reassembled(broker: InProcessBroker) -> None:
    with broker.connect() as client:
        _cid, frame = client.request_frame(18, 3, API_VERSIONS_BODY, correlation_id=77)
        for i in range(len(frame)):
            client.send_raw(frame[i:i + 1])
        got, response = client.recv_response(18, 3)
        assert got == 77 and response.error_code == 0


def test_requests_without_answers_keep_the_order_of_the_rest(broker: InProcessBroker
                                                              ) -> None:
    """acks=0 produces get no answer; the answers around them still come in order."""
    with broker.connect() as client:
        client.create_topic("mixed")
        frames, answered = [], []
        for i in range(20):
            acks = 0 if i % 2 else 1
            cid, frame = client.request_frame(0, 9, produce_values("mixed", 0, batch(1),
                                                                   acks=acks))
            frames.append(frame)
            if acks:
                answered.append(cid)
        client.send_raw(b"".join(frames))
        got = [client.recv_response(0, 9) for _ in answered]
        assert [cid for cid, _ in got] == answered
        assert [r.responses[0].partition_responses[0].base_offset for _, r in got] \
            == list(range(0, 20, 2))
    assert broker.log_end_offset("mixed") == 20


def test_a_half_closed_client_still_gets_its_requests_processed_and_answered(
        broker: InProcessBroker) -> None:
    """A client that shuts down its sending side after its last request (an acks=0
    producer closing, a script piping requests) still has every request it sent
    processed, in order, and can read the answers; then the broker closes."""
    with broker.connect() as client:
        client.create_topic("halfclosed")
        fetch_cid, fetch = client.request_frame(1, 12, fetch_values("halfclosed", 0, 0,
                                                                    max_wait_ms=300))
        _cid, produce0 = client.request_frame(0, 9, produce_values("halfclosed", 0,
                                                                   batch(3), acks=0))
        produce1_cid, produce1 = client.request_frame(0, 9, produce_values(
            "halfclosed", 0, batch(2), acks=1))
        client.send_raw(fetch + produce0 + produce1)
        client.sock.shutdown(socket.SHUT_WR)
        got, _ = client.recv_response(1, 12)  # the long poll, first
        assert got == fetch_cid
        got, response = client.recv_response(0, 9)
        assert got == produce1_cid
        assert response.responses[0].partition_responses[0].base_offset == 3
        assert client.is_closed_by_peer(timeout=5)
    assert broker.log_end_offset("halfclosed") == 5
    assert _wait_until(lambda: _connections(broker) == 0)


def test_many_connections_at_once(broker: InProcessBroker) -> None:
    clients = [broker.connect() for _ in range(500)]
    try:
        for i, client in enumerate(clients):  # every request out before any answer is read
            client.send(18, i % 5, API_VERSIONS_BODY if i % 5 >= 3 else {},
                        correlation_id=i)
        for i, client in enumerate(clients):
            got, response = client.recv_response(18, i % 5)
            assert got == i and response.error_code == 0
        assert _connections(broker) == 500
    finally:
        for client in clients:
            client.close()
    assert _wait_until(lambda: _connections(broker) == 0)
    assert broker.call(lambda: broker.broker.server.queued) == 0


class _RecordingTransport(asyncio.Transport):
    """Keeps what a connection writes, one entry per write (a send on a socket)."""

    def __init__(self) -> None:
        super().__init__()
        self.writes: list[bytes] = []

    def write(self, data: Any) -> None:
        self.writes.append(bytes(data))

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return default

    def is_closing(self) -> bool:
        return False

    def abort(self) -> None:
        pass

    def close(self) -> None:
        pass

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


class _Clock:
    """``time`` for the connection module: perf_counter moves ``step`` s at each look."""

    def __init__(self, step: float) -> None:
        self.step = step
        self.now = 0.0

    def perf_counter(self) -> float:
        self.now += self.step
        return self.now

    def monotonic(self) -> float:
        return time.monotonic()


def _writes_for(broker: InProcessBroker, monkeypatch: pytest.MonkeyPatch, frames: list[bytes],
                seconds_per_answer: float) -> list[bytes]:
    """The writes a connection makes answering ``frames``, all received in one read, when
    each answer takes ``seconds_per_answer`` (by the connection's clock) to make."""
    async def run() -> list[bytes]:
        conn = connection.Connection(broker.broker.server, "PLAINTEXT")
        transport = _RecordingTransport()
        conn.connection_made(transport)
        conn.data_received(b"".join(frames))
        for _ in range(10_000):
            await asyncio.sleep(0)
            if not conn.queue and not conn.busy and not conn._flush_scheduled:
                break
        conn.close()
        return transport.writes

    with monkeypatch.context() as patch:
        patch.setattr(connection, "time", _Clock(seconds_per_answer))
        return asyncio.run_coroutine_threadsafe(run(), broker.loop).result(10)


def _api_versions_frames(broker: InProcessBroker, count: int) -> list[bytes]:
    with broker.connect() as client:
        return [client.request_frame(18, 3, API_VERSIONS_BODY, correlation_id=i)[1]
                for i in range(count)]


def test_answers_ready_together_leave_in_one_send(broker: InProcessBroker,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    writes = _writes_for(broker, monkeypatch, _api_versions_frames(broker, 5), 0.0)
    assert len(writes) == 1
    assert _cids(writes[0]) == [0, 1, 2, 3, 4]


def test_a_backlog_is_answered_in_pieces_not_after_its_last_request(
        broker: InProcessBroker, monkeypatch: pytest.MonkeyPatch) -> None:
    # Each answer takes 0.3 ms and answers are held at most 0.5 ms: five queued requests
    # leave as 3 + 2, the first three not waiting for the last two to be handled.
    assert connection._COALESCE_SECONDS == 0.0005
    writes = _writes_for(broker, monkeypatch, _api_versions_frames(broker, 5), 0.0003)
    one = len(writes[-1]) // 2
    assert [len(w) for w in writes] == [3 * one, 2 * one]


def _cids(data: bytes) -> list[int]:
    """The correlation ids of the responses in ``data``, in order."""
    cids = []
    while data:
        (size, cid) = struct.unpack(">ii", data[:8])
        cids.append(cid)
        data = data[4 + size:]
    return cids


def test_requests_on_an_idle_connection_are_answered_within_the_read(
        broker: InProcessBroker, monkeypatch: pytest.MonkeyPatch) -> None:
    # One event-loop iteration per request: the answers are sent before data_received
    # returns, not after the connection's task has been woken and a flush scheduled.
    frames = _api_versions_frames(broker, 3)
    monkeypatch.setattr(connection, "time", _Clock(0.0))  # answers take no time

    async def run() -> tuple[list[bytes], int, int]:
        conn, transport, queued = await _idle_connection(broker)
        conn.data_received(b"".join(frames))
        writes = list(transport.writes)
        after = broker.broker.server.queued
        conn.close()
        return writes, queued, after

    writes, queued, after = asyncio.run_coroutine_threadsafe(run(), broker.loop).result(10)
    assert len(writes) == 1
    assert _cids(writes[0]) == [0, 1, 2]
    assert after == queued  # handled, so no longer counted against queued.max.requests


def _long_poll_then_api_versions(broker: InProcessBroker, topic: str,
                                 max_wait_ms: int) -> list[bytes]:
    """A fetch of an empty new topic that waits ``max_wait_ms`` (correlation id 7), then
    two ApiVersions requests (0 and 1)."""
    with broker.connect() as client:
        client.create_topic(topic)
        fetch = client.request_frame(1, 12, fetch_values(topic, 0, 0, max_wait_ms=max_wait_ms),
                                     correlation_id=7)[1]
    return [fetch, *_api_versions_frames(broker, 2)]


async def _idle_connection(
        broker: InProcessBroker) -> tuple[connection.Connection, _RecordingTransport, int]:
    """A connection whose task waits for requests, its transport, and the broker's count
    of queued requests before it gets any."""
    conn = connection.Connection(broker.broker.server, "PLAINTEXT")
    transport = _RecordingTransport()
    conn.connection_made(transport)
    await asyncio.sleep(0)
    return conn, transport, broker.broker.server.queued


def test_a_request_that_waits_in_the_read_is_finished_by_the_task_in_order(
        broker: InProcessBroker) -> None:
    # A long poll begun in the read callback waits in the purgatory; the requests read
    # with it are queued behind it and answered after it, by the connection's task.
    frames = _long_poll_then_api_versions(broker, "idle", 200)

    async def run() -> tuple[list[bytes], list[bytes], int, int]:
        conn, transport, queued = await _idle_connection(broker)
        conn.data_received(b"".join(frames))
        early = list(transport.writes)
        waiting = len(conn.queue)
        for _ in range(200):
            await asyncio.sleep(0.01)
            if not conn.busy and not conn.queue and not conn._flush_scheduled:
                break
        writes = list(transport.writes)
        conn.close()
        return early, writes, waiting, broker.broker.server.queued - queued

    early, writes, waiting, still_queued = asyncio.run_coroutine_threadsafe(
        run(), broker.loop).result(10)
    assert early == [] and waiting == 2  # nothing answered ahead of the waiting fetch
    assert _cids(b"".join(writes)) == [7, 0, 1]
    assert still_queued == 0


def test_pipelined_requests_that_all_wait_are_all_answered(broker: InProcessBroker) -> None:
    # The first waits from the read callback, the second from the connection's task: each
    # answer is sent once its wait ends (the second once went unsent: nothing flushed it).
    with broker.connect() as client:
        client.create_topic("both")
        frames = [client.request_frame(1, 12, fetch_values("both", 0, 0, max_wait_ms=100),
                                       correlation_id=cid)[1] for cid in (11, 12)]
        client.send_raw(b"".join(frames))
        assert [client.recv_response(1, 12)[0] for _ in frames] == [11, 12]


def test_a_connection_closed_while_a_request_begun_in_the_read_waits(
        broker: InProcessBroker) -> None:
    frames = _long_poll_then_api_versions(broker, "gone", 5000)

    async def run() -> tuple[int, bool]:
        conn, _, queued = await _idle_connection(broker)
        conn.data_received(b"".join(frames))
        await asyncio.sleep(0.05)
        conn.connection_lost(None)
        task = conn.task
        assert task is not None
        await asyncio.wait([task], timeout=5)
        return broker.broker.server.queued - queued, task.done()

    still_queued, done = asyncio.run_coroutine_threadsafe(run(), broker.loop).result(10)
    assert done
    assert still_queued == 0  # the waiting request and the two behind it are let go
    _healthy(broker)


def test_accepted_sockets_have_nagle_turned_off(broker: InProcessBroker) -> None:
    # With Nagle on, an answer written while the previous one is unacknowledged waits for
    # the client's delayed ACK (40 ms on Linux): pipelining producers saw 40 ms stalls.
    with broker.connect() as client:
        client.call(18, 3, API_VERSIONS_BODY)

        def no_delay() -> list[int]:
            return [c.transport.get_extra_info("socket").getsockopt(
                        socket.IPPROTO_TCP, socket.TCP_NODELAY)
                    for c in broker.broker.server.connections]

        assert broker.call(no_delay) == [1]


# --------------------------------------------------------------------------------------------
# Request headers


def test_request_header_v1_with_null_and_odd_client_ids(broker: InProcessBroker) -> None:
    body = apis.encode_request(apis.spec_for(18).request_entity(0)())
    with broker.connect() as client:
        for cid, client_id_bytes in ((1, b"\xff\xff"),            # null
                                     (2, b"\x00\x00"),            # empty
                                     (3, b"\x00\x03\xff\xfe\xfd"),  # not UTF-8
                                     (4, b"\x00\x05h\xc3\xa9llo")):
            payload = struct.pack(">hhi", 18, 0, cid) + client_id_bytes + body
            client.send_raw(framing.encode_frame(payload))
            got, response = client.recv_response(18, 0)
            assert got == cid and response.error_code == 0


def test_request_header_v2_skips_unknown_tagged_fields(broker: InProcessBroker) -> None:
    """Metadata v12 is flexible: header v2, whose tagged fields must be skipped."""
    with broker.connect() as client:
        client.create_topic("tags")
        entity = apis.spec_for(3).request_entity(12)
        body = apis.encode_request(entity(topics=None, allow_auto_topic_creation=False,
                                          include_topic_authorized_operations=False))
        tagged = b"\x02" + b"\x07\x03abc" + b"\x2a\x00"  # two unknown tags, one empty
        payload = struct.pack(">hhi", 3, 12, 99) + b"\x00\x04wire" + tagged + body
        client.send_raw(framing.encode_frame(payload))
        got, response = client.recv_response(3, 12)
        assert got == 99
        assert [t.name for t in response.topics] == ["tags"]


def test_non_flexible_versions_use_header_v1_and_response_header_v0(
        broker: InProcessBroker) -> None:
    with broker.connect() as client:
        for version in (0, 4, 8, 9, 12):
            cid = client.send(3, version, {"topics": [], "allow_auto_topic_creation": False,
                                           "include_cluster_authorized_operations": False,
                                           "include_topic_authorized_operations": False})
            frame = client.recv_frame()
            assert struct.unpack_from(">i", frame)[0] == cid
            header_version = apis.response_header_version(3, version)
            assert header_version == (1 if version >= 9 else 0)
            _, offset = framing.parse_response_header(frame, header_version)
            response = apis.decode_response(3, version, memoryview(frame)[offset:])
            assert [b.node_id for b in response.brokers] == [0]


def test_request_header_v0_is_dispatched_and_answered_with_header_v0(
        broker: InProcessBroker) -> None:
    """Only ControlledShutdown v0 uses request header v0 (no client id). A standalone
    broker does not accept it (it has no peer to send it), so the connection's handling of
    header v0 is checked with the API switched on in this broker's table and a stand-in
    handler."""
    seen: list[Any] = []

    async def handler(ctx: Any, request: Any) -> Any:
        seen.append((ctx.header, request))
        return ctx.respond({"error_code": 0, "remaining_partitions": []})

    def enable() -> None:
        server = broker.broker.server
        server.advertised = {**server.advertised, 7: (0, 0)}
        server.handlers = {**server.handlers, 7: handler}

    broker.call(enable)
    with broker.connect() as client:
        client.send_raw(framing.encode_frame(struct.pack(">hhii", 7, 0, 31, 1234)))
        frame = client.recv_frame()
        assert frame == struct.pack(">ihi", 31, 0, 0)  # header v0, error 0, no partitions
    header, request = seen[0]
    assert (header.header_version, header.client_id, request.broker_id) == (0, None, 1234)


# --------------------------------------------------------------------------------------------
# ApiVersions


@pytest.mark.parametrize("version", [0, 1, 2, 3, 4])
def test_api_versions_every_supported_version(broker: InProcessBroker, version: int) -> None:
    with broker.connect() as client:
        response = client.call(18, version, API_VERSIONS_BODY if version >= 3 else {})
        assert response.error_code == 0
        advertised = {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}
        # A standalone broker: everything but the inter-broker control APIs.
        assert advertised == dict(apis.STANDALONE_ADVERTISED)
        assert advertised[18] == (0, 4)


@pytest.mark.parametrize("version", [5, 99, 32767, -1])
def test_api_versions_unknown_version_gets_a_v0_unsupported_version_answer(
        broker: InProcessBroker, version: int) -> None:
    """librdkafka opens with the highest ApiVersions it knows and falls back on error 35;
    the answer must be readable as v0 whatever was asked, and the connection stays open."""
    with broker.connect() as client:
        # a newer client's body is opaque to us: it must not even be decoded
        payload = struct.pack(">hhi", 18, version, 4242) + b"\x00\x04wire" + b"\x00\xde\xad"
        client.send_raw(framing.encode_frame(payload))
        frame = client.recv_frame()
        assert frame == struct.pack(">ihihhh", 4242, 35, 1, 18, 0, 4)
        # same connection, the version the fallback named: answered normally
        response = client.call(18, 3, API_VERSIONS_BODY)
        assert response.error_code == 0
        assert len(response.api_keys) == len(apis.STANDALONE_ADVERTISED)


# --------------------------------------------------------------------------------------------
# Sendfile: clients that leave, and segments that change under a fetch


def _fill(client: WireClient, topic: str, megabytes: int) -> int:
    client.create_topic(topic)
    value = os.urandom(255 * 1024)
    for _ in range(megabytes):
        response = client.produce(topic, 0, batch(4, value))
        assert response.responses[0].partition_responses[0].error_code == 0
    return megabytes * 4


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_client_disconnecting_mid_sendfile_leaves_the_broker_serving(
        broker: InProcessBroker) -> None:
    with broker.connect() as client:
        _fill(client, "big", 24)  # 24 MiB in the log
    fds_before = _open_fds()
    for round_ in range(10):
        victim = broker.connect()
        victim.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        victim.send(1, 12, fetch_values("big", 0, 0, max_bytes=64 << 20))
        victim.sock.recv(1024 if round_ % 2 else 1)  # the response has started
        if round_ % 2:
            # RST: the next sendfile call fails with ECONNRESET / EPIPE
            reset_on_close(victim.sock)
        victim.close()
        _healthy(broker)
    assert _wait_until(lambda: _connections(broker) == 0)
    assert broker.alive
    assert broker.call(lambda: broker.broker.server.queued) == 0
    assert _wait_until(lambda: _open_fds() <= fds_before)
    # and the data is still served whole to a client that reads
    with broker.connect() as client:
        response = client.fetch("big", 0, 0, max_bytes=64 << 20)
        part = response.responses[0].partitions[0]
        assert sum(h.records_count for h in iter_batch_headers(part.records)) == 96


def _stalled_fetch(broker: InProcessBroker, topic: str) -> tuple[WireClient, int]:
    """A fetch of the whole log whose client does not read: the broker is left in the
    middle of sending the record region, once the socket buffers are full (a few MiB on
    loopback: the log must hold well more than that)."""
    client = broker.connect()
    cid = client.send(1, 12, fetch_values(topic, 0, 0, max_bytes=64 << 20))
    # wait until the broker is busy sending to it
    assert _wait_until(lambda: broker.call(
        lambda: any(c.busy for c in broker.broker.server.connections)))
    time.sleep(0.1)
    return client, cid


def _drain(client: WireClient, timeout: float = 10.0) -> int:
    """Read until the broker closes the connection or the response is complete; returns
    the bytes read (the broker must do one or the other, not hang)."""
    client.sock.settimeout(timeout)
    total = 0
    expected = None
    head = b""
    while True:
        try:
            chunk = client.sock.recv(1 << 20)
        except ConnectionResetError:
            return total
        if not chunk:
            return total
        if len(head) < 4:
            head += chunk[:4 - len(head)]
            if len(head) == 4:
                expected = struct.unpack(">i", head)[0] + 4
        total += len(chunk)
        if expected is not None and total >= expected:
            return total


def test_segment_truncated_under_a_fetch_in_flight(broker: InProcessBroker) -> None:
    with broker.connect() as client:
        _fill(client, "trunc", 32)
    segment = next((broker.broker.log_manager.log_dirs[0] / "trunc-0").glob("*.log"))
    victim, _cid = _stalled_fetch(broker, "trunc")
    os.truncate(segment, 1 << 20)  # the region now runs past the end of the file
    got = _drain(victim)
    victim.close()
    assert got < 32 << 20  # it could not have been sent whole: the connection was closed
    assert broker.alive
    _healthy(broker)
    assert _wait_until(lambda: _connections(broker) == 0)


def test_segment_closed_under_a_fetch_in_flight_is_not_served_from_a_reused_descriptor(
        broker: InProcessBroker, tmp_path: Path) -> None:
    """A topic's log closed (deletion, StopReplica) while a response still has regions to
    send: the descriptor number may be reused at once by another file. The response must
    carry the segment's own bytes or end, never another file's."""
    with broker.connect() as client:
        _fill(client, "gone", 32)
        segment = next((broker.broker.log_manager.log_dirs[0] / "gone-0").glob("*.log"))
        expected = segment.read_bytes()
        victim, _cid = _stalled_fetch(broker, "gone")

        def close_and_reuse() -> list[int]:
            broker.broker.replica_manager.stop_replicas([("gone", 0)], delete=True)
            # grab freed descriptor numbers with a file of a different content
            decoy = tmp_path / "decoy"
            decoy.write_bytes(b"\xee" * (33 << 20))
            return [os.open(decoy, os.O_RDONLY) for _ in range(8)]

        decoys = broker.call(close_and_reuse)
        try:
            victim.sock.settimeout(10)
            received = bytearray()
            while True:
                try:
                    chunk = victim.sock.recv(1 << 20)
                except ConnectionResetError:
                    break
                if not chunk:
                    break
                received += chunk
                if len(received) >= 4 and len(received) >= struct.unpack_from(
                        ">i", received)[0] + 4:
                    break
        finally:
            for fd in decoys:
                os.close(fd)
            victim.close()
        assert b"\xee" * 64 not in received
        # the pinned file was sent whole: the response is complete and carries the
        # segment's own bytes
        assert len(received) == struct.unpack_from(">i", received)[0] + 4
        response = apis.decode_response(1, 12, bytes(received[4 + 5:]))
        assert response.responses[0].partitions[0].records == expected
    assert broker.alive
    _healthy(broker)


def test_broker_shutdown_while_a_send_is_stalled(tmp_path: Path) -> None:
    broker = InProcessBroker(tmp_path).start()
    try:
        with broker.connect() as client:
            _fill(client, "stall", 32)
        victim, _cid = _stalled_fetch(broker, "stall")
        connections = broker.call(lambda: list(broker.broker.server.connections))
        start = time.monotonic()
        broker.stop()
        assert time.monotonic() - start < 5
        victim.close()
        # the stalled send was ended, not left waiting on a closed socket
        assert [c._task.done() for c in connections] == [True]
    finally:
        broker.stop()


def test_pipelined_fetches_of_large_regions_arrive_whole_and_in_order(
        broker: InProcessBroker) -> None:
    with broker.connect() as client:
        _fill(client, "seq", 4)
        frames, cids = [], []
        for offset in range(16):
            cid, frame = client.request_frame(1, 12, fetch_values("seq", 0, offset,
                                                                  max_bytes=4 << 20))
            frames.append(frame)
            cids.append(cid)
        result: dict[str, Any] = {}

        def send_all() -> None:  # the broker may push back while we are not reading
            client.send_raw(b"".join(frames))
            result["sent"] = True

        sender = threading.Thread(target=send_all)
        sender.start()
        for offset, cid in enumerate(cids):
            got, response = client.recv_response(1, 12)
            assert got == cid
            headers = list(iter_batch_headers(response.responses[0].partitions[0].records))
            assert headers[0].base_offset <= offset <= headers[0].last_offset
            assert headers[-1].last_offset == 15
        sender.join(10)
        assert result.get("sent")


# --------------------------------------------------------------------------------------------
# Client quotas (KIP-219)


def test_a_throttled_client_gets_the_time_and_its_next_request_waits_for_it(
        broker: InProcessBroker) -> None:
    """A produce over the client's producer_byte_rate: the response says the throttle
    time, and the ApiVersions pipelined behind it is not started before that time; a
    client without the quota is answered at once meanwhile."""
    records = batch(1, b"x" * 2000)
    # the first produce is ~1.1 x the quota over Kafka's minimum 10 s window: ~1 s throttle
    bound = len(records) / 11
    broker.call(lambda: broker.broker.client_quotas.configs.set(
        (None, "wire"), {"producer_byte_rate": str(bound)}))
    with broker.connect() as client, broker.connect() as other:
        client.create_topic("quota")
        _cid, produce = client.request_frame(0, 9, produce_values("quota", 0, records))
        av_cid, av = client.request_frame(18, 3, API_VERSIONS_BODY)
        client.send_raw(produce + av)
        _got, response = client.recv_response(0, 9)
        throttle_s = response.throttle_time.total_seconds()
        assert 0.5 < throttle_s < 2.0
        answered_at = time.monotonic()
        # another client id, meanwhile: not throttled
        _o_cid, o_frame = other.request_frame(0, 9, produce_values("quota", 0, batch(1)),
                                              client_id="other")
        other.send_raw(o_frame)
        _got, other_response = other.recv_response(0, 9)
        assert other_response.throttle_time.total_seconds() == 0
        got, _ = client.recv_response(18, 3)
        assert got == av_cid
        # muted for the throttle time after the response (a lower bound: never flaky)
        assert time.monotonic() - answered_at >= throttle_s * 0.9
        assert _connections(broker) >= 2
    broker.call(lambda: broker.broker.client_quotas.configs.set((None, "wire"), {}))
    _healthy(broker)


def test_request_percentage_throttles_a_client_whose_handlers_take_too_long(
        broker: InProcessBroker) -> None:
    """request_percentage (Kafka's ClientRequestQuotaManager): handler time counts against
    the client's share of a thread; over it, the answer says the throttle time (bounded by
    one quota window) and the next request waits; another client id is not held."""
    broker.call(lambda: broker.broker.client_quotas.configs.set(
        (None, "wire"), {"request_percentage": "0.0000001"}))
    try:
        with broker.connect() as client, broker.connect() as other:
            first = client.call(3, 12, {"topics": [], "allow_auto_topic_creation": False,
                                        "include_topic_authorized_operations": False})
            throttle_s = first.throttle_time.total_seconds()
            assert 0 < throttle_s <= 1.0  # quota.window.size.seconds bounds it
            answered_at = time.monotonic()
            _cid, frame = other.request_frame(18, 3, API_VERSIONS_BODY, client_id="other")
            other.send_raw(frame)
            _got, response = other.recv_response(18, 3)
            assert response.throttle_time.total_seconds() == 0
            client.call(18, 3, API_VERSIONS_BODY)
            assert time.monotonic() - answered_at >= throttle_s * 0.9
    finally:
        broker.call(lambda: broker.broker.client_quotas.configs.set((None, "wire"), {}))
    _healthy(broker)
