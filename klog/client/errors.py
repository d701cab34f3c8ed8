"""The client's exceptions and the map from Kafka error codes to them.

Every failure the client reports is a ``KafkaClientError``; ``error_code`` carries Kafka's
numeric code when the broker sent one (or when a local failure has a Kafka equivalent:
a request timeout is REQUEST_TIMED_OUT, a dropped connection NETWORK_EXCEPTION), so
callers decide on retries by code, as the Java client does by exception class.
"""

from __future__ import annotations

from klog.protocol.errors import ErrorCode


class KafkaClientError(Exception):
    """A failed client operation; ``error_code`` is Kafka's code or None."""

    def __init__(self, message: str, error_code: int | None = None) -> None:
        super().__init__(message)
        self.error_code = error_code

    @property
    def name(self) -> str | None:
        """Kafka's name for ``error_code`` (e.g. ``NOT_LEADER_OR_FOLLOWER``)."""
        return error_name(self.error_code) if self.error_code is not None else None

    @property
    def retriable(self) -> bool:
        return self.error_code in RETRIABLE


class KafkaTimeoutError(KafkaClientError):
    """A request got no response within its timeout (the connection is then closed)."""

    def __init__(self, message: str, error_code: int | None = ErrorCode.REQUEST_TIMED_OUT
                 ) -> None:
        super().__init__(message, error_code)


class KafkaConnectionError(KafkaClientError):
    """The connection to a broker failed or closed with requests in flight."""

    def __init__(self, message: str, error_code: int | None = ErrorCode.NETWORK_EXCEPTION
                 ) -> None:
        super().__init__(message, error_code)


class NoBrokersAvailable(KafkaClientError):
    """None of the bootstrap servers (or known brokers) could be reached."""


class WouldBlockError(KafkaClientError):
    """``Producer.send_nowait`` could not queue the record without waiting (for metadata,
    buffer memory or start-up); ``await Producer.send(...)`` waits for them."""


# Kafka's RetriableException family (org.apache.kafka.common.errors): worth retrying after
# a backoff and, for the metadata ones, a metadata refresh.
RETRIABLE: frozenset[int] = frozenset(int(code) for code in (
    ErrorCode.CORRUPT_MESSAGE,
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    ErrorCode.LEADER_NOT_AVAILABLE,
    ErrorCode.NOT_LEADER_OR_FOLLOWER,
    ErrorCode.REQUEST_TIMED_OUT,
    ErrorCode.REPLICA_NOT_AVAILABLE,
    ErrorCode.NETWORK_EXCEPTION,
    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
    ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_COORDINATOR,
    ErrorCode.NOT_ENOUGH_REPLICAS,
    ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
    ErrorCode.CONCURRENT_TRANSACTIONS,
    ErrorCode.KAFKA_STORAGE_ERROR,
    ErrorCode.FETCH_SESSION_ID_NOT_FOUND,
    ErrorCode.INVALID_FETCH_SESSION_EPOCH,
    ErrorCode.LISTENER_NOT_FOUND,
    ErrorCode.FENCED_LEADER_EPOCH,
    ErrorCode.UNKNOWN_LEADER_EPOCH,
    ErrorCode.OFFSET_NOT_AVAILABLE,
    ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE,
    ErrorCode.UNSTABLE_OFFSET_COMMIT,
    ErrorCode.THROTTLING_QUOTA_EXCEEDED,
    ErrorCode.UNKNOWN_TOPIC_ID,
    ErrorCode.INCONSISTENT_TOPIC_ID,
))

#: Errors after which the client's metadata is stale (leader moved, topic appeared/went).
INVALID_METADATA: frozenset[int] = frozenset(int(code) for code in (
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    ErrorCode.LEADER_NOT_AVAILABLE,
    ErrorCode.NOT_LEADER_OR_FOLLOWER,
    ErrorCode.REPLICA_NOT_AVAILABLE,
    ErrorCode.KAFKA_STORAGE_ERROR,
    ErrorCode.FENCED_LEADER_EPOCH,
    ErrorCode.UNKNOWN_LEADER_EPOCH,
    ErrorCode.UNKNOWN_TOPIC_ID,
    ErrorCode.INCONSISTENT_TOPIC_ID,
    ErrorCode.NETWORK_EXCEPTION,
))


def error_name(error_code: int) -> str:
    """Kafka's name for a code; ``UNKNOWN_ERROR_<n>`` for codes klog does not know."""
    try:
        return ErrorCode(int(error_code)).name
    except ValueError:
        return f"UNKNOWN_ERROR_{int(error_code)}"


def error_for(error_code: int, message: str | None = None) -> KafkaClientError:
    """The exception for a non-zero code (``NAME: message``)."""
    code = int(error_code)
    text = error_name(code) if not message else f"{error_name(code)}: {message}"
    if code == ErrorCode.REQUEST_TIMED_OUT:
        return KafkaTimeoutError(text, code)
    return KafkaClientError(text, code)


def error_about(error_code: int, message: str | None, subject: str
                ) -> KafkaClientError | None:
    """The exception for a non-zero code about ``subject`` (``subject: message``); None for
    0 (NONE). The admin client's per-item answers."""
    code = int(error_code)
    if code == 0:
        return None
    return error_for(code, f"{subject}: {message}" if message else subject)


def raise_for(error_code: int, message: str | None = None) -> None:
    """Raise the KafkaClientError for ``error_code``; nothing for 0 (NONE)."""
    if int(error_code) != 0:
        raise error_for(error_code, message)
