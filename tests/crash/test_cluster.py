"""The crash matrix on a 3-broker ZooKeeper cluster: each disruption (SIGTERM, kill -9,
SIGSTOP past the ZooKeeper session) hits the broker that leads every scenario partition
and coordinates every scenario group and transactional id -- once a broker that is not the
controller (``leader``), once the controller (``controller``). See tests/crash/__init__.py.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import pytest

from tests.cluster.conftest import Cluster
from tests.crash.scenarios import scenarios_for
from tests.crash.site import BROKER_OVERRIDES, DISRUPTIONS, ClusterSite, Disruption, World

pytestmark = pytest.mark.timeout(300)

SCENARIOS = scenarios_for("cluster")
CASES = [(role, d) for role in ("leader", "controller") for d in DISRUPTIONS]


@pytest.fixture(scope="module", params=CASES, ids=[f"{r}-{d}" for r, d in CASES])
def world(request: pytest.FixtureRequest, cluster_module: Callable[..., Cluster]
          ) -> Iterator[World]:
    role, disruption = request.param
    assert isinstance(disruption, Disruption)
    started = time.monotonic()
    site = ClusterSite(cluster_module(brokers=3, overrides=BROKER_OVERRIDES, start=False), role)
    built = World(site, [s() for s in SCENARIOS], disruption)
    try:
        site.start()
        built.run()
        yield built
    finally:
        built.close()
        site.cluster.close()
        print(f"\ncluster {role}-{disruption}: {time.monotonic() - started:.1f} s "
              f"({', '.join(f'{k} {v:.1f}' for k, v in built.timings.items())})")


@pytest.mark.parametrize("scenario", [s.name for s in SCENARIOS])
def test_clients_observe_the_same_after(world: World, scenario: str) -> None:
    world.check(scenario)
