"""DescribeLogDirs (v1-4): per log dir, the partitions it holds with their sizes, and (v4)
the file system's total and usable bytes.

As Kafka: offset_lag is how far the log end offset trails the high watermark (0 for a
hosted replica, -1 for a log no replica serves), is_future_key is False (klog moves no
replicas between dirs), and a requested topic listed in a dir without any of the requested
partitions still appears, with none.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

from klog.daemon.handlers import RequestContext
from klog.protocol.errors import ErrorCode


async def handle(ctx: RequestContext, request: Any) -> Any:
    broker = ctx.broker
    rm = broker.replica_manager
    hosted = set(rm.partitions) if rm is not None else set()
    wanted: set[tuple[str, int]] | None = None
    if request.topics is not None:
        wanted = {(t.topic, p) for t in request.topics for p in t.partitions}
    results = await asyncio.to_thread(_describe, broker, hosted, wanted)
    return ctx.respond({"throttle_time": 0, "error_code": 0, "results": results})


def _describe(broker: Any, hosted: set[tuple[str, int]],
              wanted: set[tuple[str, int]] | None) -> list[dict[str, Any]]:
    lm = broker.log_manager
    if lm is None:
        return []
    by_dir: dict[str, dict[str, list[dict[str, Any]]]] = {}
    for tp, plog in sorted(lm.all_logs().items()):
        log_dir = lm.log_dir_of(*tp)
        if log_dir is None:
            continue
        topics = by_dir.setdefault(os.path.abspath(log_dir), {})
        parts = topics.setdefault(tp[0], [])
        if wanted is not None and tp not in wanted:
            continue
        lag = max(plog.high_watermark - plog.log_end_offset, 0) if tp in hosted else -1
        parts.append({"partition_index": tp[1], "partition_size": plog.size,
                      "offset_lag": lag, "is_future_key": False})
    results = []
    for log_dir in dict.fromkeys(os.path.abspath(d) for d in broker.config.log_dirs):
        out: dict[str, Any] = {"error_code": 0, "log_dir": log_dir, "topics": [],
                               "total_bytes": -1, "usable_bytes": -1}
        try:
            st = os.statvfs(log_dir)
        except OSError:
            out["error_code"] = int(ErrorCode.KAFKA_STORAGE_ERROR)
            results.append(out)
            continue
        out["total_bytes"] = st.f_blocks * st.f_frsize
        out["usable_bytes"] = st.f_bavail * st.f_frsize
        topics = by_dir.get(log_dir, {})
        if wanted is not None:
            topics = {t: p for t, p in topics.items() if any(w[0] == t for w in wanted)}
        out["topics"] = [{"name": t, "partitions": p} for t, p in topics.items()]
        results.append(out)
    return results
