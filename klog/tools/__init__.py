"""The offline tools' logic, beneath the CLI that only formats it.

- ``dump.py``: ``klog dump-segment``, Kafka's DumpLogSegments as a stream of events, each
  rendering itself as Kafka's text line or as JSON;
- ``inspect.py``: ``klog verify`` / ``klog recover``, the judgement over a log dir at rest
  and startup recovery as a tool that never destroys data;
- ``reassignment.py``: ``klog reassign``, kafka-reassign-partitions.sh's planning, JSON
  formats, throttles and status (the cluster reached through ``klog.client``).

The format itself (segments, indexes, checkpoints, the batch walker) is ``klog.storage``'s,
replica placement ``klog.placement``'s. Imports ``protocol``, ``storage``, ``placement``
and ``client``; never ``daemon`` or ``cli``.
"""
