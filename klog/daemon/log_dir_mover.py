"""Moving replicas between this broker's log dirs (JBOD): Kafka's AlterReplicaLogDirs,
ReplicaAlterLogDirsManager and ReplicaAlterLogDirsThread.

Owns the moves in progress. ``alter_replica_log_dirs`` answers AlterReplicaLogDirs with
Kafka's rules (ReplicaManager.alterReplicaLogDirs):

- a dir that is not one of log.dirs (compared as absolute paths) is LOG_DIR_NOT_FOUND, an
  offline one KAFKA_STORAGE_ERROR, a topic whose future dir name would pass 255 characters
  INVALID_TOPIC_EXCEPTION;
- a partition not hosted here is REPLICA_NOT_AVAILABLE, and its log is created in that dir
  when it comes (the log manager's preferred dir);
- the dir the log is in already: nothing to do (a move elsewhere in progress is given up);
  a move to another dir replaces a move in progress to a third;
- otherwise a *future log* is made in the new dir, the log cleaner keeps off the partition,
  and the move starts.

The move (one partition at a time, as each of Kafka's threads does, in topic order): the
current log's batches are copied into the future log from its end, ``fetch_max_bytes``
(replica.fetch.max.bytes) a step, in a worker thread, while the partition keeps being
written and read (klog/storage/log_manager.py ``copy_to_future``; truncations of the log cut
the future log too). When a step reaches the log's end, the rest is copied on the event
loop -- where appends happen, so none can slip in -- and the future log is swapped in at
once (``replace_current_with_future_log``); the partition's ``log`` then is the moved one,
the old dir's copy is deleted after file.delete.delay.ms, and cleaning resumes.

The copy is throttled by replica.alter.log.dirs.io.max.bytes.per.second (a dynamic broker
config; Kafka's AlterLogDirs quota): while the bytes copied in the sampled window are over
it, no step is taken. A restart in the middle keeps the future log (loaded at start-up);
the move goes on when the partition is hosted again (``partitions_hosted``, called after
LeaderAndIsr). A stopped partition's move is set aside; a deleted one's future log goes
with it.

Runs on the event loop; the copy steps and the cleaner's pause (which waits for a clean in
progress) in worker threads.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Protocol

from klog.daemon.replication_quota import ReplicationQuotaManager
from klog.daemon.tasks import stop_task
from klog.protocol.errors import ErrorCode
from klog.storage.log import log_future_dir_name
from klog.storage.log_manager import FutureLogError, LogDirNotFoundError

if TYPE_CHECKING:
    from pathlib import Path

    from klog.daemon.partition import Partition
    from klog.storage.log_manager import LogManager

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]

#: The copy steps that finish a move run on the event loop: at most this much a step.
ON_LOOP_STEP_BYTES = 1 << 20
#: How long the mover waits before looking again at a move that could not step (its
#: partition not hosted yet, or an error).
RETRY_S = 0.2
#: Longest name of a directory (KAFKA-4893: a future dir name longer is refused).
MAX_DIR_NAME = 255


class HostedPartitions(Protocol):
    """The replica manager, as the mover sees it."""

    def get_partition(self, topic: str, partition: int) -> Partition | None: ...

    def try_complete_delayed_requests(self, tp: TopicPartition) -> None: ...


class OfflineDirs(Protocol):
    """Which log dirs are offline (klog/daemon/log_dir_failure.py)."""

    def is_offline(self, log_dir: Path) -> bool: ...


class LogDirMover:
    """See the module docstring. ``quota``: the AlterLogDirs throttle
    (replica.alter.log.dirs.io.max.bytes.per.second)."""

    def __init__(self, replicas: HostedPartitions, log_manager: LogManager, *,
                 fetch_max_bytes: int = 1 << 20,
                 quota: ReplicationQuotaManager | None = None,
                 offline_dirs: OfflineDirs | None = None) -> None:
        self.replicas = replicas
        self.log_manager = log_manager
        self.fetch_max_bytes = max(1, fetch_max_bytes)
        self.quota = quota or ReplicationQuotaManager("AlterLogDirs")
        self.offline_dirs = offline_dirs
        # Partitions whose future log is being filled, and those the cleaner keeps off.
        self.moving: set[TopicPartition] = set()
        self._paused: set[TopicPartition] = set()
        self._current: TopicPartition | None = None
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.completed = 0  # moves swapped in (for tests and metrics)

    # -- life cycle --------------------------------------------------------------------------

    def startup(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run())

    async def shutdown(self) -> None:
        task, self._task = self._task, None
        await stop_task(task, what="the log dir mover")

    def update_quota(self, bytes_per_second: int) -> None:
        """replica.alter.log.dirs.io.max.bytes.per.second changed (dynamic config)."""
        self.quota.update_quota(bytes_per_second)

    # -- AlterReplicaLogDirs -----------------------------------------------------------------

    async def alter_replica_log_dirs(self, dirs: Mapping[TopicPartition, str]
                                     ) -> dict[TopicPartition, ErrorCode]:
        """Each partition's error (NONE: moving, or in that dir already)."""
        results: dict[TopicPartition, ErrorCode] = {}
        for tp, path in dirs.items():
            results[tp] = await self._alter_one(tp, path)
        return results

    async def _alter_one(self, tp: TopicPartition, path: str) -> ErrorCode:
        lm = self.log_manager
        if len(log_future_dir_name(*tp)) > MAX_DIR_NAME:
            log.warning("Unable to alter log dirs for %s-%d: The topic name is too long.", *tp)
            return ErrorCode.INVALID_TOPIC_EXCEPTION
        try:
            log_dir = lm.log_dir_path(path)
        except LogDirNotFoundError as exc:
            log.warning("Unable to alter log dirs for %s-%d: %s", tp[0], tp[1], exc)
            return ErrorCode.LOG_DIR_NOT_FOUND
        if self._offline(log_dir):
            log.warning("Unable to alter log dirs for %s-%d: Log directory %s is offline",
                        tp[0], tp[1], path)
            return ErrorCode.KAFKA_STORAGE_ERROR
        partition = self.replicas.get_partition(*tp)
        current_dir = lm.log_dir_of(*tp)
        if partition is not None and current_dir is not None and self._offline(current_dir):
            return ErrorCode.KAFKA_STORAGE_ERROR  # Kafka: the partition is offline
        future_dir = lm.future_log_dir_of(*tp)
        if partition is not None and future_dir is not None and future_dir != log_dir:
            await self._give_up(tp)  # another destination: the move so far is dropped
        lm.maybe_update_preferred_log_dir(tp[0], tp[1], log_dir)
        if partition is None or current_dir is None:
            # As Kafka: REPLICA_NOT_AVAILABLE (its NotLeaderOrFollower, kept for old
            # clients); the log is made in that dir when the partition comes here.
            return ErrorCode.REPLICA_NOT_AVAILABLE
        if current_dir == log_dir or lm.future_log_dir_of(*tp) == log_dir:
            return ErrorCode.NONE
        try:
            await asyncio.to_thread(lm.create_future_log, tp[0], tp[1], log_dir,
                                    partition.log.config)
        except FutureLogError as exc:
            log.warning("Unable to alter log dirs for %s-%d: %s", tp[0], tp[1], exc)
            return ErrorCode.UNKNOWN_SERVER_ERROR
        except OSError as exc:
            log.error("Unable to create the future log of %s-%d in %s: %s", tp[0], tp[1],
                      log_dir, exc)
            return ErrorCode.KAFKA_STORAGE_ERROR
        log.info("moving %s-%d from %s to %s", tp[0], tp[1], current_dir, log_dir)
        await self._start(tp)
        return ErrorCode.NONE

    def _offline(self, log_dir: Path) -> bool:
        return self.offline_dirs is not None and self.offline_dirs.is_offline(log_dir)

    # -- the replica manager's news ----------------------------------------------------------

    def partitions_hosted(self, tps: Iterable[TopicPartition]) -> None:
        """LeaderAndIsr made these partitions hosted here: a future log loaded at start-up
        (a move a restart interrupted) goes on (Kafka's becomeLeaderOrFollower)."""
        lm = self.log_manager
        for tp in tps:
            if tp not in self.moving and lm.future_log(*tp) is not None:
                log.info("resuming the move of %s-%d to %s", tp[0], tp[1],
                         lm.future_log_dir_of(*tp))
                asyncio.get_running_loop().create_task(self._start(tp))

    def partitions_stopped(self, tps: Iterable[TopicPartition]) -> None:
        """StopReplica: the partitions' moves stop (a deleted partition's future log is
        deleted with it by the log manager)."""
        for tp in tps:
            self.moving.discard(tp)
            self._resume_cleaning(tp)

    # -- moving ------------------------------------------------------------------------------

    async def _start(self, tp: TopicPartition) -> None:
        cleaner = self.log_manager.cleaner
        if cleaner is not None and tp not in self._paused:
            self._paused.add(tp)
            # Waits for a clean of the partition in progress to stop (Kafka's
            # abortAndPauseCleaning when it creates the future replica).
            await asyncio.to_thread(cleaner.abort_and_pause, tp)
        if self.log_manager.future_log(*tp) is None:
            self._resume_cleaning(tp)  # given up meanwhile
            return
        self.moving.add(tp)
        self._wake.set()

    async def _give_up(self, tp: TopicPartition) -> None:
        self.moving.discard(tp)
        await asyncio.to_thread(self.log_manager.remove_future_log, *tp)
        self._resume_cleaning(tp)
        log.info("gave up the move of %s-%d", *tp)

    def _resume_cleaning(self, tp: TopicPartition) -> None:
        cleaner = self.log_manager.cleaner
        if tp in self._paused:
            self._paused.discard(tp)
            if cleaner is not None:
                cleaner.resume(tp)

    def _next(self) -> TopicPartition | None:
        """Kafka's selectPartitionToFetch: keep at the partition in progress while it
        moves; else the first in topic order."""
        if self._current in self.moving:
            return self._current
        self._current = min(self.moving) if self.moving else None
        return self._current

    async def _run(self) -> None:
        while True:
            tp = self._next()
            if tp is None:
                self._wake.clear()
                await self._wake.wait()
                continue
            wait_s = self.quota.throttle_time()
            if wait_s > 0:
                await asyncio.sleep(min(wait_s, 1.0))
                continue
            try:
                stepped = await self._step(tp)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # a move that fails is set aside, not the mover
                log.error("moving %s-%d failed: %s; retrying", tp[0], tp[1], exc)
                stepped = False
            if not stepped:
                await asyncio.sleep(RETRY_S)

    async def _step(self, tp: TopicPartition) -> bool:
        """One copy step of ``tp``'s move, and the swap once it has caught up. False when
        nothing could be done now (the partition is not hosted)."""
        lm = self.log_manager
        partition = self.replicas.get_partition(*tp)
        if partition is None or lm.future_log(*tp) is None:
            if lm.future_log(*tp) is None:
                self.moving.discard(tp)
            return False
        copied = await asyncio.to_thread(lm.copy_to_future, tp[0], tp[1],
                                         self.fetch_max_bytes)
        self.quota.record(copied)
        if tp not in self.moving:
            return True  # stopped or given up while the step ran
        if copied >= self.fetch_max_bytes or self.quota.is_quota_exceeded():
            return True
        # The step reached the end of the log as it was: copy what was appended since
        # here on the loop, where no append can come in between, and swap if that is all.
        tail = lm.copy_to_future(tp[0], tp[1], min(self.fetch_max_bytes, ON_LOOP_STEP_BYTES))
        self.quota.record(tail)
        if lm.future_caught_up(*tp):
            self._swap(tp, partition)
            return True
        return copied > 0 or tail > 0

    def _swap(self, tp: TopicPartition, partition: Partition) -> None:
        moved = self.log_manager.replace_current_with_future_log(*tp)
        partition.log = moved
        self.moving.discard(tp)
        self._resume_cleaning(tp)
        self.completed += 1
        log.info("The current replica is successfully replaced with the future replica "
                 "for %s-%d (now in %s)", tp[0], tp[1], moved.dir.parent)
        # Waiting fetches placed their offsets in the old log's segments: look again.
        self.replicas.try_complete_delayed_requests(tp)

    def in_progress(self) -> dict[TopicPartition, tuple[Path | None, Path | None]]:
        """Each move in progress: (the log's dir, the future log's dir)."""
        lm = self.log_manager
        return {tp: (lm.log_dir_of(*tp), lm.future_log_dir_of(*tp))
                for tp, _future in sorted(lm.all_future_logs().items())}
