"""The controller: elects partition leaders and tells brokers, from the metastore's znodes.

One broker of the cluster is the active controller: the one that created the ephemeral
``/controller`` znode. It reacts to metastore changes (new topics, new partitions, topic
deletions, brokers joining or leaving) as events processed one at a time in order, as
Kafka's ControllerEventManager does, writes each partition's leader and ISR to
``/brokers/topics/<t>/partitions/<p>/state``, and sends LeaderAndIsr, UpdateMetadata and
StopReplica to the brokers concerned. In standalone mode the cluster is this broker
alone and those requests are delivered in-process.
"""

from klog.daemon.controller.controller import Controller

__all__ = ["Controller"]
