"""``klog cluster up|status|down`` as a user runs them: separate processes, a data dir."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from klog.cluster_runner import (
    STATE_FILE,
    LocalCluster,
    pid_alive,
    read_state,
    zookeeper_unavailable_reason,
)
from klog.daemon.metastore import paths
from klog.daemon.metastore.zookeeper import ZooKeeperMetadataStore
from tests.cluster.conftest import wait_until

REPO = Path(__file__).resolve().parents[2]


def klog(*args: str, env: dict[str, str] | None = None, timeout: float = 120
         ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "klog", *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=timeout)


@pytest.fixture
def data_dir(tmp_path: Path) -> Iterator[Path]:
    """The cluster's directory; whatever a failed test left running is stopped."""
    directory = tmp_path / "cluster"
    yield directory
    if (directory / STATE_FILE).exists():
        LocalCluster(directory).down(timeout=10)


@pytest.fixture
def zookeeper_installed() -> None:
    reason = zookeeper_unavailable_reason()
    if reason is not None:
        pytest.skip(f"real ZooKeeper unavailable: {reason}")


def _status(data_dir: Path) -> dict:
    result = klog("cluster", "status", "--data-dir", str(data_dir), "--json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def _all_pids(data_dir: Path) -> list[int]:
    state = read_state(data_dir)
    return [b.pid for b in state.brokers] + [state.zookeeper_pid or 0]


def test_up_status_down(data_dir: Path, zookeeper_installed: None) -> None:
    started = time.monotonic()
    up = klog("cluster", "up", "--brokers", "3", "--data-dir", str(data_dir))
    assert up.returncode == 0, up.stderr
    took = time.monotonic() - started
    servers = up.stdout.strip().split(",")
    assert len(servers) == 3 and all(s.startswith("127.0.0.1:") for s in servers)
    assert took < 60
    pids = _all_pids(data_dir)
    assert all(pid_alive(pid) for pid in pids)

    # A second `up` on the same directory is refused, with one line.
    again = klog("cluster", "up", "--data-dir", str(data_dir))
    assert again.returncode == 1
    assert "already running" in again.stderr and "Traceback" not in again.stderr
    assert again.stderr.count("\n") == 1

    report = _status(data_dir)
    assert [b["id"] for b in report["brokers"]] == [1, 2, 3]
    assert all(b["process"] == "running" and b["registered"] for b in report["brokers"])
    assert report["controller"] in (1, 2, 3)
    assert [b["id"] for b in report["brokers"] if b["controller"]] == [report["controller"]]
    assert report["bootstrap_servers"] == up.stdout.strip()
    assert report["zookeeper"]["running"] is True
    assert report["cluster_id"]
    assert report["offline_partitions"] == [] and report["under_replicated_partitions"] == []
    assert report["error"] is None

    text = klog("cluster", "status", "--data-dir", str(data_dir))
    assert text.returncode == 0, text.stderr
    assert f"controller: {report['controller']}" in text.stdout
    assert text.stdout.count("running") >= 4  # ZooKeeper and three brokers
    assert "under-replicated partitions: 0" in text.stdout
    assert "offline partitions: 0" in text.stdout

    down = klog("cluster", "down", "--data-dir", str(data_dir))
    assert down.returncode == 0, down.stderr
    assert "stopped brokers 1, 2, 3 and ZooKeeper" in down.stderr
    assert not any(pid_alive(pid) for pid in pids)
    assert not (data_dir / STATE_FILE).exists()
    assert (data_dir / "broker-1" / "logs" / "meta.properties").is_file()  # data stays

    after = klog("cluster", "status", "--data-dir", str(data_dir))
    assert after.returncode == 1
    assert "no cluster in" in after.stderr and "Traceback" not in after.stderr


def test_status_reports_an_offline_partition(data_dir: Path, zookeeper_installed: None
                                             ) -> None:
    up = klog("cluster", "up", "-n", "2", "-d", str(data_dir),
              "-o", "zookeeper.session.timeout.ms=3000")
    assert up.returncode == 0, up.stderr
    state = read_state(data_dir)
    # A topic whose only replica is on broker 2, then broker 2 dies.
    created = klog("topic", "create", "lonely", "--partitions", "1", "--replicas", "1",
                   "-b", state.bootstrap_servers)
    assert created.returncode == 0, created.stderr
    pair = klog("topic", "create", "pair", "--partitions", "2", "--replicas", "2",
                "-b", state.bootstrap_servers)
    assert pair.returncode == 0, pair.stderr
    store = ZooKeeperMetadataStore(state.zookeeper_connect)
    store.start()
    try:
        data, _ = store.get(paths.topic_path("lonely"))
        owner = paths.TopicAssignment.decode(data, "lonely").partitions[0]
    finally:
        store.close()
    victim = next(b for b in state.brokers if b.broker_id in owner.replicas)
    os.kill(victim.pid, 9)

    def offline() -> list:
        report = _status(data_dir)
        return [r for r in report["offline_partitions"] if r["topic"] == "lonely"]

    rows = wait_until(offline, 30, "status to report lonely-0 offline")
    assert rows[0]["partition"] == 0 and rows[0]["leader"] == -1
    # pair's partition led by the victim moves to the survivor, alone in its ISR.
    survivor = 3 - victim.broker_id

    def under() -> list:
        return [r for r in _status(data_dir)["under_replicated_partitions"]
                if r["topic"] == "pair"]

    rows = wait_until(under, 30, "status to report a partition of pair under-replicated")
    assert all(r["leader"] == survivor and r["isr"] == [survivor] for r in rows)
    assert all(sorted(r["replicas"]) == [1, 2] for r in rows)
    report = _status(data_dir)
    dead = next(b for b in report["brokers"] if b["id"] == victim.broker_id)
    assert dead["process"] == "stopped" and not dead["registered"]
    text = klog("cluster", "status", "-d", str(data_dir))
    assert "offline partitions: 1" in text.stdout
    assert "lonely-0 leader -1" in text.stdout

    down = klog("cluster", "down", "-d", str(data_dir), "--purge")
    assert down.returncode == 0, down.stderr
    assert not data_dir.exists()


def test_up_on_an_external_zookeeper_with_a_chroot(data_dir: Path, zk_server) -> None:
    chroot = f"/cli-{os.getpid()}-{int(time.time() * 1000)}"
    up = klog("cluster", "up", "-n", "1", "-d", str(data_dir),
              "--zookeeper-connect", zk_server.connect + chroot)
    assert up.returncode == 0, up.stderr
    state = read_state(data_dir)
    assert state.zookeeper_pid is None
    root = ZooKeeperMetadataStore(zk_server.connect)
    root.start()
    try:
        assert root.get_children(chroot + paths.BROKER_IDS) == ["1"]
        report = _status(data_dir)
        assert report["zookeeper"]["running"] is None  # not ours
        assert report["controller"] == 1
        down = klog("cluster", "down", "-d", str(data_dir))
        assert down.returncode == 0, down.stderr
        assert "ZooKeeper" not in down.stderr
        assert zk_server.serving()  # an external ZooKeeper is left alone
        wait_until(lambda: root.get_children(chroot + paths.BROKER_IDS) == [], 20,
                   "the broker's registration to go")
    finally:
        root.close()


def test_a_broker_failing_at_startup_stops_everything(data_dir: Path,
                                                      zookeeper_installed: None) -> None:
    up = klog("cluster", "up", "-n", "2", "-d", str(data_dir),
              "-o", "num.partitions=lots", timeout=90)
    assert up.returncode == 1
    lines = up.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in up.stderr
    assert "exited at start-up" in lines[0]
    assert "num.partitions" in lines[0]
    assert not (data_dir / STATE_FILE).exists()
    # Nothing it started still runs: no process names this data dir.
    leftover = subprocess.run(["pgrep", "-f", str(data_dir)], capture_output=True, text=True)
    assert leftover.stdout.strip() == ""


def test_missing_java_is_one_line_saying_what_to_install(data_dir: Path) -> None:
    env = {**os.environ, "PATH": "/nonexistent"}
    up = klog("cluster", "up", "-d", str(data_dir), env=env)
    assert up.returncode == 1
    assert up.stderr.count("\n") == 1 and "Traceback" not in up.stderr
    assert "java" in up.stderr and "zookeeper" in up.stderr
    assert "--zookeeper-connect" in up.stderr


def test_usage_errors(data_dir: Path) -> None:
    result = klog("cluster", "up", "--brokers", "0", "-d", str(data_dir))
    assert result.returncode == 2
    result = klog("cluster", "up", "-o", "novalue", "-d", str(data_dir))
    assert result.returncode == 2 and "key=value" in result.stderr
    result = klog("cluster", "down", "-d", str(data_dir))
    assert result.returncode == 1 and "no cluster in" in result.stderr


def test_a_broker_whose_port_was_taken_starts_on_another(
        data_dir: Path, zk_server, monkeypatch: pytest.MonkeyPatch) -> None:
    import socket

    import klog.cluster_runner as runner

    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    ports = iter([taken.getsockname()[1]])
    real_free_port = runner.free_port
    monkeypatch.setattr(runner, "free_port", lambda *a: next(ports, None) or real_free_port())
    cluster = LocalCluster(data_dir)
    try:
        state = cluster.up(1, zookeeper_connect=f"{zk_server.connect}/taken-{os.getpid()}",
                           timeout=60)
        assert state.brokers[0].port != taken.getsockname()[1]
        assert read_state(data_dir).brokers[0].port == state.brokers[0].port
        assert "already in use" in Path(state.brokers[0].log_file).read_text()
        assert cluster.status()["brokers"][0]["registered"] is True
    finally:
        taken.close()
        cluster.down(timeout=10)
