"""Type stub of klog/spark/_columns.c, the C twin of columns.py's v2 record loop (mypy
cannot read an extension module)."""

# key and value: (validity bytes or None, null count, int32 offsets bytes, data bytes).
Column = tuple[bytes | None, int, bytes, bytes]
# (rows, past_end, key, value, offsets, timestamps)
Result = tuple[int, bool, Column, Column, bytes, bytes]

def decode_v2(
    data: bytes | bytearray | memoryview,
    count: int,
    base_offset: int,
    base_timestamp: int,
    log_append_time: bool,
    start: int,
    end: int,
    /,
) -> Result: ...
