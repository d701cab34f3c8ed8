"""Gauges read from the broker's state at scrape time (nothing on the hot path): the
helper every collector uses (``gauge``) and the logs' collector (``LogCollector``).

Each component owns its collector, beside it: ``ReplicaManagerCollector``
(replica_metrics.py), ``SocketServerCollector`` (server.py), ``ControllerCollector``
(controller/controller.py), ``FetcherLagCollector`` (replica_fetcher.py),
``GroupCollector`` (group/coordinator.py), ``LogCleanerCollector`` (log_cleaner.py); the
logs' is here, their LogManager being storage's. broker.py registers each. A collector is
handed, in its constructor, the component whose state it reads, and is called by the
metrics component on the event loop thread (klog/daemon/metrics/__init__.py), where that
state is only ever changed: what it yields is a snapshot of one instant, formatted later
in the HTTP thread. Names as the Prometheus JMX exporter's Kafka rules give Kafka's MBeans
(example_configs/kafka-2_0_0.yml):

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

from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client.core import GaugeMetricFamily, Metric

if TYPE_CHECKING:
    from klog.storage.log_manager import LogManager


def gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
    """One unlabelled gauge: ``name`` as the JMX exporter names the MBean ``doc``."""
    return GaugeMetricFamily(name, doc, value=value)


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
        yield gauge("kafka_log_logmanager_offlinelogdirectorycount",
                    "kafka.log:type=LogManager,name=OfflineLogDirectoryCount",
                    len(self.log_manager.offline_dirs))
