"""A local cluster for trying klog: a ZooKeeper from the system's installation and N
``klog broker start`` processes on loopback ports, found again through a state file.

Owns two things:

- ``ZooKeeperServer``: one standalone ZooKeeper process (Debian's ``zookeeper`` package:
  /usr/share/java/zookeeper.jar, whose manifest class path pulls in its dependencies), run
  as Debian's zkServer.sh runs it, ``java -cp ... ZooKeeperServerMain <zoo.cfg>``, bound
  to 127.0.0.1 with the admin HTTP server off and ``ruok``/``srvr``/``stat``/``mntr``
  allowed; ready when ``srvr`` reports its mode. The test fixture (tests/zkserver.py) and
  ``klog cluster up`` share it.
- ``LocalCluster``: ``up`` starts the ZooKeeper (unless an external ``zookeeper.connect``
  is given) and the brokers as detached processes (their own session, so they outlive the
  command), with everything under one data directory::

      <data-dir>/cluster.json        the state file: pids, ports, directories
      <data-dir>/zookeeper/          zoo.cfg, data/, zookeeper.log
      <data-dir>/broker-<id>/logs    a broker's log.dirs; broker-<id>.log its output

  ``status`` asks the brokers (klog's admin client: DescribeCluster and Metadata) for the
  brokers, the controller and the under-replicated and offline partitions; ``down``
  SIGTERMs the brokers, then ZooKeeper, waits, and removes the state file (the data stays
  for the next ``up`` unless purged).

Errors the user can act on (java missing, a cluster already running, a broker that exited
at start-up) are ``ClusterError`` with a one-line message. Nothing here is thread-safe; one
command at a time owns a data directory.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

JAVA_DIR = Path("/usr/share/java")
ZOOKEEPER_JAR = JAVA_DIR / "zookeeper.jar"
ZOOKEEPER_MAIN_CLASS = "org.apache.zookeeper.server.ZooKeeperServerMain"
STATE_FILE = "cluster.json"
STATE_VERSION = 1
LOOPBACK = "127.0.0.1"


class ClusterError(RuntimeError):
    """A problem with a one-line explanation for the user."""


# -- ZooKeeper -------------------------------------------------------------------------------


def zookeeper_classpath() -> str | None:
    """The class path to run ZooKeeper, or None when it is not installed."""
    if not ZOOKEEPER_JAR.is_file():
        return None
    parts = [str(ZOOKEEPER_JAR)]
    # Without a binding slf4j stays silent; with slf4j-simple the server's log lands in
    # <directory>/zookeeper.log, which helps when something fails.
    simple = JAVA_DIR / "slf4j-simple.jar"
    if simple.is_file():
        parts.append(str(simple))
    return os.pathsep.join(parts)


def java_executable() -> str | None:
    return shutil.which("java")


def zookeeper_unavailable_reason() -> str | None:
    """Why a ZooKeeper cannot run here (and what to install), or None if it can."""
    if java_executable() is None:
        return "no `java` on PATH (install a JRE and Debian's `zookeeper` package)"
    if zookeeper_classpath() is None:
        return f"ZooKeeper jars not found ({ZOOKEEPER_JAR}; install Debian's `zookeeper`)"
    return None


def free_port(host: str = LOOPBACK) -> int:
    """A TCP port that was free a moment ago on ``host``."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def four_letter_word(port: int, word: str, timeout: float = 1.0) -> bytes:
    with socket.create_connection((LOOPBACK, port), timeout=timeout) as s:
        s.sendall(word.encode("ascii"))
        chunks: list[bytes] = []
        while True:
            chunk = s.recv(4096)
            if not chunk:
                return b"".join(chunks)
            chunks.append(chunk)


class ExitedAtStartup(ClusterError):
    pass


class ZooKeeperServer:
    """One standalone ZooKeeper process (see the module docstring).

    ``stop()`` (SIGTERM) and ``kill()`` (SIGKILL) followed by ``start()`` restart it on the
    same port and dataDir. It runs in its own session (no terminal signals), so it can
    outlive the Python process that started it (``klog cluster up``). ``connect`` is
    "127.0.0.1:<port>".
    """

    def __init__(
        self,
        directory: Path,
        port: int | None = None,
        tick_time_ms: int = 500,
        max_session_timeout_ms: int = 60000,
        heap: str = "256m",
    ) -> None:
        self.directory = Path(directory)
        self._pick_port = port is None  # retry on another port if this one gets taken
        self.port = port or free_port()
        self.tick_time_ms = tick_time_ms
        self.max_session_timeout_ms = max_session_timeout_ms
        self.heap = heap
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def connect(self) -> str:
        return f"{LOOPBACK}:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.directory / "zookeeper.log"

    @property
    def pid(self) -> int | None:
        return None if self.process is None else self.process.pid

    def command(self, config: Path) -> list[str]:
        java = java_executable()
        if java is None:
            raise ClusterError(zookeeper_unavailable_reason() or "no java")
        return [
            java,
            # Small heap, quick JIT start, no fsync per transaction: a local server.
            f"-Xmx{self.heap}",
            "-XX:+UseSerialGC",
            "-XX:TieredStopAtLevel=1",
            "-Dzookeeper.forceSync=no",
            "-Dorg.slf4j.simpleLogger.defaultLogLevel=info",
            "-Dorg.slf4j.simpleLogger.showDateTime=true",
            "-Dorg.slf4j.simpleLogger.dateTimeFormat=HH:mm:ss.SSS",
            "-cp",
            zookeeper_classpath() or "",
            ZOOKEEPER_MAIN_CLASS,
            str(config),
        ]

    def _write_config(self) -> Path:
        data_dir = self.directory / "data"
        data_dir.mkdir(parents=True, exist_ok=True)
        cfg = self.directory / "zoo.cfg"
        cfg.write_text(
            f"tickTime={self.tick_time_ms}\n"
            f"dataDir={data_dir}\n"
            f"clientPort={self.port}\n"
            f"clientPortAddress={LOOPBACK}\n"
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
            raise ClusterError(reason)
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
        cmd = self.command(self._write_config())
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True, close_fds=True,
            )
        self._wait_ready(timeout)

    def _wait_ready(self, timeout: float) -> None:
        assert self.process is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise ExitedAtStartup(
                    f"ZooKeeper exited with {self.process.returncode} at start-up; "
                    f"see {self.log_path}:\n{log_tail(self.log_path)}"
                )
            if self.serving():
                return
            time.sleep(0.05)
        self.kill()
        raise ClusterError(f"ZooKeeper not ready within {timeout} s; see {self.log_path}")

    def ruok(self) -> bool:
        try:
            return four_letter_word(self.port, "ruok") == b"imok"
        except OSError:
            return False

    def serving(self) -> bool:
        """True once the server answers requests: ``ruok`` says imok as soon as the port is
        open, ``srvr`` reports a mode only after the database is loaded."""
        return zookeeper_serving(self.port)

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

    def __exit__(self, *exc: object) -> None:
        self.stop()


def zookeeper_serving(port: int) -> bool:
    try:
        return b"Mode:" in four_letter_word(port, "srvr")
    except OSError:
        return False


def log_tail(path: Path, lines: int = 20) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


# -- processes by pid ------------------------------------------------------------------------


def pid_alive(pid: int | None, marker: str | None = None) -> bool:
    """True if ``pid`` runs (not a zombie) and, with ``marker``, its command line contains
    it: a pid from an old state file may since belong to someone else."""
    if not pid or pid <= 0:
        return False
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(
            errors="replace")
    except OSError:
        try:
            os.kill(pid, 0)  # no /proc: fall back to a signal probe
        except (ProcessLookupError, PermissionError):
            return False
        return marker is None
    # Field 3 (after the parenthesised command name) is the state; Z = zombie, X = dead.
    state = stat.rsplit(")", 1)[-1].split()[0] if ")" in stat else "?"
    if state in ("Z", "X"):
        return False
    return marker is None or marker in cmdline


def terminate(pids: Sequence[tuple[int, str]], timeout: float) -> list[int]:
    """SIGTERM every live (pid, marker), wait up to ``timeout`` s for all, then SIGKILL the
    rest; returns the pids that had to be killed."""
    live = [(pid, marker) for pid, marker in pids if pid_alive(pid, marker)]
    for pid, _marker in live:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    # A zombie counts as gone (pid_alive): reaping is its parent's business, and a waitpid
    # here would steal the exit status from a Popen that owns the child.
    while time.monotonic() < deadline and any(pid_alive(p, m) for p, m in live):
        time.sleep(0.05)
    killed = []
    for pid, marker in live:
        if pid_alive(pid, marker):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            killed.append(pid)
    return killed


# -- the state file ---------------------------------------------------------------------------


@dataclass
class BrokerProcess:
    broker_id: int
    port: int
    pid: int
    data_dir: str
    log_file: str

    @property
    def bootstrap(self) -> str:
        return f"{LOOPBACK}:{self.port}"

    @property
    def marker(self) -> str:
        # Every broker's command line names its own log dir.
        return str(Path(self.data_dir) / "logs")


@dataclass
class ClusterState:
    data_dir: str
    zookeeper_connect: str
    brokers: list[BrokerProcess] = field(default_factory=list)
    zookeeper_pid: int | None = None  # None: an external ZooKeeper, not ours to stop
    zookeeper_port: int | None = None
    version: int = STATE_VERSION

    @property
    def bootstrap_servers(self) -> str:
        return ",".join(b.bootstrap for b in self.brokers)

    @property
    def zookeeper_marker(self) -> str:
        return str(Path(self.data_dir) / "zookeeper" / "zoo.cfg")

    def to_json(self) -> dict[str, Any]:
        doc = asdict(self)
        doc["bootstrap_servers"] = self.bootstrap_servers
        return doc

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> ClusterState:
        if doc.get("version") != STATE_VERSION:
            raise ClusterError(f"unknown state file version {doc.get('version')!r}")
        return cls(
            data_dir=str(doc["data_dir"]),
            zookeeper_connect=str(doc["zookeeper_connect"]),
            brokers=[BrokerProcess(int(b["broker_id"]), int(b["port"]), int(b["pid"]),
                                   str(b["data_dir"]), str(b["log_file"]))
                     for b in doc["brokers"]],
            zookeeper_pid=doc.get("zookeeper_pid"),
            zookeeper_port=doc.get("zookeeper_port"),
        )


def default_data_dir() -> Path:
    """$KLOG_CLUSTER_DIR, else $XDG_STATE_HOME/klog/cluster (~/.local/state/klog/cluster)."""
    explicit = os.environ.get("KLOG_CLUSTER_DIR")
    if explicit:
        return Path(explicit)
    state_home = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(state_home) / "klog" / "cluster"


def read_state(data_dir: Path) -> ClusterState:
    path = Path(data_dir) / STATE_FILE
    try:
        doc = json.loads(path.read_text())
    except FileNotFoundError:
        raise ClusterError(f"no cluster in {data_dir} (no {STATE_FILE}; "
                           "start one with `klog cluster up`)") from None
    except (OSError, ValueError) as e:
        raise ClusterError(f"cannot read {path}: {e}") from None
    try:
        return ClusterState.from_json(doc)
    except (KeyError, TypeError, ValueError) as e:
        raise ClusterError(f"{path} is not a klog cluster state file ({e})") from None


def write_state(state: ClusterState) -> None:
    path = Path(state.data_dir) / STATE_FILE
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(state.to_json(), indent=2) + "\n")
    os.replace(tmp, path)


# -- the cluster -------------------------------------------------------------------------------


class LocalCluster:
    """``up`` / ``status`` / ``down`` of the cluster in one data directory."""

    def __init__(self, data_dir: Path | None = None) -> None:
        self.data_dir = Path(data_dir or default_data_dir()).resolve()

    # -- up

    def up(self, brokers: int, zookeeper_connect: str | None = None,
           overrides: Mapping[str, str] | None = None, timeout: float = 60.0) -> ClusterState:
        """Start ZooKeeper (unless ``zookeeper_connect``) and ``brokers`` brokers (ids
        1..N); return once each listens, is registered in ZooKeeper and a controller is
        elected. On failure everything started is stopped again."""
        if brokers < 1:
            raise ClusterError("--brokers must be at least 1")
        self._refuse_running()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        zk: ZooKeeperServer | None = None
        state = ClusterState(str(self.data_dir), zookeeper_connect or "")
        try:
            if zookeeper_connect is None:
                reason = zookeeper_unavailable_reason()
                if reason is not None:
                    raise ClusterError(f"cannot start ZooKeeper: {reason}, or pass "
                                       "--zookeeper-connect HOST:PORT")
                zk = ZooKeeperServer(self.data_dir / "zookeeper", max_session_timeout_ms=60000)
                zk.start(timeout=timeout)
                state.zookeeper_pid, state.zookeeper_port = zk.pid, zk.port
                state.zookeeper_connect = zk.connect
            self._check_zookeeper(state.zookeeper_connect, min(10.0, timeout))
            for broker_id in range(1, brokers + 1):
                state.brokers.append(
                    self._launch_broker(state, broker_id, brokers, overrides or {}))
                write_state(state)  # so `down` finds whatever was started
            write_state(state)

            def relaunch(broker_id: int) -> BrokerProcess:
                return self._launch_broker(state, broker_id, brokers, overrides or {})

            self._wait_serving(state, timeout, relaunch)
        except BaseException:
            self._stop(state)
            with contextlib.suppress(OSError):
                (self.data_dir / STATE_FILE).unlink()
            raise
        return state

    def _refuse_running(self) -> None:
        try:
            state = read_state(self.data_dir)
        except ClusterError:
            return
        running = [b.broker_id for b in state.brokers if pid_alive(b.pid, b.marker)]
        zk_running = pid_alive(state.zookeeper_pid, state.zookeeper_marker)
        if running or zk_running:
            raise ClusterError(f"a cluster is already running in {self.data_dir} "
                               "(`klog cluster down` stops it)")

    def _check_zookeeper(self, connect: str, timeout: float) -> None:
        from klog.daemon.metastore.base import MetastoreError
        from klog.daemon.metastore.zookeeper import ZooKeeperMetadataStore

        try:
            store = ZooKeeperMetadataStore(connect, session_timeout_ms=10000,
                                           connection_timeout_ms=int(timeout * 1000))
        except ValueError as e:
            raise ClusterError(f"bad --zookeeper-connect: {e}") from None
        try:
            store.start()
        except MetastoreError as e:
            raise ClusterError(f"cannot reach ZooKeeper at {connect}: {e}") from None
        finally:
            store.close()

    def _launch_broker(self, state: ClusterState, broker_id: int, count: int,
                       overrides: Mapping[str, str]) -> BrokerProcess:
        data_dir = self.data_dir / f"broker-{broker_id}"
        (data_dir / "logs").mkdir(parents=True, exist_ok=True)
        log_file = self.data_dir / f"broker-{broker_id}.log"
        port = free_port()
        settings = {
            "broker.id": str(broker_id),
            "listeners": f"PLAINTEXT://{LOOPBACK}:{port}",
            "log.dirs": str(data_dir / "logs"),
            "zookeeper.connect": state.zookeeper_connect,
            # Internal topics cannot have more replicas than there are brokers.
            "offsets.topic.replication.factor": str(min(3, count)),
            "transaction.state.log.replication.factor": str(min(3, count)),
            "transaction.state.log.min.isr": str(min(2, count)),
            **overrides,
        }
        cmd = [sys.executable, "-m", "klog", "broker", "start"]
        for key, value in settings.items():
            cmd += ["--override", f"{key}={value}"]
        with open(log_file, "ab") as log:
            process = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                                       stdin=subprocess.DEVNULL, start_new_session=True,
                                       close_fds=True)
        return BrokerProcess(broker_id, port, process.pid, str(data_dir), str(log_file))

    def _wait_serving(self, state: ClusterState, timeout: float,
                      relaunch: Callable[[int], BrokerProcess]) -> None:
        from klog.daemon.metastore import paths
        from klog.daemon.metastore.base import MetastoreError, NoNodeError
        from klog.daemon.metastore.zookeeper import ZooKeeperMetadataStore

        wanted = sorted(b.broker_id for b in state.brokers)
        relaunches = 0
        deadline = time.monotonic() + timeout
        store = ZooKeeperMetadataStore(state.zookeeper_connect, session_timeout_ms=10000,
                                       connection_timeout_ms=10000)
        store.start()
        try:
            while True:
                for i, b in enumerate(state.brokers):
                    if pid_alive(b.pid):
                        continue
                    why = _last_error(Path(b.log_file))
                    # The free port picked for it was taken before the broker bound it.
                    if "already in use" in why and relaunches < 3:
                        relaunches += 1
                        state.brokers[i] = relaunch(b.broker_id)
                        write_state(state)
                        continue
                    raise ClusterError(
                            f"broker {b.broker_id} exited at start-up: "
                            f"{why} (log: {b.log_file})")
                listening = all(_listening(b.port) for b in state.brokers)
                try:
                    registered = sorted(int(i) for i in store.get_children(paths.BROKER_IDS))
                    has_controller = store.exists(paths.CONTROLLER) is not None
                except NoNodeError:
                    registered, has_controller = [], False
                except MetastoreError:
                    registered, has_controller = [], False
                if listening and registered == wanted and has_controller:
                    # Serving = each broker answers Metadata naming every broker and the
                    # controller (a bound port accepts before the broker does).
                    pending = [b.broker_id for b in state.brokers
                               if not _knows_cluster(b.bootstrap, wanted)]
                    if not pending:
                        return
                    waiting = f"brokers {pending} do not answer Metadata with the cluster"
                elif not has_controller:
                    waiting = f"no controller; registered: {registered or 'none'}"
                else:
                    waiting = f"registered: {registered or 'none'}"
                if time.monotonic() >= deadline:
                    raise ClusterError(
                        f"the brokers did not all serve within {timeout:g} s ({waiting}; "
                        f"logs in {self.data_dir})")
                time.sleep(0.1)
        finally:
            store.close()

    # -- status

    def state(self) -> ClusterState:
        return read_state(self.data_dir)

    def status(self, timeout_ms: int = 10000) -> dict[str, Any]:
        """What the state file says was started, what runs, and what the cluster reports:
        a JSON-ready dict (see ``klog cluster status --json``)."""
        state = self.state()
        processes = {b.broker_id: pid_alive(b.pid, b.marker) for b in state.brokers}
        live = [b for b in state.brokers if processes[b.broker_id]]
        report: dict[str, Any] = {
            "data_dir": state.data_dir,
            "zookeeper": {
                "connect": state.zookeeper_connect,
                "pid": state.zookeeper_pid,
                "running": (pid_alive(state.zookeeper_pid, state.zookeeper_marker)
                            if state.zookeeper_pid else None),
            },
            "bootstrap_servers": state.bootstrap_servers,
            "cluster_id": None,
            "controller": None,
            "brokers": [],
            "under_replicated_partitions": [],
            "offline_partitions": [],
            "error": None,
        }
        described: dict[str, Any] = {}
        if live:
            try:
                described = _describe(",".join(b.bootstrap for b in live), timeout_ms)
            except Exception as e:  # the cluster's own answer is optional in a status
                report["error"] = f"{type(e).__name__}: {e}"
        serving = {b["id"]: b for b in described.get("brokers", [])}
        report["cluster_id"] = described.get("cluster_id")
        controller = described.get("controller")
        report["controller"] = controller if controller is not None and controller >= 0 \
            else None
        for b in state.brokers:
            report["brokers"].append({
                "id": b.broker_id, "host": LOOPBACK, "port": b.port, "pid": b.pid,
                "process": "running" if processes[b.broker_id] else "stopped",
                "registered": b.broker_id in serving,
                "controller": b.broker_id == report["controller"],
                "log_file": b.log_file,
            })
        for extra in sorted(set(serving) - set(processes)):
            s = serving[extra]
            report["brokers"].append({"id": extra, "host": s["host"], "port": s["port"],
                                      "pid": None, "process": "external",
                                      "registered": True,
                                      "controller": extra == report["controller"],
                                      "log_file": None})
        report["under_replicated_partitions"] = described.get("under_replicated", [])
        report["offline_partitions"] = described.get("offline", [])
        return report

    # -- down

    def down(self, timeout: float = 30.0, purge: bool = False) -> dict[str, Any]:
        """SIGTERM the brokers (all at once, so their controlled shutdowns overlap), then
        ZooKeeper; SIGKILL what outlives ``timeout``; remove the state file (and with
        ``purge`` the whole data directory)."""
        state = self.state()
        killed = self._stop(state, timeout)
        (self.data_dir / STATE_FILE).unlink(missing_ok=True)
        if purge:
            shutil.rmtree(self.data_dir, ignore_errors=True)
        return {"stopped_brokers": [b.broker_id for b in state.brokers],
                "zookeeper_stopped": state.zookeeper_pid is not None,
                "killed_pids": killed, "purged": purge}

    def _stop(self, state: ClusterState, timeout: float = 30.0) -> list[int]:
        killed = terminate([(b.pid, b.marker) for b in state.brokers], timeout)
        if state.zookeeper_pid:
            killed += terminate([(state.zookeeper_pid, state.zookeeper_marker)], 10.0)
        return killed


def _listening(port: int) -> bool:
    try:
        with socket.create_connection((LOOPBACK, port), timeout=0.2):
            return True
    except OSError:
        return False


def _knows_cluster(bootstrap: str, wanted: list[int]) -> bool:
    """True when the broker at ``bootstrap`` answers DescribeCluster/Metadata with every
    broker of ``wanted`` and a controller."""
    import asyncio

    from klog.client.admin import AdminClient

    async def ask() -> bool:
        async with AdminClient(bootstrap, request_timeout_ms=2000) as admin:
            cluster = await admin.describe_cluster()
        return cluster.controller_id >= 0 and sorted(
            b.node_id for b in cluster.brokers) == wanted

    try:
        return asyncio.run(asyncio.wait_for(ask(), 5))
    except Exception:  # not serving yet
        return False


def _last_error(log_file: Path) -> str:
    """The line of a broker's log that says why it exited (its last error line)."""
    lines = [ln.strip() for ln in log_tail(log_file, 60).splitlines() if ln.strip()]
    for line in reversed(lines):
        if "error" in line.lower() or "Error" in line:
            return line
    return lines[-1] if lines else "no output"


def _describe(bootstrap: str, timeout_ms: int) -> dict[str, Any]:
    """DescribeCluster and Metadata through klog's admin client, asked of the controller
    when one is known (its metadata is the cluster's; other brokers' may lag)."""
    import asyncio

    from klog.client.admin import AdminClient

    async def ask(servers: str) -> dict[str, Any]:
        async with AdminClient(servers, request_timeout_ms=timeout_ms) as admin:
            cluster = await admin.describe_cluster()
            topics = await admin.list_topics(include_internal=True)
        under, offline = [], []
        for topic in topics.values():
            for p in topic.partitions:
                row = {"topic": topic.name, "partition": p.partition, "leader": p.leader,
                       "replicas": list(p.replicas), "isr": list(p.isr)}
                if p.leader < 0:
                    offline.append(row)
                elif len(p.isr) < len(p.replicas):
                    under.append(row)
        return {
            "cluster_id": cluster.cluster_id,
            "controller": cluster.controller_id,
            "controller_address": next((f"{b.host}:{b.port}" for b in cluster.brokers
                                        if b.node_id == cluster.controller_id), None),
            "brokers": [{"id": b.node_id, "host": b.host, "port": b.port, "rack": b.rack}
                        for b in cluster.brokers],
            "under_replicated": under,
            "offline": offline,
        }

    async def main() -> dict[str, Any]:
        first = await ask(bootstrap)
        address = first.get("controller_address")
        if address and address != bootstrap.split(",")[0]:
            with contextlib.suppress(Exception):
                return await ask(address)
        return first

    return asyncio.run(main())
