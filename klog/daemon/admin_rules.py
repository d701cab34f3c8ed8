"""The admin APIs' plain values and the pure rules behind them (no I/O, no state).

The values the handlers translate wire entities to and from (TopicSpec, TopicResult,
PartitionsSpec, ApiError, ...; ResourceType and AlterConfigOp ids) and the checks the
AdminManager (klog/daemon/admin.py) makes before it writes anything, each with Kafka
3.x's error code and message: topic names (Topic.validate), replica assignments and
placement (AdminZkClient, klog.placement's refusals as Kafka's codes), new partitions'
assignments, IncrementalAlterConfigs' operations (SET, DELETE, APPEND, SUBTRACT on list
configs), broker logger levels, and Kafka's ConfigResource labels in messages.
"""

from __future__ import annotations

import logging
import random
import re
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import IntEnum

from klog import placement
from klog.daemon import log_levels
from klog.daemon.config import BROKER_CONFIGS, TOPIC_CONFIGS, ConfigEntry, ConfigType
from klog.daemon.metastore import paths
from klog.daemon.metastore.base import MetastoreError
from klog.protocol.errors import ErrorCode
from klog.storage.config import LogConfig

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
ZERO_UUID = uuid.UUID(int=0)


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
        return ApiError(int(self.error_code), str(self) or None)


class UnknownTopic(AdminError):
    """A topic this broker's metadata does not have, answered without a message."""

    def __init__(self) -> None:
        super().__init__(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "")


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
            raise AdminError(ErrorCode.INVALID_CONFIG, f"Invalid config value for resource "
                             f"{label}: Logger {logger} does not exist!")
        if op == AlterConfigOp.SET and value not in log_levels.VALID_LOG_LEVELS:
            raise AdminError(ErrorCode.INVALID_CONFIG, f"Invalid config value for resource "
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
                raise AdminError(ErrorCode.INVALID_CONFIG,
                                 f"Config value {verb} is not allowed for config key: {name}")
            old = _split_list(out[name] if name in out else default(name))
            given = _split_list(value)
            if op == AlterConfigOp.APPEND:
                new = old + [v for v in given if v not in old]
            else:
                new = [v for v in old if v not in given]
            out[name] = ",".join(new)
    return out


def topic_config_type(name: str) -> ConfigType | None:
    spec = TOPIC_CONFIGS.get(name)
    return spec.type if spec else None


def topic_config_default(name: str) -> str | None:
    # Kafka appends to the topic config's own default (LogConfig), not the broker's.
    attr = name.replace(".", "_")
    value = getattr(LogConfig(), attr, None)
    if isinstance(value, (tuple, list)):
        return ",".join(value)
    spec = TOPIC_CONFIGS.get(name)
    return spec.default if spec else None


def broker_config_type(name: str) -> ConfigType | None:
    spec = BROKER_CONFIGS.get(name)
    return spec.type if spec else None


def broker_config_default(name: str) -> str | None:
    spec = BROKER_CONFIGS.get(name)
    return spec.default if spec else None


# A metastore that fails, or holds a znode that does not parse.
STORE_ERRORS = (MetastoreError, paths.ZNodeDataError)


def metastore_failure(exc: Exception) -> tuple[int, str]:
    """What a client is told when the metastore fails under a request (Kafka answers
    ZooKeeper failures with UNKNOWN_SERVER_ERROR)."""
    log.warning("metastore failure during an admin request: %s", exc)
    return int(ErrorCode.UNKNOWN_SERVER_ERROR), f"metastore failure: {exc}"
