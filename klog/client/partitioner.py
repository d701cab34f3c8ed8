"""Which partition a record goes to: the Java client's default partitioner, in Python.

Keyed records: ``toPositive(murmur2(keyBytes)) % numPartitions``, byte for byte as
``org.apache.kafka.clients.producer.internals.BuiltInPartitioner.partitionForKey`` does,
so a key lands on the same partition whichever client (Java, kafka-python, klog) wrote it.
librdkafka's default (consistent_random, CRC32) differs; its ``murmur2_random`` matches.

Records without a key: sticky partitioning (KIP-480). Each topic has a current partition
that every null-key record joins until the accumulator closes that partition's batch (it
filled up or was sent); then a new partition is picked at random, different from the last
when possible and preferring partitions that have a leader. Batches fill up faster and
fewer, bigger produce requests go out than with round-robin.

``StickyPartitionCache`` is used by the producer's event loop only; no locking.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

__all__ = ["StickyPartitionCache", "murmur2", "partition_for_key", "to_positive"]

_SEED = 0x9747B28C
_M = 0x5BD1E995
_MASK = 0xFFFFFFFF


def murmur2(data: bytes | bytearray | memoryview) -> int:
    """MurmurHash2 (32-bit, seed 0x9747b28c) as Kafka's ``Utils.murmur2``.

    Returns the hash as an unsigned 32-bit value; Java's signed int is this value
    reinterpreted (see ``to_positive``). Java reads the four bytes little-endian.
    """
    data = bytes(data)
    length = len(data)
    h = (_SEED ^ length) & _MASK
    whole = length & ~3
    # int.from_bytes over a slice is much faster than assembling each word by shifts.
    for i in range(0, whole, 4):
        k = (int.from_bytes(data[i : i + 4], "little") * _M) & _MASK
        k ^= k >> 24
        k = (k * _M) & _MASK
        h = ((h * _M) & _MASK) ^ k
    tail = length & 3
    if tail:
        # Java's switch falls through: byte 2, then 1, then 0, then a multiply.
        if tail == 3:
            h ^= data[whole + 2] << 16
        if tail >= 2:
            h ^= data[whole + 1] << 8
        h ^= data[whole]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h


def to_positive(number: int) -> int:
    """Kafka's ``Utils.toPositive``: clear the sign bit (not ``abs``, which fails on MIN)."""
    return number & 0x7FFFFFFF


def partition_for_key(key: bytes | bytearray | memoryview, num_partitions: int) -> int:
    """The partition the Java client's default partitioner picks for a serialized key."""
    if num_partitions <= 0:
        raise ValueError(f"a topic has at least one partition, not {num_partitions}")
    return to_positive(murmur2(key)) % num_partitions


class StickyPartitionCache:
    """The current partition for null-key records of each topic (KIP-480)."""

    def __init__(self, rng: random.Random | None = None) -> None:
        self._current: dict[str, int] = {}
        self._random = rng or random.Random()

    def current(self, topic: str) -> int | None:
        """The topic's sticky partition, None before the first record."""
        return self._current.get(topic)

    def partition(
        self, topic: str, partitions: Sequence[int], available: Sequence[int] = ()
    ) -> int:
        """The sticky partition of ``topic``, choosing one on first use."""
        current = self._current.get(topic)
        if current is not None and current in partitions:
            return current
        return self.next_partition(topic, partitions, available, current)

    def next_partition(
        self,
        topic: str,
        partitions: Sequence[int],
        available: Sequence[int] = (),
        previous: int | None = None,
    ) -> int:
        """Move ``topic`` to another partition after ``previous``'s batch closed.

        A no-op when another record already moved it on (``previous`` is no longer the
        current one), as in Kafka, so concurrent batch closes do not skip partitions.
        """
        current = self._current.get(topic)
        if current is not None and previous is not None and current != previous:
            return current
        if not partitions:
            raise ValueError(f"topic {topic!r} has no partitions")
        pool = list(available) if available else list(partitions)
        if len(pool) > 1 and current is not None:
            # Never stay on the same partition when there is another to go to.
            pool = [p for p in pool if p != current] or pool
        chosen = self._random.choice(pool)
        self._current[topic] = chosen
        return chosen

    def forget(self, topic: str) -> None:
        self._current.pop(topic, None)
