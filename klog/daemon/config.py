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
not fail). Every value error is a ``ConfigError``: one line naming the key and the value.

A BrokerConfig is an immutable value, safe to share between threads; a dynamic change
builds a new one.
"""

from __future__ import annotations

import dataclasses
import functools
import re
import socket
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from enum import IntEnum
from pathlib import Path
from types import MappingProxyType
from typing import Any, Generic, TypeVar, overload

from klog.storage.config import LogConfig, LogConfigError
from klog.storage.properties import PropertiesError, parse_properties

INT_MAX = 2**31 - 1
LONG_MAX = 2**63 - 1
_RANGES = {"INT": 2**31, "SHORT": 2**15, "LONG": 2**63}

SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
COMPRESSION_TYPES = ("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")

_MINUTE = 60 * 1000
_HOUR = 60 * _MINUTE


class ConfigError(ValueError):
    """A bad configuration: the message is one line naming the key and the bad value."""


class ConfigSource(IntEnum):
    """DescribeConfigs' config_source ids."""

    UNKNOWN = 0
    DYNAMIC_TOPIC_CONFIG = 1
    DYNAMIC_BROKER_CONFIG = 2
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5


class ConfigType(IntEnum):
    """DescribeConfigs' config_type ids (Kafka's ConfigDef types)."""

    UNKNOWN = 0
    BOOLEAN = 1
    STRING = 2
    INT = 3
    SHORT = 4
    LONG = 5
    DOUBLE = 6
    LIST = 7
    CLASS = 8
    PASSWORD = 9


# Dynamic update modes (Kafka's "read-only", "per-broker", "cluster-wide"), plus the SSL
# store settings that Kafka lets change only per listener (listener.name.<l>.<config>).
READ_ONLY = "read-only"
PER_BROKER = "per-broker"
CLUSTER_WIDE = "cluster-wide"
PER_LISTENER = "per-listener"


# -- listeners -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Endpoint:
    """One listener: ``PLAINTEXT://127.0.0.1:9092``.

    ``host`` "" means every interface; ``port`` 0 means "pick a free port" (the server
    knows the bound port; advertise it with ``dataclasses.replace(endpoint, port=...)``).
    """

    listener_name: str
    host: str
    port: int
    security_protocol: str

    @property
    def connection_string(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.listener_name}://{host}:{self.port}"

    def __str__(self) -> str:
        return self.connection_string


# Kafka's endpoint grammar: NAME://host:port, IPv6 hosts optionally in brackets.
_ENDPOINT_RE = re.compile(r"(.*)://\[?([0-9a-zA-Z\-%._:]*)\]?:(-?[0-9]+)")
_WILDCARD_HOSTS = ("", "0.0.0.0", "::")


def parse_protocol_map(text: str, config_name: str = "listener.security.protocol.map"
                       ) -> dict[str, str]:
    """``NAME:PROTOCOL,...`` -> {NAME: PROTOCOL}; names upper-cased like Kafka's."""
    result: dict[str, str] = {}
    for item in _csv(text):
        name, sep, protocol = item.partition(":")
        name, protocol = name.strip().upper(), protocol.strip().upper()
        if not sep or not name:
            raise _bad(config_name, text, f"entry {item!r} is not NAME:PROTOCOL")
        if protocol not in SECURITY_PROTOCOLS:
            raise _bad(
                config_name, text,
                f"invalid security protocol {protocol!r} "
                f"(one of {', '.join(SECURITY_PROTOCOLS)})",
            )
        result[name] = protocol
    return result


def parse_listeners(
    text: str,
    protocol_map: Mapping[str, str],
    *,
    config_name: str = "listeners",
    require_distinct_ports: bool = True,
) -> list[Endpoint]:
    """Parse a comma-separated listener list (``listeners`` or ``advertised.listeners``)."""
    endpoints: list[Endpoint] = []
    for item in _csv(text):
        match = _ENDPOINT_RE.fullmatch(item)
        if match is None:
            raise _bad(config_name, item, "expected LISTENER_NAME://host:port")
        name = match[1].strip().upper()
        if not name:
            raise _bad(config_name, item, "missing listener name")
        protocol = protocol_map.get(name)
        if protocol is None:
            raise _bad(
                config_name, item,
                f"no security protocol for listener name {name} "
                "(known names come from listener.security.protocol.map: "
                f"{', '.join(protocol_map)})",
            )
        port = int(match[3])
        if not 0 <= port <= 65535:
            raise _bad(config_name, item, f"port {port} is not in 0..65535")
        endpoints.append(Endpoint(name, match[2], port, protocol))
    names = [e.listener_name for e in endpoints]
    if len(set(names)) != len(names):
        raise _bad(config_name, text, "each listener must have a different name")
    ports = [e.port for e in endpoints if e.port != 0]
    if require_distinct_ports and len(set(ports)) != len(ports):
        raise _bad(config_name, text, "each listener must have a different port")
    return endpoints


@functools.cache
def canonical_hostname() -> str:
    """This machine's fully qualified name (what an empty-host listener advertises)."""
    try:
        name = socket.getfqdn()
    except OSError:
        name = ""
    return name or "127.0.0.1"


# -- config definitions ----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ConfigSpec:
    """One config key: Kafka's name, type, default (as its string form) and validation."""

    name: str
    type: ConfigType
    default: str | None
    doc: str
    minimum: float | None = None
    maximum: float | None = None
    choices: tuple[str, ...] | None = None
    ignore_case: bool = False
    dynamic: str = READ_ONLY

    @property
    def read_only(self) -> bool:
        return self.dynamic == READ_ONLY


_B, _S, _I, _SH, _L, _D, _LI, _C, _P = (
    ConfigType.BOOLEAN, ConfigType.STRING, ConfigType.INT, ConfigType.SHORT,
    ConfigType.LONG, ConfigType.DOUBLE, ConfigType.LIST, ConfigType.CLASS,
    ConfigType.PASSWORD,
)
_CW, _PB, _PL = CLUSTER_WIDE, PER_BROKER, PER_LISTENER
_PROTOCOL_MAP_DEFAULT = ",".join(f"{p}:{p}" for p in SECURITY_PROTOCOLS)
_DOUBLE_MAX = "1.7976931348623157E308"


def _spec(name: str, type_: ConfigType, default: str | None, doc: str, **kw: Any
          ) -> ConfigSpec:
    return ConfigSpec(name, type_, default, doc, **kw)


_BROKER_SPEC_LIST: tuple[ConfigSpec, ...] = (
    # ZooKeeper
    _spec("zookeeper.connect", _S, None,
          "ZooKeeper connection string (host:port,...[/chroot]); unset runs klog standalone "
          "with a local, file-backed metastore."),
    _spec("zookeeper.session.timeout.ms", _I, "18000", "ZooKeeper session timeout."),
    _spec("zookeeper.connection.timeout.ms", _I, None,
          "How long to wait for a ZooKeeper connection; unset uses the session timeout."),
    _spec("zookeeper.sync.time.ms", _I, "2000", "How far a ZooKeeper follower may lag."),
    _spec("zookeeper.set.acl", _B, "false", "Create znodes with secure ACLs."),
    _spec("zookeeper.max.in.flight.requests", _I, "10",
          "Unacknowledged ZooKeeper requests allowed before the client blocks.", minimum=1),
    # General
    _spec("broker.id", _I, "-1",
          "This broker's id. -1 asks for one (ZooKeeper sequence or meta.properties); "
          "standalone klog defaults to 0."),
    _spec("broker.id.generation.enable", _B, "true",
          "Generate a broker id when broker.id is -1."),
    _spec("reserved.broker.max.id", _I, "1000",
          "Largest configurable broker id; generated ids start above it.", minimum=0),
    _spec("broker.rack", _S, None, "Rack of this broker, for rack-aware replica placement."),
    _spec("klog.cluster.id", _S, None,
          "klog only: pin the cluster id instead of letting the metastore generate one."),
    _spec("message.max.bytes", _I, "1048588",
          "Largest record batch the broker accepts (after compression); topic synonym "
          "max.message.bytes.", minimum=0, dynamic=_CW),
    _spec("num.network.threads", _I, "3",
          "Network threads (accepted for compatibility; klog uses one event loop).",
          minimum=1, dynamic=_CW),
    _spec("num.io.threads", _I, "8",
          "Request handler threads (accepted for compatibility).", minimum=1, dynamic=_CW),
    _spec("background.threads", _I, "10", "Threads for background tasks.", minimum=1,
          dynamic=_CW),
    _spec("num.recovery.threads.per.data.dir", _I, "1",
          "Threads per log directory for recovery at start-up and flushing at shutdown.",
          minimum=1, dynamic=_CW),
    _spec("num.replica.fetchers", _I, "1", "Fetcher threads per source broker.",
          dynamic=_CW),
    _spec("num.replica.alter.log.dirs.threads", _I, None,
          "Threads moving replicas between log directories; unset means one per directory."),
    _spec("queued.max.requests", _I, "500",
          "Requests queued before the network layer stops reading.", minimum=1),
    _spec("queued.max.request.bytes", _L, "-1",
          "Bytes of queued requests before reading stops; -1 means no limit."),
    _spec("request.timeout.ms", _I, "30000", "Timeout of the broker's own client requests."),
    _spec("delete.topic.enable", _B, "true", "Allow DeleteTopics."),
    _spec("auto.create.topics.enable", _B, "true",
          "Create a topic on first metadata request or produce to it."),
    _spec("num.partitions", _I, "1", "Default partition count of new topics.", minimum=1),
    _spec("default.replication.factor", _I, "1",
          "Default replication factor of automatically created topics."),
    _spec("min.insync.replicas", _I, "1",
          "In-sync replicas an acks=all produce needs.", minimum=1, dynamic=_CW),
    _spec("unclean.leader.election.enable", _B, "false",
          "Allow an out-of-sync replica to become leader (may lose data).", dynamic=_CW),
    _spec("compression.type", _S, "producer",
          "Final compression of topic data: a codec, 'uncompressed', or 'producer' to keep "
          "the producer's.", choices=COMPRESSION_TYPES, ignore_case=True, dynamic=_CW),
    _spec("fetch.max.bytes", _I, "57671680",
          "Largest response a fetch request may ask for.", minimum=1024),
    _spec("max.incremental.fetch.session.cache.slots", _I, "1000",
          "Incremental fetch sessions the broker keeps.", minimum=0),
    _spec("authorizer.class.name", _S, "", "Authorizer (klog has none; must stay empty)."),
    _spec("create.topic.policy.class.name", _C, None, "CreateTopics policy class."),
    _spec("alter.config.policy.class.name", _C, None, "AlterConfigs policy class."),
    # Socket server
    _spec("listeners", _S, "PLAINTEXT://127.0.0.1:9092",
          "Comma-separated NAME://host:port listeners; empty host means every interface, "
          "port 0 a free port. klog binds loopback by default.", dynamic=_PB),
    _spec("advertised.listeners", _S, None,
          "Listeners published to clients when they differ from listeners.", dynamic=_PB),
    _spec("listener.security.protocol.map", _S, _PROTOCOL_MAP_DEFAULT,
          "Listener name to security protocol.", dynamic=_PB),
    _spec("control.plane.listener.name", _S, None,
          "Listener for controller-to-broker traffic."),
    _spec("inter.broker.listener.name", _S, None, "Listener brokers use among themselves."),
    _spec("security.inter.broker.protocol", _S, "PLAINTEXT",
          "Security protocol between brokers (when inter.broker.listener.name is unset).",
          choices=SECURITY_PROTOCOLS, ignore_case=True),
    _spec("inter.broker.protocol.version", _S, "3.6-IV2",
          "Inter-broker protocol version."),
    _spec("socket.send.buffer.bytes", _I, "102400", "SO_SNDBUF of sockets; -1 for the OS's."),
    _spec("socket.receive.buffer.bytes", _I, "102400",
          "SO_RCVBUF of sockets; -1 for the OS's."),
    _spec("socket.request.max.bytes", _I, "104857600", "Largest request frame.", minimum=1),
    _spec("socket.listen.backlog.size", _I, "50", "Pending connections per listener.",
          minimum=1),
    _spec("max.connections.per.ip", _I, str(INT_MAX), "Connections allowed per address.",
          minimum=0, dynamic=_CW),
    _spec("max.connections.per.ip.overrides", _S, "",
          "Per-address connection limits: host:count,...", dynamic=_CW),
    _spec("max.connections", _I, str(INT_MAX), "Connections allowed in total.", minimum=0,
          dynamic=_CW),
    _spec("max.connection.creation.rate", _I, str(INT_MAX),
          "New connections allowed per second.", minimum=0, dynamic=_CW),
    _spec("connections.max.idle.ms", _L, "600000", "Close connections idle this long."),
    _spec("connection.failed.authentication.delay.ms", _I, "100",
          "Delay before closing a connection that failed authentication.", minimum=0),
    # Log
    _spec("log.dir", _S, "./klog-data", "Log directory, used when log.dirs is unset."),
    _spec("log.dirs", _S, None, "Comma-separated log directories; overrides log.dir."),
    _spec("log.segment.bytes", _I, "1073741824", "Largest segment file.", minimum=14,
          dynamic=_CW),
    _spec("log.roll.ms", _L, None,
          "Roll a segment this old; overrides log.roll.hours.", minimum=1, dynamic=_CW),
    _spec("log.roll.hours", _I, "168", "Roll a segment this old (hours).", minimum=1),
    _spec("log.roll.jitter.ms", _L, None,
          "Random jitter subtracted from roll time; overrides log.roll.jitter.hours.",
          minimum=0, dynamic=_CW),
    _spec("log.roll.jitter.hours", _I, "0", "Roll-time jitter (hours).", minimum=0),
    _spec("log.retention.ms", _L, None,
          "Delete segments older than this; -1 keeps them forever. Overrides "
          "log.retention.minutes and log.retention.hours.", dynamic=_CW),
    _spec("log.retention.minutes", _I, None,
          "Retention in minutes; overrides log.retention.hours."),
    _spec("log.retention.hours", _I, "168", "Retention in hours."),
    _spec("log.retention.bytes", _L, "-1",
          "Delete old segments when a partition grows beyond this; -1 for no limit.",
          dynamic=_CW),
    _spec("log.retention.check.interval.ms", _L, "300000",
          "How often retention is enforced.", minimum=1),
    _spec("log.cleanup.policy", _LI, "delete",
          "Default cleanup policy: delete, compact, or both.",
          choices=("compact", "delete"), ignore_case=True, dynamic=_CW),
    _spec("log.cleaner.enable", _B, "true", "Run the log cleaner (compaction)."),
    _spec("log.cleaner.threads", _I, "1", "Log cleaner threads.", minimum=0, dynamic=_CW),
    _spec("log.cleaner.io.max.bytes.per.second", _D, _DOUBLE_MAX,
          "Throttle of cleaner I/O.", dynamic=_CW),
    _spec("log.cleaner.dedupe.buffer.size", _L, "134217728",
          "Memory for deduplication across all cleaner threads.", dynamic=_CW),
    _spec("log.cleaner.io.buffer.size", _I, "524288", "Cleaner I/O buffer memory.",
          minimum=0, dynamic=_CW),
    _spec("log.cleaner.io.buffer.load.factor", _D, "0.9",
          "Load factor of the dedupe hash table.", dynamic=_CW),
    _spec("log.cleaner.backoff.ms", _L, "15000", "Cleaner sleep when there is no work.",
          minimum=0, dynamic=_CW),
    _spec("log.cleaner.min.cleanable.ratio", _D, "0.5",
          "Dirty/total ratio that makes a log eligible for cleaning.", minimum=0, maximum=1,
          dynamic=_CW),
    _spec("log.cleaner.delete.retention.ms", _L, "86400000",
          "How long tombstones survive compaction.", minimum=0, dynamic=_CW),
    _spec("log.cleaner.min.compaction.lag.ms", _L, "0",
          "Minimum age of a record before compaction.", minimum=0, dynamic=_CW),
    _spec("log.cleaner.max.compaction.lag.ms", _L, str(LONG_MAX),
          "Maximum time a record stays uncompacted.", minimum=1, dynamic=_CW),
    _spec("log.index.size.max.bytes", _I, "10485760", "Largest offset/time index file.",
          minimum=4, dynamic=_CW),
    _spec("log.index.interval.bytes", _I, "4096",
          "Bytes appended between two offset index entries.", minimum=0, dynamic=_CW),
    _spec("log.flush.interval.messages", _L, str(LONG_MAX),
          "fsync after this many messages.", minimum=1, dynamic=_CW),
    _spec("log.flush.interval.ms", _L, None,
          "fsync after this long; unset uses log.flush.scheduler.interval.ms.", dynamic=_CW),
    _spec("log.flush.scheduler.interval.ms", _L, str(LONG_MAX),
          "How often the flusher checks logs."),
    _spec("log.flush.offset.checkpoint.interval.ms", _I, "60000",
          "How often the recovery-point checkpoint is written.", minimum=0),
    _spec("log.flush.start.offset.checkpoint.interval.ms", _I, "60000",
          "How often the log-start-offset checkpoint is written.", minimum=0),
    _spec("log.segment.delete.delay.ms", _L, "60000",
          "Wait before deleting a segment file from disk.", minimum=0, dynamic=_CW),
    _spec("log.preallocate", _B, "false", "Preallocate new segment files.", dynamic=_CW),
    _spec("log.message.format.version", _S, "3.0-IV1",
          "Deprecated message format version (ignored from 3.0 on)."),
    _spec("log.message.timestamp.type", _S, "CreateTime",
          "Record timestamp: the producer's (CreateTime) or the broker's (LogAppendTime).",
          choices=("CreateTime", "LogAppendTime"), dynamic=_CW),
    _spec("log.message.timestamp.difference.max.ms", _L, str(LONG_MAX),
          "Largest allowed difference between a CreateTime timestamp and the broker's clock.",
          minimum=0, dynamic=_CW),
    _spec("log.message.timestamp.before.max.ms", _L, str(LONG_MAX),
          "How far in the past a CreateTime timestamp may be.", minimum=0, dynamic=_CW),
    _spec("log.message.timestamp.after.max.ms", _L, str(LONG_MAX),
          "How far in the future a CreateTime timestamp may be.", minimum=0, dynamic=_CW),
    _spec("log.message.downconversion.enable", _B, "true",
          "Down-convert batches for old fetch versions.", dynamic=_CW),
    # Replication
    _spec("controller.socket.timeout.ms", _I, "30000",
          "Socket timeout of controller-to-broker channels."),
    _spec("replica.lag.time.max.ms", _L, "30000",
          "A follower that has not caught up for this long leaves the ISR."),
    _spec("replica.socket.timeout.ms", _I, "30000", "Socket timeout of replica fetches."),
    _spec("replica.socket.receive.buffer.bytes", _I, "65536",
          "SO_RCVBUF of replica fetch sockets."),
    _spec("replica.fetch.max.bytes", _I, "1048576",
          "Bytes a follower asks for per partition.", minimum=0),
    _spec("replica.fetch.wait.max.ms", _I, "500", "Max wait of a follower's fetch."),
    _spec("replica.fetch.min.bytes", _I, "1", "Min bytes of a follower's fetch."),
    _spec("replica.fetch.response.max.bytes", _I, "10485760",
          "Bytes a follower asks for per fetch response.", minimum=0),
    _spec("replica.fetch.backoff.ms", _I, "1000", "Follower sleep after a fetch error.",
          minimum=0),
    _spec("replica.high.watermark.checkpoint.interval.ms", _L, "5000",
          "How often high watermarks are checkpointed."),
    _spec("replica.selector.class", _S, None, "Picks the replica a consumer fetches from."),
    _spec("fetch.purgatory.purge.interval.requests", _I, "1000",
          "Purge interval of the fetch purgatory."),
    _spec("producer.purgatory.purge.interval.requests", _I, "1000",
          "Purge interval of the produce purgatory."),
    _spec("delete.records.purgatory.purge.interval.requests", _I, "1",
          "Purge interval of the delete-records purgatory."),
    _spec("auto.leader.rebalance.enable", _B, "true",
          "Move leadership back to preferred replicas in the background."),
    _spec("leader.imbalance.per.broker.percentage", _I, "10",
          "Leader imbalance per broker that triggers a rebalance."),
    _spec("leader.imbalance.check.interval.seconds", _L, "300",
          "How often leader imbalance is checked."),
    _spec("controlled.shutdown.enable", _B, "true",
          "Move leadership away before shutting down."),
    _spec("controlled.shutdown.max.retries", _I, "3", "Controlled shutdown attempts."),
    _spec("controlled.shutdown.retry.backoff.ms", _L, "5000",
          "Wait between controlled shutdown attempts."),
    _spec("leader.replication.throttled.rate", _L, str(LONG_MAX),
          "Replication throttle for leaders, bytes/s (dynamic only).", minimum=0,
          dynamic=_CW),
    _spec("follower.replication.throttled.rate", _L, str(LONG_MAX),
          "Replication throttle for followers, bytes/s (dynamic only).", minimum=0,
          dynamic=_CW),
    _spec("replica.alter.log.dirs.io.max.bytes.per.second", _L, str(LONG_MAX),
          "Throttle of moves between log directories, bytes/s (dynamic only).", minimum=0,
          dynamic=_CW),
    # Group coordinator
    _spec("group.min.session.timeout.ms", _I, "6000", "Smallest consumer session timeout."),
    _spec("group.max.session.timeout.ms", _I, "1800000", "Largest consumer session timeout."),
    _spec("group.initial.rebalance.delay.ms", _I, "3000",
          "Wait for more members before a new group's first rebalance (standalone klog: 0)."),
    _spec("group.max.size", _I, str(INT_MAX), "Members a group may have.", minimum=1),
    # Offsets
    _spec("offset.metadata.max.bytes", _I, "4096", "Largest offset commit metadata."),
    _spec("offsets.load.buffer.size", _I, "5242880",
          "Read size when loading offsets into the cache.", minimum=1),
    _spec("offsets.topic.replication.factor", _SH, "3",
          "Replication factor of __consumer_offsets (standalone klog: 1).", minimum=1),
    _spec("offsets.topic.num.partitions", _I, "50", "Partitions of __consumer_offsets.",
          minimum=1),
    _spec("offsets.topic.segment.bytes", _I, "104857600",
          "Segment size of __consumer_offsets.", minimum=1),
    _spec("offsets.topic.compression.codec", _I, "0",
          "Compression codec id of __consumer_offsets."),
    _spec("offsets.retention.minutes", _I, "10080",
          "Keep committed offsets of an empty group this long.", minimum=1),
    _spec("offsets.retention.check.interval.ms", _L, "600000",
          "How often stale offsets are removed.", minimum=1),
    _spec("offsets.commit.timeout.ms", _I, "5000",
          "Wait for an offset commit to replicate.", minimum=1),
    _spec("offsets.commit.required.acks", _SH, "-1", "Acks an offset commit needs."),
    # Transactions
    _spec("transactional.id.expiration.ms", _I, "604800000",
          "Forget an idle transactional id after this long.", minimum=1),
    _spec("transaction.max.timeout.ms", _I, "900000", "Largest transaction timeout.",
          minimum=1),
    _spec("transaction.state.log.min.isr", _I, "2",
          "min.insync.replicas of __transaction_state (standalone klog: 1).", minimum=1),
    _spec("transaction.state.log.load.buffer.size", _I, "5242880",
          "Read size when loading transaction state.", minimum=1),
    _spec("transaction.state.log.replication.factor", _SH, "3",
          "Replication factor of __transaction_state (standalone klog: 1).", minimum=1),
    _spec("transaction.state.log.num.partitions", _I, "50",
          "Partitions of __transaction_state.", minimum=1),
    _spec("transaction.state.log.segment.bytes", _I, "104857600",
          "Segment size of __transaction_state.", minimum=1),
    _spec("transaction.abort.timed.out.transaction.cleanup.interval.ms", _I, "10000",
          "How often timed-out transactions are aborted.", minimum=1),
    _spec("transaction.remove.expired.transaction.cleanup.interval.ms", _I, "3600000",
          "How often expired transactional ids are removed.", minimum=1),
    _spec("producer.id.expiration.ms", _I, "86400000",
          "Forget an idle idempotent producer's state after this long.", minimum=1,
          dynamic=_CW),
    # Metrics
    _spec("metric.reporters", _LI, "", "Metrics reporter classes.", dynamic=_CW),
    _spec("metrics.num.samples", _I, "2", "Samples kept per metric.", minimum=1),
    _spec("metrics.sample.window.ms", _L, "30000", "Metric sample window.", minimum=1),
    _spec("metrics.recording.level", _S, "INFO", "Highest metric recording level."),
    # Security (accepted and described; klog serves PLAINTEXT only)
    _spec("ssl.keystore.location", _S, None, "Key store file.", dynamic=_PL),
    _spec("ssl.keystore.password", _P, None, "Key store password.", dynamic=_PL),
    _spec("ssl.key.password", _P, None, "Private key password.", dynamic=_PL),
    _spec("ssl.truststore.location", _S, None, "Trust store file.", dynamic=_PL),
    _spec("ssl.truststore.password", _P, None, "Trust store password.", dynamic=_PL),
    _spec("ssl.client.auth", _S, "none", "Client authentication: required, requested, none.",
          choices=("required", "requested", "none"), ignore_case=True, dynamic=_PB),
    _spec("ssl.enabled.protocols", _LI, "TLSv1.2,TLSv1.3", "Enabled TLS versions.",
          dynamic=_PB),
    _spec("sasl.enabled.mechanisms", _LI, "GSSAPI", "Enabled SASL mechanisms.", dynamic=_PB),
    _spec("sasl.mechanism.inter.broker.protocol", _S, "GSSAPI",
          "SASL mechanism between brokers.", dynamic=_PB),
    _spec("sasl.jaas.config", _P, None, "JAAS login configuration.", dynamic=_PB),
    _spec("password.encoder.secret", _P, None,
          "Secret that encodes dynamically configured passwords."),
    _spec("delegation.token.secret.key", _P, None, "Secret of delegation tokens."),
)

BROKER_CONFIGS: Mapping[str, ConfigSpec] = MappingProxyType(
    {s.name: s for s in _BROKER_SPEC_LIST}
)

# Single-broker values (Kafka's shipped server.properties) used when standalone.
_STANDALONE_DEFAULTS = {
    "broker.id": "0",
    "offsets.topic.replication.factor": "1",
    "transaction.state.log.replication.factor": "1",
    "transaction.state.log.min.isr": "1",
    "group.initial.rebalance.delay.ms": "0",
}

# Listener settings that can only be changed for one broker, never cluster-wide.
_CLUSTER_LEVEL_LISTENER_CONFIGS = ("max.connections", "max.connection.creation.rate",
                                   "num.network.threads")
_LISTENER_CONFIG_RE = re.compile(r"listener\.name\.([^.]*)\.(.*)")
#: Configs klog honours per listener, as ``listener.name.<listener>.<config>`` (the
#: listener name in lower case, as Kafka writes it), over the broker-wide value.
LISTENER_OVERRIDABLE_CONFIGS = ("max.connections", "max.connection.creation.rate")


@dataclass(frozen=True, slots=True)
class TopicConfigSpec:
    """A topic config: type, doc, and the broker configs that supply its default.

    ``broker_synonyms`` are (broker config name, multiplier to the topic's unit) in
    Kafka's order of precedence: the first one set wins.
    """

    name: str
    type: ConfigType
    doc: str
    broker_synonyms: tuple[tuple[str, int], ...] = ()
    default: str | None = None  # only for configs without a broker synonym


def _topic(name: str, type_: ConfigType, doc: str, *synonyms: str | tuple[str, int],
           default: str | None = None) -> TopicConfigSpec:
    pairs = tuple(s if isinstance(s, tuple) else (s, 1) for s in synonyms)
    return TopicConfigSpec(name, type_, doc, pairs, default)


_THROTTLED_DOC = (
    "Replicas whose replication is throttled: '*' or partition:broker,... "
    "(set by partition reassignment)."
)
_TOPIC_SPEC_LIST: tuple[TopicConfigSpec, ...] = (
    _topic("cleanup.policy", _LI, "delete, compact, or both.", "log.cleanup.policy"),
    _topic("compression.type", _S,
           "Final compression: a codec, 'uncompressed', or 'producer' to keep the producer's.",
           "compression.type"),
    _topic("delete.retention.ms", _L, "How long tombstones survive compaction.",
           "log.cleaner.delete.retention.ms"),
    _topic("file.delete.delay.ms", _L, "Wait before deleting a segment file from disk.",
           "log.segment.delete.delay.ms"),
    _topic("flush.messages", _L, "fsync after this many messages.",
           "log.flush.interval.messages"),
    _topic("flush.ms", _L, "fsync after this long.", "log.flush.interval.ms",
           "log.flush.scheduler.interval.ms"),
    _topic("follower.replication.throttled.replicas", _LI, _THROTTLED_DOC, default=""),
    _topic("index.interval.bytes", _I, "Bytes appended between two offset index entries.",
           "log.index.interval.bytes"),
    _topic("leader.replication.throttled.replicas", _LI, _THROTTLED_DOC, default=""),
    _topic("max.compaction.lag.ms", _L, "Maximum time a record stays uncompacted.",
           "log.cleaner.max.compaction.lag.ms"),
    _topic("max.message.bytes", _I, "Largest record batch accepted (after compression).",
           "message.max.bytes"),
    _topic("message.downconversion.enable", _B, "Down-convert batches for old fetch versions.",
           "log.message.downconversion.enable"),
    _topic("message.format.version", _S, "Deprecated message format version.",
           "log.message.format.version"),
    _topic("message.timestamp.after.max.ms", _L,
           "How far in the future a CreateTime timestamp may be.",
           "log.message.timestamp.after.max.ms"),
    _topic("message.timestamp.before.max.ms", _L,
           "How far in the past a CreateTime timestamp may be.",
           "log.message.timestamp.before.max.ms"),
    _topic("message.timestamp.difference.max.ms", _L,
           "Largest allowed difference between a CreateTime timestamp and the broker's clock.",
           "log.message.timestamp.difference.max.ms"),
    _topic("message.timestamp.type", _S, "CreateTime or LogAppendTime.",
           "log.message.timestamp.type"),
    _topic("min.cleanable.dirty.ratio", _D,
           "Dirty/total ratio that makes the log eligible for cleaning.",
           "log.cleaner.min.cleanable.ratio"),
    _topic("min.compaction.lag.ms", _L, "Minimum age of a record before compaction.",
           "log.cleaner.min.compaction.lag.ms"),
    _topic("min.insync.replicas", _I, "In-sync replicas an acks=all produce needs.",
           "min.insync.replicas"),
    _topic("preallocate", _B, "Preallocate new segment files.", "log.preallocate"),
    _topic("retention.bytes", _L,
           "Delete old segments when a partition grows beyond this; -1 for no limit.",
           "log.retention.bytes"),
    _topic("retention.ms", _L, "Delete segments older than this; -1 keeps them forever.",
           "log.retention.ms", ("log.retention.minutes", _MINUTE),
           ("log.retention.hours", _HOUR)),
    _topic("segment.bytes", _I, "Largest segment file.", "log.segment.bytes"),
    _topic("segment.index.bytes", _I, "Largest offset/time index file.",
           "log.index.size.max.bytes"),
    _topic("segment.jitter.ms", _L, "Random jitter subtracted from the roll time.",
           "log.roll.jitter.ms", ("log.roll.jitter.hours", _HOUR)),
    _topic("segment.ms", _L, "Roll a segment this old.", "log.roll.ms",
           ("log.roll.hours", _HOUR)),
    _topic("unclean.leader.election.enable", _B,
           "Allow an out-of-sync replica to become leader (may lose data).",
           "unclean.leader.election.enable"),
)

TOPIC_CONFIGS: Mapping[str, TopicConfigSpec] = MappingProxyType(
    {s.name: s for s in _TOPIC_SPEC_LIST}
)
_LOG_CONFIG_NAMES = frozenset(LogConfig.names())
_THROTTLED_RE = re.compile(r"[0-9]+:[0-9]+")

# Broker configs that share one value, in Kafka's order (DynamicBrokerConfig's synonyms).
_BROKER_SYNONYM_GROUPS = (
    ("log.roll.ms", "log.roll.hours"),
    ("log.roll.jitter.ms", "log.roll.jitter.hours"),
    ("log.flush.interval.ms", "log.flush.scheduler.interval.ms"),
    ("log.retention.ms", "log.retention.minutes", "log.retention.hours"),
)


def broker_synonyms(name: str) -> list[str]:
    """The broker config names that configure the same thing as ``name``, by precedence."""
    if name == "log.flush.scheduler.interval.ms":
        return [name]  # it backs log.flush.interval.ms, not the other way round
    for group in _BROKER_SYNONYM_GROUPS:
        if name in group:
            return list(group)
    match = _LISTENER_CONFIG_RE.fullmatch(name)
    if match:
        return [name, match[2]]
    return [name]


# -- value parsing and formatting ------------------------------------------------------

_INT_RE = re.compile(r"[+-]?[0-9]+")
_DOUBLE_RE = re.compile(r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?[dDfF]?")


def _bad(name: str, value: object, reason: str) -> ConfigError:
    return ConfigError(f"invalid value {value!r} for configuration {name}: {reason}")


def _csv(text: str) -> list[str]:
    return [item for item in re.split(r"\s*,\s*", text.strip()) if item]


def parse_connection_overrides(text: str) -> dict[str, int]:
    """max.connections.per.ip.overrides: ``host:count,host:count`` -> {host: count}.

    As Kafka's ``Csv.parseCsvMap``: entries split at commas, each at its last colon (so an
    IPv6 address keeps its own colons); a count that is not a non-negative int is an error.
    """
    name = "max.connections.per.ip.overrides"
    overrides: dict[str, int] = {}
    for entry in _csv(text):
        host, sep, count = entry.rpartition(":")
        host, count = host.strip(), count.strip()
        if not sep or not host or not _INT_RE.fullmatch(count) or not 0 <= int(count) < 2**31:
            raise _bad(name, text, f"entry {entry!r} is not host:count")
        overrides[host] = int(count)
    return overrides


def parse_value(spec: ConfigSpec, raw: str) -> Any:
    """Parse one broker config value from its string form (ConfigDef's rules)."""
    name, text, kind = spec.name, raw.strip(), spec.type
    value: Any
    if kind is ConfigType.BOOLEAN:
        if text.lower() not in ("true", "false"):
            raise _bad(name, raw, "expected true or false")
        value = text.lower() == "true"
    elif kind in (ConfigType.INT, ConfigType.SHORT, ConfigType.LONG):
        if not _INT_RE.fullmatch(text):
            raise _bad(name, raw, f"not a number of type {kind.name}")
        value = int(text)
        bound = _RANGES[kind.name]
        if not -bound <= value < bound:
            raise _bad(name, raw, f"out of range for type {kind.name}")
    elif kind is ConfigType.DOUBLE:
        if not _DOUBLE_RE.fullmatch(text):
            raise _bad(name, raw, "not a number of type DOUBLE")
        value = float(text.rstrip("dDfF"))
    elif kind is ConfigType.LIST:
        value = _csv(text)
        if spec.choices:
            value = [_choose(spec, item, raw) for item in value]
    else:  # STRING, CLASS, PASSWORD
        value = text
        if spec.choices:
            value = _choose(spec, text, raw)
    if isinstance(value, int | float) and not isinstance(value, bool):
        if spec.minimum is not None and value < spec.minimum:
            raise _bad(name, raw, f"value must be at least {_number(spec.minimum)}")
        if spec.maximum is not None and value > spec.maximum:
            raise _bad(name, raw, f"value must be no more than {_number(spec.maximum)}")
    return value


def _choose(spec: ConfigSpec, text: str, raw: str) -> str:
    assert spec.choices is not None
    if text in spec.choices:
        return text
    if spec.ignore_case:
        for choice in spec.choices:
            if choice.lower() == text.lower():
                return choice
    raise _bad(spec.name, raw, f"must be one of {', '.join(spec.choices)}")


def _number(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else str(x)


def format_value(kind: ConfigType, value: Any) -> str | None:
    """A typed value as Kafka prints it (ConfigDef.convertToString)."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list | tuple):
        return ",".join(str(v) for v in value)
    if isinstance(value, float) or kind is ConfigType.DOUBLE:
        return java_double(float(value))
    return str(value)


def java_double(d: float) -> str:
    """Java's Double.toString: plain for 1e-3 <= |d| < 1e7, else ``1.0E10`` style."""
    if d != d:
        return "NaN"
    if d in (float("inf"), float("-inf")):
        return "Infinity" if d > 0 else "-Infinity"
    if d == 0:
        return "-0.0" if str(d).startswith("-") else "0.0"
    if 1e-3 <= abs(d) < 1e7:
        return repr(d)  # Python's shortest repr is plain, with ".0", in this range
    sign, digits, exponent = Decimal(repr(d)).as_tuple()
    assert isinstance(exponent, int)
    text = "".join(map(str, digits)).rstrip("0") or "0"
    power = exponent + len(digits) - 1
    return f"{'-' if sign else ''}{text[0]}.{text[1:] or '0'}E{power}"


def _as_text(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list | tuple):
        return ",".join(str(v) for v in value)
    return str(value)


# -- the broker config -----------------------------------------------------------------

T = TypeVar("T")


class _Setting(Generic[T]):
    """A typed, read-only BrokerConfig attribute backed by one config key."""

    def __init__(self, name: str) -> None:
        assert name in BROKER_CONFIGS, name
        self.name = name

    @overload
    def __get__(self, obj: None, owner: type) -> _Setting[T]: ...
    @overload
    def __get__(self, obj: BrokerConfig, owner: type) -> T: ...
    def __get__(self, obj: BrokerConfig | None, owner: type) -> Any:
        if obj is None:
            return self
        return obj._values[self.name]


class BrokerConfig:
    """A broker's effective configuration: defaults < static < dynamic default < dynamic.

    Build one with ``load`` (a properties file plus ``key=value`` overrides) or
    ``from_dict``; everything is parsed and cross-checked on construction, so a bad
    value fails at start-up with a ConfigError. Immutable: ``with_dynamic`` returns a new
    config with dynamic layers applied.

    Typed attributes return the parsed value of one config key (``num_partitions`` ->
    ``num.partitions``). A few are derived the way Kafka derives them: ``log_retention_ms``
    (log.retention.ms, else .minutes, else .hours; negative means -1), ``log_roll_ms``,
    ``log_roll_jitter_ms``, ``log_flush_interval_ms``, ``zookeeper_connection_timeout_ms``,
    ``broker_id``, ``listeners``, ``advertised_listeners``, ``log_dirs``. ``get(name)``
    returns the raw typed value of any key (None when unset with no default).
    """

    def __init__(
        self,
        props: Mapping[str, object],
        *,
        dynamic_broker: Mapping[str, str] | None = None,
        dynamic_default: Mapping[str, str] | None = None,
        ignored_dynamic: Mapping[str, str] | None = None,
    ) -> None:
        self._static = {str(k): _as_text(v) for k, v in props.items()}
        self._dynamic_broker = {str(k): _as_text(v) for k, v in (dynamic_broker or {}).items()}
        self._dynamic_default = {
            str(k): _as_text(v) for k, v in (dynamic_default or {}).items()
        }
        self._ignored_dynamic = dict(ignored_dynamic or {})
        self._standalone = not self._static.get("zookeeper.connect", "").strip()
        defaults = {name: spec.default for name, spec in BROKER_CONFIGS.items()}
        if self._standalone:
            defaults.update(_STANDALONE_DEFAULTS)
        self._defaults = {k: v for k, v in defaults.items() if v is not None}

        merged = dict(self._defaults)
        for layer in (self._static, self._dynamic_default, self._dynamic_broker):
            merged.update((k, v) for k, v in layer.items() if k in BROKER_CONFIGS)
        self._merged = merged
        self._values: dict[str, Any] = {
            name: parse_value(spec, merged[name]) if name in merged else None
            for name, spec in BROKER_CONFIGS.items()
        }
        self._derive()
        self._log_defaults = self._build_log_defaults()

    # -- construction ------------------------------------------------------------------

    @classmethod
    def load(
        cls, properties_file: Path | str | None = None, overrides: Sequence[str] = ()
    ) -> BrokerConfig:
        """Read a server.properties file (optional), then apply ``key=value`` overrides.

        The file is read as UTF-8, or Latin-1 (Java's encoding) if it is not valid UTF-8.
        Later overrides win.
        """
        props: dict[str, str] = {}
        if properties_file is not None:
            path = Path(properties_file)
            try:
                data = path.read_bytes()
            except OSError as exc:
                raise ConfigError(
                    f"cannot read config file {path}: {exc.strerror or exc}"
                ) from None
            try:
                text = data.decode("utf-8")
            except UnicodeDecodeError:
                text = data.decode("latin-1")
            try:
                props.update(parse_properties(text))
            except PropertiesError as exc:
                raise ConfigError(str(exc)) from None
        for item in overrides:
            key, sep, value = item.partition("=")
            key = key.strip()
            if not sep or not key:
                raise ConfigError(f"invalid override {item!r}: expected key=value")
            props[key] = value
        return cls.from_dict(props)

    @classmethod
    def from_dict(cls, props: Mapping[str, str]) -> BrokerConfig:
        return cls(props)

    def with_dynamic(
        self,
        dynamic_broker: Mapping[str, str],
        dynamic_default: Mapping[str, str],
        *,
        lenient: bool = False,
    ) -> BrokerConfig:
        """This config with dynamic per-broker and cluster-default configs layered on top.

        Both layers are validated like AlterConfigs input (names must be dynamically
        updatable). With ``lenient`` (start-up, reading what the metastore holds), bad
        entries are skipped and listed in ``ignored_dynamic`` instead, as Kafka logs and
        ignores them; cross-field errors still raise.
        """
        layers = []
        ignored: dict[str, str] = {}
        for layer, per_broker in ((dynamic_broker, True), (dynamic_default, False)):
            if not lenient:
                validate_broker_dynamic_configs(layer, per_broker=per_broker)
                layers.append(dict(layer))
                continue
            kept = {}
            for key, value in layer.items():
                try:
                    validate_broker_dynamic_configs({key: value}, per_broker=per_broker)
                except ConfigError as exc:
                    ignored[key] = str(exc)
                else:
                    kept[key] = value
            layers.append(kept)
        return BrokerConfig(
            self._static, dynamic_broker=layers[0], dynamic_default=layers[1],
            ignored_dynamic=ignored,
        )

    def _derive(self) -> None:
        v = self._values
        self._broker_id = self._check_broker_id()
        self._log_retention_ms = self._retention_ms()
        self._log_roll_ms = self._first_set(("log.roll.ms", 1), ("log.roll.hours", _HOUR))
        self._log_roll_jitter_ms = self._first_set(
            ("log.roll.jitter.ms", 1), ("log.roll.jitter.hours", _HOUR)
        )
        self._log_flush_interval_ms = self._first_set(
            ("log.flush.interval.ms", 1), ("log.flush.scheduler.interval.ms", 1)
        )
        timeout = v["zookeeper.connection.timeout.ms"]
        self._zk_connection_timeout_ms = (
            timeout if timeout is not None else v["zookeeper.session.timeout.ms"]
        )
        self._log_dirs = self._parse_log_dirs()
        self._protocol_map = parse_protocol_map(v["listener.security.protocol.map"])
        self._listeners = parse_listeners(v["listeners"], self._protocol_map)
        if not self._listeners:
            raise _bad("listeners", v["listeners"], "at least one listener is required")
        self._advertised = self._parse_advertised()
        self._inter_broker_listener_name = self._check_inter_broker_listener()
        self._check_cross_field()

    def _first_set(self, *keys: tuple[str, int]) -> int:
        for key, factor in keys:
            value = self._values[key]
            if value is not None:
                return int(value) * factor
        raise AssertionError(f"no default for {keys}")  # the last key always has one

    def _retention_ms(self) -> int:
        v = self._values
        for key, factor in (("log.retention.ms", 1), ("log.retention.minutes", _MINUTE),
                            ("log.retention.hours", _HOUR)):
            if v[key] is not None:
                millis = v[key] * factor
                if millis == 0:
                    raise _bad(key, self._merged[key],
                               "retention must be -1 (unlimited) or at least 1 ms")
                return -1 if millis < 0 else millis
        raise AssertionError("log.retention.hours has a default")

    def _check_broker_id(self) -> int:
        v = self._values
        broker_id: int = v["broker.id"]
        if v["broker.id.generation.enable"]:
            if not -1 <= broker_id <= v["reserved.broker.max.id"]:
                raise _bad(
                    "broker.id", self._merged["broker.id"],
                    f"must be between -1 and reserved.broker.max.id "
                    f"({v['reserved.broker.max.id']})",
                )
        elif broker_id < 0:
            raise _bad("broker.id", self._merged["broker.id"],
                       "must be at least 0 when broker.id.generation.enable is false")
        return broker_id

    def _parse_log_dirs(self) -> list[Path]:
        key = "log.dirs" if self._values["log.dirs"] is not None else "log.dir"
        raw = self._values[key]
        dirs = _csv(raw)
        if not dirs:
            raise _bad(key, raw, "at least one log directory is required (log.dirs or log.dir)")
        if len(set(dirs)) != len(dirs):
            raise _bad(key, raw, "a log directory is listed twice")
        return [Path(d) for d in dirs]

    def _parse_advertised(self) -> list[Endpoint]:
        raw = self._values["advertised.listeners"]
        if raw is None:
            endpoints = list(self._listeners)
        else:
            endpoints = parse_listeners(
                raw, self._protocol_map, config_name="advertised.listeners",
                require_distinct_ports=False,
            )
            for endpoint in endpoints:
                if endpoint.host in ("0.0.0.0", "::"):
                    raise _bad("advertised.listeners", raw,
                               f"cannot advertise the non-routable address {endpoint.host}")
            names = {e.listener_name for e in self._listeners}
            extra = [e.listener_name for e in endpoints if e.listener_name not in names]
            if extra:
                raise _bad("advertised.listeners", raw,
                           f"listener name {extra[0]} is not defined in listeners")
        return [
            Endpoint(e.listener_name, canonical_hostname(), e.port, e.security_protocol)
            if e.host in _WILDCARD_HOSTS else e
            for e in endpoints
        ]

    def _check_inter_broker_listener(self) -> str:
        v = self._values
        name = v["inter.broker.listener.name"]
        if name is not None:
            if "security.inter.broker.protocol" in self._static:
                raise _bad("inter.broker.listener.name", name,
                           "set only one of inter.broker.listener.name and "
                           "security.inter.broker.protocol")
            name = name.strip().upper()
        else:
            name = v["security.inter.broker.protocol"]
        advertised = [e.listener_name for e in self._advertised]
        if name not in advertised:
            key = ("inter.broker.listener.name" if v["inter.broker.listener.name"] is not None
                   else "security.inter.broker.protocol")
            raise _bad(key, self._merged[key],
                       f"the inter-broker listener must be one of the advertised listeners "
                       f"({', '.join(advertised)})")
        return name

    def _check_cross_field(self) -> None:
        v = self._values

        def require(ok: bool, message: str) -> None:
            if not ok:
                raise ConfigError(f"invalid configuration: {message}")

        threads = v["log.cleaner.threads"]
        require(threads == 0 or v["log.cleaner.dedupe.buffer.size"] / threads > 1024 * 1024,
                f"log.cleaner.dedupe.buffer.size ({v['log.cleaner.dedupe.buffer.size']}) "
                f"must be at least 1 MiB per cleaner thread ({threads} threads)")
        wait = v["replica.fetch.wait.max.ms"]
        require(wait <= v["replica.socket.timeout.ms"],
                f"replica.fetch.wait.max.ms ({wait}) must not exceed "
                f"replica.socket.timeout.ms ({v['replica.socket.timeout.ms']})")
        require(wait <= v["replica.lag.time.max.ms"],
                f"replica.fetch.wait.max.ms ({wait}) must not exceed "
                f"replica.lag.time.max.ms ({v['replica.lag.time.max.ms']})")
        acks, rf = v["offsets.commit.required.acks"], v["offsets.topic.replication.factor"]
        require(-1 <= acks <= rf,
                f"offsets.commit.required.acks ({acks}) must be between -1 and "
                f"offsets.topic.replication.factor ({rf})")
        queued = v["queued.max.request.bytes"]
        require(queued <= 0 or queued >= v["socket.request.max.bytes"],
                f"queued.max.request.bytes ({queued}) must be at least "
                f"socket.request.max.bytes ({v['socket.request.max.bytes']})")
        require(v["max.connections.per.ip"] != 0 or bool(v["max.connections.per.ip.overrides"]),
                "max.connections.per.ip can be 0 only if max.connections.per.ip.overrides "
                "is set")
        parse_connection_overrides(v["max.connections.per.ip.overrides"])
        for listener in self._listeners:
            for name in LISTENER_OVERRIDABLE_CONFIGS:
                self.listener_value(listener.listener_name, name)  # raises if malformed
        idle = v["connections.max.idle.ms"]
        delay = v["connection.failed.authentication.delay.ms"]
        require(idle < 0 or delay < idle,
                f"connection.failed.authentication.delay.ms ({delay}) must be less than "
                f"connections.max.idle.ms ({idle})")

    def _build_log_defaults(self) -> LogConfig:
        props: dict[str, Any] = {"retention.ms": self._log_retention_ms}
        for spec in _TOPIC_SPEC_LIST:
            if spec.name not in _LOG_CONFIG_NAMES or spec.name in props:
                continue
            for broker_name, factor in spec.broker_synonyms:
                value = self._values[broker_name]
                if value is None:
                    continue
                value = value * factor if factor != 1 else value
                try:  # broker ranges can be looser than the topic's: name the broker key
                    LogConfig.from_properties({spec.name: value})
                except LogConfigError as exc:
                    raise _bad(broker_name, self._merged[broker_name],
                               f"not a valid default for topic config {spec.name} ({exc})"
                               ) from None
                props[spec.name] = value
                break
        return LogConfig.from_properties(props)

    # -- access ------------------------------------------------------------------------

    def get(self, name: str) -> Any:
        """The typed value of one config key; the raw string for an unknown key set by
        the user; KeyError for anything else."""
        if name in self._values:
            return self._values[name]
        if name in self._static:
            return self._static[name]
        raise KeyError(f"unknown broker config: {name}")

    @property
    def originals(self) -> dict[str, str]:
        """The static configs the user set (file and overrides), unparsed."""
        return dict(self._static)

    @property
    def dynamic_broker_configs(self) -> dict[str, str]:
        return dict(self._dynamic_broker)

    @property
    def dynamic_default_configs(self) -> dict[str, str]:
        return dict(self._dynamic_default)

    @property
    def ignored_dynamic(self) -> dict[str, str]:
        """Dynamic entries ``with_dynamic(lenient=True)`` skipped: key -> reason."""
        return dict(self._ignored_dynamic)

    @property
    def unknown_keys(self) -> list[str]:
        """Static keys klog does not know or does not act on (kept, like Kafka, which only
        warns): a listener-prefixed key counts as known only for a configured listener
        and a config klog honours per listener (``LISTENER_OVERRIDABLE_CONFIGS``)."""
        prefixes = {f"listener.name.{e.listener_name.lower()}.{name}"
                    for e in self._listeners for name in LISTENER_OVERRIDABLE_CONFIGS}
        return sorted(k for k in self._static if k not in BROKER_CONFIGS and k not in prefixes)

    def listener_value(self, listener_name: str, name: str) -> Any:
        """``listener.name.<listener>.<name>`` parsed as ``name``'s type, from the highest
        layer that sets it (dynamic per broker, dynamic default, static); None if unset.
        Only meaningful for ``LISTENER_OVERRIDABLE_CONFIGS``."""
        key = f"listener.name.{listener_name.lower()}.{name}"
        for layer in (self._dynamic_broker, self._dynamic_default, self._static):
            if key in layer:
                return parse_value(dataclasses.replace(BROKER_CONFIGS[name], name=key),
                                   layer[key])
        return None

    @property
    def standalone(self) -> bool:
        """True without zookeeper.connect: an in-process controller and local metastore."""
        return self._standalone

    def source_of(self, name: str) -> ConfigSource:
        """Where the effective value of a broker config key comes from."""
        for layer, source in self._layers():
            if name in layer:
                return source
        return ConfigSource.DEFAULT_CONFIG

    def _layers(self) -> tuple[tuple[Mapping[str, str], ConfigSource], ...]:
        return (
            (self._dynamic_broker, ConfigSource.DYNAMIC_BROKER_CONFIG),
            (self._dynamic_default, ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG),
            (self._static, ConfigSource.STATIC_BROKER_CONFIG),
            (self._defaults, ConfigSource.DEFAULT_CONFIG),
        )

    def _synonyms(self, names: Sequence[str], sensitive: bool,
                  *, skip: ConfigSource | None = None) -> list[ConfigSynonym]:
        out = []
        for layer, source in self._layers():
            if source == skip:
                continue
            for name in names:
                if name in layer:
                    out.append(ConfigSynonym(name, None if sensitive else layer[name], source))
        return out

    # derived values
    @property
    def broker_id(self) -> int:
        """broker.id; unset: 0 standalone, -1 ("generate") in ZooKeeper mode."""
        return self._broker_id

    @property
    def listeners(self) -> list[Endpoint]:
        return list(self._listeners)

    @property
    def advertised_listeners(self) -> list[Endpoint]:
        """advertised.listeners, else listeners; wildcard hosts become the host name."""
        return list(self._advertised)

    @property
    def listener_security_protocol_map(self) -> dict[str, str]:
        return dict(self._protocol_map)

    @property
    def inter_broker_listener_name(self) -> str:
        return self._inter_broker_listener_name

    @property
    def log_dirs(self) -> list[Path]:
        """log.dirs, else log.dir (klog default ./klog-data), as given (maybe relative)."""
        return list(self._log_dirs)

    @property
    def log_retention_ms(self) -> int:
        """Effective retention: log.retention.ms > .minutes > .hours; -1 = unlimited."""
        return self._log_retention_ms

    @property
    def log_roll_ms(self) -> int:
        """log.roll.ms, else log.roll.hours in ms."""
        return self._log_roll_ms

    @property
    def log_roll_jitter_ms(self) -> int:
        """log.roll.jitter.ms, else log.roll.jitter.hours in ms."""
        return self._log_roll_jitter_ms

    @property
    def log_flush_interval_ms(self) -> int:
        """log.flush.interval.ms, else log.flush.scheduler.interval.ms."""
        return self._log_flush_interval_ms

    @property
    def zookeeper_connection_timeout_ms(self) -> int:
        """zookeeper.connection.timeout.ms, else the session timeout."""
        return self._zk_connection_timeout_ms

    @property
    def cluster_id(self) -> str | None:
        """klog.cluster.id (klog only): a pinned cluster id, or None."""
        value = self._values["klog.cluster.id"]
        return value or None

    @property
    def zookeeper_connect(self) -> str | None:
        """zookeeper.connect; None means standalone."""
        value = self._values["zookeeper.connect"]
        return value or None

    # plain settings
    zookeeper_session_timeout_ms = _Setting[int]("zookeeper.session.timeout.ms")
    zookeeper_sync_time_ms = _Setting[int]("zookeeper.sync.time.ms")
    zookeeper_set_acl = _Setting[bool]("zookeeper.set.acl")
    zookeeper_max_in_flight_requests = _Setting[int]("zookeeper.max.in.flight.requests")
    broker_id_generation_enable = _Setting[bool]("broker.id.generation.enable")
    reserved_broker_max_id = _Setting[int]("reserved.broker.max.id")
    broker_rack = _Setting["str | None"]("broker.rack")
    message_max_bytes = _Setting[int]("message.max.bytes")
    num_network_threads = _Setting[int]("num.network.threads")
    num_io_threads = _Setting[int]("num.io.threads")
    background_threads = _Setting[int]("background.threads")
    num_recovery_threads_per_data_dir = _Setting[int]("num.recovery.threads.per.data.dir")
    num_replica_fetchers = _Setting[int]("num.replica.fetchers")
    queued_max_requests = _Setting[int]("queued.max.requests")
    queued_max_request_bytes = _Setting[int]("queued.max.request.bytes")
    request_timeout_ms = _Setting[int]("request.timeout.ms")
    delete_topic_enable = _Setting[bool]("delete.topic.enable")
    auto_create_topics_enable = _Setting[bool]("auto.create.topics.enable")
    num_partitions = _Setting[int]("num.partitions")
    default_replication_factor = _Setting[int]("default.replication.factor")
    min_insync_replicas = _Setting[int]("min.insync.replicas")
    unclean_leader_election_enable = _Setting[bool]("unclean.leader.election.enable")
    compression_type = _Setting[str]("compression.type")
    fetch_max_bytes = _Setting[int]("fetch.max.bytes")
    max_incremental_fetch_session_cache_slots = _Setting[int](
        "max.incremental.fetch.session.cache.slots")
    inter_broker_protocol_version = _Setting[str]("inter.broker.protocol.version")
    socket_send_buffer_bytes = _Setting[int]("socket.send.buffer.bytes")
    socket_receive_buffer_bytes = _Setting[int]("socket.receive.buffer.bytes")
    socket_request_max_bytes = _Setting[int]("socket.request.max.bytes")
    socket_listen_backlog_size = _Setting[int]("socket.listen.backlog.size")
    max_connections_per_ip = _Setting[int]("max.connections.per.ip")
    max_connections = _Setting[int]("max.connections")
    max_connection_creation_rate = _Setting[int]("max.connection.creation.rate")

    @property
    def max_connections_per_ip_overrides(self) -> dict[str, int]:
        return parse_connection_overrides(self._values["max.connections.per.ip.overrides"])
    connections_max_idle_ms = _Setting[int]("connections.max.idle.ms")
    log_segment_bytes = _Setting[int]("log.segment.bytes")
    log_roll_hours = _Setting[int]("log.roll.hours")
    log_roll_jitter_hours = _Setting[int]("log.roll.jitter.hours")
    log_retention_minutes = _Setting["int | None"]("log.retention.minutes")
    log_retention_hours = _Setting[int]("log.retention.hours")
    log_retention_bytes = _Setting[int]("log.retention.bytes")
    log_retention_check_interval_ms = _Setting[int]("log.retention.check.interval.ms")
    log_cleanup_policy = _Setting[list[str]]("log.cleanup.policy")
    log_cleaner_enable = _Setting[bool]("log.cleaner.enable")
    log_cleaner_threads = _Setting[int]("log.cleaner.threads")
    log_cleaner_dedupe_buffer_size = _Setting[int]("log.cleaner.dedupe.buffer.size")
    log_cleaner_io_buffer_size = _Setting[int]("log.cleaner.io.buffer.size")
    log_cleaner_io_max_bytes_per_second = _Setting[float](
        "log.cleaner.io.max.bytes.per.second")
    log_cleaner_backoff_ms = _Setting[int]("log.cleaner.backoff.ms")
    log_cleaner_min_cleanable_ratio = _Setting[float]("log.cleaner.min.cleanable.ratio")
    log_cleaner_delete_retention_ms = _Setting[int]("log.cleaner.delete.retention.ms")
    log_index_size_max_bytes = _Setting[int]("log.index.size.max.bytes")
    log_index_interval_bytes = _Setting[int]("log.index.interval.bytes")
    log_flush_interval_messages = _Setting[int]("log.flush.interval.messages")
    log_flush_scheduler_interval_ms = _Setting[int]("log.flush.scheduler.interval.ms")
    log_flush_offset_checkpoint_interval_ms = _Setting[int](
        "log.flush.offset.checkpoint.interval.ms")
    log_flush_start_offset_checkpoint_interval_ms = _Setting[int](
        "log.flush.start.offset.checkpoint.interval.ms")
    log_segment_delete_delay_ms = _Setting[int]("log.segment.delete.delay.ms")
    log_preallocate = _Setting[bool]("log.preallocate")
    log_message_timestamp_type = _Setting[str]("log.message.timestamp.type")
    log_message_timestamp_difference_max_ms = _Setting[int](
        "log.message.timestamp.difference.max.ms")
    log_message_downconversion_enable = _Setting[bool]("log.message.downconversion.enable")
    controller_socket_timeout_ms = _Setting[int]("controller.socket.timeout.ms")
    replica_lag_time_max_ms = _Setting[int]("replica.lag.time.max.ms")
    replica_socket_timeout_ms = _Setting[int]("replica.socket.timeout.ms")
    replica_socket_receive_buffer_bytes = _Setting[int]("replica.socket.receive.buffer.bytes")
    replica_fetch_max_bytes = _Setting[int]("replica.fetch.max.bytes")
    replica_fetch_wait_max_ms = _Setting[int]("replica.fetch.wait.max.ms")
    replica_fetch_min_bytes = _Setting[int]("replica.fetch.min.bytes")
    replica_fetch_response_max_bytes = _Setting[int]("replica.fetch.response.max.bytes")
    replica_fetch_backoff_ms = _Setting[int]("replica.fetch.backoff.ms")
    replica_high_watermark_checkpoint_interval_ms = _Setting[int](
        "replica.high.watermark.checkpoint.interval.ms")
    auto_leader_rebalance_enable = _Setting[bool]("auto.leader.rebalance.enable")
    leader_imbalance_per_broker_percentage = _Setting[int](
        "leader.imbalance.per.broker.percentage")
    leader_imbalance_check_interval_seconds = _Setting[int](
        "leader.imbalance.check.interval.seconds")
    controlled_shutdown_enable = _Setting[bool]("controlled.shutdown.enable")
    controlled_shutdown_max_retries = _Setting[int]("controlled.shutdown.max.retries")
    controlled_shutdown_retry_backoff_ms = _Setting[int]("controlled.shutdown.retry.backoff.ms")
    group_min_session_timeout_ms = _Setting[int]("group.min.session.timeout.ms")
    group_max_session_timeout_ms = _Setting[int]("group.max.session.timeout.ms")
    group_initial_rebalance_delay_ms = _Setting[int]("group.initial.rebalance.delay.ms")
    group_max_size = _Setting[int]("group.max.size")
    offset_metadata_max_bytes = _Setting[int]("offset.metadata.max.bytes")
    offsets_load_buffer_size = _Setting[int]("offsets.load.buffer.size")
    offsets_topic_replication_factor = _Setting[int]("offsets.topic.replication.factor")
    offsets_topic_num_partitions = _Setting[int]("offsets.topic.num.partitions")
    offsets_topic_segment_bytes = _Setting[int]("offsets.topic.segment.bytes")
    offsets_topic_compression_codec = _Setting[int]("offsets.topic.compression.codec")
    offsets_retention_minutes = _Setting[int]("offsets.retention.minutes")
    offsets_retention_check_interval_ms = _Setting[int]("offsets.retention.check.interval.ms")
    offsets_commit_timeout_ms = _Setting[int]("offsets.commit.timeout.ms")
    offsets_commit_required_acks = _Setting[int]("offsets.commit.required.acks")
    transactional_id_expiration_ms = _Setting[int]("transactional.id.expiration.ms")
    transaction_max_timeout_ms = _Setting[int]("transaction.max.timeout.ms")
    transaction_state_log_min_isr = _Setting[int]("transaction.state.log.min.isr")
    transaction_state_log_load_buffer_size = _Setting[int](
        "transaction.state.log.load.buffer.size")
    transaction_state_log_replication_factor = _Setting[int](
        "transaction.state.log.replication.factor")
    transaction_state_log_num_partitions = _Setting[int]("transaction.state.log.num.partitions")
    transaction_state_log_segment_bytes = _Setting[int]("transaction.state.log.segment.bytes")
    transaction_abort_timed_out_transaction_cleanup_interval_ms = _Setting[int](
        "transaction.abort.timed.out.transaction.cleanup.interval.ms")
    transaction_remove_expired_transaction_cleanup_interval_ms = _Setting[int](
        "transaction.remove.expired.transaction.cleanup.interval.ms")
    producer_id_expiration_ms = _Setting[int]("producer.id.expiration.ms")
    leader_replication_throttled_rate = _Setting[int]("leader.replication.throttled.rate")
    follower_replication_throttled_rate = _Setting[int]("follower.replication.throttled.rate")

    # -- topic configs -----------------------------------------------------------------

    def log_config(
        self,
        topic_overrides: Mapping[str, str] | None = None,
        *,
        ignore_unknown: bool = False,
    ) -> LogConfig:
        """The LogConfig of a topic: broker log defaults, then the topic's overrides.

        Raises ConfigError for an unknown topic config name (unless ``ignore_unknown``,
        for configs read from a metastore another Kafka wrote) or a bad value.
        """
        if not topic_overrides:
            return self._log_defaults
        overrides = dict(topic_overrides)
        if ignore_unknown:
            overrides = {k: v for k, v in overrides.items() if k in TOPIC_CONFIGS}
        normalized = validate_topic_configs(overrides)
        known = {k: v for k, v in normalized.items() if k in _LOG_CONFIG_NAMES}
        try:
            config = LogConfig.from_properties(known, base=self._log_defaults)
        except LogConfigError as exc:  # pragma: no cover - validated above
            raise ConfigError(str(exc)) from None
        _check_compaction_lags(config.min_compaction_lag_ms, config.max_compaction_lag_ms)
        return config

    def __repr__(self) -> str:
        mode = "standalone" if self._standalone else f"zookeeper={self.zookeeper_connect}"
        listeners = ",".join(str(e) for e in self._listeners)
        return f"BrokerConfig(broker_id={self._broker_id}, {mode}, listeners={listeners})"


# -- validation for CreateTopics / AlterConfigs ----------------------------------------


def check_topic_config_name(name: str) -> None:
    """Raise ConfigError for a name that is not a topic config (e.g. a DELETE op)."""
    if name not in TOPIC_CONFIGS:
        raise ConfigError(f"Unknown topic config name: {name}")


def validate_topic_configs(configs: Mapping[str, str | None]) -> dict[str, str]:
    """Check topic configs from CreateTopics/AlterConfigs; return normalized strings.

    Unknown name -> ConfigError("Unknown topic config name: x"); a null value, a wrong
    type or an out-of-range value -> ConfigError naming the key and value.
    """
    out: dict[str, str] = {}
    for name, raw in configs.items():
        check_topic_config_name(name)
        if raw is None:
            raise ConfigError(f"Null value not supported for topic configs: {name}")
        spec = TOPIC_CONFIGS[name]
        if name in _LOG_CONFIG_NAMES:
            try:
                parsed = LogConfig.from_properties({name: raw})
            except LogConfigError as exc:
                raise ConfigError(str(exc)) from None
            value = format_value(spec.type, getattr(parsed, name.replace(".", "_")))
            assert value is not None
            out[name] = value
        else:  # the throttled-replica lists
            items = _csv(raw)
            if not (items == ["*"] or all(_THROTTLED_RE.fullmatch(i) for i in items)):
                raise _bad(name, raw, "must be '*' or a list partitionId:brokerId,...")
            out[name] = ",".join(items)
    if "min.compaction.lag.ms" in out or "max.compaction.lag.ms" in out:
        defaults = LogConfig()
        _check_compaction_lags(
            int(out.get("min.compaction.lag.ms", defaults.min_compaction_lag_ms)),
            int(out.get("max.compaction.lag.ms", defaults.max_compaction_lag_ms)),
        )
    return out


def _check_compaction_lags(min_lag: int, max_lag: int) -> None:
    if min_lag > max_lag:
        raise ConfigError(
            f"conflict topic config setting min.compaction.lag.ms ({min_lag}) > "
            f"max.compaction.lag.ms ({max_lag})"
        )


def check_broker_dynamic_config_name(name: str, *, per_broker: bool = True) -> ConfigSpec:
    """The spec of a dynamically updatable broker config, else ConfigError saying why."""
    match = _LISTENER_CONFIG_RE.fullmatch(name)
    base = match[2] if match else name
    spec = BROKER_CONFIGS.get(base)
    if spec is None:
        raise ConfigError(f"Unknown broker config name: {name}")
    if spec.read_only:
        raise ConfigError(f"Cannot update these configs dynamically: {name}")
    if spec.dynamic == PER_LISTENER and not match:
        raise ConfigError(
            "These security configs can be dynamically updated only per-listener "
            f"using the listener prefix (listener.name.<listener>.{name}): {name}"
        )
    per_broker_only = spec.dynamic in (PER_BROKER, PER_LISTENER) or (
        match is not None and base not in _CLUSTER_LEVEL_LISTENER_CONFIGS
    )
    if not per_broker and per_broker_only:
        raise ConfigError(
            "Cannot update these configs at default cluster level, broker id must be "
            f"specified: {name}"
        )
    return spec


def validate_broker_dynamic_configs(
    configs: Mapping[str, str | None], *, per_broker: bool = True
) -> dict[str, str]:
    """Check dynamic broker configs (AlterConfigs on a broker or the cluster default).

    Only configs Kafka can update without a restart are allowed; ``per_broker`` False
    (resource name "") also refuses the per-broker-only ones (listeners, security).
    Returns normalized strings. Checks that involve other keys (listeners against
    advertised.listeners, ...) happen when ``BrokerConfig.with_dynamic`` applies them.
    """
    out: dict[str, str] = {}
    for name, raw in configs.items():
        spec = check_broker_dynamic_config_name(name, per_broker=per_broker)
        if raw is None:
            raise ConfigError(f"Null value not supported for broker configs: {name}")
        value = format_value(spec.type, parse_value(spec, raw))
        out[name] = value if value is not None else ""
    return out


# -- DescribeConfigs -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ConfigSynonym:
    name: str
    value: str | None
    source: int


@dataclass(frozen=True, slots=True)
class ConfigEntry:
    name: str
    value: str | None
    read_only: bool
    source: int
    is_sensitive: bool
    synonyms: tuple[ConfigSynonym, ...]
    config_type: int
    documentation: str | None


def describe_topic_configs(
    broker: BrokerConfig,
    overrides: Mapping[str, str],
    names: Collection[str] | None = None,
) -> list[ConfigEntry]:
    """DescribeConfigs entries of a topic: every topic config (or just ``names``).

    ``value`` is the effective value; synonyms run topic override, dynamic broker,
    dynamic default, static broker, default. Unlike Kafka, which drops broker synonyms
    ahead of the primary one (so a topic under ``log.retention.hours=24`` reports
    retention.ms from DEFAULT_CONFIG with no synonyms), every broker synonym that is set
    is listed, so the source is the one that really supplies the value.
    Unknown override names are ignored (as Kafka ignores them when describing).
    """
    known = {k: v for k, v in overrides.items() if k in TOPIC_CONFIGS}
    normalized = validate_topic_configs(known)
    config = broker.log_config(normalized)
    entries = []
    for spec in sorted(_TOPIC_SPEC_LIST, key=lambda s: s.name):
        if names is not None and spec.name not in names:
            continue
        if spec.name in _LOG_CONFIG_NAMES:
            value = format_value(spec.type, getattr(config, spec.name.replace(".", "_")))
        else:
            value = normalized.get(spec.name, spec.default)
        synonyms: list[ConfigSynonym] = []
        if spec.name in normalized:
            synonyms.append(
                ConfigSynonym(spec.name, value, ConfigSource.DYNAMIC_TOPIC_CONFIG)
            )
        synonyms += broker._synonyms([b for b, _ in spec.broker_synonyms], sensitive=False)
        source = synonyms[0].source if synonyms else ConfigSource.DEFAULT_CONFIG
        entries.append(ConfigEntry(
            spec.name, value, False, source, False, tuple(synonyms), spec.type,
            spec.doc,
        ))
    return entries


def describe_broker_configs(
    broker: BrokerConfig, names: Collection[str] | None = None
) -> list[ConfigEntry]:
    """DescribeConfigs entries of this broker (resource name = its id), Kafka's way.

    ``value`` is the key's own value (None when unset without a default, e.g.
    log.retention.ms); sensitive (password) values are None everywhere; ``read_only`` is
    True for configs that cannot change dynamically. Synonyms ahead of the described
    name are dropped, as Kafka does (describing log.retention.ms does not show
    log.retention.hours).
    """
    entries = []
    for name in sorted(BROKER_CONFIGS):
        if names is not None and name not in names:
            continue
        entries.append(_broker_entry(broker, name, broker.get(name), per_broker=True))
    return entries


def describe_broker_default_configs(
    broker: BrokerConfig, names: Collection[str] | None = None
) -> list[ConfigEntry]:
    """DescribeConfigs entries of the cluster default resource (broker resource name "").

    Lists only the dynamic cluster-default configs that are set, as Kafka does.
    """
    entries = []
    for name, raw in sorted(broker.dynamic_default_configs.items()):
        if names is not None and name not in names:
            continue
        entries.append(_broker_entry(broker, name, raw, per_broker=False))
    return entries


def _broker_entry(broker: BrokerConfig, name: str, value: Any, *, per_broker: bool
                  ) -> ConfigEntry:
    match = _LISTENER_CONFIG_RE.fullmatch(name)
    spec = BROKER_CONFIGS.get(match[2] if match else name)
    kind = spec.type if spec else ConfigType.UNKNOWN
    # Like Kafka: a config of unknown type might be a secret, so it is hidden.
    sensitive = kind in (ConfigType.PASSWORD, ConfigType.UNKNOWN)
    text = None if sensitive else (value if isinstance(value, str) else format_value(kind, value))
    synonyms = broker._synonyms(
        broker_synonyms(name), sensitive,
        skip=None if per_broker else ConfigSource.DYNAMIC_BROKER_CONFIG,
    )
    while synonyms and synonyms[0].name != name:
        synonyms.pop(0)
    source = synonyms[0].source if synonyms else ConfigSource.DEFAULT_CONFIG
    return ConfigEntry(
        name, text, spec is None or spec.read_only, source, sensitive, tuple(synonyms),
        kind, spec.doc if spec else None,
    )
