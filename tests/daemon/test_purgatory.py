"""Tests for klog.daemon.purgatory: the timing wheel, its asyncio timer, delayed operations.

Two styles: a fake clock with a loop that is never run (the test calls
``timer.advance_clock()`` itself, fully deterministic), and a real running loop with small
delays for what only a real loop shows (the armed handle, call_soon, threads). Real-loop
tests wait with a generous deadline and assert only lower bounds on elapsed time.
"""

from __future__ import annotations

import asyncio
import logging
import random
import threading
import time
from collections.abc import Callable, Iterator

import pytest

from klog.daemon.purgatory import (
    DelayedOperation,
    DelayedOperationPurgatory,
    Timer,
    TimerTask,
)

DEADLINE_S = 10.0


class FakeClock:
    """A monotonic clock in seconds that moves only when told to."""

    def __init__(self, start_ms: int = 1_000_000) -> None:
        self.ms = start_ms

    def __call__(self) -> float:
        return self.ms / 1000

    def advance(self, ms: int) -> None:
        self.ms += ms


class Task(TimerTask):
    def __init__(self, delay_ms: int, log: list[Task] | None = None) -> None:
        super().__init__(delay_ms)
        self.runs = 0
        self.log = log

    def run(self) -> None:
        self.runs += 1
        if self.log is not None:
            self.log.append(self)


class Op(DelayedOperation):
    """Completes when ``ready()`` says so; records its callbacks in order."""

    def __init__(self, delay_ms: int, ready: Callable[[], bool] = lambda: False) -> None:
        super().__init__(delay_ms)
        self.ready = ready
        self.events: list[str] = []
        self.tries = 0

    def try_complete(self) -> bool:
        self.tries += 1
        return self.force_complete() if self.ready() else False

    def on_complete(self) -> None:
        self.events.append("complete")

    def on_expiration(self) -> None:
        self.events.append("expire")


class Flag:
    def __init__(self) -> None:
        self.value = False

    def __call__(self) -> bool:
        return self.value


@pytest.fixture
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    """A loop that is never run: handles armed on it never fire by themselves."""
    loop = asyncio.new_event_loop()
    yield loop
    loop.close()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


async def until(predicate: Callable[[], bool]) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached before the deadline"
        await asyncio.sleep(0.001)


def bucket_entries(timer: Timer) -> int:
    return sum(len(bucket.entries) for bucket in timer.wheel._all_buckets())


# --- Timer and TimingWheel, fake clock -------------------------------------------------------


@pytest.mark.parametrize(("tick_ms", "wheel_size"), [(1, 2), (1, 4), (1, 20), (3, 20), (5, 8)])
def test_timer_matches_a_naive_model(
    loop: asyncio.AbstractEventLoop, tick_ms: int, wheel_size: int
) -> None:
    """Random adds, re-adds, cancels and clock moves: each task runs once, in the first pass
    whose tick reaches its expiration's tick, never earlier (tick 1: at or after it)."""
    rng = random.Random(tick_ms * 1000 + wheel_size)
    clock = FakeClock(start_ms=rng.randrange(10**9))
    timer = Timer(tick_ms=tick_ms, wheel_size=wheel_size, clock=clock, loop=loop)
    ran: list[Task] = []
    pending: dict[Task, int] = {}  # task -> expiration_ms
    scales = [3, 50, 5_000, 2_000_000]

    for _ in range(3000):
        action = rng.random()
        if action < 0.45:
            task = Task(rng.randrange(-3, rng.choice(scales)), ran)
            timer.add(task)
            pending[task] = clock.ms + task.delay_ms
        elif action < 0.55 and pending:
            task = rng.choice(list(pending))
            task.delay_ms = rng.randrange(0, rng.choice(scales))
            timer.add(task)  # re-adding replaces the previous schedule
            pending[task] = clock.ms + task.delay_ms
        elif action < 0.7 and pending:
            task = rng.choice(list(pending))
            task.cancel()
            del pending[task]
        else:
            clock.advance(rng.randrange(0, rng.choice(scales)))
            ran.clear()
            count = timer.advance_clock()
            due = {t for t, exp in pending.items() if exp // tick_ms <= clock.ms // tick_ms}
            assert set(ran) == due
            assert count == len(ran) == len(due)
            for task in due:
                del pending[task]
            assert timer.size() == len(pending) == bucket_entries(timer)

    clock.advance(10_000_000)
    ran.clear()
    timer.advance_clock()
    assert set(ran) == set(pending)
    assert timer.size() == 0
    assert timer._queue.earliest() is None


def test_now_ms_is_exact_for_whole_milliseconds(loop: asyncio.AbstractEventLoop) -> None:
    clock = FakeClock(start_ms=1_053_158_559)  # 1053158.559 * 1000 == 1053158558.9999999
    assert Timer(clock=clock, loop=loop).now_ms() == 1_053_158_559


def test_overflow_wheels_are_created_on_demand(
    loop: asyncio.AbstractEventLoop, clock: FakeClock
) -> None:
    timer = Timer(tick_ms=1, wheel_size=20, clock=clock, loop=loop)
    short = Task(19)
    timer.add(short)
    assert timer.wheel.overflow_wheel is None
    assert timer.wheel.levels() == 1

    task = Task(2000)  # spans: 20 ms, 400 ms, 8 s -> lands in the third level
    timer.add(task)
    assert timer.wheel.levels() == 3
    assert timer.wheel.overflow_wheel is not None
    assert timer.wheel.overflow_wheel.tick_ms == 20
    assert timer.wheel.overflow_wheel.overflow_wheel is not None
    assert timer.wheel.overflow_wheel.overflow_wheel.tick_ms == 400

    for step_ms in (19, 381, 1000, 599):  # cascades down the levels, reaching t+1999
        clock.advance(step_ms)
        timer.advance_clock()
        assert task.runs == 0
        assert timer.size() == 1
    assert short.runs == 1
    clock.advance(1)
    assert timer.advance_clock() == 1
    assert task.runs == 1
    assert timer.size() == 0


def test_an_idle_timer_keeps_short_delays_in_the_finest_wheel(
    loop: asyncio.AbstractEventLoop, clock: FakeClock
) -> None:
    timer = Timer(tick_ms=1, wheel_size=20, clock=clock, loop=loop)
    clock.advance(3_600_000)  # an hour with nothing scheduled
    task = Task(5)
    timer.add(task)
    assert timer.wheel.levels() == 1
    clock.advance(4)
    assert timer.advance_clock() == 0
    clock.advance(1)
    assert timer.advance_clock() == 1


def test_cancel_is_immediate_and_idempotent(
    loop: asyncio.AbstractEventLoop, clock: FakeClock
) -> None:
    timer = Timer(clock=clock, loop=loop)
    task = Task(10)
    timer.add(task)
    assert timer.size() == 1
    task.cancel()
    task.cancel()
    assert timer.size() == 0
    assert timer._handle is None  # an emptied bucket does not keep the loop armed
    clock.advance(10)
    assert timer.advance_clock() == 0
    assert task.runs == 0


def test_a_due_task_is_not_run_inside_add(
    loop: asyncio.AbstractEventLoop, clock: FakeClock
) -> None:
    timer = Timer(clock=clock, loop=loop)
    task = Task(0)
    timer.add(task)
    assert task.runs == 0
    assert timer.size() == 0  # already due: waiting to run, not in the wheel
    assert timer.advance_clock() == 1
    assert task.runs == 1

    cancelled = Task(-5)
    timer.add(cancelled)
    cancelled.cancel()
    assert timer.advance_clock() == 0
    assert cancelled.runs == 0


def test_a_task_cancelled_by_another_in_the_same_pass_does_not_run(
    loop: asyncio.AbstractEventLoop, clock: FakeClock
) -> None:
    timer = Timer(clock=clock, loop=loop)
    victim = Task(5)

    class Killer(TimerTask):
        def run(self) -> None:
            victim.cancel()

    timer.add(Killer(5))
    timer.add(victim)
    clock.advance(5)
    assert timer.advance_clock() == 1
    assert victim.runs == 0


def test_a_task_that_closes_the_timer_stops_the_pass(
    loop: asyncio.AbstractEventLoop, clock: FakeClock
) -> None:
    timer = Timer(clock=clock, loop=loop)
    after = Task(5)

    class Closer(TimerTask):
        def run(self) -> None:
            timer.close()

    timer.add(Closer(5))
    timer.add(after)
    clock.advance(5)
    assert timer.advance_clock() == 1
    assert after.runs == 0
    assert timer._handle is None


def test_ten_thousand_inserts_and_cancels_leave_nothing_behind(
    loop: asyncio.AbstractEventLoop, clock: FakeClock
) -> None:
    rng = random.Random(7)
    timer = Timer(clock=clock, loop=loop)
    tasks = [Task(rng.randrange(1, 30_000)) for _ in range(10_000)]
    for task in tasks:
        timer.add(task)
    assert timer.size() == 10_000 == bucket_entries(timer)
    for task in tasks:
        task.cancel()
    assert timer.size() == 0 == bucket_entries(timer)
    assert timer._queue.earliest() is None
    assert timer._handle is None
    clock.advance(30_000)
    assert timer.advance_clock() == 0


def test_timer_rejects_bad_parameters_and_adds_after_close(
    loop: asyncio.AbstractEventLoop, clock: FakeClock
) -> None:
    with pytest.raises(ValueError):
        Timer(tick_ms=0)
    with pytest.raises(ValueError):
        Timer(wheel_size=1)
    timer = Timer(clock=clock, loop=loop)
    task = Task(10)
    timer.add(task)
    timer.close()
    assert timer.size() == 0
    assert timer._handle is None
    clock.advance(10)
    assert timer.advance_clock() == 0
    assert task.runs == 0
    with pytest.raises(RuntimeError):
        timer.add(Task(1))


def test_a_failing_task_is_logged_and_the_others_still_run(
    loop: asyncio.AbstractEventLoop, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    class Boom(TimerTask):
        def run(self) -> None:
            raise RuntimeError("boom")

    timer = Timer(clock=clock, loop=loop)
    after = Task(5)
    timer.add(Boom(5))
    timer.add(after)
    later = Task(50)
    timer.add(later)
    clock.advance(5)
    with caplog.at_level(logging.ERROR, logger="klog.daemon.purgatory"):
        assert timer.advance_clock() == 2
    assert after.runs == 1
    assert any("boom" in (r.exc_text or "") for r in caplog.records)
    clock.advance(45)
    assert timer.advance_clock() == 1
    assert later.runs == 1


# --- Timer on a real loop --------------------------------------------------------------------


def test_timer_fires_from_one_armed_loop_handle() -> None:
    async def main() -> None:
        timer = Timer()
        fired = asyncio.Event()
        passes = 0
        on_handle = timer._on_handle

        def counting_on_handle() -> None:
            nonlocal passes
            passes += 1
            on_handle()

        timer._on_handle = counting_on_handle  # type: ignore[method-assign]

        class SetEvent(TimerTask):
            def run(self) -> None:
                fired.set()

        assert timer._handle is None
        start = time.monotonic()
        timer.add(SetEvent(30))
        handle = timer._handle
        assert handle is not None
        timer.add(Task(40))  # later than the armed bucket: the same handle stays
        assert timer._handle is handle
        await asyncio.wait_for(fired.wait(), DEADLINE_S)
        assert time.monotonic() - start >= 0.029
        assert passes <= 3  # woken for the bucket, not polled every tick
        await until(lambda: timer.size() == 0)
        assert timer._handle is None  # nothing pending, nothing armed
        timer.close()

    asyncio.run(main())


def test_an_earlier_task_re_arms_the_handle() -> None:
    async def main() -> None:
        timer = Timer()
        slow, fast = Task(5_000), Task(10)
        timer.add(slow)
        slow_handle = timer._handle
        timer.add(fast)
        assert timer._handle is not slow_handle
        await until(lambda: fast.runs == 1)
        assert slow.runs == 0
        assert timer._handle is not None  # now armed for the slow one
        timer.close()

    asyncio.run(main())


# --- DelayedOperation and the purgatory ------------------------------------------------------


def test_expiry_calls_on_complete_then_on_expiration_once() -> None:
    async def main() -> None:
        purgatory: DelayedOperationPurgatory[Op] = DelayedOperationPurgatory("fetch")
        op = Op(20)
        start = time.monotonic()
        assert purgatory.try_complete_else_watch(op, ["t-0"]) is False
        assert purgatory.delayed() == 1
        assert purgatory.watched() == 1
        await until(lambda: op.is_completed)
        assert time.monotonic() - start >= 0.019
        assert op.events == ["complete", "expire"]
        assert purgatory.delayed() == 0
        assert purgatory.timer.size() == 0
        await asyncio.sleep(0.03)
        assert op.events == ["complete", "expire"]
        assert op.force_complete() is False
        # The expired op stays on its watch list until the key is next checked.
        assert purgatory.check_and_complete("t-0") == 0
        assert purgatory.watched() == 0
        purgatory.shutdown()

    asyncio.run(main())


def test_completion_before_expiry_cancels_the_timeout(
    loop: asyncio.AbstractEventLoop, clock: FakeClock
) -> None:
    timer = Timer(clock=clock, loop=loop)
    purgatory: DelayedOperationPurgatory[Op] = DelayedOperationPurgatory("produce", timer)
    ready = Flag()
    op = Op(50, ready)
    assert purgatory.try_complete_else_watch(op, ["t-0"]) is False
    assert timer.size() == 1
    assert purgatory.check_and_complete("t-0") == 0
    ready.value = True
    assert purgatory.check_and_complete("t-0") == 1
    assert op.events == ["complete"]
    assert timer.size() == 0
    assert timer._handle is None
    assert purgatory.delayed() == 0
    assert purgatory.watched() == 0
    clock.advance(100)
    assert timer.advance_clock() == 0
    assert op.events == ["complete"]


def test_expiry_with_a_fake_clock_is_exact(
    loop: asyncio.AbstractEventLoop, clock: FakeClock
) -> None:
    timer = Timer(clock=clock, loop=loop)
    purgatory: DelayedOperationPurgatory[Op] = DelayedOperationPurgatory("fetch", timer)
    op = Op(500)
    purgatory.try_complete_else_watch(op, ["t-0"])
    clock.advance(499)
    timer.advance_clock()
    assert op.events == []
    clock.advance(1)
    timer.advance_clock()
    assert op.events == ["complete", "expire"]


def test_force_complete_is_true_exactly_once(loop: asyncio.AbstractEventLoop) -> None:
    op = Op(10)
    assert op.is_completed is False
    assert op.force_complete() is True
    assert op.force_complete() is False
    assert op.is_completed is True
    assert op.events == ["complete"]


def test_check_and_complete_only_touches_its_key(
    loop: asyncio.AbstractEventLoop, clock: FakeClock
) -> None:
    purgatory: DelayedOperationPurgatory[Op] = DelayedOperationPurgatory(
        "fetch", Timer(clock=clock, loop=loop)
    )
    a_ready, b_ready = Flag(), Flag()
    a_ops = [Op(100, a_ready) for _ in range(3)]
    b_op = Op(100, b_ready)
    for op in a_ops:
        purgatory.try_complete_else_watch(op, ["a"])
    purgatory.try_complete_else_watch(b_op, ["b"])
    assert purgatory.check_and_complete("missing") == 0
    a_ready.value = b_ready.value = True
    assert purgatory.check_and_complete("a") == 3
    assert all(op.events == ["complete"] for op in a_ops)
    assert b_op.events == []
    assert purgatory.watched() == 1
    assert purgatory.delayed() == 1
    assert purgatory.check_and_complete("b") == 1
    assert purgatory.watched() == purgatory.delayed() == 0
    assert purgatory._watchers == {}


def test_an_op_under_several_keys_completes_once(
    loop: asyncio.AbstractEventLoop, clock: FakeClock
) -> None:
    purgatory: DelayedOperationPurgatory[Op] = DelayedOperationPurgatory(
        "produce", Timer(clock=clock, loop=loop)
    )
    ready = Flag()
    op = Op(100, ready)
    assert purgatory.try_complete_else_watch(op, ["a", "b", "c", "b"]) is False
    assert purgatory.watched() == 3  # duplicate keys are watched once
    ready.value = True
    assert purgatory.check_and_complete("b") == 1
    assert purgatory.check_and_complete("a") == 0
    assert op.events == ["complete"]
    assert purgatory.watched() == 1  # "c" still holds it until checked or purged
    assert purgatory.purge_completed() == 1
    assert purgatory.watched() == 0
    assert purgatory.check_and_complete("c") == 0
    clock.advance(100)
    purgatory.timer.advance_clock()
    assert op.events == ["complete"]


def test_an_op_that_becomes_ready_while_being_watched_completes_now(
    loop: asyncio.AbstractEventLoop, clock: FakeClock
) -> None:
    """Kafka's race rule: try, watch, try again; the second try must not be skipped."""
    timer = Timer(clock=clock, loop=loop)
    purgatory: DelayedOperationPurgatory[Op] = DelayedOperationPurgatory("produce", timer)
    calls = 0

    def ready_on_second_try() -> bool:
        nonlocal calls
        calls += 1
        return calls >= 2

    op = Op(100, ready_on_second_try)
    assert purgatory.try_complete_else_watch(op, ["a"]) is True
    assert op.tries == 2
    assert op.events == ["complete"]
    assert timer.size() == 0
    assert purgatory.delayed() == 0


def test_an_op_ready_at_once_is_never_watched(
    loop: asyncio.AbstractEventLoop, clock: FakeClock
) -> None:
    timer = Timer(clock=clock, loop=loop)
    purgatory: DelayedOperationPurgatory[Op] = DelayedOperationPurgatory("fetch", timer)
    op = Op(100, lambda: True)
    assert purgatory.try_complete_else_watch(op, ["a"]) is True
    assert op.tries == 1
    assert purgatory.watched() == 0
    assert timer.size() == 0
    assert purgatory.try_complete_else_watch(op, ["a"]) is False  # already completed
    assert purgatory.watched() == 0


def test_watch_keys_and_ownership_are_checked(
    loop: asyncio.AbstractEventLoop, clock: FakeClock
) -> None:
    timer = Timer(clock=clock, loop=loop)
    first: DelayedOperationPurgatory[Op] = DelayedOperationPurgatory("a", timer)
    second: DelayedOperationPurgatory[Op] = DelayedOperationPurgatory("b", timer)
    op = Op(10)
    with pytest.raises(ValueError):
        first.try_complete_else_watch(op, [])
    first.try_complete_else_watch(op, ["k"])
    with pytest.raises(ValueError):
        second.try_complete_else_watch(op, ["k"])


def test_cancel_for_key_cancels_timeouts_without_completing(
    loop: asyncio.AbstractEventLoop, clock: FakeClock
) -> None:
    timer = Timer(clock=clock, loop=loop)
    purgatory: DelayedOperationPurgatory[Op] = DelayedOperationPurgatory("join", timer)
    ready = Flag()
    both, only_a, done = Op(50, ready), Op(50), Op(50, ready)
    purgatory.try_complete_else_watch(both, ["a", "b"])
    purgatory.try_complete_else_watch(only_a, ["a"])
    purgatory.try_complete_else_watch(done, ["a", "c"])
    ready.value = True
    assert purgatory.check_and_complete("c") == 1  # "done"; still listed under "a"
    assert purgatory.cancel_for_key("missing") == []
    cancelled = purgatory.cancel_for_key("a")
    assert cancelled == [both, only_a]  # pending ones only, in watch order
    assert both.events == only_a.events == []
    assert purgatory.delayed() == 0
    assert timer.size() == 0
    assert purgatory.watched() == 1  # "both" is still watched under "b"
    assert purgatory.check_and_complete("b") == 1
    assert both.events == ["complete"]
    clock.advance(50)
    assert timer.advance_clock() == 0
    assert only_a.events == []
    assert purgatory.watched() == purgatory.delayed() == 0


def test_purging_keeps_watch_lists_bounded_under_a_flood_of_short_fetches() -> None:
    """Each op waits on its partition and on a shared key; completing it through its own key
    leaves an entry on the shared list that only the purge removes."""

    async def flood(purge_interval: int) -> tuple[int, int, DelayedOperationPurgatory[Op]]:
        purgatory: DelayedOperationPurgatory[Op] = DelayedOperationPurgatory(
            "fetch", purge_interval=purge_interval
        )
        ready = Flag()
        peak = 0
        for i in range(10_000):
            op = Op(30_000, ready)
            assert purgatory.try_complete_else_watch(op, ["shared", i]) is False
            ready.value = True
            assert purgatory.check_and_complete(i) == 1
            ready.value = False
            peak = max(peak, purgatory.watched())
            if i % 50 == 49:
                await asyncio.sleep(0)  # the deferred purge runs here
        await asyncio.sleep(0)
        result = (peak, purgatory.watched(), purgatory)
        assert purgatory.delayed() == 0
        assert purgatory.timer.size() == 0
        purgatory.shutdown()
        return result

    peak, final, _ = asyncio.run(flood(purge_interval=100))
    assert peak <= 100 + 50 + 1
    assert final <= 100
    _, unpurged_final, _ = asyncio.run(flood(purge_interval=10**9))
    assert unpurged_final == 10_000  # without purging, the shared list keeps every op


def test_ten_thousand_ops_expire_once_each_and_are_purged() -> None:
    async def main() -> None:
        purgatory: DelayedOperationPurgatory[Op] = DelayedOperationPurgatory(
            "fetch", purge_interval=1000
        )
        rng = random.Random(3)
        ops = [Op(rng.randrange(5, 50)) for _ in range(10_000)]
        for i, op in enumerate(ops):
            assert purgatory.try_complete_else_watch(op, [i % 100]) is False
        assert purgatory.delayed() == 10_000
        await until(lambda: all(op.is_completed for op in ops))
        await asyncio.sleep(0)
        assert all(op.events == ["complete", "expire"] for op in ops)
        assert purgatory.delayed() == 0
        assert purgatory.timer.size() == 0
        assert purgatory.watched() <= 1000
        purgatory.shutdown()

    asyncio.run(main())


def test_shutdown_completes_nothing_and_cancels_timeouts() -> None:
    async def main() -> None:
        shared = Timer()
        owned: DelayedOperationPurgatory[Op] = DelayedOperationPurgatory("fetch")
        other: DelayedOperationPurgatory[Op] = DelayedOperationPurgatory("produce", shared)
        mine: DelayedOperationPurgatory[Op] = DelayedOperationPurgatory("join", shared)
        owned_op, other_op, mine_op = Op(20), Op(20), Op(20)
        owned.try_complete_else_watch(owned_op, ["a", "b"])
        other.try_complete_else_watch(other_op, ["a"])
        mine.try_complete_else_watch(mine_op, ["a"])
        owned.shutdown()
        mine.shutdown()
        assert owned.timer.closed
        assert not shared.closed  # a timer passed in belongs to its creator
        assert owned.delayed() == owned.watched() == 0
        assert mine.delayed() == mine.watched() == 0
        assert shared.size() == 1
        await until(lambda: other_op.is_completed)
        await asyncio.sleep(0.03)
        assert owned_op.events == [] and mine_op.events == []
        assert other_op.events == ["complete", "expire"]
        with pytest.raises(RuntimeError):
            owned.try_complete_else_watch(Op(20), ["a"])
        other.shutdown()
        shared.close()

    asyncio.run(main())


def test_exceptions_in_on_complete_are_logged_and_do_not_break_the_timer(
    caplog: pytest.LogCaptureFixture,
) -> None:
    class Broken(Op):
        def on_complete(self) -> None:
            raise RuntimeError("response build failed")

    async def main() -> None:
        purgatory: DelayedOperationPurgatory[Op] = DelayedOperationPurgatory("fetch")
        broken, fine = Broken(5), Op(15)
        purgatory.try_complete_else_watch(broken, ["a"])
        purgatory.try_complete_else_watch(fine, ["a"])
        await until(lambda: fine.is_completed)
        assert broken.is_completed
        assert fine.events == ["complete", "expire"]
        assert purgatory.delayed() == 0
        # The same through check_and_complete: the broken op must not hide the next one.
        ready = Flag()
        broken2, fine2 = Broken(1000, ready), Op(1000, ready)
        purgatory.try_complete_else_watch(broken2, ["b"])
        purgatory.try_complete_else_watch(fine2, ["b"])
        ready.value = True
        assert purgatory.check_and_complete("b") == 1
        assert broken2.is_completed and fine2.events == ["complete"]
        assert purgatory.watched() <= 2  # the two expired ops still on "a"
        assert purgatory.delayed() == 0
        purgatory.shutdown()

    with caplog.at_level(logging.ERROR, logger="klog.daemon.purgatory"):
        asyncio.run(main())
    failures = [r for r in caplog.records if "response build failed" in (r.exc_text or "")]
    assert len(failures) == 2


def test_zero_delay_op_expires_from_the_loop_not_inside_the_call() -> None:
    async def main() -> None:
        purgatory: DelayedOperationPurgatory[Op] = DelayedOperationPurgatory("fetch")
        op = Op(0)
        assert purgatory.try_complete_else_watch(op, ["a"]) is False
        assert op.events == []
        await until(lambda: op.is_completed)
        assert op.events == ["complete", "expire"]
        purgatory.shutdown()

    asyncio.run(main())


def test_another_thread_completes_through_call_soon_threadsafe() -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        purgatory: DelayedOperationPurgatory[Op] = DelayedOperationPurgatory("produce")
        ready = Flag()
        op = Op(30_000, ready)
        purgatory.try_complete_else_watch(op, ["t-0"])

        def follower_caught_up() -> None:
            ready.value = True
            loop.call_soon_threadsafe(purgatory.check_and_complete, "t-0")

        thread = threading.Thread(target=follower_caught_up)
        thread.start()
        await until(lambda: op.is_completed)
        thread.join()
        assert op.events == ["complete"]
        assert purgatory.delayed() == 0
        purgatory.shutdown()

    asyncio.run(main())
