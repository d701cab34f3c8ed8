"""``BrokerConfig``: one broker's configuration, immutable, with its dynamic layers.

This module owns the value a broker reads once from server.properties and ``--override``
arguments (``BrokerConfig.load``), its typed settings, the broker -> topic default mapping
(``log_config``) and the dynamic broker configs layered over it (``with_dynamic``):
dynamic per-broker, then dynamic cluster-default, then static, then default.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Generic, TypeVar, overload

from klog.daemon.config.listeners import (
    _WILDCARD_HOSTS,
    Endpoint,
    canonical_hostname,
    parse_listeners,
    parse_protocol_map,
)
from klog.daemon.config.specs import (
    _LOG_CONFIG_NAMES,
    _STANDALONE_DEFAULTS,
    _TOPIC_SPEC_LIST,
    ACL_AUTHORIZER_CLASSES,
    BROKER_CONFIGS,
    LISTENER_OVERRIDABLE_CONFIGS,
    LISTENER_SECURITY_CONFIGS,
    MUST_NOT_BE_IGNORED,
    REPLICA_SELECTOR_CLASSES,
    TOPIC_CONFIGS,
    UNIMPLEMENTED_BROKER_CONFIGS,
)
from klog.daemon.config.validation import (
    _check_compaction_lags,
    validate_broker_dynamic_configs,
    validate_topic_configs,
)
from klog.daemon.config.values import (
    _HOUR,
    _MINUTE,
    ConfigError,
    ConfigSource,
    ConfigSynonym,
    _as_text,
    _bad,
    _csv,
    parse_connection_overrides,
    parse_value,
)
from klog.storage.config import LogConfig, LogConfigError
from klog.storage.properties import PropertiesError, parse_properties

#: listener.name.<listener>.<mechanism>.sasl.jaas.config (Kafka's JaasContext keys).
_JAAS_KEY_RE = re.compile(r"listener\.name\.([^.]+)\.[^.]+\.sasl\.jaas\.config")

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


def _unimplemented(key: str) -> bool:
    """A config klog accepts but does not implement, also in Kafka's per-listener
    (``listener.name.<l>.<name>``) and per-mechanism (``listener.name.<l>.<m>.<name>``)
    forms."""
    if key in UNIMPLEMENTED_BROKER_CONFIGS:
        return True
    if not key.startswith("listener.name."):
        return False
    parts = key.split(".")
    # listener.name.<l>.<name> or listener.name.<l>.<mechanism>.<name>
    return any(".".join(parts[i:]) in UNIMPLEMENTED_BROKER_CONFIGS for i in (3, 4))


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
        self._zk_connection_timeout_ms: int = (
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
        name: str | None = v["inter.broker.listener.name"]
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

        authorizer = v["authorizer.class.name"]
        # Never ignored: a broker asked for an authorizer klog lacks would let everyone in.
        require(not authorizer or authorizer in ACL_AUTHORIZER_CLASSES,
                f"authorizer.class.name={authorizer} is not an authorizer klog has; use "
                f"{' or '.join(ACL_AUTHORIZER_CLASSES)} (klog's ACL authorizer), or leave it "
                "empty for none")
        self._refuse_ignored_security_configs()
        selector = v["replica.selector.class"]
        # A selector klog lacks is refused, not ignored: consumers would read from leaders
        # across racks where the operator asked otherwise.
        require(not selector or selector in REPLICA_SELECTOR_CLASSES,
                f"replica.selector.class={selector} is not a replica selector klog has; use "
                f"{' or '.join(REPLICA_SELECTOR_CLASSES)}, or leave it unset (consumers "
                "fetch from leaders)")
        callback = v["client.quota.callback.class"]
        # Never ignored: quotas a custom callback would compute would silently not apply.
        require(not callback, f"client.quota.callback.class={callback} is not supported: "
                "klog applies Kafka's default quota rules only; leave it empty")
        for principal in filter(None, (p.strip() for p in (v["super.users"] or "").split(";"))):
            kind, _sep, name = principal.partition(":")
            if not kind or not name:
                raise _bad("super.users", v["super.users"],
                           f"{principal} is not a principal (Type:name, e.g. User:admin)")
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

    def _refuse_ignored_security_configs(self) -> None:
        """MUST_NOT_BE_IGNORED: unimplemented, and ignoring them would weaken security or
        run another mode than asked, so a value other than Kafka's default is refused
        rather than taken in silence; also per listener (``listener.name.<l>.<name>``) and
        per listener and mechanism (``listener.name.<l>.<mechanism>.<name>``), the forms
        Kafka's channel builders read."""
        layers = (self._static, self._dynamic_default, self._dynamic_broker)
        for name, harm in MUST_NOT_BE_IGNORED.items():
            if name not in UNIMPLEMENTED_BROKER_CONFIGS:
                continue  # implemented by now: its own code validates it
            spec = BROKER_CONFIGS[name]
            default = None if spec.default is None else parse_value(spec, spec.default)
            keys = {k for layer in layers for k in layer
                    if k == name or (k.startswith("listener.name.") and k.endswith(f".{name}"))}
            for key in sorted(keys):
                raw = self._dynamic_broker.get(key, self._dynamic_default.get(
                    key, self._static.get(key)))
                assert raw is not None
                if parse_value(spec, raw) != default:
                    raise ConfigError(
                        f"invalid configuration: {key}={raw} is not implemented by klog, "
                        f"and ignoring it would {harm}; remove it")

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
        and a config klog honours per listener (``LISTENER_OVERRIDABLE_CONFIGS``,
        ``LISTENER_SECURITY_CONFIGS``, and sasl.jaas.config per listener and mechanism)."""
        prefixes = {f"listener.name.{e.listener_name.lower()}.{name}"
                    for e in self._listeners
                    for name in LISTENER_OVERRIDABLE_CONFIGS + LISTENER_SECURITY_CONFIGS}
        listeners = {e.listener_name.lower() for e in self._listeners}

        def known(key: str) -> bool:
            if key in BROKER_CONFIGS or key in prefixes or _unimplemented(key):
                return True
            match = _JAAS_KEY_RE.fullmatch(key)
            return match is not None and match[1] in listeners

        return sorted(k for k in self._static if not known(k))

    @property
    def unimplemented_keys(self) -> list[str]:
        """Names set (file, overrides, dynamic default or per-broker) that klog accepts
        but does not implement (specs.UNIMPLEMENTED_BROKER_CONFIGS): the broker lists
        them in one warning line at start-up, "accepted, not implemented: a, b"."""
        layers = (self._static, self._dynamic_default, self._dynamic_broker)
        return sorted({k for layer in layers for k in layer if _unimplemented(k)})

    def listener_value(self, listener_name: str, name: str) -> Any:
        """``listener.name.<listener>.<name>`` parsed as ``name``'s type, from the highest
        layer that sets it (dynamic per broker, dynamic default, static); None if unset.
        Only meaningful for ``LISTENER_OVERRIDABLE_CONFIGS`` and
        ``LISTENER_SECURITY_CONFIGS``."""
        key = f"listener.name.{listener_name.lower()}.{name}"
        for layer in (self._dynamic_broker, self._dynamic_default, self._static):
            if key in layer:
                return parse_value(dataclasses.replace(BROKER_CONFIGS[name], name=key),
                                   layer[key])
        return None

    def security_value(self, listener_name: str, name: str,
                       mechanism: str | None = None) -> Any:
        """A security config as one listener sees it (Kafka's listener-prefixed
        ``ChannelBuilder`` configs): ``listener.name.<listener>.<mechanism>.<name>``
        (sasl.jaas.config only), then ``listener.name.<listener>.<name>``, then ``name``
        itself (None if unset without a default)."""
        if mechanism is not None:
            key = f"listener.name.{listener_name.lower()}.{mechanism.lower()}.{name}"
            for layer in (self._dynamic_broker, self._dynamic_default, self._static):
                if key in layer:
                    return parse_value(dataclasses.replace(BROKER_CONFIGS[name], name=key),
                                       layer[key])
        value = self.listener_value(listener_name, name)
        return self._values[name] if value is None else value

    def security_source(self, listener_name: str, name: str) -> str:
        """The config key ``security_value`` took a listener's value from (for errors)."""
        key = f"listener.name.{listener_name.lower()}.{name}"
        for layer in (self._dynamic_broker, self._dynamic_default, self._static):
            if key in layer:
                return key
        return name

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
    replica_selector_class = _Setting["str | None"]("replica.selector.class")
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
    transaction_partition_verification_enable = _Setting[bool](
        "transaction.partition.verification.enable")
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
