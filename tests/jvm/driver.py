"""Running klog's JVM peers (the Maven project beside this file) from pytest.

``make setup`` compiles ``src/main/java/klog/jvm`` and writes the run-time class path of
Kafka's jars (pinned in pom.xml) to ``target/classpath.txt`` (and, for the client
scenarios against Kafka's 3.x client, ``target/kafka3/``). Two ways to run them:

- ``Jvm``: one long-lived driver JVM (``klog.jvm.Driver serve``, of either build) that runs
  one scenario per call and answers it in JSON (``jvm.call("produce", bootstrap=...,
  topic=...)``); a test module keeps one for all its tests, so it pays one JVM start on
  this 2-core machine. A scenario that fails raises ``JavaFailure`` with the Java stack
  trace; one that does not answer within its timeout kills the JVM (after a thread dump
  into its log) and fails.
- ``JavaProcess``: one scenario, or one of Kafka's own main classes (a Connect worker), in a
  JVM of its own, for what a test kills -9 or runs beside others; its stdout lines (the
  driver's events) are read as they come.

Both keep the JVM's stderr (Kafka's log) in a file and show its tail in failures. A missing
build is a failure that says to run ``make setup``, never a skip.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import re
import signal
import subprocess
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

PROJECT = Path(__file__).resolve().parent
# Each build: its output directory (classes/, classpath.txt). "kafka4" is every peer at the
# 4.x release pom.xml pins; "kafka3" the client scenarios against the 3.x client
# (pom.xml's kafka3 profile).
BUILDS = {"kafka4": PROJECT / "target", "kafka3": PROJECT / "target" / "kafka3"}
JAVA = os.environ.get("JAVA", "/usr/bin/java")

# Start-up matters more than peak speed here: C1 only, the serial collector, no perf data.
JVM_OPTIONS = ("-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-XX:-UsePerfData",
               "-Xss1m", "-Xmx512m", "-Djava.net.preferIPv4Stack=true")


def classpath(build: str = "kafka4") -> str:
    """Our classes and Kafka's jars; fails (never skips) when the build is missing."""
    target = BUILDS[build]
    listing, classes = target / "classpath.txt", target / "classes"
    if not listing.is_file() or not (classes / "klog" / "jvm" / "Driver.class").is_file():
        pytest.fail(f"the JVM peers are not built ({listing} missing): run `make setup`")
    return f"{classes}{os.pathsep}{listing.read_text().strip()}"


def kafka_version(build: str = "kafka4") -> str:
    """The kafka-clients version a build runs with (from its class path)."""
    found = re.search(r"kafka-clients-([\w.-]+)\.jar", classpath(build))
    assert found is not None, f"no kafka-clients jar in the {build} class path"
    return found.group(1)


def java_command(main: str, *args: str, options: Sequence[str] = (),
                 build: str = "kafka4") -> list[str]:
    return [JAVA, *JVM_OPTIONS, *options, "-cp", classpath(build), main, *args]


def tail(path: Path, lines: int = 60) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


class JavaFailure(AssertionError):
    """A scenario that failed in the JVM: its exception, with the Java stack trace."""


class _Process:
    """A JVM whose stdout lines a thread queues and whose stderr goes to ``log``."""

    def __init__(self, command: list[str], log: Path, stdin: bool = True,
                 cwd: Path | None = None) -> None:
        self.log = log
        log.parent.mkdir(parents=True, exist_ok=True)
        with open(log, "ab") as err:
            self.process = subprocess.Popen(
                command, stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
                stdout=subprocess.PIPE, stderr=err, cwd=cwd)
        self.lines: queue.Queue[str | None] = queue.Queue()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for raw in self.process.stdout:
            self.lines.put(raw.decode(errors="replace"))
        self.lines.put(None)

    def send(self, message: Mapping[str, Any]) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps(message).encode() + b"\n")
        self.process.stdin.flush()

    def next_message(self, timeout: float, what: str) -> dict[str, Any]:
        """The next JSON line on stdout (other lines are logged and skipped)."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            try:
                line = self.lines.get(timeout=max(left, 0.001))
            except queue.Empty:
                self.dump_threads()
                raise AssertionError(f"no answer from the JVM within {timeout} s for {what}; "
                                     f"its log ({self.log}):\n{tail(self.log)}") from None
            if line is None:
                code = self.process.wait()
                raise AssertionError(f"the JVM exited ({code}) during {what}; its log "
                                     f"({self.log}):\n{tail(self.log)}")
            if line.startswith("{"):
                message: dict[str, Any] = json.loads(line)
                return message
            with open(self.log, "a") as log:
                log.write(f"[stdout] {line}")

    def dump_threads(self) -> None:
        """SIGQUIT: the JVM writes every thread's stack to its stderr (the log)."""
        if self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.process.send_signal(signal.SIGQUIT)
            time.sleep(0.5)

    @property
    def pid(self) -> int:
        return self.process.pid

    def alive(self) -> bool:
        return self.process.poll() is None

    def kill(self) -> None:
        """kill -9."""
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()

    def stop(self, timeout: float = 20.0) -> None:
        """SIGTERM (Kafka's shutdown hooks run), SIGKILL after ``timeout``."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.dump_threads()
                self.kill()
        if self.process.stdin is not None:
            with contextlib.suppress(OSError):
                self.process.stdin.close()


class Jvm:
    """One driver JVM serving scenarios; see the module docstring."""

    def __init__(self, log: Path, build: str = "kafka4") -> None:
        self.log = log
        self.build = build
        self._process: _Process | None = None

    @property
    def kafka_version(self) -> str:
        return kafka_version(self.build)

    def _running(self) -> _Process:
        if self._process is None or not self._process.alive():
            self._process = _Process(java_command("klog.jvm.Driver", "serve",
                                                  build=self.build), self.log)
        return self._process

    def call(self, scenario: str, timeout: float = 90.0, **args: Any) -> Any:
        """Run ``scenario`` with ``args``; its result, or JavaFailure."""
        process = self._running()
        process.send({"scenario": scenario, "args": args})
        deadline = time.monotonic() + timeout
        try:
            answer = process.next_message(timeout, f"scenario {scenario}")
            while "ok" not in answer:  # an event of the scenario's: only its answer counts
                answer = process.next_message(max(deadline - time.monotonic(), 0.001),
                                              f"scenario {scenario}")
        except AssertionError:
            process.kill()
            raise
        if not answer.get("ok"):
            raise JavaFailure(f"scenario {scenario} failed: {answer.get('error')}\n"
                              f"{answer.get('trace', '')}")
        return answer.get("result")

    def close(self) -> None:
        if self._process is not None:
            if self._process.process.stdin is not None:
                with contextlib.suppress(OSError):
                    self._process.process.stdin.close()
            try:
                self._process.process.wait(10)
            except subprocess.TimeoutExpired:
                self._process.kill()
            self._process = None


class JavaProcess(_Process):
    """One scenario (``klog.jvm.Driver run NAME ARGS``) or one Kafka main class in a JVM of
    its own; see the module docstring."""

    @classmethod
    def scenario(cls, name: str, log: Path, **args: Any) -> JavaProcess:
        return cls(java_command("klog.jvm.Driver", "run", name, json.dumps(args)), log)

    @classmethod
    def main(cls, main: str, *argv: str, log: Path, options: Sequence[str] = (),
             cwd: Path | None = None) -> JavaProcess:
        return cls(java_command(main, *argv, options=options), log, stdin=False, cwd=cwd)

    def event(self, name: str, timeout: float = 60.0) -> dict[str, Any]:
        """The next event named ``name`` (earlier events of other names are skipped)."""
        deadline = time.monotonic() + timeout
        while True:
            message = self.next_message(max(deadline - time.monotonic(), 0.001),
                                        f"event {name}")
            if message.get("event") == name:
                return message
            if "ok" in message and not message["ok"]:
                raise JavaFailure(f"the scenario failed while waiting for {name}: "
                                  f"{message.get('error')}\n{message.get('trace', '')}")

    def result(self, timeout: float = 90.0) -> Any:
        """The scenario's final answer (events before it are skipped)."""
        deadline = time.monotonic() + timeout
        while True:
            message = self.next_message(max(deadline - time.monotonic(), 0.001), "the result")
            if "ok" in message:
                if not message["ok"]:
                    raise JavaFailure(f"{message.get('error')}\n{message.get('trace', '')}")
                return message.get("result")


@contextlib.contextmanager
def jvm_session(log: Path) -> Iterator[Jvm]:
    jvm = Jvm(log)
    try:
        yield jvm
    finally:
        jvm.close()
