"""DelayedProduce in a real purgatory: completes when every partition's check says done,
keeps each partition's error, and answers REQUEST_TIMED_OUT for what is still pending at
the timeout; DelayedFetch completes when enough is readable."""

from __future__ import annotations

import asyncio

from klog.daemon.delayed import DelayedFetch, DelayedProduce
from klog.daemon.purgatory import DelayedOperationPurgatory
from klog.protocol.errors import ErrorCode


def test_delayed_produce_completes_per_partition() -> None:
    async def go() -> None:
        purgatory: DelayedOperationPurgatory[DelayedProduce] = \
            DelayedOperationPurgatory("Produce")
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
        purgatory.shutdown()

    asyncio.run(go())


def test_delayed_produce_times_out_pending_partitions() -> None:
    async def go() -> None:
        purgatory: DelayedOperationPurgatory[DelayedProduce] = \
            DelayedOperationPurgatory("Produce")
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
        purgatory.shutdown()

    asyncio.run(go())


def test_delayed_fetch_completes_when_enough() -> None:
    async def go() -> None:
        purgatory: DelayedOperationPurgatory[DelayedFetch] = DelayedOperationPurgatory("Fetch")
        enough = False
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        op = DelayedFetch(10_000, lambda: enough, done)
        assert not purgatory.try_complete_else_watch(op, [("t", 0)])
        enough = True
        assert purgatory.check_and_complete(("t", 0)) == 1
        await asyncio.wait_for(done, 1)
        purgatory.shutdown()

    asyncio.run(go())
