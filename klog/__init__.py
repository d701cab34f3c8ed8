"""klog: a Kafka-compatible message broker and toolkit for Kafka's on-disk format."""

__version__ = "0.1.0"
