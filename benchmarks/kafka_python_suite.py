"""Run kafka-python's own integration tests (its repository's test/integration) against a
klog broker, as Kafka-compatible brokers are judged by the clients' own test suites.

Usage::

    python -m benchmarks.kafka_python_suite KAFKA_PYTHON_CHECKOUT [pytest args...]

KAFKA_PYTHON_CHECKOUT is a checkout of github.com/dpkp/kafka-python (its ``test/``
directory is used; the installed kafka-python is the client under test). A standalone klog
broker starts on a free port (``klog.testing.KlogBroker``, configured as kafka-python's own
broker template configures Kafka), the suite runs with ``KAFKA_URI`` pointing at it and
``KAFKA_VERSION`` set to the Kafka release klog serves as (3.9.0; set KAFKA_VERSION to run
the tests as for an older broker, with the API versions kafka-python picks for it), and the
broker stops afterwards. Not part of ``make test``: the suite takes minutes and tests
kafka-python as much as klog; see README ("kafka-python's integration tests") for what
passes and why the rest does not apply.

The SSL and SASL tests cannot use an external broker (the SASL ones skip themselves when
``KAFKA_URI`` is set, so they run in a second pytest without it): their fixture renders its
own zookeeper.properties and server.properties, makes JKS key stores with keytool, and
starts ZooKeeper and Kafka with ``$KAFKA_ROOT/bin/kafka-run-class.sh``. So ``KAFKA_ROOT``
is a directory whose ``bin/`` holds stand-ins for the scripts the fixture calls, each
running this module with ``--kafka-script``:

- ``kafka-run-class.sh ...QuorumPeerMain FILE``: the system's ZooKeeper, as klog's own
  tests run it;
- ``zookeeper-shell.sh HOST create PATH DATA``: the chroot;
- ``kafka-configs.sh --zookeeper ... --add-config MECH=[password=P]``: a SCRAM user,
  written to ZooKeeper in Kafka's format before the broker starts;
- ``kafka-run-class.sh kafka.Kafka FILE``: a klog broker with that file, the JKS stores
  converted to the PEM klog reads and the KafkaServer section of the JAAS file named in
  ``KAFKA_OPTS`` given as the listener's sasl.jaas.config;
- ``kafka-topics.sh --list``: the topics, through kafka-python's admin client.

The servers print the lines the fixture waits for (ZooKeeper's "binding to port", Kafka's
"[KafkaServer id=0] started") once they accept connections. Without java and ZooKeeper's
jars the SSL and SASL tests fail at set-up.
"""

from __future__ import annotations

import os
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import FrameType

from klog.cluster_runner import (
    ZooKeeperServer,
    zookeeper_serving,
    zookeeper_unavailable_reason,
)
from klog.protocol.jaas import JaasEntry, parse_jaas_config
from klog.testing import KlogBroker

KAFKA_VERSION = "3.9.0"
#: The scripts of Kafka's bin/ that kafka-python's fixture runs for the SSL/SASL tests.
KAFKA_SCRIPTS = ("kafka-run-class.sh", "zookeeper-shell.sh", "kafka-configs.sh",
                 "kafka-topics.sh")
SASL_TESTS = "test/integration/test_sasl_integration.py"
#: pytest's exit code when -k/-m left no test to run.
NO_TESTS_COLLECTED = 5
#: The password kafka-python's gen_ssl_resources gives its JKS stores.
JKS_PASSWORD_KEYS = ("ssl.keystore.password", "ssl.truststore.password")
#: The class the fixture asks kafka-run-class.sh to run for ZooKeeper.
QUORUM_PEER_MAIN = "org.apache.zookeeper.server.quorum.QuorumPeerMain"
KLOG_ROOT = Path(__file__).resolve().parent.parent


def main(argv: list[str]) -> int:
    if argv[:1] == ["--kafka-script"]:
        return kafka_script(argv[1:])
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    checkout = Path(argv[0])
    if not (checkout / "test" / "integration").is_dir():
        print(f"error: {checkout} has no test/integration", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="klog-kp-suite-") as tmp:
        # The settings of kafka-python's own broker template (servers/resources/default/
        # kafka.properties) that its tests rely on: e.g. test_group's 3 s session timeout
        # is below Kafka's default group.min.session.timeout.ms.
        broker = KlogBroker(Path(tmp) / "data", overrides={
            "num.partitions": 4, "auto.create.topics.enable": "true",
            "delete.topic.enable": "true", "group.min.session.timeout.ms": 1000,
            "group.initial.rebalance.delay.ms": 0, "offsets.topic.num.partitions": 2,
            # The fixture's acl_config for a 2.4-3.x broker: ACLs on, and a resource
            # without ACLs open to everyone (test_create_describe_delete_acls).
            "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
            "allow.everyone.if.no.acl.found": "true"})
        broker.start()
        try:
            env = dict(os.environ, KAFKA_URI=f"PLAINTEXT://{broker.bootstrap_servers}",
                       KAFKA_VERSION=os.environ.get("KAFKA_VERSION", KAFKA_VERSION),
                       KAFKA_ROOT=_kafka_root(Path(tmp)))
            env.pop("PYTHONPATH", None)
            pytest = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-rfEs"]
            rc = subprocess.call([*pytest, "test/integration", f"--ignore={SASL_TESTS}",
                                  *argv[1:]], cwd=checkout, env=env)
        finally:
            broker.stop()
        # The SASL tests skip themselves when KAFKA_URI is set; without it, their fixture
        # starts its own brokers through KAFKA_ROOT's stand-ins.
        del env["KAFKA_URI"]
        sasl_rc = subprocess.call([*pytest, SASL_TESTS, *argv[1:]], cwd=checkout, env=env)
        return max(0 if code == NO_TESTS_COLLECTED else code for code in (rc, sasl_rc))


def _kafka_root(tmp: Path) -> str:
    """A stand-in for Kafka's install directory: bin/ scripts that run klog instead."""
    bin_dir = tmp / "kafka-root" / "bin"
    bin_dir.mkdir(parents=True)
    for name in KAFKA_SCRIPTS:
        script = bin_dir / name
        script.write_text(
            "#!/bin/sh\n"
            f"PYTHONPATH={shlex.quote(str(KLOG_ROOT))} exec {shlex.quote(sys.executable)} "
            f"-m benchmarks.kafka_python_suite --kafka-script {name} \"$@\"\n")
        script.chmod(0o755)
    return str(bin_dir.parent)


# -- the stand-ins for Kafka's scripts -----------------------------------------------------


def kafka_script(argv: list[str]) -> int:
    name, args = argv[0], argv[1:]
    if name == "kafka-run-class.sh" and args[:1] == ["kafka.Kafka"] and len(args) == 2:
        return _run_broker(Path(args[1]))
    if (name == "kafka-run-class.sh" and args[:1] == [QUORUM_PEER_MAIN]
            and len(args) == 2):
        return _run_zookeeper(Path(args[1]))
    if name == "zookeeper-shell.sh" and len(args) == 4 and args[1] == "create":
        return _zookeeper_create(args[0], args[2], args[3])
    if name == "kafka-configs.sh" and args[:1] == ["--zookeeper"]:
        return _add_scram_user(args)
    if name == "kafka-topics.sh" and args[:1] == ["--list"]:
        return _list_topics(args[1:])
    print(f"klog's stand-in for {name} does not do: {' '.join(args)}", file=sys.stderr)
    return 1


def _serve_until_ready(cmd: list[str], ready: Callable[[], bool], line: str) -> int:
    """Run cmd; print line (what the fixture waits for) once ready(); pass SIGTERM on."""
    child = subprocess.Popen(cmd)

    def stop(signum: int, frame: FrameType | None) -> None:
        child.terminate()

    signal.signal(signal.SIGTERM, stop)
    while child.poll() is None:
        if ready():
            print(line, flush=True)
            break
        time.sleep(0.1)
    return child.wait()


def _run_zookeeper(properties: Path) -> int:
    """``kafka-run-class.sh QuorumPeerMain FILE``: the system's ZooKeeper (as klog's own
    tests run it) with the fixture's file, printing the line the fixture waits for."""
    reason = zookeeper_unavailable_reason()
    if reason is not None:
        print(f"klog's stand-in cannot run ZooKeeper: {reason}", file=sys.stderr)
        return 1
    settings = _read_properties(properties)
    port = int(settings["clientPort"])
    cmd = ZooKeeperServer(properties.parent).command(properties)
    return _serve_until_ready(cmd, lambda: zookeeper_serving(port),
                              f"binding to port 0.0.0.0/0.0.0.0:{port}")


def _zookeeper_create(hosts: str, path: str, data: str) -> int:
    from kazoo.client import KazooClient
    from kazoo.exceptions import NodeExistsError

    client = KazooClient(hosts=hosts)
    client.start(timeout=15)
    try:
        client.create(path, data.encode(), makepath=True)
    except NodeExistsError:
        pass
    finally:
        client.stop()
        client.close()
    print(f"Created {path}")
    return 0


def _options(args: list[str]) -> dict[str, str]:
    """``--name value`` pairs of a Kafka tool's command line (flags map to "")."""
    opts: dict[str, str] = {}
    for i, arg in enumerate(args):
        if arg.startswith("--"):
            following = args[i + 1] if i + 1 < len(args) else "--"
            opts[arg] = "" if following.startswith("--") else following
    return opts


def _add_scram_user(args: list[str]) -> int:
    """``kafka-configs.sh --zookeeper H:P/CHROOT --alter --entity-type users --entity-name U
    --add-config MECH=[password=P]``: U's SCRAM credential written to ZooKeeper before the
    broker starts, in Kafka's format (klog reads it at start-up), as Kafka's tool does."""
    from kazoo.client import KazooClient

    from klog.daemon.metastore import paths
    from klog.protocol import scram

    opts = _options(args)
    mechanism, _, rest = opts["--add-config"].partition("=[password=")
    credential = scram.credential_from_password(mechanism, rest.rstrip("]"))
    user = opts["--entity-name"]
    client = KazooClient(hosts=opts["--zookeeper"])
    client.start(timeout=15)
    try:
        client.create(paths.config_path("users", user),
                      paths.EntityConfig({mechanism: credential.to_config()}).encode(),
                      makepath=True)
    finally:
        client.stop()
        client.close()
    print(f"Completed updating config for entity: user-principal '{user}'.")
    return 0


def _list_topics(args: list[str]) -> int:
    """``kafka-topics.sh --list --bootstrap-server H:P [--command-config FILE]``."""
    from kafka import KafkaAdminClient

    opts = _options(args)
    params: dict[str, str] = {"bootstrap_servers": opts["--bootstrap-server"]}
    if "--command-config" in opts:
        config = _read_properties(Path(opts["--command-config"]))
        jaas = parse_jaas_config(config["sasl.jaas.config"])
        params.update(security_protocol=config["security.protocol"],
                      sasl_mechanism=config["sasl.mechanism"],
                      sasl_plain_username=jaas.options["username"],
                      sasl_plain_password=jaas.options["password"])
    admin = KafkaAdminClient(**params)
    try:
        for topic in sorted(admin.list_topics()):
            print(topic)
    finally:
        admin.close()
    return 0


def _read_properties(path: Path) -> dict[str, str]:
    # The fixture's templates hold plain key=value lines (no continuations, no escapes).
    settings: dict[str, str] = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith(("#", "!")) and "=" in line:
            key, value = line.split("=", 1)
            settings[key.strip()] = value.strip()
    return settings


def _jks_to_pem(settings: dict[str, str]) -> None:
    """Replace the fixture's JKS stores with PEM files klog reads (it reads no JKS)."""
    keystore = settings.get("ssl.keystore.location", "")
    if keystore.endswith(".jks"):
        password = settings["ssl.keystore.password"]
        p12, pem = keystore[:-4] + ".p12", keystore[:-4] + ".pem"
        _run(["keytool", "-importkeystore", "-noprompt", "-srckeystore", keystore,
              "-srcstorepass", password, "-destkeystore", p12, "-deststoretype", "PKCS12",
              "-deststorepass", password, "-srcalias", "localhost"])
        _run(["openssl", "pkcs12", "-in", p12, "-passin", f"pass:{password}", "-nodes",
              "-out", pem])
        settings.update({"ssl.keystore.location": pem, "ssl.keystore.type": "PEM"})
        settings.pop("ssl.key.password", None)  # the PEM key is unencrypted (-nodes)
    truststore = settings.get("ssl.truststore.location", "")
    if truststore.endswith(".jks"):
        pem = truststore[:-4] + ".pem"
        _run(["keytool", "-exportcert", "-rfc", "-alias", "CARoot", "-keystore", truststore,
              "-storepass", settings["ssl.truststore.password"], "-file", pem])
        settings.update({"ssl.truststore.location": pem, "ssl.truststore.type": "PEM"})
    for key in JKS_PASSWORD_KEYS:
        settings.pop(key, None)


def _jaas_to_listener(settings: dict[str, str]) -> JaasEntry | None:
    """Kafka's JVM reads the KafkaServer section of the file in KAFKA_OPTS'
    -Djava.security.auth.login.config; klog takes it as the listener's sasl.jaas.config."""
    opts = shlex.split(os.environ.get("KAFKA_OPTS", ""))
    files = [o.split("=", 1)[1] for o in opts if o.startswith("-Djava.security.auth.login.config=")]
    mechanism = settings.get("sasl.enabled.mechanisms")
    if not files or not mechanism:
        return None
    text = Path(files[0]).read_text()
    body = text[text.index("{", text.index("KafkaServer")) + 1:]
    entry = body[:body.index("}")].strip()
    listener = settings["listeners"].split(":", 1)[0].lower()
    settings[f"listener.name.{listener}.{mechanism.lower()}.sasl.jaas.config"] = entry
    return parse_jaas_config(entry)


def _run(cmd: list[str]) -> None:
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def _listener_port(settings: dict[str, str]) -> int:
    first = settings["listeners"].split(",")[0]
    return int(first.rsplit(":", 1)[1])


def _run_broker(properties: Path) -> int:
    """``kafka-run-class.sh kafka.Kafka FILE``: a klog broker with FILE's settings, printing
    Kafka's start-up line (the fixture waits for it) once the listener accepts."""
    settings = _read_properties(properties)
    _jks_to_pem(settings)
    jaas = _jaas_to_listener(settings)
    converted = properties.with_name("klog.properties")
    converted.write_text("".join(f"{k}={v}\n" for k, v in settings.items()))
    port, broker_id = _listener_port(settings), settings.get("broker.id", "0")
    started = f"[KafkaServer id={broker_id}] started (kafka.server.KafkaServer)"
    if jaas is not None and "username" in jaas.options and jaas.login_module.endswith(
            "ScramLoginModule"):
        # The fixture then waits for Kafka's sign that the broker has read the SCRAM users
        # from ZooKeeper; klog reads them before it listens.
        started += f"\nRemoving Produce quota for user {jaas.options['username']}"
    return _serve_until_ready(
        [sys.executable, "-m", "klog", "broker", "start", "-c", str(converted)],
        lambda: _accepts(port), started)


def _accepts(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    except OSError:
        return False
    return True


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
