"""The crash matrix on a 3-broker ZooKeeper cluster: each disruption (SIGTERM, kill -9,
SIGSTOP past the ZooKeeper session) hits the broker that leads every scenario partition
and coordinates every scenario group and transactional id -- once a broker that is not the
controller (``leader``), once the controller (``controller``). The six worlds (one cluster
each, on the session's ZooKeeper) are built and disrupted a few side by side, then checked.
See tests/crash/__init__.py.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from tests.cluster.conftest import Cluster
from tests.crash.scenarios import scenarios_for
from tests.crash.site import BROKER_OVERRIDES, DISRUPTIONS, ClusterSite, World, run_worlds

pytestmark = pytest.mark.timeout(600)

SCENARIOS = scenarios_for("cluster")
CASES = [f"{role}-{d}" for role in ("leader", "controller") for d in DISRUPTIONS]


@pytest.fixture(scope="module")
def worlds(cluster_module: Callable[..., Cluster]) -> Iterator[dict[str, World]]:
    made = {f"{role}-{d}": World(
        ClusterSite(cluster_module(brokers=3, overrides=BROKER_OVERRIDES, start=False), role),
        [s() for s in SCENARIOS], d)
        for role in ("leader", "controller") for d in DISRUPTIONS}
    try:
        run_worlds(made.values(), lambda w: f"cluster {w.site.role}-{w.disruption}"
                   if isinstance(w.site, ClusterSite) else str(w.disruption))
        yield made
    finally:
        for world in made.values():
            world.close()
            if isinstance(world.site, ClusterSite):
                world.site.cluster.close()


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("scenario", [s.name for s in SCENARIOS])
def test_clients_observe_the_same_after(worlds: dict[str, World], case: str,
                                        scenario: str) -> None:
    worlds[case].check(scenario)
