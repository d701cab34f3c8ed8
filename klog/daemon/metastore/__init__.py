"""Metadata stores: ZooKeeper's data model behind one interface (base.MetadataStore).

zookeeper.py talks to a real ZooKeeper ensemble (cluster mode); local.py keeps the same tree
in a local directory (standalone mode, a cluster of one); paths.py is Kafka's znode layout
and JSON payloads, shared by both.
"""

from __future__ import annotations

from klog.daemon.metastore.base import (
    BadVersionError,
    CheckOp,
    ConnectionLossError,
    CreateOp,
    DataTooLargeError,
    DeleteOp,
    InvalidPathError,
    MetadataStore,
    MetastoreCorruptError,
    MetastoreError,
    MetastoreLockedError,
    NoChildrenForEphemeralsError,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    Op,
    SessionExpiredError,
    SetOp,
    WatchedEvent,
    Watcher,
    ZnodeStat,
)

__all__ = [
    "BadVersionError",
    "CheckOp",
    "ConnectionLossError",
    "CreateOp",
    "DataTooLargeError",
    "DeleteOp",
    "InvalidPathError",
    "MetadataStore",
    "MetastoreCorruptError",
    "MetastoreError",
    "MetastoreLockedError",
    "NoChildrenForEphemeralsError",
    "NoNodeError",
    "NodeExistsError",
    "NotEmptyError",
    "Op",
    "SessionExpiredError",
    "SetOp",
    "WatchedEvent",
    "Watcher",
    "ZnodeStat",
]
