"""A real, throwaway ZooKeeper server for tests (standalone, loopback, temporary dataDir).

Uses the system's installation (Debian's ``zookeeper`` package: /usr/share/java/zookeeper.jar,
whose manifest class path pulls in its dependencies), started the way Debian's zkServer.sh
does, ``java -cp ... org.apache.zookeeper.server.ZooKeeperServerMain <zoo.cfg>``, with the
admin HTTP server off and the ``ruok``/``srvr``/``stat``/``mntr`` commands allowed; it is
ready when ``srvr`` reports its mode.

    from tests.zkserver import ZooKeeperServer, zookeeper_unavailable_reason

    with ZooKeeperServer(tmp_path / "zk") as zk:
        store = ZooKeeperMetadataStore(zk.connect + "/kafka")

``stop()`` (SIGTERM) and ``kill()`` (SIGKILL) followed by ``start()`` restart it on the same
port and dataDir, for tests of connection loss. ``connect`` is "127.0.0.1:<port>".

As a pytest fixture: import ``zk_server`` into a conftest.py (``from tests.zkserver import
zk_server  # noqa: F401``) to get one server for the whole session, skipped with the reason
when java or the jars are missing. Tests sharing it isolate themselves with a chroot
(``zk_server.connect + "/my-test"``).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType

import pytest

JAVA_DIR = Path("/usr/share/java")
ZOOKEEPER_JAR = JAVA_DIR / "zookeeper.jar"
MAIN_CLASS = "org.apache.zookeeper.server.ZooKeeperServerMain"


def zookeeper_classpath() -> str | None:
    """The class path to run ZooKeeper, or None when it is not installed."""
    if not ZOOKEEPER_JAR.is_file():
        return None
    parts = [str(ZOOKEEPER_JAR)]
    # Without a binding slf4j stays silent; with slf4j-simple the server's log lands in
    # <directory>/zookeeper.log, which helps when a test fails.
    simple = JAVA_DIR / "slf4j-simple.jar"
    if simple.is_file():
        parts.append(str(simple))
    return os.pathsep.join(parts)


def java_executable() -> str | None:
    return shutil.which("java")


def zookeeper_unavailable_reason() -> str | None:
    """Why a real ZooKeeper cannot run here, or None if it can."""
    if java_executable() is None:
        return "no `java` on PATH (install a JRE and Debian's `zookeeper` package)"
    if zookeeper_classpath() is None:
        return f"ZooKeeper jars not found ({ZOOKEEPER_JAR}; install Debian's `zookeeper`)"
    return None


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def four_letter_word(port: int, word: str, timeout: float = 1.0) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(word.encode("ascii"))
        chunks = []
        while True:
            chunk = s.recv(4096)
            if not chunk:
                return b"".join(chunks)
            chunks.append(chunk)


class ExitedAtStartup(RuntimeError):
    pass


class ZooKeeperServer:
    """One standalone ZooKeeper process; see the module docstring."""

    def __init__(
        self,
        directory: Path,
        port: int | None = None,
        tick_time_ms: int = 500,
        max_session_timeout_ms: int = 60000,
    ) -> None:
        self.directory = Path(directory)
        self._pick_port = port is None  # retry on another port if this one gets taken
        self.port = port or free_port()
        self.tick_time_ms = tick_time_ms
        self.max_session_timeout_ms = max_session_timeout_ms
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def connect(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.directory / "zookeeper.log"

    def _write_config(self) -> Path:
        data_dir = self.directory / "data"
        data_dir.mkdir(parents=True, exist_ok=True)
        cfg = self.directory / "zoo.cfg"
        cfg.write_text(
            f"tickTime={self.tick_time_ms}\n"
            f"dataDir={data_dir}\n"
            f"clientPort={self.port}\n"
            "clientPortAddress=127.0.0.1\n"
            f"minSessionTimeout={2 * self.tick_time_ms}\n"
            f"maxSessionTimeout={self.max_session_timeout_ms}\n"
            "maxClientCnxns=0\n"
            "admin.enableServer=false\n"
            "4lw.commands.whitelist=ruok,srvr,stat,mntr\n"
        )
        return cfg

    def start(self, timeout: float = 30.0) -> None:
        reason = zookeeper_unavailable_reason()
        if reason is not None:
            raise RuntimeError(reason)
        if self.process is not None and self.process.poll() is None:
            return
        for attempt in range(3):
            try:
                self._launch(timeout)
                self._pick_port = False  # a restart must come back on the same port
                return
            except ExitedAtStartup:
                # The free port we picked may have been taken before ZooKeeper bound it.
                if not self._pick_port or attempt == 2:
                    raise
                self.port = free_port()

    def _launch(self, timeout: float) -> None:
        cfg = self._write_config()
        java = java_executable()
        assert java is not None
        cmd = [
            java,
            # A test server: small heap, quick JIT start, no fsync per transaction.
            "-Xmx256m",
            "-XX:+UseSerialGC",
            "-XX:TieredStopAtLevel=1",
            "-Dzookeeper.forceSync=no",
            "-Dorg.slf4j.simpleLogger.defaultLogLevel=info",
            "-Dorg.slf4j.simpleLogger.showDateTime=true",
            "-Dorg.slf4j.simpleLogger.dateTimeFormat=HH:mm:ss.SSS",
            "-cp",
            zookeeper_classpath() or "",
            MAIN_CLASS,
            str(cfg),
        ]
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        self._wait_ready(timeout)

    def _wait_ready(self, timeout: float) -> None:
        assert self.process is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise ExitedAtStartup(
                    f"ZooKeeper exited with {self.process.returncode} at start-up; "
                    f"see {self.log_path}:\n{self._log_tail()}"
                )
            if self.serving():
                return
            time.sleep(0.05)
        self.kill()
        raise RuntimeError(f"ZooKeeper not ready within {timeout} s; see {self.log_path}")

    def _log_tail(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-2000:]
        except OSError:
            return ""

    def ruok(self) -> bool:
        try:
            return four_letter_word(self.port, "ruok") == b"imok"
        except OSError:
            return False

    def serving(self) -> bool:
        """True once the server answers requests: ``ruok`` says imok as soon as the port is
        open, ``srvr`` reports a mode only after the database is loaded."""
        try:
            return b"Mode:" in four_letter_word(self.port, "srvr")
        except OSError:
            return False

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM and wait (SIGKILL if it does not exit in time)."""
        self._end(signal.SIGTERM, timeout)

    def kill(self) -> None:
        """SIGKILL: a crash, for tests of connection loss."""
        self._end(signal.SIGKILL, 10.0)

    def _end(self, sig: signal.Signals, timeout: float) -> None:
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        process.send_signal(sig)
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

    def __enter__(self) -> ZooKeeperServer:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


@pytest.fixture(scope="session")
def zk_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeperServer]:
    """One real ZooKeeper for the whole test session (see the module docstring)."""
    reason = zookeeper_unavailable_reason()
    if reason is not None:
        pytest.skip(f"real ZooKeeper unavailable: {reason}")
    server = ZooKeeperServer(tmp_path_factory.mktemp("zookeeper"))
    server.start()
    yield server
    server.stop()
