"""In-memory stand-ins for the GroupMetadataManager and the broker (coordinator unit tests)."""

from __future__ import annotations

import asyncio
from typing import Any

from klog.daemon.config import BrokerConfig
from klog.daemon.config.dynamic import DynamicBrokerConfig
from klog.daemon.group.coordinator import GroupCoordinator
from klog.protocol.errors import ErrorCode
from klog.protocol.internal_topics import ConsumerProtocolSubscription, GroupMetadataValue

GROUP = "g1"


class FakeManager:
    """The interface of klog.daemon.group.metadata_manager.GroupMetadataManager, in memory."""

    def __init__(self) -> None:
        self.values: dict[str, GroupMetadataValue] = {}
        self.stores: list[tuple[str, GroupMetadataValue | None]] = []
        self.offsets: dict[str, dict[tuple[str, int], Any]] = {}
        # producer id -> group -> pending transactional commits
        self.txn_offsets: dict[int, dict[str, dict[tuple[str, int], Any]]] = {}
        self.store_error = ErrorCode.NONE
        self.coordinator_err: ErrorCode | None = None
        self.loading: set[int] = set()
        self.num_partitions = 1
        self.on_group_loaded: Any = None
        self.on_partition_unloaded: Any = None
        self.on_group_removed: Any = None

    def partition_for(self, group_id: str) -> int:
        return 0

    def coordinator_error(self, group_id: str) -> ErrorCode | None:
        return self.coordinator_err

    def is_loading(self, partition: int) -> bool:
        return partition in self.loading

    async def store_group(self, group_id: str, value: GroupMetadataValue | None) -> ErrorCode:
        await asyncio.sleep(0)  # a real append yields too
        self.stores.append((group_id, value))
        if self.store_error == ErrorCode.NONE:
            if value is None:
                self.values.pop(group_id, None)
            else:
                self.values[group_id] = value
        return self.store_error

    async def store_offsets(self, group_id: str, offsets: dict[tuple[str, int], Any]
                            ) -> dict[tuple[str, int], ErrorCode]:
        self.offsets.setdefault(group_id, {}).update(offsets)
        return dict.fromkeys(offsets, ErrorCode.NONE)

    async def store_txn_offsets(self, group_id: str, producer_id: int, producer_epoch: int,
                                offsets: dict[tuple[str, int], Any],
                                transactional_id: str | None = None, abortable: bool = False
                                ) -> dict[tuple[str, int], ErrorCode]:
        self.txn_offsets.setdefault(producer_id, {}).setdefault(group_id, {}).update(offsets)
        return dict.fromkeys(offsets, ErrorCode.NONE)

    def fetch_offsets(self, group_id: str, partitions: list[tuple[str, int]] | None
                      ) -> dict[tuple[str, int], Any]:
        offsets = self.offsets.get(group_id, {})
        if partitions is None:
            return dict(offsets)
        return {tp: offsets[tp] for tp in partitions if tp in offsets}

    async def delete_offsets(self, group_id: str, partitions: list[tuple[str, int]]
                             ) -> ErrorCode:
        for tp in partitions:
            self.offsets.get(group_id, {}).pop(tp, None)
        return ErrorCode.NONE

    async def delete_group_offsets(self, group_id: str) -> ErrorCode:
        self.offsets.pop(group_id, None)
        return ErrorCode.NONE

    def groups_with_offsets(self) -> set[str]:
        return {g for g, o in self.offsets.items() if o}


def make_coordinator(**overrides: str) -> tuple[GroupCoordinator, FakeManager]:
    props = {
        "group.min.session.timeout.ms": "10",
        "group.initial.rebalance.delay.ms": "0",
    }
    props.update({k.replace("_", "."): v for k, v in overrides.items()})
    manager = FakeManager()
    coordinator = GroupCoordinator(DynamicBrokerConfig(BrokerConfig(props)),
                                   manager)  # type: ignore[arg-type]
    coordinator.startup()
    return coordinator, manager


def subscription(*topics: str) -> bytes:
    return ConsumerProtocolSubscription(topics=tuple(topics)).encode()


PROTOCOLS = [("range", subscription("t1")), ("roundrobin", subscription("t1"))]


async def join(coordinator: GroupCoordinator, member_id: str = "", *,
               instance: str | None = None, protocols: list[tuple[str, bytes]] | None = None,
               session: int = 1000, rebalance: int = 1000, require_known: bool = True,
               skip: bool = False, protocol_type: str = "consumer", group: str = GROUP) -> Any:
    return await coordinator.join_group(
        group, member_id, instance, require_known, skip, "client", "/127.0.0.1", rebalance,
        session, protocol_type, PROTOCOLS if protocols is None else protocols)


async def join_new(coordinator: GroupCoordinator, **kw: Any) -> Any:
    """First join as a new member; on MEMBER_ID_REQUIRED join again with the given id."""
    result = await join(coordinator, **kw)
    if result.error == ErrorCode.MEMBER_ID_REQUIRED:
        result = await join(coordinator, result.member_id, **kw)
    return result


async def sync(coordinator: GroupCoordinator, result: Any,
               assignments: dict[str, bytes] | None = None, group: str = GROUP,
               instance: str | None = None) -> Any:
    return await coordinator.sync_group(group, result.generation_id, result.member_id,
                                        instance, None, None, assignments or {})
