"""Gauges read from the broker's state at scrape time (nothing on the hot path).

Each collector here is handed, in its constructor, the component whose state it reads,
and is called by the metrics component on the event loop thread (klog/daemon/metrics/
__init__.py), where that state is only ever changed: what it yields is a snapshot of one
instant, formatted later in the HTTP thread. Names as the Prometheus JMX exporter's Kafka
rules give Kafka's MBeans (example_configs/kafka-2_0_0.yml):

- kafka.server:type=ReplicaManager,name=X -> ``kafka_server_replicamanager_x``
- kafka.controller:type=KafkaController,name=X -> ``kafka_controller_kafkacontroller_x``
- kafka.log:type=Log,name=X,topic=T,partition=P -> ``kafka_log_log_x{topic,partition}``
- kafka.log:type=LogManager,name=X -> ``kafka_log_logmanager_x``
- kafka.server:type=FetcherLagMetrics,name=ConsumerLag,clientId=C,topic=T,partition=P ->
  ``kafka_server_fetcherlagmetrics_consumerlag{clientId,topic,partition}``
- kafka.coordinator.group:type=GroupMetadataManager,name=X ->
  ``kafka_coordinator_group_groupmetadatamanager_x``
- kafka.server:type=socket-server-metrics,listener=L,networkProcessor=N, attribute
  connection-count (a Kafka metrics MBean, which kafka-2_0_0.yml leaves out; the
  exporter's usual listener/networkProcessor rule, as Strimzi's, names it) ->
  ``kafka_server_socket_server_metrics_connection_count{listener,networkProcessor}``
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from prometheus_client.core import GaugeMetricFamily, Metric

if TYPE_CHECKING:
    from klog.daemon.controller import Controller
    from klog.daemon.group.coordinator import GroupCoordinator
    from klog.daemon.group.metadata_manager import GroupMetadataManager
    from klog.daemon.log_cleaner import LogCleaner
    from klog.daemon.replica_fetcher import ReplicaFetcherManager
    from klog.daemon.replica_manager import ReplicaManager
    from klog.daemon.server import Server
    from klog.storage.log_manager import LogManager


def _gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, doc, value=value)


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
            yield _gauge(f"kafka_server_replicamanager_{name}",
                         f"kafka.server:type=ReplicaManager,name={mbean}", value)


class SocketServerCollector:
    """socket-server-metrics connection-count per listener: the connections that count
    against the connection limits (klog/daemon/connection_quotas.py) -- from the accept to
    the socket's close, TLS handshakes and closes under way included, as a Kafka
    processor's selector holds a channel. One event loop serves every connection:
    networkProcessor is always 0."""

    def __init__(self, server: Server) -> None:
        self.server = server

    def collect(self) -> Iterator[Metric]:
        family = GaugeMetricFamily(
            "kafka_server_socket_server_metrics_connection_count",
            "kafka.server:type=socket-server-metrics,listener=L,networkProcessor=N "
            "connection-count", labels=["listener", "networkProcessor"])
        counts = self.server.quotas.per_listener
        for listener in self.server.bound:
            family.add_metric([listener, "0"], counts.get(listener, 0))
        yield family


class ControllerCollector:
    """KafkaController's gauges: 1 and the cluster's counts on the active controller, 0 on
    the other brokers (as Kafka reports them)."""

    def __init__(self, controller: Controller) -> None:
        self.controller = controller

    def collect(self) -> Iterator[Metric]:
        c = self.controller
        active = c.active
        topics = partitions = offline = 0
        if active:
            topics = len(c.topics)
            partitions = len(c.states)
            live = c.live_brokers
            offline = sum(1 for s in c.states.values()
                          if s.leader < 0 or (live and s.leader not in live))
        for name, mbean, value in (
            ("activecontrollercount", "ActiveControllerCount", int(active)),
            ("offlinepartitionscount", "OfflinePartitionsCount", offline),
            ("globalpartitioncount", "GlobalPartitionCount", partitions),
            ("globaltopiccount", "GlobalTopicCount", topics),
        ):
            yield _gauge(f"kafka_controller_kafkacontroller_{name}",
                         f"kafka.controller:type=KafkaController,name={mbean}", value)


class LogCollector:
    """kafka.log:type=Log: Size, NumLogSegments, LogStartOffset, LogEndOffset per
    partition log held here; kafka.log:type=LogManager,name=OfflineLogDirectoryCount."""

    def __init__(self, log_manager: LogManager) -> None:
        self.log_manager = log_manager

    def collect(self) -> Iterator[Metric]:
        families = {
            name: GaugeMetricFamily(f"kafka_log_log_{name}",
                                    f"kafka.log:type=Log,name={mbean}",
                                    labels=["topic", "partition"])
            for name, mbean in (("size", "Size"), ("numlogsegments", "NumLogSegments"),
                                ("logstartoffset", "LogStartOffset"),
                                ("logendoffset", "LogEndOffset"))
        }
        for (topic, partition), plog in self.log_manager.all_logs().items():
            labels = [topic, str(partition)]
            families["size"].add_metric(labels, plog.size)
            families["numlogsegments"].add_metric(labels, plog.number_of_segments)
            families["logstartoffset"].add_metric(labels, plog.log_start_offset)
            families["logendoffset"].add_metric(labels, plog.log_end_offset)
        yield from families.values()
        yield _gauge("kafka_log_logmanager_offlinelogdirectorycount",
                     "kafka.log:type=LogManager,name=OfflineLogDirectoryCount",
                     len(self.log_manager.offline_dirs))


class FetcherLagCollector:
    """kafka.server:type=FetcherLagMetrics,name=ConsumerLag: per followed partition, the
    leader's high watermark minus this replica's log end after its last fetch."""

    def __init__(self, fetchers: ReplicaFetcherManager) -> None:
        self.fetchers = fetchers

    def collect(self) -> Iterator[Metric]:
        family = GaugeMetricFamily(
            "kafka_server_fetcherlagmetrics_consumerlag",
            "kafka.server:type=FetcherLagMetrics,name=ConsumerLag",
            labels=["clientId", "topic", "partition"])
        for fetcher in list(self.fetchers.fetchers.values()):
            # Kafka's replica fetcher thread name is its client id.
            client_id = f"ReplicaFetcherThread-{fetcher.fetcher_id}-{fetcher.leader_id}"
            for (topic, partition), state in fetcher.partitions.items():
                if state.lag is not None:
                    family.add_metric([client_id, topic, str(partition)], state.lag)
        yield family


class GroupCollector:
    """kafka.coordinator.group:type=GroupMetadataManager: NumGroups, NumGroups<State>,
    NumOffsets (groups and committed offsets this broker coordinates)."""

    def __init__(self, coordinator: GroupCoordinator, manager: GroupMetadataManager) -> None:
        self.coordinator = coordinator
        self.manager = manager

    def collect(self) -> Iterator[Metric]:
        from klog.daemon.group.group import GroupState

        by_state = dict.fromkeys(GroupState, 0)
        groups = list(self.coordinator.groups.values())
        for group in groups:
            by_state[group.state] += 1
        prefix = "kafka_coordinator_group_groupmetadatamanager_"
        doc = "kafka.coordinator.group:type=GroupMetadataManager,name="
        yield _gauge(f"{prefix}numgroups", f"{doc}NumGroups", len(groups))
        for state, n in by_state.items():
            mbean = f"NumGroups{state.value}"
            yield _gauge(f"{prefix}{mbean.lower()}", doc + mbean, n)
        yield _gauge(f"{prefix}numoffsets", f"{doc}NumOffsets", self.manager.num_offsets)


class LogCleanerCollector:
    """The log cleaner (klog/daemon/log_cleaner.py): Kafka's LogCleanerManager gauges
    max-dirty-percent and uncleanable-partitions-count and LogCleaner's
    time-since-last-run-ms (as the JMX exporter names them), plus, per compacted partition,
    klog's own ``klog_log_cleaner_dirty_ratio`` and ``klog_log_cleaner_last_clean_timestamp_ms``
    (Kafka exposes no per-partition figure; the issue asks for one)."""

    def __init__(self, cleaner: LogCleaner, clock: Callable[[], int]) -> None:
        self.cleaner = cleaner
        self.clock = clock

    def collect(self) -> Iterator[Metric]:
        statuses = self.cleaner.status()
        now = self.clock()
        yield _gauge("kafka_log_logcleanermanager_max_dirty_percent",
                     "kafka.log:type=LogCleanerManager,name=max-dirty-percent",
                     int(100 * max((s.dirty_ratio for s in statuses), default=0.0)))
        yield _gauge("kafka_log_logcleanermanager_uncleanable_partitions_count",
                     "kafka.log:type=LogCleanerManager,name=uncleanable-partitions-count",
                     len(self.cleaner.uncleanable_partitions()))
        last = max((s.last_clean.at_ms for s in statuses if s.last_clean is not None),
                   default=None)
        yield _gauge("kafka_log_logcleaner_time_since_last_run_ms",
                     "kafka.log:type=LogCleaner,name=time-since-last-run-ms",
                     0 if last is None else max(0, now - last))
        ratio = GaugeMetricFamily("klog_log_cleaner_dirty_ratio",
                                  "Dirty bytes over all bytes past the cleaner checkpoint, as "
                                  "of the cleaner's last selection round",
                                  labels=["topic", "partition"])
        cleaned = GaugeMetricFamily("klog_log_cleaner_last_clean_timestamp_ms",
                                    "When the partition was last cleaned (ms since the epoch)",
                                    labels=["topic", "partition"])
        for s in statuses:
            ratio.add_metric([s.topic, str(s.partition)], s.dirty_ratio)
            if s.last_clean is not None:
                cleaned.add_metric([s.topic, str(s.partition)], s.last_clean.at_ms)
        yield ratio
        yield cleaned
