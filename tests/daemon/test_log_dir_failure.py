"""klog/daemon/log_dir_failure.py: an I/O error reported from any thread takes its log dir
offline once -- the partitions there go offline in a real replica manager (produce and
fetch answer KAFKA_STORAGE_ERROR, the other dir's partition goes on), the controller is
told in the metastore -- and the broker stops when no dir is left, or when the controller
cannot be told within log.dir.failure.timeout.ms."""

from __future__ import annotations

import asyncio
import errno
import threading
import time
from pathlib import Path

import pytest

from klog.daemon.delayed import FetchParams
from klog.daemon.log_dir_failure import LogDirFailureHandler
from klog.daemon.metadata_cache import PartitionState
from klog.daemon.metastore import paths
from klog.daemon.metastore.base import MetastoreError
from klog.daemon.metastore.local import LocalMetadataStore
from klog.daemon.partition import FetchIsolation
from klog.daemon.replica_manager import ReplicaManager
from klog.protocol.errors import ErrorCode
from klog.protocol.records.v2 import build_batch
from klog.storage.config import LogConfig
from klog.storage.log_manager import LogManager

NOW = int(time.time() * 1000)
ENOSPC = OSError(errno.ENOSPC, "No space left on device")


def _batch() -> bytearray:
    return bytearray(build_batch([(NOW, None, b"v" * 100)]))


class Halted(Exception):
    pass


def _halt(code: int) -> None:
    raise Halted(code)


def _setup(tmp_path: Path, dirs: list[Path]) -> tuple[LogManager, ReplicaManager,
                                                      LocalMetadataStore]:
    logs = LogManager(dirs).startup()
    rm = ReplicaManager(1, logs, lambda topic: LogConfig())
    store = LocalMetadataStore(tmp_path / "meta")
    store.start()
    return logs, rm, store


def test_a_failed_dir_takes_its_partitions_offline_and_tells_the_controller(
        tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    logs, rm, store = _setup(tmp_path, [a, b])

    async def go() -> None:
        handler = LogDirFailureHandler(1, logs, rm, store, halt=_halt)
        rm.on_io_error = handler.report
        logs.failure_listener = handler.report
        handler.startup()
        rm.become_leader_or_follower([PartitionState("t", 0, 1, 0, (1,), (1,)),
                                      PartitionState("t", 1, 1, 0, (1,), (1,))])
        assert logs.log_dir_of("t", 0) == a and logs.log_dir_of("t", 1) == b
        rm.append_records({("t", 1): _batch()}, 1)
        plog = rm.partitions[("t", 1)].log

        def full(*_a: object, **_k: object) -> object:
            raise ENOSPC

        plog.append_as_leader = full  # type: ignore[method-assign]
        # The append's I/O error is answered and reported (from a thread too: twice).
        result = rm.append_records({("t", 1): _batch()}, 1)[("t", 1)]
        assert result.error_code == ErrorCode.KAFKA_STORAGE_ERROR
        threading.Thread(target=handler.report, args=(b / "t-1", ENOSPC)).start()
        for _ in range(500):
            if handler.handled:
                break
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.05)
        assert handler.handled == [b] and logs.offline_dirs == {b}
        # t-1 is offline: KAFKA_STORAGE_ERROR for produce and fetch; t-0 goes on.
        assert rm.append_records({("t", 1): _batch()}, 1)[("t", 1)].error_code == \
            ErrorCode.KAFKA_STORAGE_ERROR
        fetch = FetchParams(-1, 0, 1, 1 << 20, FetchIsolation.HIGH_WATERMARK)
        (r,) = await rm.fetch_messages(fetch, [("t", 1, 0, 1 << 20, -1)])
        assert r.error_code == ErrorCode.KAFKA_STORAGE_ERROR
        assert rm.append_records({("t", 0): _batch()}, 1)[("t", 0)].error_code == 0
        # LeaderAndIsr for it: KAFKA_STORAGE_ERROR (how the controller learns), no new log.
        errors = rm.become_leader_or_follower([PartitionState("t", 1, 1, 1, (1,), (1,))])
        assert errors == {("t", 1): ErrorCode.KAFKA_STORAGE_ERROR}
        assert logs.get_log("t", 1) is None
        # The controller's notification, in Kafka's format.
        (name,) = store.get_children(paths.LOG_DIR_EVENT_NOTIFICATION)
        data, _ = store.get(f"{paths.LOG_DIR_EVENT_NOTIFICATION}/{name}")
        assert paths.LogDirEventNotification.decode(data).broker_id == 1
        # The gauges Kafka has for it: one offline dir, one offline replica.
        from klog.daemon.metrics.collectors import LogCollector
        from klog.daemon.replica_metrics import ReplicaManagerCollector

        figures = {m.name: m.samples[0].value for c in (LogCollector(logs),
                                                       ReplicaManagerCollector(rm))
                   for m in c.collect() if m.samples and not m.samples[0].labels}
        assert figures["kafka_log_logmanager_offlinelogdirectorycount"] == 1
        assert figures["kafka_server_replicamanager_offlinereplicacount"] == 1
        # Another error in that dir is not handled again.
        handler.report(b, ENOSPC)
        await asyncio.sleep(0.05)
        assert handler.handled == [b]
        await handler.shutdown()

    try:
        asyncio.run(go())
    finally:
        rm.shutdown()
        logs.close()
        store.close()


def test_the_last_dir_failing_stops_the_broker(tmp_path: Path) -> None:
    logs, rm, store = _setup(tmp_path, [tmp_path / "a"])

    async def go() -> None:
        handler = LogDirFailureHandler(1, logs, rm, store, halt=_halt)
        with pytest.raises(Halted):
            await handler.handle(tmp_path / "a")

    try:
        asyncio.run(go())
    finally:
        rm.shutdown()
        logs.close()
        store.close()


def test_a_controller_that_cannot_be_told_stops_the_broker(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    logs, rm, store = _setup(tmp_path, [a, b])

    class Unreachable:
        def create(self, *args: object, **kwargs: object) -> str:
            raise MetastoreError("connection loss")

    async def go() -> None:
        handler = LogDirFailureHandler(1, logs, rm, Unreachable(),  # type: ignore[arg-type]
                                       timeout_ms=300, halt=_halt)
        started = time.monotonic()
        with pytest.raises(Halted):
            await handler.handle(b)
        assert time.monotonic() - started >= 0.3  # retried until log.dir.failure.timeout.ms

    try:
        asyncio.run(go())
    finally:
        rm.shutdown()
        logs.close()
        store.close()
