"""One local[2] SparkSession for all of tests/spark (a JVM start costs tens of seconds),
and small log directories built with klog's storage engine."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from klog.storage.log import PartitionLog
from tests.storage.batches import build_batch, build_control_batch


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    from klog.spark import register

    session = (
        SparkSession.builder.master("local[2]")
        .appName("klog tests")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.memory", "512m")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    register(session)
    yield session
    session.stop()


def write_partition(log_dir: Path, topic: str, partition: int, batches: list[bytes]) -> None:
    """Append ``batches`` (with their own offsets) to ``log_dir/<topic>-<partition>``."""
    log = PartitionLog(log_dir / f"{topic}-{partition}")
    try:
        for batch in batches:
            log.append_as_follower(batch)
        log.flush()
    finally:
        log.close()


def transactional_batches() -> tuple[list[bytes], list[int]]:
    """A partition mixing plain records, a committed and an aborted transaction, and an
    open one at the end. Returns the batches and the offsets read_committed must give."""
    txn = 0x10
    batches = [
        build_batch(0, [b"plain-0", b"plain-1"]),                                     # 0-1
        build_batch(2, [b"c-2", b"c-3"], producer_id=7, producer_epoch=0,
                    base_sequence=0, attributes=txn),                                 # 2-3
        build_batch(4, [b"a-4", b"a-5"], producer_id=8, producer_epoch=0,
                    base_sequence=0, attributes=txn),                                 # 4-5
        build_batch(6, [b"plain-6"]),                                                 # 6
        build_control_batch(7, commit=True, producer_id=7, producer_epoch=0),         # 7
        build_control_batch(8, commit=False, producer_id=8, producer_epoch=0),        # 8
        build_batch(9, [b"c-9"], producer_id=8, producer_epoch=0, base_sequence=2,
                    attributes=txn),                                                  # 9
        build_control_batch(10, commit=True, producer_id=8, producer_epoch=0),        # 10
        build_batch(11, [b"plain-11"]),                                               # 11
        build_batch(12, [b"open-12"], producer_id=9, producer_epoch=0, base_sequence=0,
                    attributes=txn),                                                  # 12
        build_batch(13, [b"plain-13"]),                                               # 13
    ]
    return batches, [0, 1, 2, 3, 6, 9, 11]
