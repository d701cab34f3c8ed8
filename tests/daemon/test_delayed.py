"""DelayedProduce in a real purgatory: completes when every partition's check says done,
keeps each partition's error, and answers REQUEST_TIMED_OUT for what is still pending at
the timeout. DelayedFetch completes when enough is readable, decided by comparing offsets
(fetch position against the end its isolation may read to), and reads only on completion:
the bytes between them on one segment against min_bytes (each partition's capped at its
max bytes), the end on another segment, errors, throttled partitions counting nothing."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from klog.daemon.delayed import DelayedFetch, DelayedProduce, FetchParams
from klog.daemon.partition import FetchIsolation, NotLeaderOrFollowerError
from klog.daemon.purgatory import DelayedOperationPurgatory
from klog.protocol.errors import ErrorCode
from klog.storage.values import LogOffsetMetadata as Meta

Purgatory = DelayedOperationPurgatory[Any]
PurgatoryTest = Callable[[Purgatory], Awaitable[None]]
TP = ("t", 0)  # the partition of the fetch tests that need only one


def in_purgatory(name: str) -> Callable[[PurgatoryTest], Callable[[], None]]:
    """Run the decorated coroutine on a fresh loop with a fresh purgatory (``name``: Kafka's
    "Produce" or "Fetch"), shut down afterwards whatever happened: the set-up every test
    here shares. The test takes the purgatory as its one argument."""
    def decorate(test: PurgatoryTest) -> Callable[[], None]:
        def run() -> None:
            async def go() -> None:
                purgatory: Purgatory = DelayedOperationPurgatory(name)
                try:
                    await test(purgatory)
                finally:
                    purgatory.shutdown()

            asyncio.run(go())

        # No functools.wraps: pytest would follow __wrapped__ and ask for a fixture.
        run.__name__, run.__qualname__ = test.__name__, test.__qualname__
        run.__doc__ = test.__doc__
        return run
    return decorate


@in_purgatory("Produce")
async def test_delayed_produce_completes_per_partition(purgatory: Purgatory) -> None:
    hw = {("a", 0): 0, ("b", 0): 0}
    errors = {("a", 0): 0, ("b", 0): int(ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND)}

    def check(tp: tuple[str, int], offset: int) -> tuple[bool, int]:
        return (hw[tp] >= offset, errors[tp]) if hw[tp] >= offset else (False, 0)

    done: asyncio.Future[dict[tuple[str, int], int]] = \
        asyncio.get_running_loop().create_future()
    op = DelayedProduce(10_000, {("a", 0): 5, ("b", 0): 3}, check, done)
    assert not purgatory.try_complete_else_watch(op, [("a", 0), ("b", 0)])
    hw[("a", 0)] = 5
    assert purgatory.check_and_complete(("a", 0)) == 0  # b still pending
    assert not done.done()
    hw[("b", 0)] = 4
    assert purgatory.check_and_complete(("b", 0)) == 1
    assert await done == {("a", 0): 0,
                          ("b", 0): ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND}
    assert purgatory.delayed() == 0


@in_purgatory("Produce")
async def test_delayed_produce_times_out_pending_partitions(purgatory: Purgatory) -> None:
    done: asyncio.Future[dict[tuple[str, int], int]] = \
        asyncio.get_running_loop().create_future()

    def check(tp: tuple[str, int], offset: int) -> tuple[bool, int]:
        return (True, 0) if tp == ("a", 0) else (False, 0)

    loop = asyncio.get_running_loop()
    started = loop.time()
    op = DelayedProduce(150, {("a", 0): 1, ("b", 0): 1}, check, done)
    purgatory.try_complete_else_watch(op, [("a", 0), ("b", 0)])
    result = await asyncio.wait_for(done, 5)
    assert result == {("a", 0): 0, ("b", 0): ErrorCode.REQUEST_TIMED_OUT}
    assert 0.1 <= loop.time() - started < 2


class Offsets:
    """The replica manager as a DelayedFetch sees it: ends per (partition, isolation)."""

    def __init__(self) -> None:
        self.ends: dict[tuple[tuple[str, int], FetchIsolation], Meta | Exception] = {}
        self.throttled: set[tuple[str, int]] = set()
        self.asked: list[tuple[str, int, int, FetchIsolation]] = []

    def end_offset_metadata(self, topic: str, partition: int, current_leader_epoch: int,
                            isolation: FetchIsolation, fetch_only_leader: bool = True
                            ) -> Meta:
        self.asked.append((topic, partition, current_leader_epoch, isolation))
        end = self.ends[((topic, partition), isolation)]
        if isinstance(end, Exception):
            raise end
        return end

    def should_leader_throttle(self, topic: str, partition: int, replica_id: int) -> bool:
        return (topic, partition) in self.throttled


def _fetch(offsets: Offsets, starts: dict[tuple[str, int], Meta], *, min_bytes: int = 1,
           replica_id: int = -1, isolation: FetchIsolation = FetchIsolation.HIGH_WATERMARK,
           max_bytes: int = 1 << 20) -> tuple[DelayedFetch[str], list[int],
                                              asyncio.Future[str]]:
    """A DelayedFetch over ``starts``; the list counts its reads."""
    reads: list[int] = []
    done: asyncio.Future[str] = asyncio.get_running_loop().create_future()

    def read() -> str:
        reads.append(1)
        return "read"

    params = FetchParams(replica_id, 10_000, min_bytes, 1 << 30, isolation)
    wanted = [(t, p, m.message_offset, max_bytes, 3) for (t, p), m in starts.items()]
    return (DelayedFetch(10_000, params, wanted, list(starts.values()), offsets, read, done),
            reads, done)


@in_purgatory("Fetch")
async def test_delayed_fetch_completes_when_enough(purgatory: Purgatory) -> None:
    offsets = Offsets()
    offsets.ends[(TP, FetchIsolation.HIGH_WATERMARK)] = Meta(10, 0, 500)
    op, reads, done = _fetch(offsets, {TP: Meta(10, 0, 500)}, min_bytes=300)
    assert not purgatory.try_complete_else_watch(op, [TP])
    offsets.ends[(TP, FetchIsolation.HIGH_WATERMARK)] = Meta(12, 0, 700)  # 200 bytes
    assert purgatory.check_and_complete(TP) == 0
    offsets.ends[(TP, FetchIsolation.HIGH_WATERMARK)] = Meta(13, 0, 800)  # 300 bytes
    assert reads == []  # every check compared offsets; nothing was read
    assert purgatory.check_and_complete(TP) == 1
    assert await asyncio.wait_for(done, 1) == "read" and reads == [1]
    assert offsets.asked[-1] == ("t", 0, 3, FetchIsolation.HIGH_WATERMARK)


@in_purgatory("Fetch")
async def test_bytes_accumulate_over_partitions_each_capped_at_its_max_bytes(
    purgatory: Purgatory,
) -> None:
    offsets = Offsets()
    a, b = ("a", 0), ("b", 1)
    offsets.ends[(a, FetchIsolation.HIGH_WATERMARK)] = Meta(100, 0, 10_000)  # 10,000 new
    offsets.ends[(b, FetchIsolation.HIGH_WATERMARK)] = Meta(5, 0, 0)
    op, reads, _done = _fetch(offsets, {a: Meta(0, 0, 0), b: Meta(5, 0, 0)},
                              min_bytes=1500, max_bytes=1000)
    assert not purgatory.try_complete_else_watch(op, [a, b])  # a counts 1000 only
    offsets.ends[(b, FetchIsolation.HIGH_WATERMARK)] = Meta(6, 0, 499)
    assert purgatory.check_and_complete(b) == 0  # 1499
    offsets.ends[(b, FetchIsolation.HIGH_WATERMARK)] = Meta(7, 0, 500)
    assert purgatory.check_and_complete(b) == 1 and reads == [1]


@in_purgatory("Fetch")
async def test_the_end_on_a_newer_segment_completes_the_fetch(purgatory: Purgatory) -> None:
    offsets = Offsets()
    offsets.ends[(TP, FetchIsolation.LOG_END)] = Meta(40, 0, 9_000)
    op, reads, _done = _fetch(offsets, {TP: Meta(40, 0, 9_000)}, min_bytes=1 << 20,
                              replica_id=2, isolation=FetchIsolation.LOG_END)
    assert not purgatory.try_complete_else_watch(op, [TP])
    # A roll with no new offset: the same end, now at the new segment's start.
    offsets.ends[(TP, FetchIsolation.LOG_END)] = Meta(40, 40, 0)
    assert purgatory.check_and_complete(TP) == 0
    # One small batch on the new segment: far less than min_bytes, but the rest of
    # the fetch offset's segment is readable.
    offsets.ends[(TP, FetchIsolation.LOG_END)] = Meta(41, 40, 80)
    assert purgatory.check_and_complete(TP) == 1 and reads == [1]


@in_purgatory("Fetch")
async def test_the_end_on_an_older_segment_completes_the_fetch(purgatory: Purgatory) -> None:
    offsets = Offsets()
    offsets.ends[(TP, FetchIsolation.HIGH_WATERMARK)] = Meta(50, 40, 100)
    op, reads, _done = _fetch(offsets, {TP: Meta(50, 40, 100)}, min_bytes=1 << 20)
    assert not purgatory.try_complete_else_watch(op, [TP])
    offsets.ends[(TP, FetchIsolation.HIGH_WATERMARK)] = Meta(30, 0, 5_000)  # truncated
    assert purgatory.check_and_complete(TP) == 1 and reads == [1]


@in_purgatory("Fetch")
async def test_read_committed_waits_for_the_last_stable_offset(purgatory: Purgatory) -> None:
    offsets = Offsets()
    offsets.ends[(TP, FetchIsolation.TXN_COMMITTED)] = Meta(7, 0, 300)
    offsets.ends[(TP, FetchIsolation.HIGH_WATERMARK)] = Meta(20, 0, 2_000)
    op, reads, _done = _fetch(offsets, {TP: Meta(7, 0, 300)},
                              isolation=FetchIsolation.TXN_COMMITTED)
    assert not purgatory.try_complete_else_watch(op, [TP])  # the HW is past: no matter
    offsets.ends[(TP, FetchIsolation.TXN_COMMITTED)] = Meta(21, 0, 2_100)
    assert purgatory.check_and_complete(TP) == 1 and reads == [1]
    assert {a[3] for a in offsets.asked} == {FetchIsolation.TXN_COMMITTED}


@in_purgatory("Fetch")
async def test_a_fetch_ahead_of_the_end_waits(purgatory: Purgatory) -> None:
    offsets = Offsets()
    # A consumer at the log end while the high watermark lags behind it.
    offsets.ends[(TP, FetchIsolation.HIGH_WATERMARK)] = Meta(5, 0, 500)
    op, reads, _done = _fetch(offsets, {TP: Meta(9, 0, 900)})
    assert not purgatory.try_complete_else_watch(op, [TP])
    offsets.ends[(TP, FetchIsolation.HIGH_WATERMARK)] = Meta(9, 0, 900)
    assert purgatory.check_and_complete(TP) == 0
    offsets.ends[(TP, FetchIsolation.HIGH_WATERMARK)] = Meta(10, 0, 950)
    assert purgatory.check_and_complete(TP) == 1 and reads == [1]


@in_purgatory("Fetch")
async def test_an_error_completes_the_fetch_for_its_read_to_answer(purgatory: Purgatory) -> None:
    offsets = Offsets()
    offsets.ends[(TP, FetchIsolation.HIGH_WATERMARK)] = Meta(5, 0, 500)
    op, reads, done = _fetch(offsets, {TP: Meta(5, 0, 500)})
    assert not purgatory.try_complete_else_watch(op, [TP])
    offsets.ends[(TP, FetchIsolation.HIGH_WATERMARK)] = NotLeaderOrFollowerError("moved")
    assert purgatory.check_and_complete(TP) == 1
    assert await done == "read" and reads == [1]


@in_purgatory("Fetch")
async def test_a_throttled_partition_counts_nothing(purgatory: Purgatory) -> None:
    offsets = Offsets()
    offsets.ends[(TP, FetchIsolation.LOG_END)] = Meta(5, 0, 500)
    offsets.throttled.add(TP)
    op, reads, _done = _fetch(offsets, {TP: Meta(5, 0, 500)}, replica_id=2,
                              isolation=FetchIsolation.LOG_END)
    assert not purgatory.try_complete_else_watch(op, [TP])
    offsets.ends[(TP, FetchIsolation.LOG_END)] = Meta(9, 9, 50)  # even on a new segment
    assert purgatory.check_and_complete(TP) == 0 and reads == []
    offsets.throttled.clear()  # the quota allows it again
    assert purgatory.check_and_complete(TP) == 1 and reads == [1]


@in_purgatory("Fetch")
async def test_a_fetch_whose_client_went_away_completes_without_reading(
    purgatory: Purgatory,
) -> None:
    offsets = Offsets()
    offsets.ends[(TP, FetchIsolation.HIGH_WATERMARK)] = Meta(5, 0, 500)
    op, reads, done = _fetch(offsets, {TP: Meta(5, 0, 500)})
    assert not purgatory.try_complete_else_watch(op, [TP])
    done.cancel()
    assert purgatory.check_and_complete(TP) == 1
    assert op.is_completed and reads == []


@in_purgatory("Fetch")
async def test_a_failing_final_read_reaches_the_waiting_fetch(purgatory: Purgatory) -> None:
    offsets = Offsets()
    offsets.ends[(TP, FetchIsolation.HIGH_WATERMARK)] = Meta(5, 0, 500)
    done: asyncio.Future[str] = asyncio.get_running_loop().create_future()

    def read() -> str:
        raise OSError("disk gone")

    params = FetchParams(-1, 10_000, 1, 1 << 20, FetchIsolation.HIGH_WATERMARK)
    op = DelayedFetch(10_000, params, [("t", 0, 5, 1 << 20, -1)], [Meta(5, 0, 500)],
                      offsets, read, done)
    assert not purgatory.try_complete_else_watch(op, [TP])
    offsets.ends[(TP, FetchIsolation.HIGH_WATERMARK)] = Meta(6, 0, 600)
    purgatory.check_and_complete(TP)
    try:
        await done
    except OSError as exc:
        assert "disk gone" in str(exc)
    else:
        raise AssertionError("the read's failure was lost")
