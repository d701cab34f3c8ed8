"""The group coordinator's gauges: Kafka's kafka.coordinator.group:type=GroupMetadataManager
metrics, read from the coordinator and its metadata manager at scrape time (on the event
loop, as every collector: klog/daemon/metrics/collectors.py). broker.py registers it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client.core import Metric

from klog.daemon.group.group import GroupState
from klog.daemon.metrics.collectors import gauge

if TYPE_CHECKING:
    from klog.daemon.group.coordinator import GroupCoordinator
    from klog.daemon.group.metadata_manager import GroupMetadataManager


class GroupCollector:
    """kafka.coordinator.group:type=GroupMetadataManager: NumGroups, NumGroups<State>,
    NumOffsets (groups and committed offsets this broker coordinates)."""

    def __init__(self, coordinator: GroupCoordinator, manager: GroupMetadataManager) -> None:
        self.coordinator = coordinator
        self.manager = manager

    def collect(self) -> Iterator[Metric]:
        by_state = dict.fromkeys(GroupState, 0)
        groups = list(self.coordinator.groups.values())
        for group in groups:
            by_state[group.state] += 1
        prefix = "kafka_coordinator_group_groupmetadatamanager_"
        doc = "kafka.coordinator.group:type=GroupMetadataManager,name="
        yield gauge(f"{prefix}numgroups", f"{doc}NumGroups", len(groups))
        for state, n in by_state.items():
            mbean = f"NumGroups{state.value}"
            yield gauge(f"{prefix}{mbean.lower()}", doc + mbean, n)
        yield gauge(f"{prefix}numoffsets", f"{doc}NumOffsets", self.manager.num_offsets)
