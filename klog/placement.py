"""Replica placement: which brokers hold the replicas of each partition, as Kafka places them.

One pure module shared by the broker (daemon/admin.py: CreateTopics, CreatePartitions) and
the tools (tools/reassignment.py: ``klog reassign --generate``), as Kafka keeps
``AdminUtils.assignReplicasToBrokers`` in server-common for its controller and its
reassignment tool alike. It owns the two assignments Kafka makes:

- rack-unaware (``assign_replicas``): leaders round-robin over the sorted brokers from a
  random start; each follower shifted from its leader by an amount that grows once per full
  round, so that the replicas of consecutive partitions land on different brokers;
- rack-aware (``assign_replicas_rack_aware``): the same round-robin over the brokers
  alternated rack by rack, each further replica on the next broker (shifted) whose rack,
  and then itself, holds no replica of the partition yet.

``assign_replicas_to_brokers`` chooses between them as Kafka's
``AdminUtils.assignReplicasToBrokers`` does: rack-aware when any broker has a rack, and then
every broker must have one (``MixedRacksError`` otherwise).

Input it refuses raises a ``PlacementError`` subclass named after Kafka's exception
(``InvalidPartitionsError``, ``InvalidReplicationFactorError``, ``MixedRacksError`` for
its AdminOperationException); the broker turns them into
its error codes, the tools into their own messages. No I/O, no state: plain values in,
``{partition: [broker, ...]}`` out.
"""

from __future__ import annotations

import random
from collections import defaultdict
from collections.abc import Mapping, Sequence

# Kafka in ZooKeeper mode has no bound, and a request for 2**31 partitions would stall the
# broker's event loop for hours; klog refuses what no real topic needs.
MAX_PARTITIONS_PER_TOPIC = 100_000


class PlacementError(ValueError):
    """A placement that cannot be made from the given brokers and counts."""


class InvalidPartitionsError(PlacementError):
    """Kafka's InvalidPartitionsException: a partition count that cannot be placed."""


class InvalidReplicationFactorError(PlacementError):
    """Kafka's InvalidReplicationFactorException: too few brokers, or a factor below 1."""


class MixedRacksError(PlacementError):
    """Kafka's AdminOperationException when some brokers have a rack and others none."""


#: Kafka's message for a rack-aware placement over brokers some of which have no rack.
MIXED_RACKS = "Not all brokers have rack information for replica rack aware assignment."


def _check_counts(num_partitions: int, replication_factor: int, start_partition: int,
                  brokers: int) -> None:
    """Kafka's checks before either placement, with its messages."""
    if num_partitions <= 0:
        raise InvalidPartitionsError("Number of partitions must be larger than 0.")
    if start_partition + num_partitions > MAX_PARTITIONS_PER_TOPIC:
        raise InvalidPartitionsError(
            f"Number of partitions {start_partition + num_partitions} exceeds "
            f"klog's limit of {MAX_PARTITIONS_PER_TOPIC} per topic.")
    if replication_factor <= 0:
        raise InvalidReplicationFactorError("Replication factor must be larger than 0.")
    if replication_factor > brokers:
        raise InvalidReplicationFactorError(
            f"Replication factor: {replication_factor} larger than available brokers: "
            f"{brokers}.")


def assign_replicas_to_brokers(racks: Mapping[int, str | None], num_partitions: int,
                               replication_factor: int, start_partition: int = 0,
                               rng: random.Random | None = None,
                               fixed_start_index: int = -1) -> dict[int, list[int]]:
    """Kafka's assignReplicasToBrokers over ``racks`` (every broker to place on -> its
    rack, None for none): rack-unaware when no broker has a rack, rack-aware when all
    have one; a mix raises ``MixedRacksError``, as Kafka refuses it."""
    _check_counts(num_partitions, replication_factor, start_partition, len(racks))
    if all(rack is None for rack in racks.values()):
        return assign_replicas(list(racks), num_partitions, replication_factor,
                               start_partition, rng, fixed_start_index)
    if any(rack is None for rack in racks.values()):
        raise MixedRacksError(MIXED_RACKS)
    return assign_replicas_rack_aware({b: r for b, r in racks.items() if r is not None},
                                      num_partitions, replication_factor, rng,
                                      fixed_start_index, start_partition)


def assign_replicas(brokers: Sequence[int], num_partitions: int, replication_factor: int,
                    start_partition: int = 0, rng: random.Random | None = None,
                    fixed_start_index: int = -1) -> dict[int, list[int]]:
    """Kafka's rack-unaware assignment: leaders spread round-robin from a random broker,
    followers shifted so that replicas of consecutive partitions land on different
    brokers. ``fixed_start_index`` (>= 0) replaces both random choices, as Kafka does when
    adding partitions (the new ones continue the existing round-robin)."""
    ids = sorted(brokers)
    n = len(ids)
    _check_counts(num_partitions, replication_factor, start_partition, n)
    rng = rng or random.Random()
    start_index = fixed_start_index if fixed_start_index >= 0 else rng.randrange(n)
    shift = fixed_start_index if fixed_start_index >= 0 else rng.randrange(n)
    out: dict[int, list[int]] = {}
    partition = max(0, start_partition)
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


def rack_alternated(racks: Mapping[int, str]) -> list[int]:
    """Brokers ordered rack by rack in turn (racks sorted, brokers sorted in a rack), so
    that consecutive brokers sit in different racks (Kafka's getRackAlternatedBrokerList)."""
    by_rack: dict[str, list[int]] = defaultdict(list)
    for broker, rack in sorted(racks.items()):
        by_rack[rack].append(broker)
    iters = {rack: iter(brokers) for rack, brokers in by_rack.items()}
    order = sorted(by_rack)
    out: list[int] = []
    i = 0
    while len(out) < len(racks):
        nxt = next(iters[order[i]], None)
        if nxt is not None:
            out.append(nxt)
        i = (i + 1) % len(order)
    return out


def assign_replicas_rack_aware(racks: Mapping[int, str], num_partitions: int,
                               replication_factor: int, rng: random.Random | None = None,
                               fixed_start_index: int = -1, start_partition: int = 0
                               ) -> dict[int, list[int]]:
    """Kafka's assignReplicasToBrokersRackAware: the leaders round-robin over the
    rack-alternated broker list; each further replica goes to the next broker (shifted)
    whose rack, and then itself, holds no replica yet, while such racks/brokers remain.
    ``racks`` maps every broker to place on to its rack. ``start_partition`` and
    ``fixed_start_index`` continue an existing topic's round-robin (adding partitions)."""
    _check_counts(num_partitions, replication_factor, start_partition, len(racks))
    rng = rng or random.Random()
    arranged = rack_alternated(racks)
    n = len(arranged)
    num_racks = len(set(racks.values()))
    start_index = fixed_start_index if fixed_start_index >= 0 else rng.randrange(n)
    shift = fixed_start_index if fixed_start_index >= 0 else rng.randrange(n)
    out: dict[int, list[int]] = {}
    for partition in range(max(0, start_partition), max(0, start_partition) + num_partitions):
        if partition > 0 and partition % n == 0:
            shift += 1
        first = (partition + start_index) % n
        leader = arranged[first]
        replicas = [leader]
        used_racks = {racks[leader]}
        used = {leader}
        k = 0
        for _ in range(replication_factor - 1):
            while True:
                step = 1 + (shift * num_racks + k) % (n - 1)
                broker = arranged[(first + step) % n]
                k += 1
                rack = racks[broker]
                if ((rack not in used_racks or len(used_racks) == num_racks)
                        and (broker not in used or len(used) == n)):
                    replicas.append(broker)
                    used_racks.add(rack)
                    used.add(broker)
                    break
        out[partition] = replicas
    return out
