"""Test helpers for the network layer: an in-process broker and a raw-socket Kafka client.

``InProcessBroker`` runs a real ``Broker`` on its own asyncio loop in a background thread,
listening on a free port of 127.0.0.1, so a test can talk to it over real sockets and
still look at its insides (``call`` runs a function on the broker's loop). ``WireClient``
speaks the protocol by hand over a blocking socket: it can pipeline, send garbage, and
read answers frame by frame. The raw-socket helpers below say how the broker ended a
connection (``closed_without_answer``, ``drain_until_closed``) and end one abruptly
(``reset_on_close``).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import struct
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, TypeVar

from klog.daemon.broker import Broker
from klog.daemon.config import BrokerConfig
from klog.protocol import apis, framing
from klog.protocol.entities import build
from klog.protocol.records.v2 import build_batch

T = TypeVar("T")

_SIZE = struct.Struct(">i")


class InProcessBroker:
    """A Broker on an asyncio loop in a daemon thread (see the module docstring)."""

    def __init__(self, data_dir: Path, overrides: Mapping[str, Any] | None = None) -> None:
        settings = {
            "listeners": "PLAINTEXT://127.0.0.1:0",
            "log.dirs": str(data_dir / "logs"),
            "num.partitions": "1",
        }
        settings.update({k: str(v) for k, v in (overrides or {}).items()})
        self.config = BrokerConfig.from_dict(settings)
        self.broker = Broker(self.config)
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, name="klog-broker", daemon=True)
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self.port = 0

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)

        async def main() -> None:
            try:
                await self.broker.start()
            except BaseException as exc:
                self._error = exc
                self._ready.set()
                await self.broker.shutdown()
                return
            self._ready.set()
            await self.broker.serve_forever(install_signals=False)

        try:
            self.loop.run_until_complete(main())
        finally:
            self.loop.close()

    def start(self, timeout: float = 10.0) -> InProcessBroker:
        self._thread.start()
        if not self._ready.wait(timeout):
            raise TimeoutError("in-process broker did not start")
        if self._error is not None:
            self._thread.join(timeout)
            raise self._error
        self.port = self.broker.bound_port
        return self

    def stop(self, timeout: float = 10.0) -> None:
        if self._thread.is_alive():
            with contextlib.suppress(RuntimeError):  # loop already closed
                self.loop.call_soon_threadsafe(self.broker.request_shutdown)
            self._thread.join(timeout)
        assert not self._thread.is_alive(), "broker thread did not stop"

    @property
    def alive(self) -> bool:
        return self._thread.is_alive() and not self.broker._stopped.is_set()

    def call(self, fn: Callable[[], T], timeout: float = 10.0) -> T:
        """Run ``fn()`` on the broker's loop and return its result (to inspect state)."""
        async def run() -> T:
            return fn()

        return asyncio.run_coroutine_threadsafe(run(), self.loop).result(timeout)

    def connect(self, timeout: float = 10.0) -> WireClient:
        return WireClient(("127.0.0.1", self.port), timeout)

    def log_end_offset(self, topic: str, partition: int = 0) -> int:
        def leo() -> int:
            p = self.broker.replica_manager.get_partition(topic, partition)
            return -1 if p is None else p.log_end_offset
        return self.call(leo)


@contextlib.contextmanager
def running_broker(data_dir: Path, **overrides: Any) -> Iterator[InProcessBroker]:
    """An InProcessBroker for a ``with`` block; keyword names use _ for . in config keys."""
    broker = InProcessBroker(data_dir, {k.replace("_", "."): v for k, v in overrides.items()})
    broker.start()
    try:
        yield broker
    finally:
        broker.stop()


class WireClient:
    """A blocking raw-socket client: frames out, frames in, nothing hidden."""

    def __init__(self, address: tuple[str, int], timeout: float = 10.0) -> None:
        self.sock = socket.create_connection(address, timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._correlation = 0
        self._buffer = bytearray()

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> WireClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def next_correlation_id(self) -> int:
        self._correlation += 1
        return self._correlation

    # -- raw bytes ---------------------------------------------------------------------

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def request_frame(self, api_key: int, version: int, values: Mapping[str, Any] | Any,
                      correlation_id: int | None = None, client_id: str | None = "wire"
                      ) -> tuple[int, bytes]:
        """(correlation id, frame bytes) of a request built from plain values."""
        entity = values
        if isinstance(values, Mapping):
            entity = build(apis.spec_for(api_key).request_entity(version), values)
        body = apis.encode_request(entity)
        cid = self.next_correlation_id() if correlation_id is None else correlation_id
        return cid, framing.encode_request(api_key, version, cid, client_id, body)

    def send(self, api_key: int, version: int, values: Mapping[str, Any] | Any,
             correlation_id: int | None = None) -> int:
        cid, frame = self.request_frame(api_key, version, values, correlation_id)
        self.sock.sendall(frame)
        return cid

    def recv_frame(self) -> bytes:
        """The next response frame's payload (header + body); ConnectionError at EOF."""
        size_bytes = self._recv_exactly(4)
        (size,) = _SIZE.unpack(size_bytes)
        return self._recv_exactly(size)

    def _recv_exactly(self, n: int) -> bytes:
        while len(self._buffer) < n:
            chunk = self.sock.recv(max(65536, n - len(self._buffer)))
            if not chunk:
                raise ConnectionError("connection closed by the broker")
            self._buffer += chunk
        out = bytes(self._buffer[:n])
        del self._buffer[:n]
        return out

    def recv_response(self, api_key: int, version: int) -> tuple[int, Any]:
        """(correlation id, decoded response entity) of the next response frame."""
        frame = self.recv_frame()
        header_version = apis.response_header_version(api_key, version)
        cid, offset = framing.parse_response_header(frame, header_version)
        return cid, apis.decode_response(api_key, version, memoryview(frame)[offset:])

    def call(self, api_key: int, version: int, values: Mapping[str, Any] | Any) -> Any:
        cid = self.send(api_key, version, values)
        got, response = self.recv_response(api_key, version)
        assert got == cid, f"correlation id {got}, expected {cid}"
        return response

    def is_closed_by_peer(self, timeout: float = 5.0) -> bool:
        """True if the broker closes the connection within ``timeout`` (reads and drops
        anything it still sends)."""
        deadline = time.monotonic() + timeout
        self.sock.settimeout(0.1)
        try:
            while time.monotonic() < deadline:
                try:
                    chunk = self.sock.recv(65536)
                except TimeoutError:
                    continue
                except ConnectionResetError:
                    return True
                if not chunk:
                    return True
            return False
        finally:
            self.sock.settimeout(10.0)

    # -- common requests ---------------------------------------------------------------

    def metadata(self, topics: list[str] | None, version: int = 12,
                 auto_create: bool = True) -> Any:
        values: dict[str, Any] = {
            "topics": None if topics is None else [
                {"name": t, "topic_id": None} for t in topics],
            "allow_auto_topic_creation": auto_create,
            "include_cluster_authorized_operations": False,
            "include_topic_authorized_operations": False,
        }
        return self.call(3, version, values)

    def create_topic(self, topic: str, timeout: float = 10.0) -> None:
        """Auto-create ``topic`` through Metadata and wait until it has a leader."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            response = self.metadata([topic])
            t = response.topics[0]
            if t.error_code == 0 and t.partitions and all(p.leader_id >= 0
                                                          for p in t.partitions):
                return
            time.sleep(0.02)
        raise TimeoutError(f"topic {topic} got no leader")

    def produce(self, topic: str, partition: int, records: bytes | None, acks: int = 1,
                version: int = 9) -> Any:
        return self.call(0, version, produce_values(topic, partition, records, acks))

    def fetch(self, topic: str, partition: int, offset: int, max_bytes: int = 1 << 20,
              version: int = 12, max_wait_ms: int = 0) -> Any:
        return self.call(1, version, fetch_values(topic, partition, offset, max_bytes,
                                                  max_wait_ms))


# -- how a connection ends ---------------------------------------------------------------


def reset_on_close(sock: socket.socket) -> None:
    """Make ``sock.close()`` reset the connection (SO_LINGER 0: a TCP RST, nothing left to
    flush), as a client that crashed or gave up would."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))


def closed_without_answer(sock: socket.socket, timeout: float = 5.0) -> bool:
    """The broker closed the connection and sent nothing first."""
    sock.settimeout(timeout)
    try:
        data = sock.recv(65536)
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False
    return data == b""


def drain_until_closed(sock: socket.socket, deadline: float) -> int | None:
    """Read what the broker sends until it closes the connection: the bytes read, or
    None if it had not closed by ``deadline`` (a ``time.monotonic()`` value)."""
    total = 0
    while True:
        sock.settimeout(max(0.01, deadline - time.monotonic()))
        try:
            chunk = sock.recv(1 << 16)
        except ConnectionResetError:
            return total
        except TimeoutError:
            return None
        if not chunk:
            return total
        total += len(chunk)


# -- common request values ----------------------------------------------------------------


def produce_values(topic: str, partition: int, records: bytes | None, acks: int = 1) -> dict:
    return {
        "transactional_id": None, "acks": acks, "timeout": 5000,
        "topic_data": [{"name": topic, "partition_data": [
            {"index": partition, "records": records}]}],
    }


def fetch_values(topic: str, partition: int, offset: int, max_bytes: int = 1 << 20,
                 max_wait_ms: int = 0) -> dict:
    return {
        "replica_id": -1, "max_wait": max_wait_ms, "min_bytes": 1, "max_bytes": max_bytes,
        "isolation_level": 0, "session_id": 0, "session_epoch": -1,
        "topics": [{"topic": topic, "partitions": [{
            "partition": partition, "current_leader_epoch": -1, "fetch_offset": offset,
            "last_fetched_epoch": -1, "log_start_offset": -1,
            "partition_max_bytes": max_bytes}]}],
        "forgotten_topics_data": [], "rack_id": "",
    }


def batch(n: int = 1, value: bytes = b"v", key: bytes | None = None) -> bytes:
    """One valid v2 batch of ``n`` records, timestamped now."""
    now = int(time.time() * 1000)
    return build_batch([(now, key, value) for _ in range(n)])


def rss_bytes(pid: int | str = "self") -> int:
    """Resident set size of a process (default: this one, where an InProcessBroker runs)."""
    with open(f"/proc/{pid}/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def proc_status_bytes(pid: int, field: str) -> int:
    """A size field of /proc/<pid>/status in bytes: "VmRSS" (resident now), "VmHWM" (the
    peak resident set)."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise AssertionError(f"no {field} for {pid}")
