"""Fetch v0-v3 over a real socket: v2 batches down-converted to message format v0 (Fetch
v0-v1) or v1 (v2-v3) as Kafka's KafkaApis and RecordsUtil.downConvert do; v4+ untouched;
message.downconversion.enable=false answering UNSUPPORTED_VERSION; the size bound."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from klog.protocol.errors import ErrorCode
from klog.protocol.records.batch import MAGIC_V2, CompressionType, TimestampType
from klog.protocol.records.v2 import build_batch
from tests.daemon.handlers.test_old_versions import CREATE_TOPICS, FETCH, _records
from tests.daemon.wire import InProcessBroker, WireClient, fetch_values


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InProcessBroker]:
    b = InProcessBroker(Path(tmp_path_factory.mktemp("down-conversion")),
                        {"num.partitions": 1})
    b.start()
    yield b
    b.stop()


@pytest.fixture
def client(broker: InProcessBroker) -> Iterator[WireClient]:
    with broker.connect() as c:
        yield c


def _fetch_old(client: WireClient, topic: str, version: int, offset: int = 0,
               max_bytes: int = 1 << 20) -> Any:
    values = fetch_values(topic, 0, offset, max_bytes)
    return client.call(FETCH, version, values).responses[0].partitions[0]


@pytest.mark.parametrize(("version", "magic"), [(0, 0), (1, 0), (2, 1), (3, 1)])
@pytest.mark.parametrize("codec", [CompressionType.NONE, CompressionType.GZIP])
def test_fetch_v0_v3_down_converts(client: WireClient, version: int, magic: int,
                                   codec: CompressionType) -> None:
    topic = f"down-{version}-{int(codec)}"
    client.create_topic(topic)
    client.produce(topic, 0, build_batch(
        [(1_700_000_000_000 + i, b"k", b"v%d" % i) for i in range(4)], compression=codec))
    client.produce(topic, 0, build_batch([(1_700_000_000_100, None, b"last")]))
    part = _fetch_old(client, topic, version, offset=1)
    assert part.error_code == ErrorCode.NONE and part.high_watermark == 5
    got = _records(part.records)
    assert {m for m, _r in got} == {magic}
    assert [r.offset for _m, r in got] == [1, 2, 3, 4]
    assert [r.value for _m, r in got] == [b"v1", b"v2", b"v3", b"last"]
    if magic == 1:
        assert got[0][1].timestamp == 1_700_000_000_001
        assert got[0][1].timestamp_type is TimestampType.CREATE_TIME


def test_fetch_v4_is_not_converted(client: WireClient) -> None:
    topic = "down-none"
    client.create_topic(topic)
    batch = build_batch([(1, b"k", b"v")])
    client.produce(topic, 0, batch)
    part = _fetch_old(client, topic, 4)
    assert [m for m, _r in _records(part.records)] == [MAGIC_V2]


def test_down_conversion_off_answers_unsupported_version(client: WireClient) -> None:
    topic = "down-disabled"
    response = client.call(CREATE_TOPICS, 2, {"topics": [{
        "name": topic, "num_partitions": 1, "replication_factor": 1, "assignments": [],
        "configs": [{"name": "message.downconversion.enable", "value": "false"}]}],
        "timeout": 10_000, "validate_only": False})
    assert response.topics[0].error_code == ErrorCode.NONE
    client.create_topic(topic)
    client.produce(topic, 0, build_batch([(1, b"k", b"v")]))
    assert _fetch_old(client, topic, 2).error_code == ErrorCode.UNSUPPORTED_VERSION
    assert _fetch_old(client, topic, 4).error_code == ErrorCode.NONE


def test_down_converted_fetch_stays_within_max_bytes_but_gives_one_batch(
        client: WireClient) -> None:
    topic = "down-bounded"
    client.create_topic(topic)
    for i in range(5):
        client.produce(topic, 0, build_batch([(1, None, bytes([65 + i]) * 300)]))
    one = _fetch_old(client, topic, 3, max_bytes=10)
    assert [r.offset for _m, r in _records(one.records)] == [0]
    some = _fetch_old(client, topic, 3, max_bytes=1000)
    offsets = [r.offset for _m, r in _records(some.records)]
    assert offsets[0] == 0 and 1 <= len(offsets) < 5
    assert len(some.records) <= 1000
