"""The offline tools' logic, beneath the CLI that only formats it.

- ``dump/``: ``klog dump-segment``, Kafka's DumpLogSegments as a stream of events, each
  rendering itself as Kafka's text line or as JSON;
- ``verify/``: ``klog verify`` / ``klog recover``, storage's audit of a log dir at rest
  (klog/storage/audit.py judges) and startup recovery as a tool that never destroys data;
- ``reassignment.py``: ``klog reassign``, kafka-reassign-partitions.sh's planning, JSON
  formats, throttles and status (the cluster reached through ``klog.client``).

The format itself (segments, indexes, checkpoints, the batch walker) and the rules of
what is sound (``storage/audit.py``, ``storage/index_entries.py``) are ``klog.storage``'s,
replica placement ``klog.placement``'s. Imports ``protocol``, ``storage``, ``placement``
and ``client``; never ``daemon`` or ``cli``.
"""
