"""Type stub of klog/protocol/_produce.c, the C twin of produce.py's request decoder and
response encoder (mypy cannot read an extension module)."""

from collections.abc import Callable, Sequence
from typing import Any

# Any: the request/topic/partition classes are kio's, generated per version at runtime.
def configure(
    version: int,
    request_cls: type,
    topic_cls: type,
    partition_cls: type,
    timeout_of: Callable[[Any], int],
    partition_response_cls: type,
    /,
) -> None: ...

# Any: a kio ProduceRequest entity (its class is chosen by version at runtime); None leaves
# the body to the Python decoder.
def decode(version: int, body: memoryview, /) -> Any | None: ...

# node_endpoints: None, or (node_id, host, port, rack) tuples (v10+).
def encode(
    version: int,
    topics: Sequence[tuple[str, Sequence[Any]]],
    throttle_time_ms: int,
    node_endpoints: Sequence[tuple[int, str, int, str | None]] | None,
    /,
) -> bytes | None: ...
