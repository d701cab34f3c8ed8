"""Partition reassignment as kafka-reassign-partitions.sh plans, starts, verifies and
cancels it: the logic behind ``klog reassign``.

Owns the tool's JSON formats (topics-to-move ``{"version":1,"topics":[{"topic":..}]}`` and
the reassignment ``{"version":1,"partitions":[{"topic","partition","replicas","log_dirs"}]}``)
and their validation with Kafka's messages; ``generate``'s proposal (klog/placement.py:
Kafka's assignReplicasToBrokers, rack-aware unless disabled); the throttles ``execute`` writes
(broker rates on every broker a move touches, topic ``partition:broker`` lists: leaders =
the current replicas of moving partitions, followers = the replicas being added) and
``verify``/``cancel`` clear; each partition's status; and the byte progress of the
replicas being added, from DescribeLogDirs. Replica moves between a broker's log dirs
(``log_dirs`` other than ``any``) as Kafka's tool makes them: AlterReplicaLogDirs retried
until each replica is on its broker (``start_log_dir_moves``), the
replica.alter.log.dirs.io.max.bytes.per.second throttle on the brokers whose replicas move
(``log_dir_throttle_changes``), and each move's state from DescribeLogDirs
(``log_dir_move_states``). The pure parts take and return plain values;
the ``async`` ones take a started AdminClient. Not thread-safe (one event loop).
"""

from __future__ import annotations

import asyncio
import json
import random
from collections import defaultdict
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from klog import placement
from klog.client.admin import (
    AdminClient,
    AlterConfigOp,
    ConfigResource,
    PartitionReassignment,
    TopicPartition,
)
from klog.client.errors import KafkaClientError
from klog.protocol.errors import ErrorCode

# The configs a throttled reassignment writes, by Kafka's names.
LEADER_RATE = "leader.replication.throttled.rate"
FOLLOWER_RATE = "follower.replication.throttled.rate"
LOG_DIR_RATE = "replica.alter.log.dirs.io.max.bytes.per.second"
LEADER_REPLICAS = "leader.replication.throttled.replicas"
FOLLOWER_REPLICAS = "follower.replication.throttled.replicas"
BROKER_THROTTLES = (LEADER_RATE, FOLLOWER_RATE, LOG_DIR_RATE)
TOPIC_THROTTLES = (LEADER_REPLICAS, FOLLOWER_REPLICAS)

VERIFY_WARNING = ("Warning: You must run --verify periodically, until the reassignment "
                  "completes, to ensure the throttle is removed.")
EXISTING_REASSIGNMENT = (
    "Cannot execute because there is an existing partition assignment.  Use --additional "
    "to override this and create a new partition assignment in addition to the existing "
    "one. The --additional flag can also be used to change the throttle by resubmitting "
    "the current reassignment.")

Assignment = dict[TopicPartition, list[int]]


class ReassignmentError(ValueError):
    """Input the tool refuses (bad JSON, duplicates, unknown partitions or brokers)."""


# --- names and JSON -----------------------------------------------------------------------


def tp_name(tp: TopicPartition) -> str:
    """Kafka's TopicPartition.toString: ``topic-partition``."""
    return f"{tp[0]}-{tp[1]}"


def sorted_tps(tps: Iterable[TopicPartition]) -> list[TopicPartition]:
    """Kafka's compareTopicPartitions order: by topic, then partition number."""
    return sorted(tps)


_H = TypeVar("_H", bound=Hashable)


def _duplicates(values: Iterable[_H]) -> list[_H]:
    seen: set[_H] = set()
    dups: list[_H] = []
    for v in values:
        if v in seen and v not in dups:
            dups.append(v)
        seen.add(v)
    return dups


def _load(text: str, what: str) -> dict[str, Any]:  # Any: a JSON document's values
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise ReassignmentError(f"{what} is not valid JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise ReassignmentError(f"{what} must be a JSON object")
    version = doc.get("version", 1)
    if version != 1:
        raise ReassignmentError(f"Not supported version field value {version}")
    return doc


def _int(value: object, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ReassignmentError(f"{what} must be an integer, not {value!r}")
    return value


def parse_broker_list(text: str) -> list[int]:
    """``--broker-list 1,2,3``; duplicates are refused as Kafka refuses them."""
    try:
        brokers = [int(b) for b in text.split(",") if b.strip()]
    except ValueError:
        raise ReassignmentError(f"--broker-list {text!r} must be broker ids separated by "
                                f"commas") from None
    if not brokers:
        raise ReassignmentError("--broker-list names no broker")
    dups = _duplicates(brokers)
    if dups:
        raise ReassignmentError("Broker list contains duplicate entries: "
                                + ",".join(str(b) for b in dups))
    return brokers


def parse_topics_to_move(text: str) -> list[str]:
    """The --topics-to-move-json-file document -> topic names."""
    doc = _load(text, "the topics-to-move JSON")
    topics = doc.get("topics")
    if not isinstance(topics, list):
        raise ReassignmentError('the topics-to-move JSON has no "topics" list')
    names = []
    for item in topics:
        if not isinstance(item, dict) or not isinstance(item.get("topic"), str):
            raise ReassignmentError(f'each entry of "topics" needs a "topic" name: {item!r}')
        names.append(item["topic"])
    dups = _duplicates(names)
    if dups:
        raise ReassignmentError("List of topics to reassign contains duplicate entries: "
                                + ",".join(dups))
    return names


def parse_reassignment(text: str, *, validate: bool = True
                       ) -> tuple[Assignment, dict[tuple[str, int, int], str]]:
    """The --reassignment-json-file document -> (partition -> target replicas, the log
    dirs it asks for other than ``any`` keyed by (topic, partition, broker)).

    ``validate`` applies execute's checks (non-empty, no duplicate partitions or
    replicas), with Kafka's messages.
    """
    doc = _load(text, "the reassignment JSON")
    partitions = doc.get("partitions")
    if not isinstance(partitions, list):
        raise ReassignmentError('the reassignment JSON has no "partitions" list')
    pairs: list[tuple[TopicPartition, list[int]]] = []
    log_dirs: dict[tuple[str, int, int], str] = {}
    for item in partitions:
        if not isinstance(item, dict) or not isinstance(item.get("topic"), str):
            raise ReassignmentError(f'each partition needs "topic", "partition" and '
                                    f'"replicas": {item!r}')
        topic = item["topic"]
        partition = _int(item.get("partition"), f"the partition of {topic!r}")
        replicas_value = item.get("replicas")
        if not isinstance(replicas_value, list):
            raise ReassignmentError(f'{topic}-{partition} needs a "replicas" list')
        replicas = [_int(r, f"a replica of {topic}-{partition}") for r in replicas_value]
        dirs = item.get("log_dirs", ["any"] * len(replicas))
        if not isinstance(dirs, list) or not all(isinstance(d, str) for d in dirs):
            raise ReassignmentError(f'"log_dirs" of {topic}-{partition} must be a list '
                                    f'of strings')
        if len(dirs) != len(replicas):
            raise ReassignmentError(
                f"Size of replicas list {replicas} is different from size of log dirs list "
                f"{dirs} for partition {topic}-{partition}")
        for broker, d in zip(replicas, dirs, strict=True):
            if d != "any":
                log_dirs[(topic, partition, broker)] = d
        pairs.append(((topic, partition), replicas))
    if validate:
        if not pairs:
            raise ReassignmentError("Partition reassignment list cannot be empty.")
        if any(not replicas for _, replicas in pairs):
            raise ReassignmentError("Partition replica list cannot be empty.")
        dups = _duplicates(tp for tp, _ in pairs)
        if dups:
            raise ReassignmentError("Partition reassignment contains duplicate topic "
                                    "partitions: " + ",".join(tp_name(tp) for tp in dups))
        multiple = [f"{tp_name(tp)} contains multiple entries for "
                    + ",".join(str(b) for b in _duplicates(replicas))
                    for tp, replicas in pairs if _duplicates(replicas)]
        if multiple:
            raise ReassignmentError("Partition replica lists may not contain duplicate "
                                    "entries: " + ". ".join(multiple))
    return dict(pairs), log_dirs


def format_reassignment(assignment: Mapping[TopicPartition, Sequence[int]]) -> str:
    """Kafka's formatAsReassignmentJson: one compact line, partitions in order."""
    return json.dumps({"version": 1, "partitions": [
        {"topic": t, "partition": p, "replicas": list(assignment[(t, p)]),
         "log_dirs": ["any"] * len(assignment[(t, p)])}
        for t, p in sorted_tps(assignment)]}, separators=(",", ":"))


def assignment_json(assignment: Mapping[TopicPartition, Sequence[int]]) -> dict[str, Any]:
    # Any: a JSON document's values.
    doc: dict[str, Any] = json.loads(format_reassignment(assignment))
    return doc


# --- generate -----------------------------------------------------------------------------


def propose(current: Mapping[TopicPartition, Sequence[int]], brokers: Mapping[int, str | None],
            *, rack_aware: bool = True, rng: random.Random | None = None) -> Assignment:
    """generate's proposal: each topic's partitions spread anew over ``brokers`` (id ->
    rack, the --broker-list brokers the cluster knows), keeping each topic's replication
    factor (that of its first partition, as Kafka does)."""
    rng = rng or random.Random()
    if not brokers:
        raise ReassignmentError("none of the brokers in --broker-list is in the cluster")
    racks = {b: r for b, r in brokers.items() if r is not None} if rack_aware else {}
    if racks and len(racks) != len(brokers):
        raise ReassignmentError(
            "Not all brokers have rack information. Add --disable-rack-aware in command "
            "line to make replica assignment without rack information.")
    by_topic: dict[str, list[int]] = defaultdict(list)
    for topic, partition in sorted_tps(current):
        by_topic[topic].append(partition)
    out: Assignment = {}
    for topic, partitions in by_topic.items():
        rf = len(current[(topic, partitions[0])])
        try:
            if racks:
                plan = placement.assign_replicas_rack_aware(racks, len(partitions), rf, rng)
            else:
                plan = placement.assign_replicas(list(brokers), len(partitions), rf, rng=rng)
        except placement.PlacementError as exc:
            raise ReassignmentError(str(exc)) from None
        for index, partition in enumerate(partitions):
            out[(topic, partition)] = plan[index]
    return out


# --- execute: moves and throttles ---------------------------------------------------------


@dataclass(frozen=True)
class PartitionMove:
    sources: frozenset[int]  # the replicas before the move
    destinations: frozenset[int]  # the target replicas


MoveMap = dict[str, dict[int, PartitionMove]]


def move_map(ongoing: Mapping[TopicPartition, PartitionReassignment],
             proposed: Mapping[TopicPartition, Sequence[int]],
             current: Mapping[TopicPartition, Sequence[int]]) -> MoveMap:
    """Kafka's calculateProposedMoveMap: ongoing reassignments (replicas minus adding =
    where they came from) plus the proposed ones (sources = the ongoing move's sources or
    the current replicas)."""
    moves: MoveMap = defaultdict(dict)
    for (topic, partition), r in ongoing.items():
        adding = set(r.adding_replicas)
        moves[topic][partition] = PartitionMove(
            frozenset(b for b in r.replicas if b not in adding), frozenset(adding))
    for (topic, partition), replicas in proposed.items():
        before = moves[topic].get(partition)
        sources = before.sources if before else frozenset(current.get((topic, partition), ()))
        moves[topic][partition] = PartitionMove(sources, frozenset(replicas))
    return dict(moves)


def _throttle_list(entries: Iterable[tuple[int, int]]) -> str:
    # Kafka collects "p:b" strings in a TreeSet: string order, no duplicates.
    return ",".join(sorted({f"{p}:{b}" for p, b in entries}))


def leader_throttles(moves: MoveMap) -> dict[str, str]:
    """topic -> leader.replication.throttled.replicas: every source replica of a move."""
    return {topic: _throttle_list((p, b) for p, m in parts.items() for b in m.sources)
            for topic, parts in moves.items()}


def follower_throttles(moves: MoveMap) -> dict[str, str]:
    """topic -> follower.replication.throttled.replicas: the replicas being added."""
    return {topic: _throttle_list((p, b) for p, m in parts.items()
                                  for b in m.destinations if b not in m.sources)
            for topic, parts in moves.items()}


def reassigning_brokers(moves: MoveMap) -> set[int]:
    return {b for parts in moves.values() for m in parts.values()
            for b in m.sources | m.destinations}


def throttle_changes(moves: MoveMap, rate: int) -> dict[ConfigResource, list[AlterConfigOp]]:
    """The IncrementalAlterConfigs changes of ``--throttle rate``."""
    changes: dict[ConfigResource, list[AlterConfigOp]] = {}
    leaders, followers = leader_throttles(moves), follower_throttles(moves)
    for topic in sorted(set(leaders) | set(followers)):
        changes[ConfigResource.of("topic", topic)] = [
            AlterConfigOp(LEADER_REPLICAS, leaders.get(topic, "")),
            AlterConfigOp(FOLLOWER_REPLICAS, followers.get(topic, ""))]
    for broker in sorted(reassigning_brokers(moves)):
        changes[ConfigResource.of("broker", str(broker))] = [
            AlterConfigOp(LEADER_RATE, str(rate)), AlterConfigOp(FOLLOWER_RATE, str(rate))]
    return changes


def clear_throttle_changes(brokers: Iterable[int], topics: Iterable[str]
                           ) -> dict[ConfigResource, list[AlterConfigOp]]:
    """verify/cancel's clean-up: every throttle config deleted on these brokers/topics."""
    changes: dict[ConfigResource, list[AlterConfigOp]] = {}
    for broker in sorted(set(brokers)):
        changes[ConfigResource.of("broker", str(broker))] = [
            AlterConfigOp(name, op="delete") for name in BROKER_THROTTLES]
    for topic in sorted(set(topics)):
        changes[ConfigResource.of("topic", topic)] = [
            AlterConfigOp(name, op="delete") for name in TOPIC_THROTTLES]
    return changes


# --- status -------------------------------------------------------------------------------


@dataclass(frozen=True)
class PartitionStatus:
    """verify's view of one partition: ``done`` when no reassignment of it is ongoing."""

    topic: str
    partition: int
    current_replicas: tuple[int, ...]
    target_replicas: tuple[int, ...]
    done: bool

    @property
    def state(self) -> str:
        if not self.done:
            return "in_progress"
        return "completed" if self.current_replicas == self.target_replicas else "mismatch"


def status_line(s: PartitionStatus) -> str:
    """Kafka's partitionReassignmentStatesToString line for one partition."""
    name = tp_name((s.topic, s.partition))
    if not s.done:
        return f"Reassignment of partition {name} is still in progress."
    if s.current_replicas == s.target_replicas:
        return f"Reassignment of partition {name} is completed."
    return (f"There is no active reassignment of partition {name}, but replica set is "
            f"{','.join(map(str, s.current_replicas))} rather than "
            f"{','.join(map(str, s.target_replicas))}.")


def ongoing_line(tp: TopicPartition, r: PartitionReassignment) -> str:
    """Kafka's line of ``--list``: ``t-0: replicas: 1,2,3. adding: 3. removing: 1.``"""
    line = f"{tp_name(tp)}: replicas: {','.join(map(str, r.replicas))}."
    if r.adding_replicas:
        line += f" adding: {','.join(map(str, r.adding_replicas))}."
    if r.removing_replicas:
        line += f" removing: {','.join(map(str, r.removing_replicas))}."
    return line


async def current_replicas(admin: AdminClient, tps: Iterable[TopicPartition] | None = None,
                           topics: Iterable[str] | None = None) -> Assignment:
    """The replicas of partitions ``tps`` (or of every partition of ``topics``); an
    unknown topic or partition is a ReassignmentError with Kafka's words."""
    wanted = None if tps is None else list(tps)
    names = sorted({t for t, _ in wanted} if wanted is not None else set(topics or ()))
    out: Assignment = {}
    if not names:
        return out
    described = await admin.topic_metadata(names)
    for name in names:
        if name not in described:
            raise ReassignmentError(f"Topic {name} not found." if wanted is None
                                    else f"Unable to find partition: "
                                    f"{tp_name(next(tp for tp in wanted if tp[0] == name))}")
        for p in described[name].partitions:
            out[(name, p.partition)] = list(p.replicas)
    if wanted is not None:
        missing = [tp for tp in wanted if tp not in out]
        if missing:
            raise ReassignmentError(f"Unable to find partition: {tp_name(missing[0])}")
        out = {tp: out[tp] for tp in wanted}
    return out


async def partition_statuses(admin: AdminClient, targets: Mapping[TopicPartition,
                             Sequence[int]]) -> list[PartitionStatus]:
    """Kafka's findPartitionReassignmentStates: ongoing -> in progress; otherwise done,
    compared against the replicas the metadata shows (none for a deleted topic)."""
    ongoing = await admin.list_partition_reassignments(list(targets))
    absent = [tp for tp in targets if tp not in ongoing]
    replicas: dict[TopicPartition, list[int]] = {}
    if absent:
        for name, d in (await admin.topic_metadata(sorted({t for t, _ in absent}))).items():
            for p in d.partitions:
                replicas[(name, p.partition)] = list(p.replicas)
    out = []
    for tp in sorted_tps(targets):
        target = tuple(targets[tp])
        if tp in ongoing:
            out.append(PartitionStatus(tp[0], tp[1], ongoing[tp].replicas, target, False))
        else:
            out.append(PartitionStatus(tp[0], tp[1], tuple(replicas.get(tp, ())), target,
                                       True))
    return out


async def apply_changes(admin: AdminClient,
                        changes: Mapping[ConfigResource, Sequence[AlterConfigOp]]) -> None:
    if not changes:
        return
    errors = await admin.alter_configs(changes)
    failed = [(r, e) for r, e in errors.items() if e is not None]
    if failed:
        raise failed[0][1]


async def clear_throttles(admin: AdminClient, targets: Mapping[TopicPartition,
                          Sequence[int]]) -> tuple[list[int], list[str]]:
    """Kafka's clearAllThrottles: every throttle config on the live brokers and on the
    topics of ``targets``; returns (brokers, topics) cleared."""
    cluster = await admin.describe_cluster()
    # Kafka also names target brokers that are not alive; only live ones can be asked.
    brokers = sorted(b.node_id for b in cluster.brokers)
    topics = sorted({t for t, _ in targets})
    await apply_changes(admin, clear_throttle_changes(brokers, topics))
    return brokers, topics


async def verify_brokers(admin: AdminClient, proposed: Mapping[TopicPartition,
                         Sequence[int]]) -> None:
    cluster = await admin.describe_cluster()
    known = {b.node_id for b in cluster.brokers}
    for broker in sorted({b for replicas in proposed.values() for b in replicas}):
        if broker not in known:
            raise ReassignmentError(f"Unknown broker id {broker}")


async def start(admin: AdminClient, proposed: Mapping[TopicPartition, Sequence[int]]
                ) -> dict[TopicPartition, KafkaClientError]:
    errors = await admin.alter_partition_reassignments(proposed)
    return {tp: e for tp, e in errors.items() if e is not None}


async def cancel(admin: AdminClient, targets: Iterable[TopicPartition]
                 ) -> tuple[list[TopicPartition], dict[TopicPartition, KafkaClientError]]:
    """Cancel whichever of ``targets`` are ongoing: (cancelled, errors)."""
    wanted = list(targets)
    ongoing = await admin.list_partition_reassignments(wanted)
    active = [tp for tp in sorted_tps(wanted) if tp in ongoing]
    if not active:
        return [], {}
    errors = await admin.alter_partition_reassignments({tp: None for tp in active})
    failed = {tp: e for tp, e in errors.items() if e is not None}
    return [tp for tp in active if tp not in failed], failed


# --- progress -----------------------------------------------------------------------------


@dataclass(frozen=True)
class ReplicaProgress:
    """Bytes a replica being added holds against its leader's log size."""

    topic: str
    partition: int
    broker: int
    leader: int
    leader_bytes: int  # -1: the leader's log dir did not answer
    replica_bytes: int  # -1: not created on the broker yet

    @property
    def moved(self) -> int:
        return max(0, self.replica_bytes)

    @property
    def remaining(self) -> int:
        return max(0, self.leader_bytes - self.moved) if self.leader_bytes >= 0 else -1

    @property
    def percent(self) -> float:
        if self.leader_bytes <= 0:
            return 100.0 if self.leader_bytes == 0 else 0.0
        return min(100.0, 100.0 * self.moved / self.leader_bytes)


async def progress(admin: AdminClient, ongoing: Mapping[TopicPartition, PartitionReassignment]
                   ) -> list[ReplicaProgress]:
    """Per replica being added: its size on its broker vs the leader's (DescribeLogDirs
    of the brokers involved only, for the moving topics only)."""
    if not ongoing:
        return []
    leaders = {}
    for topic, d in (await admin.topic_metadata(sorted({t for t, _ in ongoing}))).items():
        for p in d.partitions:
            leaders[(topic, p.partition)] = p.leader
    live = set(admin.client.cluster.brokers)
    wanted: dict[int, dict[str, set[int]]] = defaultdict(lambda: defaultdict(set))
    for tp, r in ongoing.items():
        for b in [leaders.get(tp, -1), *r.adding_replicas]:
            if b in live:
                wanted[b][tp[0]].add(tp[1])
    sizes: dict[tuple[int, TopicPartition], int] = {}

    async def one(broker: int, topics: dict[str, set[int]]) -> None:
        try:
            dirs = await admin.describe_log_dirs([broker], {t: sorted(ps)
                                                            for t, ps in topics.items()})
        except KafkaClientError:
            return  # a broker that does not answer shows as unknown
        for d in dirs.get(broker, []):
            for tp, info in d.replicas.items():
                if not info.is_future:
                    sizes[(broker, tp)] = sizes.get((broker, tp), 0) + info.size

    await asyncio.gather(*(one(b, ts) for b, ts in wanted.items()))
    out = []
    for tp in sorted_tps(ongoing):
        leader = leaders.get(tp, -1)
        for b in ongoing[tp].adding_replicas:
            out.append(ReplicaProgress(tp[0], tp[1], b, leader,
                                       sizes.get((leader, tp), -1), sizes.get((b, tp), -1)))
    return out


# --- moves between log dirs (JBOD) ---------------------------------------------------------

#: A replica of a partition on one broker (Kafka's TopicPartitionReplica).
Replica = tuple[str, int, int]
#: How long Kafka's executeMoves waits between AlterReplicaLogDirs attempts.
LOG_DIR_RETRY_S = 0.1


def replica_name(replica: Replica) -> str:
    """Kafka's TopicPartitionReplica.toString: ``topic-partition-broker``."""
    return f"{replica[0]}-{replica[1]}-{replica[2]}"


def sorted_replicas(replicas: Iterable[Replica]) -> list[Replica]:
    """Kafka's compareTopicPartitionReplicas: by broker, then topic, then partition."""
    return sorted(replicas, key=lambda r: (r[2], r[0], r[1]))


def moving_brokers(log_dirs: Mapping[Replica, str]) -> set[int]:
    """Kafka's calculateMovingBrokers: the brokers of the replicas given a log dir."""
    return {broker for _t, _p, broker in log_dirs}


def log_dir_throttle_changes(brokers: Iterable[int], rate: int
                             ) -> dict[ConfigResource, list[AlterConfigOp]]:
    """--replica-alter-log-dirs-throttle: the rate on each broker whose replicas move."""
    return {ConfigResource.of("broker", str(b)): [AlterConfigOp(LOG_DIR_RATE, str(rate))]
            for b in sorted(set(brokers))}


async def start_log_dir_moves(admin: AdminClient, moves: Mapping[Replica, str],
                              timeout_ms: int) -> list[Replica]:
    """Kafka's executeMoves: AlterReplicaLogDirs for every replica, again every 100 ms for
    those not on their broker yet (REPLICA_NOT_AVAILABLE: a reassignment is bringing
    them), until all are started or ``timeout_ms`` passes. Returns them in the order they
    started; any other error, or the timeout, is a ReassignmentError with Kafka's words."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_ms / 1000
    pending = dict(moves)
    started: list[Replica] = []
    while pending:
        results = await admin.alter_replica_log_dirs(pending)
        for replica in sorted_replicas(results):
            error = results[replica]
            if error is None:
                started.append(replica)
                pending.pop(replica, None)
            elif error.error_code != ErrorCode.REPLICA_NOT_AVAILABLE:
                raise ReassignmentError(f"Failed to alter dir for {replica_name(replica)}: "
                                        f"{error}")
        if not pending:
            break
        if loop.time() >= deadline:
            raise ReassignmentError(
                f"Timed out before log directory move{'' if len(pending) == 1 else 's'} "
                f"could be started for: "
                f"{','.join(replica_name(r) for r in sorted_replicas(pending))}")
        await asyncio.sleep(LOG_DIR_RETRY_S)
    return started


@dataclass(frozen=True)
class LogDirMoveState:
    """Kafka's LogDirMoveState of one replica: where it is, where it is going."""

    replica: Replica
    target_dir: str
    current_dir: str | None  # None: not in any live log dir of its broker
    future_dir: str | None  # None: no move in progress
    found: bool = True  # False: its broker said nothing of it

    @property
    def done(self) -> bool:
        """Kafka: every state but an active move is done."""
        return not (self.found and self.current_dir is not None
                    and self.future_dir is not None)

    @property
    def state(self) -> str:
        if not self.found:
            return "missing_replica"
        if self.current_dir is None:
            return "missing_log_dir"
        if self.future_dir is not None:
            return "in_progress"
        return "completed" if self.current_dir == self.target_dir else "cancelled"

    def line(self) -> str:
        """Kafka's replicaMoveStatesToString line."""
        topic, partition, broker = self.replica
        name = replica_name(self.replica)
        state = self.state
        if state == "missing_log_dir":
            return (f"Partition {topic}-{partition} is not found in any live log dir on "
                    f"broker {broker}. There is likely an offline log directory on the "
                    f"broker.")
        if state == "missing_replica":
            return (f"Partition {topic}-{partition} cannot be found in any live log "
                    f"directory on broker {broker}.")
        if state == "in_progress":
            if self.future_dir == self.target_dir:
                return f"Reassignment of replica {name} is still in progress."
            return (f"Partition {topic}-{partition} on broker {broker} is being moved to log "
                    f"dir {self.future_dir} instead of {self.target_dir}.")
        if state == "cancelled":
            return (f"Partition {topic}-{partition} on broker {broker} is not being moved "
                    f"from log dir {self.current_dir} to {self.target_dir}.")
        return f"Reassignment of replica {name} completed successfully."


async def log_dir_move_states(admin: AdminClient, targets: Mapping[Replica, str]
                              ) -> list[LogDirMoveState]:
    """Kafka's findLogDirMoveStates, from DescribeLogDirs of the brokers involved (for the
    moving partitions only); in Kafka's replica order."""
    if not targets:
        return []
    wanted: dict[int, dict[str, set[int]]] = defaultdict(lambda: defaultdict(set))
    for topic, partition, broker in targets:
        wanted[broker][topic].add(partition)
    where: dict[Replica, dict[bool, str]] = defaultdict(dict)  # is_future -> dir
    answered: set[int] = set()

    async def one(broker: int, topics: dict[str, set[int]]) -> None:
        try:
            dirs = await admin.describe_log_dirs([broker], {t: sorted(ps)
                                                            for t, ps in topics.items()})
        except KafkaClientError:
            return  # a broker that does not answer: its replicas are missing
        answered.add(broker)
        for d in dirs.get(broker, []):
            for (topic, partition), info in d.replicas.items():
                where[(topic, partition, broker)][info.is_future] = d.log_dir

    await asyncio.gather(*(one(b, ts) for b, ts in wanted.items()))
    return [LogDirMoveState(replica, targets[replica], where[replica].get(False),
                            where[replica].get(True), found=replica[2] in answered)
            for replica in sorted_replicas(targets)]

