"""klog.protocol.offset_commit: the hand-written OffsetCommitResponse encoder writes the
bytes kio writes, for every version the broker advertises."""

from __future__ import annotations

import random

import pytest

from klog.protocol import apis, offset_commit
from klog.protocol.entities import build

VERSIONS = list(range(offset_commit.MIN_VERSION, offset_commit.MAX_VERSION + 1))


def kio_bytes(version: int, topics: list[tuple[str, list[tuple[int, int]]]],
              throttle: int) -> bytes:
    entity = build(apis.spec_for(8).response_entity(version), {
        "throttle_time": throttle,
        "topics": [{"name": name, "partitions": [
            {"partition_index": index, "error_code": code} for index, code in parts]}
            for name, parts in topics],
    })
    return apis.encode_response(entity)


@pytest.mark.parametrize("version", VERSIONS)
def test_bytes_are_kios(version: int) -> None:
    rng = random.Random(version)
    codes = [0, 3, 16, 22, 25, 27, 28, 29, 82]
    for _ in range(50):
        topics = [("".join(rng.choice("abcé._-") for _ in range(rng.randrange(1, 30))),
                   [(rng.randrange(-1, 2**31), rng.choice(codes))
                    for _ in range(rng.randrange(0, 5))])
                  for _ in range(rng.randrange(0, 4))]
        throttle = rng.randrange(0, 2**31)
        assert offset_commit.encode_offset_commit_response(version, topics, throttle) == \
            kio_bytes(version, topics, throttle)


def test_long_arrays_and_names_use_multi_byte_lengths() -> None:
    topics = [("t" * 200, [(i, 0) for i in range(300)])]
    for version in VERSIONS:
        assert offset_commit.encode_offset_commit_response(version, topics) == \
            kio_bytes(version, topics, 0)


def test_versions_outside_the_range_are_refused() -> None:
    for version in (-1, 9):
        with pytest.raises(ValueError):
            offset_commit.encode_offset_commit_response(version, [])
