"""Tests for klog.daemon.config: server.properties loading, broker defaults and validation,
listeners, broker -> topic defaults, dynamic layers, DescribeConfigs entries."""

from __future__ import annotations

from pathlib import Path

import pytest

from klog.daemon import config as cfg
from klog.daemon.config import (
    BROKER_CONFIGS,
    TOPIC_CONFIGS,
    BrokerConfig,
    ConfigError,
    ConfigSource,
    ConfigSynonym,
    ConfigType,
    Endpoint,
    describe_broker_configs,
    describe_broker_default_configs,
    describe_topic_configs,
    java_double,
    validate_broker_dynamic_configs,
    validate_topic_configs,
)
from klog.storage.config import LogConfig

LONG_MAX = 2**63 - 1
INT_MAX = 2**31 - 1
ZK = {"zookeeper.connect": "localhost:2181"}


def broker(**props: str) -> BrokerConfig:
    return BrokerConfig.from_dict({k.replace("_", "."): v for k, v in props.items()})


# -- loading ---------------------------------------------------------------------------


def test_load_file_then_overrides_later_wins(tmp_path: Path) -> None:
    path = tmp_path / "server.properties"
    path.write_text("num.partitions=3\nlog.dirs=/data/a, /data/b\nmy.custom=1\n")
    config = BrokerConfig.load(
        path, ["num.partitions=5", "default.replication.factor=1", "num.partitions=7",
               "klog.cluster.id=abc=def"],
    )
    assert config.num_partitions == 7
    assert config.log_dirs == [Path("/data/a"), Path("/data/b")]
    assert config.cluster_id == "abc=def"
    assert config.originals["num.partitions"] == "7"
    assert config.unknown_keys == ["my.custom"]
    assert config.get("my.custom") == "1"


def test_load_a_kafka_style_server_properties(tmp_path: Path) -> None:
    # The shape of the server.properties Kafka 3.x ships: comments, commented-out
    # listeners, single-broker internal topic settings, ZooKeeper mode.
    path = tmp_path / "server.properties"
    path.write_text(
        "############ Server Basics ############\n"
        "# The id of the broker.\n"
        "broker.id=0\n"
        "#listeners=PLAINTEXT://:9092\n"
        "#advertised.listeners=PLAINTEXT://your.host.name:9092\n"
        "num.network.threads=3\n"
        "num.io.threads=8\n"
        "socket.send.buffer.bytes=102400\n"
        "socket.receive.buffer.bytes=102400\n"
        "socket.request.max.bytes=104857600\n"
        "log.dirs=/tmp/kafka-logs\n"
        "num.partitions=1\n"
        "num.recovery.threads.per.data.dir=1\n"
        "offsets.topic.replication.factor=1\n"
        "transaction.state.log.replication.factor=1\n"
        "transaction.state.log.min.isr=1\n"
        "#log.flush.interval.messages=10000\n"
        "log.retention.hours=168\n"
        "#log.retention.bytes=1073741824\n"
        "log.retention.check.interval.ms=300000\n"
        "zookeeper.connect=localhost:2181\n"
        "zookeeper.connection.timeout.ms=18000\n"
        "group.initial.rebalance.delay.ms=0\n"
    )
    config = BrokerConfig.load(path, ["listeners=PLAINTEXT://127.0.0.1:0"])
    assert not config.standalone
    assert config.zookeeper_connect == "localhost:2181"
    assert config.broker_id == 0
    assert config.log_dirs == [Path("/tmp/kafka-logs")]
    assert config.offsets_topic_replication_factor == 1
    assert config.log_retention_ms == 168 * 3600 * 1000
    assert config.listeners == [Endpoint("PLAINTEXT", "127.0.0.1", 0, "PLAINTEXT")]
    assert config.unknown_keys == []
    assert config.source_of("num.io.threads") is ConfigSource.STATIC_BROKER_CONFIG


def test_load_without_file_is_standalone_defaults() -> None:
    config = BrokerConfig.load()
    assert config.standalone
    assert config.originals == {}
    assert config.unknown_keys == []


def test_load_latin1_file(tmp_path: Path) -> None:
    path = tmp_path / "server.properties"
    path.write_bytes("broker.rack=z\xfcrich\n".encode("latin-1"))
    assert BrokerConfig.load(path).broker_rack == "zürich"


def test_load_malformed_properties_is_a_config_error(tmp_path: Path) -> None:
    # The parser is storage/properties.py's; the broker reports its error as a ConfigError.
    path = tmp_path / "server.properties"
    path.write_text("ok=1\nbad=\\u12g4\n")
    with pytest.raises(ConfigError, match=r"malformed \\uxxxx escape .* line 2"):
        BrokerConfig.load(path)


def test_load_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"cannot read config file .*missing.properties"):
        BrokerConfig.load(tmp_path / "missing.properties")
    with pytest.raises(ConfigError, match=r"cannot read config file"):
        BrokerConfig.load(tmp_path)
    with pytest.raises(ConfigError, match=r"invalid override 'num.partitions': expected"):
        BrokerConfig.load(None, ["num.partitions"])
    with pytest.raises(ConfigError, match=r"invalid override '=3'"):
        BrokerConfig.load(None, ["=3"])


def test_get_unknown_name() -> None:
    with pytest.raises(KeyError, match=r"no.such.config"):
        BrokerConfig.from_dict({}).get("no.such.config")


# -- defaults --------------------------------------------------------------------------

EXPECTED_DEFAULTS = {
    "broker_id": 0,
    "zookeeper_connect": None,
    "zookeeper_session_timeout_ms": 18000,
    "zookeeper_connection_timeout_ms": 18000,
    "zookeeper_sync_time_ms": 2000,
    "zookeeper_set_acl": False,
    "zookeeper_max_in_flight_requests": 10,
    "broker_id_generation_enable": True,
    "reserved_broker_max_id": 1000,
    "broker_rack": None,
    "replica_selector_class": None,
    "cluster_id": None,
    "log_dirs": [Path("./klog-data")],
    "num_partitions": 1,
    "default_replication_factor": 1,
    "auto_create_topics_enable": True,
    "delete_topic_enable": True,
    "message_max_bytes": 1048588,
    "socket_request_max_bytes": 104857600,
    "socket_send_buffer_bytes": 102400,
    "socket_receive_buffer_bytes": 102400,
    "socket_listen_backlog_size": 50,
    "queued_max_requests": 500,
    "queued_max_request_bytes": -1,
    "request_timeout_ms": 30000,
    "connections_max_idle_ms": 600000,
    "max_connections": INT_MAX,
    "max_connections_per_ip": INT_MAX,
    "max_connection_creation_rate": INT_MAX,
    "compression_type": "producer",
    "num_network_threads": 3,
    "num_io_threads": 8,
    "background_threads": 10,
    "num_recovery_threads_per_data_dir": 1,
    "num_replica_fetchers": 1,
    "fetch_max_bytes": 57671680,
    "max_incremental_fetch_session_cache_slots": 1000,
    "min_insync_replicas": 1,
    "unclean_leader_election_enable": False,
    "inter_broker_protocol_version": "3.6-IV2",
    "inter_broker_listener_name": "PLAINTEXT",
    "log_segment_bytes": 1073741824,
    "log_roll_ms": 168 * 3600 * 1000,
    "log_roll_hours": 168,
    "log_roll_jitter_ms": 0,
    "log_roll_jitter_hours": 0,
    "log_retention_ms": 168 * 3600 * 1000,
    "log_retention_minutes": None,
    "log_retention_hours": 168,
    "log_retention_bytes": -1,
    "log_retention_check_interval_ms": 300000,
    "log_cleanup_policy": ["delete"],
    "log_cleaner_enable": True,
    "log_cleaner_threads": 1,
    "log_cleaner_dedupe_buffer_size": 134217728,
    "log_cleaner_io_buffer_size": 524288,
    "log_cleaner_io_max_bytes_per_second": 1.7976931348623157e308,
    "log_cleaner_backoff_ms": 15000,
    "log_cleaner_min_cleanable_ratio": 0.5,
    "log_cleaner_delete_retention_ms": 86400000,
    "log_index_size_max_bytes": 10485760,
    "log_index_interval_bytes": 4096,
    "log_flush_interval_messages": LONG_MAX,
    "log_flush_interval_ms": LONG_MAX,
    "log_flush_scheduler_interval_ms": LONG_MAX,
    "log_flush_offset_checkpoint_interval_ms": 60000,
    "log_flush_start_offset_checkpoint_interval_ms": 60000,
    "log_segment_delete_delay_ms": 60000,
    "log_preallocate": False,
    "log_message_timestamp_type": "CreateTime",
    "log_message_timestamp_difference_max_ms": LONG_MAX,
    "log_message_downconversion_enable": True,
    "controller_socket_timeout_ms": 30000,
    "replica_lag_time_max_ms": 30000,
    "replica_socket_timeout_ms": 30000,
    "replica_socket_receive_buffer_bytes": 65536,
    "replica_fetch_max_bytes": 1048576,
    "replica_fetch_wait_max_ms": 500,
    "replica_fetch_min_bytes": 1,
    "replica_fetch_response_max_bytes": 10485760,
    "replica_fetch_backoff_ms": 1000,
    "replica_high_watermark_checkpoint_interval_ms": 5000,
    "auto_leader_rebalance_enable": True,
    "leader_imbalance_per_broker_percentage": 10,
    "leader_imbalance_check_interval_seconds": 300,
    "controlled_shutdown_enable": True,
    "controlled_shutdown_max_retries": 3,
    "controlled_shutdown_retry_backoff_ms": 5000,
    "group_min_session_timeout_ms": 6000,
    "group_max_session_timeout_ms": 1800000,
    "group_initial_rebalance_delay_ms": 0,
    "group_max_size": INT_MAX,
    "offset_metadata_max_bytes": 4096,
    "offsets_load_buffer_size": 5242880,
    "offsets_topic_replication_factor": 1,
    "offsets_topic_num_partitions": 50,
    "offsets_topic_segment_bytes": 104857600,
    "offsets_topic_compression_codec": 0,
    "offsets_retention_minutes": 10080,
    "offsets_retention_check_interval_ms": 600000,
    "offsets_commit_timeout_ms": 5000,
    "offsets_commit_required_acks": -1,
    "transactional_id_expiration_ms": 604800000,
    "transaction_max_timeout_ms": 900000,
    "transaction_state_log_min_isr": 1,
    "transaction_state_log_load_buffer_size": 5242880,
    "transaction_state_log_replication_factor": 1,
    "transaction_state_log_num_partitions": 50,
    "transaction_state_log_segment_bytes": 104857600,
    "transaction_abort_timed_out_transaction_cleanup_interval_ms": 10000,
    "transaction_remove_expired_transaction_cleanup_interval_ms": 3600000,
    "producer_id_expiration_ms": 86400000,
    "transaction_partition_verification_enable": True,
    "leader_replication_throttled_rate": LONG_MAX,
    "follower_replication_throttled_rate": LONG_MAX,
}

# ZooKeeper mode keeps Kafka's own defaults where standalone uses single-broker ones.
ZK_MODE_DEFAULTS = {
    "broker_id": -1,
    "zookeeper_connect": "localhost:2181",
    "offsets_topic_replication_factor": 3,
    "transaction_state_log_replication_factor": 3,
    "transaction_state_log_min_isr": 2,
    "group_initial_rebalance_delay_ms": 3000,
}


def test_every_typed_property_default_standalone() -> None:
    config = BrokerConfig.from_dict({})
    assert config.standalone
    actual = {name: getattr(config, name) for name in EXPECTED_DEFAULTS}
    assert actual == EXPECTED_DEFAULTS
    assert config.listeners == [Endpoint("PLAINTEXT", "127.0.0.1", 9092, "PLAINTEXT")]
    assert config.advertised_listeners == config.listeners
    assert config.listener_security_protocol_map == {
        "PLAINTEXT": "PLAINTEXT", "SSL": "SSL", "SASL_PLAINTEXT": "SASL_PLAINTEXT",
        "SASL_SSL": "SASL_SSL",
    }
    assert config.dynamic_broker_configs == config.dynamic_default_configs == {}


def test_every_typed_property_default_zookeeper_mode() -> None:
    config = BrokerConfig.from_dict(ZK)
    assert not config.standalone
    expected = {**EXPECTED_DEFAULTS, **ZK_MODE_DEFAULTS}
    assert {name: getattr(config, name) for name in expected} == expected


def test_typed_properties_cover_declared_settings() -> None:
    settings = [
        name for name, attr in vars(BrokerConfig).items() if isinstance(attr, cfg._Setting)
    ]
    assert len(settings) > 90
    assert [name for name in settings if name not in EXPECTED_DEFAULTS] == []
    for name in settings:
        assert getattr(BrokerConfig, name).name == name.replace("_", ".")


def test_zookeeper_connection_timeout_falls_back_to_session_timeout() -> None:
    assert broker(zookeeper_session_timeout_ms="6000").zookeeper_connection_timeout_ms == 6000
    config = BrokerConfig.from_dict({"zookeeper.session.timeout.ms": "6000",
                                     "zookeeper.connection.timeout.ms": "100"})
    assert config.zookeeper_connection_timeout_ms == 100


def test_get_returns_typed_values() -> None:
    config = BrokerConfig.from_dict({
        "num.partitions": " 4 ", "log.cleanup.policy": "Compact , delete",
        "log.cleaner.min.cleanable.ratio": "0.25", "auto.create.topics.enable": "FALSE",
        "compression.type": "LZ4",
    })
    assert config.get("num.partitions") == 4
    assert config.get("log.cleanup.policy") == ["compact", "delete"]
    assert config.get("log.cleaner.min.cleanable.ratio") == 0.25
    assert config.get("auto.create.topics.enable") is False
    assert config.get("compression.type") == "lz4"
    assert config.get("log.retention.ms") is None


def test_from_dict_accepts_typed_python_values() -> None:
    config = BrokerConfig.from_dict({"num.partitions": 3, "delete.topic.enable": False})  # type: ignore[dict-item]
    assert config.num_partitions == 3
    assert config.delete_topic_enable is False


# -- value errors ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("num.partitions", "abc", "not a number of type INT"),
        ("num.partitions", "0", "value must be at least 1"),
        ("num.partitions", "1.5", "not a number of type INT"),
        ("num.partitions", "2147483648", "out of range for type INT"),
        ("offsets.topic.replication.factor", "40000", "out of range for type SHORT"),
        ("connections.max.idle.ms", "9223372036854775808", "out of range for type LONG"),
        ("auto.create.topics.enable", "yes", "expected true or false"),
        ("log.cleaner.min.cleanable.ratio", "lots", "not a number of type DOUBLE"),
        ("log.cleaner.min.cleanable.ratio", "1.5", "no more than 1"),
        ("compression.type", "brotli", "must be one of"),
        ("log.message.timestamp.type", "createtime", "must be one of CreateTime"),
        ("log.cleanup.policy", "delete,archive", "must be one of compact, delete"),
        ("log.segment.bytes", "10", "at least 14"),
        ("log.roll.ms", "0", "at least 1"),
        ("broker.id", "1001", "reserved.broker.max.id"),
        ("broker.id", "-2", "between -1"),
        ("log.dirs", " , ", "at least one log directory"),
        ("log.dirs", "/a,/b,/a", "listed twice"),
        ("listener.security.protocol.map", "PLAINTEXT:TLS", "invalid security protocol"),
        ("listener.security.protocol.map", "PLAINTEXT", "is not NAME:PROTOCOL"),
    ],
)
def test_bad_values_name_key_and_value(key: str, value: str, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        BrokerConfig.from_dict({key: value})
    text = str(info.value)
    assert "\n" not in text
    assert key in text
    assert message in text


def test_broker_id_without_generation_must_be_non_negative() -> None:
    with pytest.raises(ConfigError, match=r"broker.id.*at least 0"):
        BrokerConfig.from_dict({"broker.id": "-1", "broker.id.generation.enable": "false"})
    assert broker(broker_id="5000", reserved_broker_max_id="9000").broker_id == 5000


@pytest.mark.parametrize(
    ("props", "message"),
    [
        ({"replica.fetch.wait.max.ms": "40000"}, "replica.fetch.wait.max.ms (40000)"),
        ({"replica.fetch.wait.max.ms": "20000", "replica.lag.time.max.ms": "10000"},
         "replica.lag.time.max.ms (10000)"),
        ({"offsets.commit.required.acks": "2"}, "offsets.commit.required.acks (2)"),
        ({"queued.max.request.bytes": "10"}, "queued.max.request.bytes (10)"),
        ({"max.connections.per.ip": "0"}, "max.connections.per.ip can be 0"),
        ({"connections.max.idle.ms": "50"}, "connection.failed.authentication.delay.ms"),
        ({"log.cleaner.dedupe.buffer.size": "1048576"}, "1 MiB per cleaner thread"),
    ],
)
def test_cross_field_errors(props: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=r"invalid configuration") as info:
        BrokerConfig.from_dict(props)
    assert message in str(info.value)


def test_cross_field_limits_that_pass() -> None:
    config = BrokerConfig.from_dict({
        "max.connections.per.ip": "0", "max.connections.per.ip.overrides": "10.0.0.1:5",
        "log.cleaner.threads": "0", "connections.max.idle.ms": "-1",
        "queued.max.request.bytes": "104857600",
    })
    assert config.max_connections_per_ip == 0


def test_connection_limit_overrides_and_listener_prefixed_limits() -> None:
    config = BrokerConfig.from_dict({
        "listeners": "PLAINTEXT://127.0.0.1:0,INTERNAL://127.0.0.1:0",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,INTERNAL:PLAINTEXT",
        "inter.broker.listener.name": "INTERNAL",
        "max.connections.per.ip.overrides": "10.0.0.1:5, ::1:7,broker-a:0",
        "listener.name.internal.max.connections": "9",
        "listener.name.internal.max.connection.creation.rate": "3",
        "listener.name.internal.ssl.keystore.location": "/x",
        "listener.name.internal.plain.sasl.jaas.config": "x",
        "listener.name.internal.socket.send.buffer.bytes": "1",
        "listener.name.other.max.connections": "1",
        "listener.name.other.ssl.keystore.location": "/x",
    })
    assert config.max_connections_per_ip_overrides == {"10.0.0.1": 5, "::1": 7,
                                                       "broker-a": 0}
    assert config.listener_value("INTERNAL", "max.connections") == 9
    assert config.listener_value("INTERNAL", "max.connection.creation.rate") == 3
    assert config.listener_value("PLAINTEXT", "max.connections") is None
    assert config.security_value("INTERNAL", "ssl.keystore.location") == "/x"
    assert config.security_value("INTERNAL", "sasl.jaas.config", "PLAIN") == "x"
    # what klog does not act on is still reported (a listener it does not have, a
    # listener config it does not implement)
    assert config.unknown_keys == ["listener.name.internal.socket.send.buffer.bytes",
                                   "listener.name.other.max.connections",
                                   "listener.name.other.ssl.keystore.location"]


@pytest.mark.parametrize("props, key", [
    ({"max.connections.per.ip.overrides": "10.0.0.1"}, "max.connections.per.ip.overrides"),
    ({"max.connections.per.ip.overrides": "h:x"}, "max.connections.per.ip.overrides"),
    ({"max.connections.per.ip.overrides": "h:-1"}, "max.connections.per.ip.overrides"),
    ({"listener.name.plaintext.max.connections": "-1"},
     "listener.name.plaintext.max.connections"),
])
def test_bad_connection_limits_are_refused(props: dict[str, str], key: str) -> None:
    with pytest.raises(ConfigError) as info:
        BrokerConfig.from_dict({"listeners": "PLAINTEXT://127.0.0.1:0", **props})
    assert key in str(info.value)


# -- retention and roll precedence -----------------------------------------------------


@pytest.mark.parametrize(
    ("props", "expected"),
    [
        ({}, 7 * 24 * 3600 * 1000),
        ({"log.retention.hours": "1"}, 3600 * 1000),
        ({"log.retention.hours": "1", "log.retention.minutes": "2"}, 120 * 1000),
        ({"log.retention.hours": "1", "log.retention.minutes": "2",
          "log.retention.ms": "1234"}, 1234),
        ({"log.retention.minutes": "2", "log.retention.ms": "-1"}, -1),
        ({"log.retention.hours": "-1"}, -1),
        ({"log.retention.ms": "-5"}, -1),
    ],
)
def test_retention_precedence(props: dict[str, str], expected: int) -> None:
    config = BrokerConfig.from_dict(props)
    assert config.log_retention_ms == expected
    assert config.log_config().retention_ms == expected


@pytest.mark.parametrize("key", ["log.retention.ms", "log.retention.minutes",
                                 "log.retention.hours"])
def test_zero_retention_is_rejected(key: str) -> None:
    with pytest.raises(ConfigError, match=f"{key}: retention must be -1"):
        BrokerConfig.from_dict({key: "0"})


def test_roll_jitter_and_flush_precedence() -> None:
    config = BrokerConfig.from_dict({
        "log.roll.hours": "2", "log.roll.jitter.hours": "1",
        "log.flush.scheduler.interval.ms": "3000",
    })
    assert config.log_roll_ms == 2 * 3600 * 1000
    assert config.log_roll_jitter_ms == 3600 * 1000
    assert config.log_flush_interval_ms == 3000
    config = BrokerConfig.from_dict({
        "log.roll.hours": "2", "log.roll.ms": "500", "log.roll.jitter.hours": "1",
        "log.roll.jitter.ms": "7", "log.flush.scheduler.interval.ms": "3000",
        "log.flush.interval.ms": "9",
    })
    assert (config.log_roll_ms, config.log_roll_jitter_ms, config.log_flush_interval_ms) == (
        500, 7, 9)
    log = config.log_config()
    assert (log.segment_ms, log.segment_jitter_ms, log.flush_ms) == (500, 7, 9)


# -- listeners -------------------------------------------------------------------------


def test_listeners_parsing() -> None:
    config = BrokerConfig.from_dict({
        "listeners": "plaintext://:9092, INTERNAL://[::1]:0,EXTERNAL://10.0.0.5:9094,"
                     "OTHER://host-1.example.com:0",
        "listener.security.protocol.map":
            "PLAINTEXT:PLAINTEXT,internal:plaintext,EXTERNAL:SASL_SSL,OTHER:SSL",
        "advertised.listeners": "PLAINTEXT://broker1:9092,EXTERNAL://public:19094",
    })
    assert config.listeners == [
        Endpoint("PLAINTEXT", "", 9092, "PLAINTEXT"),
        Endpoint("INTERNAL", "::1", 0, "PLAINTEXT"),
        Endpoint("EXTERNAL", "10.0.0.5", 9094, "SASL_SSL"),
        Endpoint("OTHER", "host-1.example.com", 0, "SSL"),
    ]
    assert [str(e) for e in config.listeners] == [
        "PLAINTEXT://:9092", "INTERNAL://[::1]:0", "EXTERNAL://10.0.0.5:9094",
        "OTHER://host-1.example.com:0",
    ]
    assert config.advertised_listeners == [
        Endpoint("PLAINTEXT", "broker1", 9092, "PLAINTEXT"),
        Endpoint("EXTERNAL", "public", 19094, "SASL_SSL"),
    ]


@pytest.mark.parametrize(
    ("listeners", "message"),
    [
        ("PLAINTEXT://:70000", "port 70000 is not in 0..65535"),
        ("PLAINTEXT://:-1", "port -1 is not in 0..65535"),
        ("PLAINTEXT://:http", "expected LISTENER_NAME://host:port"),
        ("PLAINTEXT://localhost", "expected LISTENER_NAME://host:port"),
        ("localhost:9092", "expected LISTENER_NAME://host:port"),
        ("://:9092", "missing listener name"),
        ("FOO://:9092", "no security protocol for listener name FOO"),
        ("PLAINTEXT://:9092,plaintext://:9093", "each listener must have a different name"),
        ("PLAINTEXT://a:9092,SSL://b:9092", "each listener must have a different port"),
        ("", "at least one listener is required"),
    ],
)
def test_listener_errors(listeners: str, message: str) -> None:
    with pytest.raises(ConfigError, match=r"for configuration listeners") as info:
        BrokerConfig.from_dict({"listeners": listeners})
    assert message in str(info.value)


def test_port_zero_may_repeat() -> None:
    config = BrokerConfig.from_dict({"listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0"})
    assert [e.port for e in config.listeners] == [0, 0]


def test_wildcard_hosts_advertise_canonical_hostname(monkeypatch: pytest.MonkeyPatch) -> None:
    # Patched where BrokerConfig looks it up (klog/daemon/config/broker.py).
    monkeypatch.setattr("klog.daemon.config.broker.canonical_hostname", lambda: "broker.example")
    config = BrokerConfig.from_dict({
        "listeners": "PLAINTEXT://:9092,SSL://0.0.0.0:9093,SASL_SSL://[::]:9094",
    })
    assert [e.host for e in config.listeners] == ["", "0.0.0.0", "::"]
    assert [str(e) for e in config.advertised_listeners] == [
        "PLAINTEXT://broker.example:9092", "SSL://broker.example:9093",
        "SASL_SSL://broker.example:9094",
    ]
    explicit = BrokerConfig.from_dict({"advertised.listeners": "PLAINTEXT://:9092"})
    assert str(explicit.advertised_listeners[0]) == "PLAINTEXT://broker.example:9092"


def test_canonical_hostname_is_a_name() -> None:
    assert cfg.canonical_hostname()


@pytest.mark.parametrize(
    ("props", "key", "message"),
    [
        ({"advertised.listeners": "PLAINTEXT://0.0.0.0:9092"}, "advertised.listeners",
         "non-routable address 0.0.0.0"),
        ({"advertised.listeners": "PLAINTEXT://a:1,SSL://b:2"}, "advertised.listeners",
         "listener name SSL is not defined in listeners"),
        ({"advertised.listeners": "PLAINTEXT://a:1,PLAINTEXT://b:2"}, "advertised.listeners",
         "different name"),
        ({"listeners": "INTERNAL://:9092", "listener.security.protocol.map":
          "INTERNAL:PLAINTEXT"}, "security.inter.broker.protocol",
         "must be one of the advertised listeners (INTERNAL)"),
        ({"listeners": "INTERNAL://:9092", "listener.security.protocol.map":
          "INTERNAL:PLAINTEXT", "inter.broker.listener.name": "internal",
          "security.inter.broker.protocol": "PLAINTEXT"}, "inter.broker.listener.name",
         "set only one of"),
        ({"inter.broker.listener.name": "REPLICATION"}, "inter.broker.listener.name",
         "must be one of the advertised listeners (PLAINTEXT)"),
    ],
)
def test_advertised_and_inter_broker_errors(props: dict[str, str], key: str, message: str
                                            ) -> None:
    with pytest.raises(ConfigError, match=f"for configuration {key}") as info:
        BrokerConfig.from_dict(props)
    assert message in str(info.value)


def test_advertised_ports_may_repeat_and_inter_broker_listener_name() -> None:
    config = BrokerConfig.from_dict({
        "listeners": "INTERNAL://:9092,EXTERNAL://:9093",
        "advertised.listeners": "INTERNAL://h:9092,EXTERNAL://h2:9092",
        "listener.security.protocol.map": "INTERNAL:PLAINTEXT,EXTERNAL:PLAINTEXT",
        "inter.broker.listener.name": "internal",
    })
    assert config.inter_broker_listener_name == "INTERNAL"
    assert [e.port for e in config.advertised_listeners] == [9092, 9092]


# -- broker -> topic defaults ----------------------------------------------------------


def test_log_config_maps_broker_names_to_topic_names() -> None:
    config = BrokerConfig.from_dict({
        "log.segment.bytes": "1048576",
        "log.roll.hours": "1",
        "log.index.size.max.bytes": "4096",
        "log.index.interval.bytes": "100",
        "log.flush.interval.messages": "10",
        "log.retention.bytes": "999",
        "log.retention.minutes": "3",
        "message.max.bytes": "2000",
        "log.cleaner.delete.retention.ms": "11",
        "log.cleaner.min.compaction.lag.ms": "12",
        "log.cleaner.max.compaction.lag.ms": "13",
        "log.segment.delete.delay.ms": "14",
        "log.cleaner.min.cleanable.ratio": "0.75",
        "log.cleanup.policy": "compact",
        "compression.type": "zstd",
        "log.message.timestamp.type": "LogAppendTime",
        "log.message.timestamp.difference.max.ms": "15",
        "log.message.timestamp.before.max.ms": "16",
        "log.message.timestamp.after.max.ms": "17",
        "log.message.downconversion.enable": "false",
        "min.insync.replicas": "2",
        "log.preallocate": "true",
        "unclean.leader.election.enable": "true",
    })
    assert config.log_config() == LogConfig(
        segment_bytes=1048576, segment_ms=3600 * 1000, segment_index_bytes=4096,
        index_interval_bytes=100, flush_messages=10, retention_bytes=999,
        retention_ms=3 * 60 * 1000, max_message_bytes=2000, delete_retention_ms=11,
        min_compaction_lag_ms=12, max_compaction_lag_ms=13, file_delete_delay_ms=14,
        min_cleanable_dirty_ratio=0.75, cleanup_policy=("compact",), compression_type="zstd",
        message_timestamp_type="LogAppendTime", message_timestamp_difference_max_ms=15,
        message_timestamp_before_max_ms=16, message_timestamp_after_max_ms=17,
        message_downconversion_enable=False, min_insync_replicas=2, preallocate=True,
        unclean_leader_election_enable=True,
    )


def test_log_config_defaults_equal_kafka_topic_defaults() -> None:
    assert BrokerConfig.from_dict({}).log_config() == LogConfig()


def test_log_config_overrides_on_top() -> None:
    config = BrokerConfig.from_dict({"log.retention.hours": "1", "log.segment.bytes": "2000000"})
    log = config.log_config({"retention.ms": "5000", "cleanup.policy": "compact,delete",
                             "leader.replication.throttled.replicas": "0:1"})
    assert log.retention_ms == 5000
    assert log.segment_bytes == 2000000
    assert log.cleanup_policy == ("compact", "delete")
    assert config.log_config({}) is config.log_config()


def test_log_config_bad_overrides() -> None:
    config = BrokerConfig.from_dict({})
    with pytest.raises(ConfigError, match=r"Unknown topic config name: retention.hours"):
        config.log_config({"retention.hours": "1"})
    with pytest.raises(ConfigError, match=r"'abc' for configuration retention.ms"):
        config.log_config({"retention.ms": "abc"})
    with pytest.raises(ConfigError, match=r"min.compaction.lag.ms \(10\) > "
                                          r"max.compaction.lag.ms \(5\)"):
        BrokerConfig.from_dict({"log.cleaner.max.compaction.lag.ms": "5"}).log_config(
            {"min.compaction.lag.ms": "10"})
    assert config.log_config({"retention.hours": "1", "retention.ms": "9"},
                             ignore_unknown=True).retention_ms == 9


def test_broker_default_that_topics_reject() -> None:
    with pytest.raises(ConfigError, match=r"min.compaction.lag.ms"):
        BrokerConfig.from_dict({"log.cleaner.min.compaction.lag.ms": "10",
                                "log.cleaner.max.compaction.lag.ms": "5"}).log_config(
            {"retention.ms": "1"})


def test_broker_value_outside_topic_range_names_the_broker_key() -> None:
    with pytest.raises(ConfigError) as info:
        BrokerConfig.from_dict({"log.flush.interval.ms": "-5"})
    text = str(info.value)
    assert text.startswith("invalid value '-5' for configuration log.flush.interval.ms: ")
    assert "topic config flush.ms" in text


def test_topic_table_covers_log_config() -> None:
    extras = {"leader.replication.throttled.replicas", "follower.replication.throttled.replicas"}
    assert set(TOPIC_CONFIGS) == set(LogConfig.names()) | extras
    for spec in TOPIC_CONFIGS.values():
        for broker_name, _ in spec.broker_synonyms:
            assert broker_name in BROKER_CONFIGS
        assert spec.broker_synonyms or spec.default is not None


# -- validation for CreateTopics / AlterConfigs ----------------------------------------


def test_validate_topic_configs_normalizes() -> None:
    assert validate_topic_configs({
        "retention.ms": " 1000 ",
        "cleanup.policy": "Compact, DELETE",
        "preallocate": "TRUE",
        "compression.type": "GZIP",
        "min.cleanable.dirty.ratio": "0.1",
        "follower.replication.throttled.replicas": " 0:1 , 1:2 ",
        "leader.replication.throttled.replicas": "*",
    }) == {
        "retention.ms": "1000",
        "cleanup.policy": "compact,delete",
        "preallocate": "true",
        "compression.type": "gzip",
        "min.cleanable.dirty.ratio": "0.1",
        "follower.replication.throttled.replicas": "0:1,1:2",
        "leader.replication.throttled.replicas": "*",
    }


@pytest.mark.parametrize(
    ("configs", "message"),
    [
        ({"retention.hours": "1"}, "Unknown topic config name: retention.hours"),
        ({"retention.ms": None}, "Null value not supported for topic configs: retention.ms"),
        ({"retention.ms": "-2"}, "configuration retention.ms"),
        ({"segment.bytes": "x"}, "'x' for configuration segment.bytes"),
        ({"cleanup.policy": "forever"}, "configuration cleanup.policy"),
        ({"message.timestamp.type": "Now"}, "configuration message.timestamp.type"),
        ({"leader.replication.throttled.replicas": "0-1"},
         "leader.replication.throttled.replicas: must be '*'"),
        ({"min.compaction.lag.ms": "10", "max.compaction.lag.ms": "9"}, "conflict"),
    ],
)
def test_validate_topic_configs_errors(configs: dict[str, str | None], message: str) -> None:
    with pytest.raises(ConfigError) as info:
        validate_topic_configs(configs)
    assert message in str(info.value)


def test_check_topic_config_name() -> None:
    cfg.check_topic_config_name("retention.ms")
    with pytest.raises(ConfigError, match=r"Unknown topic config name: nope"):
        cfg.check_topic_config_name("nope")


def test_validate_broker_dynamic_configs() -> None:
    assert validate_broker_dynamic_configs({
        "log.retention.ms": " 1000", "log.cleanup.policy": "delete , compact",
        "message.max.bytes": "2000", "num.io.threads": "4", "log.cleaner.threads": "2",
        "listener.name.external.ssl.keystore.password": "secret",
        "follower.replication.throttled.rate": "100",
    }) == {
        "log.retention.ms": "1000", "log.cleanup.policy": "delete,compact",
        "message.max.bytes": "2000", "num.io.threads": "4", "log.cleaner.threads": "2",
        "listener.name.external.ssl.keystore.password": "secret",
        "follower.replication.throttled.rate": "100",
    }
    assert validate_broker_dynamic_configs({"log.segment.bytes": "2000000"},
                                           per_broker=False) == {"log.segment.bytes": "2000000"}


@pytest.mark.parametrize(
    ("configs", "per_broker", "message"),
    [
        ({"log.retention.hours": "1"}, True,
         "Cannot update these configs dynamically: log.retention.hours"),
        ({"broker.id": "3"}, True, "Cannot update these configs dynamically: broker.id"),
        ({"log.dirs": "/x"}, True, "Cannot update these configs dynamically: log.dirs"),
        ({"log.message.format.version": "2.8"}, True, "Cannot update these configs"),
        ({"no.such.thing": "1"}, True, "Unknown broker config name: no.such.thing"),
        ({"listener.name.x.no.such": "1"}, True, "Unknown broker config name"),
        ({"ssl.keystore.password": "pw"}, True, "only per-listener using the listener prefix"),
        ({"listeners": "PLAINTEXT://:1"}, False, "broker id must be specified: listeners"),
        ({"listener.name.x.ssl.key.password": "p"}, False, "broker id must be specified"),
        ({"log.retention.ms": "abc"}, True, "'abc' for configuration log.retention.ms"),
        ({"log.retention.ms": None}, True, "Null value not supported"),
    ],
)
def test_validate_broker_dynamic_config_errors(
    configs: dict[str, str | None], per_broker: bool, message: str
) -> None:
    with pytest.raises(ConfigError) as info:
        validate_broker_dynamic_configs(configs, per_broker=per_broker)
    assert message in str(info.value)


# -- dynamic layers --------------------------------------------------------------------


def test_dynamic_layering_precedence() -> None:
    static = BrokerConfig.from_dict({"log.retention.ms": "100", "message.max.bytes": "5000",
                                     "log.segment.bytes": "3000000"})
    config = static.with_dynamic(
        {"log.retention.ms": "300"},
        {"log.retention.ms": "200", "message.max.bytes": "6000"},
    )
    assert config.log_retention_ms == 300
    assert config.message_max_bytes == 6000
    assert config.log_segment_bytes == 3000000
    assert config.log_config().max_message_bytes == 6000
    assert config.source_of("log.retention.ms") is ConfigSource.DYNAMIC_BROKER_CONFIG
    assert config.source_of("message.max.bytes") is ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG
    assert config.source_of("log.segment.bytes") is ConfigSource.STATIC_BROKER_CONFIG
    assert config.source_of("num.io.threads") is ConfigSource.DEFAULT_CONFIG
    assert config.originals == static.originals
    assert config.dynamic_broker_configs == {"log.retention.ms": "300"}
    # The original is untouched: configs are values.
    assert static.log_retention_ms == 100
    # Dynamic ms beats static hours; removing the layers restores the static view.
    hours = BrokerConfig.from_dict({"log.retention.hours": "1"})
    assert hours.with_dynamic({}, {"log.retention.ms": "7"}).log_retention_ms == 7
    assert hours.with_dynamic({}, {}).log_retention_ms == 3600 * 1000


def test_with_dynamic_strict_and_lenient() -> None:
    static = BrokerConfig.from_dict({})
    with pytest.raises(ConfigError, match=r"Cannot update these configs dynamically"):
        static.with_dynamic({"log.retention.hours": "1"}, {})
    with pytest.raises(ConfigError, match=r"broker id must be specified"):
        static.with_dynamic({}, {"advertised.listeners": "PLAINTEXT://x:9092"})
    config = static.with_dynamic(
        {"log.retention.hours": "1", "num.io.threads": "bad", "num.io.threads.x": "1",
         "log.retention.ms": "60000"},
        {"listeners": "PLAINTEXT://:1"},
        lenient=True,
    )
    assert config.log_retention_ms == 60000
    assert set(config.ignored_dynamic) == {"log.retention.hours", "num.io.threads",
                                           "num.io.threads.x", "listeners"}
    assert config.num_io_threads == 8
    # A valid per-broker listener change still gets the full cross-field checks.
    with pytest.raises(ConfigError, match=r"advertised.listeners"):
        static.with_dynamic({"advertised.listeners": "PLAINTEXT://0.0.0.0:9092"}, {})


# -- DescribeConfigs -------------------------------------------------------------------


def entries_by_name(entries: list[cfg.ConfigEntry]) -> dict[str, cfg.ConfigEntry]:
    return {e.name: e for e in entries}


def test_describe_topic_with_override_and_static_broker_setting() -> None:
    config = BrokerConfig.from_dict({"log.retention.hours": "24", "log.segment.bytes": "2000000",
                                     "compression.type": "lz4"})
    entries = entries_by_name(describe_topic_configs(
        config, {"retention.ms": "5000", "cleanup.policy": "compact"}))
    assert list(entries) == sorted(TOPIC_CONFIGS)

    retention = entries["retention.ms"]
    assert retention.value == "5000"
    assert retention.source == ConfigSource.DYNAMIC_TOPIC_CONFIG == 1
    assert retention.config_type == ConfigType.LONG == 5
    assert not retention.read_only and not retention.is_sensitive
    assert retention.synonyms == (
        ConfigSynonym("retention.ms", "5000", ConfigSource.DYNAMIC_TOPIC_CONFIG),
        ConfigSynonym("log.retention.hours", "24", ConfigSource.STATIC_BROKER_CONFIG),
        ConfigSynonym("log.retention.hours", "168", ConfigSource.DEFAULT_CONFIG),
    )
    assert retention.documentation

    segment = entries["segment.bytes"]
    assert segment.value == "2000000"
    assert segment.source == ConfigSource.STATIC_BROKER_CONFIG
    assert segment.config_type == ConfigType.INT
    assert segment.synonyms == (
        ConfigSynonym("log.segment.bytes", "2000000", ConfigSource.STATIC_BROKER_CONFIG),
        ConfigSynonym("log.segment.bytes", "1073741824", ConfigSource.DEFAULT_CONFIG),
    )

    assert entries["compression.type"].value == "lz4"
    assert entries["cleanup.policy"].value == "compact"
    assert entries["cleanup.policy"].config_type == ConfigType.LIST
    assert entries["cleanup.policy"].synonyms[0].source == ConfigSource.DYNAMIC_TOPIC_CONFIG
    assert entries["min.cleanable.dirty.ratio"].value == "0.5"
    assert entries["min.cleanable.dirty.ratio"].config_type == ConfigType.DOUBLE
    assert entries["preallocate"].value == "false"
    assert entries["preallocate"].config_type == ConfigType.BOOLEAN
    assert entries["message.timestamp.type"].config_type == ConfigType.STRING
    assert entries["flush.ms"].value == str(LONG_MAX)
    assert entries["flush.ms"].synonyms == (
        ConfigSynonym("log.flush.scheduler.interval.ms", str(LONG_MAX),
                      ConfigSource.DEFAULT_CONFIG),
    )
    throttled = entries["leader.replication.throttled.replicas"]
    assert (throttled.value, throttled.source, throttled.synonyms) == (
        "", ConfigSource.DEFAULT_CONFIG, ())


def test_describe_topic_names_filter_and_unknown_overrides() -> None:
    config = BrokerConfig.from_dict({})
    entries = describe_topic_configs(config, {"retention.ms": "10", "some.future.config": "x"},
                                     ["retention.ms", "segment.ms", "not.a.config"])
    assert [e.name for e in entries] == ["retention.ms", "segment.ms"]
    assert entries[1].value == str(7 * 24 * 3600 * 1000)
    assert entries[1].source == ConfigSource.DEFAULT_CONFIG


def test_describe_topic_with_dynamic_layers() -> None:
    config = BrokerConfig.from_dict({"log.retention.ms": "100"}).with_dynamic(
        {"log.retention.ms": "300"}, {"log.retention.ms": "200"})
    (entry,) = describe_topic_configs(config, {}, ["retention.ms"])
    assert entry.value == "300"
    assert entry.source == ConfigSource.DYNAMIC_BROKER_CONFIG
    assert [(s.value, s.source) for s in entry.synonyms] == [
        ("300", ConfigSource.DYNAMIC_BROKER_CONFIG),
        ("200", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG),
        ("100", ConfigSource.STATIC_BROKER_CONFIG),
        ("168", ConfigSource.DEFAULT_CONFIG),
    ]
    assert entry.synonyms[-1].name == "log.retention.hours"


def test_describe_broker_static_setting() -> None:
    config = BrokerConfig.from_dict({"log.retention.ms": "1000", "num.partitions": "3",
                                     "ssl.keystore.password": "hunter2",
                                     "log.cleaner.min.cleanable.ratio": "0.25"})
    entries = entries_by_name(describe_broker_configs(config))
    assert list(entries) == sorted(BROKER_CONFIGS)

    partitions = entries["num.partitions"]
    assert (partitions.value, partitions.source, partitions.read_only) == (
        "3", ConfigSource.STATIC_BROKER_CONFIG, True)
    assert partitions.config_type == ConfigType.INT
    assert partitions.synonyms == (
        ConfigSynonym("num.partitions", "3", ConfigSource.STATIC_BROKER_CONFIG),
        ConfigSynonym("num.partitions", "1", ConfigSource.DEFAULT_CONFIG),
    )

    retention_ms = entries["log.retention.ms"]
    assert (retention_ms.value, retention_ms.source, retention_ms.read_only) == (
        "1000", ConfigSource.STATIC_BROKER_CONFIG, False)
    assert retention_ms.synonyms == (
        ConfigSynonym("log.retention.ms", "1000", ConfigSource.STATIC_BROKER_CONFIG),
        ConfigSynonym("log.retention.hours", "168", ConfigSource.DEFAULT_CONFIG),
    )
    # Kafka drops synonyms ahead of the described name.
    hours = entries["log.retention.hours"]
    assert hours.synonyms == (
        ConfigSynonym("log.retention.hours", "168", ConfigSource.DEFAULT_CONFIG),
    )
    assert entries["log.retention.minutes"].value is None
    assert entries["log.retention.minutes"].synonyms == ()
    assert entries["log.retention.minutes"].source == ConfigSource.DEFAULT_CONFIG

    password = entries["ssl.keystore.password"]
    assert password.value is None
    assert password.is_sensitive
    assert password.config_type == ConfigType.PASSWORD
    assert password.synonyms == (
        ConfigSynonym("ssl.keystore.password", None, ConfigSource.STATIC_BROKER_CONFIG),
    )
    assert entries["log.cleaner.min.cleanable.ratio"].value == "0.25"
    assert entries["log.cleaner.io.max.bytes.per.second"].value == "1.7976931348623157E308"
    assert entries["log.cleanup.policy"].value == "delete"
    assert entries["log.cleanup.policy"].config_type == ConfigType.LIST
    assert entries["offsets.topic.replication.factor"].config_type == ConfigType.SHORT
    assert entries["offsets.topic.replication.factor"].value == "1"
    assert entries["create.topic.policy.class.name"].config_type == ConfigType.CLASS
    assert entries["listeners"].value == "PLAINTEXT://127.0.0.1:9092"
    assert entries["broker.id"].value == "0"
    assert not entries["message.max.bytes"].read_only
    assert entries["zookeeper.connect"].read_only
    assert all(e.documentation for e in entries.values())
    assert not any(e.is_sensitive for e in entries.values() if e.config_type != ConfigType.PASSWORD)


def test_describe_broker_dynamic_sources_and_names() -> None:
    config = BrokerConfig.from_dict({"message.max.bytes": "5000"}).with_dynamic(
        {"message.max.bytes": "7000", "listener.name.internal.ssl.key.password": "pw"},
        {"message.max.bytes": "6000", "log.retention.ms": "60000"},
    )
    (entry,) = describe_broker_configs(config, ["message.max.bytes"])
    assert entry.value == "7000"
    assert entry.source == ConfigSource.DYNAMIC_BROKER_CONFIG
    assert [(s.value, s.source) for s in entry.synonyms] == [
        ("7000", ConfigSource.DYNAMIC_BROKER_CONFIG),
        ("6000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG),
        ("5000", ConfigSource.STATIC_BROKER_CONFIG),
        ("1048588", ConfigSource.DEFAULT_CONFIG),
    ]

    defaults = describe_broker_default_configs(config)
    assert [e.name for e in defaults] == ["log.retention.ms", "message.max.bytes"]
    assert defaults[1].value == "6000"
    assert defaults[1].source == ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG
    assert all(s.source != ConfigSource.DYNAMIC_BROKER_CONFIG for s in defaults[1].synonyms)
    assert describe_broker_default_configs(config, ["log.retention.ms"])[0].value == "60000"


def test_broker_spec_table_is_consistent() -> None:
    for name, spec in BROKER_CONFIGS.items():
        assert spec.name == name
        if spec.default is not None:
            cfg.parse_value(spec, spec.default)
        assert spec.dynamic in (cfg.READ_ONLY, cfg.PER_BROKER, cfg.CLUSTER_WIDE,
                                cfg.PER_LISTENER)
    # Every topic config's primary broker synonym is dynamic, except the deprecated format.
    for spec in TOPIC_CONFIGS.values():
        if spec.broker_synonyms and spec.name != "message.format.version":
            assert not BROKER_CONFIGS[spec.broker_synonyms[0][0]].read_only, spec.name


def test_broker_synonym_groups() -> None:
    assert cfg.broker_synonyms("log.retention.hours") == [
        "log.retention.ms", "log.retention.minutes", "log.retention.hours"]
    assert cfg.broker_synonyms("log.flush.interval.ms") == [
        "log.flush.interval.ms", "log.flush.scheduler.interval.ms"]
    assert cfg.broker_synonyms("log.flush.scheduler.interval.ms") == [
        "log.flush.scheduler.interval.ms"]
    assert cfg.broker_synonyms("listener.name.ext.ssl.key.password") == [
        "listener.name.ext.ssl.key.password", "ssl.key.password"]
    assert cfg.broker_synonyms("num.partitions") == ["num.partitions"]


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (0.5, "0.5"), (1.0, "1.0"), (100.0, "100.0"), (0.001, "0.001"),
        (1234567.0, "1234567.0"), (1e7, "1.0E7"), (12345678.0, "1.2345678E7"),
        (1.7976931348623157e308, "1.7976931348623157E308"), (1e-4, "1.0E-4"),
        (-2.5e-5, "-2.5E-5"), (0.0, "0.0"), (float("inf"), "Infinity"),
    ],
)
def test_java_double(value: float, text: str) -> None:
    assert java_double(value) == text


def test_repr_names_mode_and_listeners() -> None:
    assert repr(BrokerConfig.from_dict(ZK)) == (
        "BrokerConfig(broker_id=-1, zookeeper=localhost:2181, "
        "listeners=PLAINTEXT://127.0.0.1:9092)"
    )


def test_dynamic_config_validators_refuse_a_change_before_it_is_applied() -> None:
    from klog.daemon.config.dynamic import DynamicBrokerConfig

    dynamic = DynamicBrokerConfig(BrokerConfig.from_dict({"log.cleaner.threads": "2"}))
    heard: list[int] = []

    def at_most_double(old: BrokerConfig, new: BrokerConfig) -> None:
        if new.log_cleaner_threads > 2 * old.log_cleaner_threads:
            raise ValueError("too many threads")

    dynamic.add_validator(at_most_double)
    dynamic.add_reconfigurable(lambda _old, new: heard.append(new.log_cleaner_threads))
    with pytest.raises(ConfigError, match="too many threads"):
        dynamic.validate(dynamic.current.with_dynamic({"log.cleaner.threads": "5"}, {}))
    ok = dynamic.current.with_dynamic({"log.cleaner.threads": "4"}, {})
    dynamic.validate(ok)
    dynamic.update(ok)
    assert heard == [4]


@pytest.mark.parametrize("name", ["kafka.security.authorizer.AclAuthorizer",
                                  "org.apache.kafka.metadata.authorizer.StandardAuthorizer"])
def test_kafkas_acl_authorizer_names_turn_on_klogs(name: str) -> None:
    config = BrokerConfig.load(None, [f"authorizer.class.name={name}",
                                      "super.users=User:admin;User:broker",
                                      "allow.everyone.if.no.acl.found=true"])
    assert config.get("authorizer.class.name") == name
    assert config.get("allow.everyone.if.no.acl.found") is True
    assert config.unknown_keys == []  # super.users and allow.everyone are known now


def test_an_authorizer_klog_lacks_refuses_start_up() -> None:
    with pytest.raises(ConfigError, match=r"authorizer\.class\.name=com\.example\.Custom is "
                                          r"not an authorizer klog has"):
        BrokerConfig.load(None, ["authorizer.class.name=com.example.Custom"])


def test_replica_selector_class_is_kafkas_rack_aware_one_or_refused() -> None:
    name = "org.apache.kafka.common.replica.RackAwareReplicaSelector"
    config = BrokerConfig.load(None, [f"replica.selector.class={name}"])
    assert config.replica_selector_class == name
    assert config.unimplemented_keys == []
    with pytest.raises(ConfigError, match=r"replica\.selector\.class=com\.example\.Mine is "
                                          r"not a replica selector klog has"):
        BrokerConfig.load(None, ["replica.selector.class=com.example.Mine"])


def test_super_users_must_be_principals() -> None:
    with pytest.raises(ConfigError, match=r"super\.users"):
        BrokerConfig.load(None, ["super.users=admin"])


# -- honest configuration (issue 23): every Kafka name known, the unimplemented ones said --

_KAFKA_NAMES_FILE = Path(__file__).parent / "data" / "kafka_3_9_broker_configs.txt"


def _kafka_3_9_broker_config_names() -> list[str]:
    lines = _KAFKA_NAMES_FILE.read_text().splitlines()
    return [line for line in lines if line and not line.startswith("#")]


def test_every_kafka_3_9_broker_config_name_is_known() -> None:
    names = _kafka_3_9_broker_config_names()
    assert len(names) == 314  # the whole list, not a truncated file
    assert [n for n in names if n not in BROKER_CONFIGS] == []
    # ... and accepted in server.properties as Kafka accepts it (its default parses).
    config = BrokerConfig.from_dict({"sasl.kerberos.min.time.before.relogin": "120000"})
    assert config.get("sasl.kerberos.min.time.before.relogin") == 120000
    assert config.unknown_keys == []


def test_kafka_names_take_kafkas_type_range_and_dynamic_mode() -> None:
    # Kafka: sasl.kerberos.min.time.before.relogin is a LONG, per-broker dynamic.
    assert validate_broker_dynamic_configs(
        {"sasl.kerberos.min.time.before.relogin": "120000"}) == {
        "sasl.kerberos.min.time.before.relogin": "120000"}
    with pytest.raises(ConfigError, match="broker id must be specified"):
        validate_broker_dynamic_configs({"sasl.kerberos.min.time.before.relogin": "1"},
                                        per_broker=False)
    with pytest.raises(ConfigError, match="not a number of type LONG"):
        validate_broker_dynamic_configs({"sasl.kerberos.min.time.before.relogin": "soon"})
    # compression.gzip.level: [1,...,9] or -1, cluster-wide.
    assert validate_broker_dynamic_configs({"compression.gzip.level": "9"}, per_broker=False)
    with pytest.raises(ConfigError, match="no more than 9"):
        BrokerConfig.from_dict({"compression.gzip.level": "10"})
    # group.coordinator.rebalance.protocols: a list of Kafka's choices.
    with pytest.raises(ConfigError, match="must be one of"):
        BrokerConfig.from_dict({"group.coordinator.rebalance.protocols": "classic,bogus"})
    with pytest.raises(ConfigError, match="Cannot update these configs dynamically"):
        validate_broker_dynamic_configs({"quota.window.num": "3"})


def test_unimplemented_keys_list_names_set_in_every_layer() -> None:
    config = broker(queued_max_request_bytes="200000000", num_partitions="2")
    assert config.unimplemented_keys == ["queued.max.request.bytes"]
    config = config.with_dynamic({"sasl.kerberos.min.time.before.relogin": "1000"},
                                 {"metric.reporters": "com.example.Reporter"})
    assert config.unimplemented_keys == ["metric.reporters", "queued.max.request.bytes",
                                         "sasl.kerberos.min.time.before.relogin"]
    assert broker(num_partitions="2", log_cleaner_enable="false").unimplemented_keys == []


def test_the_unimplemented_set_leaves_implemented_names_out() -> None:
    """The unimplemented set is not a catch-all: what klog implements stays out of it."""
    from klog.daemon.config.specs import UNIMPLEMENTED_BROKER_CONFIGS

    for name in ("log.cleaner.enable", "num.partitions", "listeners", "sasl.jaas.config",
                 "max.connections", "socket.send.buffer.bytes", "authorizer.class.name",
                 "replica.selector.class"):
        assert name not in UNIMPLEMENTED_BROKER_CONFIGS
    for name in ("queued.max.request.bytes", "metric.reporters", "process.roles",
                 "sasl.kerberos.min.time.before.relogin", "num.network.threads"):
        assert name in UNIMPLEMENTED_BROKER_CONFIGS


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("zookeeper.set.acl", "true"),
        ("zookeeper.ssl.client.enable", "true"),
        ("principal.builder.class", "com.example.MyPrincipalBuilder"),
        ("sasl.server.callback.handler.class", "com.example.Handler"),
        ("sasl.oauthbearer.jwks.endpoint.url", "https://idp.example/jwks"),
        ("create.topic.policy.class.name", "com.example.Policy"),
        ("password.encoder.secret", "s3cret"),
        ("process.roles", "broker"),
        ("controller.listener.names", "CONTROLLER"),
    ],
)
def test_an_ignored_name_that_would_weaken_security_refuses_start_up(
    key: str, value: str
) -> None:
    with pytest.raises(ConfigError, match=f"{key}=.* is not implemented by klog"):
        BrokerConfig.from_dict({key: value})
    # At Kafka's default it asks for nothing klog lacks.
    from klog.daemon.config.specs import BROKER_CONFIGS as SPECS

    default = SPECS[key].default
    if default is not None:
        BrokerConfig.from_dict({key: default})


def test_a_security_weakening_name_is_refused_dynamically_too() -> None:
    with pytest.raises(ConfigError, match=r"principal\.builder\.class=.* is not implemented"):
        broker().with_dynamic({"principal.builder.class": "com.example.Builder"}, {})


def test_describe_marks_unimplemented_configs_and_never_reports_them_on() -> None:
    config = broker(queued_max_request_bytes="200000000",
                    auto_include_jmx_reporter="true")
    entries = {e.name: e for e in describe_broker_configs(config)}
    assert set(entries) >= set(_kafka_3_9_broker_config_names())  # Kafka lists them all
    selector = entries["queued.max.request.bytes"]
    assert selector.value == "200000000"  # the value as set ...
    assert selector.source == ConfigSource.STATIC_BROKER_CONFIG
    assert "accepted, not implemented by klog" in (selector.documentation or "")
    relogin = entries["sasl.kerberos.min.time.before.relogin"]
    assert relogin.value == "60000" and relogin.source == ConfigSource.DEFAULT_CONFIG
    assert "accepted, not implemented by klog" in (relogin.documentation or "")
    # ... but a switch klog does not implement is never reported as on.
    jmx = entries["auto.include.jmx.reporter"]
    assert jmx.value == "false"
    assert jmx.synonyms[0].value == "true"  # what was set stays visible
    for entry in entries.values():
        if entry.config_type == ConfigType.BOOLEAN and "not implemented" in (
                entry.documentation or ""):
            assert entry.value == "false", entry.name
    # What klog implements is not marked: the log cleaner runs.
    cleaner = entries["log.cleaner.enable"]
    assert cleaner.value == "true" and "not implemented" not in (cleaner.documentation or "")


def test_listener_and_mechanism_prefixed_forms_count_as_the_config_itself() -> None:
    """Kafka's channel builders read security configs per listener and per mechanism:
    those forms are refused or listed just as the plain name is."""
    with pytest.raises(ConfigError, match=r"listener\.name\.sasl_ssl\.plain\.sasl\.server"):
        BrokerConfig.from_dict(
            {"listener.name.sasl_ssl.plain.sasl.server.callback.handler.class": "x.Handler"})
    config = BrokerConfig.from_dict({
        "listener.name.sasl_ssl.gssapi.sasl.kerberos.service.name": "kafka",
        "listener.name.sasl_ssl.ssl.keymanager.algorithm": "PKIX",
        "listener.name.x.no.such.thing": "1",
    })
    assert config.unimplemented_keys == [
        "listener.name.sasl_ssl.gssapi.sasl.kerberos.service.name",
        "listener.name.sasl_ssl.ssl.keymanager.algorithm"]
    assert config.unknown_keys == ["listener.name.x.no.such.thing"]


def test_client_quota_configs() -> None:
    config = BrokerConfig.load(None, ["quota.window.num=2", "quota.window.size.seconds=3",
                                      "controller.quota.window.num=5"])
    assert config.get("quota.window.num") == 2
    assert config.get("quota.window.size.seconds") == 3
    assert config.get("controller.quota.window.num") == 5
    assert config.get("controller.quota.window.size.seconds") == 1
    assert config.unknown_keys == []
    with pytest.raises(ConfigError, match=r"quota\.window\.num"):
        BrokerConfig.load(None, ["quota.window.num=0"])


def test_a_client_quota_callback_refuses_start_up() -> None:
    # Quotas a custom callback would compute would silently not apply: refused, one line.
    with pytest.raises(ConfigError, match=r"client\.quota\.callback\.class=com\.example\.Cb "
                                          r"is not supported"):
        BrokerConfig.load(None, ["client.quota.callback.class=com.example.Cb"])
