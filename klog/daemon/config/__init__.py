"""Broker configuration: server.properties names, types, defaults, dynamic layers.

This module owns everything a broker reads from ``server.properties`` and ``--override``
arguments, with Kafka 3.x's names, types, defaults and validation (ZooKeeper mode), plus:

- listener parsing (``Endpoint``): ``NAME://host:port``, security protocol from
  ``listener.security.protocol.map``;
- the broker -> topic default mapping (``BrokerConfig.log_config``): ``log.segment.bytes``
  becomes ``segment.bytes``, ``log.retention.{ms,minutes,hours}`` becomes ``retention.ms``,
  ``message.max.bytes`` becomes ``max.message.bytes``, ... with topic overrides on top;
- dynamic broker configs (per broker and cluster default) layered over the static ones
  (``BrokerConfig.with_dynamic``) and their validation;
- DescribeConfigs entries (sources, synonyms, types, read-only, sensitive) for topics and
  brokers, and CreateTopics/AlterConfigs validation.

Precedence, highest first (Kafka's): dynamic per-broker config, dynamic cluster-default
config, static config (file + overrides), default.

Where klog's defaults differ from Kafka's, and why:

- ``listeners`` defaults to ``PLAINTEXT://127.0.0.1:9092`` (Kafka: ``PLAINTEXT://:9092``):
  a broker started with no arguments listens on loopback only, for safety.
- ``log.dir`` defaults to ``./klog-data`` (Kafka: ``/tmp/kafka-logs``).
- ``socket.receive.buffer.bytes`` and ``socket.send.buffer.bytes`` apply only when set:
  unset, accepted sockets get a 1 MiB receive buffer (enough for a fast producer's
  pipelined batches; Kafka's 100 KiB is not) and the system's send buffer.
- No ``zookeeper.connect`` means standalone mode (Kafka requires it). Standalone is a
  cluster of one, so it takes the single-broker values Kafka's own shipped
  ``config/server.properties`` sets: ``broker.id`` 0 (ZooKeeper mode keeps -1, "generate"),
  ``offsets.topic.replication.factor`` 1, ``transaction.state.log.replication.factor`` 1,
  ``transaction.state.log.min.isr`` 1 and ``group.initial.rebalance.delay.ms`` 0. Set them
  explicitly and they are obeyed: an offsets topic replication factor of 3 on one broker
  then fails the way it does in Kafka (not enough live brokers).
- ``klog.cluster.id`` (klog only, optional) pins the cluster id; unset, the metastore
  generates one.
- An advertised listener whose host is empty or a wildcard (``0.0.0.0``, ``::``) when
  ``advertised.listeners`` is unset advertises this machine's canonical host name, as Kafka
  does for an empty host (Kafka refuses a 0.0.0.0 listener without advertised.listeners).

Unknown keys are kept and listed in ``BrokerConfig.unknown_keys`` (Kafka warns, it does
not fail). Every broker config name of Kafka 3.9 is known; those klog accepts but does not
implement (``specs.UNIMPLEMENTED_BROKER_CONFIGS``) are listed, when set, in
``BrokerConfig.unimplemented_keys`` (the broker's start-up line "accepted, not implemented:
..."), and those whose neglect would weaken security (``specs.MUST_NOT_BE_IGNORED``) refuse
a value other than Kafka's default. Every value error is a ``ConfigError``: one line naming
the key and the value.

A BrokerConfig is an immutable value, safe to share between threads; a dynamic change
builds a new one.

The package, by noun: values.py (ConfigError, ConfigSource, ConfigType, value parsing and
formatting), listeners.py (Endpoint, listener parsing), specs.py (BROKER_CONFIGS,
TOPIC_CONFIGS: every config's definition), broker.py (BrokerConfig), validation.py
(CreateTopics / AlterConfigs checks), describe.py (DescribeConfigs entries). Everything is
importable from ``klog.daemon.config`` itself, as before the split; server.properties
text is parsed by klog/storage/properties.py.
"""

# Every name below was importable from klog.daemon.config before it became a package.
from klog.daemon.config.broker import (
    BrokerConfig,
    _Setting,
)
from klog.daemon.config.describe import (
    ConfigEntry,
    describe_broker_configs,
    describe_broker_default_configs,
    describe_topic_configs,
)
from klog.daemon.config.listeners import (
    Endpoint,
    canonical_hostname,
    parse_listeners,
    parse_protocol_map,
)
from klog.daemon.config.specs import (
    BROKER_CONFIGS,
    LISTENER_OVERRIDABLE_CONFIGS,
    LISTENER_SECURITY_CONFIGS,
    TOPIC_CONFIGS,
    TopicConfigSpec,
    broker_synonyms,
)
from klog.daemon.config.validation import (
    check_broker_dynamic_config_name,
    check_topic_config_name,
    validate_broker_dynamic_configs,
    validate_topic_configs,
)
from klog.daemon.config.values import (
    CLUSTER_WIDE,
    PER_BROKER,
    PER_LISTENER,
    READ_ONLY,
    ConfigError,
    ConfigSource,
    ConfigSpec,
    ConfigSynonym,
    ConfigType,
    format_value,
    java_double,
    parse_connection_overrides,
    parse_value,
)

# Explicit, so that type checkers see these names as this package's own (mypy strict
# treats an unlisted imported name as private).
__all__ = [
    "BROKER_CONFIGS",
    "CLUSTER_WIDE",
    "LISTENER_OVERRIDABLE_CONFIGS",
    "LISTENER_SECURITY_CONFIGS",
    "PER_BROKER",
    "PER_LISTENER",
    "READ_ONLY",
    "TOPIC_CONFIGS",
    "BrokerConfig",
    "ConfigEntry",
    "ConfigError",
    "ConfigSource",
    "ConfigSpec",
    "ConfigSynonym",
    "ConfigType",
    "Endpoint",
    "TopicConfigSpec",
    "_Setting",
    "broker_synonyms",
    "canonical_hostname",
    "check_broker_dynamic_config_name",
    "check_topic_config_name",
    "describe_broker_configs",
    "describe_broker_default_configs",
    "describe_topic_configs",
    "format_value",
    "java_double",
    "parse_connection_overrides",
    "parse_listeners",
    "parse_protocol_map",
    "parse_value",
    "validate_broker_dynamic_configs",
    "validate_topic_configs",
]
