"""murmur2 and the default partitioner agree with the Java client and kafka-python."""

from __future__ import annotations

import random

import pytest
from kafka.partitioner.default import murmur2 as kafka_python_murmur2

from klog.client.partitioner import (
    StickyPartitionCache,
    murmur2,
    partition_for_key,
    to_positive,
)


def _signed(value: int) -> int:
    return value - (1 << 32) if value >= 1 << 31 else value


# org.apache.kafka.common.utils.UtilsTest#testMurmur2: Java's signed int results.
JAVA_VECTORS = [
    (b"21", -973932308),
    (b"foobar", -790332482),
    (b"a-little-bit-long-string", -985981536),
    (b"a-little-bit-longer-string", -1486304829),
    (b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971),
    (b"abc", 479470107),
]


@pytest.mark.parametrize(("data", "expected"), JAVA_VECTORS)
def test_java_vectors(data: bytes, expected: int) -> None:
    assert _signed(murmur2(data)) == expected


def test_matches_kafka_python_for_every_length_and_byte() -> None:
    rng = random.Random(4)
    for length in range(0, 300):
        data = bytes(rng.randrange(256) for _ in range(length))
        assert murmur2(data) == kafka_python_murmur2(data), length
    # Bytes with the high bit set are unsigned in Python and signed in Java: all 256.
    for byte in range(256):
        for length in (1, 2, 3, 4, 5):
            data = bytes([byte]) * length
            assert murmur2(data) == kafka_python_murmur2(data)


def test_accepts_bytearray_and_memoryview() -> None:
    assert murmur2(bytearray(b"foobar")) == murmur2(memoryview(b"foobar")) == murmur2(b"foobar")


def test_partition_for_key_matches_kafka_python_partitioner() -> None:
    rng = random.Random(7)
    for _ in range(500):
        key = rng.randbytes(rng.randrange(1, 40))
        n = rng.randrange(1, 100)
        expected = (kafka_python_murmur2(key) & 0x7FFFFFFF) % n
        assert partition_for_key(key, n) == expected


def test_known_partitions() -> None:
    # From the Java vector: toPositive(-790332482) = 1357151166, and 1357151166 % 3 == 0.
    assert to_positive(-790332482) == 1357151166
    assert partition_for_key(b"foobar", 3) == 1357151166 % 3 == 0
    assert to_positive(-(2**31)) == 0


def test_partition_for_key_rejects_no_partitions() -> None:
    with pytest.raises(ValueError):
        partition_for_key(b"k", 0)


def test_sticky_stays_until_next_partition() -> None:
    cache = StickyPartitionCache(random.Random(1))
    first = cache.partition("t", [0, 1, 2, 3])
    assert all(cache.partition("t", [0, 1, 2, 3]) == first for _ in range(20))
    second = cache.next_partition("t", [0, 1, 2, 3], previous=first)
    assert second != first
    assert cache.partition("t", [0, 1, 2, 3]) == second


def test_sticky_ignores_a_stale_batch_close() -> None:
    cache = StickyPartitionCache(random.Random(2))
    first = cache.partition("t", [0, 1, 2])
    second = cache.next_partition("t", [0, 1, 2], previous=first)
    # A second close of the old partition's batch does not move the topic again.
    assert cache.next_partition("t", [0, 1, 2], previous=first) == second


def test_sticky_prefers_available_partitions_and_spreads() -> None:
    cache = StickyPartitionCache(random.Random(3))
    seen = set()
    current = cache.partition("t", [0, 1, 2, 3], available=[1, 3])
    for _ in range(50):
        seen.add(current)
        current = cache.next_partition("t", [0, 1, 2, 3], available=[1, 3], previous=current)
    assert seen == {1, 3}


def test_sticky_single_partition() -> None:
    cache = StickyPartitionCache()
    assert cache.partition("t", [0]) == 0
    assert cache.next_partition("t", [0], previous=0) == 0
