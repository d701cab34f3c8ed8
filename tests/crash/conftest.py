"""Fixtures of the crash matrix: ``cluster_module``, tests/cluster/conftest.py's cluster
factory for a module-scoped world (a fresh ZooKeeper chroot and data dirs per cluster, on
the session's ZooKeeper)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

import pytest

# The scenarios' and the site's asserts explain themselves as a test module's do.
pytest.register_assert_rewrite("tests.crash.scenarios", "tests.crash.site")

from tests.cluster.conftest import Cluster  # noqa: E402
from tests.zkserver import ZooKeeperServer, zk_server  # noqa: E402, F401 - the fixture


@pytest.fixture(scope="module")
def cluster_module(zk_server: ZooKeeperServer,  # noqa: F811 - the imported fixture
                   tmp_path_factory: pytest.TempPathFactory
                   ) -> Iterator[Callable[..., Cluster]]:
    """``cluster(brokers=3, overrides=None, per_broker=None, start=True)``, each cluster
    closed when the module's tests are done (a world closes its own before)."""
    made: list[Cluster] = []

    def make(brokers: int = 3, overrides: Mapping[str, Any] | None = None,
             per_broker: Mapping[int, Mapping[str, Any]] | None = None,
             start: bool = True) -> Cluster:
        c = Cluster(zk_server, tmp_path_factory.mktemp("crash-cluster"), brokers, overrides,
                    per_broker)
        made.append(c)
        return c.start_all() if start else c

    yield make
    for c in made:
        c.close()
