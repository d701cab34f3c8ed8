"""Delayed operations (long-poll fetch, acks=-1 produce, group joins) and their timeouts.

This module owns three things, after Kafka's ``server.util.timer`` and ``server.purgatory``:

- ``TimingWheel`` — a hierarchical timing wheel (Varghese & Lauck, as in Kafka): ``wheel_size``
  buckets of ``tick_ms`` each; a timeout beyond the wheel's span goes to an overflow wheel
  whose tick is this wheel's whole span, created on demand. Insert is O(number of levels),
  cancel is O(1): a bucket is an insertion-ordered dict of entries, and an entry knows its
  bucket.
- ``Timer`` — drives the wheel from the asyncio loop. Non-empty buckets wait in a small heap
  ordered by expiration (at most ``wheel_size`` per level, so pushing is cheap); one
  ``loop.call_at`` handle is armed for the earliest bucket and re-armed when that changes.
  There is no thread and no busy poll: with nothing pending, nothing is armed.
- ``DelayedOperation`` and ``DelayedOperationPurgatory`` — an operation waits under one or
  more keys (e.g. a topic-partition) until a ``check_and_complete(key)`` finds it satisfiable
  or its timeout fires; ``on_complete`` runs exactly once either way.

Time: the timer reads ``clock()`` (seconds, ``time.monotonic`` by default, injectable for
tests) and works in whole milliseconds, like Kafka. A bucket expires at the start of its
time range, so with ``tick_ms=1`` a task runs at the first timer pass at or after
``add time + delay_ms``; with a coarser tick it may run up to one tick early (as in Kafka).

Threading: none of these classes lock anything. The broker is one asyncio event loop and
every call here must happen on the loop thread. Another thread that wants to complete
operations (e.g. a follower fetch finished elsewhere) hands the call over with
``loop.call_soon_threadsafe(purgatory.check_and_complete, key)``. Timeouts run from the
timer's loop callback, never inside ``add`` or ``try_complete_else_watch``.

Failures: an exception raised by a task (``on_complete``, ``on_expiration``) while the timer
runs it, or by an operation inside ``check_and_complete``, is logged and does not stop the
timer or the other operations. Exceptions from the operation passed to
``try_complete_else_watch`` propagate to its caller.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import logging
import math
import time
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Callable, Hashable, Iterable
from typing import Any, Generic, TypeVar

__all__ = [
    "DelayedOperation",
    "DelayedOperationPurgatory",
    "Timer",
    "TimerTask",
    "TimingWheel",
]

log = logging.getLogger(__name__)

# Bucket.expiration_ms when the bucket is not waiting in the timer's queue.
_NO_EXPIRATION = -1


class TimerTask(ABC):
    """Something to run once ``delay_ms`` after it is added to a ``Timer``.

    ``cancel()`` takes it out of the timer in O(1); cancelling a task that is not scheduled
    does nothing. Adding a scheduled task again replaces its previous schedule.
    """

    def __init__(self, delay_ms: int) -> None:
        self.delay_ms = int(delay_ms)
        # The entry that currently schedules this task; any other entry is stale.
        self._timer_entry: _TimerTaskEntry | None = None

    @abstractmethod
    def run(self) -> None:
        """Called on the loop thread when the delay has passed (unless cancelled first)."""

    def cancel(self) -> None:
        entry = self._timer_entry
        if entry is not None:
            self._timer_entry = None
            if entry.bucket is not None:
                entry.bucket.remove(entry)

    def _set_timer_entry(self, entry: _TimerTaskEntry) -> None:
        old = self._timer_entry
        if old is not None and old is not entry and old.bucket is not None:
            old.bucket.remove(old)
        self._timer_entry = entry


class _TimerTaskEntry:
    """One scheduling of a task: its absolute expiration and the bucket holding it."""

    __slots__ = ("bucket", "expiration_ms", "task")

    def __init__(self, task: TimerTask, expiration_ms: int) -> None:
        self.task = task
        self.expiration_ms = expiration_ms
        self.bucket: _TimerTaskList | None = None

    @property
    def cancelled(self) -> bool:
        return self.task._timer_entry is not self


class _TaskCounter:
    """What every bucket of one timer shares: the number of entries in all of them, and
    whom to tell when a cancel empties a bucket (so an armed loop handle can be moved)."""

    __slots__ = ("on_bucket_emptied", "value")

    def __init__(self) -> None:
        self.value = 0
        self.on_bucket_emptied: Callable[[_TimerTaskList], None] | None = None


class _TimerTaskList:
    """A bucket: the entries expiring in one tick of one wheel level.

    An insertion-ordered dict keyed by entry (identity hash) gives O(1) add and remove with
    the same FIFO order a doubly linked list would.
    """

    __slots__ = ("counter", "entries", "expiration_ms")

    def __init__(self, counter: _TaskCounter) -> None:
        self.counter = counter
        self.entries: dict[_TimerTaskEntry, None] = {}
        self.expiration_ms = _NO_EXPIRATION

    def add(self, entry: _TimerTaskEntry) -> None:
        if entry.bucket is not None:
            entry.bucket.remove(entry)
        self.entries[entry] = None
        entry.bucket = self
        self.counter.value += 1

    def remove(self, entry: _TimerTaskEntry) -> None:
        if entry.bucket is self:
            del self.entries[entry]
            entry.bucket = None
            self.counter.value -= 1
            if not self.entries and self.counter.on_bucket_emptied is not None:
                self.counter.on_bucket_emptied(self)

    def set_expiration(self, expiration_ms: int) -> bool:
        """Set the bucket's expiration; True if it changed (the bucket must be queued)."""
        changed = self.expiration_ms != expiration_ms
        self.expiration_ms = expiration_ms
        return changed

    def flush(self) -> list[_TimerTaskEntry]:
        """Empty the bucket and return its entries, oldest first."""
        entries = list(self.entries)
        self.entries.clear()
        for entry in entries:
            entry.bucket = None
        self.counter.value -= len(entries)
        self.expiration_ms = _NO_EXPIRATION
        return entries


class _BucketQueue:
    """Buckets waiting to expire, earliest first (the role of Kafka's DelayQueue).

    A bucket is pushed when its expiration is set, i.e. at most once per expiration; a heap
    item whose expiration no longer matches its bucket's is stale and skipped.
    """

    __slots__ = ("heap", "seq")

    def __init__(self) -> None:
        self.heap: list[tuple[int, int, _TimerTaskList]] = []
        self.seq = itertools.count()

    def offer(self, bucket: _TimerTaskList) -> None:
        heapq.heappush(self.heap, (bucket.expiration_ms, next(self.seq), bucket))

    def earliest(self) -> int | None:
        """Expiration of the earliest non-empty bucket; drops empty or stale ones on the way.

        A dropped empty bucket gets no expiration, so the next task added to it queues it
        again: this is what keeps cancelled-out buckets from waking the loop.
        """
        heap = self.heap
        while heap:
            expiration_ms, _, bucket = heap[0]
            if bucket.expiration_ms == expiration_ms and bucket.entries:
                return expiration_ms
            heapq.heappop(heap)
            if bucket.expiration_ms == expiration_ms:
                bucket.expiration_ms = _NO_EXPIRATION
        return None

    def poll(self, now_ms: int) -> _TimerTaskList | None:
        """Remove and return a bucket that expired at or before ``now_ms``, if any."""
        heap = self.heap
        while heap and heap[0][0] <= now_ms:
            expiration_ms, _, bucket = heapq.heappop(heap)
            if bucket.expiration_ms == expiration_ms:
                return bucket
        return None

    def clear(self) -> None:
        self.heap.clear()


class TimingWheel:
    """One level of a hierarchical timing wheel; its overflow wheel is the next level up.

    Bucket ``i`` holds the entries whose expiration falls in tick ``v`` with
    ``v % wheel_size == i``, for the ``wheel_size`` ticks starting at ``current_time_ms``. An
    entry that expires within the current tick is already due (``add`` returns False); one
    beyond this wheel's span goes to the overflow wheel, whose tick is this wheel's span.

    Invariant kept by ``Timer``: the clock only moves to a time at which no non-empty bucket
    with an earlier expiration is still waiting, so a slot is never shared by two rounds.
    """

    def __init__(
        self,
        tick_ms: int,
        wheel_size: int,
        start_ms: int,
        counter: _TaskCounter,
        queue: _BucketQueue,
    ) -> None:
        self.tick_ms = tick_ms
        self.wheel_size = wheel_size
        self.interval_ms = tick_ms * wheel_size
        self._counter = counter
        self._queue = queue
        self._buckets = [_TimerTaskList(counter) for _ in range(wheel_size)]
        self.current_time_ms = start_ms - start_ms % tick_ms
        self.overflow_wheel: TimingWheel | None = None

    def add(self, entry: _TimerTaskEntry) -> bool:
        """Place ``entry`` in a bucket; False if it is cancelled or already due."""
        expiration_ms = entry.expiration_ms
        if entry.cancelled:
            return False
        if expiration_ms < self.current_time_ms + self.tick_ms:
            return False
        if expiration_ms < self.current_time_ms + self.interval_ms:
            virtual_id = expiration_ms // self.tick_ms
            bucket = self._buckets[virtual_id % self.wheel_size]
            bucket.add(entry)
            # Queue the bucket only when it starts a new round; further adds in the same
            # round see the same expiration and must not queue it twice.
            if bucket.set_expiration(virtual_id * self.tick_ms):
                self._queue.offer(bucket)
            return True
        if self.overflow_wheel is None:
            self.overflow_wheel = TimingWheel(
                self.interval_ms, self.wheel_size, self.current_time_ms, self._counter, self._queue
            )
        return self.overflow_wheel.add(entry)

    def advance_clock(self, time_ms: int) -> None:
        if time_ms >= self.current_time_ms + self.tick_ms:
            self.current_time_ms = time_ms - time_ms % self.tick_ms
            if self.overflow_wheel is not None:
                self.overflow_wheel.advance_clock(self.current_time_ms)

    def levels(self) -> int:
        """Number of wheels in the hierarchy from this one up (for tests and metrics)."""
        wheel: TimingWheel | None = self
        count = 0
        while wheel is not None:
            count += 1
            wheel = wheel.overflow_wheel
        return count

    def _all_buckets(self) -> Iterable[_TimerTaskList]:
        wheel: TimingWheel | None = self
        while wheel is not None:
            yield from wheel._buckets
            wheel = wheel.overflow_wheel


class Timer:
    """A ``TimingWheel`` driven by one asyncio timer handle (Kafka's SystemTimer, no thread).

    ``loop`` defaults to the running loop at the first ``add``. ``advance_clock()`` is what
    the armed handle calls; tests with a fake ``clock`` call it themselves. Loop thread only.
    """

    def __init__(
        self,
        tick_ms: int = 1,
        wheel_size: int = 20,
        clock: Callable[[], float] = time.monotonic,
        loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        if tick_ms < 1:
            raise ValueError(f"tick_ms must be >= 1, got {tick_ms}")
        if wheel_size < 2:
            # With one bucket an overflow wheel's tick equals its own span: no progress.
            raise ValueError(f"wheel_size must be >= 2, got {wheel_size}")
        self._clock = clock
        self._loop = loop
        self._counter = _TaskCounter()
        self._counter.on_bucket_emptied = self._on_bucket_emptied
        self._queue = _BucketQueue()
        self.wheel = TimingWheel(tick_ms, wheel_size, self.now_ms(), self._counter, self._queue)
        self._handle: asyncio.TimerHandle | None = None
        self._handle_expiration_ms = _NO_EXPIRATION
        # Tasks found due when added: run from a loop callback, never inside add().
        self._ready: deque[_TimerTaskEntry] = deque()
        self._ready_handle: asyncio.Handle | None = None
        self._closed = False

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        if self._loop is None:
            self._loop = asyncio.get_running_loop()
        return self._loop

    def now_ms(self) -> int:
        # The 1 µs allowance absorbs float error (a clock at 1053158559 ms reads back as
        # 1053158558.9999999): whole milliseconds stay exact, real time is not moved early
        # by anything the millisecond tick could notice.
        return math.floor(self._clock() * 1000 + 0.001)

    def add(self, task: TimerTask) -> None:
        if self._closed:
            raise RuntimeError("timer is closed")
        now_ms = self.now_ms()
        earliest_ms = self._queue.earliest()
        if earliest_ms is None or earliest_ms > now_ms:
            # Nothing is due, so moving the wheel's clock to now is safe (see TimingWheel);
            # after an idle spell this keeps a short timeout in the finest wheel instead of
            # a stale overflow bucket.
            self.wheel.advance_clock(now_ms)
        entry = _TimerTaskEntry(task, now_ms + task.delay_ms)
        task._set_timer_entry(entry)
        if self.wheel.add(entry):
            self._arm(now_ms)
        elif not entry.cancelled:
            self._ready.append(entry)
            if self._ready_handle is None:
                self._ready_handle = self.loop.call_soon(self._run_ready)

    def size(self) -> int:
        """Tasks waiting in the wheel (not counting ones already due and about to run)."""
        return self._counter.value

    def advance_clock(self) -> int:
        """Expire every bucket due by now, run the due tasks, re-arm; returns tasks run."""
        if self._closed:
            return 0
        now_ms = self.now_ms()
        due: list[_TimerTaskEntry] = []
        bucket = self._queue.poll(now_ms)
        while bucket is not None:
            self.wheel.advance_clock(bucket.expiration_ms)
            # Re-insert each entry: it drops to a finer wheel, or is due now.
            for entry in bucket.flush():
                if not self.wheel.add(entry) and not entry.cancelled:
                    due.append(entry)
            bucket = self._queue.poll(now_ms)
        self.wheel.advance_clock(now_ms)
        # Tasks run only after the wheel is consistent, since they may add or cancel tasks.
        ran = self._run_entries(due) + self._run_entries(self._drain_ready())
        if not self._closed:
            self._arm(self.now_ms())
        return ran

    def close(self) -> None:
        """Drop every pending task without running it and disarm the loop handle."""
        self._closed = True
        for handle in (self._handle, self._ready_handle):
            if handle is not None:
                handle.cancel()
        self._handle = self._ready_handle = None
        for bucket in self.wheel._all_buckets():
            for entry in bucket.flush():
                if entry.task._timer_entry is entry:
                    entry.task._timer_entry = None
        for entry in self._drain_ready():
            if entry.task._timer_entry is entry:
                entry.task._timer_entry = None
        self._queue.clear()

    @property
    def closed(self) -> bool:
        return self._closed

    def _arm(self, now_ms: int) -> None:
        """Point the single loop handle at the earliest non-empty bucket, or disarm it."""
        expiration_ms = self._queue.earliest()
        if expiration_ms is None:
            if self._handle is not None:
                self._handle.cancel()
                self._handle = None
            return
        if self._handle is not None:
            if self._handle_expiration_ms == expiration_ms:
                return
            self._handle.cancel()
        loop = self.loop
        delay_s = max(expiration_ms - now_ms, 0) / 1000
        self._handle = loop.call_at(loop.time() + delay_s, self._on_handle)
        self._handle_expiration_ms = expiration_ms

    def _on_bucket_emptied(self, bucket: _TimerTaskList) -> None:
        # Cancels emptied the bucket the loop is armed for: aim at the next one instead of
        # waking up for nothing (an idle broker then has no timer armed at all).
        if self._handle is not None and bucket.expiration_ms == self._handle_expiration_ms:
            self._arm(self.now_ms())

    def _on_handle(self) -> None:
        self._handle = None
        self.advance_clock()

    def _run_ready(self) -> None:
        self._ready_handle = None
        self._run_entries(self._drain_ready())

    def _drain_ready(self) -> list[_TimerTaskEntry]:
        entries = list(self._ready)
        self._ready.clear()
        return entries

    def _run_entries(self, entries: list[_TimerTaskEntry]) -> int:
        ran = 0
        for entry in entries:
            if self._closed:  # a task shut the timer down: the rest are dropped, not run
                break
            task = entry.task
            # An earlier task in this pass may have cancelled or rescheduled this one.
            if task._timer_entry is not entry:
                continue
            task._timer_entry = None
            ran += 1
            try:
                task.run()
            except Exception:
                log.exception("timer task %r failed", task)
        return ran


class DelayedOperation(TimerTask):
    """An operation that waits at most ``delay_ms`` for a condition (Kafka's DelayedOperation).

    Subclasses implement ``try_complete`` (check; if satisfiable, ``return
    self.force_complete()``) and ``on_complete`` (build and send the response), and may
    override ``on_expiration`` (called after ``on_complete`` when the timeout fired). A
    subclass must call ``super().__init__(delay_ms)``. Loop thread only.
    """

    def __init__(self, delay_ms: int) -> None:
        super().__init__(delay_ms)
        self._completed = False
        # Set by the purgatory that watches this operation, for its bookkeeping.
        self._purgatory: DelayedOperationPurgatory[Any] | None = None
        self._watch_count = 0  # watcher lists of that purgatory holding this operation
        self._counted_delayed = False  # counted in that purgatory's delayed()

    @abstractmethod
    def try_complete(self) -> bool:
        """If the operation can complete now, call ``force_complete()`` and return its result."""

    @abstractmethod
    def on_complete(self) -> None:
        """Build and send the response; called exactly once."""

    def on_expiration(self) -> None:
        """Called after ``on_complete`` when the operation completed by timing out."""

    @property
    def is_completed(self) -> bool:
        return self._completed

    def force_complete(self) -> bool:
        """Complete now; True only for the one call that completed it. Cancels the timeout."""
        if self._completed:
            return False
        self._completed = True
        purgatory = self._purgatory
        if purgatory is not None and self._watch_count:
            purgatory._note_completed_while_watched(self)
        self.cancel()
        self.on_complete()
        return True

    def cancel(self) -> None:
        super().cancel()
        if self._counted_delayed:
            self._counted_delayed = False
            if self._purgatory is not None:
                self._purgatory._delayed -= 1

    def run(self) -> None:
        """The timeout: complete (if nobody did yet), then ``on_expiration``."""
        if not self._completed and self.force_complete():
            self.on_expiration()


T = TypeVar("T", bound=DelayedOperation)


class DelayedOperationPurgatory(Generic[T]):
    """Delayed operations watched by key and timed out by a ``Timer`` (loop thread only).

    ``try_complete_else_watch`` tries an operation; if it cannot complete, it is watched
    under each key and scheduled to expire. ``check_and_complete(key)`` (called when
    something changed for ``key``, e.g. an append to a partition) tries every operation
    watched under it. An operation completed through one key, or by timing out, stays in
    its other keys' lists until those are next checked or a purge pass removes it; a purge
    runs (from a loop callback) once more than ``purge_interval`` such entries accumulate,
    so the watch lists stay bounded under a flood of short fetches.

    An operation belongs to one purgatory. With ``timer=None`` the purgatory owns a new
    ``Timer`` and closes it on ``shutdown``; a timer passed in is left open.
    """

    def __init__(self, name: str, timer: Timer | None = None, purge_interval: int = 1000) -> None:
        self.name = name
        self._owns_timer = timer is None
        self.timer = Timer() if timer is None else timer
        self.purge_interval = purge_interval
        self._watchers: dict[Hashable, dict[int, T]] = {}
        self._watched = 0  # entries in all watcher lists
        self._completed_watched = 0  # of which belong to completed operations
        self._delayed = 0  # operations scheduled to expire, not completed nor cancelled
        self._purge_handle: asyncio.Handle | None = None
        self._shut_down = False

    def __repr__(self) -> str:
        return (
            f"DelayedOperationPurgatory({self.name!r}, watched={self._watched}, "
            f"delayed={self._delayed})"
        )

    def try_complete_else_watch(self, op: T, keys: Iterable[Hashable]) -> bool:
        """Complete ``op`` now, else watch it under every key and schedule its timeout.

        Returns True if this call completed it. As in Kafka, the operation is tried again
        after it is on every watch list, so a change that lands between the first try and
        the watching cannot be missed.
        """
        if self._shut_down:
            raise RuntimeError(f"purgatory {self.name} is shut down")
        watch_keys = list(dict.fromkeys(keys))
        if not watch_keys:
            raise ValueError("an operation needs at least one watch key")
        if op._purgatory is not None and op._purgatory is not self:
            raise ValueError(f"{op!r} is already watched by purgatory {op._purgatory.name}")
        if op.is_completed:
            return False
        op._purgatory = self
        if op.try_complete():
            return True
        for key in watch_keys:
            if op.is_completed:
                break
            self._watch(key, op)
        if not op.is_completed and op.try_complete():
            return True
        if not op.is_completed:
            self.timer.add(op)
            if not op._counted_delayed:
                op._counted_delayed = True
                self._delayed += 1
        return False

    def check_and_complete(self, key: Hashable) -> int:
        """Try every operation watched under ``key``; returns how many this call completed."""
        watchers = self._watchers.get(key)
        if watchers is None:
            return 0
        completed = 0
        # A snapshot: completing an operation may watch or complete others re-entrantly.
        for op_id, op in list(watchers.items()):
            if not op.is_completed:
                try:
                    if op.try_complete():
                        completed += 1
                except Exception:
                    log.exception("purgatory %s: completing %r failed", self.name, op)
            if op.is_completed and watchers.pop(op_id, None) is not None:
                self._unwatched(op)
        if not watchers and self._watchers.get(key) is watchers:
            del self._watchers[key]
        if completed:
            log.debug("purgatory %s: key %r unblocked %d operations", self.name, key, completed)
        return completed

    def watched(self) -> int:
        """Entries in all watch lists (an operation counts once per key; includes completed
        operations not yet removed)."""
        return self._watched

    def delayed(self) -> int:
        """Operations waiting for their timeout (not yet completed or cancelled)."""
        return self._delayed

    def cancel_for_key(self, key: Hashable) -> list[T]:
        """Stop watching ``key``: its pending operations are returned with their timeouts
        cancelled, and are not completed (they stay watched under their other keys)."""
        watchers = self._watchers.pop(key, None)
        if watchers is None:
            return []
        cancelled: list[T] = []
        for op in watchers.values():
            self._unwatched(op)
            if not op.is_completed:
                op.cancel()
                cancelled.append(op)
        return cancelled

    def purge_completed(self) -> int:
        """Remove completed operations from every watch list; returns entries removed."""
        if self._purge_handle is not None:
            self._purge_handle.cancel()
            self._purge_handle = None
        purged = 0
        for key, watchers in list(self._watchers.items()):
            done = [op_id for op_id, op in watchers.items() if op.is_completed]
            for op_id in done:
                self._unwatched(watchers.pop(op_id))
            purged += len(done)
            if not watchers:
                del self._watchers[key]
        if purged:
            log.debug("purgatory %s: purged %d completed operations", self.name, purged)
        return purged

    def shutdown(self) -> None:
        """Cancel every timeout and forget every watched operation; completes nothing."""
        self._shut_down = True
        if self._purge_handle is not None:
            self._purge_handle.cancel()
            self._purge_handle = None
        for watchers in self._watchers.values():
            for op in watchers.values():
                op.cancel()
                op._watch_count = 0
        self._watchers.clear()
        self._watched = self._completed_watched = 0
        if self._owns_timer:
            self.timer.close()

    def _watch(self, key: Hashable, op: T) -> None:
        watchers = self._watchers.get(key)
        if watchers is None:
            watchers = self._watchers[key] = {}
        if id(op) not in watchers:
            watchers[id(op)] = op
            op._watch_count += 1
            self._watched += 1

    def _unwatched(self, op: T) -> None:
        """Account for one watch-list entry of ``op`` having been removed."""
        op._watch_count -= 1
        self._watched -= 1
        if op.is_completed:
            self._completed_watched -= 1

    def _note_completed_while_watched(self, op: DelayedOperation) -> None:
        """Called by ``op.force_complete``: its entries are now waiting to be purged."""
        self._completed_watched += op._watch_count
        if self._completed_watched > self.purge_interval and self._purge_handle is None:
            try:
                loop = self.timer.loop
            except RuntimeError:  # no loop to defer to: purge right away
                self.purge_completed()
                return
            # Deferred: we may be inside check_and_complete's walk over a watch list.
            self._purge_handle = loop.call_soon(self.purge_completed)
