"""Kafka's wire framing: size-prefixed frames, request and response headers, size limits.

Owns the bytes around a message body; performs no I/O (the daemon's connection feeds it
what the socket gave and writes what it returns). Grammar, from the Kafka protocol guide:

    frame            => size:int32 payload            (size counts the payload only)
    request payload  => request_header body
    request_header   v0 => api_key:int16 api_version:int16 correlation_id:int32
                     v1 => v0 client_id:nullable_string          (int16 length, -1 = null)
                     v2 => v1 tagged_fields                      (uvarint count, then
                                                                  uvarint tag, uvarint size,
                                                                  bytes -- per field)
    response payload => response_header body
    response_header  v0 => correlation_id:int32
                     v1 => v0 tagged_fields

Which header version goes with which (api_key, api_version) is the API table's knowledge
(klog.protocol.apis): flexible versions use request header v2 / response header v1;
ControlledShutdown v0 uses request header v0; ApiVersions responses always use header v0.
client_id keeps the legacy int16-length string even in header v2, as in Kafka.

Rules, as Kafka's SocketServer applies them:
- a size that is negative or above ``socket.request.max.bytes`` (default 104857600) is a
  FrameSizeError: the connection must be closed. The size is checked as soon as its four
  bytes arrive, before anything is buffered for the body.
- an unknown api key, a version not advertised, or a header that does not parse: the
  connection is closed (Kafka answers nothing to these).
- except ApiVersions at an unsupported version: it is answered, in the v0 format whatever
  the version asked, with UNSUPPORTED_VERSION (35) and the ApiVersions range we support, so
  that a client can retry with a version we speak. librdkafka opens with ApiVersions v3 and
  relies on this to fall back. (Kafka lists only ApiVersions itself in that reply, KIP-511.)

The header is parsed by hand rather than with kio: kio has no request header v0, its reader
refuses unknown tagged fields (the spec says to skip them), and the header is on the path
of every request.
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Mapping
from typing import NamedTuple

from klog.protocol.apis import (
    ADVERTISED,
    API_VERSIONS,
    STANDALONE_ADVERTISED,
    UnknownApiKeyError,
    VersionRange,
    request_header_version,
    spec_for,
)
from klog.protocol.errors import ErrorCode, InvalidRequestError, UnsupportedVersionError
from klog.protocol.records.varint import read_unsigned

#: Kafka's socket.request.max.bytes default: the largest request frame a broker accepts.
DEFAULT_MAX_REQUEST_BYTES = 104_857_600
#: A response frame holds at least its correlation id.
MIN_RESPONSE_FRAME_BYTES = 4

#: Buffered reception (``FrameDecoder.get_buffer``): the most a body chunk received in
#: place, or the scratch buffer, holds -- asyncio's own read size.
RECEIVE_CHUNK = 256 << 10
#: A body with this much still to come is received in place; below it the bytes of
#: several small frames share one receive into the scratch buffer (a receive into a
#: buffer of a small frame's size would cost one event-loop iteration per frame).
IN_PLACE_MIN = 64 << 10

_SIZE = struct.Struct(">i")
_HEADER_FIXED = struct.Struct(">hhi")  # api_key, api_version, correlation_id
_HEADER_V1 = struct.Struct(">hhih")  # ... and client_id's length
_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")


class FrameSizeError(InvalidRequestError):
    """A frame size that is negative or beyond the limit: close the connection."""

    def __init__(self, size: int, max_frame_bytes: int) -> None:
        if size <= max_frame_bytes:  # negative, or below what the frame must hold
            message = f"invalid frame size {size}"
        else:
            message = f"frame of {size} bytes exceeds the limit of {max_frame_bytes} bytes"
        super().__init__(message)
        self.size = size
        self.max_frame_bytes = max_frame_bytes


# --- frames -------------------------------------------------------------------------------


def check_frame_size(size: int, max_frame_bytes: int = DEFAULT_MAX_REQUEST_BYTES) -> int:
    """Return ``size`` if a frame of that size may be read; FrameSizeError otherwise."""
    if size < 0 or size > max_frame_bytes:
        raise FrameSizeError(size, max_frame_bytes)
    return size


def check_response_frame_size(size: int, max_frame_bytes: int) -> int:
    """Return ``size`` if a response frame of that size may be read (it holds at least its
    correlation id, and a client's bound); FrameSizeError otherwise. Readers check it
    before they allocate anything for the payload."""
    if size < MIN_RESPONSE_FRAME_BYTES or size > max_frame_bytes:
        raise FrameSizeError(size, max_frame_bytes)
    return size


def decode_frame_size(prefix: bytes, max_frame_bytes: int = DEFAULT_MAX_REQUEST_BYTES) -> int:
    """The payload size announced by a 4-byte prefix (for readers that readexactly)."""
    if len(prefix) != 4:
        raise InvalidRequestError(f"frame size prefix of {len(prefix)} bytes, expected 4")
    return check_frame_size(_SIZE.unpack(prefix)[0], max_frame_bytes)


def encode_frame(payload: bytes | bytearray | memoryview) -> bytes:
    """``payload`` with its int32 size prefix."""
    return _SIZE.pack(len(payload)) + payload


class FrameDecoder:
    """Splits a byte stream into frame payloads, in arrival order.

    One per connection, used only by that connection's reader (not thread-safe). Feed it
    whatever the socket returned; it hands back each complete payload (without the size
    prefix) as a memoryview over a bytearray it owns, so the caller may keep it -- and
    patch it: the broker assigns offsets in a produced batch in place, as Kafka patches its
    request buffer. After a FrameSizeError the stream has lost its framing: every later
    ``feed`` raises again.

    Memory follows the bytes actually received, not the size a peer claims: the body of a
    frame is kept as the chunks that arrived (views of ``bytes`` input, which cannot
    change; copies of anything else) and joined once when complete -- one copy per byte,
    never pre-allocated from the prefix and never re-grown.

    A reader that receives into a buffer (asyncio's ``BufferedProtocol``: the TLS
    transport decrypts straight into it) uses ``get_buffer`` / ``buffer_updated`` instead
    of ``feed``. A frame body with at least IN_PLACE_MIN bytes still to come is then
    received in place, in chunks of at most RECEIVE_CHUNK allocated as they are filled
    (so at most one chunk ahead of what arrived); a body of at most RECEIVE_CHUNK is
    handed out as the very bytearray it was received into. Anything else -- size
    prefixes, small frames, the tail of a frame -- lands in one scratch buffer per
    decoder and goes through ``feed``.
    """

    def __init__(self, max_frame_bytes: int = DEFAULT_MAX_REQUEST_BYTES) -> None:
        self.max_frame_bytes = max_frame_bytes
        self._prefix = bytearray()  # up to 4 bytes of the next size prefix
        self._size: int | None = None  # payload size of the frame being received
        self._chunks: list[bytes | bytearray | memoryview] = []
        self._received = 0
        self._error: FrameSizeError | None = None
        # Buffered reception: the body chunk being received in place and how much of it
        # is filled; the scratch buffer; whether the last get_buffer gave the chunk.
        self._body: bytearray | None = None
        self._body_filled = 0
        self._scratch: memoryview | None = None
        self._into_body = False

    @property
    def buffered(self) -> int:
        """Bytes received but not yet returned as a frame (a partial frame)."""
        if self._size is None:
            return len(self._prefix)
        return 4 + self._received

    def feed(self, data: bytes | bytearray | memoryview) -> list[memoryview]:
        """Add received bytes; return the frames they completed (possibly none)."""
        if self._error is not None:
            raise self._error
        if self._body is not None:  # a chunk received in place, interrupted by a feed
            self._chunks.append(bytearray(memoryview(self._body)[: self._body_filled]))
            self._body, self._body_filled = None, 0
        frames: list[memoryview] = []
        with memoryview(data) as view:
            length = len(view)
            position = 0
            while True:
                if self._size is None:
                    take = min(4 - len(self._prefix), length - position)
                    self._prefix += view[position : position + take]
                    position += take
                    if len(self._prefix) < 4:
                        break
                    size = _SIZE.unpack(self._prefix)[0]
                    self._prefix.clear()
                    if size < 0 or size > self.max_frame_bytes:
                        self._error = FrameSizeError(size, self.max_frame_bytes)
                        raise self._error
                    self._size = size
                take = min(self._size - self._received, length - position)
                if take:
                    if type(data) is bytes:  # immutable (what asyncio delivers): keep a view
                        self._chunks.append(view[position : position + take])
                    else:  # the caller may reuse its buffer: copy now
                        self._chunks.append(bytearray(view[position : position + take]))
                    self._received += take
                    position += take
                if self._received < self._size:
                    break
                chunks = self._chunks
                if len(chunks) == 1 and type(chunks[0]) is bytearray:
                    payload = chunks[0]
                else:
                    payload = bytearray().join(chunks)
                frames.append(memoryview(payload))
                self._size, self._chunks, self._received = None, [], 0
        return frames

    def get_buffer(self) -> memoryview:
        """Where the next received bytes go, for a reader that receives into a buffer;
        tell ``buffer_updated`` how many it put there before asking again."""
        size = self._size
        if size is not None and self._error is None:
            if self._body is not None:
                self._into_body = True
                return memoryview(self._body)[self._body_filled :]
            remaining = size - self._received
            if remaining >= IN_PLACE_MIN:
                self._body = bytearray(min(remaining, RECEIVE_CHUNK))
                self._into_body = True
                return memoryview(self._body)
        self._into_body = False
        if self._scratch is None:
            self._scratch = memoryview(bytearray(RECEIVE_CHUNK))
        return self._scratch

    def buffer_updated(self, nbytes: int) -> list[memoryview]:
        """``nbytes`` were put at the start of the last ``get_buffer``; return the frames
        they completed (possibly none)."""
        if not self._into_body:
            assert self._scratch is not None
            return self.feed(self._scratch[:nbytes])
        body = self._body
        assert body is not None and self._size is not None
        self._body_filled += nbytes
        self._received += nbytes
        if self._body_filled < len(body):
            return []
        self._chunks.append(body)
        self._body, self._body_filled = None, 0
        if self._received < self._size:
            return []
        chunks = self._chunks
        payload = chunks[0] if len(chunks) == 1 else bytearray().join(chunks)
        self._size, self._chunks, self._received = None, [], 0
        return [memoryview(payload)]


# --- request header -----------------------------------------------------------------------


class RequestHeader(NamedTuple):
    """A parsed request header. ``client_id`` is None for header v0 and for a null id.
    (A named tuple: one is built for every request, and a tuple is the cheapest to build.)"""

    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    header_version: int


_new_header = tuple.__new__

# The header version of every (api key, version) a broker table accepts, keyed by
# api_key << 16 | version: what the common case of parse_request_header looks up, for the
# two tables a broker serves with (ADVERTISED in cluster mode, STANDALONE_ADVERTISED
# standalone). Both tables are read-only, so these never go stale.
def _header_versions(advertised: Mapping[int, VersionRange]) -> dict[int, int]:
    return {
        api_key << 16 | version: request_header_version(api_key, version)
        for api_key, (low, high) in advertised.items()
        for version in range(max(low, 0), high + 1)
    }


_CLUSTER_HEADERS = _header_versions(ADVERTISED)
_STANDALONE_HEADERS = _header_versions(STANDALONE_ADVERTISED)


def parse_request_header(
    frame: bytes | bytearray | memoryview,
    advertised: Mapping[int, VersionRange] = ADVERTISED,
) -> tuple[RequestHeader, int]:
    """Parse the header at the start of a request frame -> (header, offset of the body).

    ``advertised`` maps api_key -> (min, max) the broker accepts (default: the API table's
    advertised ranges). Raises UnknownApiKeyError for a key klog does not know or does not
    advertise, UnsupportedVersionError for a version outside the advertised range, and
    InvalidRequestError for a truncated or malformed header -- all mean "close the
    connection". ApiVersions is parsed at any version: check ``is_unsupported_api_versions``
    and answer those with ``api_versions_fallback_response``.
    """
    # The common case (the broker's advertised versions, an accepted key and version,
    # header v1 or v2, a client id or none, no tagged field) in a few steps; anything else
    # takes the full path, which raises the precise error.
    size = len(frame)
    if advertised is ADVERTISED:
        headers: dict[int, int] | None = _CLUSTER_HEADERS
    elif advertised is STANDALONE_ADVERTISED:
        headers = _STANDALONE_HEADERS
    else:
        headers = None
    if headers is not None and size >= 10:
        api_key, api_version, correlation_id, length = _HEADER_V1.unpack_from(frame, 0)
        header_version = headers.get(api_key << 16 | api_version & 0xFFFF)
        if header_version and -1 <= length <= size - 10:
            if length < 0:
                client_id, offset = None, 10
            else:
                offset = 10 + length
                # Kafka decodes the id leniently (malformed UTF-8 becomes U+FFFD); so do we.
                client_id = str(frame[10:offset], "utf-8", "replace")
            if header_version == 1:
                return _new_header(RequestHeader, (api_key, api_version, correlation_id,
                                                   client_id, 1)), offset
            if offset < size and frame[offset] == 0:
                return _new_header(RequestHeader, (api_key, api_version, correlation_id,
                                                   client_id, 2)), offset + 1
    return _parse_request_header(frame, advertised)


def _parse_request_header(
    frame: bytes | bytearray | memoryview, advertised: Mapping[int, VersionRange]
) -> tuple[RequestHeader, int]:
    """parse_request_header's full path: every case, every error."""
    if len(frame) < _HEADER_FIXED.size:
        raise InvalidRequestError(f"request header truncated: {len(frame)} bytes")
    api_key, api_version, correlation_id = _HEADER_FIXED.unpack_from(frame, 0)
    spec = spec_for(api_key)
    accepted = advertised.get(api_key)
    if accepted is None:
        raise UnknownApiKeyError(f"{spec.name} (api key {api_key}) is not enabled")
    if api_key != API_VERSIONS and not accepted[0] <= api_version <= accepted[1]:
        raise UnsupportedVersionError(
            f"{spec.name} v{api_version} is not supported (v{accepted[0]}-v{accepted[1]})"
        )
    header_version = request_header_version(api_key, api_version)
    offset = _HEADER_FIXED.size
    client_id: str | None = None
    if header_version >= 1:
        client_id, offset = _read_nullable_string(frame, offset)
    if header_version >= 2:
        offset = skip_tagged_fields(frame, offset)
    return RequestHeader(api_key, api_version, correlation_id, client_id, header_version), offset


def is_unsupported_api_versions(
    header: RequestHeader, advertised: Mapping[int, VersionRange] = ADVERTISED
) -> bool:
    """True for an ApiVersions request at a version we do not speak (answer, don't decode)."""
    if header.api_key != API_VERSIONS:
        return False
    low, high = advertised[API_VERSIONS]
    return not low <= header.api_version <= high


def encode_request_header(
    api_key: int, api_version: int, correlation_id: int, client_id: str | None
) -> bytes:
    """The request header bytes for (api_key, api_version) -- the client side's half."""
    header_version = request_header_version(api_key, api_version)
    out = _HEADER_FIXED.pack(api_key, api_version, correlation_id)
    if header_version >= 1:
        if client_id is None:
            out += _INT16.pack(-1)
        else:
            raw = client_id.encode()
            if len(raw) > 0x7FFF:
                raise ValueError(f"client id of {len(raw)} bytes is too long")
            out += _INT16.pack(len(raw)) + raw
    if header_version >= 2:
        out += b"\x00"  # no tagged fields
    return out


def encode_request(
    api_key: int,
    api_version: int,
    correlation_id: int,
    client_id: str | None,
    body: bytes | bytearray | memoryview,
) -> bytes:
    """A complete request frame: size, header, body."""
    return encode_frame(encode_request_header(api_key, api_version, correlation_id, client_id)
                        + body)


def _read_nullable_string(frame: bytes | bytearray | memoryview, offset: int
                          ) -> tuple[str | None, int]:
    if len(frame) - offset < 2:
        raise InvalidRequestError("request header truncated in client_id length")
    (length,) = _INT16.unpack_from(frame, offset)
    offset += 2
    if length == -1:
        return None, offset
    if length < 0:
        raise InvalidRequestError(f"invalid client_id length {length}")
    end = offset + length
    if end > len(frame):
        raise InvalidRequestError("request header truncated in client_id")
    # Kafka decodes the id leniently (malformed UTF-8 becomes U+FFFD); so do we.
    return bytes(frame[offset:end]).decode("utf-8", "replace"), end


# (frame, offset) -> (value, offset after it): at most 5 bytes, InvalidRequestError else.
_read_uvarint = functools.partial(read_unsigned, error=InvalidRequestError)


def skip_tagged_fields(frame: bytes | bytearray | memoryview, offset: int) -> int:
    """Skip a tagged-field section; return the offset after it.

    Unknown tags are skipped, as the spec requires (the request header v2 defines none).
    Every declared size is checked against what remains.
    """
    count, offset = _read_uvarint(frame, offset)
    # each field takes at least two bytes (tag, size): a larger count cannot fit
    if count > (len(frame) - offset) // 2:
        raise InvalidRequestError(f"{count} tagged fields cannot fit in the frame")
    for _ in range(count):
        _tag, offset = _read_uvarint(frame, offset)
        size, offset = _read_uvarint(frame, offset)
        if size > len(frame) - offset:
            raise InvalidRequestError("tagged field runs past the end of the frame")
        offset += size
    return offset


# --- responses ----------------------------------------------------------------------------


def response_prefix(header_version: int, correlation_id: int, body_size: int) -> bytes:
    """Size prefix plus response header, for a body of ``body_size`` bytes written after it
    (lets the daemon send a large body -- a fetch's file region -- without concatenating)."""
    if header_version == 0:
        return _SIZE.pack(4 + body_size) + _INT32.pack(correlation_id)
    if header_version == 1:
        return _SIZE.pack(5 + body_size) + _INT32.pack(correlation_id) + b"\x00"
    raise ValueError(f"no response header v{header_version}")


def encode_response(
    header_version: int, correlation_id: int, body: bytes | bytearray | memoryview
) -> bytes:
    """A complete response frame: size, response header (v0 or v1), body."""
    return response_prefix(header_version, correlation_id, len(body)) + body


def parse_response_header(
    frame: bytes | bytearray | memoryview, header_version: int
) -> tuple[int, int]:
    """(correlation_id, offset of the body) of a response frame -- the client side's half."""
    if len(frame) < 4:
        raise InvalidRequestError(f"response header truncated: {len(frame)} bytes")
    (correlation_id,) = _INT32.unpack_from(frame, 0)
    offset = 4
    if header_version >= 1:
        offset = skip_tagged_fields(frame, offset)
    return correlation_id, offset


def api_versions_fallback_response(
    correlation_id: int, advertised: Mapping[int, VersionRange] = ADVERTISED
) -> bytes:
    """The complete frame answering an ApiVersions request at a version we do not speak.

    ApiVersionsResponse v0 with response header v0: error_code UNSUPPORTED_VERSION, and
    api_keys holding ApiVersions' own supported range, as Kafka does (KIP-511) -- the one
    fact the client needs to retry.
    """
    low, high = advertised[API_VERSIONS]
    body = (
        _INT16.pack(ErrorCode.UNSUPPORTED_VERSION)
        + _INT32.pack(1)  # api_keys: one entry
        + struct.pack(">hhh", API_VERSIONS, low, high)
    )
    return encode_response(0, correlation_id, body)
