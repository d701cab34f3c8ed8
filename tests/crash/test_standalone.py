"""The crash matrix on a standalone broker: each disruption (SIGTERM, kill -9, SIGSTOP past
every client timeout) hits the broker with every scenario's state built and its clients
running; each cell checks one scenario afterwards. See tests/crash/__init__.py."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from tests.crash.scenarios import scenarios_for
from tests.crash.site import DISRUPTIONS, Disruption, StandaloneSite, World

pytestmark = pytest.mark.timeout(240)

SCENARIOS = scenarios_for("standalone")


@pytest.fixture(scope="module", params=DISRUPTIONS, ids=str)
def world(request: pytest.FixtureRequest,
          tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    disruption: Disruption = request.param
    started = time.monotonic()
    site = StandaloneSite(tmp_path_factory.mktemp(f"crash-{disruption}"))
    built = World(site, [s() for s in SCENARIOS], disruption)
    try:
        site.start()
        built.run()
        yield built
    finally:
        built.close()
        print(f"\nstandalone {disruption}: {time.monotonic() - started:.1f} s "
              f"({', '.join(f'{k} {v:.1f}' for k, v in built.timings.items())})")


@pytest.mark.parametrize("scenario", [s.name for s in SCENARIOS])
def test_clients_observe_the_same_after(world: World, scenario: str) -> None:
    world.check(scenario)
