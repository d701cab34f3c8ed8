"""The chaos harness's hosts: ZooKeeper nodes and klog brokers, each in its namespace.

A ``Node`` is one process started with ``ip netns exec <ns> ...`` (which execs, so the
pid is the program's own) in a session of its own, logging to ``<dir>/<name>.log``; it can
be killed (SIGKILL), stopped (SIGTERM), paused (SIGSTOP), resumed and started again on the
same address and data.

``ZooKeeperNode``: Debian's ZooKeeper run as klog's ``ZooKeeperServer`` runs it (the same
java command line), bound to its host's address, standalone or one of a 3-node ensemble
(server.N lines, myid). ``BrokerNode``: ``python -m klog broker start`` with a listener on
its host's address and ``zookeeper.connect`` naming every ZooKeeper node.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from klog.cluster_runner import ZOOKEEPER_MAIN_CLASS, ZooKeeperServer

ZK_CLIENT_PORT = 2181
BROKER_PORT = 9092
REPO = Path(__file__).resolve().parents[2]
QUORUM_MAIN_CLASS = "org.apache.zookeeper.server.quorum.QuorumPeerMain"


def four_letter_word(host: str, port: int, word: str, timeout: float = 1.0) -> bytes:
    with socket.create_connection((host, port), timeout=timeout) as s:
        s.sendall(word.encode("ascii"))
        chunks: list[bytes] = []
        while chunk := s.recv(4096):
            chunks.append(chunk)
        return b"".join(chunks)


class Node:
    def __init__(self, name: str, exec_prefix: Sequence[str], address: str,
                 directory: Path) -> None:
        self.name = name
        self.exec_prefix = list(exec_prefix)
        self.address = address
        self.directory = directory
        self.process: subprocess.Popen[bytes] | None = None
        self.paused = False

    @property
    def log_file(self) -> Path:
        return self.directory.parent / f"{self.name}.log"

    def command(self) -> list[str]:
        raise NotImplementedError

    def start(self) -> None:
        if self.alive:
            return
        self.directory.mkdir(parents=True, exist_ok=True)
        with open(self.log_file, "ab") as log:
            log.write(f"\n=== start {time.strftime('%H:%M:%S')} ===\n".encode())
            log.flush()
            self.process = subprocess.Popen(
                self.exec_prefix + self.command(), stdout=log, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, start_new_session=True, cwd=REPO)
        self.paused = False

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.alive and self.process else None

    def signal(self, sig: signal.Signals) -> None:
        if self.alive and self.process is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.process.pid, sig)

    def kill(self) -> None:
        if self.process is None:
            return
        self.signal(signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(10)
        self.paused = False

    def stop(self, timeout: float = 30.0) -> int | None:
        if self.process is None:
            return None
        self.resume()
        self.signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            return None

    def pause(self) -> None:
        self.signal(signal.SIGSTOP)
        self.paused = True

    def resume(self) -> None:
        self.signal(signal.SIGCONT)
        self.paused = False

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_file.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


class ZooKeeperNode(Node):
    def __init__(self, name: str, exec_prefix: Sequence[str], address: str, directory: Path,
                 myid: int, ensemble: Mapping[int, str]) -> None:
        super().__init__(name, exec_prefix, address, directory)
        self.myid = myid
        self.ensemble = dict(ensemble)  # myid -> address (one entry: standalone)

    @property
    def connect(self) -> str:
        return f"{self.address}:{ZK_CLIENT_PORT}"

    def command(self) -> list[str]:
        data = self.directory / "data"
        data.mkdir(parents=True, exist_ok=True)
        cfg = self.directory / "zoo.cfg"
        lines = [
            "tickTime=500",
            f"dataDir={data}",
            f"clientPort={ZK_CLIENT_PORT}",
            f"clientPortAddress={self.address}",
            "minSessionTimeout=1000",
            "maxSessionTimeout=60000",
            "maxClientCnxns=0",
            "admin.enableServer=false",
            "4lw.commands.whitelist=ruok,srvr,stat,mntr",
        ]
        if len(self.ensemble) > 1:
            lines += ["initLimit=20", "syncLimit=6", "standaloneEnabled=false",
                      "reconfigEnabled=false"]
            lines += [f"server.{i}={addr}:2888:3888" for i, addr in sorted(self.ensemble.items())]
            (data / "myid").write_text(f"{self.myid}\n")
        cfg.write_text("\n".join(lines) + "\n")
        cmd = ZooKeeperServer(self.directory, heap="128m").command(cfg)
        # ZooKeeperServerMain ignores server.N lines: an ensemble member runs QuorumPeerMain.
        return [QUORUM_MAIN_CLASS if part == ZOOKEEPER_MAIN_CLASS else part for part in cmd]

    def mode(self) -> str | None:
        """"standalone", "leader" or "follower" once serving, else None."""
        try:
            text = four_letter_word(self.address, ZK_CLIENT_PORT, "srvr").decode(
                errors="replace")
        except OSError:
            return None
        for line in text.splitlines():
            if line.startswith("Mode:"):
                return line.split(":", 1)[1].strip()
        return None


class BrokerNode(Node):
    def __init__(self, name: str, exec_prefix: Sequence[str], address: str, directory: Path,
                 broker_id: int, settings: Mapping[str, str]) -> None:
        super().__init__(name, exec_prefix, address, directory)
        self.broker_id = broker_id
        self.settings = dict(settings)

    @property
    def bootstrap(self) -> str:
        return f"{self.address}:{BROKER_PORT}"

    @property
    def log_dir(self) -> Path:
        return self.directory / "logs"

    def command(self) -> list[str]:
        settings = {
            "broker.id": str(self.broker_id),
            "listeners": f"PLAINTEXT://{self.address}:{BROKER_PORT}",
            "log.dirs": str(self.log_dir),
            **self.settings,
        }
        cmd = [sys.executable, "-m", "klog", "broker", "start"]
        for key, value in settings.items():
            cmd += ["--override", f"{key}={value}"]
        return cmd
