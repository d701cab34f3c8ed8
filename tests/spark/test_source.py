"""The "klog" data source in a real (local[2]) Spark: the corpus, a klog broker's topics
with every codec and headers (live and offline, row for row what confluent-kafka reads),
options, read_committed."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.spark.conftest import transactional_batches, write_partition

pytestmark = pytest.mark.timeout(300)

SPARK_KAFKA_SCHEMA = (
    "struct<key:binary,value:binary,topic:string,partition:int,offset:bigint,"
    "timestamp:timestamp,timestampType:int>"
)
CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]


def _read(spark: Any, **options: str) -> Any:
    return spark.read.format("klog").options(**options).load()


def test_corpus_through_spark(spark: Any, kafka_corpus: Path) -> None:
    everything = _read(spark, path=str(kafka_corpus), subscribePattern=".*")
    assert {r["topic"] for r in everything.select("topic").distinct().collect()} == {
        "first_topic", "new_topic"}  # a pattern leaves internal topics out, as Kafka's does
    df = _read(spark, path=str(kafka_corpus), subscribePattern="first_.*")
    assert df.schema.simpleString() == SPARK_KAFKA_SCHEMA
    counts = {r["partition"]: r["count"] for r in df.groupBy("partition").count().collect()}
    assert counts == {0: 11, 1: 12, 2: 18}
    with_headers = _read(spark, path=str(kafka_corpus), subscribe="new_topic",
                         includeHeaders="true")
    assert with_headers.schema.simpleString() == (
        SPARK_KAFKA_SCHEMA[:-1] + ",headers:array<struct<key:string,value:binary>>>")
    assert [r["offset"] for r in with_headers.orderBy("offset").collect()] == [0, 1]
    ranged = _read(spark, path=str(kafka_corpus), assign='{"first_topic":[2]}',
                   startingOffsets='{"first_topic":{"2":3}}',
                   endingOffsets='{"first_topic":{"2":10}}', minPartitions="3")
    assert ranged.rdd.getNumPartitions() == 3
    assert sorted(r["offset"] for r in ranged.collect()) == list(range(3, 10))


def test_bad_options_fail_the_query_with_their_reason(spark: Any, kafka_corpus: Path) -> None:
    with pytest.raises(Exception, match="startingOffsets = latest is not allowed"):
        _read(spark, path=str(kafka_corpus), subscribe="first_topic",
              startingOffsets="latest").collect()


def _produce_every_codec(bootstrap: str) -> dict[str, list[tuple]]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(f"codec-{c}", 2, 1) for c in CODECS])
    for f in futures.values():
        f.result(timeout=20)
    base_ts = int(time.time() * 1000) - 60_000
    for codec in CODECS:
        producer = Producer({"bootstrap.servers": bootstrap, "compression.type": codec,
                             "linger.ms": 20, "batch.num.messages": 50})
        for i in range(300):
            producer.produce(
                f"codec-{codec}", partition=i % 2,
                key=None if i % 7 == 0 else b"key-%d" % i,
                value=None if i % 11 == 0 else (b"%s value %d " % (codec.encode(), i)) * (i % 9),
                headers=[("h1", b"x%d" % i), ("empty", b""), ("null", None)][: i % 4],
                timestamp=base_ts + i)
        assert producer.flush(20) == 0
    return {codec: _confluent_rows(bootstrap, f"codec-{codec}", 300) for codec in CODECS}


def _confluent_rows(bootstrap: str, topic: str, count: int) -> list[tuple]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused",
                         "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in (0, 1)])
        got = []
        deadline = time.monotonic() + 30
        while len(got) < count and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None or msg.error():
                continue
            got.append((msg.topic(), msg.partition(), msg.offset(), msg.key(), msg.value(),
                        msg.timestamp()[1], msg.timestamp()[0],
                        [(k, v) for k, v in (msg.headers() or [])]))
        assert len(got) == count
        return sorted(got, key=lambda r: (r[1], r[2]))
    finally:
        consumer.close()


def _spark_rows(df: Any) -> list[tuple]:
    rows = df.orderBy("partition", "offset").collect()
    return [(r["topic"], r["partition"], r["offset"],
             None if r["key"] is None else bytes(r["key"]),
             None if r["value"] is None else bytes(r["value"]),
             int(r["timestamp"].timestamp() * 1000 + 0.5) if r["timestamp"] else None,
             r["timestampType"],
             [(h["key"], None if h["value"] is None else bytes(h["value"]))
              for h in r["headers"]]) for r in rows]


def test_broker_topics_with_every_codec_equal_what_confluent_reads(
        spark: Any, klog_broker: Any) -> None:
    expected = _produce_every_codec(klog_broker.bootstrap_servers)
    # confluent-kafka reports timestampType 1 for CreateTime (its TIMESTAMP_CREATE_TIME);
    # Kafka's (and Spark's) id is 0.
    for codec, rows in expected.items():
        expected[codec] = [(*r[:6], r[6] - 1, r[7]) for r in rows]
    for codec in CODECS:
        live = _read(spark, **{"kafka.bootstrap.servers": klog_broker.bootstrap_servers},
                     subscribe=f"codec-{codec}", includeHeaders="true")
        assert _spark_rows(live) == expected[codec], f"live, {codec}"
    # Live ranges: assign, per-partition offsets, a starting timestamp.
    lz4 = [r for r in expected["lz4"] if r[1] == 1]
    ranged = _read(spark, **{"kafka.bootstrap.servers": klog_broker.bootstrap_servers},
                   assign='{"codec-lz4":[1]}', startingOffsets='{"codec-lz4":{"1":10}}',
                   endingOffsets='{"codec-lz4":{"1":20}}', includeHeaders="true")
    assert _spark_rows(ranged) == lz4[10:20]
    by_time = _read(spark, **{"kafka.bootstrap.servers": klog_broker.bootstrap_servers},
                    subscribe="codec-lz4", startingTimestamp=str(lz4[100][5]),
                    includeHeaders="true")
    assert [r for r in _spark_rows(by_time) if r[1] == 1] == lz4[100:]
    offline = _read(spark, path=str(klog_broker.log_dir), subscribePattern="codec-.*",
                    includeHeaders="true")
    got = _spark_rows(offline.orderBy("topic"))
    for codec in CODECS:
        assert [r for r in got if r[0] == f"codec-{codec}"] == expected[codec], codec


def test_read_committed_excludes_aborted_records(spark: Any, tmp_path: Path) -> None:
    batches, committed = transactional_batches()
    write_partition(tmp_path, "tx", 0, batches)
    df = _read(spark, path=str(tmp_path), subscribe="tx",
               **{"kafka.isolation.level": "read_committed"})
    assert sorted(r["offset"] for r in df.collect()) == committed
    everything = _read(spark, path=str(tmp_path), subscribe="tx")
    assert sorted(r["offset"] for r in everything.collect()) == [0, 1, 2, 3, 4, 5, 6, 9, 11,
                                                                 12, 13]


def test_timestamp_options(spark: Any, kafka_corpus: Path) -> None:
    everything = _read(spark, path=str(kafka_corpus), subscribe="first_topic").collect()
    stamps = sorted(int(r["timestamp"].timestamp() * 1000 + 0.5) for r in everything)
    middle = stamps[len(stamps) // 2]
    df = _read(spark, path=str(kafka_corpus), subscribe="first_topic",
               startingTimestamp=str(middle))
    got = sorted(int(r["timestamp"].timestamp() * 1000 + 0.5) for r in df.collect())
    # Per partition, from the first record at or after the time: here timestamps grow
    # with offsets, so that is every record at or after it.
    assert got == [s for s in stamps if s >= middle]


def test_live_read_committed_excludes_aborted_records(spark: Any, klog_broker: Any) -> None:
    # A fixed layout of committed and aborted transactions (with their markers and
    # .txnindex) is written into the stopped broker's log, then served.
    admin = AdminClient({"bootstrap.servers": klog_broker.bootstrap_servers})
    admin.create_topics([NewTopic("tx", 1, 1)])["tx"].result(timeout=20)
    klog_broker.stop()
    batches, committed = transactional_batches()
    write_partition(klog_broker.log_dir, "tx", 0, batches)
    klog_broker.start()
    servers = {"kafka.bootstrap.servers": klog_broker.bootstrap_servers}
    df = _read(spark, subscribe="tx", **servers,
               **{"kafka.isolation.level": "read_committed"})
    assert sorted(r["offset"] for r in df.collect()) == committed
    everything = _read(spark, subscribe="tx", **servers)
    assert sorted(r["offset"] for r in everything.collect()) == [0, 1, 2, 3, 4, 5, 6, 9, 11,
                                                                 12, 13]
