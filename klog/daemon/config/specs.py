"""The config definitions: every broker and topic config klog knows, as Kafka 3.x names them.

This module owns ``ConfigSpec`` / ``BROKER_CONFIGS`` (type, default, documentation, dynamic
update mode, validator of each server.properties name), the standalone defaults,
per-listener overrides, ``TopicConfigSpec`` / ``TOPIC_CONFIGS`` (topic configs and their
broker synonyms) and ``broker_synonyms``. Plain data: no parsing of a config happens here.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from klog.daemon.config.values import (
    _HOUR,
    _MINUTE,
    CLUSTER_WIDE,
    COMPRESSION_TYPES,
    INT_MAX,
    LONG_MAX,
    PER_BROKER,
    PER_LISTENER,
    READ_ONLY,
    SECURITY_PROTOCOLS,
    ConfigSpec,
    ConfigType,
)
from klog.storage.config import LogConfig

# -- config definitions ----------------------------------------------------------------


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


#: The replica.selector.class values klog has (KIP-392's one selector Kafka ships).
RACK_AWARE_REPLICA_SELECTOR = "org.apache.kafka.common.replica.RackAwareReplicaSelector"
REPLICA_SELECTOR_CLASSES = (RACK_AWARE_REPLICA_SELECTOR,)

#: The authorizer.class.name values that turn on klog's ACL authorizer
#: (klog/daemon/security/authorizer.py): Kafka's ZooKeeper-mode class and its KRaft-era one.
ACL_AUTHORIZER_CLASSES = (
    "kafka.security.authorizer.AclAuthorizer",
    "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
)

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
    _spec("authorizer.class.name", _S, "",
          "Authorizer: kafka.security.authorizer.AclAuthorizer (or its synonym "
          "org.apache.kafka.metadata.authorizer.StandardAuthorizer) turns on klog's ACL "
          "authorizer; empty: none. Any other class is refused."),
    _spec("super.users", _S, "",
          "Principals (User:name, separated by ';') the authorizer allows everything."),
    _spec("allow.everyone.if.no.acl.found", _B, "false",
          "With an authorizer: allow a resource that has no ACL at all to everyone."),
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
    _spec("replica.selector.class", _S, None,
          "Picks the replica a consumer fetches from (KIP-392): "
          "org.apache.kafka.common.replica.RackAwareReplicaSelector sends a consumer with a "
          "client.rack to a replica in its rack; unset, consumers fetch from leaders."),
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
    # Client quotas (klog/daemon/quotas.py): the sampled window of the client rates.
    _spec("quota.window.num", _I, "11", "Samples kept of each client quota's rate.",
          minimum=1),
    _spec("quota.window.size.seconds", _I, "1", "Length of each client quota sample.",
          minimum=1),
    _spec("controller.quota.window.num", _I, "11",
          "Samples kept of each controller_mutation_rate quota's rate.", minimum=1),
    _spec("controller.quota.window.size.seconds", _I, "1",
          "Length of each controller_mutation_rate quota sample.", minimum=1),
    _spec("client.quota.callback.class", _C, None,
          "A custom client quota callback; klog has none (start-up refuses a value)."),
    _spec("log.dir.failure.timeout.ms", _L, "30000",
          "How long a broker whose log dir failed tries to tell the controller before it "
          "shuts down.", minimum=1),
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
    _spec("transaction.partition.verification.enable", _B, "true",
          "KIP-890: a partition leader appends a producer's first transactional batch only "
          "once the transaction coordinator confirms the partition is in its ongoing "
          "transaction (no hanging transaction from a late write).", dynamic=_CW),
    # Metrics. Kafka's own metrics library's settings are accepted and reported at start-up
    # as not implemented (klog/daemon/metrics: UNIMPLEMENTED_CONFIGS); klog serves its
    # metrics in Prometheus' format on metrics.http.listener.
    _spec("metrics.http.listener", _S, None,
          "klog only: HOST:PORT where GET /metrics serves the broker's metrics in "
          "Prometheus' text format, named as the JMX exporter's Kafka rules name them; "
          "unset (the default): no metrics are kept or served."),
    _spec("metric.reporters", _LI, "", "Metrics reporter classes (not implemented).",
          dynamic=_CW),
    _spec("metrics.num.samples", _I, "2", "Samples kept per metric (not implemented).",
          minimum=1),
    _spec("metrics.sample.window.ms", _L, "30000", "Metric sample window (not implemented).",
          minimum=1),
    _spec("metrics.recording.level", _S, "INFO",
          "Highest metric recording level (not implemented).",
          choices=("INFO", "DEBUG", "TRACE")),
    # Security: TLS (klog/daemon/security/tls.py) and SASL (klog/daemon/security/sasl.py).
    # Each may also be set per listener as listener.name.<listener>.<name>
    # (LISTENER_SECURITY_CONFIGS); sasl.jaas.config per listener and mechanism.
    _spec("ssl.keystore.type", _S, "JKS",
          "Key store format; klog reads PEM.", dynamic=_PL),
    _spec("ssl.keystore.location", _S, None, "Key store file.", dynamic=_PL),
    _spec("ssl.keystore.password", _P, None, "Key store password.", dynamic=_PL),
    _spec("ssl.keystore.key", _P, None, "Private key in PEM, inline (ssl.keystore.type=PEM).",
          dynamic=_PL),
    _spec("ssl.keystore.certificate.chain", _P, None,
          "Certificate chain in PEM, inline (ssl.keystore.type=PEM).", dynamic=_PL),
    _spec("ssl.key.password", _P, None, "Private key password.", dynamic=_PL),
    _spec("ssl.truststore.type", _S, "JKS", "Trust store format; klog reads PEM.",
          dynamic=_PL),
    _spec("ssl.truststore.location", _S, None, "Trust store file.", dynamic=_PL),
    _spec("ssl.truststore.password", _P, None, "Trust store password.", dynamic=_PL),
    _spec("ssl.truststore.certificates", _P, None,
          "Trusted certificates in PEM, inline (ssl.truststore.type=PEM).", dynamic=_PL),
    _spec("ssl.client.auth", _S, "none", "Client authentication: required, requested, none.",
          choices=("required", "requested", "none"), ignore_case=True, dynamic=_PB),
    _spec("ssl.protocol", _S, "TLSv1.3", "TLS protocol of the SSL context.", dynamic=_PB),
    _spec("ssl.enabled.protocols", _LI, "TLSv1.2,TLSv1.3", "Enabled TLS versions.",
          dynamic=_PB),
    _spec("ssl.cipher.suites", _LI, "", "Enabled cipher suites; empty: the defaults.",
          dynamic=_PB),
    _spec("ssl.endpoint.identification.algorithm", _S, "https",
          "Host name verification of the peer (client side; brokers as clients).",
          dynamic=_PB),
    _spec("ssl.principal.mapping.rules", _S, "DEFAULT",
          "Rules mapping a client certificate's distinguished name to a principal name.",
          dynamic=_PB),
    _spec("ssl.allow.dn.changes", _B, "false",
          "Whether a dynamically reloaded key store's certificate may change its "
          "distinguished name.", dynamic=READ_ONLY),
    _spec("ssl.allow.san.changes", _B, "false",
          "Whether a dynamically reloaded key store's certificate may drop subject "
          "alternative names.", dynamic=READ_ONLY),
    _spec("sasl.enabled.mechanisms", _LI, "GSSAPI", "Enabled SASL mechanisms.", dynamic=_PB),
    _spec("sasl.mechanism.inter.broker.protocol", _S, "GSSAPI",
          "SASL mechanism between brokers.", dynamic=_PB),
    _spec("sasl.jaas.config", _P, None, "JAAS login configuration.", dynamic=_PB),
    _spec("sasl.server.max.receive.size", _I, "524288",
          "Largest request before SASL authentication completes.", minimum=1),
    _spec("connections.max.reauth.ms", _L, "0",
          "Session lifetime of a SASL authentication; 0: no re-authentication.", minimum=0),
    _spec("password.encoder.secret", _P, None,
          "Secret that encodes dynamically configured passwords."),
    _spec("delegation.token.secret.key", _P, None, "Secret of delegation tokens."),
)


# -- Kafka 3.x broker configs klog accepts but does not implement ----------------------
# (honest configuration, issue 23). Kept apart from _BROKER_SPEC_LIST so that adding or
# implementing a config elsewhere merges cleanly: a name defined in _BROKER_SPEC_LIST
# wins over a row here, and is then no longer counted as unimplemented.
#
# The rows are every broker config name of Kafka 3.9 (the last 3.x, which still has
# ZooKeeper mode; tests/daemon/data/kafka_3_9_broker_configs.txt lists them with their
# source) that _BROKER_SPEC_LIST lacks: name, type, Kafka's default, importance
# (H/M/L), Kafka's dynamic update mode, and Kafka's range or choices, so that
# server.properties, --override and (Incremental)AlterConfigs accept and validate them
# as Kafka does. KRaft-only names (process.roles, controller.quorum.*, ...) are here too:
# Kafka's ZooKeeper-mode broker knows and ignores them, but see MUST_NOT_BE_IGNORED.

_RO = READ_ONLY
_GROUP_ASSIGNORS = ("org.apache.kafka.coordinator.group.assignor.UniformAssignor,"
                    "org.apache.kafka.coordinator.group.assignor.RangeAssignor")
_RLMM_CLASS = ("org.apache.kafka.server.log.remote.metadata.storage."
               "TopicBasedRemoteLogMetadataManager")
_IMPORTANCE = {"H": "high", "M": "medium", "L": "low"}


def _k(name: str, type_: ConfigType, default: str | None, importance: str, dynamic: str,
       **kw: Any) -> ConfigSpec:
    doc = (f"Kafka's {name} ({_IMPORTANCE[importance]} importance); accepted, not "
           "implemented by klog.")
    return ConfigSpec(name, type_, default, doc, dynamic=dynamic, **kw)


_KAFKA_UNIMPLEMENTED_SPEC_LIST: tuple[ConfigSpec, ...] = (
    _k("alter.log.dirs.replication.quota.window.num", _I, "11", "L", _RO, minimum=1),
    _k("alter.log.dirs.replication.quota.window.size.seconds", _I, "1", "L", _RO, minimum=1),
    _k("auto.include.jmx.reporter", _B, "true", "L", _RO),
    _k("broker.heartbeat.interval.ms", _I, "2000", "M", _RO),
    _k("broker.session.timeout.ms", _I, "9000", "M", _RO),
    _k("client.quota.callback.class", _C, None, "L", _RO),
    _k("compression.gzip.level", _I, "-1", "M", _CW, minimum=-1, maximum=9),
    _k("compression.lz4.level", _I, "9", "M", _CW, minimum=1, maximum=17),
    _k("compression.zstd.level", _I, "3", "M", _CW, minimum=-131072, maximum=22),
    _k("controller.listener.names", _S, None, "H", _RO),
    _k("controller.quorum.append.linger.ms", _I, "25", "M", _RO),
    _k("controller.quorum.bootstrap.servers", _LI, "", "H", _RO),
    _k("controller.quorum.election.backoff.max.ms", _I, "1000", "H", _RO),
    _k("controller.quorum.election.timeout.ms", _I, "1000", "H", _RO),
    _k("controller.quorum.fetch.timeout.ms", _I, "2000", "H", _RO),
    _k("controller.quorum.request.timeout.ms", _I, "2000", "M", _RO),
    _k("controller.quorum.retry.backoff.ms", _I, "20", "L", _RO),
    _k("controller.quorum.voters", _LI, "", "H", _RO),
    _k("controller.quota.window.num", _I, "11", "L", _RO, minimum=1),
    _k("controller.quota.window.size.seconds", _I, "1", "L", _RO, minimum=1),
    _k("delegation.token.expiry.check.interval.ms", _L, "3600000", "L", _RO, minimum=1),
    _k("delegation.token.expiry.time.ms", _L, "86400000", "M", _RO, minimum=1),
    _k("delegation.token.master.key", _P, None, "M", _RO),
    _k("delegation.token.max.lifetime.ms", _L, "604800000", "M", _RO, minimum=1),
    _k("early.start.listeners", _S, None, "H", _RO),
    _k("eligible.leader.replicas.enable", _B, "false", "H", _RO),
    _k("group.consumer.assignors", _LI, _GROUP_ASSIGNORS, "M", _RO),
    _k("group.consumer.heartbeat.interval.ms", _I, "5000", "M", _RO, minimum=1),
    _k("group.consumer.max.heartbeat.interval.ms", _I, "15000", "M", _RO, minimum=1),
    _k("group.consumer.max.session.timeout.ms", _I, "60000", "M", _RO, minimum=1),
    _k("group.consumer.max.size", _I, "2147483647", "M", _RO, minimum=1),
    _k("group.consumer.min.heartbeat.interval.ms", _I, "5000", "M", _RO, minimum=1),
    _k("group.consumer.min.session.timeout.ms", _I, "45000", "M", _RO, minimum=1),
    _k("group.consumer.session.timeout.ms", _I, "45000", "M", _RO, minimum=1),
    _k("group.coordinator.append.linger.ms", _I, "10", "M", _RO, minimum=0),
    _k("group.coordinator.rebalance.protocols",
       _LI, "classic", "M", _RO, choices=("consumer", "classic", "share", "unknown",)),
    _k("group.coordinator.threads", _I, "1", "M", _RO, minimum=1),
    _k("group.share.delivery.count.limit", _I, "5", "M", _RO, minimum=2, maximum=10),
    _k("group.share.heartbeat.interval.ms", _I, "5000", "M", _RO, minimum=1),
    _k("group.share.max.groups", _SH, "10", "M", _RO, minimum=1, maximum=100),
    _k("group.share.max.heartbeat.interval.ms", _I, "15000", "M", _RO, minimum=1),
    _k("group.share.max.record.lock.duration.ms",
       _I, "60000", "M", _RO, minimum=30000, maximum=3600000),
    _k("group.share.max.session.timeout.ms", _I, "60000", "M", _RO, minimum=1),
    _k("group.share.max.size", _SH, "200", "M", _RO, minimum=10, maximum=1000),
    _k("group.share.min.heartbeat.interval.ms", _I, "5000", "M", _RO, minimum=1),
    _k("group.share.min.record.lock.duration.ms",
       _I, "15000", "M", _RO, minimum=1000, maximum=30000),
    _k("group.share.min.session.timeout.ms", _I, "45000", "M", _RO, minimum=1),
    _k("group.share.partition.max.record.locks", _I, "200", "M", _RO, minimum=100, maximum=10000),
    _k("group.share.record.lock.duration.ms", _I, "30000", "M", _RO, minimum=1000, maximum=60000),
    _k("group.share.session.timeout.ms", _I, "45000", "M", _RO, minimum=1),
    _k("initial.broker.registration.timeout.ms", _I, "60000", "M", _RO),
    _k("kafka.metrics.polling.interval.secs", _I, "10", "L", _RO, minimum=1),
    _k("kafka.metrics.reporters", _LI, "", "L", _RO),
    _k("log.local.retention.bytes", _L, "-2", "M", _CW, minimum=-2),
    _k("log.local.retention.ms", _L, "-2", "M", _CW, minimum=-2),
    _k("max.request.partition.size.limit", _I, "2000", "M", _RO, minimum=1),
    _k("metadata.log.dir", _S, None, "H", _RO),
    _k("metadata.log.max.record.bytes.between.snapshots", _L, "20971520", "H", _RO, minimum=1),
    _k("metadata.log.max.snapshot.interval.ms", _L, "3600000", "H", _RO, minimum=0),
    _k("metadata.log.segment.bytes", _I, "1073741824", "H", _RO, minimum=12),
    _k("metadata.log.segment.ms", _L, "604800000", "H", _RO),
    _k("metadata.max.idle.interval.ms", _I, "500", "L", _RO, minimum=0),
    _k("metadata.max.retention.bytes", _L, "104857600", "H", _RO),
    _k("metadata.max.retention.ms", _L, "604800000", "H", _RO),
    _k("node.id", _I, "-1", "H", _RO),
    _k("password.encoder.cipher.algorithm", _S, "AES/CBC/PKCS5Padding", "L", _RO),
    _k("password.encoder.iterations", _I, "4096", "L", _RO, minimum=1024),
    _k("password.encoder.key.length", _I, "128", "L", _RO, minimum=8),
    _k("password.encoder.keyfactory.algorithm", _S, None, "L", _RO),
    _k("password.encoder.old.secret", _P, None, "M", _RO),
    _k("principal.builder.class",
       _C, "org.apache.kafka.common.security.authenticator.DefaultKafkaPrincipalBuilder", "M", _PB),
    _k("process.roles", _LI, "", "H", _RO, choices=("broker", "controller",)),
    _k("quota.window.num", _I, "11", "L", _RO, minimum=1),
    _k("quota.window.size.seconds", _I, "1", "L", _RO, minimum=1),
    _k("remote.fetch.max.wait.ms", _I, "500", "M", _CW, minimum=1),
    _k("remote.log.index.file.cache.total.size.bytes", _L, "1073741824", "L", _CW, minimum=1),
    _k("remote.log.manager.copier.thread.pool.size", _I, "-1", "M", _RO),
    _k("remote.log.manager.copy.max.bytes.per.second",
       _L, "9223372036854775807", "M", _CW, minimum=1),
    _k("remote.log.manager.copy.quota.window.num", _I, "11", "M", _RO, minimum=1),
    _k("remote.log.manager.copy.quota.window.size.seconds", _I, "1", "M", _RO, minimum=1),
    _k("remote.log.manager.expiration.thread.pool.size", _I, "-1", "M", _RO),
    _k("remote.log.manager.fetch.max.bytes.per.second",
       _L, "9223372036854775807", "M", _CW, minimum=1),
    _k("remote.log.manager.fetch.quota.window.num", _I, "11", "M", _RO, minimum=1),
    _k("remote.log.manager.fetch.quota.window.size.seconds", _I, "1", "M", _RO, minimum=1),
    _k("remote.log.manager.task.interval.ms", _L, "30000", "L", _RO, minimum=1),
    _k("remote.log.manager.thread.pool.size", _I, "10", "M", _RO, minimum=1),
    _k("remote.log.metadata.custom.metadata.max.bytes", _I, "128", "L", _RO, minimum=0),
    _k("remote.log.metadata.manager.class.name", _S, _RLMM_CLASS, "M", _RO),
    _k("remote.log.metadata.manager.class.path", _S, None, "M", _RO),
    _k("remote.log.metadata.manager.impl.prefix", _S, "rlmm.config.", "M", _RO),
    _k("remote.log.metadata.manager.listener.name", _S, None, "M", _RO),
    _k("remote.log.reader.max.pending.tasks", _I, "100", "M", _RO, minimum=1),
    _k("remote.log.reader.threads", _I, "10", "M", _RO, minimum=1),
    _k("remote.log.storage.manager.class.name", _S, None, "M", _RO),
    _k("remote.log.storage.manager.class.path", _S, None, "M", _RO),
    _k("remote.log.storage.manager.impl.prefix", _S, "rsm.config.", "M", _RO),
    _k("remote.log.storage.system.enable", _B, "false", "M", _RO),
    _k("replication.quota.window.num", _I, "11", "L", _RO, minimum=1),
    _k("replication.quota.window.size.seconds", _I, "1", "L", _RO, minimum=1),
    _k("sasl.client.callback.handler.class", _C, None, "M", _RO),
    _k("sasl.kerberos.kinit.cmd", _S, "/usr/bin/kinit", "M", _PB),
    _k("sasl.kerberos.min.time.before.relogin", _L, "60000", "M", _PB),
    _k("sasl.kerberos.principal.to.local.rules", _LI, "DEFAULT", "M", _PB),
    _k("sasl.kerberos.service.name", _S, None, "M", _PB),
    _k("sasl.kerberos.ticket.renew.jitter", _D, "0.05", "M", _PB),
    _k("sasl.kerberos.ticket.renew.window.factor", _D, "0.8", "M", _PB),
    _k("sasl.login.callback.handler.class", _C, None, "M", _RO),
    _k("sasl.login.class", _C, None, "M", _RO),
    _k("sasl.login.connect.timeout.ms", _I, None, "L", _RO),
    _k("sasl.login.read.timeout.ms", _I, None, "L", _RO),
    _k("sasl.login.refresh.buffer.seconds", _SH, "300", "M", _PB),
    _k("sasl.login.refresh.min.period.seconds", _SH, "60", "M", _PB),
    _k("sasl.login.refresh.window.factor", _D, "0.8", "M", _PB),
    _k("sasl.login.refresh.window.jitter", _D, "0.05", "M", _PB),
    _k("sasl.login.retry.backoff.max.ms", _L, "10000", "L", _RO),
    _k("sasl.login.retry.backoff.ms", _L, "100", "L", _RO),
    _k("sasl.mechanism.controller.protocol", _S, "GSSAPI", "H", _RO),
    _k("sasl.oauthbearer.clock.skew.seconds", _I, "30", "L", _RO),
    _k("sasl.oauthbearer.expected.audience", _LI, None, "L", _RO),
    _k("sasl.oauthbearer.expected.issuer", _S, None, "L", _RO),
    _k("sasl.oauthbearer.jwks.endpoint.refresh.ms", _L, "3600000", "L", _RO),
    _k("sasl.oauthbearer.jwks.endpoint.retry.backoff.max.ms", _L, "10000", "L", _RO),
    _k("sasl.oauthbearer.jwks.endpoint.retry.backoff.ms", _L, "100", "L", _RO),
    _k("sasl.oauthbearer.jwks.endpoint.url", _S, None, "M", _RO),
    _k("sasl.oauthbearer.scope.claim.name", _S, "scope", "L", _RO),
    _k("sasl.oauthbearer.sub.claim.name", _S, "sub", "L", _RO),
    _k("sasl.oauthbearer.token.endpoint.url", _S, None, "M", _RO),
    _k("sasl.server.callback.handler.class", _C, None, "M", _RO),
    _k("security.providers", _S, None, "L", _RO),
    _k("socket.connection.setup.timeout.max.ms", _L, "30000", "M", _RO),
    _k("socket.connection.setup.timeout.ms", _L, "10000", "M", _RO),
    _k("ssl.allow.dn.changes", _B, "false", "L", _RO),
    _k("ssl.allow.san.changes", _B, "false", "L", _RO),
    _k("ssl.engine.factory.class", _C, None, "L", _PB),
    _k("ssl.keymanager.algorithm", _S, "SunX509", "M", _PB),
    _k("ssl.provider", _S, None, "M", _PB),
    _k("ssl.secure.random.implementation", _S, None, "L", _PB),
    _k("ssl.trustmanager.algorithm", _S, "PKIX", "M", _PB),
    _k("telemetry.max.bytes", _I, "1048576", "L", _RO, minimum=1),
    _k("zookeeper.clientCnxnSocket", _S, None, "M", _RO),
    _k("zookeeper.metadata.migration.enable", _B, "false", "H", _RO),
    _k("zookeeper.ssl.cipher.suites", _LI, None, "L", _RO),
    _k("zookeeper.ssl.client.enable", _B, "false", "M", _RO),
    _k("zookeeper.ssl.crl.enable", _B, "false", "L", _RO),
    _k("zookeeper.ssl.enabled.protocols", _LI, None, "L", _RO),
    _k("zookeeper.ssl.endpoint.identification.algorithm", _S, "HTTPS", "L", _RO),
    _k("zookeeper.ssl.keystore.location", _S, None, "M", _RO),
    _k("zookeeper.ssl.keystore.password", _P, None, "M", _RO),
    _k("zookeeper.ssl.keystore.type", _S, None, "M", _RO),
    _k("zookeeper.ssl.ocsp.enable", _B, "false", "L", _RO),
    _k("zookeeper.ssl.protocol", _S, "TLSv1.2", "L", _RO),
    _k("zookeeper.ssl.truststore.location", _S, None, "M", _RO),
    _k("zookeeper.ssl.truststore.password", _P, None, "M", _RO),
    _k("zookeeper.ssl.truststore.type", _S, None, "M", _RO),
)

#: Names in _BROKER_SPEC_LIST that nothing in klog reads and acts on (checked by grep
#: for each name and its BrokerConfig attribute): they are validated and described, and
#: listed at start-up as "accepted, not implemented". Remove a name when it is implemented.
_UNIMPLEMENTED_KNOWN_NAMES = frozenset({
    "alter.config.policy.class.name", "create.topic.policy.class.name",
    "background.threads", "num.io.threads", "num.network.threads",
    "control.plane.listener.name", "delegation.token.secret.key",
    "delete.records.purgatory.purge.interval.requests", "inter.broker.protocol.version",
    "log.flush.start.offset.checkpoint.interval.ms",
    # log.message.format.version: ignored, as Kafka 3.x ignores it from
    # inter.broker.protocol.version 3.0 on (klog whatever that version says).
    "log.message.format.version", "log.preallocate",
    "metric.reporters", "metrics.num.samples",
    "metrics.recording.level", "metrics.sample.window.ms",
    "num.replica.alter.log.dirs.threads", "password.encoder.secret",
    "queued.max.request.bytes",
    "replica.high.watermark.checkpoint.interval.ms",
    "replica.socket.receive.buffer.bytes",
    "zookeeper.max.in.flight.requests", "zookeeper.set.acl", "zookeeper.sync.time.ms",
})

#: Unimplemented names whose being ignored would weaken security or silently run another
#: mode than the one asked for: set to anything but Kafka's default, the broker refuses
#: to start (and AlterConfigs refuses them) instead of ignoring them. Name -> what
#: ignoring it would do.
MUST_NOT_BE_IGNORED: Mapping[str, str] = MappingProxyType({
    "zookeeper.set.acl": "leave klog's znodes writable by every ZooKeeper client",
    "zookeeper.ssl.client.enable": "talk to ZooKeeper without TLS",
    "create.topic.policy.class.name": "create topics the policy would refuse",
    "alter.config.policy.class.name": "alter configs the policy would refuse",
    "principal.builder.class": "give clients other principals than the builder would, "
                               "so ACLs would match the wrong principals",
    "sasl.server.callback.handler.class": "authenticate clients without that handler",
    "security.providers": "run without those security providers",
    "ssl.engine.factory.class": "use klog's TLS engine instead of that one",
    "sasl.oauthbearer.jwks.endpoint.url": "accept unsigned OAUTHBEARER tokens (klog has "
                                          "only Kafka's unsecured validator)",
    "sasl.oauthbearer.expected.audience": "accept OAUTHBEARER tokens for any audience",
    "sasl.oauthbearer.expected.issuer": "accept OAUTHBEARER tokens of any issuer",
    "password.encoder.secret": "store dynamic passwords unencoded",
    "process.roles": "run in ZooKeeper mode where KRaft mode was asked for (klog has no "
                     "KRaft mode)",
    "controller.listener.names": "run without the controller listeners (Kafka too refuses "
                                 "them when not in KRaft mode)",
    "zookeeper.metadata.migration.enable": "skip a ZooKeeper-to-KRaft migration klog "
                                           "cannot do",
})

BROKER_CONFIGS: Mapping[str, ConfigSpec] = MappingProxyType(
    {s.name: s for s in (*_KAFKA_UNIMPLEMENTED_SPEC_LIST, *_BROKER_SPEC_LIST)}
)

#: Every broker config klog accepts but does not implement (see the section above).
UNIMPLEMENTED_BROKER_CONFIGS = frozenset(
    {s.name for s in _KAFKA_UNIMPLEMENTED_SPEC_LIST} - {s.name for s in _BROKER_SPEC_LIST}
) | _UNIMPLEMENTED_KNOWN_NAMES

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
#: Security configs a listener may override (``listener.name.<listener>.<config>``), as
#: Kafka's ChannelBuilders read them; sasl.jaas.config also per listener and mechanism
#: (``listener.name.<listener>.<mechanism>.sasl.jaas.config``).
LISTENER_SECURITY_CONFIGS = (
    *(spec.name for spec in _BROKER_SPEC_LIST
      if spec.name.startswith(("ssl.", "sasl."))
      and spec.name != "sasl.mechanism.inter.broker.protocol"),
    "connections.max.reauth.ms",
)


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
