"""The native latency floor: the least any broker must do, run next to klog in the same run.

``benchmarks/latency_floor.c`` is a single-threaded epoll server in C that speaks only what
librdkafka's producer needs (ApiVersions, Metadata v1, Produce v3-v8), appends each
produced record batch as-is to one file and answers. The latency benchmark measures it
with the same harness as the klog broker; its p99 is the floor the host allows at that
moment (a virtual machine's CPU steal moves it).

This module owns building that binary (``gcc -O2``, when it is missing or older than its
source) and running it for the length of a ``with`` block: :class:`FloorServer`.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import time
from pathlib import Path
from types import TracebackType

SOURCE = Path(__file__).with_name("latency_floor.c")
START_TIMEOUT = 10.0  # seconds to wait for the server's port line
STOP_TIMEOUT = 5.0  # seconds between SIGTERM and SIGKILL


def build(work_dir: Path) -> Path:
    """Compile the floor server into ``work_dir`` unless an up-to-date binary is there."""
    binary = work_dir / "latency_floor"
    if binary.exists() and binary.stat().st_mtime >= SOURCE.stat().st_mtime:
        return binary
    work_dir.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        ["gcc", "-O2", "-o", str(binary), str(SOURCE)],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        raise RuntimeError(f"compiling {SOURCE} failed:\n{done.stderr}")
    return binary


class FloorServer:
    """The floor server on a free loopback port, appending to ``<work_dir>/floor.data``."""

    def __init__(self, work_dir: Path) -> None:
        self.work_dir = work_dir
        self.binary = build(work_dir)
        self.data_file = work_dir / "floor.data"
        self.process: subprocess.Popen[bytes] | None = None  # set by __enter__, kept after
        self.port = 0

    @property
    def bootstrap_servers(self) -> str:
        return f"127.0.0.1:{self.port}"

    def __enter__(self) -> FloorServer:
        self.data_file.unlink(missing_ok=True)
        self.process = subprocess.Popen(
            [str(self.binary), "0", str(self.data_file)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
        )
        try:
            self.port = self._read_port(self.process)
        except BaseException:
            self._stop()
            raise
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._stop()

    @staticmethod
    def _read_port(process: subprocess.Popen[bytes]) -> int:
        assert process.stdout is not None
        fd = process.stdout.fileno()
        deadline = time.monotonic() + START_TIMEOUT
        line = b""
        while not line.endswith(b"\n"):
            left = deadline - time.monotonic()
            if left <= 0:
                raise RuntimeError(f"latency_floor printed no port within {START_TIMEOUT:g} s")
            ready, _, _ = select.select([fd], [], [], left)
            if not ready:
                continue
            chunk = os.read(fd, 64)
            if not chunk:
                code = process.wait()
                raise RuntimeError(f"latency_floor exited with {code} before printing its port")
            line += chunk
        return int(line)

    def _stop(self) -> None:
        process = self.process
        if process is not None:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
                try:
                    process.wait(STOP_TIMEOUT)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()
            if process.stdout is not None:
                process.stdout.close()
        self.data_file.unlink(missing_ok=True)
