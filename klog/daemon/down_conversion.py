"""Down-conversion of a consumer's fetched records for Fetch v0-v3 (Kafka's
KafkaApis.maybeConvertFetchedData): the fetch side's last step, after the replica
manager's read and before the answer is encoded.

A Fetch v0-v1 consumer reads magic 0 message sets, v2-v3 magic 1; the log holds v2
batches. Each partition's region is read and rewritten (klog/protocol/records/convert.py),
bounded by the partition's max bytes (the first entry always whole). A topic with
message.downconversion.enable=false answers UNSUPPORTED_VERSION; a zstd batch
UNSUPPORTED_COMPRESSION_TYPE (set on the partition's result, its records dropped).
Reading and converting run in a worker thread: inflating and rewriting a fetch's worth of
records must not hold the event loop. Fetch v4+ never comes here: its regions go out as
they are (sendfile).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from klog.daemon.delayed import FetchKey
from klog.daemon.replica_results import FetchResult
from klog.protocol.errors import ErrorCode, KafkaError
from klog.protocol.records.convert import down_convert
from klog.storage.config import LogConfig
from klog.storage.values import FetchDataInfo

log = logging.getLogger(__name__)


async def down_convert_fetched(wanted: list[FetchKey], results: list[FetchResult], magic: int,
                               topic_config: Callable[[str], LogConfig]) -> dict[int, bytes]:
    """The records of each partition read (index into ``results``, whose errors are set
    here) as a message set of ``magic``; ``topic_config`` gives a topic's LogConfig (its
    message.downconversion.enable)."""
    jobs: list[tuple[int, FetchDataInfo, int, int]] = []
    enabled: dict[str, bool] = {}
    for i, ((topic, _partition, fetch_offset, max_bytes, _e), r) in enumerate(
            zip(wanted, results, strict=True)):
        if r.error_code or r.data is None or not r.size:
            continue
        if topic not in enabled:
            enabled[topic] = topic_config(topic).message_downconversion_enable
        if not enabled[topic]:
            r.error_code = int(ErrorCode.UNSUPPORTED_VERSION)
            continue
        jobs.append((i, r.data, fetch_offset, max_bytes))
    if not jobs:
        return {}
    converted = await asyncio.to_thread(_down_convert_all, jobs, magic)
    out: dict[int, bytes] = {}
    for i, answer in converted.items():
        if isinstance(answer, KafkaError):
            results[i].error_code = int(answer.error_code)
        else:
            out[i] = answer
    return out


def _down_convert_all(jobs: list[tuple[int, FetchDataInfo, int, int]], magic: int
                      ) -> dict[int, bytes | KafkaError]:
    """``down_convert_fetched``'s worker: read each region and convert it."""
    out: dict[int, bytes | KafkaError] = {}
    for i, data, fetch_offset, max_bytes in jobs:
        try:
            out[i] = down_convert(data.read_bytes(), magic, fetch_offset, max_bytes=max_bytes)
        except KafkaError as exc:
            out[i] = exc.with_traceback(None)
        except OSError as exc:
            log.error("reading records to down-convert failed: %s", exc)
            out[i] = KafkaError(f"reading the records failed: {exc}")
    return out
