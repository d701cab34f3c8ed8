"""The admin client: topics, partitions, configs, offsets, records, cluster, log dirs and
consumer groups.

Owns the routing of admin requests, as Kafka's AdminClient does: CreateTopics, DeleteTopics
and CreatePartitions go to the controller (re-found and retried once on NOT_CONTROLLER);
ListOffsets and DeleteRecords go to each partition's leader (re-routed after a metadata
refresh on NOT_LEADER_OR_FOLLOWER and friends); group requests (DescribeGroups,
DeleteGroups, OffsetFetch, OffsetCommit, OffsetDelete) go to the group's coordinator
(FindCoordinator, found again on NOT_COORDINATOR), ListGroups to every broker; transaction
requests as Kafka's admin client routes them: DescribeTransactions to each transactional
id's coordinator (FindCoordinator key type 1), ListTransactions to every broker,
DescribeProducers to each partition's leader (or one broker when asked), WriteTxnMarkers
(abort_transaction) to the partition's leader; a broker's
configs and log dirs go to that broker; everything else to the least loaded broker.
Results are plain dataclasses; per-item failures come back as ``KafkaClientError`` values
where Kafka reports them per item (create/delete/alter), and are raised where a caller
cannot go on without the answer (describe, list offsets). Used on one event loop; not
thread-safe.

``Any`` below is a Kafka message: a response is a kio entity whose class is chosen by api
key and version at runtime (protocol/apis.py says why), and request values are the nested
mappings build_request turns into one, each field its own type.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from collections import defaultdict
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, TypeVar, overload

from klog.client.errors import (
    INVALID_METADATA,
    KafkaClientError,
    error_for,
)
from klog.client.network import KafkaClient
from klog.protocol import scram
from klog.protocol.acls import (
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
    coerce_enum,
)
from klog.protocol.errors import ErrorCode
from klog.protocol.internal_topics import InternalTopicError

if TYPE_CHECKING:
    from klog.client.group_coordinator import OffsetAndMetadata

#: What a per-partition request to the leaders gives for one partition when it succeeds.
_R = TypeVar("_R")

LIST_OFFSETS, CREATE_TOPICS, DELETE_TOPICS, DELETE_RECORDS = 2, 19, 20, 21
DESCRIBE_CONFIGS, DESCRIBE_LOG_DIRS, CREATE_PARTITIONS = 32, 35, 37
ALTER_REPLICA_LOG_DIRS = 34
INCREMENTAL_ALTER_CONFIGS, DESCRIBE_CLUSTER = 44, 60
OFFSET_COMMIT, OFFSET_FETCH, DESCRIBE_GROUPS, LIST_GROUPS = 8, 9, 15, 16
DELETE_GROUPS, OFFSET_DELETE = 42, 47
ALTER_PARTITION_REASSIGNMENTS, LIST_PARTITION_REASSIGNMENTS = 45, 46
ELECT_LEADERS = 43
DESCRIBE_USER_SCRAM_CREDENTIALS, ALTER_USER_SCRAM_CREDENTIALS = 50, 51
DESCRIBE_CLIENT_QUOTAS, ALTER_CLIENT_QUOTAS = 48, 49
WRITE_TXN_MARKERS, DESCRIBE_PRODUCERS, DESCRIBE_TRANSACTIONS, LIST_TRANSACTIONS = 27, 61, 65, 66
DESCRIBE_ACLS, CREATE_ACLS, DELETE_ACLS = 29, 30, 31
#: ElectLeaders' election types (org.apache.kafka.common.ElectionType).
ELECTION_TYPES = {"preferred": 0, "unclean": 1}

# ListOffsets' special timestamps (ListOffsetsRequest.EARLIEST_TIMESTAMP etc.).
LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2
MAX_TIMESTAMP = -3
_OFFSET_SPECS = {"latest": LATEST_TIMESTAMP, "earliest": EARLIEST_TIMESTAMP,
                 "max_timestamp": MAX_TIMESTAMP}

# ConfigResource.Type
RESOURCE_TOPIC = 2
RESOURCE_BROKER = 4
RESOURCE_BROKER_LOGGER = 8
_RESOURCE_TYPES = {"topic": RESOURCE_TOPIC, "broker": RESOURCE_BROKER,
                   "broker_logger": RESOURCE_BROKER_LOGGER}

#: DescribeConfigs config_source values, by Kafka's names (ConfigEntry.ConfigSource).
CONFIG_SOURCES = {
    0: "UNKNOWN",
    1: "DYNAMIC_TOPIC_CONFIG",
    2: "DYNAMIC_BROKER_CONFIG",
    3: "DYNAMIC_DEFAULT_BROKER_CONFIG",
    4: "STATIC_BROKER_CONFIG",
    5: "DEFAULT_CONFIG",
    6: "DYNAMIC_BROKER_LOGGER_CONFIG",
}

#: IncrementalAlterConfigs operations (AlterConfigOp.OpType).
ALTER_OPS = {"set": 0, "delete": 1, "append": 2, "subtract": 3}

TopicPartition = tuple[str, int]


# --- values -------------------------------------------------------------------------------


@dataclass(frozen=True)
class NewTopic:
    """A topic to create; -1 partitions / replication factor = the broker's defaults.
    ``replica_assignment`` (partition -> broker ids) replaces both."""

    name: str
    num_partitions: int = -1
    replication_factor: int = -1
    replica_assignment: Mapping[int, Sequence[int]] | None = None
    configs: Mapping[str, str | None] | None = None


@dataclass(frozen=True)
class NewPartitions:
    """Grow a topic to ``total_count`` partitions; optionally place the new ones."""

    total_count: int
    new_assignments: Sequence[Sequence[int]] | None = None


@dataclass(frozen=True)
class ConfigResource:
    """A topic (name) or a broker (id as a string; "" = the cluster-wide default)."""

    resource_type: int
    name: str

    @classmethod
    def of(cls, kind: str, name: str) -> ConfigResource:
        try:
            return cls(_RESOURCE_TYPES[kind], name)
        except KeyError:
            raise ValueError(f"unknown config resource type {kind!r} "
                             f"(one of {', '.join(_RESOURCE_TYPES)})") from None

    @property
    def kind(self) -> str:
        for name, value in _RESOURCE_TYPES.items():
            if value == self.resource_type:
                return name
        return str(self.resource_type)


@dataclass(frozen=True)
class ConfigSynonym:
    name: str
    value: str | None
    source: str


@dataclass(frozen=True)
class ConfigEntry:
    name: str
    value: str | None
    source: str
    read_only: bool
    is_sensitive: bool
    synonyms: tuple[ConfigSynonym, ...] = ()
    documentation: str | None = None

    @property
    def is_default(self) -> bool:
        return self.source == "DEFAULT_CONFIG"


@dataclass(frozen=True)
class AlterConfigOp:
    """One incremental change: op is set, delete, append or subtract."""

    name: str
    value: str | None = None
    op: str = "set"


@dataclass(frozen=True)
class ListedOffset:
    offset: int
    timestamp: int
    leader_epoch: int


@dataclass(frozen=True)
class PartitionDescription:
    partition: int
    leader: int
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    offline_replicas: tuple[int, ...]
    error_code: int
    log_start_offset: int = -1
    high_watermark: int = -1


@dataclass(frozen=True)
class TopicDescription:
    name: str
    internal: bool
    topic_id: str | None
    partitions: tuple[PartitionDescription, ...]

    @property
    def replication_factor(self) -> int:
        return max((len(p.replicas) for p in self.partitions), default=0)


@dataclass(frozen=True)
class BrokerDescription:
    node_id: int
    host: str
    port: int
    rack: str | None


@dataclass(frozen=True)
class ClusterDescription:
    cluster_id: str | None
    controller_id: int
    brokers: tuple[BrokerDescription, ...]


@dataclass(frozen=True)
class ReplicaLogInfo:
    size: int
    offset_lag: int
    is_future: bool


@dataclass(frozen=True)
class LogDirDescription:
    broker: int
    log_dir: str
    error_code: int
    total_bytes: int
    usable_bytes: int
    replicas: Mapping[TopicPartition, ReplicaLogInfo] = field(default_factory=dict)


@dataclass(frozen=True)
class GroupListing:
    group_id: str
    protocol_type: str
    state: str | None  # None from brokers before ListGroups v4
    broker: int


@dataclass(frozen=True)
class MemberDescription:
    member_id: str
    group_instance_id: str | None
    client_id: str
    host: str
    assignment: tuple[TopicPartition, ...]  # decoded for consumer groups
    topics: tuple[str, ...] = ()  # the member's subscription (consumer groups)


@dataclass(frozen=True)
class GroupDescription:
    group_id: str
    state: str  # Kafka's: Empty, Stable, PreparingRebalance, CompletingRebalance, Dead
    protocol_type: str
    protocol: str  # the assignor of a consumer group
    members: tuple[MemberDescription, ...]
    coordinator: BrokerDescription


@dataclass(frozen=True)
class PartitionLag:
    """One row of a group's offsets view."""

    topic: str
    partition: int
    current_offset: int | None  # committed; None: nothing committed
    log_end_offset: int | None
    lag: int | None
    member_id: str | None
    host: str | None
    client_id: str | None
    metadata: str | None = None


@dataclass(frozen=True)
class PartitionReassignment:
    """An ongoing reassignment: ``replicas`` is the full set during the move (the target
    plus the replicas still being removed), as ListPartitionReassignments reports it."""

    replicas: tuple[int, ...]
    adding_replicas: tuple[int, ...]
    removing_replicas: tuple[int, ...]


@dataclass(frozen=True)
class OffsetResetSpec:
    """Where a reset moves a group: kind ``earliest``, ``latest``, ``offset`` (value = the
    offset), ``datetime`` (value = ms since the epoch) or ``shift`` (value = +/- n)."""

    kind: str
    value: int = 0


@dataclass(frozen=True)
class ProducerState:
    """One producer of a partition, as DescribeProducers reports it (Kafka's ProducerState;
    -1 for an epoch or offset Kafka shows as absent)."""

    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_timestamp: int
    coordinator_epoch: int  # -1: no marker written yet
    current_transaction_start_offset: int  # -1: no open transaction


@dataclass(frozen=True)
class TransactionListing:
    transactional_id: str
    producer_id: int
    state: str  # Kafka's: Empty, Ongoing, PrepareCommit, ...
    coordinator: int  # the broker that answered


@dataclass(frozen=True)
class TransactionDescription:
    transactional_id: str
    coordinator: int
    state: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    start_time_ms: int | None  # None: no transaction running
    partitions: tuple[TopicPartition, ...]


# --- the client ---------------------------------------------------------------------------


def _offset_timestamp(spec: str | int) -> int:
    if isinstance(spec, str):
        try:
            return _OFFSET_SPECS[spec]
        except KeyError:
            raise ValueError(f"unknown offset spec {spec!r}: earliest, latest, "
                             f"max_timestamp or a timestamp in ms") from None
    return int(spec)


def _error(code: int, message: str | None, subject: str) -> KafkaClientError | None:
    code = int(code)
    if code == 0:
        return None
    return error_for(code, f"{subject}: {message}" if message else subject)


def _filter_values(f: AclBindingFilter) -> dict[str, Any]:
    return {"resource_type_filter": int(f.resource_type),
            "resource_name_filter": f.name, "pattern_type_filter": int(f.pattern_type),
            "principal_filter": f.principal, "host_filter": f.host,
            "operation": int(f.operation), "permission_type": int(f.permission_type)}


def _pattern(resource_type: int, name: str, pattern_type: int) -> ResourcePattern:
    return ResourcePattern(ResourceType(coerce_enum(ResourceType, resource_type)), name,
                           PatternType(coerce_enum(PatternType, pattern_type)))


def _entry(principal: str, host: str, operation: int, permission: int) -> AccessControlEntry:
    return AccessControlEntry(principal, host,
                              AclOperation(coerce_enum(AclOperation, operation)),
                              AclPermissionType(coerce_enum(AclPermissionType, permission)))


class AdminClient:
    """Cluster administration over a KafkaClient (``async with AdminClient(...)``)."""

    def __init__(self, bootstrap_servers: str | Sequence[str], **kwargs: Any) -> None:
        self.client = KafkaClient(bootstrap_servers, **kwargs)

    async def __aenter__(self) -> AdminClient:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def start(self) -> None:
        await self.client.start()

    async def close(self) -> None:
        await self.client.close()

    @property
    def _timeout_ms(self) -> int:
        return self.client.request_timeout_ms

    async def _to_controller(self, api_key: int, values: Mapping[str, Any],
                             errors_of: Callable[[Any], Collection[int]]) -> Any:
        """Send to the controller; once more after a refresh if it answers NOT_CONTROLLER."""
        response = None
        for attempt in range(3):
            controller = self.client.cluster.controller_id
            if controller < 0:
                await self.client.refresh_metadata([])
                controller = self.client.cluster.controller_id
            node = controller if controller >= 0 else None
            response = await self.client.send(node, api_key, values)
            if ErrorCode.NOT_CONTROLLER not in errors_of(response) or attempt == 2:
                return response
            await self.client.refresh_metadata([])
        return response

    # -- topics

    async def create_topics(self, topics: Sequence[NewTopic], *, validate_only: bool = False,
                            timeout_ms: int | None = None
                            ) -> dict[str, KafkaClientError | None]:
        """Create topics; name -> None on success or the error Kafka reported."""
        values = {
            "topics": [{
                "name": t.name,
                "num_partitions": -1 if t.replica_assignment else t.num_partitions,
                "replication_factor": -1 if t.replica_assignment else t.replication_factor,
                "assignments": [
                    {"partition_index": p, "broker_ids": list(brokers)}
                    for p, brokers in sorted((t.replica_assignment or {}).items())
                ],
                "configs": [{"name": k, "value": v} for k, v in (t.configs or {}).items()],
            } for t in topics],
            "timeout": self._timeout_ms if timeout_ms is None else timeout_ms,
            "validate_only": validate_only,
        }
        response = await self._to_controller(
            CREATE_TOPICS, values, lambda r: {int(t.error_code) for t in r.topics})
        return {t.name: _error(t.error_code, getattr(t, "error_message", None), t.name)
                for t in response.topics}

    async def delete_topics(self, names: Sequence[str], *, timeout_ms: int | None = None
                            ) -> dict[str, KafkaClientError | None]:
        values = {
            "topic_names": list(names),  # v1-v5
            "topics": [{"name": n, "topic_id": None} for n in names],  # v6+
            "timeout": self._timeout_ms if timeout_ms is None else timeout_ms,
        }
        response = await self._to_controller(
            DELETE_TOPICS, values, lambda r: {int(t.error_code) for t in r.responses})
        return {t.name: _error(t.error_code, getattr(t, "error_message", None), t.name)
                for t in response.responses}

    async def create_partitions(self, new_partitions: Mapping[str, int | NewPartitions], *,
                                validate_only: bool = False, timeout_ms: int | None = None
                                ) -> dict[str, KafkaClientError | None]:
        topics = []
        for name, spec in new_partitions.items():
            if isinstance(spec, int):
                spec = NewPartitions(spec)
            topics.append({
                "name": name,
                "count": spec.total_count,
                "assignments": None if spec.new_assignments is None else [
                    {"broker_ids": list(b)} for b in spec.new_assignments],
            })
        values = {"topics": topics, "validate_only": validate_only,
                  "timeout": self._timeout_ms if timeout_ms is None else timeout_ms}
        response = await self._to_controller(
            CREATE_PARTITIONS, values, lambda r: {int(t.error_code) for t in r.results})
        return {t.name: _error(t.error_code, getattr(t, "error_message", None), t.name)
                for t in response.results}

    async def list_topics(self, *, include_internal: bool = False
                          ) -> dict[str, TopicDescription]:
        """Every topic the cluster knows, from metadata (no offsets), by name."""
        cluster = await self.client.refresh_metadata(None)
        return {
            name: self._describe_from_metadata(name)
            for name in sorted(cluster.topics)
            if include_internal or name not in cluster.internal_topics
        }

    def _describe_from_metadata(self, name: str,
                                offsets: Mapping[TopicPartition, tuple[int, int]] | None = None
                                ) -> TopicDescription:
        cluster = self.client.cluster
        parts = []
        for p in sorted(cluster.topics.get(name, {}).values(), key=lambda m: m.partition):
            start, hw = (offsets or {}).get((name, p.partition), (-1, -1))
            parts.append(PartitionDescription(
                partition=p.partition, leader=p.leader, leader_epoch=p.leader_epoch,
                replicas=p.replicas, isr=p.isr, offline_replicas=p.offline_replicas,
                error_code=p.error_code, log_start_offset=start, high_watermark=hw))
        topic_id = cluster.topic_ids.get(name)
        return TopicDescription(name, name in cluster.internal_topics,
                                None if topic_id is None else str(topic_id), tuple(parts))

    async def describe_topics(self, names: Sequence[str] | None = None
                              ) -> dict[str, TopicDescription]:
        """Metadata plus each partition's log start offset and high watermark.

        ``names`` None = every topic. Raises KafkaClientError for a topic that does not
        exist (UNKNOWN_TOPIC_OR_PARTITION) or whose metadata carries an error.
        """
        cluster = await self.client.refresh_metadata(None if names is None else list(names))
        wanted = sorted(cluster.topics) if names is None else list(names)
        for name in wanted:
            code = cluster.topic_errors.get(name)
            if code and name not in cluster.topics:
                raise error_for(code, f"topic {name!r}")
        partitions = [(n, p) for n in wanted for p in cluster.partitions_for(n) or []]
        offsets: dict[TopicPartition, tuple[int, int]] = {}
        if partitions:
            earliest = await self.list_offsets({tp: "earliest" for tp in partitions},
                                               raise_errors=False)
            latest = await self.list_offsets({tp: "latest" for tp in partitions},
                                             raise_errors=False)
            for tp in partitions:
                start, end = earliest.get(tp), latest.get(tp)
                offsets[tp] = (start.offset if isinstance(start, ListedOffset) else -1,
                               end.offset if isinstance(end, ListedOffset) else -1)
        return {name: self._describe_from_metadata(name, offsets) for name in wanted}

    # -- offsets and records

    @overload
    async def list_offsets(self, specs: Mapping[TopicPartition, str | int], *,
                           isolation_level: int = 0, raise_errors: Literal[True] = True
                           ) -> dict[TopicPartition, ListedOffset]: ...

    @overload
    async def list_offsets(self, specs: Mapping[TopicPartition, str | int], *,
                           isolation_level: int = 0, raise_errors: bool
                           ) -> dict[TopicPartition, ListedOffset | KafkaClientError]: ...

    async def list_offsets(self, specs: Mapping[TopicPartition, str | int], *,
                           isolation_level: int = 0, raise_errors: bool = True
                           ) -> Mapping[TopicPartition, ListedOffset | KafkaClientError]:
        """Offsets by spec: "earliest", "latest", "max_timestamp" or a timestamp (ms,
        the first offset whose timestamp is >= it; offset -1 when there is none).

        Asks each partition's leader. With ``raise_errors`` False, failed partitions map to
        their KafkaClientError instead of raising.
        """
        wanted = {tp: _offset_timestamp(spec) for tp, spec in specs.items()}

        def request(leader: int, tps: list[TopicPartition]) -> dict[str, Any]:
            by_topic: dict[str, list[dict[str, Any]]] = defaultdict(list)
            for topic, partition in tps:
                by_topic[topic].append({"partition_index": partition,
                                        "timestamp": wanted[(topic, partition)],
                                        "current_leader_epoch": -1,
                                        "max_num_offsets": 1})
            return {"replica_id": -1, "isolation_level": isolation_level,
                    "topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()]}

        def parse(response: Any) -> Iterable[tuple[TopicPartition, int, ListedOffset]]:
            for topic in response.topics:
                for p in topic.partitions:
                    offset = getattr(p, "offset", None)
                    if offset is None:  # v0 answers a list of offsets
                        olds = getattr(p, "old_style_offsets", ())
                        offset = olds[0] if olds else -1
                    yield ((topic.name, int(p.partition_index)), int(p.error_code),
                           ListedOffset(int(offset), int(getattr(p, "timestamp", -1)),
                                        int(getattr(p, "leader_epoch", -1))))

        return await self._to_leaders(LIST_OFFSETS, list(wanted), request, parse, raise_errors)

    @overload
    async def delete_records(self, before: Mapping[TopicPartition, int], *,
                             timeout_ms: int | None = None, raise_errors: Literal[True] = True
                             ) -> dict[TopicPartition, int]: ...

    @overload
    async def delete_records(self, before: Mapping[TopicPartition, int], *,
                             timeout_ms: int | None = None, raise_errors: bool
                             ) -> dict[TopicPartition, int | KafkaClientError]: ...

    async def delete_records(self, before: Mapping[TopicPartition, int], *,
                             timeout_ms: int | None = None, raise_errors: bool = True
                             ) -> Mapping[TopicPartition, int | KafkaClientError]:
        """Move each partition's log start offset up to ``before[tp]`` (-1 = the high
        watermark); returns the new low watermarks."""
        timeout = self._timeout_ms if timeout_ms is None else timeout_ms

        def request(leader: int, tps: list[TopicPartition]) -> dict[str, Any]:
            by_topic: dict[str, list[dict[str, Any]]] = defaultdict(list)
            for topic, partition in tps:
                by_topic[topic].append({"partition_index": partition,
                                        "offset": before[(topic, partition)]})
            return {"topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()],
                    "timeout": timeout}

        def parse(response: Any) -> Iterable[tuple[TopicPartition, int, int]]:
            for topic in response.topics:
                for p in topic.partitions:
                    yield ((topic.name, int(p.partition_index)), int(p.error_code),
                           int(p.low_watermark))

        return await self._to_leaders(DELETE_RECORDS, list(before), request, parse,
                                      raise_errors)

    async def _to_leaders(
        self, api_key: int, partitions: list[TopicPartition],
        request: Callable[[int, list[TopicPartition]], dict[str, Any]],
        parse: Callable[[Any], Iterable[tuple[TopicPartition, int, _R]]], raise_errors: bool,
        attempts: int = 3,
    ) -> dict[TopicPartition, _R | KafkaClientError]:
        """Group ``partitions`` by leader, send one request per leader concurrently, and
        retry what failed with stale-metadata errors after a refresh."""
        results: dict[TopicPartition, _R | KafkaClientError] = {}
        todo = list(dict.fromkeys(partitions))
        for attempt in range(attempts):
            topics = sorted({t for t, _ in todo})
            await self.client.refresh_metadata(topics)
            by_leader: dict[int, list[TopicPartition]] = defaultdict(list)
            retry: list[TopicPartition] = []
            for tp in todo:
                leader = self.client.cluster.leader_for(*tp)
                if leader is None:
                    code = self.client.cluster.topic_errors.get(tp[0]) or (
                        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                        if tp[1] not in (self.client.cluster.topics.get(tp[0]) or {})
                        else ErrorCode.LEADER_NOT_AVAILABLE)
                    results[tp] = error_for(code, f"{tp[0]}-{tp[1]}")
                    if int(code) in INVALID_METADATA and int(code) != 3:
                        retry.append(tp)
                    continue
                by_leader[leader].append(tp)

            async def one(leader: int, tps: list[TopicPartition],
                          retry: list[TopicPartition]) -> None:
                try:
                    response = await self.client.send(leader, api_key, request(leader, tps))
                except KafkaClientError as exc:
                    for tp in tps:
                        results[tp] = exc
                    if exc.retriable:
                        retry.extend(tps)
                    return
                for tp, code, value in parse(response):
                    if code:
                        results[tp] = error_for(code, f"{tp[0]}-{tp[1]}")
                        if code in INVALID_METADATA:
                            retry.append(tp)
                    else:
                        results[tp] = value

            await asyncio.gather(*(one(leader, tps, retry) for leader, tps in by_leader.items()))
            if not retry or attempt == attempts - 1:
                break
            todo = retry
            await asyncio.sleep(self.client.reconnect_backoff_ms / 1000 * (attempt + 1))
        if raise_errors:
            for tp in partitions:
                value = results.get(tp)
                if isinstance(value, KafkaClientError):
                    raise value
        return results

    # -- configs

    async def describe_configs(self, resources: Sequence[ConfigResource], *,
                               include_synonyms: bool = True,
                               include_documentation: bool = False,
                               keys: Sequence[str] | None = None
                               ) -> dict[ConfigResource, list[ConfigEntry]]:
        """Configs with their sources; a broker's configs are asked of that broker."""
        async def one(node: int | None, group: list[ConfigResource]) -> Any:
            return await self.client.send(node, DESCRIBE_CONFIGS, {
                "resources": [{"resource_type": r.resource_type, "resource_name": r.name,
                               "configuration_keys": None if keys is None else list(keys)}
                              for r in group],
                "include_synonyms": include_synonyms,
                "include_documentation": include_documentation,
            })

        out: dict[ConfigResource, list[ConfigEntry]] = {}
        for response in await asyncio.gather(*(
                one(node, group) for node, group in self._route_resources(resources).items())):
            for result in response.results:
                resource = ConfigResource(int(result.resource_type), result.resource_name)
                error = _error(result.error_code, result.error_message,
                               f"{resource.kind} {resource.name!r}")
                if error is not None:
                    raise error
                out[resource] = [_config_entry(c) for c in result.configs]
        return out

    async def alter_configs(self, changes: Mapping[ConfigResource, Sequence[AlterConfigOp]],
                            *, validate_only: bool = False
                            ) -> dict[ConfigResource, KafkaClientError | None]:
        """IncrementalAlterConfigs; resource -> None or the error Kafka reported."""
        for ops in changes.values():
            for op in ops:
                if op.op not in ALTER_OPS:
                    raise ValueError(f"unknown config operation {op.op!r}")

        async def one(node: int | None, group: list[ConfigResource]) -> Any:
            return await self.client.send(node, INCREMENTAL_ALTER_CONFIGS, {
                "resources": [{
                    "resource_type": r.resource_type, "resource_name": r.name,
                    "configs": [{"name": op.name, "config_operation": ALTER_OPS[op.op],
                                 "value": op.value} for op in changes[r]],
                } for r in group],
                "validate_only": validate_only,
            })

        out: dict[ConfigResource, KafkaClientError | None] = {}
        for response in await asyncio.gather(*(
                one(node, group) for node, group in self._route_resources(changes).items())):
            for result in response.responses:
                resource = ConfigResource(int(result.resource_type), result.resource_name)
                out[resource] = _error(result.error_code, result.error_message,
                                       f"{resource.kind} {resource.name!r}")
        return out

    def _route_resources(self, resources: Iterable[ConfigResource]
                         ) -> dict[int | None, list[ConfigResource]]:
        groups: dict[int | None, list[ConfigResource]] = defaultdict(list)
        for r in resources:
            node: int | None = None
            if r.resource_type in (RESOURCE_BROKER, RESOURCE_BROKER_LOGGER) and r.name:
                try:
                    node = int(r.name)
                except ValueError:
                    raise KafkaClientError(f"broker id {r.name!r} is not a number",
                                           ErrorCode.INVALID_REQUEST) from None
            groups[node].append(r)
        return groups

    # -- cluster

    # -- SCRAM users

    async def describe_user_scram_credentials(self, users: Sequence[str] | None = None
                                              ) -> dict[str, list[tuple[str, int]]]:
        """user -> [(mechanism, iterations)]; every user with a credential when ``users``
        is None. A user-level error (e.g. RESOURCE_NOT_FOUND) is raised."""
        response = await self.client.send(None, DESCRIBE_USER_SCRAM_CREDENTIALS, {
            "users": None if users is None else [{"name": u} for u in users]})
        error = _error(response.error_code, response.error_message, "SCRAM credentials")
        if error is not None:
            raise error
        out: dict[str, list[tuple[str, int]]] = {}
        for result in response.results:
            error = _error(result.error_code, result.error_message, f"user {result.user!r}")
            if error is not None:
                raise error
            out[result.user] = [
                (scram.MECHANISM_BY_TYPE.get(int(c.mechanism), f"UNKNOWN({c.mechanism})"),
                 int(c.iterations)) for c in result.credential_infos]
        return out

    async def alter_user_scram_credentials(
            self, upsertions: Sequence[tuple[str, str, str, int]] = (),
            deletions: Sequence[tuple[str, str]] = ()) -> dict[str, KafkaClientError | None]:
        """Upsert (user, mechanism, password, iterations) -- salted here, as Kafka's admin
        client does, so the password never leaves this process -- and delete (user,
        mechanism); user -> None or the error the broker reported."""
        def mechanism_id(name: str) -> int:
            if name not in scram.MECHANISMS:
                raise ValueError(f"unknown SCRAM mechanism {name!r} "
                                 f"(one of {', '.join(scram.MECHANISMS)})")
            return scram.MECHANISMS[name][1]

        upserts = []
        for user, mechanism, password, iterations in upsertions:
            salt = secrets.token_bytes(32)
            upserts.append({"name": user, "mechanism": mechanism_id(mechanism),
                            "iterations": iterations, "salt": salt,
                            "salted_password": scram.salted_password(
                                mechanism, password, salt, iterations)})
        response = await self.client.send(None, ALTER_USER_SCRAM_CREDENTIALS, {
            "deletions": [{"name": u, "mechanism": mechanism_id(m)} for u, m in deletions],
            "upsertions": upserts})
        return {r.user: _error(r.error_code, r.error_message, f"user {r.user!r}")
                for r in response.results}

    async def describe_client_quotas(
            self, components: Sequence[tuple[str, int, str | None]] = (), strict: bool = False
    ) -> list[tuple[dict[str, str | None], dict[str, float]]]:
        """Kafka's Admin.describeClientQuotas: ``components`` are (entity type: "user" or
        "client-id", match type: 0 exact name / 1 the default / 2 any name, name); returns
        [(entity {type: name, None for the default}, {quota key: value})]."""
        response = await self.client.send(None, DESCRIBE_CLIENT_QUOTAS, {
            "components": [{"entity_type": t, "match_type": m, "match": n}
                           for t, m, n in components],
            "strict": strict})
        error = _error(response.error_code, response.error_message, "client quotas")
        if error is not None:
            raise error
        return [({e.entity_type: e.entity_name for e in entry.entity},
                 {v.key: float(v.value) for v in entry.values})
                for entry in response.entries or ()]

    async def alter_client_quotas(
            self, entries: Sequence[tuple[Mapping[str, str | None], Mapping[str, float | None]]],
            validate_only: bool = False) -> list[KafkaClientError | None]:
        """Kafka's Admin.alterClientQuotas: each entry is (entity {type: name, None for the
        default}, {quota key: value, or None to remove it}); one error or None per entry."""
        response = await self.client.send(None, ALTER_CLIENT_QUOTAS, {
            "entries": [{"entity": [{"entity_type": t, "entity_name": n}
                                    for t, n in entity.items()],
                         "ops": [{"key": k, "value": 0.0 if v is None else float(v),
                                  "remove": v is None} for k, v in ops.items()]}
                        for entity, ops in entries],
            "validate_only": validate_only})
        return [_error(r.error_code, r.error_message, "client quota entity " + ", ".join(
            f"{e.entity_type}={e.entity_name or '<default>'}" for e in r.entity))
            for r in response.entries]

    async def describe_cluster(self) -> ClusterDescription:
        try:
            self.client.api_version(self.client.least_loaded_node(), DESCRIBE_CLUSTER)
        except KafkaClientError:
            cluster = await self.client.refresh_metadata([])
            return ClusterDescription(cluster.cluster_id, cluster.controller_id, tuple(
                BrokerDescription(b.node_id, b.host, b.port, b.rack)
                for b in sorted(cluster.brokers.values(), key=lambda b: b.node_id)))
        response = await self.client.send(None, DESCRIBE_CLUSTER, {
            "include_cluster_authorized_operations": False, "endpoint_type": 1})
        error = _error(response.error_code, response.error_message, "describe cluster")
        if error is not None:
            raise error
        return ClusterDescription(response.cluster_id, int(response.controller_id), tuple(
            BrokerDescription(int(b.broker_id), b.host, int(b.port), b.rack)
            for b in sorted(response.brokers, key=lambda b: int(b.broker_id))))

    # -- ACLs (to any broker: each holds every ACL)

    async def create_acls(self, bindings: Sequence[AclBinding]
                          ) -> list[KafkaClientError | None]:
        """Store each binding; per binding None or its error, in order."""
        response = await self.client.send(None, CREATE_ACLS, {"creations": [
            {"resource_type": int(b.pattern.resource_type), "resource_name": b.pattern.name,
             "resource_pattern_type": int(b.pattern.pattern_type),
             "principal": b.entry.principal, "host": b.entry.host,
             "operation": int(b.entry.operation),
             "permission_type": int(b.entry.permission_type)} for b in bindings]})
        return [_error(r.error_code, r.error_message, f"create ACL {b.pattern} {b.entry}")
                for b, r in zip(bindings, response.results, strict=True)]

    async def describe_acls(self, acl_filter: AclBindingFilter = AclBindingFilter()
                            ) -> list[AclBinding]:
        """The ACLs the filter selects (raised: the broker's refusal)."""
        response = await self.client.send(None, DESCRIBE_ACLS, _filter_values(acl_filter))
        error = _error(response.error_code, response.error_message, "describe ACLs")
        if error is not None:
            raise error
        return [AclBinding(_pattern(r.resource_type, r.resource_name, r.pattern_type),
                           _entry(a.principal, a.host, a.operation, a.permission_type))
                for r in response.resources for a in r.acls]

    async def delete_acls(self, filters: Sequence[AclBindingFilter]
                          ) -> list[list[AclBinding] | KafkaClientError]:
        """Delete what each filter selects; per filter the deleted bindings or its error."""
        response = await self.client.send(None, DELETE_ACLS, {
            "filters": [_filter_values(f) for f in filters]})
        out: list[list[AclBinding] | KafkaClientError] = []
        for result in response.filter_results:
            error = _error(result.error_code, result.error_message, "delete ACLs")
            out.append(error if error is not None else [
                AclBinding(_pattern(m.resource_type, m.resource_name, m.pattern_type),
                           _entry(m.principal, m.host, m.operation, m.permission_type))
                for m in result.matching_acls])
        return out

    async def describe_log_dirs(self, brokers: Sequence[int] | None = None,
                                topics: Mapping[str, Sequence[int]] | None = None
                                ) -> dict[int, list[LogDirDescription]]:
        """Each broker's log dirs and the replicas in them (``topics`` None = all)."""
        if brokers is None:
            await self.client.refresh_metadata([])
            brokers = sorted(self.client.cluster.brokers)
        wanted = None if topics is None else [
            {"topic": t, "partitions": list(ps)} for t, ps in topics.items()]

        async def one(broker: int) -> tuple[int, Any]:
            return broker, await self.client.send(broker, DESCRIBE_LOG_DIRS, {"topics": wanted})

        out: dict[int, list[LogDirDescription]] = {}
        for broker, response in await asyncio.gather(*(one(b) for b in brokers)):
            error = _error(getattr(response, "error_code", 0), None, f"broker {broker}")
            if error is not None:
                raise error
            out[broker] = [LogDirDescription(
                broker=broker, log_dir=d.log_dir, error_code=int(d.error_code),
                total_bytes=int(getattr(d, "total_bytes", -1)),
                usable_bytes=int(getattr(d, "usable_bytes", -1)),
                replicas={
                    (t.name, int(p.partition_index)): ReplicaLogInfo(
                        int(p.partition_size), int(p.offset_lag), bool(p.is_future_key))
                    for t in d.topics for p in t.partitions
                },
            ) for d in response.results]
        return out

    async def alter_replica_log_dirs(self, moves: Mapping[tuple[str, int, int], str]
                                     ) -> dict[tuple[str, int, int], KafkaClientError | None]:
        """Move replicas between the log dirs of their brokers (AlterReplicaLogDirs, one
        request per broker): (topic, partition, broker) -> the absolute dir; each replica
        -> None when its move started (or it is there), else the error its broker gave
        (REPLICA_NOT_AVAILABLE: not on that broker yet)."""
        by_broker: dict[int, dict[str, dict[str, list[int]]]] = defaultdict(
            lambda: defaultdict(lambda: defaultdict(list)))
        for (topic, partition, broker), path in sorted(moves.items()):
            by_broker[broker][path][topic].append(partition)

        async def one(broker: int, dirs: dict[str, dict[str, list[int]]]) -> Any:
            return await self.client.send(broker, ALTER_REPLICA_LOG_DIRS, {"dirs": [
                {"path": path, "topics": [{"name": t, "partitions": ps}
                                          for t, ps in topics.items()]}
                for path, topics in dirs.items()]})

        brokers = sorted(by_broker)
        answers = await asyncio.gather(*(one(b, by_broker[b]) for b in brokers))
        out: dict[tuple[str, int, int], KafkaClientError | None] = {}
        for broker, response in zip(brokers, answers, strict=True):
            for t in response.results:
                for p in t.partitions:
                    key = (t.topic_name, int(p.partition_index), broker)
                    out[key] = _error(p.error_code, None,
                                      f"replica {t.topic_name}-{p.partition_index}-{broker}")
        return out

    # -- partition reassignments

    async def topic_metadata(self, names: Sequence[str]) -> dict[str, TopicDescription]:
        """Leaders, replicas and ISRs of those of ``names`` that exist, from one Metadata
        request (no offsets: cheaper than describe_topics for polling)."""
        cluster = await self.client.refresh_metadata(list(names))
        return {name: self._describe_from_metadata(name)
                for name in names if name in cluster.topics}

    async def alter_partition_reassignments(
            self, targets: Mapping[TopicPartition, Sequence[int] | None], *,
            timeout_ms: int | None = None) -> dict[TopicPartition, KafkaClientError | None]:
        """Start (target replicas) or cancel (None) reassignments at the controller;
        partition -> None when accepted, or the error Kafka reported for it."""
        by_topic: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for (topic, partition), replicas in sorted(targets.items()):
            by_topic[topic].append({"partition_index": partition,
                                    "replicas": None if replicas is None else list(replicas)})
        values = {
            "timeout": self._timeout_ms if timeout_ms is None else timeout_ms,
            "allow_replication_factor_change": True,
            "topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()],
        }
        response = await self._to_controller(
            ALTER_PARTITION_REASSIGNMENTS, values,
            lambda r: {int(r.error_code)} | {int(p.error_code) for t in r.responses
                                              for p in t.partitions})
        top = _error(response.error_code, response.error_message, "reassignment")
        out: dict[TopicPartition, KafkaClientError | None] = {tp: top for tp in targets}
        if top is None:
            for t in response.responses:
                for p in t.partitions:
                    tp = (t.name, int(p.partition_index))
                    out[tp] = _error(p.error_code, p.error_message, f"{t.name}-{tp[1]}")
        return out

    async def list_partition_reassignments(
            self, tps: Sequence[TopicPartition] | None = None
            ) -> dict[TopicPartition, PartitionReassignment]:
        """The reassignments in progress (``tps`` None = all of them)."""
        topics = None
        if tps is not None:
            by_topic: dict[str, list[int]] = defaultdict(list)
            for topic, partition in tps:
                by_topic[topic].append(partition)
            topics = [{"name": t, "partition_indexes": sorted(ps)}
                      for t, ps in sorted(by_topic.items())]
        response = await self._to_controller(
            LIST_PARTITION_REASSIGNMENTS, {"timeout": self._timeout_ms, "topics": topics},
            lambda r: {int(r.error_code)})
        error = _error(response.error_code, response.error_message,
                       "list partition reassignments")
        if error is not None:
            raise error
        return {(t.name, int(p.partition_index)): PartitionReassignment(
                    tuple(int(b) for b in p.replicas),
                    tuple(int(b) for b in p.adding_replicas),
                    tuple(int(b) for b in p.removing_replicas))
                for t in response.topics for p in t.partitions}

    # -- leader elections

    async def elect_leaders(self, election_type: str,
                            tps: Sequence[TopicPartition] | None = None, *,
                            timeout_ms: int | None = None
                            ) -> dict[TopicPartition, KafkaClientError | None]:
        """Elect leaders at the controller: ``"preferred"`` moves leadership back to each
        partition's first replica, ``"unclean"`` elects one for partitions without a
        leader (any live replica). ``tps`` None = every partition (the broker then
        reports only those it elected or failed on). partition -> None when elected, or
        the error (ELECTION_NOT_NEEDED when it already had a valid leader)."""
        try:
            kind = ELECTION_TYPES[election_type.lower()]
        except KeyError:
            raise ValueError(f"unknown election type {election_type!r}: "
                             f"preferred or unclean") from None
        topics = None
        if tps is not None:
            by_topic: dict[str, list[int]] = defaultdict(list)
            for topic, partition in dict.fromkeys(tps):
                by_topic[topic].append(partition)
            topics = [{"topic": t, "partitions": ps} for t, ps in sorted(by_topic.items())]
        values = {"election_type": kind, "topic_partitions": topics,
                  "timeout": self._timeout_ms if timeout_ms is None else timeout_ms}
        response = await self._to_controller(
            ELECT_LEADERS, values,
            lambda r: {int(getattr(r, "error_code", 0))} | {
                int(p.error_code) for t in r.replica_election_results
                for p in t.partition_result})
        top = int(getattr(response, "error_code", 0))
        if top and tps is None:
            raise error_for(top, "elect leaders")
        out: dict[TopicPartition, KafkaClientError | None] = {}
        for t in response.replica_election_results:
            for p in t.partition_result:
                code = int(p.error_code)
                out[(t.topic, int(p.partition_id))] = (
                    None if code == 0 else error_for(code, p.error_message))
        if tps is not None:
            for tp in tps:
                out.setdefault(tp, error_for(top or ErrorCode.UNKNOWN_SERVER_ERROR,
                                             "no result for this partition"))
        return out

    # -- consumer groups

    async def _group_coordinator(self, group_id: str, key_type: int = 0) -> int:
        """The coordinator's node id (FindCoordinator, retried while the offsets topic is
        created or loads); metadata refreshed if the node is not known yet. ``key_type``
        1: the coordinator of the transactional id ``group_id``."""
        from klog.client.group_coordinator import find_coordinator

        deadline = asyncio.get_running_loop().time() + self._timeout_ms / 1000
        while True:
            try:
                node_id, _host, _port = await find_coordinator(self.client, group_id, key_type)
                break
            except KafkaClientError as exc:
                if not exc.retriable or asyncio.get_running_loop().time() >= deadline:
                    raise
                await asyncio.sleep(0.1)
        if node_id not in self.client.cluster.brokers:
            await self.client.refresh_metadata([])
        return node_id

    async def _to_group_coordinator(self, group_id: str, api_key: int,
                                    values: Mapping[str, Any],
                                    error_of: Callable[[Any], int]) -> Any:
        """Send to the group's coordinator; find it again while the answer says it moved
        or is loading (NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS / NOT_AVAILABLE)."""
        from klog.client.group_coordinator import COORDINATOR_ERRORS, MAX_VERSIONS

        retry = COORDINATOR_ERRORS | {int(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)}
        response = None
        for attempt in range(10):
            node = await self._group_coordinator(group_id)
            version = self.client.api_version(node, api_key, MAX_VERSIONS.get(api_key))
            response = await self.client.send(node, api_key, values, version=version)
            if int(error_of(response)) not in retry or attempt == 9:
                return response
            await asyncio.sleep(0.1 * (attempt + 1))
        return response

    async def list_groups(self, states: Sequence[str] | None = None) -> list[GroupListing]:
        """Every group of every broker (ListGroups to each), optionally only those in
        ``states`` (Kafka's names: Stable, Empty, PreparingRebalance, ...), by id."""
        await self.client.refresh_metadata([])
        wanted = list(states or ())

        async def one(broker: int) -> list[GroupListing]:
            response = await self.client.send(broker, LIST_GROUPS, {
                "states_filter": wanted, "types_filter": []})
            error = _error(response.error_code, None, f"listing groups on broker {broker}")
            if error is not None:
                raise error
            return [GroupListing(g.group_id, g.protocol_type,
                                 getattr(g, "group_state", None) or None, broker)
                    for g in response.groups]

        found: dict[str, GroupListing] = {}
        for listing in await asyncio.gather(*(one(b) for b in sorted(self.client.cluster.brokers))):
            for g in listing:
                found[g.group_id] = g
        listed = sorted(found.values(), key=lambda g: g.group_id)
        if wanted:  # brokers before ListGroups v4 do not filter
            lowered = {s.lower() for s in wanted}
            listed = [g for g in listed if g.state is None or g.state.lower() in lowered]
        return listed

    async def describe_groups(self, group_ids: Sequence[str]) -> dict[str, GroupDescription]:
        """State, assignor, coordinator and members (with their assignments, decoded for
        consumer groups) of each group. A group that does not exist is in state Dead."""
        from klog.client.assignors import decode_assignment, decode_subscription

        async def one(group_id: str) -> GroupDescription:
            response = await self._to_group_coordinator(
                group_id, DESCRIBE_GROUPS,
                {"groups": [group_id], "include_authorized_operations": False},
                lambda r: r.groups[0].error_code if r.groups else 0)
            node = await self._group_coordinator(group_id)
            meta = self.client.cluster.brokers.get(node)
            coordinator = BrokerDescription(node, meta.host if meta else "?",
                                            meta.port if meta else -1,
                                            meta.rack if meta else None)
            g = response.groups[0]
            error = _error(g.error_code, getattr(g, "error_message", None),
                           f"group {group_id!r}")
            if error is not None:
                raise error
            members = []
            for m in g.members:
                assignment: tuple[TopicPartition, ...] = ()
                topics: tuple[str, ...] = ()
                if g.protocol_type == "consumer":
                    # A member's blobs are its own business: undecodable ones show nothing.
                    with contextlib.suppress(InternalTopicError):
                        assignment = tuple(decode_assignment(bytes(m.member_assignment)))
                    with contextlib.suppress(InternalTopicError):
                        if m.member_metadata:
                            topics = decode_subscription(bytes(m.member_metadata)).topics
                members.append(MemberDescription(
                    m.member_id, getattr(m, "group_instance_id", None), m.client_id,
                    m.client_host, assignment, topics))
            return GroupDescription(g.group_id, g.group_state, g.protocol_type,
                                    g.protocol_data, tuple(members), coordinator)

        results = await asyncio.gather(*(one(g) for g in group_ids))
        return {d.group_id: d for d in results}

    async def delete_groups(self, group_ids: Sequence[str]
                            ) -> dict[str, KafkaClientError | None]:
        """Delete groups and their committed offsets (only empty groups can go:
        NON_EMPTY_GROUP otherwise); group id -> None or the error."""
        async def one(group_id: str) -> tuple[str, KafkaClientError | None]:
            try:
                response = await self._to_group_coordinator(
                    group_id, DELETE_GROUPS, {"groups_names": [group_id]},
                    lambda r: r.results[0].error_code if r.results else 0)
            except KafkaClientError as exc:
                return group_id, exc
            codes = {r.group_id: r.error_code for r in response.results}
            return group_id, _error(codes.get(group_id, ErrorCode.UNKNOWN_SERVER_ERROR),
                                    None, f"group {group_id!r}")

        return dict(await asyncio.gather(*(one(g) for g in group_ids)))

    async def list_group_offsets(self, group_id: str,
                                 partitions: Sequence[TopicPartition] | None = None
                                 ) -> dict[TopicPartition, OffsetAndMetadata]:
        """The group's committed offsets (``partitions`` None: all it has), as
        klog.client.group_coordinator.OffsetAndMetadata; partitions without a committed
        offset are left out."""
        from klog.client.fetcher import TopicPartition as TP
        from klog.client.group_coordinator import (
            offset_fetch_values,
            parse_offset_fetch,
        )

        wanted = None if partitions is None else [TP(*tp) for tp in partitions]
        values = offset_fetch_values(group_id, wanted)

        def error_of(r: Any) -> int:
            return parse_offset_fetch(r, group_id).error

        response = await self._to_group_coordinator(group_id, OFFSET_FETCH, values, error_of)
        found = parse_offset_fetch(response, group_id)
        error = _error(found.error, None, f"group {group_id!r}")
        if error is not None:
            raise error
        for tp, code in found.partition_errors.items():
            raise error_for(code, f"group {group_id!r}: {tp[0]}-{tp[1]}")
        return {(tp.topic, tp.partition): om for tp, om in sorted(found.offsets.items())
                if om.offset >= 0}

    async def alter_group_offsets(self, group_id: str, offsets: Mapping[TopicPartition, int]
                                  ) -> dict[TopicPartition, KafkaClientError | None]:
        """Commit offsets for the group as an admin (generation -1, no member id): the
        coordinator accepts it only while the group has no active members."""
        from klog.client.fetcher import TopicPartition as TP
        from klog.client.group_coordinator import (
            OffsetAndMetadata,
            offset_commit_values,
            parse_offset_commit,
        )

        values = offset_commit_values(
            group_id, {TP(*tp): OffsetAndMetadata(int(o)) for tp, o in offsets.items()})

        def error_of(r: Any) -> int:
            return next((c for c in parse_offset_commit(r).values() if c), 0)

        response = await self._to_group_coordinator(group_id, OFFSET_COMMIT, values, error_of)
        return {(tp.topic, tp.partition): _error(code, None, f"{tp.topic}-{tp.partition}")
                for tp, code in parse_offset_commit(response).items()}

    async def delete_group_offsets(self, group_id: str, partitions: Sequence[TopicPartition]
                                   ) -> dict[TopicPartition, KafkaClientError | None]:
        """Forget the group's committed offsets of these partitions (OffsetDelete); a
        partition the group still consumes answers GROUP_SUBSCRIBED_TO_TOPIC."""
        by_topic: dict[str, list[dict[str, int]]] = defaultdict(list)
        for topic, partition in partitions:
            by_topic[topic].append({"partition_index": partition})
        values = {"group_id": group_id,
                  "topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()]}
        response = await self._to_group_coordinator(
            group_id, OFFSET_DELETE, values, lambda r: r.error_code)
        error = _error(response.error_code, None, f"group {group_id!r}")
        if error is not None:
            raise error
        return {(t.name, int(p.partition_index)):
                _error(p.error_code, None, f"{t.name}-{p.partition_index}")
                for t in response.topics for p in t.partitions}

    async def group_lag(self, group_id: str) -> tuple[GroupDescription, list[PartitionLag]]:
        """What `kafka-consumer-groups --describe` shows: for every partition the group
        has a committed offset for or has assigned, the committed offset, the log end
        offset, the lag and the member consuming it."""
        description = (await self.describe_groups([group_id]))[group_id]
        committed = await self.list_group_offsets(group_id)
        owner: dict[TopicPartition, MemberDescription] = {}
        for m in description.members:
            for tp in m.assignment:
                owner[(tp[0], tp[1])] = m
        partitions = sorted(set(committed) | set(owner))
        ends = await self.list_offsets({tp: "latest" for tp in partitions},
                                       raise_errors=False) if partitions else {}
        rows = []
        for tp in partitions:
            om = committed.get(tp)
            end = ends.get(tp)
            log_end = end.offset if isinstance(end, ListedOffset) else None
            current = None if om is None else om.offset
            lag = None if current is None or log_end is None else max(0, log_end - current)
            member = owner.get(tp)
            rows.append(PartitionLag(tp[0], tp[1], current, log_end, lag,
                                     None if member is None else member.member_id,
                                     None if member is None else member.host,
                                     None if member is None else member.client_id,
                                     None if om is None else om.metadata))
        return description, rows

    async def plan_group_offsets_reset(self, group_id: str,
                                       partitions: Sequence[TopicPartition],
                                       spec: OffsetResetSpec) -> dict[TopicPartition, int]:
        """The new offset of each partition for a reset (kafka-consumer-groups
        --reset-offsets): earliest, latest, an offset, the first offset at or after a time
        (the end when there is none), or the committed offset shifted (KafkaClientError
        for a partition with nothing committed, as Kafka refuses it). Offsets are kept
        within [log start offset, log end offset]."""
        parts = sorted(set(partitions))
        if not parts:
            return {}
        starts = await self.list_offsets({tp: "earliest" for tp in parts})
        ends = await self.list_offsets({tp: "latest" for tp in parts})
        plan: dict[TopicPartition, int] = {}
        if spec.kind == "datetime":
            found = await self.list_offsets({tp: spec.value for tp in parts})
            for tp in parts:
                hit = found[tp].offset
                plan[tp] = hit if hit >= 0 else ends[tp].offset
        elif spec.kind == "shift":
            committed = await self.list_group_offsets(group_id, parts)
            for tp in parts:
                om = committed.get(tp)
                if om is None:
                    raise KafkaClientError(
                        f"cannot shift the offset of {tp[0]}-{tp[1]}: group {group_id!r} "
                        "has no committed offset for it")
                plan[tp] = om.offset + spec.value
        else:
            for tp in parts:
                plan[tp] = {"earliest": starts[tp].offset, "latest": ends[tp].offset,
                            "offset": spec.value}[spec.kind]
        return {tp: max(starts[tp].offset, min(offset, ends[tp].offset))
                for tp, offset in plan.items()}

    # -- transactions

    async def describe_producers(self, partitions: Sequence[TopicPartition], *,
                                 broker_id: int | None = None
                                 ) -> dict[TopicPartition, list[ProducerState] | KafkaClientError]:
        """The active producers of each partition (DescribeProducers), from its leader, or
        from broker ``broker_id``'s replica when given; an error per partition."""
        def request(_node: int, tps: list[TopicPartition]) -> dict[str, Any]:
            by_topic: dict[str, list[int]] = defaultdict(list)
            for topic, partition in tps:
                by_topic[topic].append(partition)
            return {"topics": [{"name": t, "partition_indexes": ps}
                               for t, ps in by_topic.items()]}

        def parse(response: Any) -> Iterable[tuple[TopicPartition, int, list[ProducerState]]]:
            for t in response.topics:
                for p in t.partitions:
                    yield (t.name, p.partition_index), int(p.error_code), [
                        ProducerState(int(s.producer_id), int(s.producer_epoch),
                                      int(s.last_sequence), int(s.last_timestamp),
                                      int(s.coordinator_epoch),
                                      int(s.current_txn_start_offset))
                        for s in p.active_producers]

        wanted = list(dict.fromkeys(partitions))
        if broker_id is None:
            return await self._to_leaders(DESCRIBE_PRODUCERS, wanted, request, parse,
                                          raise_errors=False)
        await self.client.refresh_metadata([])
        if broker_id not in self.client.cluster.brokers:
            raise KafkaClientError(f"broker {broker_id} is not in the cluster")
        response = await self.client.send(broker_id, DESCRIBE_PRODUCERS,
                                          request(broker_id, wanted))
        results: dict[TopicPartition, list[ProducerState] | KafkaClientError] = {}
        for tp, code, producers in parse(response):
            error = _error(code, None, f"{tp[0]}-{tp[1]} on broker {broker_id}")
            results[tp] = producers if error is None else error
        return results

    async def list_transactions(self, states: Sequence[str] = (),
                                producer_ids: Sequence[int] = (),
                                duration_filter_ms: int = -1) -> list[TransactionListing]:
        """Every transactional id of every broker (ListTransactions to each; retried while
        a coordinator loads), optionally only those in ``states``, of ``producer_ids``, or
        (``duration_filter_ms`` >= 0, KIP-994) whose transaction has run longer than that.
        The duration filter needs ListTransactions v1 (Kafka 3.8+): a broker without it is
        UNSUPPORTED_VERSION, as Kafka's admin client says."""
        await self.client.refresh_metadata([])
        values = {"state_filters": list(states), "producer_id_filters": list(producer_ids),
                  "duration_filter": duration_filter_ms}
        loading = int(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)

        async def one(broker: int) -> list[TransactionListing]:
            if duration_filter_ms >= 0:
                await self.client.api_versions_of(broker)  # connected: its own versions
                if self.client.api_version(broker, LIST_TRANSACTIONS) < 1:
                    raise KafkaClientError(
                        f"broker {broker} does not support ListTransactions v1: the duration "
                        "filter can be set only with version 1 or higher (Kafka 3.8+); list "
                        "without --duration-filter", ErrorCode.UNSUPPORTED_VERSION)
            for attempt in range(20):
                response = await self.client.send(broker, LIST_TRANSACTIONS, values)
                if int(response.error_code) != loading or attempt == 19:
                    break
                await asyncio.sleep(0.1 * (attempt + 1))
            error = _error(response.error_code, None,
                           f"listing transactions on broker {broker}")
            if error is not None:
                raise error
            return [TransactionListing(t.transactional_id, int(t.producer_id),
                                       t.transaction_state, broker)
                    for t in response.transaction_states]

        found = await asyncio.gather(*(one(b) for b in sorted(self.client.cluster.brokers)))
        return sorted((t for listing in found for t in listing),
                      key=lambda t: (t.transactional_id, t.coordinator))

    async def describe_transactions(self, transactional_ids: Sequence[str]
                                    ) -> dict[str, TransactionDescription | KafkaClientError]:
        """Each transactional id's state from its coordinator (DescribeTransactions); the
        error where there is none (TRANSACTIONAL_ID_NOT_FOUND, ...)."""
        from klog.client.group_coordinator import COORDINATOR_ERRORS

        retry = COORDINATOR_ERRORS | {int(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)}

        async def one(txn_id: str) -> TransactionDescription | KafkaClientError:
            for attempt in range(10):
                try:
                    node = await self._group_coordinator(txn_id, key_type=1)
                except KafkaClientError as exc:
                    return exc
                response = await self.client.send(node, DESCRIBE_TRANSACTIONS,
                                                  {"transactional_ids": [txn_id]})
                states = list(response.transaction_states)
                code = int(states[0].error_code) if states else \
                    int(ErrorCode.UNKNOWN_SERVER_ERROR)
                if code not in retry or attempt == 9:
                    break
                await asyncio.sleep(0.1 * (attempt + 1))
            error = _error(code, None, f"transactional id {txn_id!r}")
            if error is not None:
                return error
            s = states[0]
            return TransactionDescription(
                txn_id, node, s.transaction_state, int(s.producer_id), int(s.producer_epoch),
                int(s.transaction_timeout),
                None if s.transaction_start_time < 0 else int(s.transaction_start_time),
                tuple(sorted((t.topic, int(p)) for t in s.topics for p in t.partitions)))

        results = await asyncio.gather(*(one(i) for i in transactional_ids))
        return dict(zip(transactional_ids, results, strict=True))

    async def abort_transaction(self, tp: TopicPartition, producer_id: int,
                                producer_epoch: int, coordinator_epoch: int) -> None:
        """Write an ABORT marker for ``producer_id``'s open transaction in ``tp``
        (WriteTxnMarkers to its leader, as Kafka's abortTransaction); raises the error."""
        coordinator_epoch = max(coordinator_epoch, 0)  # Kafka: -1 (no marker yet) -> 0

        def request(_node: int, _tps: list[TopicPartition]) -> dict[str, Any]:
            return {"markers": [{
                "producer_id": producer_id, "producer_epoch": producer_epoch,
                "transaction_result": False, "coordinator_epoch": coordinator_epoch,
                "topics": [{"name": tp[0], "partition_indexes": [tp[1]]}]}]}

        def parse(response: Any) -> Iterable[tuple[TopicPartition, int, None]]:
            for marker in response.markers:
                for t in marker.topics:
                    for p in t.partitions:
                        yield (t.name, p.partition_index), int(p.error_code), None

        await self._to_leaders(WRITE_TXN_MARKERS, [tp], request, parse, raise_errors=True)


def _config_entry(c: Any) -> ConfigEntry:
    source = int(getattr(c, "config_source", -1))
    if source == -1:  # v0 has no source, only is_default
        source = 5 if getattr(c, "is_default", False) else 0
    return ConfigEntry(
        name=c.name,
        value=c.value,
        source=CONFIG_SOURCES.get(source, str(source)),
        read_only=bool(c.read_only),
        is_sensitive=bool(c.is_sensitive),
        synonyms=tuple(ConfigSynonym(s.name, s.value, CONFIG_SOURCES.get(int(s.source),
                                                                          str(s.source)))
                       for s in getattr(c, "synonyms", ())),
        documentation=getattr(c, "documentation", None),
    )
