"""Consumer groups on the broker: the group coordinator and the ``__consumer_offsets`` store.

- ``metadata_manager`` (GroupMetadataManager, OffsetAndMetadata): which partition of
  ``__consumer_offsets`` holds a group, creating that topic, writing offset commits and group
  metadata in Kafka's key/value formats, loading a partition's offsets and groups when this
  broker becomes its leader (unloading when it stops), offsets expiration.
- ``group`` (GroupMetadata, MemberMetadata, group states) and ``coordinator``
  (GroupCoordinator: the classic JoinGroup/SyncGroup/Heartbeat/LeaveGroup protocol, commits
  validated against membership, group admin).

Everything here runs on the broker's event loop thread; only log reads while loading a
partition run in a worker thread, and their results are installed on the loop.
"""
