"""Kafka's DumpLogSegments (kafka.tools.DumpLogSegments in kafka_2.13, the version pinned
in tests/jvm/pom.xml) over segments and indexes klog wrote, against `klog dump-segment` on
the same files: every batch type (plain, each codec, idempotent, transactional with its
control markers and transaction index, and compacted with tombstones), as batches, as
records with their data, and the .index / .timeindex / .txnindex entries."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from klog.cli.app import app
from klog.testing import KlogBroker
from tests.interop.conftest import CODECS
from tests.jvm.driver import Jvm

pytestmark = pytest.mark.timeout(180)

DUMP = "kafka.tools.DumpLogSegments"


@pytest.fixture(scope="module")
def segments(jvm: Jvm, tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """The segment and index files of three partitions klog wrote, its broker stopped:
    "mixed" (a batch per codec, plain and idempotent), "txn" (aborted, committed and
    their markers) and "compacted" (keys overwritten and deleted, then compacted)."""
    # An index entry every 256 bytes: small segments get index entries to compare too.
    broker = KlogBroker(tmp_path_factory.mktemp("dump") / "data",
                        overrides={"log.index.interval.bytes": "256"})
    broker.start()
    try:
        bs = broker.bootstrap_servers
        jvm.call("admin_topics", bootstrap=bs, prefix="unused")  # the broker is up
        for codec in CODECS:
            jvm.call("produce", bootstrap=bs, topic="mixed", count=20, headers=True,
                     timestamp=1_700_000_000_000, config={
                         "compression.type": codec, "linger.ms": "50",
                         "enable.idempotence": "true" if codec == "none" else "false"})
        jvm.call("txn_abort_and_lso", bootstrap=bs, topic="txn", transactional_id="dump-tx")
        jvm.call("admin_configs", bootstrap=bs, topic="unused-configs")
        jvm.call("produce", bootstrap=bs, topic="compacted", count=200, key_modulo=7,
                 tombstone_every=10, config={"linger.ms": "0", "batch.size": "2000"})
    finally:
        assert broker.stop() == 0
    result = CliRunner().invoke(app, ["compact", str(broker.log_dir), "--topic", "compacted",
                                      "--roll"])
    assert result.exit_code == 0, result.output
    files: list[Path] = []
    for partition in ("mixed-0", "txn-0", "compacted-0"):
        for suffix in (".log", ".index", ".timeindex", ".txnindex"):
            files.extend(sorted((broker.log_dir / partition).glob(f"*{suffix}")))
    return files


def dump_both(jvm: Jvm, files: list[Path], *options: str) -> tuple[str, str]:
    joined = ",".join(str(f) for f in files)
    theirs = jvm.call("tool", main=DUMP, argv=["--files", joined, *options])
    assert theirs["exit"] == 0, theirs["stderr"]
    ours = CliRunner().invoke(app, ["dump-segment", "--files", joined, *options],
                              env={"COLUMNS": "250"})
    assert ours.exit_code == 0, ours.output
    return theirs["stdout"], ours.stdout


def test_the_batches_klog_wrote_dump_the_same(jvm: Jvm, segments: list[Path]) -> None:
    theirs, ours = dump_both(jvm, [f for f in segments if f.suffix == ".log"])
    assert ours.splitlines() == theirs.splitlines()


def test_the_records_klog_wrote_dump_the_same(jvm: Jvm, segments: list[Path]) -> None:
    theirs, ours = dump_both(jvm, [f for f in segments if f.suffix == ".log"],
                             "--deep-iteration", "--print-data-log")
    assert ours.splitlines() == theirs.splitlines()


def test_the_indexes_klog_wrote_dump_the_same(jvm: Jvm, segments: list[Path]) -> None:
    theirs, ours = dump_both(jvm, [f for f in segments if f.suffix != ".log"])
    assert ours.splitlines() == theirs.splitlines()
