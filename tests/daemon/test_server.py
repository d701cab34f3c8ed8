"""Tests for klog.daemon.server: listeners, backpressure, idle connections, start-up time.

Each test runs a real broker -- in-process (``tests.daemon.wire.InProcessBroker``) where
the test looks at the server's state, as a process (``klog.testing``) where it measures
the process (memory, start-up) -- and talks to it over raw sockets on 127.0.0.1.
"""

from __future__ import annotations

import socket
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from klog.daemon.controller import channel
from klog.daemon.metadata_cache import BrokerEndpoint, BrokerInfo, PartitionState
from klog.daemon.server import ListenerError
from klog.protocol import apis, framing
from klog.testing import KlogBroker, free_port
from tests.daemon.wire import (
    InProcessBroker,
    WireClient,
    batch,
    fetch_values,
    produce_values,
    reset_on_close,
    rss_bytes,
    running_broker,
)

API_VERSIONS_BODY = {"client_software_name": "wire", "client_software_version": "1.0"}


def _has_ipv6() -> bool:
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as s:
            s.bind(("::1", 0))
        return True
    except OSError:
        return False


def _connectable(host: str, port: int) -> bool:
    try:
        socket.create_connection((host, port), timeout=2).close()
        return True
    except OSError:
        return False


def _wait_until(predicate: Any, timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.01)
    return predicate()


# --------------------------------------------------------------------------------------------
# Listeners


@pytest.mark.parametrize("listeners, protocol_map, refused", [
    # TLS without a key store; SASL with Kafka's default mechanism, GSSAPI, which klog
    # does not implement: each refused with one line before anything is bound.
    ("PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:{port}", None, "ssl.keystore.location"),
    ("PLAINTEXT://127.0.0.1:0,CLIENT://127.0.0.1:{port}",
     "PLAINTEXT:PLAINTEXT,CLIENT:SASL_PLAINTEXT", "GSSAPI"),
    ("PLAINTEXT://127.0.0.1:0,SECURE://127.0.0.1:{port}",
     "PLAINTEXT:PLAINTEXT,SECURE:SASL_SSL", "ssl.keystore.location"),
])
def test_secured_listeners_klog_cannot_serve_are_refused_at_start(
        tmp_path: Path, listeners: str, protocol_map: str | None, refused: str) -> None:
    port = free_port()
    overrides = {"listeners": listeners.format(port=port)}
    if protocol_map:
        overrides["listener.security.protocol.map"] = protocol_map
    broker = InProcessBroker(tmp_path, overrides)
    with pytest.raises(ListenerError) as info:
        broker.start()
    message = str(info.value)
    assert refused in message and "listener" in message
    assert "\n" not in message
    broker.stop()
    assert not _connectable("127.0.0.1", port)  # nothing was left listening


def test_cli_refuses_an_ssl_listener_without_key_store_with_one_line(tmp_path: Path) -> None:
    port = free_port()
    result = subprocess.run(
        [sys.executable, "-m", "klog", "broker", "start",
         "--override", f"listeners=PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:{port}",
         "--override", f"log.dirs={tmp_path / 'logs'}"],
        capture_output=True, text=True, timeout=60,
    )
    assert result.returncode != 0
    assert "ssl.keystore.location" in result.stderr and "listener SSL" in result.stderr
    assert "Traceback" not in result.stderr + result.stdout


def test_empty_host_listens_on_every_interface_with_one_port(tmp_path: Path) -> None:
    with running_broker(tmp_path, listeners="PLAINTEXT://:0") as broker:
        assert _connectable("127.0.0.1", broker.port)
        if _has_ipv6():
            assert _connectable("::1", broker.port)
        sockets = broker.call(lambda: [a.sock for a in broker.broker.server.acceptors])
        assert len(sockets) == 1  # dual-stack: one socket, one port for both families
        # and the broker advertises a host a client can reach, with the bound port
        with broker.connect() as client:
            response = client.metadata([], auto_create=False)
            assert [b.port for b in response.brokers] == [broker.port]


def test_ipv4_wildcard_listens_on_ipv4_only(tmp_path: Path) -> None:
    with running_broker(tmp_path, listeners="PLAINTEXT://0.0.0.0:0",
                        advertised_listeners="PLAINTEXT://127.0.0.1:0") as broker:
        assert _connectable("127.0.0.1", broker.port)
        if _has_ipv6():
            assert not _connectable("::1", broker.port)


@pytest.mark.skipif(not _has_ipv6(), reason="no IPv6 loopback on this machine")
def test_ipv6_listener(tmp_path: Path) -> None:
    with running_broker(tmp_path, listeners="PLAINTEXT://[::1]:0",
                        advertised_listeners="PLAINTEXT://[::1]:0") as broker:
        assert _connectable("::1", broker.port)
        assert not _connectable("127.0.0.1", broker.port)


def test_two_listeners_serve_the_same_broker(tmp_path: Path) -> None:
    with running_broker(
        tmp_path,
        listeners="PLAINTEXT://127.0.0.1:0,INTERNAL://127.0.0.1:0",
        listener_security_protocol_map="PLAINTEXT:PLAINTEXT,INTERNAL:PLAINTEXT",
        inter_broker_listener_name="INTERNAL",
    ) as broker:
        bound = broker.call(lambda: dict(broker.broker.server.bound))
        assert set(bound) == {"PLAINTEXT", "INTERNAL"}
        ports = {name: port for name, (_host, port) in bound.items()}
        assert ports["PLAINTEXT"] != ports["INTERNAL"]
        for port in ports.values():
            with WireClient(("127.0.0.1", port)) as client:
                assert client.call(18, 3, API_VERSIONS_BODY).error_code == 0


def test_a_port_in_use_fails_the_start_clearly(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        broker = InProcessBroker(tmp_path, {"listeners": f"PLAINTEXT://127.0.0.1:{port}"})
        with pytest.raises(OSError) as info:
            broker.start()
        broker.stop()
        assert str(port) in str(info.value) or "in use" in str(info.value)


def test_start_up_opens_the_port_each_time(tmp_path: Path) -> None:
    """Start-up, run after run, ends with the port open and answering. How fast (the
    issue's 1 s from exec to an open port) is benchmarks/bench_broker.py's start-up
    figure, not a timed assertion here; the times are printed for the record."""
    figures = []
    for i in range(3):
        broker = KlogBroker(tmp_path / f"b{i}")
        start = time.monotonic()
        broker.start()
        figures.append(time.monotonic() - start)
        try:
            host, port = broker.bootstrap_servers.rsplit(":", 1)
            with WireClient((host, int(port))) as client:
                assert client.call(18, 3, API_VERSIONS_BODY).error_code == 0
        finally:
            broker.close()
    print(f"start-up to open port: {', '.join(f'{f:.3f} s' for f in figures)}")


# --------------------------------------------------------------------------------------------
# Backpressure: queued.max.requests


def _stall(client: WireClient, topic: str, max_wait_ms: int, offset: int = 0) -> int:
    """A fetch at the log end that waits ``max_wait_ms`` in the purgatory: the requests
    pipelined behind it on the same connection have to wait in the broker's queue."""
    return client.send(1, 12, fetch_values(topic, 0, offset, max_wait_ms=max_wait_ms))


def _flood(sock: socket.socket, frame: bytes, limit_bytes: int, stall_seconds: float
           ) -> int:
    """Send ``frame`` over and over until the peer stops taking bytes for
    ``stall_seconds`` (or ``limit_bytes`` went out); returns the bytes it accepted."""
    sock.setblocking(False)
    sent = 0
    view = memoryview(frame)
    position = 0
    last_progress = time.monotonic()
    try:
        while sent < limit_bytes:
            try:
                n = sock.send(view[position:])
            except BlockingIOError:
                if time.monotonic() - last_progress > stall_seconds:
                    break
                time.sleep(0.005)
                continue
            sent += n
            position = (position + n) % len(frame)
            last_progress = time.monotonic()
    finally:
        sock.setblocking(True)
        sock.settimeout(30)
    return sent


def _flood_behind_a_long_poll(address: tuple[str, int], wait_ms: int, offset: int = 0
                              ) -> tuple[WireClient, bytes, int, float]:
    """A connection whose first request waits ``wait_ms`` and which then pushes 256 KiB
    produce requests as fast as the broker takes them, reading nothing. Returns the
    client, the frame, the bytes the broker took and when the long poll started."""
    flooder = WireClient(address)
    started = time.monotonic()
    _stall(flooder, "sink", wait_ms, offset)
    _cid, frame = flooder.request_frame(
        0, 9, produce_values("sink", 0, batch(1, b"x" * (256 << 10))), correlation_id=7)
    accepted = _flood(flooder.sock, frame, 256 << 20, stall_seconds=0.5)
    return flooder, frame, accepted, started


def _reset(client: WireClient) -> None:
    """Close with a TCP reset (nothing left for the broker to flush)."""
    reset_on_close(client.sock)
    client.close()


def test_queued_max_requests_stops_reading_and_recovers(tmp_path: Path) -> None:
    with running_broker(tmp_path, queued_max_requests=4) as broker:
        server = broker.broker.server
        with broker.connect() as setup:
            setup.create_topic("sink")
        flooder, frame, accepted, started = _flood_behind_a_long_poll(
            ("127.0.0.1", broker.port), 4000)
        # the broker stopped reading: the flood got no further than the socket buffers
        # and the queue, not the 256 MiB it tried
        assert time.monotonic() - started < 3.5, "the flood must stop before the poll ends"
        assert accepted < 16 << 20
        queued, paused = broker.call(lambda: (server.queued, [c.reading_paused
                                                              for c in server.connections]))
        assert queued <= 4 + 1  # what one read of the socket completed may exceed it by one
        assert paused == [True]
        # a second client is still served while the first is stuck
        with broker.connect() as other:
            assert other.call(18, 3, API_VERSIONS_BODY).error_code == 0
        # recovery: once the poll ends, every request sent gets its answer, in order
        errors: list[BaseException] = []

        def finish_sending() -> None:
            try:
                flooder.sock.sendall(memoryview(frame)[accepted % len(frame):])
            except BaseException as exc:  # pragma: no cover - reported below
                errors.append(exc)

        tail = threading.Thread(target=finish_sending)
        tail.start()
        got, response = flooder.recv_response(1, 12)
        assert response.responses[0].partitions[0].error_code == 0
        offsets = []
        for _ in range(-(-accepted // len(frame))):
            got, response = flooder.recv_response(0, 9)
            part = response.responses[0].partition_responses[0]
            assert (got, part.error_code) == (7, 0)
            offsets.append(part.base_offset)
        tail.join(30)
        assert not errors
        assert offsets == list(range(len(offsets)))
        assert broker.log_end_offset("sink") == len(offsets)
        flooder.close()
        assert _wait_until(lambda: broker.call(lambda: (server.queued, len(server.paused),
                                                        len(server.connections)))
                           == (0, 0, 0))


def test_one_connection_cannot_buffer_the_whole_global_queue(tmp_path: Path) -> None:
    """With the default queued.max.requests (500), a single pipelining client that reads
    nothing still makes the broker stop reading it after a bounded read-ahead -- Kafka
    reads one request at a time per connection -- rather than queueing 500 large ones."""
    with running_broker(tmp_path) as broker:
        server = broker.broker.server
        with broker.connect() as setup:
            setup.create_topic("sink")
        flooder, frame, accepted, started = _flood_behind_a_long_poll(
            ("127.0.0.1", broker.port), 4000)
        assert time.monotonic() - started < 3.5, "the flood must stop before the poll ends"
        queued_bytes = broker.call(lambda: sum(len(f) for c in server.connections
                                               for f in c.queue))
        _reset(flooder)
        assert accepted < 16 << 20
        assert queued_bytes <= 2 * len(frame) + (1 << 20)
        assert broker.log_end_offset("sink") == 0  # the poll never ended: nothing ran


def test_a_flood_does_not_grow_broker_memory(tmp_path: Path) -> None:
    """Measured on a broker process: its resident memory while 256 MiB of produce requests
    are pushed at each of three stuck connections stays within a few MiB of what it was."""
    with KlogBroker(tmp_path / "b", overrides={"queued.max.requests": 4}) as broker:
        address = ("127.0.0.1", broker.port)
        with WireClient(address) as setup:
            setup.create_topic("sink")
            setup.produce("sink", 0, batch(1, b"x" * (256 << 10)))  # warm the paths up
        pid = broker.process.pid
        before = rss_bytes(pid)
        flooders = [_flood_behind_a_long_poll(address, 6000, offset=1) for _ in range(3)]
        during = rss_bytes(pid)
        for flooder, _frame, accepted, _started in flooders:
            _reset(flooder)
            assert accepted < 16 << 20
        print(f"broker RSS {before / 2**20:.1f} MiB before, {during / 2**20:.1f} MiB with "
              f"3 stuck flooders")
        assert during - before < 24 << 20, (before, during)
        with WireClient(address) as client:  # and it is still serving
            assert client.call(18, 3, API_VERSIONS_BODY).error_code == 0


# --------------------------------------------------------------------------------------------
# connections.max.idle.ms


def test_idle_connections_are_closed(tmp_path: Path) -> None:
    with running_broker(tmp_path, connections_max_idle_ms=300) as broker:
        idle = broker.connect()
        partial = broker.connect()
        partial.send_raw(b"\x00\x00\x00\x40\x00\x12")  # a frame begun, never finished
        start = time.monotonic()
        assert idle.is_closed_by_peer(timeout=5)
        elapsed = time.monotonic() - start
        assert 0.25 <= elapsed < 2.0
        assert partial.is_closed_by_peer(timeout=2)
        idle.close()
        partial.close()
        assert _wait_until(lambda: broker.call(
            lambda: len(broker.broker.server.connections)) == 0)


def test_active_connections_and_long_polls_are_not_idle(tmp_path: Path) -> None:
    with running_broker(tmp_path, connections_max_idle_ms=300) as broker, \
            broker.connect() as chatty, broker.connect() as poller:
        chatty.create_topic("quiet")
        # a fetch waiting 900 ms in the purgatory: busy, not idle
        cid = poller.send(1, 12, fetch_values("quiet", 0, 0, max_wait_ms=900))
        deadline = time.monotonic() + 1.2
        while time.monotonic() < deadline:  # a request every 100 ms for 1.2 s
            assert chatty.call(18, 3, API_VERSIONS_BODY).error_code == 0
            time.sleep(0.1)
        got, response = poller.recv_response(1, 12)
        assert got == cid and response.responses[0].partitions[0].error_code == 0
        # both still open; both closed once they go quiet
        assert chatty.call(18, 3, API_VERSIONS_BODY).error_code == 0
        assert chatty.is_closed_by_peer(timeout=3)
        assert poller.is_closed_by_peer(timeout=3)


def test_default_idle_limit_keeps_connections(tmp_path: Path) -> None:
    with running_broker(tmp_path) as broker, broker.connect() as client:
        assert broker.config.connections_max_idle_ms == 600_000
        assert not client.is_closed_by_peer(timeout=0.5)
        assert client.call(18, 3, API_VERSIONS_BODY).error_code == 0



# --------------------------------------------------------------------------------------------
# Inter-broker control APIs on a standalone broker (issue 18, item 1)
#
# A standalone broker has no other broker: its controller serves it in-process, so
# LeaderAndIsr, StopReplica, UpdateMetadata and ControlledShutdown on the wire can only
# come from a client. They are neither advertised nor accepted: the connection is closed
# unanswered and nothing in the request is applied (klog.protocol.apis.STANDALONE_ADVERTISED).

_CONTROL_APIS = (4, 5, 6, 7)
_HUGE_EPOCH = 2**31 - 1


def _stop_replica_v0_delete(topic: str, partition: int, controller_epoch: int) -> bytes:
    """The issue's frame, byte by byte: StopReplica v0 (header v1, no client id),
    controller 0 at ``controller_epoch``, delete_partitions=true, one partition."""
    name = topic.encode()
    return framing.encode_frame(
        struct.pack(">hhih", 5, 0, 1, -1)                        # header v1
        + struct.pack(">iib", 0, controller_epoch, 1)              # controller, epoch, delete
        + struct.pack(">ih", 1, len(name)) + name + struct.pack(">i", partition))


#: ControlledShutdown for broker 0: v0 (request header v0) and v1, 14 bytes after the size.
_CONTROLLED_SHUTDOWN_V0 = framing.encode_frame(struct.pack(">hhii", 7, 0, 1, 0))
_CONTROLLED_SHUTDOWN_V1 = framing.encode_frame(struct.pack(">hhihi", 7, 1, 1, -1, 0))


def _closed_unanswered(client: WireClient, frame: bytes) -> bool:
    client.send_raw(frame)
    client.sock.settimeout(5)
    try:
        return client.sock.recv(65536) == b""
    except ConnectionResetError:
        return True


def _create_topics(client: WireClient, *names: str) -> dict[str, int]:
    response = client.call(19, 5, {"timeout_ms": 10000, "validate_only": False, "topics": [
        {"name": n, "num_partitions": 1, "replication_factor": -1, "assignments": [],
         "configs": []} for n in names]})
    return {t.name: t.error_code for t in response.topics}


def _coordinator_found(client: WireClient, group: str) -> bool:
    """FindCoordinator answers for ``group``: the offsets topic exists and has a leader."""
    for _ in range(200):
        response = client.call(10, 3, {"key": group, "key_type": 0})
        if response.error_code == 0:
            return True
        time.sleep(0.05)
    return False


def test_standalone_broker_does_not_advertise_the_control_apis(tmp_path: Path) -> None:
    with running_broker(tmp_path) as broker, broker.connect() as client:
        keys = {k.api_key for k in client.call(18, 3, API_VERSIONS_BODY).api_keys}
        assert keys == set(apis.STANDALONE_ADVERTISED)
        assert keys.isdisjoint(_CONTROL_APIS) and keys < set(apis.ADVERTISED)


def test_forged_stop_replica_deletes_nothing_and_does_not_fence_the_controller(
        tmp_path: Path) -> None:
    """The issue's attack: StopReplica v0, delete=true, controller epoch 2**31-1, from a
    plain socket. It renamed the partition for deletion (the records were gone after a
    restart) and its epoch became the broker's, so the real controller was ignored."""
    with running_broker(tmp_path) as broker, broker.connect() as client:
        client.create_topic("precious")
        part = client.produce("precious", 0, batch(100), acks=-1) \
            .responses[0].partition_responses[0]
        assert part.error_code == 0
        epoch = broker.call(lambda: broker.broker.control_requests.controller_epoch)
        with broker.connect() as attacker:
            closed = _closed_unanswered(attacker, _stop_replica_v0_delete("precious", 0,
                                                                          _HUGE_EPOCH))
        # What was done to the broker first (the damage the issue saw), then how.
        assert broker.call(lambda: broker.broker.control_requests.controller_epoch) == epoch
        assert (Path(broker.config.log_dirs[0]) / "precious-0").is_dir()
        assert broker.log_end_offset("precious") == 100
        assert closed
        # The controller still rules: a new topic gets its leader (the in-process
        # LeaderAndIsr is not refused as older than 2**31-1), acks=all works on both.
        assert _create_topics(client, "after") == {"after": 0}
        client.create_topic("after")
        for topic in ("precious", "after"):
            part = client.produce(topic, 0, batch(1), acks=-1) \
                .responses[0].partition_responses[0]
            assert part.error_code == 0, (topic, part)
    with running_broker(tmp_path) as again, again.connect() as client:
        assert again.log_end_offset("precious") == 101
        fetched = client.fetch("precious", 0, 0).responses[0].partitions[0]
        assert fetched.error_code == 0 and fetched.high_watermark == 101


@pytest.mark.parametrize("frame", [_CONTROLLED_SHUTDOWN_V0, _CONTROLLED_SHUTDOWN_V1],
                         ids=["v0", "v1-14-bytes"])
def test_forged_controlled_shutdown_leaves_topic_creation_working(tmp_path: Path,
                                                                  frame: bytes) -> None:
    """A 14-byte ControlledShutdown marked the broker as shutting down: no partition could
    get a leader, so new topics and the offsets topic (consumer groups) were stuck."""
    with running_broker(tmp_path) as broker, broker.connect() as client:
        with broker.connect() as attacker:
            closed = _closed_unanswered(attacker, frame)
        assert broker.call(lambda: broker.broker.controller.shutting_down) == set()
        assert _create_topics(client, "fresh") == {"fresh": 0}
        client.create_topic("fresh")
        assert _coordinator_found(client, "a-group")
        assert closed


def test_forged_leader_and_isr_and_update_metadata_change_nothing(tmp_path: Path) -> None:
    """LeaderAndIsr making this broker a follower of broker 9 at a higher leader epoch,
    and UpdateMetadata naming broker 9 leader, both at controller epoch 2**31-1."""
    with running_broker(tmp_path) as broker, broker.connect() as client:
        client.create_topic("kept")
        assert client.produce("kept", 0, batch(3)).responses[0] \
            .partition_responses[0].error_code == 0
        epoch = broker.call(lambda: broker.broker.control_requests.controller_epoch)
        nine = BrokerInfo(9, (BrokerEndpoint("PLAINTEXT", "127.0.0.1", free_port()),))
        usurped = PartitionState("kept", 0, 9, 1000, (0, 9), (9,), _HUGE_EPOCH)
        forged = [
            (4, 1, channel.leader_and_isr_values(9, _HUGE_EPOCH, -1, [usurped], {}, [nine],
                                                 "PLAINTEXT")),
            (6, 7, channel.update_metadata_values(9, _HUGE_EPOCH, -1, [nine], [usurped], {})),
        ]
        closed = []
        for api_key, version, values in forged:
            with broker.connect() as attacker:
                _, frame = attacker.request_frame(api_key, version, values)
                closed.append(_closed_unanswered(attacker, frame))
        assert broker.call(lambda: broker.broker.control_requests.controller_epoch) == epoch
        leader = client.metadata(["kept"]).topics[0].partitions[0].leader_id
        assert leader == 0 and 9 not in broker.call(
            lambda: broker.broker.metadata_cache.alive_broker_ids())
        part = client.produce("kept", 0, batch(1), acks=-1).responses[0] \
            .partition_responses[0]
        assert part.error_code == 0 and part.base_offset == 3
        assert closed == [True, True]


@pytest.mark.parametrize("api_key", _CONTROL_APIS)
def test_every_version_of_the_control_apis_closes_the_connection(tmp_path: Path,
                                                                 api_key: int) -> None:
    """Each version, as a well-formed request: closed unanswered, before it is decoded."""
    state = PartitionState("t", 0, 1, 7, (0, 1), (1,), _HUGE_EPOCH)
    values = {
        4: channel.leader_and_isr_values(1, _HUGE_EPOCH, -1, [state], {}, [], "PLAINTEXT"),
        5: channel.stop_replica_values(1, _HUGE_EPOCH, -1, [(("t", 0), 7)], True),
        6: channel.update_metadata_values(1, _HUGE_EPOCH, -1, [], [state], {}),
        7: {"broker_id": 0, "broker_epoch": -1},
    }[api_key]
    spec = apis.spec_for(api_key)
    with running_broker(tmp_path) as broker:
        epoch = broker.call(lambda: broker.broker.control_requests.controller_epoch)
        for version in range(spec.min_version, spec.max_version + 1):
            with broker.connect() as attacker:
                _, frame = attacker.request_frame(api_key, version, values)
                assert _closed_unanswered(attacker, frame), (api_key, version)
        assert broker.call(lambda: broker.broker.control_requests.controller_epoch) == epoch
        with broker.connect() as client:
            assert client.call(18, 3, API_VERSIONS_BODY).error_code == 0


# --------------------------------------------------------------------------------------------
# Connection limits (Kafka's ConnectionQuotas) and descriptor exhaustion


def _answers(client: WireClient, timeout: float) -> bool:
    """Whether an ApiVersions request on ``client`` is answered within ``timeout``."""
    cid = client.send(18, 3, API_VERSIONS_BODY)
    client.sock.settimeout(timeout)
    try:
        got, response = client.recv_response(18, 3)
    except TimeoutError:
        return False
    finally:
        client.sock.settimeout(10.0)
    assert got == cid and response.error_code == 0
    return True


def test_max_connections_makes_new_connections_wait_for_a_slot(tmp_path: Path) -> None:
    with running_broker(tmp_path, max_connections=3) as broker:
        clients = [broker.connect() for _ in range(3)]
        for client in clients:
            assert _answers(client, 10)
        # The kernel completes the handshake (backlog); the broker does not accept it.
        waiting = broker.connect()
        assert not _answers(waiting, 0.5)
        assert broker.call(lambda: len(broker.broker.server.connections)) == 3
        clients.pop(0).close()
        # its request is answered once a slot is free
        assert waiting.recv_response(18, 3)[1].error_code == 0
        for client in [*clients, waiting]:
            assert _answers(client, 10)
            client.close()


def test_listener_prefixed_max_connections(tmp_path: Path) -> None:
    overrides = {"listener.name.plaintext.max.connections": 1}
    broker = InProcessBroker(tmp_path, overrides)
    assert broker.config.unknown_keys == []  # known and applied, not "ignored"
    broker.start()
    try:
        with broker.connect() as first, broker.connect() as second:
            assert _answers(first, 10)
            assert not _answers(second, 0.5)
            first.close()
            assert second.recv_response(18, 3)[1].error_code == 0
    finally:
        broker.stop()


def test_max_connections_per_ip_closes_the_excess_connections(tmp_path: Path) -> None:
    with running_broker(tmp_path, max_connections_per_ip=2) as broker:
        first, second = broker.connect(), broker.connect()
        third = broker.connect()
        assert third.is_closed_by_peer(timeout=5)
        assert _answers(first, 10) and _answers(second, 10)
        first.close()
        assert _wait_until(lambda: broker.call(lambda: len(broker.broker.server.connections))
                           == 1)
        with broker.connect() as again:  # the address is under its limit again
            assert _answers(again, 10)
        second.close()
        third.close()


def test_max_connections_per_ip_overrides(tmp_path: Path) -> None:
    # 0 for every address but loopback, which may have 3
    with running_broker(tmp_path, max_connections_per_ip=0,
                        max_connections_per_ip_overrides="127.0.0.1:3") as broker:
        clients = [broker.connect() for _ in range(3)]
        with broker.connect() as fourth:
            assert fourth.is_closed_by_peer(timeout=5)
        for client in clients:
            assert _answers(client, 10)
            client.close()


def test_the_inter_broker_listener_is_not_held_by_max_connections(tmp_path: Path) -> None:
    with running_broker(
        tmp_path,
        listeners="PLAINTEXT://127.0.0.1:0,INTERNAL://127.0.0.1:0",
        listener_security_protocol_map="PLAINTEXT:PLAINTEXT,INTERNAL:PLAINTEXT",
        inter_broker_listener_name="INTERNAL",
        max_connections=2,
        **{"listener.name.internal.max.connections": 5},
    ) as broker:
        internal_port = broker.call(lambda: broker.broker.server.bound["INTERNAL"][1])
        oldest, newer = broker.connect(), broker.connect()
        assert _answers(oldest, 10)
        assert _answers(newer, 10)
        # Full for clients, not for brokers: the inter-broker connection is served and
        # the least recently active client connection closed to make room.
        with WireClient(("127.0.0.1", internal_port)) as inter_broker:
            assert _answers(inter_broker, 10)
            assert oldest.is_closed_by_peer(timeout=5)
            assert _answers(newer, 10)
            with broker.connect() as waiting:  # still at the limit for clients
                assert not _answers(waiting, 0.5)
        newer.close()


def test_max_connection_creation_rate_spaces_out_accepts(tmp_path: Path) -> None:
    with running_broker(tmp_path, max_connection_creation_rate=4) as broker:
        started = time.monotonic()
        clients = [broker.connect() for _ in range(12)]
        for client in clients:
            assert _answers(client, 10)
        # a burst of one second's allowance (4), then 4 a second: at least 2 s for 12
        assert time.monotonic() - started >= 1.5
        for client in clients:
            client.close()


NOFILE_LIMIT = 512


def _limit_descriptors() -> None:  # in the broker's child process only
    import resource
    resource.setrlimit(resource.RLIMIT_NOFILE, (NOFILE_LIMIT, NOFILE_LIMIT))


def test_descriptor_exhaustion_pauses_accepting_with_one_warning(tmp_path: Path) -> None:
    """At the descriptor limit the broker stops accepting with one warning (asyncio's
    accept loop logged a traceback per failed accept, thousands a second), keeps serving
    its connections, and accepts again once connections close."""
    broker = KlogBroker(tmp_path / "data")
    log_file = tmp_path / "broker.log"
    with open(log_file, "wb") as log:
        process = subprocess.Popen(broker.command(), stdout=log, stderr=log,
                                   stdin=subprocess.DEVNULL, preexec_fn=_limit_descriptors)
    flood: list[socket.socket] = []
    try:
        assert _wait_until(lambda: _connectable("127.0.0.1", broker.port), timeout=30), \
            log_file.read_text()
        witness = WireClient(("127.0.0.1", broker.port))
        assert _answers(witness, 10)
        # Twice the broker's descriptors in connections, over a bounded while.
        deadline = time.monotonic() + 3
        while len(flood) < 2 * NOFILE_LIMIT and time.monotonic() < deadline:
            sock = socket.socket()
            sock.setblocking(False)
            sock.connect_ex(("127.0.0.1", broker.port))  # in progress: not waited for
            flood.append(sock)
            time.sleep(0.002)
        time.sleep(2)  # the broker keeps failing to accept meanwhile
        assert process.poll() is None
        assert _answers(witness, 10)  # connections it has keep being served
        for sock in flood:
            sock.close()
        flood.clear()
        # accepting again: a new connection is served
        with WireClient(("127.0.0.1", broker.port), timeout=20) as late:
            assert _answers(late, 20)
        witness.close()
    finally:
        for sock in flood:
            sock.close()
        process.terminate()
        process.wait(30)
    text = log_file.read_text(errors="replace")
    lines = text.splitlines()
    assert "Traceback" not in text, "\n".join(lines[:40])
    exhausted = [line for line in lines if "Too many open files" in line]
    assert 1 <= len(exhausted) <= 2, "\n".join(exhausted[:20])
    assert len([line for line in lines if " WARNING " in line]) <= 2, "\n".join(lines[:40])


def test_socket_settings_are_applied(tmp_path: Path) -> None:
    """socket.listen.backlog.size, socket.receive.buffer.bytes and socket.send.buffer.bytes
    are honoured, not silently accepted."""
    with running_broker(tmp_path, socket_listen_backlog_size=7,
                        socket_receive_buffer_bytes=65536,
                        socket_send_buffer_bytes=131072) as broker, broker.connect() as client:
        assert _answers(client, 10)
        listening = subprocess.run(["ss", "-ltnH", f"sport = :{broker.port}"],
                                   capture_output=True, text=True, check=True).stdout.split()
        assert listening[2] == "7"  # Send-Q of a listening socket: its backlog

        def buffers() -> list[tuple[int, int]]:
            return [(s.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF),
                     s.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF))
                    for s in (c.transport.get_extra_info("socket")
                              for c in broker.broker.server.connections)]

        assert broker.call(buffers) == [(2 * 65536, 2 * 131072)]  # Linux doubles them


def test_a_dynamic_max_connections_change_applies_to_waiting_connections(tmp_path: Path
                                                                          ) -> None:
    with running_broker(tmp_path, max_connections=1) as broker, broker.connect() as admin:
        assert _answers(admin, 10)
        with broker.connect() as waiting:
            assert not _answers(waiting, 0.5)
            response = admin.call(44, 1, {"resources": [{
                "resource_type": 4, "resource_name": "", "configs": [
                    {"name": "max.connections", "config_operation": 0, "value": "5"}]}],
                "validate_only": False})
            assert response.responses[0].error_code == 0, response
            assert waiting.recv_response(18, 3)[1].error_code == 0
