"""Client quotas without I/O (klog/daemon/quotas.py): Kafka's sampled-window rate, the
throttle time, the 8-level precedence of user / client-id entities, and the managers."""

from __future__ import annotations

import pytest

from klog.daemon.quotas import (
    DEFAULT,
    ClientQuotaManager,
    QuotaConfigs,
    QuotaManagers,
    SampledRate,
    entity_components,
    entity_key,
    throttle_time_ms,
)
from klog.protocol.client_quotas import (
    CONSUMER_BYTE_RATE,
    PRODUCER_BYTE_RATE,
    REQUEST_PERCENTAGE,
)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


# -- the rate ----------------------------------------------------------------------------


def test_a_young_rate_is_measured_over_at_least_num_minus_one_windows() -> None:
    rate = SampledRate(11, 1.0)
    rate.record(1000, 0.0)
    # 0.5 s after the first value: elapsed 0.5 s, plus 10 whole windows (Kafka's Rate).
    assert rate.window_size(0.5) == pytest.approx(10.5)
    assert rate.measure(0.5) == pytest.approx(1000 / 10.5)


def test_the_rate_is_the_sum_of_the_samples_over_the_time_since_the_oldest() -> None:
    rate = SampledRate(11, 1.0)
    for second in range(20):  # 100 B every second for 20 s
        rate.record(100, float(second))
    # samples kept: those started within the last 11 s
    now = 19.5
    assert rate.window_size(now) == pytest.approx(10.5)  # oldest started at 9.0
    assert rate.measure(now) == pytest.approx(1100 / 10.5)


def test_old_samples_fall_out_of_the_window() -> None:
    rate = SampledRate(11, 1.0)
    rate.record(5000, 0.0)
    assert rate.measure(5.0) > 0
    assert rate.measure(11.0) == 0.0  # the only sample is 11 windows old


def test_throttle_time_is_the_time_back_to_the_bound() -> None:
    rate = SampledRate(11, 1.0)
    rate.record(2000, 0.0)
    # rate = 2000 / 10 s = 200 B/s; bound 100: (200 - 100) / 100 x 10 s = 10 s
    assert throttle_time_ms(rate, 100.0, 0.0) == 10_000
    assert throttle_time_ms(rate, 100.0, 0.0, max_ms=1000.0) == 1000  # bounded (requests)
    assert throttle_time_ms(rate, 200.0, 0.0) == 0  # at the bound: not throttled
    assert throttle_time_ms(rate, 1000.0, 0.0) == 0


def test_kafkas_throttle_time_example() -> None:
    # Kafka's QuotaUtilsTest: observed 100, quota 50, 3 samples of 1 s -> 2000 ms.
    rate = SampledRate(3, 1.0)
    rate.record(200, 0.0)  # 200 over the minimum window of 2 s = 100/s
    assert throttle_time_ms(rate, 50.0, 0.0) == 2000


# -- precedence --------------------------------------------------------------------------

LEVELS = [
    (("alice", "app"), 1),
    (("alice", DEFAULT), 2),
    (("alice", None), 3),
    ((DEFAULT, "app"), 4),
    ((DEFAULT, DEFAULT), 5),
    ((DEFAULT, None), 6),
    ((None, "app"), 7),
    ((None, DEFAULT), 8),
]


@pytest.mark.parametrize("level", range(len(LEVELS)))
def test_precedence_of_the_eight_entity_levels(level: int) -> None:
    configs = QuotaConfigs()
    # every level from this one down is configured; the most specific wins
    for entity, value in LEVELS[level:]:
        configs.set(entity, {PRODUCER_BYTE_RATE: str(value)})
    match = configs.find(PRODUCER_BYTE_RATE, "alice", "app")
    assert match is not None and match.bound == LEVELS[level][1]


def test_other_users_and_clients_do_not_match_exact_entities() -> None:
    configs = QuotaConfigs()
    configs.set(("alice", "app"), {PRODUCER_BYTE_RATE: "1"})
    configs.set(("alice", None), {PRODUCER_BYTE_RATE: "3"})
    configs.set((None, "app"), {PRODUCER_BYTE_RATE: "7"})
    assert configs.find(PRODUCER_BYTE_RATE, "bob", "other") is None
    assert configs.find(PRODUCER_BYTE_RATE, "bob", "app").bound == 7  # type: ignore[union-attr]
    assert configs.find(PRODUCER_BYTE_RATE, "alice", "other").bound == 3  # type: ignore[union-attr]


def test_a_level_without_the_key_is_skipped_for_that_key() -> None:
    configs = QuotaConfigs()
    configs.set(("alice", None), {CONSUMER_BYTE_RATE: "10", "SCRAM-SHA-256": "salt=..."})
    configs.set((None, DEFAULT), {PRODUCER_BYTE_RATE: "20"})
    assert configs.find(PRODUCER_BYTE_RATE, "alice", "x").bound == 20  # type: ignore[union-attr]
    assert configs.find(CONSUMER_BYTE_RATE, "alice", "x").bound == 10  # type: ignore[union-attr]
    assert configs.get(("alice", None)) == {CONSUMER_BYTE_RATE: 10.0}  # credentials skipped


def test_default_quotas_are_metered_per_user_or_per_client() -> None:
    clock = Clock()
    configs = QuotaConfigs()
    manager = ClientQuotaManager(PRODUCER_BYTE_RATE, configs, 11, 1.0, clock=clock)
    configs.set((None, DEFAULT), {PRODUCER_BYTE_RATE: "100"})
    # 1000 B over the minimum 10 s window = 100 B/s: at the bound, for each client id apart
    assert manager.record("u", "a", 1000) == 0
    assert manager.record("u", "b", 1000) == 0
    assert manager.record("u", "a", 1000) > 0  # client a alone is now over


def test_an_exact_user_quota_is_shared_by_the_users_client_ids() -> None:
    clock = Clock()
    configs = QuotaConfigs()
    manager = ClientQuotaManager(PRODUCER_BYTE_RATE, configs, 11, 1.0, clock=clock)
    configs.set(("u", None), {PRODUCER_BYTE_RATE: "100"})
    assert manager.record("u", "a", 1000) == 0
    assert manager.record("u", "b", 1000) == 10_000  # 200 B/s over 100: 10 s


# -- the managers ------------------------------------------------------------------------


def test_no_quota_configured_means_inactive_and_no_metering() -> None:
    managers = QuotaManagers.create(clock=Clock())
    assert not managers.produce.active and not managers.fetch.active
    assert managers.produce.record("u", "c", 10**12) == 0
    managers.configs.set((None, "c"), {CONSUMER_BYTE_RATE: "1"})
    assert managers.fetch.active and not managers.produce.active
    managers.configs.set((None, "c"), {})
    assert not managers.fetch.active


def test_a_throttled_client_recovers_as_the_window_moves() -> None:
    clock = Clock()
    managers = QuotaManagers.create(clock=clock)
    managers.configs.set((None, "c"), {PRODUCER_BYTE_RATE: "1000"})
    throttle = managers.produce.record("ANONYMOUS", "c", 20_000)
    assert throttle == 10_000  # 2000 B/s over 10 s against 1000 B/s
    # Kafka's estimate: the sample stays in the window until it is 11 windows old
    clock.now += throttle / 1000
    assert managers.produce.throttle_time("ANONYMOUS", "c") > 0
    clock.now += 1.0
    assert managers.produce.throttle_time("ANONYMOUS", "c") == 0


def test_quota_changes_apply_at_once_and_removal_unthrottles() -> None:
    clock = Clock()
    managers = QuotaManagers.create(clock=clock)
    managers.configs.set((None, "c"), {PRODUCER_BYTE_RATE: "10"})
    assert managers.produce.record("u", "c", 1000) > 0
    managers.configs.set((None, "c"), {PRODUCER_BYTE_RATE: "1000000"})
    assert managers.produce.record("u", "c", 1000) == 0
    managers.configs.set((None, "c"), {})
    assert managers.produce.record("u", "c", 10**9) == 0


def test_unrecord_takes_back_a_throttled_fetch() -> None:
    clock = Clock()
    managers = QuotaManagers.create(clock=clock)
    managers.configs.set((None, "c"), {CONSUMER_BYTE_RATE: "100"})
    assert managers.fetch.record("u", "c", 1000) == 0
    assert managers.fetch.record("u", "c", 1000) > 0
    managers.fetch.unrecord("u", "c", 1000)
    assert managers.fetch.throttle_time("u", "c") == 0


def test_request_percentage_throttle_is_bounded_by_one_window() -> None:
    clock = Clock()
    managers = QuotaManagers.create(11, 2, clock=clock)
    managers.configs.set((None, DEFAULT), {REQUEST_PERCENTAGE: "1"})
    # 100 %-seconds (one second of handler time) against 1 %: bounded by 2 s
    assert managers.request.record("u", "c", 100.0) == 2000


def test_entity_names_round_trip() -> None:
    for components in ({"user": "a"}, {"user": None}, {"client-id": "c"},
                       {"user": None, "client-id": None}, {"user": "a", "client-id": "c"}):
        assert entity_components(entity_key(components)) == components


def test_a_fetch_is_bounded_by_what_the_quota_allows_in_a_window() -> None:
    managers = QuotaManagers.create(11, 1, clock=Clock())
    assert managers.fetch.max_value_in_window("u", "c") is None
    managers.configs.set((None, "c"), {CONSUMER_BYTE_RATE: "1000"})
    assert managers.fetch.max_value_in_window("u", "c") == 10_000  # 1000 x 10 x 1 s
    assert managers.fetch.max_value_in_window("u", "other") is None
