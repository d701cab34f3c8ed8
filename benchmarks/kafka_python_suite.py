"""Run kafka-python's own integration tests (its repository's test/integration) against a
klog broker, as Kafka-compatible brokers are judged by the clients' own test suites.

Usage::

    python -m benchmarks.kafka_python_suite KAFKA_PYTHON_CHECKOUT [pytest args...]

KAFKA_PYTHON_CHECKOUT is a checkout of github.com/dpkp/kafka-python (its ``test/``
directory is used; the installed kafka-python is the client under test). A standalone klog
broker starts on a free port (``klog.testing.KlogBroker``, 4 partitions per topic as
kafka-python's own fixture asks), the suite runs with ``KAFKA_URI`` pointing at it and
``KAFKA_VERSION`` set to the Kafka release klog serves as (3.9.0), and the broker stops
afterwards. Not part of ``make test``: the suite takes minutes and tests kafka-python as
much as klog; see README ("kafka-python's integration tests") for what passes and why the
rest does not apply.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

from klog.testing import KlogBroker

KAFKA_VERSION = "3.9.0"


def main(argv: list[str]) -> int:
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
            "group.initial.rebalance.delay.ms": 0, "offsets.topic.num.partitions": 2})
        broker.start()
        try:
            # KAFKA_ROOT: the fixture insists on a Kafka install directory even for an
            # external broker; an empty one will do.
            env = dict(os.environ, KAFKA_URI=f"PLAINTEXT://{broker.bootstrap_servers}",
                       KAFKA_VERSION=KAFKA_VERSION, KAFKA_ROOT=tmp)
            env.pop("PYTHONPATH", None)
            cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q",
                   "-rfEs", "test/integration", *argv[1:]]
            return subprocess.call(cmd, cwd=checkout, env=env)
        finally:
            broker.stop()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
