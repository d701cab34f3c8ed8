"""An in-process Broker: start-up, the standalone controller, topics, the data path."""

from __future__ import annotations

import asyncio
import socket
import struct
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from klog.daemon.admin import TopicSpec
from klog.daemon.broker import METASTORE_DIR, Broker
from klog.daemon.config import BrokerConfig
from klog.daemon.metastore import paths
from klog.protocol.errors import ErrorCode
from klog.protocol.records.batch import CompressionType, iter_batch_headers
from klog.protocol.records.v2 import build_batch, iter_records


def _config(log_dir: Path, **extra: str) -> BrokerConfig:
    props = {"listeners": "PLAINTEXT://127.0.0.1:0", "log.dirs": str(log_dir), **extra}
    return BrokerConfig.from_dict(props)


@asynccontextmanager
async def running(log_dir: Path, **extra: str) -> AsyncIterator[Broker]:
    broker = Broker(_config(log_dir, **extra))
    await broker.start()
    try:
        yield broker
    finally:
        await broker.shutdown()


def run(coro_fn: Callable[[], object]) -> None:
    asyncio.run(asyncio.wait_for(coro_fn(), 60))  # type: ignore[arg-type]


def _batch(*values: bytes, ts: int | None = None, **kwargs: object) -> bytearray:
    now = int(time.time() * 1000) if ts is None else ts
    return bytearray(build_batch([(now, None, v) for v in values], **kwargs))


def test_start_registers_the_broker_and_becomes_controller(tmp_path: Path) -> None:
    async def go() -> None:
        async with running(tmp_path) as broker:
            store = broker.metastore
            assert store is not None
            assert store.exists(paths.broker_path(0)) is not None
            assert broker.controller is not None and broker.controller.active
            assert broker.metadata_cache.controller_id == 0
            assert broker.controller.epoch == 1
            cluster_id = broker.metadata_cache.cluster_id
        assert (tmp_path / ".kafka_cleanshutdown").exists()
        assert (tmp_path / METASTORE_DIR).is_dir()
        async with running(tmp_path) as broker:
            assert broker.controller is not None and broker.controller.epoch == 2
            assert broker.metadata_cache.cluster_id == cluster_id
            assert (tmp_path / "meta.properties").read_text().count(cluster_id) == 1

    run(go)


def test_the_broker_listens_before_it_registers_and_serves_once_started(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Kafka's order (its SocketServer binds and listens before the broker registers): the
    # moment ZooKeeper names the broker, the controller can connect, and what it sends
    # waits until the broker serves. klog registered first and listened only at the end,
    # so the controller's first UpdateMetadata to a new broker met a refused connect.
    register = Broker._register_broker
    early: dict[str, socket.socket] = {}

    def connect_then_register(broker: Broker) -> None:  # in start-up's worker thread
        port = broker.server.bound["PLAINTEXT"][1]
        sock = socket.create_connection(("127.0.0.1", port), timeout=5)
        sock.sendall(struct.pack(">ihhih", 10, 18, 0, 7, -1))  # ApiVersions v0, cid 7
        early["sock"] = sock
        assert broker.metastore.exists(paths.broker_path(broker.broker_id)) is None
        register(broker)

    monkeypatch.setattr(Broker, "_register_broker", connect_then_register)

    def answer(sock: socket.socket) -> tuple[int, int]:
        size, correlation_id = struct.unpack(">ii", sock.recv(8, socket.MSG_WAITALL))
        return size, correlation_id

    async def go() -> None:
        broker = Broker(_config(tmp_path))
        starting = asyncio.get_running_loop().create_task(broker.start())
        while "sock" not in early and not starting.done():
            await asyncio.sleep(0.01)
        if "sock" not in early:
            failure = starting.exception()
            await broker.shutdown()
            pytest.fail(f"no connection before the broker registers: {failure!r}")
        sock = early["sock"]
        try:
            sock.setblocking(False)
            if not starting.done():  # not served before start-up ends
                with pytest.raises(BlockingIOError):
                    sock.recv(1)
            await starting
            assert broker.metastore.exists(paths.broker_path(0)) is not None
            sock.settimeout(10)
            size, correlation_id = await asyncio.to_thread(answer, sock)
            assert correlation_id == 7 and size > 4  # answered once the broker serves
        finally:
            sock.close()
            await broker.shutdown()

    run(go)


def test_create_topic_elects_leaders_and_writes_state(tmp_path: Path) -> None:
    async def go() -> None:
        async with running(tmp_path) as broker:
            results = await broker.admin.create_topics(
                [TopicSpec("orders", 3, 1, configs={"retention.ms": "60000"})])
            assert results["orders"].error_code == 0
            parts = broker.metadata_cache.partitions("orders")
            assert sorted(parts) == [0, 1, 2]
            assert all(s.leader == 0 and s.isr == (0,) and s.leader_epoch == 0
                       for s in parts.values())
            store = broker.metastore
            assert store is not None
            data, _ = store.get(paths.partition_state_path("orders", 1))
            state = paths.LeaderIsrAndControllerEpoch.decode(data)
            assert (state.leader, state.isr, state.leader_epoch) == (0, (0,), 0)
            assert (tmp_path / "orders-2").is_dir()
            log = broker.replica_manager.get_partition("orders", 0).log  # type: ignore
            assert log.config.retention_ms == 60000
            again = await broker.admin.create_topics([TopicSpec("orders", 1, 1)])
            assert again["orders"].error_code == ErrorCode.TOPIC_ALREADY_EXISTS
            bad = await broker.admin.create_topics([TopicSpec("a/b", 1, 1),
                                                    TopicSpec("rf", 1, 2)])
            assert bad["a/b"].error_code == ErrorCode.INVALID_TOPIC_EXCEPTION
            assert bad["rf"].error_code == ErrorCode.INVALID_REPLICATION_FACTOR
        async with running(tmp_path) as broker:
            # after a restart: same leaders, same epochs, and the logs are served again
            parts = broker.metadata_cache.partitions("orders")
            assert sorted(parts) == [0, 1, 2]
            assert all(s.leader == 0 and s.leader_epoch == 0 for s in parts.values())
            assert broker.replica_manager.get_partition("orders", 2).is_leader  # type: ignore

    run(go)


def test_partitions_in_the_log_dir_are_adopted(tmp_path: Path) -> None:
    async def go() -> None:
        async with running(tmp_path) as broker:
            await broker.admin.create_topics([TopicSpec("kept", 2, 1)])
            rm = broker.replica_manager
            assert rm is not None
            assert rm.append_records({("kept", 1): _batch(b"a", b"b")}, 1)[("kept", 1)] \
                .error_code == 0
        # the metastore is lost: the log dir alone must bring the topic back
        import shutil

        shutil.rmtree(tmp_path / METASTORE_DIR)
        async with running(tmp_path) as broker:
            parts = broker.metadata_cache.partitions("kept")
            assert sorted(parts) == [0, 1]
            p1 = broker.replica_manager.get_partition("kept", 1)  # type: ignore[union-attr]
            assert p1 is not None and p1.log_end_offset == 2 and p1.high_watermark == 2

    run(go)


def test_append_read_and_high_watermark(tmp_path: Path) -> None:
    async def go() -> None:
        async with running(tmp_path) as broker:
            await broker.admin.create_topics([TopicSpec("t", 1, 1)])
            rm = broker.replica_manager
            assert rm is not None
            r = rm.append_records({("t", 0): _batch(b"x", b"y", b"z")}, 1)[("t", 0)]
            assert (r.error_code, r.base_offset) == (0, 0)
            r = rm.append_records({("t", 0): _batch(b"w")}, -1)[("t", 0)]
            assert (r.error_code, r.base_offset) == (0, 3)
            got = rm.read("t", 0, 0, 1 << 20, isolation_committed=False, from_follower=False,
                          min_one_message=True)
            assert (got.error_code, got.high_watermark, got.log_start_offset) == (0, 4, 0)
            assert got.data is not None
            raw = got.data.read_bytes()
            values = [rec.value for h in iter_batch_headers(raw) for rec in iter_records(raw, h)]
            assert values == [b"x", b"y", b"z", b"w"]
            out = rm.read("t", 0, 5, 100, isolation_committed=False, from_follower=False,
                          min_one_message=True)
            assert out.error_code == ErrorCode.OFFSET_OUT_OF_RANGE
            missing = rm.append_records({("nope", 0): _batch(b"x")}, 1)[("nope", 0)]
            assert missing.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION

    run(go)


def test_broker_side_recompression_and_timestamp_checks(tmp_path: Path) -> None:
    async def go() -> None:
        async with running(tmp_path) as broker:
            await broker.admin.create_topics([
                TopicSpec("gz", 1, 1, configs={"compression.type": "gzip"}),
                TopicSpec("strict", 1, 1,
                          configs={"message.timestamp.difference.max.ms": "60000"}),
            ])
            rm = broker.replica_manager
            assert rm is not None
            sent = _batch(b"one", b"two", compression=CompressionType.LZ4,
                          producer_id=7, producer_epoch=0, base_sequence=0)
            assert rm.append_records({("gz", 0): sent}, 1)[("gz", 0)].error_code == 0
            got = rm.read("gz", 0, 0, 1 << 20, isolation_committed=False,
                          from_follower=False, min_one_message=True)
            assert got.data is not None
            raw = got.data.read_bytes()
            (header,) = list(iter_batch_headers(raw))
            assert header.compression is CompressionType.GZIP
            assert (header.producer_id, header.base_sequence) == (7, 0)
            assert [r.value for r in iter_records(raw, header)] == [b"one", b"two"]
            old = _batch(b"late", ts=int(time.time() * 1000) - 3_600_000)
            r = rm.append_records({("strict", 0): old}, 1)[("strict", 0)]
            assert r.error_code == ErrorCode.INVALID_TIMESTAMP
            assert rm.get_partition("strict", 0).log_end_offset == 0  # type: ignore

    run(go)


def test_deleting_a_topic_through_the_metastore(tmp_path: Path) -> None:
    async def go() -> None:
        async with running(tmp_path) as broker:
            await broker.admin.create_topics([TopicSpec("gone", 2, 1)])
            store = broker.metastore
            assert store is not None
            store.create(paths.delete_topic_path("gone"), b"", make_parents=True)
            deadline = time.monotonic() + 10
            while broker.metadata_cache.contains_topic("gone") and time.monotonic() < deadline:
                await asyncio.sleep(0.02)
            assert not broker.metadata_cache.contains_topic("gone")
            while store.exists(paths.delete_topic_path("gone")) and \
                    time.monotonic() < deadline:
                await asyncio.sleep(0.02)
            assert store.exists(paths.topic_path("gone")) is None
            assert store.exists(paths.delete_topic_path("gone")) is None
            assert not (tmp_path / "gone-0").exists()
            assert broker.replica_manager.get_partition("gone", 0) is None  # type: ignore

    run(go)


@pytest.mark.parametrize("name", ["", ".", "..", "x" * 250, "bad name", "ünïcode"])
def test_invalid_topic_names(tmp_path: Path, name: str) -> None:
    from klog.daemon.admin import AdminError, validate_topic_name

    with pytest.raises(AdminError) as info:
        validate_topic_name(name)
    assert info.value.error_code == ErrorCode.INVALID_TOPIC_EXCEPTION


def test_purgatories_take_their_purge_intervals_from_the_config(tmp_path: Path) -> None:
    async def go() -> None:
        async with running(tmp_path, **{"fetch.purgatory.purge.interval.requests": "7",
                                        "producer.purgatory.purge.interval.requests": "11"}
                           ) as broker:
            rm = broker.replica_manager
            assert rm is not None
            assert rm.fetch_purgatory.purge_interval == 7
            assert rm.produce_purgatory.purge_interval == 11

    run(go)
