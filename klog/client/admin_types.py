"""The admin client's results and arguments: plain dataclasses (NewTopic, ConfigResource,
TopicDescription, GroupDescription, PartitionLag, TransactionDescription, ...), as Kafka's
admin client has its NewTopic, ConfigEntry, TopicDescription and friends. No I/O; the
client (klog/client/admin.py, which exports each of them too) builds and reads them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

TopicPartition = tuple[str, int]

# ConfigResource.Type
RESOURCE_TOPIC = 2
RESOURCE_BROKER = 4
RESOURCE_BROKER_LOGGER = 8
_RESOURCE_TYPES = {"topic": RESOURCE_TOPIC, "broker": RESOURCE_BROKER,
                   "broker_logger": RESOURCE_BROKER_LOGGER}


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
