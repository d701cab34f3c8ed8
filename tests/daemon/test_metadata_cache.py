"""Tests for klog.daemon.metadata_cache: the topic id index Fetch v13+ resolves ids with."""

from __future__ import annotations

import uuid

from klog.daemon.metadata_cache import MetadataCache, PartitionState

OLD = uuid.UUID(int=1)
NEW = uuid.UUID(int=2)


def test_topic_ids_resolve_both_ways_and_follow_a_recreated_topic() -> None:
    cache = MetadataCache(0)
    cache.update_partitions([PartitionState("t", 0, 0, 0, (0,), (0,))], {"t": OLD})
    assert cache.topic_by_id(OLD) == "t" and cache.topic_id("t") == OLD
    # deleted and created again under the same name: the old id names nothing
    cache.remove_topic("t")
    assert cache.topic_by_id(OLD) is None and cache.topic_id("t") is None
    cache.set_topic_ids({"t": NEW})
    assert cache.topic_by_id(NEW) == "t" and cache.topic_by_id(OLD) is None
    # a new id for a name replaces the old one without a delete in between
    cache.set_topic_ids({"t": OLD})
    assert cache.topic_by_id(OLD) == "t" and cache.topic_by_id(NEW) is None
    assert cache.topic_by_id(uuid.UUID(int=0)) is None
