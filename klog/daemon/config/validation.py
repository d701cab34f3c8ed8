"""Validation of configs a client sends: CreateTopics / AlterConfigs topic configs and
dynamic broker configs (IncrementalAlterConfigs / AlterConfigs on a broker).

This module owns the name checks (unknown, read-only, per-broker only) and the value
checks, each failing with a ``ConfigError`` Kafka's error mapping turns into
INVALID_CONFIG.
"""

from __future__ import annotations

from collections.abc import Mapping

from klog.daemon.config.specs import (
    _CLUSTER_LEVEL_LISTENER_CONFIGS,
    _LISTENER_CONFIG_RE,
    _LOG_CONFIG_NAMES,
    _THROTTLED_RE,
    BROKER_CONFIGS,
    TOPIC_CONFIGS,
)
from klog.daemon.config.values import (
    PER_BROKER,
    PER_LISTENER,
    ConfigError,
    ConfigSpec,
    _bad,
    _csv,
    format_value,
    parse_value,
)
from klog.storage.config import LogConfig, LogConfigError

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
