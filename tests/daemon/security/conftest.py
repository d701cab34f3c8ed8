"""A real ZooKeeper for the ACL change notifications between brokers."""

from tests.zkserver import zk_server  # noqa: F401 - the fixture
