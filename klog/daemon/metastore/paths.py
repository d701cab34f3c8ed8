"""Kafka's ZooKeeper layout: znode paths and their JSON payloads, as Kafka 3.x writes them.

The same layout serves both metadata stores, so a klog cluster's ZooKeeper tree reads like
a Kafka cluster's and standalone mode is the same tree on local disk. Facts (paths, keys,
versions) follow Apache Kafka's ZkData / KafkaZkClient (3.x, ZooKeeper mode):

    /cluster/id                                  {"version":"1","id":"<cluster id>"}
    /controller  (ephemeral)                     {"version":2,"brokerid":1,"timestamp":"<ms>",
                                                  "kraftControllerEpoch":-1}
    /controller_epoch                            5   (plain decimal text)
    /brokers/ids/<id>  (ephemeral)               broker registration, version 5
    /brokers/topics/<t>                          replica assignment, version 3 (+ topic_id)
    /brokers/topics/<t>/partitions/<p>/state     {"version":1,"leader":..,"leader_epoch":..,
                                                  "isr":[..],"controller_epoch":..}
    /brokers/seqid                               empty; its version is the broker sequence id
    /config/<type>/<name>                        {"version":1,"config":{"k":"v"}}
    /config/changes/config_change_<seq>          {"version":2,"entity_path":"topics/t"}
    /admin/delete_topics/<t>                     empty
    /admin/reassign_partitions                   {"version":1,"partitions":[{"topic","partition",
                                                  "replicas"}]}
    /admin/preferred_replica_election            {"version":1,"partitions":[{"topic","partition"}]}
    /isr_change_notification/isr_change_<seq>    {"version":1,"partitions":[{"topic","partition"}]}
    /log_dir_event_notification/log_dir_event_<seq>  {"version":1,"broker":..,"event":1}
    /latest_producer_id_block                    {"version":1,"broker":..,"block_start":"..",
                                                  "block_end":".."}

Decoders accept what Kafka 2.x and 3.x brokers and tools write (older payload versions,
optional fields, unknown extra keys) and raise ``ZNodeDataError`` with the reason for
anything else. Encoders write the 3.x form.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
import secrets
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeGuard, TypeVar

from klog.daemon.metastore.base import (
    InvalidPathError,
    MetadataStore,
    NoNodeError,
    validate_path,
)

# --- paths ----------------------------------------------------------------------------------

CLUSTER = "/cluster"
CLUSTER_ID = "/cluster/id"
CONTROLLER = "/controller"
CONTROLLER_EPOCH = "/controller_epoch"
BROKERS = "/brokers"
BROKER_IDS = "/brokers/ids"
BROKER_TOPICS = "/brokers/topics"
BROKER_SEQID = "/brokers/seqid"
CONFIG = "/config"
CONFIG_CHANGES = "/config/changes"
CONFIG_CHANGE_PREFIX = "config_change_"
ADMIN = "/admin"
DELETE_TOPICS = "/admin/delete_topics"
REASSIGN_PARTITIONS = "/admin/reassign_partitions"
PREFERRED_REPLICA_ELECTION = "/admin/preferred_replica_election"
ISR_CHANGE_NOTIFICATION = "/isr_change_notification"
ISR_CHANGE_PREFIX = "isr_change_"
LOG_DIR_EVENT_NOTIFICATION = "/log_dir_event_notification"
LOG_DIR_EVENT_PREFIX = "log_dir_event_"
LATEST_PRODUCER_ID_BLOCK = "/latest_producer_id_block"
CONSUMERS = "/consumers"  # the old consumers' path; Kafka still creates it
FEATURE = "/feature"

# Kafka's ConfigType.ALL: the entity types with a /config/<type> node.
CONFIG_TYPE_TOPIC = "topics"
CONFIG_TYPE_CLIENT = "clients"
CONFIG_TYPE_USER = "users"
CONFIG_TYPE_BROKER = "brokers"
CONFIG_TYPE_IP = "ips"
CONFIG_TYPES = (
    CONFIG_TYPE_TOPIC,
    CONFIG_TYPE_CLIENT,
    CONFIG_TYPE_USER,
    CONFIG_TYPE_BROKER,
    CONFIG_TYPE_IP,
)
DEFAULT_ENTITY = "<default>"  # /config/brokers/<default>: the cluster-wide broker configs


def _name(kind: str, value: str) -> str:
    """A single znode name: no '/', not '.' or '..', only characters ZooKeeper accepts."""
    if not isinstance(value, str) or not value or "/" in value:
        raise InvalidPathError(f"{kind} {value!r} cannot be a znode name")
    validate_path("/" + value)
    return value


def _id(kind: str, value: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{kind} must be an int, not {type(value).__name__}")
    return value


def broker_path(broker_id: int) -> str:
    return f"{BROKER_IDS}/{_id('broker id', broker_id)}"


def topic_path(topic: str) -> str:
    return f"{BROKER_TOPICS}/{_name('topic', topic)}"


def topic_partitions_path(topic: str) -> str:
    return f"{topic_path(topic)}/partitions"


def partition_path(topic: str, partition: int) -> str:
    return f"{topic_partitions_path(topic)}/{_id('partition', partition)}"


def partition_state_path(topic: str, partition: int) -> str:
    return f"{partition_path(topic, partition)}/state"


def config_entity_type_path(entity_type: str) -> str:
    return f"{CONFIG}/{_name('config entity type', entity_type)}"


def config_path(entity_type: str, entity_name: str) -> str:
    return f"{config_entity_type_path(entity_type)}/{_name('config entity', entity_name)}"


def topic_config_path(topic: str) -> str:
    return config_path(CONFIG_TYPE_TOPIC, _name("topic", topic))


def broker_config_path(broker_id: int | None) -> str:
    """/config/brokers/<id>, or /config/brokers/<default> for None."""
    name = DEFAULT_ENTITY if broker_id is None else str(_id("broker id", broker_id))
    return config_path(CONFIG_TYPE_BROKER, name)


def config_change_path() -> str:
    """The prefix to create sequentially: /config/changes/config_change_<10 digits>."""
    return f"{CONFIG_CHANGES}/{CONFIG_CHANGE_PREFIX}"


def delete_topic_path(topic: str) -> str:
    return f"{DELETE_TOPICS}/{_name('topic', topic)}"


def isr_change_path() -> str:
    """The prefix to create sequentially under /isr_change_notification."""
    return f"{ISR_CHANGE_NOTIFICATION}/{ISR_CHANGE_PREFIX}"


def log_dir_event_path() -> str:
    """The prefix to create sequentially under /log_dir_event_notification."""
    return f"{LOG_DIR_EVENT_NOTIFICATION}/{LOG_DIR_EVENT_PREFIX}"


def sequence_number(name: str, prefix: str) -> int:
    """``sequence_number("isr_change_0000000012", "isr_change_") == 12`` (a path works too)."""
    base = name.rsplit("/", 1)[-1]
    digits = base[len(prefix):] if base.startswith(prefix) else ""
    if not re.fullmatch(r"-?[0-9]{1,10}", digits):
        raise ValueError(f"{name!r} is not a {prefix}<sequence> node")
    return int(digits)


def persistent_paths() -> list[str]:
    """The paths a Kafka broker makes sure exist at start-up (ZkData.PersistentZkPaths)."""
    return [
        CONSUMERS,
        BROKER_IDS,
        BROKER_TOPICS,
        CONFIG_CHANGES,
        DELETE_TOPICS,
        BROKER_SEQID,
        ISR_CHANGE_NOTIFICATION,
        LATEST_PRODUCER_ID_BLOCK,
        LOG_DIR_EVENT_NOTIFICATION,
        *(config_entity_type_path(t) for t in CONFIG_TYPES),
    ]


def create_persistent_paths(store: MetadataStore) -> None:
    """Create the persistent top-level paths that are missing (idempotent)."""
    for path in persistent_paths():
        store.ensure_path(path)


def generate_broker_sequence_id(store: MetadataStore) -> int:
    """Bump /brokers/seqid and return its new version, as Kafka does to number brokers
    (broker.id.generation.enable: the id is this plus reserved.broker.max.id)."""
    try:
        return store.set(BROKER_SEQID, b"").version
    except NoNodeError:
        store.ensure_path(BROKER_SEQID)
        return store.set(BROKER_SEQID, b"").version


# --- Kafka Uuids (topic ids, cluster ids) ---------------------------------------------------

_UUID_TEXT = re.compile(r"[A-Za-z0-9_-]{22}")


def uuid_to_str(value: uuid.UUID) -> str:
    """Kafka's Uuid text: URL-safe base64 of the 16 bytes, without padding (22 chars)."""
    return base64.urlsafe_b64encode(value.bytes).decode("ascii").rstrip("=")


def uuid_from_str(text: str) -> uuid.UUID:
    if not isinstance(text, str) or not _UUID_TEXT.fullmatch(text):
        raise ValueError(f"{text!r} is not a Kafka Uuid (22 URL-safe base64 characters)")
    try:
        raw = base64.urlsafe_b64decode(text + "==")
    except binascii.Error as e:
        raise ValueError(f"{text!r} is not a Kafka Uuid: {e}") from None
    if len(raw) != 16:
        raise ValueError(f"{text!r} is not a Kafka Uuid")
    return uuid.UUID(bytes=raw)


def new_kafka_uuid() -> uuid.UUID:
    """A random id as Kafka's Uuid.randomUuid makes them: never the zero or metadata-topic
    id (0 and 1), and never one whose text starts with '-' (it would read as an option)."""
    while True:
        value = uuid.UUID(bytes=secrets.token_bytes(16), version=4)
        if value.int > 1 and not uuid_to_str(value).startswith("-"):
            return value


# --- payloads -------------------------------------------------------------------------------


class ZNodeDataError(ValueError):
    """A znode's payload is not what Kafka writes there."""


# Any: a sentinel that stands in for a default of any type ("no default given").
_MISSING: Any = object()


def _load(data: bytes, what: str) -> dict[str, Any]:
    if not isinstance(data, bytes | bytearray | memoryview):
        raise TypeError(f"{what} data must be bytes, not {type(data).__name__}")
    try:
        doc = json.loads(bytes(data).decode("utf-8"))
    except UnicodeDecodeError as e:
        raise ZNodeDataError(f"{what}: not UTF-8 ({e.reason} at byte {e.start})") from None
    except ValueError as e:
        raise ZNodeDataError(f"{what}: not JSON ({e})") from None
    except RecursionError:
        raise ZNodeDataError(f"{what}: JSON nested too deeply") from None
    if not isinstance(doc, dict):
        raise ZNodeDataError(f"{what}: expected a JSON object, found {type(doc).__name__}")
    return doc


def _dump(doc: Mapping[str, Any]) -> bytes:
    return json.dumps(doc, separators=(",", ":")).encode("utf-8")


def _is_int(v: Any) -> TypeGuard[int]:
    return isinstance(v, int) and not isinstance(v, bool)


def _int(doc: Mapping[str, Any], key: str, what: str, default: int = _MISSING) -> int:
    v = doc.get(key, _MISSING)
    if v is _MISSING or (v is None and default is not _MISSING):
        if default is _MISSING:
            raise ZNodeDataError(f"{what}: missing {key!r}")
        return default
    if not _is_int(v):
        raise ZNodeDataError(f"{what}: {key!r} must be an integer, found {v!r}")
    return v


def _long_text(doc: Mapping[str, Any], key: str, what: str, default: int = _MISSING) -> int:
    """Kafka writes timestamps and producer-id bounds as decimal strings; accept numbers."""
    v = doc.get(key, _MISSING)
    if v is _MISSING or v is None:
        if default is _MISSING:
            raise ZNodeDataError(f"{what}: missing {key!r}")
        return default
    if _is_int(v):
        return v
    if isinstance(v, str) and re.fullmatch(r"-?[0-9]{1,19}", v.strip()):
        return int(v)
    raise ZNodeDataError(f"{what}: {key!r} must be a decimal number, found {v!r}")


def _str(doc: Mapping[str, Any], key: str, what: str) -> str:
    v = doc.get(key, _MISSING)
    if v is _MISSING:
        raise ZNodeDataError(f"{what}: missing {key!r}")
    if not isinstance(v, str):
        raise ZNodeDataError(f"{what}: {key!r} must be a string, found {v!r}")
    return v


def _int_list(v: Any, what: str) -> tuple[int, ...]:
    if not isinstance(v, list) or not all(_is_int(x) for x in v):
        raise ZNodeDataError(f"{what}: expected a list of integers, found {v!r}")
    return tuple(v)


def _version(doc: Mapping[str, Any], what: str, default: int = _MISSING) -> int:
    # /cluster/id writes its version as the string "1"; everything else as a number.
    return _long_text(doc, "version", what, default)


def _topic_partitions(v: Any, what: str) -> tuple[tuple[str, int], ...]:
    if not isinstance(v, list):
        raise ZNodeDataError(f"{what}: 'partitions' must be a list, found {v!r}")
    out = []
    for item in v:
        if not isinstance(item, dict):
            raise ZNodeDataError(f"{what}: partition entry {item!r} is not an object")
        out.append((_str(item, "topic", what), _int(item, "partition", what)))
    return tuple(out)


def _tp_json(tps: Iterable[tuple[str, int]]) -> list[dict[str, Any]]:
    return [{"topic": t, "partition": p} for t, p in tps]


_T = TypeVar("_T")


def _decode_with(what: str, fn: Callable[[], _T]) -> _T:
    try:
        return fn()
    except ZNodeDataError:
        raise
    except (ValueError, TypeError, KeyError) as e:
        raise ZNodeDataError(f"{what}: {e}") from None


def encode_cluster_id(cluster_id: str) -> bytes:
    return _dump({"version": "1", "id": cluster_id})


def decode_cluster_id(data: bytes) -> str:
    doc = _load(data, "cluster id")
    return _str(doc, "id", "cluster id")


def new_cluster_id() -> str:
    """A cluster id as Kafka generates one: a random Kafka Uuid's text."""
    return uuid_to_str(new_kafka_uuid())


def encode_controller_epoch(epoch: int) -> bytes:
    return str(_id("controller epoch", epoch)).encode("ascii")


def decode_controller_epoch(data: bytes) -> int:
    text = bytes(data).decode("ascii", "replace").strip()
    if not re.fullmatch(r"-?[0-9]{1,10}", text):
        raise ZNodeDataError(f"controller epoch: {text[:40]!r} is not an integer")
    return int(text)


@dataclass(frozen=True, slots=True)
class ControllerRegistration:
    """/controller: which broker is the controller (ephemeral, owned by its session)."""

    broker_id: int
    timestamp_ms: int
    kraft_controller_epoch: int = -1
    version: int = 2

    def encode(self) -> bytes:
        doc: dict[str, Any] = {
            "version": self.version,
            "brokerid": self.broker_id,
            "timestamp": str(self.timestamp_ms),
        }
        if self.version >= 2:
            doc["kraftControllerEpoch"] = self.kraft_controller_epoch
        return _dump(doc)

    @classmethod
    def decode(cls, data: bytes) -> ControllerRegistration:
        what = "controller registration"
        doc = _load(data, what)
        return cls(
            broker_id=_int(doc, "brokerid", what),
            timestamp_ms=_long_text(doc, "timestamp", what, 0),
            kraft_controller_epoch=_int(doc, "kraftControllerEpoch", what, -1),
            version=_version(doc, what, 1),
        )


SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
_ENDPOINT = re.compile(r"^(.*)://\[?([0-9a-zA-Z\-%._:]*)\]?:(-?[0-9]+)$")


@dataclass(frozen=True, slots=True)
class EndPoint:
    """One advertised listener; host None means the default interface."""

    listener_name: str
    host: str | None
    port: int
    security_protocol: str = "PLAINTEXT"

    @property
    def connection_string(self) -> str:
        if not self.host:
            hostport = f":{self.port}"
        elif ":" in self.host:  # IPv6
            hostport = f"[{self.host}]:{self.port}"
        else:
            hostport = f"{self.host}:{self.port}"
        return f"{self.listener_name}://{hostport}"

    @classmethod
    def parse(cls, text: str, protocol_map: Mapping[str, str] | None = None) -> EndPoint:
        """``"PLAINTEXT://host:9092"``; the security protocol comes from the listener map,
        or, without one (payloads before version 4), is the listener name itself."""
        m = _ENDPOINT.match(text) if isinstance(text, str) else None
        if m is None:
            raise ValueError(f"endpoint {text!r} is not LISTENER://host:port")
        listener, host, port = m.group(1), m.group(2), int(m.group(3))
        if protocol_map is not None and listener in protocol_map:
            protocol = protocol_map[listener]
        else:
            protocol = listener.upper()
        if protocol not in SECURITY_PROTOCOLS:
            raise ValueError(f"endpoint {text!r}: unknown security protocol {protocol!r}")
        return cls(listener, host or None, port, protocol)


@dataclass(frozen=True)
class BrokerRegistration:
    """/brokers/ids/<id>: a live broker's listeners, rack and supported features."""

    broker_id: int
    endpoints: tuple[EndPoint, ...]
    rack: str | None = None
    jmx_port: int = -1
    timestamp_ms: int = 0
    features: Mapping[str, tuple[int, int]] = field(default_factory=dict)  # name -> min, max
    version: int = 5

    def plaintext_endpoint(self) -> EndPoint | None:
        for ep in self.endpoints:
            if ep.security_protocol == "PLAINTEXT":
                return ep
        return None

    def encode(self) -> bytes:
        # The top-level host/port are for old clients: the first PLAINTEXT listener, if any.
        plain = self.plaintext_endpoint()
        doc: dict[str, Any] = {
            "version": self.version,
            "host": plain.host if plain else None,
            "port": plain.port if plain else -1,
            "endpoints": [ep.connection_string for ep in self.endpoints],
            "jmx_port": self.jmx_port,
            "timestamp": str(self.timestamp_ms),
        }
        if self.rack is not None and self.version >= 3:
            doc["rack"] = self.rack
        if self.version >= 4:
            doc["listener_security_protocol_map"] = {
                ep.listener_name: ep.security_protocol for ep in self.endpoints
            }
        if self.version >= 5:
            doc["features"] = {
                name: {"min_version": lo, "max_version": hi}
                for name, (lo, hi) in sorted(self.features.items())
            }
        return _dump(doc)

    @classmethod
    def decode(cls, broker_id: int, data: bytes) -> BrokerRegistration:
        what = f"broker registration {broker_id}"
        doc = _load(data, what)
        return _decode_with(what, lambda: cls._decode(broker_id, doc, what))

    @classmethod
    def _decode(cls, broker_id: int, doc: dict[str, Any], what: str) -> BrokerRegistration:
        version = _version(doc, what)
        if version < 1:
            raise ZNodeDataError(f"{what}: unsupported version {version}")
        if version == 1:
            host = _str(doc, "host", what)
            endpoints: tuple[EndPoint, ...] = (
                EndPoint("PLAINTEXT", host or None, _int(doc, "port", what)),
            )
        else:
            protocol_map = doc.get("listener_security_protocol_map")
            if protocol_map is not None and not (
                isinstance(protocol_map, dict)
                and all(isinstance(v, str) for v in protocol_map.values())
            ):
                raise ZNodeDataError(f"{what}: bad listener_security_protocol_map")
            raw = doc.get("endpoints")
            if not isinstance(raw, list):
                raise ZNodeDataError(f"{what}: 'endpoints' must be a list, found {raw!r}")
            endpoints = tuple(EndPoint.parse(e, protocol_map) for e in raw)
        rack = doc.get("rack")
        if rack is not None and not isinstance(rack, str):
            raise ZNodeDataError(f"{what}: 'rack' must be a string, found {rack!r}")
        features: dict[str, tuple[int, int]] = {}
        raw_features = doc.get("features") or {}
        if not isinstance(raw_features, dict):
            raise ZNodeDataError(f"{what}: 'features' must be an object")
        for name, rng in raw_features.items():
            if not isinstance(rng, dict):
                raise ZNodeDataError(f"{what}: feature {name!r} must be an object")
            fw = f"{what}, feature {name!r}"
            features[name] = (_int(rng, "min_version", fw), _int(rng, "max_version", fw))
        return cls(
            broker_id=broker_id,
            endpoints=endpoints,
            rack=rack,
            jmx_port=_int(doc, "jmx_port", what, -1),
            timestamp_ms=_long_text(doc, "timestamp", what, 0),
            features=features,
            version=version,
        )


@dataclass(frozen=True, slots=True)
class ReplicaAssignment:
    replicas: tuple[int, ...]
    adding_replicas: tuple[int, ...] = ()
    removing_replicas: tuple[int, ...] = ()


@dataclass(frozen=True)
class TopicAssignment:
    """/brokers/topics/<t>: partition -> replicas (plus a reassignment's adding and
    removing replicas) and the topic id."""

    partitions: Mapping[int, ReplicaAssignment]
    topic_id: uuid.UUID | None = None
    version: int = 3

    def encode(self) -> bytes:
        order = sorted(self.partitions)
        doc: dict[str, Any] = {
            "version": self.version,
            "partitions": {str(p): list(self.partitions[p].replicas) for p in order},
            "adding_replicas": {
                str(p): list(self.partitions[p].adding_replicas)
                for p in order
                if self.partitions[p].adding_replicas
            },
            "removing_replicas": {
                str(p): list(self.partitions[p].removing_replicas)
                for p in order
                if self.partitions[p].removing_replicas
            },
        }
        if self.topic_id is not None:
            doc["topic_id"] = uuid_to_str(self.topic_id)
        return _dump(doc)

    @classmethod
    def decode(cls, data: bytes, topic: str = "?") -> TopicAssignment:
        what = f"topic assignment of {topic!r}"
        doc = _load(data, what)
        return _decode_with(what, lambda: cls._decode(doc, what))

    @classmethod
    def _decode(cls, doc: dict[str, Any], what: str) -> TopicAssignment:
        def partition_map(key: str) -> dict[int, tuple[int, ...]]:
            raw = doc.get(key)
            if raw is None:
                return {}
            if not isinstance(raw, dict):
                raise ZNodeDataError(f"{what}: {key!r} must be an object")
            out = {}
            for k, v in raw.items():
                if not re.fullmatch(r"[0-9]{1,10}", k):
                    raise ZNodeDataError(f"{what}: partition {k!r} is not a number")
                out[int(k)] = _int_list(v, f"{what}, {key} of partition {k}")
            return out

        replicas = partition_map("partitions")
        adding = partition_map("adding_replicas")
        removing = partition_map("removing_replicas")
        raw_id = doc.get("topic_id")
        topic_id = None if raw_id is None else uuid_from_str(raw_id)
        return cls(
            partitions={
                p: ReplicaAssignment(r, adding.get(p, ()), removing.get(p, ()))
                for p, r in sorted(replicas.items())
            },
            topic_id=topic_id,
            version=_version(doc, what, 1),
        )


@dataclass(frozen=True, slots=True)
class LeaderIsrAndControllerEpoch:
    """/brokers/topics/<t>/partitions/<p>/state. Its zkVersion (the znode's stat.version) is
    the compare-and-set token for the next ISR change."""

    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    controller_epoch: int
    leader_recovery_state: int = 0  # 0 RECOVERED, 1 RECOVERING (written only when not 0)
    version: int = 1

    def encode(self) -> bytes:
        doc: dict[str, Any] = {
            "version": self.version,
            "leader": self.leader,
            "leader_epoch": self.leader_epoch,
            "controller_epoch": self.controller_epoch,
            "isr": list(self.isr),
        }
        if self.leader_recovery_state != 0:
            doc["leader_recovery_state"] = self.leader_recovery_state
        return _dump(doc)

    @classmethod
    def decode(cls, data: bytes) -> LeaderIsrAndControllerEpoch:
        what = "partition state"
        doc = _load(data, what)
        return cls(
            leader=_int(doc, "leader", what),
            leader_epoch=_int(doc, "leader_epoch", what),
            isr=_int_list(doc.get("isr"), f"{what}, isr"),
            controller_epoch=_int(doc, "controller_epoch", what),
            leader_recovery_state=_int(doc, "leader_recovery_state", what, 0),
            version=_version(doc, what, 1),
        )


@dataclass(frozen=True)
class EntityConfig:
    """/config/<type>/<name>: dynamic config overrides, all values as strings."""

    config: Mapping[str, str]
    version: int = 1

    def encode(self) -> bytes:
        return _dump({"version": self.version, "config": dict(sorted(self.config.items()))})

    @classmethod
    def decode(cls, data: bytes | None) -> EntityConfig:
        what = "entity config"
        if not data:
            return cls({})  # Kafka reads a node without data as no overrides
        doc = _load(data, what)
        raw = doc.get("config")
        if raw is None:
            raw = {}
        if not isinstance(raw, dict):
            raise ZNodeDataError(f"{what}: 'config' must be an object, found {raw!r}")
        for k, v in raw.items():
            if not isinstance(v, str):
                raise ZNodeDataError(f"{what}: value of {k!r} must be a string, found {v!r}")
        return cls(dict(raw), _version(doc, what, 1))


@dataclass(frozen=True, slots=True)
class ConfigChangeNotification:
    """/config/changes/config_change_<seq>: which entity's config changed, e.g. "topics/t",
    "brokers/<default>" or "users/alice/clients/app"."""

    entity_path: str
    version: int = 2

    @property
    def entity_type(self) -> str:
        return self.entity_path.split("/", 1)[0]

    @property
    def entity_name(self) -> str:
        return self.entity_path.split("/", 1)[1] if "/" in self.entity_path else ""

    def encode(self) -> bytes:
        return _dump({"version": self.version, "entity_path": self.entity_path})

    @classmethod
    def decode(cls, data: bytes) -> ConfigChangeNotification:
        what = "config change notification"
        doc = _load(data, what)
        version = _version(doc, what)
        if version == 1:  # Kafka < 1.1: separate type and name
            return cls(f"{_str(doc, 'entity_type', what)}/{_str(doc, 'entity_name', what)}", 1)
        if version == 2:
            path = _str(doc, "entity_path", what)
            if "/" not in path:
                raise ZNodeDataError(f"{what}: entity_path {path!r} is not <type>/<name>")
            return cls(path, 2)
        raise ZNodeDataError(f"{what}: unsupported version {version}")


@dataclass(frozen=True, slots=True)
class IsrChangeNotification:
    """/isr_change_notification/isr_change_<seq>: partitions whose ISR a leader changed."""

    partitions: tuple[tuple[str, int], ...]
    version: int = 1

    def encode(self) -> bytes:
        return _dump({"version": self.version, "partitions": _tp_json(self.partitions)})

    @classmethod
    def decode(cls, data: bytes) -> IsrChangeNotification:
        what = "ISR change notification"
        doc = _load(data, what)
        return cls(_topic_partitions(doc.get("partitions"), what), _version(doc, what, 1))


@dataclass(frozen=True, slots=True)
class PreferredReplicaElection:
    """/admin/preferred_replica_election: partitions to move back to their preferred leader."""

    partitions: tuple[tuple[str, int], ...]
    version: int = 1

    def encode(self) -> bytes:
        return _dump({"version": self.version, "partitions": _tp_json(self.partitions)})

    @classmethod
    def decode(cls, data: bytes) -> PreferredReplicaElection:
        what = "preferred replica election"
        doc = _load(data, what)
        return cls(_topic_partitions(doc.get("partitions"), what), _version(doc, what, 1))


@dataclass(frozen=True)
class PartitionReassignment:
    """/admin/reassign_partitions (the pre-2.4 way to reassign): target replicas per
    partition. The "log_dirs" that kafka-reassign-partitions may add are not kept."""

    partitions: Mapping[tuple[str, int], tuple[int, ...]]
    version: int = 1

    def encode(self) -> bytes:
        return _dump({
            "version": self.version,
            "partitions": [
                {"topic": t, "partition": p, "replicas": list(r)}
                for (t, p), r in self.partitions.items()
            ],
        })

    @classmethod
    def decode(cls, data: bytes) -> PartitionReassignment:
        what = "partition reassignment"
        doc = _load(data, what)
        raw = doc.get("partitions")
        if not isinstance(raw, list):
            raise ZNodeDataError(f"{what}: 'partitions' must be a list, found {raw!r}")
        out: dict[tuple[str, int], tuple[int, ...]] = {}
        for item in raw:
            if not isinstance(item, dict):
                raise ZNodeDataError(f"{what}: partition entry {item!r} is not an object")
            tp = (_str(item, "topic", what), _int(item, "partition", what))
            out[tp] = _int_list(item.get("replicas"), f"{what}, replicas of {tp[0]}-{tp[1]}")
        return cls(out, _version(doc, what, 1))


LOG_DIR_FAILURE_EVENT = 1


@dataclass(frozen=True, slots=True)
class LogDirEventNotification:
    """/log_dir_event_notification/log_dir_event_<seq>: a broker lost a log directory."""

    broker_id: int
    event: int = LOG_DIR_FAILURE_EVENT
    version: int = 1

    def encode(self) -> bytes:
        return _dump({"version": self.version, "broker": self.broker_id, "event": self.event})

    @classmethod
    def decode(cls, data: bytes) -> LogDirEventNotification:
        what = "log dir event notification"
        doc = _load(data, what)
        return cls(
            _int(doc, "broker", what),
            _int(doc, "event", what, LOG_DIR_FAILURE_EVENT),
            _version(doc, what, 1),
        )


PRODUCER_ID_BLOCK_SIZE = 1000  # Kafka's ProducerIdsBlock.PRODUCER_ID_BLOCK_SIZE


@dataclass(frozen=True, slots=True)
class ProducerIdBlock:
    """/latest_producer_id_block: the last block of producer ids handed to a broker."""

    assigned_broker_id: int
    first_producer_id: int
    size: int = PRODUCER_ID_BLOCK_SIZE
    version: int = 1

    @property
    def last_producer_id(self) -> int:
        return self.first_producer_id + self.size - 1

    def next_block(self, broker_id: int) -> ProducerIdBlock:
        return ProducerIdBlock(broker_id, self.last_producer_id + 1, self.size)

    def encode(self) -> bytes:
        return _dump({
            "version": self.version,
            "broker": self.assigned_broker_id,
            "block_start": str(self.first_producer_id),
            "block_end": str(self.last_producer_id),
        })

    @classmethod
    def decode(cls, data: bytes) -> ProducerIdBlock:
        what = "producer id block"
        doc = _load(data, what)
        start = _long_text(doc, "block_start", what)
        end = _long_text(doc, "block_end", what)
        if end < start:
            raise ZNodeDataError(f"{what}: block_end {end} is below block_start {start}")
        return cls(_int(doc, "broker", what), start, end - start + 1, _version(doc, what, 1))
