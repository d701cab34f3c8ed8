"""The broker's current configuration, as its components hold it (Kafka's DynamicBrokerConfig).

A ``BrokerConfig`` is an immutable value; a dynamic change (AlterConfigs on a broker entity,
or a /config/changes notification) builds a new one. Components therefore hold this
``DynamicBrokerConfig`` and read ``current`` when they need a value, so they see a change at
once without being told. Those that must act on a change (the replication quotas, the
controller when unclean election is switched on, the log cleaner) register a
reconfigurable, called on the event loop thread with the old and the new config after
``current`` has moved.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from klog.daemon.config.broker import BrokerConfig
from klog.daemon.config.values import ConfigError

log = logging.getLogger(__name__)

Reconfigurable = Callable[[BrokerConfig, BrokerConfig], None]
#: Raises ConfigError or ValueError for a change its component cannot take (Kafka's
#: Reconfigurable.validateReconfiguration).
Validator = Callable[[BrokerConfig, BrokerConfig], None]


class DynamicBrokerConfig:
    def __init__(self, initial: BrokerConfig) -> None:
        self.current = initial
        self._reconfigurables: list[Reconfigurable] = []
        self._validators: list[Validator] = []
        self._file_reloaders: list[Callable[[BrokerConfig], None]] = []

    def add_reconfigurable(self, reconfigure: Reconfigurable) -> None:
        self._reconfigurables.append(reconfigure)

    def add_validator(self, validate: Validator) -> None:
        self._validators.append(validate)

    def add_file_reloader(self, reload: Callable[[BrokerConfig], None]) -> None:
        self._file_reloaders.append(reload)

    def reload_updated_files(self) -> None:
        """A broker config update that changed no value (the same values set again): the
        files the current config names are read again where they changed on disk --
        Kafka's reloadUpdatedFilesWithoutConfigChange, how a key store rewritten in place
        is rotated. One reloader that fails is logged; the others still run."""
        for reload in self._file_reloaders:
            try:
                reload(self.current)
            except Exception:
                log.exception("reloading updated files failed in %r", reload)

    def validate(self, new: BrokerConfig) -> None:
        """Ask every validator whether ``new`` may replace ``current``; raises ConfigError
        with the first refusal (AlterConfigs answers it as INVALID_REQUEST)."""
        for validate in self._validators:
            try:
                validate(self.current, new)
            except ValueError as exc:  # ConfigError is one
                raise ConfigError(str(exc)) from None

    def update(self, new: BrokerConfig) -> None:
        """Make ``new`` current and tell every reconfigurable. One that fails is logged and
        does not keep the others from hearing of the change: the config itself has been
        validated already, and has changed."""
        old, self.current = self.current, new
        for reconfigure in self._reconfigurables:
            try:
                reconfigure(old, new)
            except Exception:
                log.exception("applying a broker config change failed in %r", reconfigure)
