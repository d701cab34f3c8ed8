"""The replica manager's scrape-time gauges (kafka.server:type=ReplicaManager).

Kept beside klog/daemon/replica_manager.py: the collector broker.py registers with the
metrics (klog/daemon/metrics) when metrics.http.listener is set, reading the partitions
hosted here at each scrape, on the event loop.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client.core import Metric

from klog.daemon.metrics.collectors import gauge

if TYPE_CHECKING:
    from klog.daemon.replica_manager import ReplicaManager


class ReplicaManagerCollector:
    """PartitionCount, LeaderCount, UnderReplicatedPartitions, UnderMinIsrPartitionCount
    (and AtMinIsrPartitionCount, OfflineReplicaCount) of the partitions hosted here."""

    def __init__(self, replica_manager: ReplicaManager) -> None:
        self.replica_manager = replica_manager

    def collect(self) -> Iterator[Metric]:
        partitions = list(self.replica_manager.partitions.values())
        leaders = under = under_min = at_min = 0
        for p in partitions:
            if not p.is_leader:
                continue
            leaders += 1
            isr = len(p.isr)
            if isr < len(p.replicas):
                under += 1
            min_isr = p.log.config.min_insync_replicas
            if isr < min_isr:
                under_min += 1
            elif isr == min_isr:
                at_min += 1
        # Replicas whose log could not be made here, or whose log dir failed.
        offline = len(set(self.replica_manager.log_creation_failures)
                      | self.replica_manager.log_manager.offline_partitions)
        for name, mbean, value in (
            ("partitioncount", "PartitionCount", len(partitions)),
            ("leadercount", "LeaderCount", leaders),
            ("underreplicatedpartitions", "UnderReplicatedPartitions", under),
            ("underminisrpartitioncount", "UnderMinIsrPartitionCount", under_min),
            ("atminisrpartitioncount", "AtMinIsrPartitionCount", at_min),
            ("offlinereplicacount", "OfflineReplicaCount", offline),
        ):
            yield gauge(f"kafka_server_replicamanager_{name}",
                         f"kafka.server:type=ReplicaManager,name={mbean}", value)
