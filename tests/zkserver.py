"""A real, throwaway ZooKeeper server for tests (standalone, loopback, temporary dataDir).

The server itself is klog's (klog/cluster_runner.py ``ZooKeeperServer``, which
``klog cluster up`` uses too): the system's installation (Debian's ``zookeeper`` package),
ready when ``srvr`` reports its mode.

    from tests.zkserver import ZooKeeperServer, zookeeper_unavailable_reason

    with ZooKeeperServer(tmp_path / "zk") as zk:
        store = ZooKeeperMetadataStore(zk.connect + "/kafka")

``stop()`` (SIGTERM) and ``kill()`` (SIGKILL) followed by ``start()`` restart it on the same
port and dataDir, for tests of connection loss. ``connect`` is "127.0.0.1:<port>".

As a pytest fixture: import ``zk_server`` into a conftest.py (``from tests.zkserver import
zk_server  # noqa: F401``) to get one server for the whole session, skipped with the reason
when java or the jars are missing. Tests sharing it isolate themselves with a chroot
(``zk_server.connect + "/my-test"``).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from klog.cluster_runner import (
    JAVA_DIR,
    ZOOKEEPER_JAR,
    ZOOKEEPER_MAIN_CLASS,
    ExitedAtStartup,
    ZooKeeperServer,
    four_letter_word,
    free_port,
    java_executable,
    zookeeper_classpath,
    zookeeper_unavailable_reason,
)

MAIN_CLASS = ZOOKEEPER_MAIN_CLASS

__all__ = [
    "JAVA_DIR",
    "MAIN_CLASS",
    "ZOOKEEPER_JAR",
    "ExitedAtStartup",
    "ZooKeeperServer",
    "four_letter_word",
    "free_port",
    "java_executable",
    "zk_server",
    "zookeeper_classpath",
    "zookeeper_unavailable_reason",
]


@pytest.fixture(scope="session")
def zk_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeperServer]:
    """One real ZooKeeper for the whole test session (see the module docstring)."""
    reason = zookeeper_unavailable_reason()
    if reason is not None:
        pytest.skip(f"real ZooKeeper unavailable: {reason}")
    server = ZooKeeperServer(tmp_path_factory.mktemp("zookeeper"))
    server.start()
    yield server
    server.stop()
