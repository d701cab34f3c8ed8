"""Tests for klog/client/frames.py: FrameReader, the frame reader of every client-side
connection (BrokerConnection, the replica fetcher's LeaderConnection)."""

from __future__ import annotations

import asyncio
import struct
from typing import Any

import pytest

from klog.client.errors import KafkaConnectionError
from klog.client.frames import RECEIVE_BUFFER_SIZE, ConnectionClosed, FrameReader
from klog.client.network import BrokerConnection
from klog.daemon.replica_fetcher import FetcherConnectionError, LeaderConnection
from klog.protocol import framing


class FakeTransport:
    def __init__(self) -> None:
        self.closed = False

    def close(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed


def reader(max_frame_bytes: int = 1 << 30) -> tuple[FrameReader, FakeTransport]:
    protocol = FrameReader(max_frame_bytes)
    transport = FakeTransport()
    protocol.connection_made(transport)  # type: ignore[arg-type]
    return protocol, transport


def receive(protocol: FrameReader, data: bytes, step: int | None = None) -> None:
    """What the event loop does: recv_into the protocol's buffer, at most ``step`` bytes
    (or as much as the buffer takes) at a time."""
    while data:
        buf = protocol.get_buffer(-1)
        n = min(len(buf), len(data), step or len(data))
        assert n > 0, "the reader offered an empty buffer"
        buf[:n] = data[:n]
        protocol.buffer_updated(n)
        data = data[n:]


def frame(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


def frames_now(protocol: FrameReader) -> list[bytes]:
    async def take() -> list[bytes]:
        out = []
        while protocol._frames:
            out.append(bytes(await protocol.next_frame()))
        return out

    return asyncio.run(take())


@pytest.mark.parametrize("step", [1, 3, 7, 1000, None])
def test_frames_cut_whatever_the_reads(step: int | None) -> None:
    payloads = [bytes([i]) * (4 + i * 37) for i in range(40)]
    payloads.append(b"x" * (RECEIVE_BUFFER_SIZE + 1234))  # bigger than the receive buffer
    payloads.append(b"tail")
    protocol, _ = reader()
    receive(protocol, b"".join(map(frame, payloads)), step)
    assert frames_now(protocol) == payloads


def test_a_big_frame_is_received_in_place_at_its_checked_size() -> None:
    protocol, _ = reader()
    size = RECEIVE_BUFFER_SIZE * 3
    receive(protocol, struct.pack(">i", size) + b"a" * 100)
    # From now on the socket reads straight into the frame's own buffer.
    target = protocol.get_buffer(-1)
    assert len(target) == size - 100
    own = target.obj
    receive(protocol, b"b" * (size - 100))
    got = frames_now(protocol)
    assert got == [b"a" * 100 + b"b" * (size - 100)]
    assert isinstance(own, bytearray) and len(own) == size


@pytest.mark.parametrize("size", [-1, 0, 3, 1001])
def test_a_bad_size_closes_before_anything_is_allocated(size: int) -> None:
    protocol, transport = reader(max_frame_bytes=1000)
    receive(protocol, frame(b"ok!!") + struct.pack(">i", size) + b"zz")
    assert transport.closed
    assert protocol._big is None

    async def read() -> Any:
        first = await protocol.next_frame()
        with pytest.raises(framing.FrameSizeError) as info:
            await protocol.next_frame()
        return first, info.value

    first, error = asyncio.run(read())
    assert bytes(first) == b"ok!!" and error.size == size


def test_end_of_stream_after_the_frames_already_received() -> None:
    protocol, _ = reader()
    receive(protocol, frame(b"one!") + frame(b"two!") + b"\x00\x00")
    protocol.connection_lost(None)

    async def read() -> list[bytes]:
        out = [bytes(await protocol.next_frame()), bytes(await protocol.next_frame())]
        with pytest.raises(ConnectionClosed):
            await protocol.next_frame()
        return out

    assert asyncio.run(read()) == [b"one!", b"two!"]


def test_a_waiting_reader_is_woken_by_a_frame_and_drain_follows_flow_control() -> None:
    async def main() -> None:
        protocol, _ = reader()
        task = asyncio.ensure_future(protocol.next_frame())
        await asyncio.sleep(0)
        assert not task.done()
        receive(protocol, frame(b"late"))
        assert bytes(await task) == b"late"

        await protocol.drain()  # not paused: at once
        protocol.pause_writing()
        drain = asyncio.ensure_future(protocol.drain())
        await asyncio.sleep(0)
        assert not drain.done()
        protocol.resume_writing()
        await drain
        protocol.pause_writing()
        drain = asyncio.ensure_future(protocol.drain())
        await asyncio.sleep(0)
        protocol.connection_lost(ConnectionResetError("reset"))
        with pytest.raises(ConnectionResetError):
            await drain

    asyncio.run(main())


async def _serve_one_answer(answer: bytes) -> tuple[asyncio.Server, int]:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read(4096)  # the request, whatever it is
        writer.write(answer)
        await writer.drain()
        await asyncio.sleep(5)
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1]


def test_broker_connection_refuses_an_oversized_response_frame() -> None:
    async def main() -> str:
        server, port = await _serve_one_answer(struct.pack(">i", 2000) + b"\x00" * 16)
        async with server:
            conn = BrokerConnection(1, "127.0.0.1", port, max_response_bytes=1000)
            with pytest.raises(KafkaConnectionError) as info:
                await conn.connect(5)
            return str(info.value)

    assert asyncio.run(main()) == "node 1 sent a response frame of 2000 bytes"


def test_leader_connection_refuses_an_implausible_response_frame() -> None:
    async def main() -> str:
        server, port = await _serve_one_answer(struct.pack(">i", 2) + b"\x00\x00")
        async with server:
            conn = LeaderConnection("127.0.0.1", port, "fetcher", 5000)
            with pytest.raises(FetcherConnectionError) as info:
                await conn.request(18, 0, {})
            return str(info.value)

    assert "invalid frame size 2" in asyncio.run(main())
