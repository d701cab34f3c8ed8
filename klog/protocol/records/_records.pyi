"""Type stub of klog/protocol/records/_records.c, the C twin of validate.check_records
(mypy cannot read an extension module)."""

# (0, None, min_ts_delta, max_ts_delta) when valid, (1, message, 0, 0) when malformed,
# (2, message, 0, 0) when a rule is broken.
def check_v2(
    records: bytes | bytearray | memoryview, count: int, require_keys: bool, batch_position: int, /
) -> tuple[int, str | None, int, int]: ...
