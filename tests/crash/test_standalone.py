"""The crash matrix on a standalone broker: each disruption (SIGTERM, kill -9, SIGSTOP past
every client timeout) hits the broker with every scenario's state built and its clients
running; each cell checks one scenario afterwards. The three worlds (one broker each) are
built and disrupted side by side, then checked. See tests/crash/__init__.py."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.crash.scenarios import scenarios_for
from tests.crash.site import DISRUPTIONS, StandaloneSite, World, run_worlds

pytestmark = pytest.mark.timeout(300)

SCENARIOS = scenarios_for("standalone")


@pytest.fixture(scope="module")
def worlds(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, World]]:
    made = {d.name: World(StandaloneSite(tmp_path_factory.mktemp(f"crash-{d}")),
                          [s() for s in SCENARIOS], d) for d in DISRUPTIONS}
    try:
        run_worlds(made.values(), lambda w: f"standalone {w.disruption}")
        yield made
    finally:
        for world in made.values():
            world.close()


@pytest.mark.parametrize("disruption", [d.name for d in DISRUPTIONS])
@pytest.mark.parametrize("scenario", [s.name for s in SCENARIOS])
def test_clients_observe_the_same_after(worlds: dict[str, World], disruption: str,
                                        scenario: str) -> None:
    worlds[disruption].check(scenario)
