"""The chaos harness in CI: a bounded run of a few nemeses on a 3-node ZooKeeper ensemble,
an interrupted run that must leave nothing behind, and the refusal to run without root.

Each run is ``python -m tests.chaos`` in a subprocess (it changes the machine's network:
namespaces, a bridge, nft rules), judged by its JSON result. Without root or network
namespaces the runs are skipped with the reason (tests/chaos/net.py
``unavailable_reason``), never passed. The long form is ``make chaos``.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.chaos import net
from tests.chaos.__main__ import EXIT_UNAVAILABLE, main
from tests.chaos.net import unavailable_reason

REPO = Path(__file__).resolve().parents[2]
REASON = unavailable_reason()
needs_namespaces = pytest.mark.skipif(REASON is not None,
                                      reason=f"chaos harness cannot run here: {REASON}")


def _chaos(*args: str, timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tests.chaos", *args], cwd=REPO,
                          capture_output=True, text=True, timeout=timeout, check=False)


def _leftovers(slot: int) -> tuple[list[str], list[str]]:
    return net._names_of(slot)


@needs_namespaces
def test_bounded_run_finds_no_anomaly(tmp_path: Path) -> None:
    """Partitions, the isolated leader, kill -9 and a ZooKeeper node killed: every
    acknowledged record once and in order, transactions and group offsets intact."""
    result_file = tmp_path / "result.json"
    proc = _chaos("--seed", "29", "--duration", "50", "--zookeepers", "3",
                  "--nemeses", "partition-halves,leader-isolated,kill,zk-kill",
                  "--hold", "5,8", "--quiet", "3,5", "--json", str(result_file),
                  "--out", str(tmp_path / "run"), timeout=400)
    assert result_file.exists(), proc.stdout[-3000:] + proc.stderr[-3000:]
    result = json.loads(result_file.read_text())
    assert proc.returncode == 0, (
        f"exit {proc.returncode}; anomalies: {result.get('anomalies')}; error: "
        f"{result.get('error')}; logs kept in {result.get('logs')}\n{proc.stdout[-3000:]}")
    assert result["valid"] and result["seed"] == 29
    kinds = {e["kind"] for e in result["events"]}
    assert kinds == {"partition-halves", "leader-isolated", "kill", "zk-kill"}
    assert all(e["heal"] is not None and e["heal"] > e["start"] for e in result["events"])
    work = result["workloads"]
    for name in ("idempotent", "klog", "group-feed"):
        assert work[name]["acked"] > 100 and work[name]["acked_after_recovery"] > 0
        assert work[name]["lost"] == work[name]["duplicated"] == work[name]["reordered"] == 0
    assert work["transactions"]["committed"] > 10 and work["transactions"]["aborted"] > 0
    assert work["reader"]["read"] > 0 and work["reader"]["phantom_reads"] == 0
    assert work["group"]["leaves"] > 0 and work["group"]["backwards"] == 0
    assert set(result["table"]) >= kinds
    assert not (tmp_path / "run").exists()  # a passing run removes its logs
    assert _leftovers(result["network"]["slot"]) == ([], [])


@needs_namespaces
def test_an_interrupted_run_leaves_nothing_behind(tmp_path: Path) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.chaos", "--seed", "7", "--duration", "120",
         "--zookeepers", "1", "--nemeses", "latency-loss,pause", "--hold", "20,20",
         "--json", str(tmp_path / "result.json"), "--out", str(tmp_path / "run")],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert proc.stdout is not None
    lines = []
    try:
        deadline = time.monotonic() + 180
        for line in proc.stdout:
            lines.append(line)
            # Interrupt while a fault is on: a delayer or a stopped broker to undo.
            if re.match(r"\s+[\d.]+ s  (latency-loss|pause) ", line):
                break
            assert time.monotonic() < deadline, "".join(lines)
        time.sleep(2)
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    result = json.loads((tmp_path / "result.json").read_text())
    assert result["valid"] is False and "SystemExit" in result["error"]
    assert (tmp_path / "run" / "b1.log").exists()  # a failed run keeps its logs
    slot = result["network"]["slot"]
    assert _leftovers(slot) == ([], []), "".join(lines) + out
    assert not (net.SLOT_DIR / f"slot-{slot}").exists()
    pids = subprocess.run(["pgrep", "-f", str(tmp_path / "run")], capture_output=True,
                          text=True, check=False).stdout.split()
    assert pids == [], f"processes of the run still alive: {pids}"


def test_without_namespaces_the_harness_says_so(monkeypatch: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(net, "_has_cap_net_admin", lambda: False)
    reason = net.unavailable_reason()
    assert reason is not None and "root" in reason
    monkeypatch.setattr("tests.chaos.__main__.unavailable_reason", net.unavailable_reason)
    assert main(["--seed", "1", "--duration", "1"]) == EXIT_UNAVAILABLE
    assert "cannot run here" in capsys.readouterr().err
    assert os.environ.get("CI") != "true" or REASON is None, \
        f"CI runs as root and must run the chaos tests: {REASON}"
