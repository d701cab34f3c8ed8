"""A real klog broker for test suites: a context manager and a pytest fixture.

    from klog import testing

    with testing.broker() as broker:
        producer = Producer({"bootstrap.servers": broker.bootstrap_servers})

The broker runs as a separate process (``python -m klog broker start``) on a free port of
127.0.0.1 with its data in a temporary directory, removed afterwards. ``start()`` returns
once the broker answers a request (its port accepts connections a little earlier: a
broker listens before it registers, and serves once started). ``stop()`` shuts it down
cleanly (SIGTERM), ``kill()`` kills it (SIGKILL, as a crash), ``start()`` starts it again
on the same port and data, so tests can check what survives a restart.

Installed with klog, this module is registered as a pytest plugin (entry point
``pytest11``): the ``klog_broker`` fixture gives each test its own broker; use
``klog_broker_factory`` to start brokers with config overrides.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

__all__ = ["KlogBroker", "broker", "free_port"]


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free a moment ago on ``host``."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


class BrokerStartError(RuntimeError):
    pass


#: ApiVersions v0 (api key 18), correlation id 1, no client id: a request every Kafka
#: broker answers, written out by hand (this module imports nothing of klog).
_API_VERSIONS_V0 = struct.pack(">ihhih", 10, 18, 0, 1, -1)


class _ServingProbe:
    """Asks a broker for its ApiVersions until it answers: one connection, opened again
    when refused or closed. A listener that does not speak plaintext (TLS) closes the
    probe's connection instead of answering; that happens only once the broker accepts
    connections, so two such closes in a row count as serving too."""

    def __init__(self, host: str, port: int) -> None:
        self.address = (host, port)
        self.sock: socket.socket | None = None
        self.received = b""
        self.closes = 0

    def answered(self) -> bool:
        """True once the broker serves; waits up to ~0.2 s for it."""
        try:
            if self.sock is None:
                self.sock = socket.create_connection(self.address, timeout=0.2)
                self.sock.sendall(_API_VERSIONS_V0)
                self.received = b""
            chunk = self.sock.recv(8 - len(self.received))
        except TimeoutError:
            return False  # listening, not serving yet: the request waits in the backlog
        except (ConnectionResetError, BrokenPipeError):
            chunk = b""
        except OSError:  # refused: not listening yet
            self.closes = 0
            self.close()
            time.sleep(0.02)
            return False
        if not chunk:
            self.close()
            self.closes += 1
            return self.closes >= 2
        self.received += chunk
        return len(self.received) == 8 and struct.unpack(">ii", self.received)[1] == 1

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close()
            self.sock = None


class KlogBroker:
    """One broker process; see the module docstring."""

    def __init__(self, data_dir: Path | None = None, port: int | None = None,
                 overrides: Mapping[str, Any] | None = None, start_timeout: float = 30.0,
                 log_file: Path | None = None) -> None:
        self._own_dir = data_dir is None
        self.data_dir = Path(data_dir) if data_dir else Path(tempfile.mkdtemp(prefix="klog-"))
        self.host = "127.0.0.1"
        self.port = port or free_port(self.host)
        self.overrides = {k: str(v) for k, v in (overrides or {}).items()}
        self.start_timeout = start_timeout
        self.log_file = log_file or (self.data_dir.parent / f"{self.data_dir.name}.log")
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def bootstrap_servers(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def log_dir(self) -> Path:
        return self.data_dir / "logs" if "log.dirs" not in self.overrides else \
            Path(self.overrides["log.dirs"].split(",")[0])

    def command(self) -> list[str]:
        settings = {
            "listeners": f"PLAINTEXT://{self.host}:{self.port}",
            "log.dirs": str(self.data_dir / "logs"),
            **self.overrides,
        }
        cmd = [sys.executable, "-m", "klog", "broker", "start"]
        for key, value in settings.items():
            cmd += ["--override", f"{key}={value}"]
        return cmd

    def start(self) -> KlogBroker:
        if self.process is not None and self.process.poll() is None:
            return self
        self.data_dir.mkdir(parents=True, exist_ok=True)
        log = open(self.log_file, "ab")  # noqa: SIM115 - kept open for the child
        self.process = subprocess.Popen(self.command(), stdout=log, stderr=log,
                                        stdin=subprocess.DEVNULL)
        log.close()
        deadline = time.monotonic() + self.start_timeout
        probe = _ServingProbe(self.host, self.port)
        try:
            while time.monotonic() < deadline:
                if self.process.poll() is not None:
                    raise BrokerStartError(f"klog broker exited with "
                                           f"{self.process.returncode}:\n{self.log_tail()}")
                if probe.answered():
                    return self
        finally:
            probe.close()
        self.kill()
        raise BrokerStartError(f"klog broker did not serve on port {self.port} within "
                               f"{self.start_timeout} s:\n{self.log_tail()}")

    def stop(self, timeout: float = 30.0) -> int | None:
        """Clean shutdown (SIGTERM); returns the exit code."""
        proc = self.process
        if proc is None or proc.poll() is not None:
            return proc.returncode if proc else None
        proc.send_signal(signal.SIGTERM)
        try:
            return proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            return proc.wait()

    def kill(self) -> None:
        """SIGKILL: a crash, with no chance to flush or checkpoint."""
        proc = self.process
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()

    def restart(self) -> KlogBroker:
        self.stop()
        return self.start()

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_file.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def close(self) -> None:
        self.stop()
        if self._own_dir:
            shutil.rmtree(self.data_dir, ignore_errors=True)
            with contextlib.suppress(OSError):
                os.unlink(self.log_file)

    def __enter__(self) -> KlogBroker:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()


@contextlib.contextmanager
def broker(overrides: Mapping[str, Any] | None = None, **kwargs: Any) -> Iterator[KlogBroker]:
    """Start a broker with config overrides (a mapping of Kafka names, or keyword arguments
    with underscores for dots: ``broker(num_partitions=3)``); stop it and remove its data
    afterwards."""
    settings = dict(overrides or {})
    settings.update({k.replace("_", "."): v for k, v in kwargs.items()})
    with KlogBroker(overrides=settings) as running:
        yield running


try:  # the pytest plugin half; pytest is not a runtime dependency of klog
    import pytest
except ImportError:  # pragma: no cover
    pytest = None  # type: ignore[assignment]  # the module's name, None when pytest is absent

if pytest is not None:

    @pytest.fixture
    def klog_broker_factory(tmp_path_factory: Any) -> Iterator[Any]:
        """A function starting brokers: ``factory(**{"num.partitions": 3})``."""
        started: list[KlogBroker] = []

        def make(overrides: Mapping[str, Any] | None = None, **kwargs: Any) -> KlogBroker:
            settings = dict(overrides or {})
            settings.update({k.replace("_", "."): v for k, v in kwargs.items()})
            broker = KlogBroker(tmp_path_factory.mktemp("klog"), overrides=settings)
            started.append(broker)
            return broker.start()

        yield make
        for broker in started:
            broker.close()

    @pytest.fixture
    def klog_broker(klog_broker_factory: Callable[..., KlogBroker]) -> KlogBroker:
        """A running klog broker; ``klog_broker.bootstrap_servers`` is its address."""
        return klog_broker_factory()
