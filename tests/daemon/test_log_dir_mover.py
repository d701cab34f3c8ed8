"""klog/daemon/log_dir_mover.py: AlterReplicaLogDirs' answers (Kafka's error codes) and a
move between two log dirs of one in-process replica manager while the partition is
written, with its swap, the cleaner kept off meanwhile, the throttle, and a move resumed
after the partition is hosted again (start-up)."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from klog.daemon.log_dir_mover import LogDirMover
from klog.daemon.metadata_cache import PartitionState
from klog.daemon.replica_manager import ReplicaManager
from klog.daemon.replication_quota import ReplicationQuotaManager
from klog.protocol.errors import ErrorCode
from klog.protocol.records.v2 import build_batch
from klog.storage.config import LogConfig
from klog.storage.log_manager import LogManager

NOW = int(time.time() * 1000)


def _read_all(log: Any) -> bytes:
    """Every batch of a log (a read stops at a segment's end)."""
    out = b""
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        data = log.read(offset, 1 << 30, None, True).read_bytes()
        out += data
        offset = _next(data)
    return out


def _next(data: bytes) -> int:
    """The offset after the last batch of ``data``."""
    from klog.protocol.records.batch import iter_batch_headers

    return max(h.last_offset for h in iter_batch_headers(memoryview(data))) + 1


def _batch(i: int) -> bytearray:
    return bytearray(build_batch([(NOW, None, b"record-%06d" % i + b"x" * 500)]))


class Cleaner:
    """The log cleaner's hooks, counting pauses."""

    def __init__(self) -> None:
        self.paused: dict[tuple[str, int], int] = {}

    def abort_and_pause(self, tp: tuple[str, int]) -> None:
        self.paused[tp] = self.paused.get(tp, 0) + 1

    def resume(self, tp: tuple[str, int]) -> None:
        self.paused[tp] -= 1

    def abort(self, tp: tuple[str, int]) -> None: ...

    def try_pause(self, tp: tuple[str, int]) -> bool:
        return True

    def forget(self, tp: tuple[str, int]) -> None: ...

    def truncate_checkpoint(self, tp: tuple[str, int], log_dir: Path, offset: int) -> None: ...


async def _until(done: Callable[[], bool], what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.01)


def _run(tmp_path: Path, body: Callable[..., Awaitable[None]], quota: int = 2**63 - 1,
         hosted: bool = True) -> None:
    a, b = tmp_path / "a", tmp_path / "b"

    async def go() -> None:
        logs = LogManager([a, b]).startup()
        logs.cleaner = cleaner = Cleaner()
        rm = ReplicaManager(1, logs, lambda topic: LogConfig(segment_bytes=20_000))
        mover = LogDirMover(rm, logs, fetch_max_bytes=16_384,
                            quota=ReplicationQuotaManager("AlterLogDirs", quota))
        rm.log_dir_mover = mover
        mover.startup()
        if hosted:
            rm.become_leader_or_follower([PartitionState("t", 0, 1, 0, (1,), (1,))])
        try:
            await body(rm, logs, mover, cleaner, a, b)
        finally:
            await mover.shutdown()
            rm.shutdown()
            logs.close()

    asyncio.run(go())


def test_a_replica_moves_while_it_is_written_and_read(tmp_path: Path) -> None:
    async def body(rm: ReplicaManager, logs: LogManager, mover: LogDirMover, cleaner: Cleaner,
                   a: Path, b: Path) -> None:
        tp = ("t", 0)
        assert logs.log_dir_of(*tp) == a
        for i in range(200):
            rm.append_records({tp: _batch(i)}, 1)
        result = await mover.alter_replica_log_dirs({tp: os.path.abspath(b)})
        assert result == {tp: ErrorCode.NONE}
        assert cleaner.paused[tp] == 1
        # Written while it moves: every record ends up in the moved log.
        for i in range(200, 400):
            rm.append_records({tp: _batch(i)}, 1)
            await asyncio.sleep(0)
        await _until(lambda: mover.completed == 1, "the swap")
        for i in range(400, 410):
            rm.append_records({tp: _batch(i)}, 1)
        partition = rm.partitions[tp]
        assert logs.log_dir_of(*tp) == b and partition.log.dir == b / "t-0"
        assert partition.log is logs.get_log(*tp) and logs.future_log(*tp) is None
        assert partition.log_end_offset == 410 and partition.high_watermark == 410
        data = _read_all(partition.log)
        assert data.count(b"record-") == 410
        for i in (0, 199, 200, 399, 409):
            assert b"record-%06d" % i in data
        assert cleaner.paused[tp] == 0  # cleaning resumed
        assert [p.name.endswith("-delete") for p in a.iterdir() if p.name.startswith("t-0")] \
            == [True]
        # Moving it to where it is: nothing to do.
        assert await mover.alter_replica_log_dirs({tp: os.path.abspath(b)}) == {
            tp: ErrorCode.NONE}
        assert logs.future_log(*tp) is None

    _run(tmp_path, body)


def test_kafkas_errors(tmp_path: Path) -> None:
    async def body(rm: ReplicaManager, logs: LogManager, mover: LogDirMover, cleaner: Cleaner,
                   a: Path, b: Path) -> None:
        result = await mover.alter_replica_log_dirs({
            ("t", 0): str(a.parent / "elsewhere"),  # not one of log.dirs
            ("t", 0 + 1): os.path.abspath(b),  # not hosted here
            ("x" * 240, 0): os.path.abspath(b),  # its future dir name would be too long
        })
        assert result == {("t", 0): ErrorCode.LOG_DIR_NOT_FOUND,
                          ("t", 1): ErrorCode.REPLICA_NOT_AVAILABLE,
                          ("x" * 240, 0): ErrorCode.INVALID_TOPIC_EXCEPTION}
        # The partition not hosted yet is created in the dir asked for when it comes.
        rm.become_leader_or_follower([PartitionState("t", 1, 1, 0, (1,), (1,))])
        assert logs.log_dir_of("t", 1) == b

    _run(tmp_path, body)


def test_a_new_destination_gives_up_the_move_in_progress(tmp_path: Path) -> None:
    async def body(rm: ReplicaManager, logs: LogManager, mover: LogDirMover, cleaner: Cleaner,
                   a: Path, b: Path) -> None:
        tp = ("t", 0)
        for i in range(100):
            rm.append_records({tp: _batch(i)}, 1)
        assert await mover.alter_replica_log_dirs({tp: os.path.abspath(b)}) == {
            tp: ErrorCode.NONE}
        assert logs.future_log_dir_of(*tp) == b
        # Back to its own dir before the move ends: the move is given up.
        assert await mover.alter_replica_log_dirs({tp: os.path.abspath(a)}) == {
            tp: ErrorCode.NONE}
        assert logs.future_log(*tp) is None and tp not in mover.moving
        assert cleaner.paused[tp] == 0 and logs.log_dir_of(*tp) == a

    # Throttled to a trickle, so the move is still in progress when given up.
    _run(tmp_path, body, quota=1)


def test_the_throttle_holds_the_move_back(tmp_path: Path) -> None:
    async def body(rm: ReplicaManager, logs: LogManager, mover: LogDirMover, cleaner: Cleaner,
                   a: Path, b: Path) -> None:
        tp = ("t", 0)
        for i in range(100):  # about 55 kB, 4 steps of 16 kB
            rm.append_records({tp: _batch(i)}, 1)
        await mover.alter_replica_log_dirs({tp: os.path.abspath(b)})
        await asyncio.sleep(0.5)
        future = logs.future_log(*tp)
        assert future is not None and 0 < future.log_end_offset < 100  # one step, no more
        mover.update_quota(2**63 - 1)  # the throttle lifted (a dynamic config change)
        await _until(lambda: mover.completed == 1, "the swap")
        assert logs.log_dir_of(*tp) == b

    _run(tmp_path, body, quota=1000)


def test_a_future_log_loaded_at_start_up_moves_on_when_hosted(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    with LogManager([a, b]) as logs:  # a move interrupted by a restart, as it left things
        log = logs.get_or_create_log("t", 0)
        for i in range(100):
            log.append_as_leader(_batch(i), 0)
        logs.create_future_log("t", 0, b)
        logs.copy_to_future("t", 0, 10_000)

    async def body(rm: ReplicaManager, logs: LogManager, mover: LogDirMover, cleaner: Any,
                   a: Path, b: Path) -> None:
        assert logs.future_log("t", 0) is not None and not mover.moving
        rm.become_leader_or_follower([PartitionState("t", 0, 1, 0, (1,), (1,))])
        await _until(lambda: mover.completed == 1, "the swap")
        assert logs.log_dir_of("t", 0) == b
        assert rm.partitions[("t", 0)].log_end_offset == 100

    _run(tmp_path, body, hosted=False)
