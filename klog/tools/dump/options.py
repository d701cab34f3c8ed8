"""The dump tool's switches (Kafka's DumpLogSegments options) and its key/value decoders.

``DumpOptions`` names Kafka's options; ``make_decoder`` turns a ``--key-decoder-class`` /
``--value-decoder-class`` name (Kafka's Java class names, or klog's short ones) into a
function from bytes to text. The size bounds of a dump live here too.
"""

from __future__ import annotations

import base64
import struct
from collections.abc import Callable
from dataclasses import dataclass

DEFAULT_MAX_MESSAGE_SIZE = 5 * 1024 * 1024  # Kafka's --max-message-size default
DEFAULT_MAX_BYTES = 2**31 - 1  # Kafka's --max-bytes default (Integer.MAX_VALUE)
CHUNK_SIZE = 1 << 20
# Batches up to this size (or --max-message-size, if larger) are read whole and can be
# decoded; Kafka's own limits (message.max.bytes ~1 MiB) sit far below it.
IN_MEMORY_BATCH_BOUND = 64 * 1024 * 1024
# Bound on one batch's decompressed records (a decompression bomb is refused, not expanded).
MAX_DECOMPRESSED_SIZE = 256 * 1024 * 1024

DEFAULT_DECODER = "kafka.serializer.StringDecoder"

_STRING_NAMES = (
    "string",
    "kafka.serializer.StringDecoder",
    "org.apache.kafka.tools.api.StringDecoder",
)
_HEX_NAMES = (
    "hex",
    # Kafka's DefaultDecoder returns the raw byte[], which Java prints as "[B@<hash>";
    # hex is the useful rendering of "the bytes as they are".
    "kafka.serializer.DefaultDecoder",
    "org.apache.kafka.tools.api.DefaultDecoder",
)
_INT_NAMES = (
    "int",
    "kafka.serializer.IntegerDecoder",
    "org.apache.kafka.tools.api.IntegerDecoder",
)
_LONG_NAMES = (
    "long",
    "kafka.serializer.LongDecoder",
    "org.apache.kafka.tools.api.LongDecoder",
)
_BASE64_NAMES = ("base64",)

DECODER_NAMES = _STRING_NAMES + _HEX_NAMES + _INT_NAMES + _LONG_NAMES + _BASE64_NAMES

_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
_INT64 = struct.Struct(">q")


def _decode_string(data: bytes) -> str:
    # Java's new String(bytes, UTF_8) replaces malformed sequences; so does this.
    return data.decode("utf-8", "replace")


def _decode_hex(data: bytes) -> str:
    return data.hex()


def _decode_base64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _decode_int(data: bytes) -> str:
    # Like ByteBuffer.wrap(bytes).getInt(): the first four bytes, big-endian.
    if len(data) < 4:
        return f"<not an int32: {len(data)} byte(s)>"
    return str(_INT32.unpack_from(data)[0])


def _decode_long(data: bytes) -> str:
    if len(data) < 8:
        return f"<not an int64: {len(data)} byte(s)>"
    return str(_INT64.unpack_from(data)[0])


def make_decoder(name: str) -> Callable[[bytes], str]:
    """The decoder for a ``--key-decoder-class`` / ``--value-decoder-class`` name.

    Kafka takes Java class names; the common ones are accepted, plus klog's short names
    ``string``, ``hex``, ``base64``, ``int``, ``long``. Raises ValueError otherwise.
    """
    for names, decoder in (
        (_STRING_NAMES, _decode_string),
        (_HEX_NAMES, _decode_hex),
        (_INT_NAMES, _decode_int),
        (_LONG_NAMES, _decode_long),
        (_BASE64_NAMES, _decode_base64),
    ):
        if name in names:
            return decoder
    raise ValueError(
        f"unknown decoder {name!r}; use one of: string, hex, base64, int, long, or "
        "kafka.serializer.{String,Default,Integer,Long}Decoder"
    )


@dataclass(frozen=True, slots=True)
class DumpOptions:
    """The dump tool's switches, named after Kafka's options.

    ``key_decoder`` / ``value_decoder`` are None when not given; giving one (like giving
    any decoder option) implies ``print_data_log``, which implies ``deep_iteration``.
    """

    print_data_log: bool = False
    deep_iteration: bool = False
    verify_index_only: bool = False
    index_sanity_check: bool = False
    max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE
    max_bytes: int = DEFAULT_MAX_BYTES
    offsets_decoder: bool = False
    transaction_log_decoder: bool = False
    key_decoder: str | None = None
    value_decoder: str | None = None
    skip_record_metadata: bool = False
    # Dump a file with a known suffix even if it is not named as Kafka names segments.
    force: bool = False

    def __post_init__(self) -> None:
        for name in (self.key_decoder, self.value_decoder):
            if name is not None:
                make_decoder(name)  # fail early on an unknown name
        if self.max_message_size <= 0:
            raise ValueError("max_message_size must be positive")
        if self.max_bytes < 0:
            raise ValueError("max_bytes must not be negative")

    @property
    def prints_data(self) -> bool:
        return (
            self.print_data_log
            or self.offsets_decoder
            or self.transaction_log_decoder
            or self.key_decoder is not None
            or self.value_decoder is not None
        )

    @property
    def deep(self) -> bool:
        return self.deep_iteration or self.prints_data
