"""ControllerContext: what the controller's parts use of the Controller.

The parts -- leader_balance.py (ElectLeaders, auto rebalance) and reassignment.py
(KIP-455) -- run inside the controller's event task and work on its state (topics,
partition states, live brokers) with its helpers (metastore calls in worker threads,
watches, requests to brokers). controller.py builds them with itself; they are typed by
this Protocol instead of importing controller.py, so no import cycle joins them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, ParamSpec, Protocol, TypeVar

if TYPE_CHECKING:
    from klog.daemon.config.dynamic import DynamicBrokerConfig
    from klog.daemon.metadata_cache import BrokerInfo, PartitionState
    from klog.daemon.metastore import paths
    from klog.daemon.metastore.base import MetadataStore, Watcher

_P = ParamSpec("_P")
_T = TypeVar("_T")

TopicPartition = tuple[str, int]


class ControllerContext(Protocol):
    """The Controller's state and helpers its parts read and call (klog/daemon/controller/
    controller.py documents each)."""

    broker_id: int
    config: DynamicBrokerConfig
    store: MetadataStore
    active: bool
    epoch: int
    topics: dict[str, paths.TopicAssignment]
    deletion_waiting: set[str]
    states: dict[TopicPartition, PartitionState]
    live_brokers: dict[int, BrokerInfo]
    _queue: asyncio.Queue[tuple[str, Any]]
    _loop: asyncio.AbstractEventLoop | None
    _closed: bool

    def _watcher(self, kind: str, arg: object = None) -> Watcher: ...

    async def _call(self, fn: Callable[_P, _T], *args: _P.args, **kwargs: _P.kwargs
                    ) -> _T: ...

    def _alive(self, broker_id: int) -> bool: ...

    def _replica_online(self, broker_id: int, tp: TopicPartition) -> bool: ...

    def _all_partitions(self) -> list[TopicPartition]: ...

    async def _choose_leader_async(self, tp: TopicPartition, replicas: tuple[int, ...],
                                   isr: Iterable[int]) -> tuple[int, tuple[int, ...]]: ...

    def _read_partition_states(self, tps: Iterable[TopicPartition]
                               ) -> dict[TopicPartition, PartitionState]: ...

    def _update_states(self, states: list[PartitionState]) -> None: ...

    async def _elect_leaders(self, tps: Iterable[TopicPartition]) -> list[PartitionState]: ...

    def _send(self, states: list[PartitionState], update_all: bool = False) -> None: ...

    def _send_leader_and_isr(self, broker_id: int, states: list[PartitionState]) -> None: ...

    def _send_update_metadata(self, states: list[PartitionState],
                              broker_ids: Iterable[int] | None = None) -> None: ...

    def _send_stop_replica(self, broker_id: int, tps: list[TopicPartition], delete: bool,
                           epochs: dict[TopicPartition, int] | None = None) -> None: ...
