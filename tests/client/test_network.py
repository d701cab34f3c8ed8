"""klog.client.network against a real klog broker, and against fake brokers for the
failure paths (silence, ApiVersions refusal)."""

from __future__ import annotations

import asyncio
import struct
import time
from collections.abc import Iterator
from typing import Any

import pytest

from klog.client import errors
from klog.client.network import BrokerConnection, KafkaClient, parse_bootstrap
from klog.protocol import apis, entities, framing
from klog.protocol.records.v2 import BatchBuilder
from klog.testing import KlogBroker, free_port

pytestmark = pytest.mark.timeout(60)


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KlogBroker]:
    with KlogBroker(tmp_path_factory.mktemp("net"), overrides={"num.partitions": 2}) as b:
        yield b


def run(coro: Any) -> Any:
    return asyncio.run(asyncio.wait_for(coro, 30))


def test_parse_bootstrap() -> None:
    assert parse_bootstrap("a:1, b:2") == [("a", 1), ("b", 2)]
    assert parse_bootstrap(["h"]) == [("h", 9092)]
    assert parse_bootstrap("PLAINTEXT://x:9093,[::1]:7") == [("x", 9093), ("::1", 7)]
    with pytest.raises(errors.KafkaClientError):
        parse_bootstrap("a:b")
    with pytest.raises(errors.KafkaClientError):
        parse_bootstrap(" , ")


def test_raise_for_maps_codes() -> None:
    errors.raise_for(0)
    with pytest.raises(errors.KafkaClientError) as info:
        errors.raise_for(6, "t-0")
    assert info.value.error_code == 6
    assert info.value.retriable
    assert str(info.value) == "NOT_LEADER_OR_FOLLOWER: t-0"
    with pytest.raises(errors.KafkaTimeoutError):
        errors.raise_for(7)
    with pytest.raises(errors.KafkaClientError) as info:
        errors.raise_for(36)
    assert not info.value.retriable and info.value.name == "TOPIC_ALREADY_EXISTS"
    assert errors.error_name(9999) == "UNKNOWN_ERROR_9999"


def test_start_loads_metadata_and_negotiates_versions(broker: KlogBroker) -> None:
    async def main() -> None:
        async with KafkaClient(broker.bootstrap_servers) as client:
            cluster = client.cluster
            assert list(cluster.brokers) == [0]
            assert cluster.brokers[0].port == broker.port
            assert cluster.controller_id == 0
            assert cluster.cluster_id
            # the bootstrap connection became node 0's: one connection per broker
            assert list(client._conns) == [0]
            assert client.api_version(0, 0) == apis.ADVERTISED[0][1]  # Produce
            assert client.api_version(0, 3) == min(apis.ADVERTISED[3][1], apis.KNOWN[3][1])
            assert client.api_version(0, 3, max_version=4) == 4
            # No shared version (every API klog knows is advertised now: ask for Produce
            # below the broker's lowest).
            with pytest.raises(errors.KafkaClientError) as info:
                client.api_version(0, 0, max_version=apis.ADVERTISED[0][0] - 1)
            assert info.value.error_code == 35

    run(main())


def test_metadata_for_topics_and_auto_creation(broker: KlogBroker) -> None:
    async def main() -> None:
        async with KafkaClient(broker.bootstrap_servers) as client:
            await client.refresh_metadata(["net-missing"])
            assert client.cluster.topic_errors["net-missing"] == 3
            assert client.cluster.partitions_for("net-missing") is None
            with pytest.raises(errors.KafkaClientError) as info:
                await client.leader_for("net-missing", 0)
            assert info.value.error_code == 3
            await client.refresh_metadata(["net-auto"], allow_auto_topic_creation=True)
            deadline = time.monotonic() + 10
            while client.cluster.leader_for("net-auto", 1) is None:
                assert time.monotonic() < deadline
                await asyncio.sleep(0.05)
                await client.refresh_metadata(["net-auto"])
            assert client.cluster.partitions_for("net-auto") == [0, 1]
            assert await client.leader_for("net-auto", 0) == 0
            meta = client.cluster.topics["net-auto"][0]
            assert meta.replicas == (0,) and meta.isr == (0,) and meta.error_code == 0
            await client.refresh_metadata()  # all topics: the missing one is forgotten
            assert "net-missing" not in client.cluster.topic_errors
            assert "net-auto" in client.cluster.topics

    run(main())


def test_pipelined_requests_respect_in_flight_limit(broker: KlogBroker) -> None:
    async def main() -> None:
        async with KafkaClient(broker.bootstrap_servers,
                               max_in_flight_requests_per_connection=3) as client:
            conn = client.connection(0)
            assert conn is not None
            peak = 0
            done = False

            async def sample() -> None:
                nonlocal peak
                while not done:
                    peak = max(peak, conn.in_flight)
                    await asyncio.sleep(0)

            sampler = asyncio.ensure_future(sample())
            responses = await asyncio.gather(
                *(client.send(0, 3, {"topics": None}) for _ in range(40)))
            done = True
            await sampler
            assert [len(r.brokers) for r in responses] == [1] * 40
            assert peak == 3  # pipelined, never beyond the limit
            assert conn.in_flight == 0
            assert client.connection(0) is conn  # never reconnected

    run(main())


def test_send_any_node_and_acks_zero_produce(broker: KlogBroker) -> None:
    async def main() -> None:
        async with KafkaClient(broker.bootstrap_servers) as client:
            await client.refresh_metadata(["net-acks0"], allow_auto_topic_creation=True)
            leader = None
            for _ in range(100):
                await client.refresh_metadata(["net-acks0"])
                leader = client.cluster.leader_for("net-acks0", 0)
                if leader is not None:
                    break
                await asyncio.sleep(0.05)
            assert leader == 0
            builder = BatchBuilder()
            builder.append(int(time.time() * 1000), b"k", b"v")
            produce = {"acks": 0, "timeout": 1000, "transactional_id": None, "topic_data": [
                {"name": "net-acks0", "partition_data": [
                    {"index": 0, "records": builder.build()}]}]}
            assert await client.send(0, 0, produce, expect_response=False) is None
            # the stream stays in step: the next request gets its own answer
            latest = {"replica_id": -1, "isolation_level": 0, "topics": [
                {"name": "net-acks0", "partitions": [{"partition_index": 0, "timestamp": -1}]}]}
            response = await client.send(None, 2, latest)
            partition = response.topics[0].partitions[0]
            assert int(partition.error_code) == 0
            deadline = time.monotonic() + 5
            while partition.offset != 1 and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
                response = await client.send(None, 2, latest)
                partition = response.topics[0].partitions[0]
            assert partition.offset == 1

    run(main())


def test_no_brokers_available() -> None:
    port = free_port()

    async def main() -> None:
        client = KafkaClient(f"127.0.0.1:{port}", request_timeout_ms=2000)
        with pytest.raises(errors.NoBrokersAvailable) as info:
            await client.start()
        assert f"127.0.0.1:{port}" in str(info.value)
        await client.close()

    run(main())


def test_reconnects_after_broker_restart(tmp_path_factory: pytest.TempPathFactory) -> None:
    with KlogBroker(tmp_path_factory.mktemp("restart")) as b:
        async def main() -> None:
            async with KafkaClient(b.bootstrap_servers, reconnect_backoff_ms=10,
                                   reconnect_backoff_max_ms=100) as client:
                first = client.connection(0)
                await asyncio.to_thread(b.restart)
                await asyncio.sleep(0.1)  # the read loop sees the old socket's end
                assert first is not None and first.closed
                assert client.connection(0) is None
                response = await client.send(0, 3, {"topics": None})
                assert len(response.brokers) == 1
                assert client.connection(0) is not first

        run(main())


# --- fake brokers -------------------------------------------------------------------------


async def _serve(handler: Any) -> tuple[asyncio.AbstractServer, int]:
    server = await asyncio.start_server(handler, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1]


async def _read_request(reader: asyncio.StreamReader) -> framing.RequestHeader:
    (size,) = struct.unpack(">i", await reader.readexactly(4))
    frame = await reader.readexactly(size)
    header, _ = framing.parse_request_header(frame, advertised=apis.KNOWN)
    return header


def test_silent_broker_times_out_and_closes() -> None:
    async def main() -> None:
        async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await reader.read()  # never answers
            writer.close()

        server, port = await _serve(silent)
        async with server:
            conn = BrokerConnection(-1, "127.0.0.1", port)
            started = time.monotonic()
            with pytest.raises(errors.KafkaTimeoutError) as info:
                await conn.connect(timeout=0.3)
            assert time.monotonic() - started < 2
            assert info.value.error_code == 7
            assert conn.closed
            client = KafkaClient(f"127.0.0.1:{port}", request_timeout_ms=300)
            with pytest.raises(errors.NoBrokersAvailable):
                await client.start()
            await client.close()

    run(main())


def test_api_versions_falls_back_when_refused() -> None:
    seen: list[int] = []

    async def main() -> None:
        async def old_broker(reader: asyncio.StreamReader, writer: asyncio.StreamWriter
                             ) -> None:
            # Speaks ApiVersions v0-v2 only, like a Kafka 2.3 broker.
            while True:
                try:
                    header = await _read_request(reader)
                except asyncio.IncompleteReadError:
                    break
                seen.append(header.api_version)
                if header.api_version > 2:
                    writer.write(framing.api_versions_fallback_response(
                        header.correlation_id, {18: (0, 2)}))
                else:
                    response = entities.build(apis.spec_for(18).response_entity(2), {
                        "error_code": 0, "throttle_time": 0, "api_keys": [
                            {"api_key": 18, "min_version": 0, "max_version": 2},
                            {"api_key": 3, "min_version": 0, "max_version": 7}]})
                    writer.write(framing.encode_response(
                        0, header.correlation_id, apis.encode_response(response)))
                await writer.drain()
            writer.close()

        server, port = await _serve(old_broker)
        async with server:
            conn = BrokerConnection(-1, "127.0.0.1", port)
            await conn.connect(timeout=5)
            assert conn.api_versions == {18: (0, 2), 3: (0, 7)}
            conn.close()

    run(main())
    assert seen == [apis.KNOWN[18][1], 2]


def test_metadata_refreshed_by_age_and_idle_connections_closed(broker: KlogBroker) -> None:
    async def main() -> None:
        async with KafkaClient(broker.bootstrap_servers, metadata_max_age_ms=200,
                               connections_max_idle_ms=60_000) as client, \
                KafkaClient(broker.bootstrap_servers) as other:
            assert "net-aged" not in client.cluster.topics
            await other.refresh_metadata(["net-aged"], allow_auto_topic_creation=True)
            deadline = time.monotonic() + 10
            while client.cluster.leader_for("net-aged", 0) is None:  # nobody asks: age does
                assert time.monotonic() < deadline
                await asyncio.sleep(0.05)
        async with KafkaClient(broker.bootstrap_servers,
                               connections_max_idle_ms=100) as idle:
            conn = idle.connection(0)
            assert conn is not None
            deadline = time.monotonic() + 10
            while not conn.closed:
                assert time.monotonic() < deadline
                await asyncio.sleep(0.05)
            # the next request reconnects on its own
            assert len((await idle.send(None, 3, {"topics": []})).brokers) == 1

    run(main())
