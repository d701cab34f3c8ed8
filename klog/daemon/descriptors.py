"""The broker's file descriptor budget: the limit raised at start, and what a create may use.

Every partition hosted here holds one descriptor per segment (its .log file; index mappings
hold none, see klog/storage/index.py), every connection one, and a fetch answer one more
while its record regions are being sent. Kafka's operators run brokers with a raised
RLIMIT_NOFILE (100,000 or more); klog raises its soft limit to the hard limit at start, as
the JVM does for Kafka (-XX:+MaxFDLimit), and logs it.

A CreateTopics or CreatePartitions that would place more partitions on this broker than
the descriptors left allow is refused up front (POLICY_VIOLATION, with the numbers and how
to raise the limit): otherwise the logs are created until the table is full, every later
file open fails ("Too many open files"), and the broker cannot even load its logs again.
What is left keeps a headroom for connections, segment rolls and transient files.

Only this broker's descriptors are known here: in a cluster, each broker checks the
partitions a request places on itself (the one that received it).

At start, before the logs load, ``check_log_dirs`` counts the segments on disk: if the
limit cannot hold them all, the start fails at once with that count and how to raise the
limit, rather than with "Too many open files" half way through loading.
"""

from __future__ import annotations

import logging
import os
import resource
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from klog.storage.files import LOG_FILE_SUFFIX

log = logging.getLogger(__name__)

#: Descriptors a new partition holds at rest: the active segment's .log file.
DESCRIPTORS_PER_PARTITION = 1
#: Kept free for connections, segment rolls, checkpoints and transient files: a fifth of
#: the limit, and never less than this.
MIN_HEADROOM = 256
#: What a broker opens besides its segments before it serves anyone (listeners, the
#: metastore, lock files, the interpreter's own): what start-up must have left.
START_UP_DESCRIPTORS = 64
_FD_DIR = "/proc/self/fd"


def raise_open_file_limit() -> tuple[int, int]:
    """Raise the soft RLIMIT_NOFILE to the hard limit (capped by the kernel's nr_open when
    the hard limit is unlimited); returns (old soft limit, new soft limit)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard
    if hard == resource.RLIM_INFINITY:
        try:
            with open("/proc/sys/fs/nr_open") as f:
                target = int(f.read())
        except (OSError, ValueError):
            target = 1 << 20
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (OSError, ValueError) as exc:
            log.warning("cannot raise the open file limit (RLIMIT_NOFILE) from %d to %d: %s",
                        soft, target, exc)
            return soft, soft
        log.info("raised the open file limit (RLIMIT_NOFILE) from %d to the hard limit %d",
                 soft, target)
        return soft, target
    log.info("open file limit (RLIMIT_NOFILE): %s", "unlimited"
             if soft == resource.RLIM_INFINITY else soft)
    return soft, soft


def open_descriptors() -> int | None:
    """Descriptors this process has open now (None where /proc/self/fd is not there)."""
    try:
        # The listing's own descriptor is in it.
        return len(os.listdir(_FD_DIR)) - 1
    except OSError:
        return None


@dataclass(frozen=True)
class Budget:
    """The descriptors a create may still use: the soft limit less those open, less the
    headroom, less those promised to creates still in progress."""

    limit: int
    in_use: int
    headroom: int
    reserved: int

    @property
    def available(self) -> int:
        return max(0, self.limit - self.in_use - self.headroom - self.reserved)

    def partitions_allowed(self) -> int:
        return self.available // DESCRIPTORS_PER_PARTITION


def current_budget(reserved: int = 0) -> Budget | None:
    """The budget now (None when the limit is unlimited or the count is unknown)."""
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    in_use = open_descriptors()
    if soft == resource.RLIM_INFINITY or in_use is None:
        return None
    return Budget(soft, in_use, max(MIN_HEADROOM, soft // 5), reserved)


def refusal(new_partitions: int, reserved: int = 0) -> str | None:
    """Why placing ``new_partitions`` more partitions here is refused, or None."""
    if new_partitions <= 0:
        return None
    budget = current_budget(reserved)
    if budget is None:
        return None
    needed = new_partitions * DESCRIPTORS_PER_PARTITION
    if needed <= budget.available:
        return None
    return (
        f"{new_partitions} new partitions on this broker need {needed} file descriptors, but "
        f"only {budget.available} of its open file limit of {budget.limit} are left "
        f"({budget.in_use} in use, {budget.headroom} kept for connections"
        + (f", {budget.reserved} for creations in progress" if budget.reserved else "")
        + f"): at most {budget.partitions_allowed()} partitions can be added. Raise the "
        f"broker's open file limit (RLIMIT_NOFILE: `ulimit -n`, LimitNOFILE= in a systemd "
        f"unit, nofile in /etc/security/limits.conf) and restart it, or create fewer "
        f"partitions."
    )


class DescriptorLimitError(RuntimeError):
    """The open file limit cannot hold the segments already in the log dirs."""


def count_segments(log_dirs: Iterable[Path | str]) -> int:
    """The .log files in the partition directories of ``log_dirs`` (one descriptor each
    once loaded)."""
    count = 0
    for log_dir in log_dirs:
        try:
            partitions = [e for e in os.scandir(log_dir)
                          if e.is_dir(follow_symlinks=False) and not e.name.startswith(".")]
        except FileNotFoundError:
            continue
        for entry in partitions:
            with os.scandir(entry.path) as files:
                count += sum(1 for f in files if f.name.endswith(LOG_FILE_SUFFIX))
    return count


def check_log_dirs(log_dirs: Iterable[Path | str]) -> int:
    """Raise DescriptorLimitError unless the soft limit holds every segment on disk plus
    what start-up needs; returns the number of segments."""
    segments = count_segments(log_dirs)
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return segments
    needed = segments + START_UP_DESCRIPTORS
    if needed > soft:
        raise DescriptorLimitError(
            f"the log dirs hold {segments} segments, each of which keeps its .log file "
            f"open, but the open file limit (RLIMIT_NOFILE) is {soft}: raise the hard limit "
            f"to more than {needed} (`ulimit -Hn`, LimitNOFILE= in a systemd unit, nofile "
            f"in /etc/security/limits.conf) and start the broker again"
        )
    return segments
