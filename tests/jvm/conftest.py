"""Fixtures of the JVM peer tests: the broker fixtures the rest of the suite uses (one
klog broker per module from tests/interop/conftest.py; real ZooKeeper clusters from
tests/cluster/conftest.py), and ``jvm``: one driver JVM per test module (driver.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.cluster.conftest import cluster, zk_server  # noqa: F401 - fixtures
from tests.interop.conftest import (  # noqa: F401 - fixtures
    bootstrap,
    broker,
    broker_overrides,
    topic,
)
from tests.jvm.driver import Jvm


@pytest.fixture(scope="module")
def jvm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Jvm]:
    """One driver JVM for the module's tests; its log is kept beside the brokers'."""
    running = Jvm(tmp_path_factory.mktemp("jvm") / "driver.log")
    try:
        yield running
    finally:
        running.close()
