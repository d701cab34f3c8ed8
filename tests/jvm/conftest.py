"""Fixtures of the JVM peer tests: the broker fixtures the rest of the suite uses (one
klog broker per module from tests/interop/conftest.py; real ZooKeeper clusters from
tests/cluster/conftest.py), and ``jvm``: one driver JVM per test module (driver.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.cluster.conftest import Cluster, cluster, zk_server  # noqa: F401 - fixtures
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


@pytest.fixture(scope="module", params=["kafka4", "kafka3"])
def client_jvm(request: pytest.FixtureRequest,
               tmp_path_factory: pytest.TempPathFactory) -> Iterator[Jvm]:
    """The client scenarios' driver JVM, once with Kafka 4.x's client and once with the
    last 3.x client (pom.xml's kafka3 profile)."""
    running = Jvm(tmp_path_factory.mktemp("jvm") / f"driver-{request.param}.log",
                  build=request.param)
    try:
        yield running
    finally:
        running.close()


def wait_until_settled(c: Cluster, timeout: float = 30.0) -> None:
    """Wait until every broker's Metadata names the controller and every broker.

    The cluster fixture returns once the brokers are registered and a controller is
    elected; a broker the controller has not yet sent UpdateMetadata answers Metadata with
    itself alone and no controller (as a Kafka broker with an empty metadata cache does),
    and librdkafka's admin client, bootstrapped there, waits for a controller it never
    asks again for.
    """

    def settled() -> bool:
        for b in c.ids:
            described = c.describe_cluster(via=b)
            if described.controller_id < 0 or len(described.brokers) != len(c.ids):
                return False
        return True

    c.wait(settled, timeout, "every broker's Metadata to name the controller and all brokers")
