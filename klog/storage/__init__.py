"""Kafka's on-disk log format: segments, indexes, partition logs, checkpoints.

Byte-compatible with Apache Kafka's log directories. No networking here; imports only
``klog.protocol``.
"""
