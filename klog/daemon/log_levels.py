"""The broker's loggers and their levels as Kafka's Log4jController shows and changes
them: DescribeConfigs of a BROKER_LOGGER resource lists them, IncrementalAlterConfigs sets
and unsets them (kafka-configs --entity-type broker-loggers). Python's logging stands in
for log4j; no I/O, and nothing is stored: a level set here lives until the broker stops,
as in Kafka.

Kafka's rules kept here:
- the loggers are "root" (the root logger) and every logger that exists in the process;
- a logger's level is its own, or the root logger's when it has none (not the level it
  would inherit from a parent: Log4jController.loggers);
- levels go by log4j's names: FATAL, ERROR, WARN, INFO, DEBUG and TRACE may be set
  (LogLevelConfig.VALID_LOG_LEVELS); TRACE is a level below DEBUG here.
"""

from __future__ import annotations

import logging

ROOT_LOGGER = "root"
TRACE = 5  # below DEBUG (10): log4j's TRACE

#: log4j's names of the levels that may be set, and Python's level for each.
VALID_LOG_LEVELS: dict[str, int] = {
    "FATAL": logging.CRITICAL, "ERROR": logging.ERROR, "WARN": logging.WARNING,
    "INFO": logging.INFO, "DEBUG": logging.DEBUG, "TRACE": TRACE,
}
_NAMES_BY_LEVEL = sorted((level, name) for name, level in VALID_LOG_LEVELS.items())

logging.addLevelName(TRACE, "TRACE")


def level_name(level: int) -> str:
    """log4j's name for a Python level: the highest log4j level at or below it ("ALL"
    below TRACE, as log4j calls the level that lets everything through)."""
    found = "ALL"
    for threshold, name in _NAMES_BY_LEVEL:
        if level >= threshold:
            found = name
    return found


def _logger(name: str) -> logging.Logger | None:
    if name == ROOT_LOGGER:
        return logging.getLogger()
    existing = logging.Logger.manager.loggerDict.get(name)
    return existing if isinstance(existing, logging.Logger) else None


def logger_exists(name: str) -> bool:
    return _logger(name) is not None


def loggers() -> dict[str, str]:
    """Every logger of the process (``root`` first) and its level's log4j name."""
    root_level = level_name(logging.getLogger().level)
    out = {ROOT_LOGGER: root_level}
    for name, logger in sorted(logging.Logger.manager.loggerDict.items()):
        if isinstance(logger, logging.Logger):
            out[name] = level_name(logger.level) if logger.level else root_level
    return out


def set_level(name: str, level: str) -> None:
    """Set an existing logger's level (a name of VALID_LOG_LEVELS)."""
    logger = _logger(name)
    if logger is None:
        raise KeyError(name)
    logger.setLevel(VALID_LOG_LEVELS[level])


def unset_level(name: str) -> None:
    """Let an existing logger (not the root) go by its parents' level again."""
    logger = _logger(name)
    if logger is None or name == ROOT_LOGGER:
        raise KeyError(name)
    logger.setLevel(logging.NOTSET)
