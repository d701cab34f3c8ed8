"""klog/daemon/metrics: a real broker with metrics.http.listener, real clients, /metrics read
with prometheus_client's own parser; the counters must move by exactly what was done."""

from __future__ import annotations

import json
import re
import socket
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import confluent_kafka as ck
import confluent_kafka.admin
import pytest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.parser import text_string_to_metric_families

from klog.daemon.config import BrokerConfig, ConfigError
from klog.daemon.metrics import parse_listener, unimplemented_configs
from tests.daemon.wire import InProcessBroker

pytestmark = pytest.mark.timeout(120)

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def scrape(broker: InProcessBroker, path: str = "/metrics") -> str:
    bound = broker.broker.metrics.bound
    assert bound is not None
    with urllib.request.urlopen(f"http://127.0.0.1:{bound[1]}{path}", timeout=10) as resp:
        assert resp.status == 200
        return resp.read().decode()


def samples(text: str) -> Samples:
    out: Samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[s.name, frozenset(s.labels.items())] = s.value
    return out


def value(got: Samples, name: str, **labels: str) -> float:
    return got[name, frozenset(labels.items())]


def total(got: Samples, name: str, **labels: str) -> float:
    """Sum of the samples of ``name`` whose labels include ``labels`` (e.g. all versions)."""
    want = set(labels.items())
    return sum(v for (n, ls), v in got.items() if n == name and want <= ls)


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[InProcessBroker]:
    b = InProcessBroker(tmp_path, {"metrics.http.listener": "127.0.0.1:0"}).start()
    try:
        yield b
    finally:
        b.stop()


def _produce_one_at_a_time(port: int, topic: str, values: list[bytes]) -> list[ck.KafkaError]:
    errors: list[ck.KafkaError] = []

    def report(err: ck.KafkaError | None, _msg: object) -> None:
        if err is not None:
            errors.append(err)

    producer = ck.Producer({"bootstrap.servers": f"127.0.0.1:{port}", "linger.ms": 0,
                            "acks": "all", "retries": 0, "enable.idempotence": False})
    for v in values:
        producer.produce(topic, v, on_delivery=report)
        assert producer.flush(20) == 0  # one message per Produce request
    return errors


def test_produce_and_fetch_move_the_counters_by_what_was_done(broker: InProcessBroker
                                                              ) -> None:
    topic = "metrics-t"
    n = 7
    assert _produce_one_at_a_time(broker.port, topic, [b"v%03d" % i * 30 for i in range(n)]) == []
    got = samples(scrape(broker))
    size = value(got, "kafka_log_log_size", topic=topic, partition="0")
    assert size > n * 90
    assert value(got, "kafka_log_log_logendoffset", topic=topic, partition="0") == n
    assert value(got, "kafka_server_brokertopicmetrics_messagesin_total", topic=topic) == n
    assert value(got, "kafka_server_brokertopicmetrics_messagesin_total") == n
    # Bytes in are the batches as produced; uncompressed, the log holds exactly them.
    assert value(got, "kafka_server_brokertopicmetrics_bytesin_total", topic=topic) == size
    assert value(got, "kafka_server_brokertopicmetrics_bytesin_total") == size
    assert value(got, "kafka_server_brokertopicmetrics_totalproducerequests_total",
                 topic=topic) == n
    assert value(got, "kafka_server_brokertopicmetrics_failedproducerequests_total") == 0
    assert total(got, "kafka_network_requestmetrics_requests_total", request="Produce") == n
    assert value(got, "kafka_network_requestmetrics_totaltimems_count", request="Produce") == n
    assert total(got, "kafka_network_requestmetrics_requests_total", request="Metadata") >= 1
    assert total(got, "kafka_network_requestmetrics_requests_total", request="ApiVersions") >= 1
    assert value(got, "kafka_server_brokertopicmetrics_bytesout_total", topic=topic) == 0
    for kind in ("requestqueuetimems", "localtimems", "remotetimems", "responsesendtimems",
                 "totaltimems"):
        assert (f"kafka_network_requestmetrics_{kind}",
                frozenset({("request", "Produce"), ("quantile", "0.99")})) in got

    consumer = ck.Consumer({"bootstrap.servers": f"127.0.0.1:{broker.port}",
                            "group.id": "metrics-g", "enable.auto.commit": False})
    try:
        consumer.assign([ck.TopicPartition(topic, 0, 0)])
        seen = 0
        for _ in range(100):
            msg = consumer.poll(1.0)
            if msg is not None and msg.error() is None:
                seen += 1
            if seen == n:
                break
        assert seen == n
    finally:
        consumer.close()
    got = samples(scrape(broker))
    # Every batch went out once, to a consumer (not a follower).
    assert value(got, "kafka_server_brokertopicmetrics_bytesout_total", topic=topic) == size
    assert value(got, "kafka_server_brokertopicmetrics_bytesout_total") == size
    assert value(got, "kafka_server_brokertopicmetrics_replicationbytesout_total") == 0
    fetches = value(got, "kafka_server_brokertopicmetrics_totalfetchrequests_total", topic=topic)
    assert fetches >= 1
    assert value(got, "kafka_server_brokertopicmetrics_failedfetchrequests_total") == 0
    fetch_requests = total(got, "kafka_network_requestmetrics_requests_total", request="Fetch")
    assert fetch_requests >= 1
    assert total(got, "kafka_network_requestmetrics_requests_total",
                 request="FetchConsumer") == fetch_requests
    assert total(got, "kafka_network_requestmetrics_requests_total", request="FetchFollower") == 0

    hosted = broker.call(lambda: len(broker.broker.replica_manager.partitions))
    assert hosted >= 1
    assert value(got, "kafka_server_replicamanager_partitioncount") == hosted
    assert value(got, "kafka_server_replicamanager_leadercount") == hosted  # standalone
    assert value(got, "kafka_server_replicamanager_underreplicatedpartitions") == 0
    assert value(got, "kafka_controller_kafkacontroller_activecontrollercount") == 1
    assert value(got, "kafka_controller_kafkacontroller_globalpartitioncount") == hosted
    assert value(got, "kafka_controller_kafkacontroller_offlinepartitionscount") == 0
    assert value(got, "kafka_controller_kafkacontroller_globaltopiccount") >= 1
    assert value(got, "process_cpu_seconds_total") > 0
    assert value(got, "process_open_fds") > 0
    assert value(got, "process_resident_memory_bytes") > 0


def test_a_batch_too_large_counts_bytes_rejected_not_a_failed_request(tmp_path: Path) -> None:
    b = InProcessBroker(tmp_path, {"metrics.http.listener": "127.0.0.1:0",
                                   "message.max.bytes": "2000"}).start()
    try:
        _produce_one_at_a_time(b.port, "small", [b"s"])  # the topic, and one good batch
        errors = _produce_one_at_a_time(b.port, "small", [b"x" * 5000])
        assert [e.code() for e in errors] == [ck.KafkaError.MSG_SIZE_TOO_LARGE]
        got = samples(scrape(b))
    finally:
        b.stop()
    # As Kafka: a batch over max.message.bytes is rejected bytes, not a failed request.
    assert value(got, "kafka_server_brokertopicmetrics_bytesrejected_total", topic="small") > 5000
    assert value(got, "kafka_server_brokertopicmetrics_failedproducerequests_total") == 0
    assert value(got, "kafka_server_brokertopicmetrics_totalproducerequests_total",
                 topic="small") == 2
    assert value(got, "kafka_server_brokertopicmetrics_messagesin_total", topic="small") == 1


def test_only_the_metrics_path_is_served(broker: InProcessBroker) -> None:
    for path in ("/", "/metricsx", "/favicon.ico"):
        with pytest.raises(urllib.error.HTTPError) as caught:
            scrape(broker, path)
        assert caught.value.code == 404


def test_registered_collectors_run_on_the_event_loop(broker: InProcessBroker) -> None:
    """The documented way for later components (cleaner, transactions, quotas) to add
    their figures: their collect() runs on the broker's loop, where their state lives."""
    threads: list[int] = []
    loop_thread = broker.call(threading.get_ident)

    class Cleaner:
        def collect(self) -> Iterator[Metric]:
            threads.append(threading.get_ident())
            yield GaugeMetricFamily("kafka_log_logcleaner_max_dirty_percent", "test", value=7)

    broker.broker.metrics.register(Cleaner())
    got = samples(scrape(broker))
    assert value(got, "kafka_log_logcleaner_max_dirty_percent") == 7
    assert threads == [loop_thread]


def test_off_by_default(tmp_path: Path) -> None:
    b = InProcessBroker(tmp_path).start()
    try:
        assert b.broker.metrics.bound is None
        # Nothing counts either: the hot paths are handed no counters.
        assert b.broker.replica_manager.topic_metrics is None
        assert b.broker.server.request_metrics is None
        assert not [t for t in threading.enumerate() if t.name == "klog-metrics-http"]
    finally:
        b.stop()


def test_a_listener_port_in_use_fails_the_start_naming_the_config(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        b = InProcessBroker(tmp_path, {"metrics.http.listener": f"127.0.0.1:{port}"})
        with pytest.raises(OSError, match=r"metrics\.http\.listener"):
            b.start()


def test_listener_syntax() -> None:
    assert parse_listener("127.0.0.1:9100") == ("127.0.0.1", 9100)
    assert parse_listener(":9100") == ("0.0.0.0", 9100)
    assert parse_listener("[::1]:9100") == ("::1", 9100)
    for bad in ("9100", "host:", "host:port", "host:70000"):
        with pytest.raises(ConfigError, match="HOST:PORT"):
            parse_listener(bad)


def test_kafka_metrics_library_configs_are_reported_not_implemented() -> None:
    assert unimplemented_configs(BrokerConfig.from_dict({})) == []
    config = BrokerConfig.from_dict({"metric.reporters": "com.example.Reporter",
                                     "metrics.recording.level": "DEBUG"})
    assert unimplemented_configs(config) == ["metric.reporters", "metrics.recording.level"]
    with pytest.raises(ConfigError):
        BrokerConfig.from_dict({"metrics.recording.level": "LOUD"})


def test_a_deleted_topic_loses_its_own_series_not_the_totals(broker: InProcessBroker) -> None:
    assert _produce_one_at_a_time(broker.port, "gone", [b"a", b"b"]) == []
    admin = ck.admin.AdminClient({"bootstrap.servers": f"127.0.0.1:{broker.port}"})
    for future in admin.delete_topics(["gone"]).values():
        future.result(20)
    for _ in range(200):
        if broker.call(lambda: broker.broker.replica_manager.get_partition("gone", 0)) is None:
            break
        time.sleep(0.05)
    got = samples(scrape(broker))
    assert not [key for key in got if ("topic", "gone") in key[1]]
    assert value(got, "kafka_server_brokertopicmetrics_messagesin_total") == 2


DASHBOARD = Path(__file__).resolve().parents[2] / "examples" / "grafana-dashboard.json"


def test_the_sample_dashboard_queries_only_what_klog_serves(broker: InProcessBroker) -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    wanted = {name for e in exprs for name in re.findall(r"\b((?:kafka|process)_[a-z_]+)", e)}
    assert len(wanted) > 20
    served: set[str] = set()
    for family in text_string_to_metric_families(scrape(broker)):
        # A counter family is named without its _total (its samples have it).
        served.update((family.name, f"{family.name}_total"))
        served.update(s.name for s in family.samples)
    assert sorted(wanted - served) == []


def test_stopping_the_broker_closes_the_listener_at_once(tmp_path: Path) -> None:
    b = InProcessBroker(tmp_path, {"metrics.http.listener": "127.0.0.1:0"}).start()
    bound = b.broker.metrics.bound
    assert bound is not None
    scrape(b)
    b.stop()  # the serving thread waits in select without a timeout: close wakes it
    assert not [t for t in threading.enumerate() if t.name == "klog-metrics-http"]
    with pytest.raises(OSError), socket.create_connection(("127.0.0.1", bound[1]), timeout=2):
        pass


def test_the_log_cleaner_figures(tmp_path: Path) -> None:
    """Kafka's cleaner gauges, and klog's per-partition dirty ratio and last clean."""
    import time

    from confluent_kafka.admin import AdminClient, NewTopic

    b = InProcessBroker(tmp_path, {"metrics.http.listener": "127.0.0.1:0",
                                   "log.cleaner.backoff.ms": "50"}).start()
    try:
        bootstrap = f"127.0.0.1:{b.port}"
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic("compacted", 1, 1, config={
            "cleanup.policy": "compact", "segment.bytes": "1024",
            "min.cleanable.dirty.ratio": "0.01"})])["compacted"].result(30)
        producer = ck.Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
        for i in range(200):
            producer.produce("compacted", key=b"k%d" % (i % 5), value=b"v" * 50)
            if i % 10 == 9:
                assert producer.flush(30) == 0  # batches of 10: segments of 1 KiB roll
        deadline = time.monotonic() + 30
        got = samples(scrape(b))
        while time.monotonic() < deadline and not any(
                n == "klog_log_cleaner_last_clean_timestamp_ms" for n, _ in got):
            time.sleep(0.2)
            got = samples(scrape(b))
        assert value(got, "klog_log_cleaner_last_clean_timestamp_ms", topic="compacted",
                     partition="0") > 0
        assert 0.0 <= value(got, "klog_log_cleaner_dirty_ratio", topic="compacted",
                            partition="0") <= 1.0
        assert 0 <= value(got, "kafka_log_logcleanermanager_max_dirty_percent") <= 100
        assert value(got, "kafka_log_logcleanermanager_uncleanable_partitions_count") == 0
        assert value(got, "kafka_log_logcleaner_time_since_last_run_ms") >= 0
    finally:
        b.stop()
