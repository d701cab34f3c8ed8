"""klog/daemon/log_levels.py: Kafka's Log4jController over Python's logging."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

from klog.daemon import log_levels

NAME = "klog.tests.log_levels.child"


@pytest.fixture
def child() -> Iterator[logging.Logger]:
    logger = logging.getLogger(NAME)
    try:
        yield logger
    finally:
        logger.setLevel(logging.NOTSET)


def test_level_names_are_log4js() -> None:
    assert [log_levels.level_name(level) for level in (
        logging.CRITICAL, logging.ERROR, logging.WARNING, logging.INFO, logging.DEBUG,
        log_levels.TRACE, 1)] == ["FATAL", "ERROR", "WARN", "INFO", "DEBUG", "TRACE", "ALL"]
    assert log_levels.level_name(logging.INFO + 5) == "INFO"  # between two: the lower


def test_loggers_give_own_level_or_the_roots(child: logging.Logger) -> None:
    logging.getLogger("klog.tests.log_levels").setLevel(logging.ERROR)
    try:
        listed = log_levels.loggers()
        root = log_levels.level_name(logging.getLogger().level)
        assert next(iter(listed)) == "root" and listed["root"] == root
        # Its parent's ERROR is not what Kafka reports: a logger without a level of its
        # own shows the root's.
        assert listed[NAME] == root
        log_levels.set_level(NAME, "TRACE")
        assert log_levels.loggers()[NAME] == "TRACE"
        assert child.level == log_levels.TRACE
        log_levels.unset_level(NAME)
        assert child.level == logging.NOTSET and log_levels.loggers()[NAME] == root
    finally:
        logging.getLogger("klog.tests.log_levels").setLevel(logging.NOTSET)


def test_only_existing_loggers(child: logging.Logger) -> None:
    assert log_levels.logger_exists("root") and log_levels.logger_exists(NAME)
    assert not log_levels.logger_exists("klog.tests.never.made")
    logging.getLogger("klog.tests.placeholders.only.child")
    # Its parents are only placeholders in Python's logging, no loggers.
    assert not log_levels.logger_exists("klog.tests.placeholders.only")
    with pytest.raises(KeyError):
        log_levels.set_level("klog.tests.never.made", "INFO")
    with pytest.raises(KeyError):
        log_levels.unset_level("root")
