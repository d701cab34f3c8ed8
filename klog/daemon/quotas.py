"""Client quotas: Kafka's ClientQuotaManager family (KIP-13, KIP-55, KIP-124, KIP-219, KIP-599).

What this module owns, without I/O:

- ``SampledRate``: Kafka's ``Rate`` over a ``SampledStat`` -- ``quota.window.num``
  samples (11) of ``quota.window.size.seconds`` (1 s) each; a sample starts at the first
  value recorded after the previous one ended; samples older than the whole window are
  dropped; the rate is the sum of the samples kept divided by the time since the oldest
  began, but by at least ``num - 1`` whole windows (so a client's first burst is measured
  over ~10 s, not over the milliseconds since it connected).
- ``QuotaConfigs``: the quota entities' configs as Kafka stores them (``/config/users/<u>``,
  ``/config/users/<u>/clients/<c>``, ``/config/clients/<c>``, with ``<default>`` for
  either name) and the lookup of a (user principal, client id) in Kafka's precedence:

      1. /config/users/<user>/clients/<client-id>
      2. /config/users/<user>/clients/<default>
      3. /config/users/<user>
      4. /config/users/<default>/clients/<client-id>
      5. /config/users/<default>/clients/<default>
      6. /config/users/<default>
      7. /config/clients/<client-id>
      8. /config/clients/<default>

  The first level with the quota's key wins; its level decides which clients share one
  rate (Kafka's quota metric tags): a ``users/<default>`` quota is metered per user, a
  ``clients/<default>`` one per client id, an exact ``users/u/clients/c`` per pair.
- ``ClientQuotaManager``: one quota type (``producer_byte_rate``, ``consumer_byte_rate``,
  ``request_percentage``); ``record(user, client_id, value)`` adds the value to the
  entity's rate and answers the throttle time in ms (0 when within its quota), as
  ``ClientQuotaManager.maybeRecordAndGetThrottleTimeMs``: ``(rate - bound) / bound x
  window`` where window is the rate's measuring window; the request quota bounds it by one
  sample window (``QuotaUtils.boundedThrottleTime``), byte quotas do not.
- ``ControllerMutationQuotaManager``: ``controller_mutation_rate`` (KIP-599): partitions
  created or deleted by CreateTopics / CreatePartitions / DeleteTopics; a request of the
  strict versions (CreateTopics v6+, CreatePartitions v3+, DeleteTopics v5+) is refused
  with THROTTLING_QUOTA_EXCEEDED while the rate is above the quota; older versions are
  only throttled.

Hot path: each manager's ``active`` is False while no entity has its quota key, and the
handlers test it before anything else -- a broker with no quotas pays one attribute test
per produce / fetch / request. Lookups are cached per (user, client id) until the next
config change. Everything runs on the broker's event loop; no locks.

Enforcement (KIP-219) is the handlers' and the connection's: the response carries the
throttle time and the connection starts no further request of that client until the time
has passed (``RequestPipeline.throttle``, klog/daemon/pipeline.py).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from klog.protocol.client_quotas import (
    CLIENT_ID,
    CONSUMER_BYTE_RATE,
    CONTROLLER_MUTATION_RATE,
    PRODUCER_BYTE_RATE,
    QUOTA_KEYS,
    REQUEST_PERCENTAGE,
    USER,
)

#: The znode name of a default entity.
DEFAULT = "<default>"

DEFAULT_NUM_SAMPLES = 11
DEFAULT_WINDOW_S = 1

#: An entity: (user, client id); None = not part of the entity, DEFAULT = the default.
EntityKey = tuple[str | None, str | None]


def is_quota_key(key: str) -> bool:
    return key in QUOTA_KEYS


# -- the rate --------------------------------------------------------------------------------


@dataclass(slots=True)
class _Sample:
    start: float
    value: float = 0.0


class SampledRate:
    """Kafka's Rate (per second) over ``num_samples`` samples of ``window_s``."""

    __slots__ = ("_samples", "num_samples", "window_s")

    def __init__(self, num_samples: int = DEFAULT_NUM_SAMPLES,
                 window_s: float = DEFAULT_WINDOW_S) -> None:
        self.num_samples = max(1, num_samples)
        self.window_s = float(window_s)
        self._samples: list[_Sample] = []

    def _purge(self, now: float) -> None:
        expire = self.num_samples * self.window_s
        samples = self._samples
        while samples and now - samples[0].start >= expire:
            samples.pop(0)

    def record(self, value: float, now: float) -> None:
        samples = self._samples
        if not samples or now >= samples[-1].start + self.window_s:
            samples.append(_Sample(now))
            if len(samples) > self.num_samples:
                samples.pop(0)
        samples[-1].value += value

    def window_size(self, now: float) -> float:
        """The time the rate is measured over (Kafka's Rate.windowSize), in seconds."""
        self._purge(now)
        elapsed = now - self._samples[0].start if self._samples else 0.0
        full_windows = int(elapsed / self.window_s)
        min_full = self.num_samples - 1
        if full_windows < min_full:
            elapsed += (min_full - full_windows) * self.window_s
        return elapsed

    def measure(self, now: float) -> float:
        size = self.window_size(now)  # purges first
        total = sum(s.value for s in self._samples)
        return total / size if size > 0 else 0.0


def throttle_time_ms(rate: SampledRate, bound: float, now: float,
                     max_ms: float | None = None) -> int:
    """How long a client whose ``rate`` is above ``bound`` must wait for it to come back to
    the bound (Kafka's QuotaUtils.throttleTime: (rate - bound) / bound x window); 0 within
    the quota. ``max_ms`` bounds it (boundedThrottleTime)."""
    observed = rate.measure(now)
    if observed <= bound:
        return 0
    window = rate.window_size(now)
    ms = (observed - bound) / bound * window * 1000.0 if bound > 0 else math.inf
    if max_ms is not None:
        ms = min(ms, max_ms)
    return round(min(ms, 2**31 - 1))


# -- the configs and the lookup --------------------------------------------------------------


def _levels(user: str, client_id: str) -> tuple[tuple[EntityKey, EntityKey], ...]:
    """Kafka's precedence: (config entity, metric entity that shares one rate)."""
    return (
        ((user, client_id), (user, client_id)),
        ((user, DEFAULT), (user, client_id)),
        ((user, None), (user, None)),
        ((DEFAULT, client_id), (user, client_id)),
        ((DEFAULT, DEFAULT), (user, client_id)),
        ((DEFAULT, None), (user, None)),
        ((None, client_id), (None, client_id)),
        ((None, DEFAULT), (None, client_id)),
    )


@dataclass(frozen=True, slots=True)
class QuotaMatch:
    bound: float
    metric_key: EntityKey


class QuotaConfigs:
    """Every quota entity's quota values (see the module docstring), with listeners told
    after each change (the managers drop their cached lookups)."""

    def __init__(self) -> None:
        self._entities: dict[EntityKey, dict[str, float]] = {}
        self._listeners: list[Callable[[], None]] = []

    def add_listener(self, listener: Callable[[], None]) -> None:
        self._listeners.append(listener)

    def entities(self) -> dict[EntityKey, dict[str, float]]:
        return {k: dict(v) for k, v in self._entities.items()}

    def get(self, entity: EntityKey) -> dict[str, float]:
        return dict(self._entities.get(entity, {}))

    def set(self, entity: EntityKey, config: Mapping[str, str]) -> None:
        """An entity's stored configs (others, such as SCRAM credentials, are skipped)."""
        quotas = quota_values(config)
        if quotas:
            self._entities[entity] = quotas
        else:
            self._entities.pop(entity, None)
        for listener in self._listeners:
            listener()

    def replace_all(self, entities: Iterable[tuple[EntityKey, Mapping[str, str]]]) -> None:
        self._entities = {}
        for entity, config in entities:
            quotas = quota_values(config)
            if quotas:
                self._entities[entity] = quotas
        for listener in self._listeners:
            listener()

    def has(self, key: str) -> bool:
        return any(key in q for q in self._entities.values())

    def find(self, key: str, user: str, client_id: str) -> QuotaMatch | None:
        entities = self._entities
        for config_key, metric_key in _levels(user, client_id):
            quotas = entities.get(config_key)
            if quotas is not None and key in quotas:
                return QuotaMatch(quotas[key], metric_key)
        return None


def quota_values(config: Mapping[str, str]) -> dict[str, float]:
    out: dict[str, float] = {}
    for key, text in config.items():
        if key in QUOTA_KEYS:
            try:
                out[key] = float(text)
            except ValueError:
                continue  # written by a tool that skipped validation
    return out


# -- the managers ----------------------------------------------------------------------------


@dataclass(slots=True)
class _Entity:
    rate: SampledRate
    bound: float


@dataclass(slots=True)
class ClientQuotaManager:
    """One quota type; see the module docstring."""

    key: str
    configs: QuotaConfigs
    num_samples: int = DEFAULT_NUM_SAMPLES
    window_s: float = DEFAULT_WINDOW_S
    #: None: throttle times unbounded (byte rates); else bounded by one window.
    bounded: bool = False
    clock: Callable[[], float] = time.monotonic
    active: bool = False
    _lookups: dict[tuple[str, str], QuotaMatch | None] = field(default_factory=dict)
    _metrics: dict[EntityKey, _Entity] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.configs.add_listener(self._configs_changed)
        self._configs_changed()

    def _configs_changed(self) -> None:
        self._lookups.clear()
        self.active = self.configs.has(self.key)
        # Keep the rates measured so far (Kafka keeps its sensors); new bounds apply at once.
        for entity in self._metrics.values():
            entity.bound = math.inf

    def reconfigure(self, num_samples: int, window_s: float) -> None:
        self.num_samples, self.window_s = num_samples, window_s
        self._metrics.clear()

    def _entity(self, user: str, client_id: str) -> _Entity | None:
        lookup_key = (user, client_id)
        match = self._lookups.get(lookup_key, self)  # self: not looked up yet
        if match is self:
            if len(self._lookups) >= 100_000:  # bounded: client ids come and go
                self._lookups.clear()
            match = self._lookups[lookup_key] = self.configs.find(self.key, user, client_id)
        if match is None:
            return None
        assert isinstance(match, QuotaMatch)
        entity = self._metrics.get(match.metric_key)
        if entity is None:
            if len(self._metrics) >= 100_000:
                self._metrics.clear()
            entity = self._metrics[match.metric_key] = _Entity(
                SampledRate(self.num_samples, self.window_s), match.bound)
        entity.bound = match.bound
        return entity

    def quota(self, user: str, client_id: str) -> float | None:
        """The quota that applies to this user and client id (None: unlimited)."""
        if not self.active:
            return None
        match = self.configs.find(self.key, user, client_id)
        return None if match is None else match.bound

    def max_value_in_window(self, user: str, client_id: str) -> float | None:
        """The most the entity may take within the quota's whole window (Kafka's
        getMaxValueInQuotaWindow: bound x (samples - 1) x window): a consumer's fetch is
        bounded by it, else one response bigger than that would be throttled forever."""
        if not self.active:
            return None
        entity = self._entity(user, client_id)
        if entity is None:
            return None
        return entity.bound * (self.num_samples - 1) * self.window_s

    def record(self, user: str, client_id: str, value: float) -> int:
        """Add ``value`` to the entity's rate; the throttle time in ms (0: within quota)."""
        if not self.active:
            return 0
        entity = self._entity(user, client_id)
        if entity is None:
            return 0
        now = self.clock()
        entity.rate.record(value, now)
        return throttle_time_ms(entity.rate, entity.bound, now,
                                self.window_s * 1000.0 if self.bounded else None)

    def record_mutations(self, user: str, client_id: str, permits: float, strict: bool
                         ) -> tuple[bool, int]:
        """controller_mutation_rate (Kafka's Strict/PermissiveControllerMutationQuota):
        (allowed, throttle ms). Strict (the newer request versions): refused while the
        entity is over its quota, else recorded whatever its size (a burst is let through
        and paid for afterwards). Permissive: always recorded and allowed; the throttle
        time says how far over it went."""
        if not self.active:
            return True, 0
        if strict:
            throttle_ms = self.throttle_time(user, client_id)
            if throttle_ms > 0:
                return False, throttle_ms
            entity = self._entity(user, client_id)
            if entity is not None:
                entity.rate.record(permits, self.clock())
            return True, 0
        return True, self.record(user, client_id, permits)

    def unrecord(self, user: str, client_id: str, value: float) -> None:
        """Take back a recorded value (a throttled fetch answers no data, as Kafka's
        unrecordQuotaSensor)."""
        if self.active and (entity := self._entity(user, client_id)) is not None:
            entity.rate.record(-value, self.clock())

    def throttle_time(self, user: str, client_id: str) -> int:
        """The throttle time of the entity now, recording nothing."""
        if not self.active:
            return 0
        entity = self._entity(user, client_id)
        if entity is None:
            return 0
        return throttle_time_ms(entity.rate, entity.bound, self.clock(),
                                self.window_s * 1000.0 if self.bounded else None)


@dataclass(slots=True)
class QuotaManagers:
    """Kafka's QuotaFactory.QuotaManagers: one manager per client quota type, over one set
    of configs (a BrokerServices member; the connection and handlers meter through it)."""

    configs: QuotaConfigs
    produce: ClientQuotaManager
    fetch: ClientQuotaManager
    request: ClientQuotaManager
    controller_mutation: ClientQuotaManager

    @classmethod
    def create(cls, num_samples: int = DEFAULT_NUM_SAMPLES,
               window_s: float = DEFAULT_WINDOW_S,
               controller_num_samples: int = DEFAULT_NUM_SAMPLES,
               controller_window_s: float = DEFAULT_WINDOW_S,
               clock: Callable[[], float] = time.monotonic) -> QuotaManagers:
        configs = QuotaConfigs()
        return cls(
            configs,
            ClientQuotaManager(PRODUCER_BYTE_RATE, configs, num_samples, window_s, clock=clock),
            ClientQuotaManager(CONSUMER_BYTE_RATE, configs, num_samples, window_s, clock=clock),
            ClientQuotaManager(REQUEST_PERCENTAGE, configs, num_samples, window_s,
                               bounded=True, clock=clock),
            ClientQuotaManager(CONTROLLER_MUTATION_RATE, configs, controller_num_samples,
                               controller_window_s, clock=clock),
        )


# -- entity names as Kafka writes them --------------------------------------------------------


def entity_key(components: Mapping[str, str | None]) -> EntityKey:
    """{user: name|None(default), client-id: ...} -> an EntityKey (None: absent)."""
    def one(kind: str) -> str | None:
        if kind not in components:
            return None
        name = components[kind]
        return DEFAULT if name is None else name
    return one(USER), one(CLIENT_ID)


def entity_components(entity: EntityKey) -> dict[str, str | None]:
    """The inverse of ``entity_key``: entity type -> name (None for the default)."""
    out: dict[str, str | None] = {}
    user, client_id = entity
    if user is not None:
        out[USER] = None if user == DEFAULT else user
    if client_id is not None:
        out[CLIENT_ID] = None if client_id == DEFAULT else client_id
    return out
