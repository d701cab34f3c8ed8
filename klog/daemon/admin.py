"""AdminManager: topic, partition, record and config administration, ZooKeeper-mode style.

Owns the validation and the metastore writes behind CreateTopics, DeleteTopics,
CreatePartitions, DeleteRecords, DescribeConfigs, AlterConfigs and IncrementalAlterConfigs,
with Kafka 3.x's error codes and messages (ZkAdminManager / AdminZkClient). The handlers
only translate wire entities to the plain values used here.

How each change reaches the cluster, as in Kafka's ZooKeeper mode:

- create a topic: ``/config/topics/<t>`` first, then ``/brokers/topics/<t>`` (a topic never
  exists without its config); the controller elects leaders and updates every broker;
- delete a topic: ``/admin/delete_topics/<t>``; the controller stops and deletes the
  replicas and removes the topic's znodes;
- add partitions: rewrite ``/brokers/topics/<t>`` (compare-and-set on its version) with the
  old and new partitions; the controller's data watch elects the new leaders;
- change configs: overwrite ``/config/<type>/<name>`` and create a
  ``/config/changes/config_change_<seq>`` notification (config_changes.py); this broker
  applies its own change at once, the others when they hear the notification.

Requests that change the cluster then wait until this broker's metadata shows the outcome
(partitions with leaders, or the topic gone) or their timeout passes; a timeout is
REQUEST_TIMED_OUT while the change still goes on, as in Kafka. Runs on the event loop:
metastore calls go to worker threads.

Creating partitions also checks this broker's file descriptors first
(klog/daemon/descriptors.py): a create that would place more partitions here than the
descriptors left allow is refused with POLICY_VIOLATION, before anything is written. A
partition whose log this broker could not create (a full disk) makes the create answer
KAFKA_STORAGE_ERROR, not success: the topic exists, but that partition cannot be used.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import re
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import IntEnum
from typing import TYPE_CHECKING

from klog import placement
from klog.daemon import descriptors, log_levels
from klog.daemon.config import (
    BROKER_CONFIGS,
    TOPIC_CONFIGS,
    ConfigEntry,
    ConfigError,
    ConfigSource,
    ConfigType,
    check_topic_config_name,
    describe_broker_configs,
    describe_broker_default_configs,
    describe_topic_configs,
    validate_broker_dynamic_configs,
    validate_topic_configs,
)
from klog.daemon.config_changes import (
    ConfigChangeManager,
    purge_obsolete_notifications,
    read_entity_config,
    write_entity_config,
)
from klog.daemon.metastore import paths
from klog.daemon.metastore.base import (
    BadVersionError,
    MetastoreError,
    NodeExistsError,
    NoNodeError,
)
from klog.protocol.errors import ErrorCode, KafkaError
from klog.storage.config import LogConfig

if TYPE_CHECKING:
    from klog.daemon.config.broker import BrokerConfig
    from klog.daemon.config.dynamic import DynamicBrokerConfig
    from klog.daemon.controller import Controller
    from klog.daemon.metadata_cache import MetadataCache
    from klog.daemon.metastore.base import MetadataStore
    from klog.daemon.replica_manager import ReplicaManager
    from klog.daemon.topic_configs import TopicConfigs
    from klog.storage.log_manager import LogManager

log = logging.getLogger(__name__)

MAX_TOPIC_NAME_LENGTH = 249
_LEGAL_TOPIC = re.compile(r"^[a-zA-Z0-9._-]+$")
# Kafka's exception -> error code mapping for the placement refusals (Errors.java).
# A mix of racked and unracked brokers is Kafka's AdminOperationException, which it
# answers UNKNOWN_SERVER_ERROR (klog keeps the message, which says what to fix).
_PLACEMENT_ERROR_CODES: dict[type[placement.PlacementError], ErrorCode] = {
    placement.InvalidPartitionsError: ErrorCode.INVALID_PARTITIONS,
    placement.InvalidReplicationFactorError: ErrorCode.INVALID_REPLICATION_FACTOR,
    placement.MixedRacksError: ErrorCode.UNKNOWN_SERVER_ERROR,
}
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state"})
ZERO_UUID = uuid.UUID(int=0)
# How often a deletion re-checks the metastore once the topic left this broker's metadata.
_DELETE_POLL_S = 0.02


class ResourceType(IntEnum):
    """ConfigResource.Type ids (DescribeConfigs / AlterConfigs resource_type)."""

    UNKNOWN = 0
    TOPIC = 2
    BROKER = 4
    BROKER_LOGGER = 8


class AlterConfigOp(IntEnum):
    """IncrementalAlterConfigs config_operation ids (AlterConfigOp.OpType)."""

    SET = 0
    DELETE = 1
    APPEND = 2
    SUBTRACT = 3


_OPS = frozenset(int(op) for op in AlterConfigOp)


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
    #: Every topic config with its effective value and source (CreateTopics v5+).
    config_entries: list[ConfigEntry] = field(default_factory=list)


@dataclass(slots=True)
class PartitionsSpec:
    """CreatePartitions for one topic: the new total ``count``, and optionally the
    replicas of each new partition (in partition order)."""

    name: str
    count: int
    assignments: list[list[int]] | None = None


@dataclass(frozen=True, slots=True)
class ApiError:
    error_code: int = 0
    error_message: str | None = None

    @classmethod
    def of(cls, code: ErrorCode, message: str | None = None) -> ApiError:
        return cls(int(code), message)


NO_ERROR = ApiError()


@dataclass(frozen=True, slots=True)
class DeleteRecordsResult:
    low_watermark: int = -1
    error_code: int = 0


@dataclass(slots=True)
class DescribeConfigsResult:
    resource_type: int
    resource_name: str
    error_code: int = 0
    error_message: str | None = None
    entries: list[ConfigEntry] = field(default_factory=list)


class AdminError(Exception):
    def __init__(self, error_code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.error_code = error_code

    def api_error(self) -> ApiError:
        return ApiError(int(self.error_code), str(self))


# -- validation (pure) ----------------------------------------------------------------------


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


def assign_replicas(brokers: Mapping[int, str | None] | Sequence[int], num_partitions: int,
                    replication_factor: int, start_partition: int = 0,
                    rng: random.Random | None = None,
                    fixed_start_index: int = -1) -> dict[int, list[int]]:
    """``placement.assign_replicas_to_brokers`` (Kafka's assignReplicasToBrokers: rack-aware
    when the brokers have racks, ``brokers`` mapping each to its rack; a plain sequence of
    ids has none), its refusals as the AdminError with the code Kafka answers for them."""
    racks = brokers if isinstance(brokers, Mapping) else dict.fromkeys(brokers)
    try:
        return placement.assign_replicas_to_brokers(racks, num_partitions, replication_factor,
                                                    start_partition, rng, fixed_start_index)
    except placement.PlacementError as exc:
        raise AdminError(_PLACEMENT_ERROR_CODES[type(exc)], str(exc)) from None


def check_assignment(assignment: Mapping[int, Sequence[int]], brokers: Iterable[int]) -> None:
    """A CreateTopics replica assignment: partitions 0..n-1, one replication factor, no
    duplicate brokers in a partition, only live brokers. (Kafka does not check the last
    rule here; its partitions on unknown brokers just never get a leader and the request
    times out. klog says so at once.)"""
    alive = set(brokers)
    sizes = {len(r) for r in assignment.values()}
    if len(sizes) != 1 or 0 in sizes:
        raise AdminError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                         "All partitions should have the same number of replicas")
    for p, replicas in assignment.items():
        if len(set(replicas)) != len(replicas):
            raise AdminError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                             f"Duplicate brokers not allowed in replica assignment: "
                             f"{', '.join(map(str, replicas))} for partition id {p}.")
    if sorted(assignment) != list(range(len(assignment))):
        raise AdminError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                         "partitions should be a consecutive 0-based integer sequence")
    unknown = sorted({b for r in assignment.values() for b in r} - alive)
    if unknown:
        raise AdminError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                         f"Unknown broker(s) in replica assignment: "
                         f"{', '.join(map(str, unknown))}.")


def new_partitions_assignment(existing: Mapping[int, Sequence[int]],
                              brokers: Mapping[int, str | None] | Sequence[int],
                              count: int, proposed: Sequence[Sequence[int]] | None = None,
                              rng: random.Random | None = None) -> dict[int, list[int]]:
    """The replicas of the partitions CreatePartitions adds to a topic that has
    ``existing``, growing it to ``count`` (Kafka's checks, messages and placement:
    rack-aware when ``brokers`` map to racks, continuing the topic's round-robin)."""
    old = len(existing)
    increment = count - old
    if increment < 0:
        raise AdminError(ErrorCode.INVALID_PARTITIONS,
                         f"Topic currently has {old} partitions, which is higher than the "
                         f"requested {count}.")
    if increment == 0:
        raise AdminError(ErrorCode.INVALID_PARTITIONS, f"Topic already has {old} partitions.")
    ids = sorted(brokers)
    first = list(existing.get(0, ()))
    if not first:
        raise AdminError(ErrorCode.UNKNOWN_SERVER_ERROR,
                         "the topic does not have partition 0 in its assignment")
    if proposed is None:
        # Kafka's startIndex: into the brokers sorted by id, whichever placement runs.
        start = next((i for i, b in enumerate(ids) if b >= first[0]), 0)
        racks = {b: brokers[b] for b in ids} if isinstance(brokers, Mapping) \
            else dict.fromkeys(ids)
        return assign_replicas(racks, increment, len(first), start_partition=old, rng=rng,
                               fixed_start_index=start)
    unknown = sorted({b for r in proposed for b in r} - set(ids))
    if unknown:
        raise AdminError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                         f"Unknown broker(s) in replica assignment: "
                         f"{', '.join(map(str, unknown))}.")
    if len(proposed) != increment:
        raise AdminError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                         f"Increasing the number of partitions by {increment} but "
                         f"{len(proposed)} assignments provided.")
    out: dict[int, list[int]] = {}
    for index, replicas in enumerate(proposed):
        p = old + index
        if not replicas:
            raise AdminError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                             f"Cannot have replication factor of 0 for partition id {p}.")
        if len(set(replicas)) != len(replicas):
            raise AdminError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                             f"Duplicate brokers not allowed in replica assignment: "
                             f"{', '.join(map(str, replicas))} for partition id {p}.")
        if len(replicas) != len(first):
            raise AdminError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                             f"Inconsistent replication factor between partitions, partition "
                             f"0 has {len(first)} while partition {p} has replicas "
                             f"{len(replicas)}.")
        out[p] = list(replicas)
    return out


def resource_label(resource_type: int, name: str) -> str:
    """Kafka's ConfigResource.toString, used in error messages."""
    try:
        kind = ResourceType(resource_type).name
    except ValueError:
        kind = "UNKNOWN"
    return f"ConfigResource(type={kind}, name='{name}')"


def _split_list(value: str | None) -> list[str]:
    return [v.strip() for v in (value or "").split(",") if v.strip()]


def alter_log_levels(name: str, ops: Sequence[tuple[str, int, str | None]],
                     validate_only: bool) -> None:
    """IncrementalAlterConfigs on a BROKER_LOGGER resource, as Kafka's
    validateLogLevelConfigs then alterLogLevelConfigs: SET a level of an existing logger,
    DELETE one (not the root's); APPEND and SUBTRACT are refused. Every op is checked
    before any is applied."""
    label = resource_label(ResourceType.BROKER_LOGGER, name)
    names = [logger for logger, _op, _v in ops]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise AdminError(ErrorCode.INVALID_REQUEST,
                         f"Error due to duplicate config keys : {','.join(duplicates)}")
    for logger, op, value in ops:
        if op in (AlterConfigOp.APPEND, AlterConfigOp.SUBTRACT):
            raise AdminError(ErrorCode.INVALID_REQUEST,
                             f"{AlterConfigOp(op).name} operation is not allowed for the "
                             f"BROKER_LOGGER resource")
        if op not in (AlterConfigOp.SET, AlterConfigOp.DELETE):
            raise AdminError(ErrorCode.INVALID_REQUEST,
                             f"Unknown alter configuration operation type {op} for {logger}")
        if not log_levels.logger_exists(logger):
            raise AdminError(ErrorCode.INVALID_REQUEST, f"Invalid config value for resource "
                             f"{label}: Logger {logger} does not exist!")
        if op == AlterConfigOp.SET and value not in log_levels.VALID_LOG_LEVELS:
            raise AdminError(ErrorCode.INVALID_REQUEST, f"Invalid config value for resource "
                             f"{label}: Cannot set the log level of {logger} to {value} as it "
                             f"is not a supported log level. Valid log levels are "
                             f"{', '.join(log_levels.VALID_LOG_LEVELS)}")
        if op == AlterConfigOp.DELETE and logger == log_levels.ROOT_LOGGER:
            raise AdminError(ErrorCode.INVALID_REQUEST,
                             f"Removing the log level of the {log_levels.ROOT_LOGGER} logger "
                             f"is not allowed")
    if validate_only:
        return
    for logger, op, value in ops:
        if op == AlterConfigOp.SET:
            assert value is not None
            log.info("updating the log level of %s to %s", logger, value)
            log_levels.set_level(logger, value)
        else:
            log.info("unset the log level of %s", logger)
            log_levels.unset_level(logger)


def apply_incremental_ops(current: Mapping[str, str],
                          ops: Sequence[tuple[str, int, str | None]],
                          config_type: Callable[[str], ConfigType | None],
                          default: Callable[[str], str | None]) -> dict[str, str]:
    """IncrementalAlterConfigs on one entity's stored overrides: SET, DELETE, and APPEND /
    SUBTRACT for list configs (starting from the config's default when it is not set).
    Raises AdminError with Kafka's codes for duplicate keys, nulls and bad operations."""
    names = [name for name, _op, _v in ops]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise AdminError(ErrorCode.INVALID_REQUEST,
                         f"Error due to duplicate config keys : {','.join(duplicates)}")
    for name, op, _value in ops:
        if op not in _OPS:
            raise AdminError(ErrorCode.INVALID_REQUEST,
                             f"Unknown alter configuration operation type {op} for {name}")
    nulls = [f"{AlterConfigOp(op).name}:{name}" for name, op, value in ops
             if value is None and op != AlterConfigOp.DELETE]
    if nulls:
        raise AdminError(ErrorCode.INVALID_REQUEST,
                         f"Null value not supported for : {','.join(nulls)}")
    out = dict(current)
    for name, op, value in ops:
        if op == AlterConfigOp.SET:
            assert value is not None
            out[name] = value
        elif op == AlterConfigOp.DELETE:
            out.pop(name, None)
        else:
            verb = "append" if op == AlterConfigOp.APPEND else "subtract"
            kind = config_type(name)
            if kind is None:
                raise AdminError(ErrorCode.INVALID_CONFIG, f"Unknown config name: {name}")
            if kind is not ConfigType.LIST:
                raise AdminError(ErrorCode.INVALID_REQUEST,
                                 f"Config value {verb} is not allowed for config key: {name}")
            old = _split_list(out[name] if name in out else default(name))
            given = _split_list(value)
            if op == AlterConfigOp.APPEND:
                new = old + [v for v in given if v not in old]
            else:
                new = [v for v in old if v not in given]
            out[name] = ",".join(new)
    return out


def _topic_config_type(name: str) -> ConfigType | None:
    spec = TOPIC_CONFIGS.get(name)
    return spec.type if spec else None


def _topic_config_default(name: str) -> str | None:
    # Kafka appends to the topic config's own default (LogConfig), not the broker's.
    attr = name.replace(".", "_")
    value = getattr(LogConfig(), attr, None)
    if isinstance(value, (tuple, list)):
        return ",".join(value)
    spec = TOPIC_CONFIGS.get(name)
    return spec.default if spec else None


def _broker_config_type(name: str) -> ConfigType | None:
    spec = BROKER_CONFIGS.get(name)
    return spec.type if spec else None


def _broker_config_default(name: str) -> str | None:
    spec = BROKER_CONFIGS.get(name)
    return spec.default if spec else None


# A metastore that fails, or holds a znode that does not parse.
_STORE_ERRORS = (MetastoreError, paths.ZNodeDataError)


def _metastore_failure(exc: Exception) -> tuple[int, str]:
    """What a client is told when the metastore fails under a request (Kafka answers
    ZooKeeper failures with UNKNOWN_SERVER_ERROR)."""
    log.warning("metastore failure during an admin request: %s", exc)
    return int(ErrorCode.UNKNOWN_SERVER_ERROR), f"metastore failure: {exc}"


# -- the manager -----------------------------------------------------------------------------


#: How long Metadata's auto-creation waits for the new topic's leaders before answering
#: LEADER_NOT_AVAILABLE (Kafka's answer at once; klog's after this wait).
AUTO_CREATE_WAIT_MS = 2000


class AdminManager:
    """Topic, partition, config and record administration for the admin APIs, and the
    config-change manager that keeps this broker's dynamic configs current."""

    def __init__(self, broker_id: int, config: DynamicBrokerConfig, metastore: MetadataStore,
                 metadata_cache: MetadataCache, replica_manager: ReplicaManager,
                 log_manager: LogManager, topic_configs: TopicConfigs,
                 controller: Controller) -> None:
        self.broker_id = broker_id
        self._config = config
        self.store = metastore
        self.metadata_cache = metadata_cache
        self.replica_manager = replica_manager
        self.controller = controller
        self.config_changes = ConfigChangeManager(
            broker_id, config, metastore, topic_configs, replica_manager, log_manager,
            controller)
        metadata_cache.add_listener(self.metadata_updated)
        self._metadata_changed = asyncio.Event()
        # Until when requests wait for the controller's first UpdateMetadata (set by the
        # first that waits).
        self._cluster_metadata_deadline: float | None = None
        # Descriptors promised to creations whose logs may not exist yet (descriptors.py).
        self._reserved_descriptors = 0

    async def startup(self) -> None:
        """Load dynamic broker configs (and, in cluster mode, listen for config changes).
        Called once the metastore and replica manager exist, before clients connect."""
        await self.config_changes.startup()

    def shutdown(self) -> None:
        self.config_changes.shutdown()

    def metadata_updated(self) -> None:
        """Called after every metadata update: wakes requests waiting for topics."""
        self._metadata_changed.set()

    @property
    def config(self) -> BrokerConfig:
        """The broker's config as it is now (dynamic changes included)."""
        return self._config.current

    @property
    def is_controller(self) -> bool:
        return self.controller.active

    async def _wait_until(self, done: Callable[[], bool], deadline: float) -> bool:
        """Wait for a metadata update making ``done()`` true, or the deadline."""
        while True:
            if done():
                return True
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            self._metadata_changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._metadata_changed.wait(), remaining)

    # -- creating topics -----------------------------------------------------------------

    async def create_topics(self, specs: Sequence[TopicSpec], *, validate_only: bool = False,
                            timeout_ms: int = 30000) -> dict[str, TopicResult]:
        results: dict[str, TopicResult] = {}
        to_wait: dict[str, int] = {}
        names = [spec.name for spec in specs]
        reserved = 0
        try:
            for spec in specs:
                if names.count(spec.name) > 1:  # none of the entries is created, as in Kafka
                    results[spec.name] = TopicResult(int(ErrorCode.INVALID_REQUEST),
                                                     "Found multiple entries for this topic.")
                    continue
                try:
                    result, assignment, configs = await self._validate(spec)
                    local = self._local_partitions(assignment.values())
                    self._check_descriptors(local)
                    if validate_only:
                        result.topic_id = None
                    else:
                        self._reserved_descriptors += local
                        reserved += local
                        await asyncio.to_thread(self._write_topic, spec.name, assignment,
                                                configs, result)
                        to_wait[spec.name] = len(assignment)
                    results[spec.name] = result
                except AdminError as exc:
                    results[spec.name] = TopicResult(int(exc.error_code), str(exc))
                except _STORE_ERRORS as exc:
                    results[spec.name] = TopicResult(*_metastore_failure(exc))
            if to_wait:
                if timeout_ms <= 0:
                    ready: set[str] = set()
                else:
                    # Every partition: the controller announces big topics in steps.
                    ready = await self.wait_for_topics(list(to_wait), timeout_ms, to_wait)
                for name in to_wait:
                    if name not in ready:
                        results[name].error_code = int(ErrorCode.REQUEST_TIMED_OUT)
                        results[name].error_message = (
                            f"topic {name} was created but its partitions did not get "
                            f"leaders within {timeout_ms} ms"
                        )
                    elif (failure := self._log_creation_failure(name)) is not None:
                        results[name].error_code = int(ErrorCode.KAFKA_STORAGE_ERROR)
                        results[name].error_message = f"topic {name} was created, but {failure}"
        finally:
            self._reserved_descriptors -= reserved
        return results

    # -- the descriptor budget and failed logs -------------------------------------------

    def _local_partitions(self, replica_lists: Iterable[Sequence[int]]) -> int:
        """How many of these partitions (given by their replicas) would be hosted here."""
        me = self.broker_id
        return sum(1 for replicas in replica_lists if me in replicas)

    def _check_descriptors(self, new_partitions: int) -> None:
        """Refuse (POLICY_VIOLATION) what this broker has no descriptors left for."""
        why = descriptors.refusal(new_partitions, self._reserved_descriptors)
        if why is not None:
            log.warning("refused creating partitions: %s", why)
            raise AdminError(ErrorCode.POLICY_VIOLATION, why)

    def _log_creation_failure(self, topic: str) -> str | None:
        """Why the log of one of ``topic``'s partitions could not be made here, or None."""
        manager = self.replica_manager
        failures = manager.log_creation_failures
        for (name, partition), reason in sorted(failures.items()):
            if name == topic:
                return (f"the log of partition {name}-{partition} could not be created on "
                        f"broker {self.broker_id}: {reason}")
        return None

    async def _validate(self, spec: TopicSpec) -> tuple[TopicResult, dict[int, list[int]],
                                                        dict[str, str]]:
        validate_topic_name(spec.name)
        cache = self.metadata_cache
        if cache.contains_topic(spec.name):
            raise AdminError(ErrorCode.TOPIC_ALREADY_EXISTS,
                             f"Topic '{spec.name}' already exists.")
        nulls = [k for k, v in spec.configs.items() if v is None]
        if nulls:
            raise AdminError(ErrorCode.INVALID_REQUEST,
                             f"Null value not supported for topic configs : {','.join(nulls)}")
        config = self.config
        brokers = cache.alive_broker_racks()
        if spec.assignments:
            if spec.num_partitions != -1 or spec.replication_factor != -1:
                raise AdminError(ErrorCode.INVALID_REQUEST,
                                 "Both numPartitions or replicationFactor and replicasAssignments "
                                 "were set. Both cannot be used at the same time.")
            assignment = {p: list(r) for p, r in spec.assignments.items()}
            check_assignment(assignment, brokers)
        else:
            partitions = spec.num_partitions if spec.num_partitions != -1 \
                else config.num_partitions
            rf = spec.replication_factor if spec.replication_factor != -1 \
                else config.default_replication_factor
            assignment = assign_replicas(brokers, partitions, rf)
        marked, exists = await asyncio.to_thread(self._topic_znodes, spec.name)
        if marked:
            raise AdminError(ErrorCode.TOPIC_ALREADY_EXISTS,
                             f"Topic '{spec.name}' is marked for deletion.")
        if exists:
            raise AdminError(ErrorCode.TOPIC_ALREADY_EXISTS,
                             f"Topic '{spec.name}' already exists.")
        collision = spec.name.replace(".", "_")
        for existing in cache.topic_names():
            if existing != spec.name and existing.replace(".", "_") == collision:
                raise AdminError(ErrorCode.INVALID_TOPIC_EXCEPTION,
                                 f"Topic '{spec.name}' collides with existing topics: "
                                 f"{existing}")
        try:
            configs = validate_topic_configs(spec.configs)
            config.log_config(configs)
            entries = describe_topic_configs(config, configs)
        except ConfigError as exc:
            raise AdminError(ErrorCode.INVALID_CONFIG, str(exc)) from None
        first = assignment[min(assignment)]
        result = TopicResult(0, None, len(assignment), len(first), paths.new_kafka_uuid(),
                             configs, entries)
        return result, assignment, configs

    def _topic_znodes(self, name: str) -> tuple[bool, bool]:
        """(marked for deletion, exists) from the metastore."""
        store = self.store
        if store is None:
            return False, False
        return (store.exists(paths.delete_topic_path(name)) is not None,
                store.exists(paths.topic_path(name)) is not None)

    def _write_topic(self, name: str, assignment: dict[int, list[int]], configs: dict[str, str],
                     result: TopicResult) -> None:
        store = self.store
        config_path = paths.topic_config_path(name)
        config_data = paths.EntityConfig(config=configs).encode()
        try:
            store.create(config_path, config_data, make_parents=True)
        except NodeExistsError:  # left by an earlier, interrupted creation: overwrite it
            store.set(config_path, config_data)
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

    async def wait_for_cluster_metadata(self, timeout_ms: int) -> bool:
        """Wait until this broker has the controller's view of the cluster (its first
        UpdateMetadata); whether it has it. ``timeout_ms`` counts from the first request
        that waits: a broker the controller cannot reach (a wrong advertised listener)
        holds its first requests, not every one."""
        cache = self.metadata_cache
        if self._cluster_metadata_deadline is None:
            self._cluster_metadata_deadline = time.monotonic() + max(timeout_ms, 0) / 1000
        return await self._wait_until(lambda: cache.from_controller,
                                      self._cluster_metadata_deadline)

    async def wait_for_topics(self, names: Sequence[str], timeout_ms: int,
                              partitions: Mapping[str, int] | None = None) -> set[str]:
        """Wait until this broker's metadata has every partition of ``names`` with a leader
        (at least ``partitions[name]`` of them when given); returns the ones that are
        ready when that happens or the timeout passes."""
        want = partitions or {}
        deadline = time.monotonic() + max(timeout_ms, 0) / 1000
        await self._wait_until(lambda: all(self._ready(n, want.get(n, 0)) for n in names),
                               deadline)
        return {n for n in names if self._ready(n, want.get(n, 0))}

    def _ready(self, name: str, at_least: int = 0) -> bool:
        parts = self.metadata_cache.partitions(name)
        return (bool(parts) and len(parts) >= at_least
                and all(s.leader >= 0 for s in parts.values()))

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
            results = await self.create_topics(specs, timeout_ms=AUTO_CREATE_WAIT_MS)
            # TOPIC_ALREADY_EXISTS while not ready: another request (a new client sends
            # several Metadata requests at start) is creating it right now. Wait for that
            # creation as for this one's own, so both answer the same.
            racing = [name for name, result in results.items()
                      if result.error_code == int(ErrorCode.TOPIC_ALREADY_EXISTS)
                      and not self._ready(name)]
            if racing:
                await self.wait_for_topics(racing, AUTO_CREATE_WAIT_MS)
            for name, result in results.items():
                if result.error_code in (0, int(ErrorCode.TOPIC_ALREADY_EXISTS)):
                    ready = self._ready(name)
                    errors[name] = 0 if ready else int(ErrorCode.LEADER_NOT_AVAILABLE)
                elif result.error_code == int(ErrorCode.REQUEST_TIMED_OUT):
                    errors[name] = int(ErrorCode.LEADER_NOT_AVAILABLE)
                else:
                    errors[name] = result.error_code
        return errors

    # -- deleting topics -----------------------------------------------------------------

    async def delete_topics(self, names: Sequence[str], timeout_ms: int
                            ) -> dict[str, ApiError]:
        """Mark each existing topic for deletion and wait until it is gone (from this
        broker's metadata and from the metastore, so it can be created again at once)."""
        cache = self.metadata_cache
        results: dict[str, ApiError] = {}
        marked: list[str] = []
        for name in dict.fromkeys(names):
            if not cache.contains_topic(name):
                results[name] = ApiError.of(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                            "This server does not host this topic-partition.")
                continue
            try:
                await asyncio.to_thread(self._mark_for_deletion, name)
            except _STORE_ERRORS as exc:
                results[name] = ApiError(*_metastore_failure(exc))
                continue
            marked.append(name)
        if not marked:
            return results
        deadline = time.monotonic() + max(timeout_ms, 0) / 1000
        for name in marked:
            if timeout_ms > 0 and await self._wait_deleted(name, deadline):
                results[name] = NO_ERROR
            else:
                results[name] = ApiError.of(ErrorCode.REQUEST_TIMED_OUT,
                                            f"topic {name} is marked for deletion but was not "
                                            f"deleted within {timeout_ms} ms")
        return results

    def _mark_for_deletion(self, name: str) -> None:
        store = self.store
        # Already marked: still a success that waits for the deletion, as in Kafka.
        with contextlib.suppress(NodeExistsError):
            store.create(paths.delete_topic_path(name), b"", make_parents=True)

    async def _wait_deleted(self, name: str, deadline: float) -> bool:
        cache = self.metadata_cache
        if not await self._wait_until(lambda: not cache.contains_topic(name), deadline):
            return False
        # The controller forgets the topic before it removes the znodes; a create right
        # after the answer must not find them.
        while time.monotonic() < deadline:
            marked, exists = await asyncio.to_thread(self._topic_znodes, name)
            if not marked and not exists:
                return True
            await asyncio.sleep(_DELETE_POLL_S)
        return False

    # -- adding partitions ---------------------------------------------------------------

    async def create_partitions(self, specs: Sequence[PartitionsSpec], *, timeout_ms: int,
                                validate_only: bool = False) -> dict[str, ApiError]:
        results: dict[str, ApiError] = {}
        names = [s.name for s in specs]
        to_wait: dict[str, int] = {}
        reserved = 0
        try:
            for spec in specs:
                if names.count(spec.name) > 1:
                    results[spec.name] = ApiError.of(ErrorCode.INVALID_REQUEST,
                                                     "Duplicate topic in request.")
                    continue
                try:
                    local = await asyncio.to_thread(self._add_partitions, spec, validate_only)
                except AdminError as exc:
                    results[spec.name] = exc.api_error()
                    continue
                except _STORE_ERRORS as exc:
                    results[spec.name] = ApiError(*_metastore_failure(exc))
                    continue
                results[spec.name] = NO_ERROR
                if not validate_only:
                    to_wait[spec.name] = spec.count
                    self._reserved_descriptors += local
                    reserved += local
            if to_wait:
                ready = await self.wait_for_topics(list(to_wait), timeout_ms, to_wait) \
                    if timeout_ms > 0 else set()
                for name in to_wait:
                    if name not in ready:
                        results[name] = ApiError.of(
                            ErrorCode.REQUEST_TIMED_OUT,
                            f"the new partitions of {name} did not get leaders within "
                            f"{timeout_ms} ms")
                    elif (failure := self._log_creation_failure(name)) is not None:
                        results[name] = ApiError.of(ErrorCode.KAFKA_STORAGE_ERROR,
                                                    f"partitions were added to {name}, but "
                                                    f"{failure}")
        finally:
            self._reserved_descriptors -= reserved
        return results

    def _add_partitions(self, spec: PartitionsSpec, validate_only: bool) -> int:
        """Read-modify-write of /brokers/topics/<t> (worker thread); returns how many of
        the new partitions this broker hosts."""
        store = self.store
        try:
            validate_topic_name(spec.name)
        except AdminError:  # no such znode can exist
            raise AdminError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                             f"The topic '{spec.name}' does not exist.") from None
        if store.exists(paths.delete_topic_path(spec.name)) is not None:
            raise AdminError(ErrorCode.INVALID_TOPIC_EXCEPTION,
                             "The topic is queued for deletion.")
        for _attempt in range(5):
            try:
                data, stat = store.get(paths.topic_path(spec.name))
            except NoNodeError:
                raise AdminError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                 f"The topic '{spec.name}' does not exist.") from None
            current = paths.TopicAssignment.decode(data, spec.name)
            if any(ra.adding_replicas or ra.removing_replicas
                   for ra in current.partitions.values()):
                raise AdminError(ErrorCode.REASSIGNMENT_IN_PROGRESS,
                                 f"A partition reassignment is in progress for the topic "
                                 f"'{spec.name}'.")
            existing = {p: list(ra.replicas) for p, ra in current.partitions.items()}
            added = new_partitions_assignment(existing,
                                              self.metadata_cache.alive_broker_racks(),
                                              spec.count, spec.assignments)
            local = self._local_partitions(added.values())
            self._check_descriptors(local)
            if validate_only:
                return local
            merged = dict(current.partitions)
            merged.update({p: paths.ReplicaAssignment(tuple(r)) for p, r in added.items()})
            updated = paths.TopicAssignment(partitions=merged, topic_id=current.topic_id)
            try:
                store.set(paths.topic_path(spec.name), updated.encode(), version=stat.version)
                return local
            except BadVersionError:
                continue  # changed meanwhile (another admin, a reassignment): read again
            except NoNodeError:
                raise AdminError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                 f"The topic '{spec.name}' does not exist.") from None
        raise AdminError(ErrorCode.UNKNOWN_SERVER_ERROR,
                         f"the assignment of {spec.name} kept changing; try again")

    # -- deleting records ----------------------------------------------------------------

    async def delete_records(self, offsets: Mapping[tuple[str, int], int]
                             ) -> dict[tuple[str, int], DeleteRecordsResult]:
        """Move each partition's log start offset up to the requested offset (-1: the high
        watermark). Segments wholly below it go with the next retention pass, as in Kafka.
        The low watermark answered is the leader's new log start offset."""
        rm = self.replica_manager
        cache = self.metadata_cache
        results: dict[tuple[str, int], DeleteRecordsResult] = {}
        for tp, offset in offsets.items():
            if cache.partition_state(*tp) is None:
                results[tp] = DeleteRecordsResult(-1, int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION))
                continue
            try:
                partition = rm.leader_partition(*tp)
                plog = partition.log
                if not plog.config.delete:
                    raise AdminError(ErrorCode.POLICY_VIOLATION,
                                     f"Records of partition {tp[0]}-{tp[1]} can not be deleted "
                                     f"due to the configured policy")
                target = partition.high_watermark if offset == -1 else offset
                if target < 0:
                    raise AdminError(ErrorCode.OFFSET_OUT_OF_RANGE,
                                     f"The offset {target} for partition {tp[0]}-{tp[1]} is "
                                     f"not valid")
                # Off the loop: the log's lock may be held by a flush in progress.
                await asyncio.to_thread(plog.maybe_increment_log_start_offset, target)
                results[tp] = DeleteRecordsResult(plog.log_start_offset, 0)
            except AdminError as exc:
                results[tp] = DeleteRecordsResult(-1, int(exc.error_code))
            except KafkaError as exc:
                results[tp] = DeleteRecordsResult(-1, int(exc.error_code))
            except OSError as exc:
                log.error("delete records on %s-%d failed: %s", tp[0], tp[1], exc)
                results[tp] = DeleteRecordsResult(-1, int(ErrorCode.KAFKA_STORAGE_ERROR))
        return results

    # -- describing configs --------------------------------------------------------------

    async def describe_configs(self, resources: Sequence[tuple[int, str, Sequence[str] | None]]
                               ) -> list[DescribeConfigsResult]:
        """Entries of each (resource type, name, keys or None for all)."""
        out = []
        for resource_type, name, keys in resources:
            result = DescribeConfigsResult(resource_type, name)
            try:
                result.entries = await self._describe(resource_type, name,
                                                      set(keys) if keys else None)
            except AdminError as exc:
                result.error_code, result.error_message = int(exc.error_code), str(exc)
            except _STORE_ERRORS as exc:
                result.error_code, result.error_message = _metastore_failure(exc)
            out.append(result)
        return out

    async def _describe(self, resource_type: int, name: str, keys: set[str] | None
                        ) -> list[ConfigEntry]:
        config = self.config
        if resource_type == ResourceType.TOPIC:
            validate_topic_name(name)
            if not self.metadata_cache.contains_topic(name):
                raise AdminError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                 "This server does not host this topic-partition.")
            overrides = await asyncio.to_thread(self._read_config, paths.CONFIG_TYPE_TOPIC,
                                                name)
            try:
                return describe_topic_configs(config, overrides, keys)
            except ConfigError as exc:
                raise AdminError(ErrorCode.INVALID_CONFIG,
                                 f"the stored config of topic {name} is invalid: {exc}"
                                 ) from None
        if resource_type == ResourceType.BROKER:
            if self._resource_broker_id(name, "empty string") is None:
                return describe_broker_default_configs(config, keys)
            return describe_broker_configs(config, keys)
        if resource_type == ResourceType.BROKER_LOGGER:
            self._logger_resource_broker_id(name)
            return [ConfigEntry(logger, level, False, ConfigSource.DYNAMIC_BROKER_LOGGER_CONFIG,
                                False, (), ConfigType.UNKNOWN, None)
                    for logger, level in log_levels.loggers().items()
                    if keys is None or logger in keys]
        raise AdminError(ErrorCode.INVALID_REQUEST,
                         f"Unsupported resource type: {self._type_name(resource_type)}")

    def _logger_resource_broker_id(self, name: str) -> int:
        """A BROKER_LOGGER resource names this broker; it has no cluster default."""
        broker_id = self._resource_broker_id(name) if name else None
        if broker_id is None:
            raise AdminError(ErrorCode.INVALID_REQUEST, "Broker id must not be empty")
        return broker_id

    def _read_config(self, entity_type: str, name: str) -> dict[str, str]:
        store = self.store
        return read_entity_config(store, entity_type, name)

    def _resource_broker_id(self, name: str, alternative: str = "") -> int | None:
        """None for the cluster default (""), this broker's id, else INVALID_REQUEST."""
        if not name:
            return None
        try:
            broker_id = int(name)
        except ValueError:
            raise AdminError(ErrorCode.INVALID_REQUEST,
                             f"Broker id must be an integer, but it is: {name}") from None
        if broker_id != self.broker_id:
            expected = f"{self.broker_id}" + (f" or {alternative}" if alternative else "")
            raise AdminError(ErrorCode.INVALID_REQUEST,
                             f"Unexpected broker id, expected {expected}, but received {name}")
        return broker_id

    @staticmethod
    def _type_name(resource_type: int) -> str:
        try:
            return ResourceType(resource_type).name
        except ValueError:
            return str(resource_type)

    # -- altering configs ----------------------------------------------------------------

    async def alter_configs(self, resources: Sequence[tuple[int, str, Mapping[str, str | None]]],
                            *, validate_only: bool = False) -> list[ApiError]:
        """AlterConfigs: each resource's overrides are REPLACED by the given set."""
        out = []
        for resource_type, name, configs in resources:
            try:
                nulls = [k for k, v in configs.items() if v is None]
                if nulls:
                    raise AdminError(ErrorCode.INVALID_REQUEST,
                                     f"Null value not supported for : {','.join(nulls)}")
                props = {k: v for k, v in configs.items() if v is not None}
                await self._alter(resource_type, name, props, validate_only)
                out.append(NO_ERROR)
            except AdminError as exc:
                out.append(exc.api_error())
            except _STORE_ERRORS as exc:
                out.append(ApiError(*_metastore_failure(exc)))
        return out

    async def incremental_alter_configs(
        self, resources: Sequence[tuple[int, str, Sequence[tuple[str, int, str | None]]]],
        *, validate_only: bool = False,
    ) -> list[ApiError]:
        """IncrementalAlterConfigs: SET/DELETE/APPEND/SUBTRACT on the stored overrides."""
        out = []
        for resource_type, name, ops in resources:
            try:
                if resource_type == ResourceType.TOPIC:
                    validate_topic_name(name)
                    current = await asyncio.to_thread(self._read_config,
                                                      paths.CONFIG_TYPE_TOPIC, name)
                    props = apply_incremental_ops(current, ops, _topic_config_type,
                                                  _topic_config_default)
                elif resource_type == ResourceType.BROKER:
                    broker_id = self._resource_broker_id(name)
                    entity = paths.DEFAULT_ENTITY if broker_id is None else str(broker_id)
                    current = await asyncio.to_thread(self._read_config,
                                                      paths.CONFIG_TYPE_BROKER, entity)
                    props = apply_incremental_ops(current, ops, _broker_config_type,
                                                  _broker_config_default)
                elif resource_type == ResourceType.BROKER_LOGGER:
                    self._logger_resource_broker_id(name)
                    alter_log_levels(name, ops, validate_only)
                    out.append(NO_ERROR)
                    continue
                else:
                    raise AdminError(ErrorCode.INVALID_REQUEST,
                                     f"AlterConfigs is only supported for topics and brokers, "
                                     f"but resource type is {self._type_name(resource_type)}")
                await self._alter(resource_type, name, props, validate_only)
                out.append(NO_ERROR)
            except AdminError as exc:
                out.append(exc.api_error())
            except _STORE_ERRORS as exc:
                out.append(ApiError(*_metastore_failure(exc)))
        return out

    async def _alter(self, resource_type: int, name: str, props: dict[str, str],
                     validate_only: bool) -> None:
        if resource_type == ResourceType.TOPIC:
            await self._alter_topic(name, props, validate_only)
        elif resource_type == ResourceType.BROKER:
            await self._alter_broker(name, props, validate_only)
        else:
            raise AdminError(ErrorCode.INVALID_REQUEST,
                             f"AlterConfigs is only supported for topics and brokers, but "
                             f"resource type is {self._type_name(resource_type)}")

    async def _alter_topic(self, name: str, props: dict[str, str], validate_only: bool) -> None:
        validate_topic_name(name)
        if not self.metadata_cache.contains_topic(name):
            raise AdminError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                             f"The topic '{name}' does not exist.")
        for key in props:
            try:
                check_topic_config_name(key)
            except ConfigError as exc:
                raise AdminError(ErrorCode.INVALID_CONFIG, str(exc)) from None
        try:
            self.config.log_config(validate_topic_configs(props))
        except ConfigError as exc:
            raise AdminError(ErrorCode.INVALID_REQUEST,
                             f"Invalid config value for resource "
                             f"{resource_label(ResourceType.TOPIC, name)}: {exc}") from None
        if validate_only:
            return
        log.info("updating topic %s with new configuration: %s", name, props)
        await asyncio.to_thread(self._write_config, paths.CONFIG_TYPE_TOPIC, name, props)
        self.config_changes.apply_topic_overrides(name, props)

    async def _alter_broker(self, name: str, props: dict[str, str], validate_only: bool) -> None:
        broker_id = self._resource_broker_id(name)
        per_broker = broker_id is not None
        current = self.config
        try:
            validate_broker_dynamic_configs(props, per_broker=per_broker)
            if per_broker:
                new = current.with_dynamic(props, current.dynamic_default_configs)
            else:
                new = current.with_dynamic(current.dynamic_broker_configs, props)
            self._config.validate(new)  # e.g. the log cleaner's bounds on its threads
        except ConfigError as exc:
            raise AdminError(ErrorCode.INVALID_REQUEST,
                             f"Invalid config value for resource "
                             f"{resource_label(ResourceType.BROKER, name)}: {exc}") from None
        if validate_only:
            return
        entity = str(broker_id) if per_broker else paths.DEFAULT_ENTITY
        log.info("updating broker config %s with new configuration: %s", entity, props)
        await asyncio.to_thread(self._write_config, paths.CONFIG_TYPE_BROKER, entity, props)
        if per_broker:
            self.config_changes.apply_broker_configs(props, current.dynamic_default_configs)
        else:
            self.config_changes.apply_broker_configs(current.dynamic_broker_configs, props)

    def _write_config(self, entity_type: str, name: str, props: Mapping[str, str]) -> None:
        store = self.store
        write_entity_config(store, entity_type, name, props)
        if self.config.standalone:
            # No listener runs in standalone mode; keep the notifications bounded here.
            purge_obsolete_notifications(store)
