"""The controller's gauges: Kafka's kafka.controller:type=KafkaController metrics, read
from the Controller at scrape time (on the event loop, as every collector:
klog/daemon/metrics/collectors.py). broker.py registers it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client.core import Metric

from klog.daemon.metrics.collectors import gauge

if TYPE_CHECKING:
    from klog.daemon.controller.controller import Controller


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
            yield gauge(f"kafka_controller_kafkacontroller_{name}",
                         f"kafka.controller:type=KafkaController,name={mbean}", value)
