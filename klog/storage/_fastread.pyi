"""Type stub of klog/storage/_fastread.c, the C fast path of PartitionLog.read and
FetchDataInfo.readinto (mypy cannot read an extension module)."""

from collections.abc import Callable
from typing import Any

def configure(
    fetch_data_info: type,
    log_offset_metadata: type,
    boundary_cache_size: int,
    log_segment: type,
    offset_index: type,
    /,
) -> None: ...

# Any: the methods' own signatures are PartitionLog.read's and FetchDataInfo.readinto's;
# the C descriptors take whatever those take and fall back to the Python method.
def read_method(partition_log: type, python_read: Callable[..., Any], /) -> Any: ...
def readinto_method(fetch_data_info: type, python_readinto: Callable[..., Any], /) -> Any: ...
def read_stats() -> dict[str, int]: ...
