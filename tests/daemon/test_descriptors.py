"""Tests for klog.daemon.descriptors: the raised limit, the create budget, and a broker that
loads thousands of partitions under a low descriptor limit.

Brokers that need a low RLIMIT_NOFILE run as subprocesses with soft = hard limit set for
them alone (the test process keeps its own limit).
"""

from __future__ import annotations

import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from klog.protocol.errors import ErrorCode
from klog.testing import BrokerStartError, KlogBroker

from .wire import WireClient

CREATE_TOPICS, CREATE_PARTITIONS = 19, 37

pytestmark = pytest.mark.skipif(not Path("/proc/self/fd").is_dir(),
                                reason="counts descriptors through /proc/self/fd")


class LimitedBroker(KlogBroker):
    """A broker process whose RLIMIT_NOFILE (soft and hard) is ``nofile``."""

    def __init__(self, data_dir: Path, nofile: int | None, **kwargs: Any) -> None:
        super().__init__(data_dir, **kwargs)
        self.nofile = nofile

    def command(self) -> list[str]:
        command = super().command()
        if self.nofile is None:
            return command
        # Set in the child just before exec: the limit is the broker's, not this process's.
        limit = (
            "import os, resource, sys; "
            f"resource.setrlimit(resource.RLIMIT_NOFILE, ({self.nofile}, {self.nofile})); "
            "os.execv(sys.argv[1], sys.argv[1:])"
        )
        return [sys.executable, "-c", limit, *command]


def _connect(broker: KlogBroker, timeout: float = 120.0) -> WireClient:
    return WireClient((broker.host, broker.port), timeout=timeout)


def _create(client: WireClient, name: str, partitions: int, timeout_ms: int = 120_000) -> Any:
    return client.call(CREATE_TOPICS, 4, {
        "topics": [{"name": name, "num_partitions": partitions, "replication_factor": 1,
                    "assignments": [], "configs": []}],
        "timeout": timeout_ms, "validate_only": False,
    }).topics[0]


def _partitions_with_leaders(client: WireClient, topic: str) -> int:
    meta = client.metadata([topic], auto_create=False)
    return sum(1 for t in meta.topics if t.name == topic
               for p in t.partitions if p.error_code == 0 and p.leader_id >= 0)


# -- the limit and the budget ----------------------------------------------------------------


def test_the_soft_limit_is_raised_to_the_hard_limit() -> None:
    # In a child process: this one's limit is left alone.
    code = (
        "import resource, sys; from klog.daemon.descriptors import raise_open_file_limit; "
        "soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE); "
        "resource.setrlimit(resource.RLIMIT_NOFILE, (64, hard)); "
        "old, new = raise_open_file_limit(); "
        "print(old, new, *resource.getrlimit(resource.RLIMIT_NOFILE))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, check=True).stdout.split()
    old, new, soft, hard = (int(x) for x in out)
    assert old == 64
    expected = hard if hard != resource.RLIM_INFINITY else new
    assert new == soft == expected and soft > 64


def test_the_budget_counts_what_is_open_and_what_is_promised() -> None:
    from klog.daemon import descriptors

    budget = descriptors.current_budget()
    assert budget is not None
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    assert budget.limit == soft and budget.in_use > 0
    assert budget.available == soft - budget.in_use - budget.headroom
    assert descriptors.refusal(1) is None
    assert descriptors.refusal(0) is None
    why = descriptors.refusal(budget.available + 1)
    assert why is not None and f"open file limit of {soft}" in why and "ulimit -n" in why
    # Descriptors promised to a creation in progress are not available to another.
    assert descriptors.refusal(1, reserved=budget.available) is not None


# -- over the wire, under a low limit --------------------------------------------------------


def test_a_create_beyond_the_descriptor_budget_is_refused_and_writes_nothing(
        tmp_path: Path) -> None:
    with LimitedBroker(tmp_path / "data", nofile=1024) as broker, _connect(broker) as client:
        result = _create(client, "too-big", 2000)
        assert result.error_code == ErrorCode.POLICY_VIOLATION, result
        assert "open file limit of 1024" in result.error_message
        assert "RLIMIT_NOFILE" in result.error_message
        assert not list(broker.log_dir.glob("too-big-*"))
        assert _partitions_with_leaders(client, "too-big") == 0
        # CreatePartitions too, and what fits is still created.
        assert _create(client, "grows", 10).error_code == 0
        grown = client.call(CREATE_PARTITIONS, 1, {
            "topics": [{"name": "grows", "count": 3000, "assignments": None}],
            "timeout": 60_000, "validate_only": False}).results[0]
        assert grown.error_code == ErrorCode.POLICY_VIOLATION, grown
        assert "open file limit of 1024" in grown.error_message
        assert _partitions_with_leaders(client, "grows") == 10
        assert len(list(broker.log_dir.glob("grows-*"))) == 10
        assert broker.process is not None and broker.process.poll() is None


def test_a_broker_with_many_partitions_restarts_under_a_low_limit(tmp_path: Path) -> None:
    partitions = 700  # three descriptors each before: 2,100 > 1,024; one each now
    broker = LimitedBroker(tmp_path / "data", nofile=None)
    with broker:
        with _connect(broker) as client:
            assert _create(client, "many", partitions).error_code == 0
            client.produce("many", partitions - 1, _records(b"before"))
        assert broker.stop() == 0
        broker.nofile = 1024
        broker.start_timeout = 120
        broker.start()
        with _connect(broker) as client:
            deadline = time.monotonic() + 60
            while (_partitions_with_leaders(client, "many") < partitions
                   and time.monotonic() < deadline):
                time.sleep(0.2)
            assert _partitions_with_leaders(client, "many") == partitions
            answer = client.produce("many", 3, _records(b"after"))
            assert answer.responses[0].partition_responses[0].error_code == 0
            fetched = client.fetch("many", partitions - 1, 0)
            records = fetched.responses[0].partitions[0].records
            assert records is not None and b"before" in bytes(records)
        assert "Too many open files" not in broker.log_tail(400)


def _records(value: bytes) -> bytes:
    from klog.protocol.records.v2 import build_batch

    return build_batch([(0, None, value)])


def test_a_limit_too_low_for_the_segments_on_disk_fails_the_start_in_one_clear_line(
        tmp_path: Path) -> None:
    broker = LimitedBroker(tmp_path / "data", nofile=None)
    with broker:
        with _connect(broker) as client:
            assert _create(client, "lots", 300).error_code == 0
        assert broker.stop() == 0
        broker.nofile = 256
        with pytest.raises(BrokerStartError):
            broker.start()
        assert broker.process is not None and broker.process.returncode == 1
        last = broker.log_tail(1)
        assert "the log dirs hold 300 segments" in last, last
        assert "open file limit (RLIMIT_NOFILE) is 256" in last and "ulimit -Hn" in last
        assert "Too many open files" not in broker.log_tail(400)
        # Nothing was loaded or changed: with the limit back, the broker starts as before.
        broker.nofile = None
        broker.start()
        with _connect(broker) as client:
            assert _partitions_with_leaders(client, "lots") == 300
