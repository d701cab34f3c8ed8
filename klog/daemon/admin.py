"""AdminManager: topic administration as every broker does it in ZooKeeper mode.

Owns validation of topic names, partition counts, replication factors, assignments and
configs, and writes the outcome to the metastore (``/config/topics/<t>`` first, then
``/brokers/topics/<t>``, the order Kafka uses so a topic never exists without its
config). The controller notices the new znodes, elects leaders and updates every
broker's metadata; requests that create topics wait here until this broker's metadata
shows the new partitions with leaders, or their timeout passes (REQUEST_TIMED_OUT, the
topic still being created, as in Kafka).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import re
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from klog.daemon.config import ConfigError, validate_topic_configs
from klog.daemon.metastore import paths
from klog.daemon.metastore.base import NodeExistsError
from klog.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from klog.daemon.broker import Broker

log = logging.getLogger(__name__)

MAX_TOPIC_NAME_LENGTH = 249
_LEGAL_TOPIC = re.compile(r"^[a-zA-Z0-9._-]+$")
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state"})


@dataclass(slots=True)
class TopicSpec:
    name: str
    num_partitions: int = -1
    replication_factor: int = -1
    assignments: dict[int, list[int]] = field(default_factory=dict)
    configs: dict[str, str | None] = field(default_factory=dict)


@dataclass(slots=True)
class TopicResult:
    error_code: int = 0
    error_message: str | None = None
    num_partitions: int = -1
    replication_factor: int = -1
    topic_id: uuid.UUID | None = None
    configs: dict[str, str] = field(default_factory=dict)


class AdminError(Exception):
    def __init__(self, error_code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.error_code = error_code


def validate_topic_name(name: str) -> None:
    """Kafka's Topic.validate: the rules that keep names usable as directory names."""
    if not name:
        raise AdminError(ErrorCode.INVALID_TOPIC_EXCEPTION, "Topic name is illegal, it can't "
                         "be empty")
    if name in (".", ".."):
        raise AdminError(ErrorCode.INVALID_TOPIC_EXCEPTION,
                         "Topic name cannot be \".\" or \"..\"")
    if len(name) > MAX_TOPIC_NAME_LENGTH:
        raise AdminError(ErrorCode.INVALID_TOPIC_EXCEPTION,
                         f"Topic name is illegal, it can't be longer than "
                         f"{MAX_TOPIC_NAME_LENGTH} characters, topic name: {name}")
    if not _LEGAL_TOPIC.match(name):
        raise AdminError(ErrorCode.INVALID_TOPIC_EXCEPTION,
                         f"Topic name \"{name}\" is illegal, it contains a character other "
                         "than ASCII alphanumerics, '.', '_' and '-'")


def assign_replicas(brokers: Sequence[int], num_partitions: int, replication_factor: int,
                    start_partition: int = 0, rng: random.Random | None = None
                    ) -> dict[int, list[int]]:
    """Kafka's rack-unaware assignment: leaders spread round-robin from a random broker,
    followers shifted so that replicas of consecutive partitions land on different
    brokers."""
    if replication_factor <= 0:
        raise AdminError(ErrorCode.INVALID_REPLICATION_FACTOR,
                         "Replication factor must be larger than 0.")
    if num_partitions <= 0:
        raise AdminError(ErrorCode.INVALID_PARTITIONS,
                         "Number of partitions must be larger than 0.")
    ids = sorted(brokers)
    n = len(ids)
    if replication_factor > n:
        raise AdminError(ErrorCode.INVALID_REPLICATION_FACTOR,
                         f"Replication factor: {replication_factor} larger than available "
                         f"brokers: {n}.")
    rng = rng or random.Random()
    start_index = rng.randrange(n)
    shift = rng.randrange(n)
    out: dict[int, list[int]] = {}
    partition = start_partition
    for _ in range(num_partitions):
        if partition > 0 and partition % n == 0:
            shift += 1
        first = (partition + start_index) % n
        replicas = [ids[first]]
        for j in range(replication_factor - 1):
            step = 1 + (shift + j) % (n - 1)
            replicas.append(ids[(first + step) % n])
        out[partition] = replicas
        partition += 1
    return out


class AdminManager:
    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self._metadata_changed = asyncio.Event()

    def metadata_updated(self) -> None:
        """Called after every metadata update: wakes requests waiting for topics."""
        self._metadata_changed.set()

    # -- creating topics --------------------------------------------------------------------

    async def create_topics(self, specs: Sequence[TopicSpec], *, validate_only: bool = False,
                            timeout_ms: int = 30000) -> dict[str, TopicResult]:
        results: dict[str, TopicResult] = {}
        to_wait: list[str] = []
        seen: set[str] = set()
        for spec in specs:
            if spec.name in seen:
                results[spec.name] = TopicResult(int(ErrorCode.INVALID_REQUEST),
                                                 f"Create topics request from client contains "
                                                 f"multiple entries for topic {spec.name}")
                continue
            seen.add(spec.name)
            try:
                result, assignment, configs = self._validate(spec)
                if not validate_only:
                    await asyncio.to_thread(self._write_topic, spec.name, assignment, configs,
                                            result)
                    to_wait.append(spec.name)
                results[spec.name] = result
            except AdminError as exc:
                results[spec.name] = TopicResult(int(exc.error_code), str(exc))
        if to_wait:
            ready = await self.wait_for_topics(to_wait, timeout_ms)
            for name in to_wait:
                if name not in ready:
                    results[name].error_code = int(ErrorCode.REQUEST_TIMED_OUT)
                    results[name].error_message = (
                        f"topic {name} was created but its partitions did not get leaders "
                        f"within {timeout_ms} ms"
                    )
        return results

    def _validate(self, spec: TopicSpec) -> tuple[TopicResult, dict[int, list[int]],
                                                  dict[str, str]]:
        validate_topic_name(spec.name)
        cache = self.broker.metadata_cache
        if cache.contains_topic(spec.name) or self._topic_znode_exists(spec.name):
            raise AdminError(ErrorCode.TOPIC_ALREADY_EXISTS,
                             f"Topic '{spec.name}' already exists.")
        collision = spec.name.replace(".", "_")
        for existing in cache.topic_names():
            if existing != spec.name and existing.replace(".", "_") == collision:
                raise AdminError(ErrorCode.INVALID_TOPIC_EXCEPTION,
                                 f"Topic '{spec.name}' collides with existing topic: {existing}")
        config = self.broker.config
        brokers = cache.alive_broker_ids()
        if spec.assignments:
            if spec.num_partitions != -1 or spec.replication_factor != -1:
                raise AdminError(ErrorCode.INVALID_REQUEST,
                                 "Both numPartitions or replicationFactor and replicasAssignment "
                                 "were set. Both cannot be used at the same time.")
            assignment = {p: list(r) for p, r in spec.assignments.items()}
            self._check_assignment(assignment, brokers)
        else:
            partitions = spec.num_partitions if spec.num_partitions != -1 \
                else config.num_partitions
            rf = spec.replication_factor if spec.replication_factor != -1 \
                else config.default_replication_factor
            assignment = assign_replicas(brokers, partitions, rf)
        try:
            configs = validate_topic_configs(spec.configs)
            self.broker.config.log_config(configs)
        except ConfigError as exc:
            raise AdminError(ErrorCode.INVALID_CONFIG, str(exc)) from None
        first = assignment[min(assignment)]
        return (TopicResult(0, None, len(assignment), len(first), uuid.uuid4(), configs),
                assignment, configs)

    @staticmethod
    def _check_assignment(assignment: Mapping[int, list[int]], brokers: Iterable[int]) -> None:
        alive = set(brokers)
        if sorted(assignment) != list(range(len(assignment))):
            raise AdminError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                             "Partitions should be a consecutive 0-based integer sequence")
        sizes = {len(r) for r in assignment.values()}
        if len(sizes) != 1 or 0 in sizes:
            raise AdminError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                             "All partitions should have the same number of replicas")
        for p, replicas in assignment.items():
            if len(set(replicas)) != len(replicas):
                raise AdminError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                                 f"Duplicate brokers not allowed in replica assignment: "
                                 f"{replicas} for partition id {p}.")
            unknown = [b for b in replicas if b not in alive]
            if unknown:
                raise AdminError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                                 f"Unknown broker(s) in replica assignment: {unknown}.")

    def _topic_znode_exists(self, name: str) -> bool:
        store = self.broker.metastore
        return store is not None and store.exists(paths.topic_path(name)) is not None

    def _write_topic(self, name: str, assignment: dict[int, list[int]], configs: dict[str, str],
                     result: TopicResult) -> None:
        store = self.broker.metastore
        assert store is not None
        config_path = paths.topic_config_path(name)
        try:
            store.create(config_path, paths.EntityConfig(config=configs).encode(), make_parents=True)
        except NodeExistsError:  # left by an earlier, interrupted creation: overwrite it
            store.set(config_path, paths.EntityConfig(config=configs).encode())
        try:
            store.create(
                paths.topic_path(name),
                paths.TopicAssignment(
                    partitions={p: paths.ReplicaAssignment(tuple(r))
                                for p, r in assignment.items()},
                    topic_id=result.topic_id).encode(),
                make_parents=True,
            )
        except NodeExistsError:
            raise AdminError(ErrorCode.TOPIC_ALREADY_EXISTS,
                             f"Topic '{name}' already exists.") from None

    async def wait_for_topics(self, names: Sequence[str], timeout_ms: int) -> set[str]:
        """Wait until this broker's metadata has every partition of ``names`` with a leader;
        returns the ones that are ready when that happens or the timeout passes."""
        deadline = time.monotonic() + max(timeout_ms, 0) / 1000
        while True:
            ready = {n for n in names if self._ready(n)}
            remaining = deadline - time.monotonic()
            if len(ready) == len(set(names)) or remaining <= 0:
                return ready
            self._metadata_changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._metadata_changed.wait(), remaining)

    def _ready(self, name: str) -> bool:
        parts = self.broker.metadata_cache.partitions(name)
        return bool(parts) and all(s.leader >= 0 for s in parts.values())

    async def auto_create_topics(self, names: Sequence[str], *, allowed: bool
                                 ) -> dict[str, int]:
        """Metadata's auto-creation: per topic the error code to report (0 = usable now)."""
        errors: dict[str, int] = {}
        specs = []
        for name in names:
            try:
                validate_topic_name(name)
            except AdminError as exc:
                errors[name] = int(exc.error_code)
                continue
            if not allowed or name in INTERNAL_TOPICS:
                errors[name] = int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
                continue
            specs.append(TopicSpec(name))
        if specs:
            results = await self.create_topics(specs, timeout_ms=2000)
            for name, result in results.items():
                if result.error_code in (0, int(ErrorCode.TOPIC_ALREADY_EXISTS)):
                    ready = self._ready(name)
                    errors[name] = 0 if ready else int(ErrorCode.LEADER_NOT_AVAILABLE)
                elif result.error_code == int(ErrorCode.REQUEST_TIMED_OUT):
                    errors[name] = int(ErrorCode.LEADER_NOT_AVAILABLE)
                else:
                    errors[name] = result.error_code
        return errors
