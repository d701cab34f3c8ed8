"""Metadata stores: ZooKeeper's data model behind one interface (base.MetadataStore).

zookeeper.py talks to a real ZooKeeper ensemble (cluster mode); local.py keeps the same tree
in a local directory (standalone mode, a cluster of one); paths.py is Kafka's znode layout
and JSON payloads, shared by both. Import from the module that owns a name (base.py:
the interface, its errors and ops); this package re-exports nothing.
"""
