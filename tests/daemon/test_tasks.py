"""Tests for klog.daemon.tasks: stop_task (a cancellation swallowed once -- Python 3.11's
wait_for race -- is repeated, a task that never ends does not hang the caller, and a task's
exception is consumed) and answer (a queued request's future settled either way)."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from klog.daemon.tasks import answer, returning, stop_task


def test_a_swallowed_cancellation_is_repeated_until_the_task_ends() -> None:
    async def go() -> None:
        swallowed = 0

        async def loop_that_loses_one_cancel() -> None:
            nonlocal swallowed
            while True:
                try:
                    await asyncio.sleep(10)
                except asyncio.CancelledError:
                    if swallowed:
                        raise
                    swallowed += 1  # as wait_for may: the loop goes round again

        task = asyncio.create_task(loop_that_loses_one_cancel())
        await asyncio.sleep(0)
        assert await stop_task(task, timeout=5) is True
        assert task.cancelled() and swallowed == 1

    asyncio.run(asyncio.wait_for(go(), 10))


def test_a_task_that_never_ends_is_left_after_the_timeout() -> None:
    async def go() -> None:
        release = asyncio.Event()

        async def stubborn() -> None:
            while not release.is_set():
                with contextlib.suppress(asyncio.CancelledError):
                    await asyncio.sleep(10)

        task = asyncio.create_task(stubborn())
        await asyncio.sleep(0)
        loop = asyncio.get_running_loop()
        started = loop.time()
        assert await stop_task(task, timeout=0.3) is False
        assert 0.25 <= loop.time() - started < 2
        release.set()
        task.cancel()
        await asyncio.wait([task], timeout=1)

    asyncio.run(asyncio.wait_for(go(), 10))


def test_finished_failed_and_missing_tasks() -> None:
    async def go() -> None:
        async def fails() -> None:
            raise RuntimeError("boom")

        task = asyncio.create_task(fails())
        await asyncio.sleep(0)
        assert await stop_task(task) is True  # its exception consumed, not raised
        assert await stop_task(None) is True

    asyncio.run(asyncio.wait_for(go(), 10))


def test_answer_settles_the_future_with_the_result_or_the_error() -> None:
    async def go() -> None:
        loop = asyncio.get_running_loop()
        ok: asyncio.Future[int] = loop.create_future()
        await answer(ok, lambda: returning(7))
        assert ok.result() == 7

        async def fail() -> None:
            raise ValueError("boom")

        bad: asyncio.Future[int] = loop.create_future()
        with pytest.raises(ValueError):
            await answer(bad, fail)
        with pytest.raises(ValueError, match="boom"):
            bad.result()

        gone: asyncio.Future[int] = loop.create_future()
        gone.cancel()  # the asker gave up: nothing to settle, no error
        await answer(gone, lambda: returning(1))

    asyncio.run(go())
