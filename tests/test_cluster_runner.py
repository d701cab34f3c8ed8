"""klog/cluster_runner.py without a cluster: the state file, finding and ending processes by
pid, refusals. (Starting real clusters: tests/cluster/test_cluster_cli.py.)"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from klog.cluster_runner import (
    STATE_FILE,
    BrokerProcess,
    ClusterError,
    ClusterState,
    LocalCluster,
    default_data_dir,
    pid_alive,
    read_state,
    terminate,
    write_state,
    zookeeper_unavailable_reason,
)


@pytest.fixture
def spawn() -> Iterator[object]:
    started: list[subprocess.Popen[bytes]] = []

    def run(code: str, *args: str) -> subprocess.Popen[bytes]:
        proc = subprocess.Popen([sys.executable, "-c", code, *args])
        started.append(proc)
        # The kernel shows the child's own command line a moment after Popen returns (the
        # parent's or an empty one meanwhile); a broker found through a state file has
        # long had its own. Until then pid_alive(pid, marker) says no, as it should.
        deadline = time.monotonic() + 10
        while args and args[-1].encode() not in Path(f"/proc/{proc.pid}/cmdline").read_bytes():
            assert time.monotonic() < deadline, "the child never showed its command line"
            time.sleep(0.01)
        return proc

    yield run
    for proc in started:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


SLEEPER = "import time; time.sleep(60)"
STUBBORN = ("import signal, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
            "print('ready', flush=True); time.sleep(60)")


def _state(tmp_path: Path, pid: int = 4242) -> ClusterState:
    return ClusterState(
        data_dir=str(tmp_path), zookeeper_connect="127.0.0.1:2181/x",
        brokers=[BrokerProcess(1, 9001, pid, str(tmp_path / "broker-1"),
                               str(tmp_path / "broker-1.log"))],
        zookeeper_pid=None, zookeeper_port=None)


def test_state_file_round_trip(tmp_path: Path) -> None:
    state = _state(tmp_path)
    write_state(state)
    back = read_state(tmp_path)
    assert back == state
    assert back.bootstrap_servers == "127.0.0.1:9001"
    assert (tmp_path / STATE_FILE).read_text().count("bootstrap_servers") == 1


@pytest.mark.parametrize("content, message", [
    (None, "no cluster in"),
    ("{not json", "cannot read"),
    ('{"version": 99}', "unknown state file version"),
    ('{"version": 1, "brokers": []}', "not a klog cluster state file"),
    ('{"version": 1, "data_dir": "d", "zookeeper_connect": "z", "brokers": [{"pid": 1}]}',
     "not a klog cluster state file"),
])
def test_bad_state_files_are_one_line_errors(tmp_path: Path, content: str | None,
                                             message: str) -> None:
    if content is not None:
        (tmp_path / STATE_FILE).write_text(content)
    with pytest.raises(ClusterError, match=message) as info:
        read_state(tmp_path)
    assert "\n" not in str(info.value)


def test_pid_alive(spawn, tmp_path: Path) -> None:
    marker = str(tmp_path / "broker-7" / "logs")
    proc = spawn(SLEEPER, marker)
    # Popen returns once the child execs, but the kernel sets the new command line a moment
    # later (an empty /proc/<pid>/cmdline meanwhile): wait for it, as a state file's pid
    # is always read long after its broker started.
    deadline = time.monotonic() + 10
    while not Path(f"/proc/{proc.pid}/cmdline").read_bytes():
        assert time.monotonic() < deadline
        time.sleep(0.01)
    assert pid_alive(proc.pid)
    assert pid_alive(proc.pid, marker)
    assert not pid_alive(proc.pid, str(tmp_path / "someone-else"))  # a reused pid
    assert not pid_alive(None) and not pid_alive(0) and not pid_alive(-1)
    proc.kill()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and pid_alive(proc.pid):  # a zombie counts as dead
        time.sleep(0.01)
    assert not pid_alive(proc.pid)
    proc.wait()
    assert not pid_alive(proc.pid)


def test_terminate_sigterm_then_sigkill(spawn) -> None:
    polite = spawn(SLEEPER, "polite")
    stubborn = subprocess.Popen([sys.executable, "-c", STUBBORN, "stubborn"],
                                stdout=subprocess.PIPE)
    try:
        assert stubborn.stdout is not None and stubborn.stdout.readline() == b"ready\n"
        started = time.monotonic()
        killed = terminate([(polite.pid, "polite"), (stubborn.pid, "stubborn")], 1.0)
        assert killed == [stubborn.pid]
        assert time.monotonic() - started < 5
        assert polite.wait(5) != 0 and stubborn.wait(5) == -9
    finally:
        if stubborn.poll() is None:
            stubborn.kill()
        stubborn.wait()


def test_terminate_leaves_a_process_that_is_not_ours(spawn) -> None:
    other = spawn(SLEEPER, "other")
    assert terminate([(other.pid, "not-this-one")], 0.5) == []
    assert other.poll() is None


def test_up_refuses_while_a_cluster_runs(spawn, tmp_path: Path) -> None:
    proc = spawn(SLEEPER, str(tmp_path / "broker-1" / "logs"))
    write_state(_state(tmp_path, proc.pid))
    with pytest.raises(ClusterError, match="already running"):
        LocalCluster(tmp_path).up(1)
    assert proc.poll() is None  # refused, nothing stopped


def test_down_stops_what_the_state_file_names(spawn, tmp_path: Path) -> None:
    proc = spawn(SLEEPER, str(tmp_path / "broker-1" / "logs"))
    write_state(_state(tmp_path, proc.pid))
    result = LocalCluster(tmp_path).down(timeout=5)
    assert result["stopped_brokers"] == [1] and result["killed_pids"] == []
    assert proc.wait(5) != 0
    assert not (tmp_path / STATE_FILE).exists()
    with pytest.raises(ClusterError, match="no cluster in"):
        LocalCluster(tmp_path).down()


def test_up_needs_a_broker(tmp_path: Path) -> None:
    with pytest.raises(ClusterError, match="at least 1"):
        LocalCluster(tmp_path).up(0)


def test_unreachable_zookeeper_is_reported(tmp_path: Path) -> None:
    import socket

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    started = time.monotonic()
    with pytest.raises(ClusterError, match="cannot reach ZooKeeper"):
        LocalCluster(tmp_path).up(1, zookeeper_connect=f"127.0.0.1:{port}", timeout=2)
    assert time.monotonic() - started < 10
    assert not (tmp_path / STATE_FILE).exists()


def test_missing_java_names_what_to_install(monkeypatch: pytest.MonkeyPatch,
                                            tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    reason = zookeeper_unavailable_reason()
    assert reason is not None and "java" in reason and "zookeeper" in reason
    with pytest.raises(ClusterError, match="cannot start ZooKeeper: no `java`"):
        LocalCluster(tmp_path / "c").up(1)


def test_default_data_dir(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("KLOG_CLUSTER_DIR", str(tmp_path / "explicit"))
    assert default_data_dir() == tmp_path / "explicit"
    monkeypatch.delenv("KLOG_CLUSTER_DIR")
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    assert default_data_dir() == tmp_path / "state" / "klog" / "cluster"
