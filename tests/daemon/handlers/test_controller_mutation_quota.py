"""controller_mutation_rate (KIP-599) over the wire: CreateTopics, CreatePartitions and
DeleteTopics count partitions against the client's quota; the newer versions (CreateTopics
v6+, CreatePartitions v3+, DeleteTopics v5+) are refused with THROTTLING_QUOTA_EXCEEDED
while the client is over it, older versions are done and throttled."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from klog.protocol.errors import ErrorCode
from tests.daemon.wire import InProcessBroker, running_broker


def _create(name: str, partitions: int) -> dict[str, Any]:
    return {"topics": [{"name": name, "num_partitions": partitions, "replication_factor": 1,
                        "assignments": [], "configs": []}],
            "timeout": 10_000, "validate_only": False}


def _call(broker: InProcessBroker, api_key: int, version: int, values: dict[str, Any]) -> Any:
    """On a fresh connection: a throttled one holds its next request (KIP-219)."""
    with broker.connect() as client:
        return client.call(api_key, version, values)


def _set_quota(broker: InProcessBroker, value: str | None) -> None:
    broker.call(lambda: broker.broker.client_quotas.configs.set(
        (None, "wire"), {} if value is None else {"controller_mutation_rate": value}))


def test_mutations_over_the_quota_are_refused_or_throttled(tmp_path: Path) -> None:
    with running_broker(tmp_path) as broker:
        _set_quota(broker, "1")  # one partition per second
        # a burst is let through (strict: refused only once over) ...
        first = _call(broker, 19, 7, _create("m1", 20))
        assert first.topics[0].error_code == 0 and first.throttle_time.total_seconds() == 0
        # ... and paid for: 20 partitions over the 10 s minimum window is 2/s
        refused = _call(broker, 19, 7, _create("m2", 1))
        assert refused.topics[0].error_code == ErrorCode.THROTTLING_QUOTA_EXCEEDED
        assert refused.topics[0].error_message == "The throttling quota has been exceeded."
        assert refused.throttle_time.total_seconds() > 0
        more = _call(broker, 37, 3, {"topics": [{"name": "m1", "count": 30,
                                                 "assignments": None}],
                                     "timeout": 10_000, "validate_only": False})
        assert more.results[0].error_code == ErrorCode.THROTTLING_QUOTA_EXCEEDED
        deleted = _call(broker, 20, 6, {"topics": [{"name": "m1", "topic_id": None}],
                                        "timeout": 10_000})
        assert deleted.responses[0].error_code == ErrorCode.THROTTLING_QUOTA_EXCEEDED
        # older versions: done, and throttled
        old = _call(broker, 19, 5, _create("m3", 1))
        assert old.topics[0].error_code == 0 and old.throttle_time.total_seconds() > 0
        # validate_only counts nothing and is never refused
        check = _call(broker, 19, 7, {**_create("m4", 5), "validate_only": True})
        assert check.topics[0].error_code == 0
        # no quota: nothing refused
        _set_quota(broker, None)
        done = _call(broker, 19, 7, _create("m5", 3))
        assert done.topics[0].error_code == 0
