"""CoordinatorPartitions: leadership, load generations and the coordinator error, with a
subclass whose read and install are recorded (the group and transaction managers' own
tests cover their reads: tests/daemon/group/, tests/daemon/transaction/)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import pytest

from klog.daemon.coordinator_partitions import CoordinatorPartitions
from klog.protocol.errors import ErrorCode


class Recorded(CoordinatorPartitions[str]):
    topic = "__test"

    def __init__(self, reload_on_new_epoch: bool) -> None:
        cache = SimpleNamespace(partitions=lambda topic: [], contains_topic=lambda topic: True)
        replicas = SimpleNamespace(get_partition=lambda topic, p: SimpleNamespace(log=None))
        super().__init__(1, None, cache, replicas, None)  # type: ignore[arg-type]
        self.reload_on_new_epoch = reload_on_new_epoch
        self.installed: list[tuple[int, int]] = []
        self.dropped: list[tuple[int, bool]] = []

    def _configured_partitions(self) -> int:
        return 4

    def _load_buffer_size(self) -> int:
        return 1

    def _read(self, plog: Any, buffer_size: int, is_stopped: Callable[[], bool]) -> str:
        return "read"

    def _install(self, partition: int, epoch: int, result: str, started: float) -> None:
        self._mark_loaded(partition)
        self.installed.append((partition, epoch))

    def _drop(self, partition: int, was_held: bool) -> None:
        self.dropped.append((partition, was_held))


async def _settle(m: Recorded) -> None:
    while m._load_tasks:
        await asyncio.sleep(0.001)


def _key_of(m: Recorded, partition: int) -> str:
    return next(k for k in (f"k{i}" for i in range(1000)) if m.partition_for(k) == partition)


@pytest.mark.parametrize("reload_on_new_epoch", [False, True])
def test_leadership_and_a_new_epoch(reload_on_new_epoch: bool) -> None:
    async def go() -> None:
        m = Recorded(reload_on_new_epoch)
        key = _key_of(m, 0)
        assert m.coordinator_error(key) is ErrorCode.NOT_COORDINATOR
        m.become_leader(0, 5)
        assert m.coordinator_error(key) is ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        await _settle(m)
        assert m.installed == [(0, 5)] and m.coordinator_error(key) is None
        m.become_leader(0, 5)  # the same epoch: nothing to do
        m.become_leader(0, 6)  # a newer one reloads only the transaction coordinator's
        await _settle(m)
        if reload_on_new_epoch:
            assert m.installed == [(0, 5), (0, 6)] and m.dropped == [(0, True)]
        else:
            assert m.installed == [(0, 5)] and m.dropped == []
        m.resign(0)
        assert m.coordinator_error(key) is ErrorCode.NOT_COORDINATOR
        assert m.dropped[-1] == (0, True) and m.owned_partitions() == set()

    asyncio.run(go())


def test_a_load_outlived_by_its_resignation_is_dropped() -> None:
    async def go() -> None:
        m = Recorded(False)
        m.become_leader(1, 1)
        m.resign(1)  # before the load task ran
        await _settle(m)
        assert m.installed == [] and m.owned_partitions() == set()
        assert m.dropped == [(1, True)]

    asyncio.run(go())


def test_shutting_down_answers_coordinator_not_available() -> None:
    async def go() -> None:
        m = Recorded(False)
        m.become_leader(2, 1)
        await _settle(m)
        await m.shutdown()
        assert m.coordinator_error(_key_of(m, 2)) is ErrorCode.COORDINATOR_NOT_AVAILABLE
        m.become_leader(3, 1)  # ignored while shut down
        assert not m.is_loading(3)

    asyncio.run(go())
