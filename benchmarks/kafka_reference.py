"""Apache Kafka itself, on demand: the reference the benchmarks and the differential test
compare klog with.

The broker is the release tests/jvm/pom.xml pins (``kafka.version``, 4.1.1), resolved by
``make setup`` through Maven into ``~/.m2`` (its ``broker`` profile writes the run-time
class path of ``kafka_2.13`` -- kafka-server, kafka-storage, kafka-raft and the rest -- to
``tests/jvm/target/broker/classpath.txt``); no jar is kept in the repository.

``KafkaNode`` is one process in KRaft's combined mode (``process.roles=broker,controller``)
on two free loopback ports (the client listener and the controller's), with its log dir
formatted by Kafka's own StorageTool; ``KafkaCluster`` is one node or three sharing a
static controller quorum. Kafka 4 has no ZooKeeper mode: klog follows Kafka 3.x in
ZooKeeper mode, so what the two compare is the data path (produce, fetch, replication,
the log), which KRaft left as it was; the control plane (the metadata log against
ZooKeeper) differs by design, and comparisons that reach it (start-up, creating 10,000
partitions) say so.

Settings are klog's where they matter to a comparison (``SHARED_SETTINGS``): the segment
size (1 GiB, both defaults), flushing left to the OS (``log.flush.*`` unset on both), one
partition per topic by default; ``num.network.threads``/``num.io.threads`` keep Kafka's
defaults (3 and 8; klog runs one event loop and accepts these names without acting on
them). The internal topics' replication factor is the cluster's size, as Kafka's own
config/server.properties sets it for one node. The JVM is given what kafka-server-start.sh
gives it: ``HEAP`` (1 GiB, ``-Xms`` = ``-Xmx``, Kafka's script default; on this 2-core,
23 GiB machine three nodes take 3 GiB) and kafka-run-class.sh's G1 options
(``PERFORMANCE_OPTIONS``). Tests pass ``profile="test"``: a 512 MiB heap and C1 only,
which starts faster and is enough for a few requests.

Logging is Kafka's own: log4j 2 (Kafka 4) or reload4j (Kafka 3) at INFO into the node's
log file, as its distribution's default configuration logs INFO to server.log; the
loggers DescribeConfigs BROKER_LOGGER lists are log4j's, as in a real installation.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from klog.daemon.metastore.paths import new_kafka_uuid, uuid_to_str

ROOT = Path(__file__).resolve().parent.parent
JVM_PROJECT = ROOT / "tests" / "jvm"
BROKER_CLASSPATH = JVM_PROJECT / "target" / "broker" / "classpath.txt"
#: The last 3.x broker, ZooKeeper mode (pom.xml's broker3 profile), resolved on first use.
BROKER3_CLASSPATH = JVM_PROJECT / "target" / "broker3" / "classpath.txt"
CLIENT_CLASSPATH = JVM_PROJECT / "target" / "classpath.txt"
JAVA = os.environ.get("JAVA", "/usr/bin/java")
LOOPBACK = "127.0.0.1"

#: kafka-server-start.sh's default heap, stated: 1 GiB, fixed.
HEAP = "1g"
#: kafka-run-class.sh's KAFKA_JVM_PERFORMANCE_OPTS.
PERFORMANCE_OPTIONS = ("-server", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20",
                       "-XX:InitiatingHeapOccupancyPercent=35",
                       "-XX:+ExplicitGCInvokesConcurrent", "-XX:MaxInlineLevel=15",
                       "-Djava.awt.headless=true")
#: The differential test's JVM: start-up matters more than peak speed for a few requests.
TEST_OPTIONS = ("-Xms128m", "-Xmx512m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
                "-Djava.awt.headless=true")
LOG_OPTIONS = ("-Djava.net.preferIPv4Stack=true",)
#: Kafka's default logging, to the node's log file: INFO, through log4j 2 (Kafka 4) or
#: reload4j (Kafka 3), as its distribution's config/log4j2.yaml and log4j.properties do.
_LOG4J2 = """status = warn
appender.out.type = Console
appender.out.name = out
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = info
rootLogger.appenderRef.out.ref = out
"""
_LOG4J1 = """log4j.rootLogger=INFO, out
log4j.appender.out=org.apache.log4j.ConsoleAppender
log4j.appender.out.layout=org.apache.log4j.PatternLayout
log4j.appender.out.layout.ConversionPattern=[%d] %p %m (%c)%n
"""

#: Settings both sides run with where a comparison depends on them (the values are both
#: brokers' defaults, written down so that a change of either default shows here).
SHARED_SETTINGS: Mapping[str, str] = {
    "log.segment.bytes": str(1 << 30),
    "num.partitions": "1",
    "default.replication.factor": "1",
    "auto.create.topics.enable": "true",
}


class KafkaUnavailable(RuntimeError):
    """Kafka's broker cannot be run here (not set up, no Java)."""


def broker_classpath(mode: str = "kraft") -> str:
    """The run-time class path of Kafka's broker (``mode`` "kraft": the 4.x release;
    "zk": the 3.x release in ZooKeeper mode, resolved through Maven on first use);
    KafkaUnavailable when it is not built."""
    if not Path(JAVA).exists():
        raise KafkaUnavailable(f"no Java at {JAVA}: run `make setup`")
    if mode == "zk":
        if not BROKER3_CLASSPATH.is_file():
            done = subprocess.run(
                ["mvn", "-B", "-q", "-Dstyle.color=never", "-f", str(JVM_PROJECT / "pom.xml"),
                 "-P", "broker3", "dependency:build-classpath",
                 "-Dmdep.includeScope=runtime", f"-Dmdep.outputFile={BROKER3_CLASSPATH}"],
                capture_output=True, text=True, timeout=600, check=False)
            if done.returncode != 0:
                raise KafkaUnavailable(f"Maven could not resolve Kafka 3.x's broker:\n"
                                       f"{done.stdout[-2000:]}{done.stderr[-2000:]}")
        return BROKER3_CLASSPATH.read_text().strip()
    if not BROKER_CLASSPATH.is_file():
        raise KafkaUnavailable(f"Kafka's broker is not set up ({BROKER_CLASSPATH} missing): "
                               "run `make setup`")
    return BROKER_CLASSPATH.read_text().strip()


def client_classpath() -> str:
    """Kafka's clients and tools (ProducerPerformance, ConsumerPerformance)."""
    if not CLIENT_CLASSPATH.is_file():
        raise KafkaUnavailable(f"Kafka's tools are not set up ({CLIENT_CLASSPATH} missing): "
                               "run `make setup`")
    return CLIENT_CLASSPATH.read_text().strip()


def kafka_version(mode: str = "kraft") -> str:
    """The version of the broker the class path runs (from kafka_2.13-<version>.jar)."""
    for jar in broker_classpath(mode).split(os.pathsep):
        name = Path(jar).name
        if name.startswith("kafka_2.13-") and name.endswith(".jar"):
            return name[len("kafka_2.13-"):-len(".jar")]
    raise KafkaUnavailable("no kafka_2.13 jar in the broker class path")


def free_port(host: str = LOOPBACK) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def new_cluster_id() -> str:
    """A KRaft cluster id as Kafka's Uuid.randomUuid makes one: never one whose text starts
    with '-', which kafka-storage's argument parser takes for an option (a CI run failed
    on "-Pe2STzEQw-ScrSJvFU6LA": one id in 64 starts so)."""
    return uuid_to_str(new_kafka_uuid())


def java_command(main: str, *args: str, options: Sequence[str] = (),
                 classpath: str | None = None, mode: str = "kraft") -> list[str]:
    return [JAVA, *options, "-cp", classpath or broker_classpath(mode), main, *args]


def _tail(path: Path, lines: int = 40) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def _listening(port: int) -> bool:
    with contextlib.suppress(OSError), socket.create_connection((LOOPBACK, port), 0.2):
        return True
    return False


class KafkaNode:
    """One Kafka process: broker and controller in one (KRaft combined mode), or, with
    ``mode="zk"``, a Kafka 3.x broker of a ZooKeeper-mode cluster."""

    def __init__(self, data_dir: Path, node_id: int = 1, port: int | None = None,
                 controller_port: int | None = None, profile: str = "bench",
                 mode: str = "kraft") -> None:
        self.data_dir = Path(data_dir)
        self.node_id = node_id
        self.port = port or free_port()
        self.controller_port = controller_port or free_port()
        self.profile = profile
        self.mode = mode
        self.process: subprocess.Popen[bytes] | None = None
        self.settings: dict[str, str] = {}

    @property
    def bootstrap_servers(self) -> str:
        return f"{LOOPBACK}:{self.port}"

    @property
    def log_dir(self) -> Path:
        return self.data_dir / "logs"

    @property
    def config_file(self) -> Path:
        return self.data_dir / "server.properties"

    @property
    def log_file(self) -> Path:
        return self.data_dir / "kafka.log"

    @property
    def pid(self) -> int:
        assert self.process is not None, "the node is not running"
        return self.process.pid

    def jvm_options(self) -> tuple[str, ...]:
        logging = (f"-Dlog4j.configuration=file:{self.data_dir / 'log4j.properties'}",
                   f"-Dlog4j2.configurationFile={self.data_dir / 'log4j2.properties'}")
        if self.profile == "test":
            return (*TEST_OPTIONS, *LOG_OPTIONS, *logging)
        return (f"-Xms{HEAP}", f"-Xmx{HEAP}", *PERFORMANCE_OPTIONS, *LOG_OPTIONS, *logging)

    def configure(self, voters: str, cluster_size: int,
                  overrides: Mapping[str, Any] | None = None) -> None:
        """Write server.properties: this node's listeners and the quorum (KRaft) or its
        ZooKeeper connect string (``voters`` in ZooKeeper mode), then SHARED_SETTINGS,
        then ``overrides``."""
        if self.mode == "zk":
            roles: dict[str, str] = {
                "broker.id": str(self.node_id),
                "zookeeper.connect": voters,
                "listeners": f"PLAINTEXT://{LOOPBACK}:{self.port}",
            }
        else:
            roles = {
                "process.roles": "broker,controller",
                "node.id": str(self.node_id),
                "controller.quorum.voters": voters,
                "listeners": f"PLAINTEXT://{LOOPBACK}:{self.port},"
                             f"CONTROLLER://{LOOPBACK}:{self.controller_port}",
                "advertised.listeners": f"PLAINTEXT://{LOOPBACK}:{self.port}",
                "controller.listener.names": "CONTROLLER",
                "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
                "inter.broker.listener.name": "PLAINTEXT",
            }
        settings = {
            **roles,
            "log.dirs": str(self.log_dir),
            # The internal topics as Kafka's config/server.properties sets them for one
            # node; on three, Kafka's defaults.
            "offsets.topic.replication.factor": str(min(cluster_size, 3)),
            "transaction.state.log.replication.factor": str(min(cluster_size, 3)),
            "transaction.state.log.min.isr": str(min(cluster_size, 2)),
            **({} if self.mode == "zk" else {
                "share.coordinator.state.topic.replication.factor": str(min(cluster_size, 3)),
                "share.coordinator.state.topic.min.isr": str(min(cluster_size, 2))}),
            **SHARED_SETTINGS,
            **{k: str(v) for k, v in (overrides or {}).items()},
        }
        self.settings = settings
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.config_file.write_text("".join(f"{k}={v}\n" for k, v in settings.items()))
        (self.data_dir / "log4j2.properties").write_text(_LOG4J2)
        (self.data_dir / "log4j.properties").write_text(_LOG4J1)

    def format(self, cluster_id: str, timeout: float = 120.0) -> None:
        """Kafka's StorageTool: meta.properties and the bootstrap metadata (KRaft only: a
        ZooKeeper-mode broker writes its meta.properties itself)."""
        if self.mode == "zk":
            return
        command = java_command("kafka.tools.StorageTool", "format", "-t", cluster_id,
                               "-c", str(self.config_file), "--ignore-formatted",
                               options=(*TEST_OPTIONS, *LOG_OPTIONS,
                                        f"-Dlog4j2.configurationFile="
                                        f"{self.data_dir / 'log4j2.properties'}"))
        with open(self.log_file, "ab") as log:
            done = subprocess.run(command, stdout=log, stderr=log, timeout=timeout,
                                  check=False)
        if done.returncode != 0:
            raise RuntimeError(f"kafka-storage format failed ({done.returncode}):\n"
                               f"{_tail(self.log_file)}")

    def launch(self) -> None:
        """Start the process (returns at once; ``wait_listening`` waits for the port)."""
        if self.process is not None and self.process.poll() is None:
            return
        with open(self.log_file, "ab") as log:
            self.process = subprocess.Popen(
                java_command("kafka.Kafka", str(self.config_file),
                             options=self.jvm_options(), mode=self.mode),
                stdout=log, stderr=log, stdin=subprocess.DEVNULL, cwd=self.data_dir)

    def wait_listening(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process is None or self.process.poll() is not None:
                code = None if self.process is None else self.process.returncode
                raise RuntimeError(f"Kafka node {self.node_id} exited ({code}):\n"
                                   f"{_tail(self.log_file)}")
            if _listening(self.port):
                return
            time.sleep(0.05)
        raise TimeoutError(f"Kafka node {self.node_id} did not open port {self.port} within "
                           f"{timeout} s:\n{_tail(self.log_file)}")

    def stop(self, timeout: float = 60.0) -> int | None:
        """SIGTERM (Kafka's shutdown hook: a controlled shutdown, logs closed cleanly),
        SIGKILL after ``timeout``."""
        proc = self.process
        if proc is None or proc.poll() is not None:
            return None if proc is None else proc.returncode
        proc.send_signal(signal.SIGTERM)
        try:
            return proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            return proc.wait()

    def kill(self) -> None:
        """SIGKILL: a crash; the next start recovers the logs."""
        proc = self.process
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()

    def log_tail(self, lines: int = 40) -> str:
        return _tail(self.log_file, lines)


class KafkaCluster:
    """One Kafka node or three (each broker and controller, one static quorum) under
    ``root``; ``start()`` formats (once) and starts them and waits until every broker is
    registered and unfenced; ``stop()`` stops them cleanly. A context manager.

    ``mode="zk"``: Kafka 3.x's brokers on a ZooKeeper of their own (klog's
    cluster_runner.ZooKeeperServer), the mode klog follows -- the differential test's
    second reference, to tell what Kafka 4 changed from what klog differs in.
    """

    def __init__(self, root: Path, nodes: int = 1, profile: str = "bench",
                 overrides: Mapping[str, Any] | None = None, mode: str = "kraft") -> None:
        self.root = Path(root)
        self.mode = mode
        self.nodes = [KafkaNode(self.root / f"kafka-{i}", node_id=i, profile=profile,
                                mode=mode) for i in range(1, nodes + 1)]
        self.zookeeper: Any = None
        if mode == "zk":
            from klog.cluster_runner import ZooKeeperServer

            self.zookeeper = ZooKeeperServer(self.root / "zookeeper")
            voters = f"{self.zookeeper.connect}/kafka"
        else:
            voters = ",".join(f"{n.node_id}@{LOOPBACK}:{n.controller_port}"
                              for n in self.nodes)
        for node in self.nodes:
            node.configure(voters, nodes, overrides)
        self.cluster_id = new_cluster_id()
        self._formatted = False

    @property
    def bootstrap_servers(self) -> str:
        return ",".join(n.bootstrap_servers for n in self.nodes)

    def format(self) -> None:
        if not self._formatted:
            for node in self.nodes:
                node.format(self.cluster_id)
            self._formatted = True

    def start(self, timeout: float = 180.0) -> KafkaCluster:
        self.format()
        deadline = time.monotonic() + timeout
        if self.zookeeper is not None:
            self.zookeeper.start()
        for node in self.nodes:
            node.launch()
        try:
            for node in self.nodes:
                node.wait_listening(max(1.0, deadline - time.monotonic()))
            self.wait_ready(max(1.0, deadline - time.monotonic()))
        except BaseException:
            self.stop()
            raise
        return self

    def wait_ready(self, timeout: float) -> None:
        """Until Metadata through every node names every broker (each registered and
        unfenced: KRaft lists only those)."""
        from confluent_kafka.admin import AdminClient

        deadline = time.monotonic() + timeout
        wanted = {n.node_id for n in self.nodes}
        for node in self.nodes:
            admin = AdminClient({"bootstrap.servers": node.bootstrap_servers})
            while True:
                try:
                    brokers = set(admin.list_topics(timeout=5).brokers)
                except Exception:
                    brokers = set()
                if brokers >= wanted:
                    break
                if time.monotonic() > deadline:
                    raise TimeoutError(f"Kafka node {node.node_id} knows brokers "
                                       f"{sorted(brokers)} of {sorted(wanted)} after "
                                       f"{timeout} s:\n{node.log_tail()}")
                time.sleep(0.2)

    def stop(self, timeout: float = 60.0) -> None:
        # All at once: stopped one by one, the last nodes of a three-node quorum would wait
        # for a controller majority that has already gone.
        for node in self.nodes:
            if node.process is not None and node.process.poll() is None:
                node.process.send_signal(signal.SIGTERM)
        for node in self.nodes:
            node.stop(timeout)
        if self.zookeeper is not None:
            self.zookeeper.stop()

    def __enter__(self) -> KafkaCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


@contextlib.contextmanager
def kafka(root: Path, nodes: int = 1, profile: str = "bench",
          overrides: Mapping[str, Any] | None = None) -> Iterator[KafkaCluster]:
    """A started KafkaCluster for a ``with`` block."""
    cluster = KafkaCluster(root, nodes, profile, overrides)
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()


def dump_log_command(*files: Path, deep: bool = True, extra: Sequence[str] = ()) -> list[str]:
    """kafka-dump-log.sh (DumpLogSegments) over ``files``, as the script runs it."""
    args = ["--files", ",".join(str(f) for f in files)]
    if deep:
        args.append("--deep-iteration")
    return java_command("kafka.tools.DumpLogSegments", *args, *extra,
                        options=("-Xmx512m", *PERFORMANCE_OPTIONS))
