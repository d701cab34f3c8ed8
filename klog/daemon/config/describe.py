"""DescribeConfigs entries: values, sources, synonyms, types, read-only and sensitive flags.

This module owns ``ConfigEntry`` (its ``ConfigSynonym`` is values.py's) and their making
for a topic (its overrides over the broker's defaults), a broker
(``describe_broker_configs``) and the cluster-wide broker default
(``describe_broker_default_configs``), as Kafka answers them.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from klog.daemon.config.specs import (
    _LISTENER_CONFIG_RE,
    _LOG_CONFIG_NAMES,
    _TOPIC_SPEC_LIST,
    BROKER_CONFIGS,
    TOPIC_CONFIGS,
    UNIMPLEMENTED_BROKER_CONFIGS,
    broker_synonyms,
)
from klog.daemon.config.validation import validate_topic_configs
from klog.daemon.config.values import ConfigSource, ConfigSynonym, ConfigType, format_value

if TYPE_CHECKING:
    from klog.daemon.config.broker import BrokerConfig


# -- DescribeConfigs -------------------------------------------------------------------


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
    doc = spec.doc if spec else None
    if spec is not None and spec.name in UNIMPLEMENTED_BROKER_CONFIGS:
        # Listed as Kafka lists it, but marked; and a switch klog does not implement is
        # never reported as on: the value is what klog does, the synonyms what was set.
        if _NOT_IMPLEMENTED not in spec.doc:
            doc = f"{spec.doc} ({_NOT_IMPLEMENTED} by klog)"
        if kind is ConfigType.BOOLEAN and text == "true":
            text = "false"
            doc = f"{doc} klog behaves as false whatever its value."
    return ConfigEntry(
        name, text, spec is None or spec.read_only, source, sensitive, tuple(synonyms),
        kind, doc,
    )


_NOT_IMPLEMENTED = "accepted, not implemented"
