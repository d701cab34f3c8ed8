"""The latency benchmark's native floor server answers a real producer as a broker would:
every record acknowledged once, at consecutive offsets, and its batches in the file."""

from __future__ import annotations

import socket
import struct
from pathlib import Path

import pytest

from benchmarks.floor import FloorServer

confluent_kafka = pytest.importorskip("confluent_kafka")


def _batches(data: bytes) -> tuple[int, int]:
    """(batches, records) of a file of v2 record batches, walked by their lengths."""
    pos = batches = records = 0
    while pos < len(data):
        batch_length = struct.unpack_from(">i", data, pos + 8)[0]
        records += struct.unpack_from(">i", data, pos + 57)[0]
        pos += batch_length + 12
        batches += 1
    assert pos == len(data)
    return batches, records


def test_a_producer_gets_consecutive_offsets_and_the_batches_land_in_the_file(
        tmp_path: Path) -> None:
    with FloorServer(tmp_path) as floor:
        offsets: list[int] = []
        errors: list[str] = []

        def delivered(err: object, msg: object) -> None:
            if err is not None:
                errors.append(str(err))
            else:
                offsets.append(msg.offset())  # type: ignore[attr-defined]

        producer = confluent_kafka.Producer({"bootstrap.servers": floor.bootstrap_servers,
                                             "acks": 1, "linger.ms": 0})
        for _ in range(2_000):
            producer.produce("latency", b"v" * 1024, partition=0, on_delivery=delivered)
        assert producer.flush(30) == 0
        del producer
        assert errors == []
        assert sorted(offsets) == list(range(2_000))
        batches, records = _batches(floor.data_file.read_bytes())
        assert records == 2_000 and batches >= 1


def test_garbage_closes_that_connection_only(tmp_path: Path) -> None:
    with FloorServer(tmp_path) as floor:
        for junk in (struct.pack(">i", 0x7FFFFFFF) + b"abc", struct.pack(">i", -5),
                     struct.pack(">i", 8) + struct.pack(">hhi", 1, 4, 7)):  # Fetch: not served
            with socket.create_connection(("127.0.0.1", floor.port), timeout=5) as sock:
                sock.sendall(junk)
                assert sock.recv(16) == b""  # closed by the server
        assert floor.process is not None and floor.process.poll() is None
        # ApiVersions v0 still answered on a new connection
        with socket.create_connection(("127.0.0.1", floor.port), timeout=5) as sock:
            body = struct.pack(">hhih", 18, 0, 5, -1)
            sock.sendall(struct.pack(">i", len(body)) + body)
            size = struct.unpack(">i", sock.recv(4))[0]
            answer = b""
            while len(answer) < size:
                answer += sock.recv(size - len(answer))
            correlation_id, error_code = struct.unpack_from(">ih", answer)
            assert (correlation_id, error_code) == (5, 0)
