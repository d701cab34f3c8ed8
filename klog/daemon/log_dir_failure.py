"""A failed log dir, as Kafka handles it: Kafka's LogDirFailureChannel and
ReplicaManager.handleLogDirFailure.

Owns taking log dirs offline. Whoever meets an I/O error (OSError) on a log dir -- an
append or a follower's append, a read, the log manager's loading, flushes, retention and
checkpoints, from any thread -- calls ``report(path, error)``; the dir (the configured
log dir ``path`` is in) is then handled once, on the event loop:

1. the partitions whose log is in it go offline on this broker (``ReplicaManager
   .mark_offline``): their fetchers stop, waiting requests are answered, and every request
   for them is answered KAFKA_STORAGE_ERROR from now on; moves into or out of the dir stop
   (a future log in it is dropped, not deleted);
2. the log manager closes their files and never writes to the dir again (checkpoints, the
   clean-shutdown marker: a restart recovers it), nor makes a log there or makes those
   partitions' logs elsewhere (klog/storage/log_manager.py ``handle_log_dir_failure``);
3. when no log dir is left, the broker stops at once ("Shutdown broker because all log
   dirs in ... have failed"; Kafka halts the JVM);
4. the controller is told (``/log_dir_event_notification/log_dir_event_<seq>``, Kafka's
   {"version":1,"broker":N,"event":1}); it asks this broker for the state of its replicas
   (LeaderAndIsr), hears KAFKA_STORAGE_ERROR for the offline ones and moves their
   leadership to other in-sync replicas (klog/daemon/controller/log_dir_events.py). The
   notification is retried until ``log.dir.failure.timeout.ms``: a broker that cannot tell
   the controller for that long stops (Kafka's semantics of that config), rather than
   keep leaderships it can no longer serve. A standalone broker's controller is
   in-process and reads the same notification from its local metastore.

The broker keeps serving the partitions of its other dirs throughout. A restart brings the
dir back if it works again (the broker loads it, recovering it as after a crash). Unlike
Kafka, a log that cannot be *created* only fails its partition (KAFKA_STORAGE_ERROR, as
klog answered before): creation also fails for reasons that are not the disk's (no
descriptors left), and an existing log's first write meets a real disk failure anyway.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from klog.daemon.metastore import paths
from klog.daemon.metastore.base import MetastoreError
from klog.daemon.tasks import stop_task

if TYPE_CHECKING:
    from klog.daemon.metastore.base import MetadataStore
    from klog.storage.log_manager import LogManager

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]

#: Wait between attempts to write the notification.
NOTIFY_RETRY_S = 0.5


class Replicas(Protocol):
    """The replica manager, as the failure handler sees it."""

    def mark_offline(self, tps: list[TopicPartition]) -> None: ...


class Moves(Protocol):
    """The log dir mover (klog/daemon/log_dir_mover.py)."""

    def partitions_stopped(self, tps: list[TopicPartition]) -> None: ...


def halt(code: int) -> None:
    """Stop the process now, as Kafka's Exit.halt: no clean shutdown (the failed disk
    could hang it); the logs of the other dirs are recovered at the next start."""
    for handler in logging.getLogger().handlers:
        with contextlib.suppress(Exception):  # flush what can be flushed, then go
            handler.flush()
    sys.stderr.flush()
    os._exit(code)


class LogDirFailureHandler:
    """See the module docstring. ``store``: the metastore the controller watches;
    ``timeout_ms``: log.dir.failure.timeout.ms; ``halt``: how the broker stops."""

    def __init__(self, broker_id: int, log_manager: LogManager, replicas: Replicas,
                 store: MetadataStore, *, timeout_ms: int = 30_000,
                 moves: Moves | None = None,
                 halt: Callable[[int], None] = halt) -> None:
        self.broker_id = broker_id
        self.log_manager = log_manager
        self.replicas = replicas
        self.store = store
        self.timeout_ms = timeout_ms
        self.moves = moves
        self.halt = halt
        self._loop: asyncio.AbstractEventLoop | None = None
        self._queue: asyncio.Queue[Path] = asyncio.Queue()
        self._reported: set[Path] = set()
        self._early: list[Path] = []  # reported before startup (log loading)
        self._task: asyncio.Task[None] | None = None
        self.handled: list[Path] = []  # dirs taken offline, in order (tests, metrics)

    # -- reporting (any thread) ----------------------------------------------------------

    def report(self, where: Path | str, exc: OSError) -> None:
        """An I/O error under ``where``: its log dir goes offline (once)."""
        log_dir = self.log_manager.log_dir_containing(where)
        if log_dir is None or log_dir in self._reported:
            return
        self._reported.add(log_dir)
        log.error("Error while accessing log dir %s: %s (%s); taking it offline", log_dir,
                  exc, errno.errorcode.get(exc.errno or 0, "I/O error"))
        loop = self._loop
        if loop is None:
            self._early.append(log_dir)
            return
        loop.call_soon_threadsafe(self._queue.put_nowait, log_dir)

    def is_offline(self, log_dir: Path) -> bool:
        return self.log_manager.is_offline(log_dir) or log_dir in self._reported

    # -- life cycle ----------------------------------------------------------------------

    def startup(self) -> None:
        self._loop = asyncio.get_running_loop()
        for log_dir in self._early:
            self._queue.put_nowait(log_dir)
        self._early.clear()
        self._task = self._loop.create_task(self._run())

    async def shutdown(self) -> None:
        task, self._task = self._task, None
        await stop_task(task, what="the log dir failure handler")

    async def _run(self) -> None:
        while True:
            log_dir = await self._queue.get()
            try:
                await self.handle(log_dir)
            except asyncio.CancelledError:
                raise
            except Exception:  # a bug: the dir stays offline, the broker goes on
                log.exception("handling the failure of log dir %s failed", log_dir)

    # -- handling (the event loop) -------------------------------------------------------

    async def handle(self, log_dir: Path) -> None:
        """Kafka's handleLogDirFailure for ``log_dir`` (see the module docstring)."""
        lm = self.log_manager
        log.warning("Stopping serving replicas in dir %s because the log directory has "
                    "failed.", log_dir)
        current = [tp for tp, _log in sorted(lm.all_logs().items())
                   if lm.log_dir_of(*tp) == log_dir]
        futures = [tp for tp in sorted(lm.all_future_logs())
                   if lm.future_log_dir_of(*tp) == log_dir]
        self.replicas.mark_offline(current)
        if self.moves is not None:
            self.moves.partitions_stopped(sorted({*current, *futures}))
        dropped, dropped_futures = await asyncio.to_thread(lm.handle_log_dir_failure,
                                                           log_dir)
        self.handled.append(log_dir)
        log.warning("Broker %d stopped fetcher for partitions %s and stopped moving logs for "
                    "partitions %s because they are in the failed log directory %s.",
                    self.broker_id, ",".join(f"{t}-{p}" for t, p in dropped) or "-",
                    ",".join(f"{t}-{p}" for t, p in dropped_futures) or "-", log_dir)
        if not lm.live_log_dirs:
            log.critical("Shutdown broker because all log dirs in %s have failed",
                         ", ".join(map(str, lm.log_dirs)))
            self.halt(1)
            return
        await self._notify_controller()
        log.warning("Stopped serving replicas in dir %s", log_dir)

    async def _notify_controller(self) -> None:
        """Write the log dir event notification, retried until log.dir.failure.timeout.ms;
        then the broker stops."""
        deadline = time.monotonic() + self.timeout_ms / 1000
        data = paths.LogDirEventNotification(self.broker_id).encode()
        while True:
            try:
                await asyncio.to_thread(self.store.create, paths.log_dir_event_path(), data,
                                        sequential=True, make_parents=True)
                return
            except (MetastoreError, OSError) as exc:
                if time.monotonic() >= deadline:
                    log.critical("Shutdown broker because the controller could not be told "
                                 "of the failed log dir within log.dir.failure.timeout.ms "
                                 "(%d ms): %s", self.timeout_ms, exc)
                    self.halt(1)
                    return
                log.warning("telling the controller of the failed log dir failed: %s; "
                            "retrying", exc)
                await asyncio.sleep(NOTIFY_RETRY_S)
