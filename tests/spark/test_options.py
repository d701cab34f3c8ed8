"""klog.spark.options: Spark's Kafka-source options, checked and planned (no Spark)."""

from __future__ import annotations

import pytest

from klog.spark.options import (
    OffsetRange,
    OptionsError,
    PartitionOffsets,
    parse_options,
    split_ranges,
)


def test_defaults_and_parsing() -> None:
    opts = parse_options({"path": "/d", "subscribe": "a, b", "includeHeaders": "TRUE",
                          "minPartitions": "4", "kafka.isolation.level": "read_committed"})
    assert opts.offline and opts.subscribe == ("a", "b")
    assert opts.include_headers and opts.min_partitions == 4 and opts.read_committed
    assert opts.starting is None and opts.ending is None
    assert opts.select_topics(["a", "b", "c"]) == ["a", "b"]


def test_pattern_must_match_the_whole_name() -> None:
    opts = parse_options({"path": "/d", "subscribePattern": "logs\\..*"})
    assert opts.select_topics(["logs.a", "xlogs.b", "logs_c"]) == ["logs.a"]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"subscribe": "t"}, "exactly one of path"),
        ({"path": "/d", "kafka.bootstrap.servers": "h:1", "subscribe": "t"}, "exactly one of"),
        ({"path": "/d"}, "subscribe, subscribePattern or assign"),
        ({"path": "/d", "subscribe": "t", "assign": '{"t":[0]}'}, "exactly one of subscribe"),
        ({"path": "/d", "assign": "[1]"}, "assign must look like"),
        ({"path": "/d", "subscribe": "t", "startingOffsets": "latest"}, "not allowed"),
        ({"path": "/d", "subscribe": "t", "endingOffsets": "earliest"}, "not allowed"),
        ({"path": "/d", "subscribe": "t", "startingOffsets": '{"t":{"0":-1}}'}, "not allowed"),
        ({"path": "/d", "subscribe": "t", "endingOffsets": '{"t":{"0":-2}}'}, "not allowed"),
        ({"path": "/d", "subscribe": "t", "startingOffsets": "{nope"}, "not valid JSON"),
        ({"path": "/d", "subscribe": "t", "includeHeaders": "yes"}, "true or false"),
        ({"path": "/d", "subscribe": "t", "minPartitions": "0"}, "at least 1"),
        ({"path": "/d", "subscribe": "t", "kafka.isolation.level": "x"}, "read_committed"),
        ({"path": "/d", "subscribePattern": "("}, "not a valid pattern"),
    ],
)
def test_bad_options_are_refused_with_a_reason(options: dict[str, str], message: str) -> None:
    with pytest.raises(OptionsError, match=message):
        parse_options(options)


def test_offset_ranges_from_json_timestamps_and_defaults() -> None:
    opts = parse_options({"path": "/d", "subscribe": "t",
                          "startingOffsets": '{"t":{"0":5,"1":-2}}',
                          "endingOffsets": '{"t":{"0":8,"1":-1}}'})
    assert PartitionOffsets("t", 0, 2, 20).offset_range(opts) == OffsetRange("t", 0, 5, 8)
    assert PartitionOffsets("t", 1, 2, 20).offset_range(opts) == OffsetRange("t", 1, 2, 20)
    # Clamped to what exists; never a negative range.
    assert PartitionOffsets("t", 0, 6, 7).offset_range(opts) == OffsetRange("t", 0, 6, 7)
    with pytest.raises(OptionsError, match="does not name t-2"):
        PartitionOffsets("t", 2, 0, 1).offset_range(opts)
    by_time = parse_options({"path": "/d", "subscribe": "t", "startingTimestamp": "1000",
                             "endingTimestamp": "2000"})
    assert PartitionOffsets("t", 0, 0, 50, 10, 30).offset_range(by_time) == OffsetRange(
        "t", 0, 10, 30)
    # No record at or after the starting timestamp: nothing to read.
    assert PartitionOffsets("t", 0, 0, 50, None, None).offset_range(by_time).size == 0


def test_min_partitions_splits_in_proportion() -> None:
    ranges = [OffsetRange("t", 0, 0, 100), OffsetRange("t", 1, 0, 300), OffsetRange("t", 2, 5, 5)]
    assert split_ranges(ranges, None) == ranges[:2]
    split = split_ranges(ranges, 4)
    assert len(split) == 4
    assert [r for r in split if r.partition == 0] == [OffsetRange("t", 0, 0, 100)]
    assert [(r.start, r.end) for r in split if r.partition == 1] == [(0, 100), (100, 200),
                                                                    (200, 300)]
