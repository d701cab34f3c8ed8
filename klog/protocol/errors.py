"""Kafka error codes and the typed exceptions klog raises for them.

The numeric codes are Kafka's (org.apache.kafka.common.protocol.Errors); a decoder that
rejects untrusted bytes raises one of the exceptions below, and whoever answers a client
maps it back to the code with ``exc.error_code``.
"""

from __future__ import annotations

from enum import IntEnum


class ErrorCode(IntEnum):
    UNKNOWN_SERVER_ERROR = -1
    NONE = 0
    OFFSET_OUT_OF_RANGE = 1
    CORRUPT_MESSAGE = 2
    UNKNOWN_TOPIC_OR_PARTITION = 3
    INVALID_FETCH_SIZE = 4
    LEADER_NOT_AVAILABLE = 5
    NOT_LEADER_OR_FOLLOWER = 6
    REQUEST_TIMED_OUT = 7
    BROKER_NOT_AVAILABLE = 8
    REPLICA_NOT_AVAILABLE = 9
    MESSAGE_TOO_LARGE = 10
    STALE_CONTROLLER_EPOCH = 11
    OFFSET_METADATA_TOO_LARGE = 12
    NETWORK_EXCEPTION = 13
    COORDINATOR_LOAD_IN_PROGRESS = 14
    COORDINATOR_NOT_AVAILABLE = 15
    NOT_COORDINATOR = 16
    INVALID_TOPIC_EXCEPTION = 17
    RECORD_LIST_TOO_LARGE = 18
    NOT_ENOUGH_REPLICAS = 19
    NOT_ENOUGH_REPLICAS_AFTER_APPEND = 20
    INVALID_REQUIRED_ACKS = 21
    ILLEGAL_GENERATION = 22
    INCONSISTENT_GROUP_PROTOCOL = 23
    INVALID_GROUP_ID = 24
    UNKNOWN_MEMBER_ID = 25
    INVALID_SESSION_TIMEOUT = 26
    REBALANCE_IN_PROGRESS = 27
    INVALID_COMMIT_OFFSET_SIZE = 28
    TOPIC_AUTHORIZATION_FAILED = 29
    GROUP_AUTHORIZATION_FAILED = 30
    CLUSTER_AUTHORIZATION_FAILED = 31
    INVALID_TIMESTAMP = 32
    UNSUPPORTED_SASL_MECHANISM = 33
    ILLEGAL_SASL_STATE = 34
    UNSUPPORTED_VERSION = 35
    TOPIC_ALREADY_EXISTS = 36
    INVALID_PARTITIONS = 37
    INVALID_REPLICATION_FACTOR = 38
    INVALID_REPLICA_ASSIGNMENT = 39
    INVALID_CONFIG = 40
    NOT_CONTROLLER = 41
    INVALID_REQUEST = 42
    UNSUPPORTED_FOR_MESSAGE_FORMAT = 43
    POLICY_VIOLATION = 44
    OUT_OF_ORDER_SEQUENCE_NUMBER = 45
    DUPLICATE_SEQUENCE_NUMBER = 46
    INVALID_PRODUCER_EPOCH = 47
    INVALID_TXN_STATE = 48
    INVALID_PRODUCER_ID_MAPPING = 49
    INVALID_TRANSACTION_TIMEOUT = 50
    CONCURRENT_TRANSACTIONS = 51
    TRANSACTION_COORDINATOR_FENCED = 52
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53
    SECURITY_DISABLED = 54
    OPERATION_NOT_ATTEMPTED = 55
    KAFKA_STORAGE_ERROR = 56
    LOG_DIR_NOT_FOUND = 57
    SASL_AUTHENTICATION_FAILED = 58
    UNKNOWN_PRODUCER_ID = 59
    REASSIGNMENT_IN_PROGRESS = 60
    DELEGATION_TOKEN_AUTH_DISABLED = 61
    DELEGATION_TOKEN_NOT_FOUND = 62
    DELEGATION_TOKEN_OWNER_MISMATCH = 63
    DELEGATION_TOKEN_REQUEST_NOT_ALLOWED = 64
    DELEGATION_TOKEN_AUTHORIZATION_FAILED = 65
    DELEGATION_TOKEN_EXPIRED = 66
    INVALID_PRINCIPAL_TYPE = 67
    NON_EMPTY_GROUP = 68
    GROUP_ID_NOT_FOUND = 69
    FETCH_SESSION_ID_NOT_FOUND = 70
    INVALID_FETCH_SESSION_EPOCH = 71
    LISTENER_NOT_FOUND = 72
    TOPIC_DELETION_DISABLED = 73
    FENCED_LEADER_EPOCH = 74
    UNKNOWN_LEADER_EPOCH = 75
    UNSUPPORTED_COMPRESSION_TYPE = 76
    STALE_BROKER_EPOCH = 77
    OFFSET_NOT_AVAILABLE = 78
    MEMBER_ID_REQUIRED = 79
    PREFERRED_LEADER_NOT_AVAILABLE = 80
    GROUP_MAX_SIZE_REACHED = 81
    FENCED_INSTANCE_ID = 82
    ELIGIBLE_LEADERS_NOT_AVAILABLE = 83
    ELECTION_NOT_NEEDED = 84
    NO_REASSIGNMENT_IN_PROGRESS = 85
    GROUP_SUBSCRIBED_TO_TOPIC = 86
    INVALID_RECORD = 87
    UNSTABLE_OFFSET_COMMIT = 88
    THROTTLING_QUOTA_EXCEEDED = 89
    PRODUCER_FENCED = 90
    RESOURCE_NOT_FOUND = 91
    DUPLICATE_RESOURCE = 92
    UNACCEPTABLE_CREDENTIAL = 93
    INCONSISTENT_VOTER_SET = 94
    INVALID_UPDATE_VERSION = 95
    FEATURE_UPDATE_FAILED = 96
    PRINCIPAL_DESERIALIZATION_FAILURE = 97
    SNAPSHOT_NOT_FOUND = 98
    POSITION_OUT_OF_RANGE = 99
    UNKNOWN_TOPIC_ID = 100
    DUPLICATE_BROKER_REGISTRATION = 101
    BROKER_ID_NOT_REGISTERED = 102
    INCONSISTENT_TOPIC_ID = 103
    INCONSISTENT_CLUSTER_ID = 104
    TRANSACTIONAL_ID_NOT_FOUND = 105
    FETCH_SESSION_TOPIC_ID_ERROR = 106
    INELIGIBLE_REPLICA = 107
    NEW_LEADER_ELECTED = 108
    OFFSET_MOVED_TO_TIERED_STORAGE = 109
    FENCED_MEMBER_EPOCH = 110
    UNRELEASED_INSTANCE_ID = 111
    UNSUPPORTED_ASSIGNOR = 112
    STALE_MEMBER_EPOCH = 113
    MISMATCHED_ENDPOINT_TYPE = 114
    UNSUPPORTED_ENDPOINT_TYPE = 115
    UNKNOWN_CONTROLLER_ID = 116
    UNKNOWN_SUBSCRIPTION_ID = 117
    TELEMETRY_TOO_LARGE = 118
    INVALID_REGISTRATION = 119
    # KIP-890: the transaction must be aborted, after which the transactional id is usable
    # again (clients of Produce v11+, TxnOffsetCommit v4+, ... understand it).
    TRANSACTION_ABORTABLE = 120
    INVALID_RECORD_STATE = 121
    SHARE_SESSION_NOT_FOUND = 122
    INVALID_SHARE_SESSION_EPOCH = 123
    FENCED_STATE_EPOCH = 124
    INVALID_VOTER_KEY = 125
    DUPLICATE_VOTER = 126
    VOTER_NOT_FOUND = 127


#: One record a per-record rule refused (KIP-467): its index in its batch, and why.
RecordError = tuple[int, str | None]


class KafkaError(Exception):
    """Base of klog's protocol errors; ``error_code`` is what a client is told.

    ``record_errors`` names, for a batch refused because of some of its records (Kafka's
    RecordValidationException), each of those records by its index in the batch, in index
    order: Produce v8+ answers them (KIP-467), so that a client fails exactly those records
    and the others with an error of their own. Empty for every other error.
    """

    error_code: ErrorCode = ErrorCode.UNKNOWN_SERVER_ERROR
    record_errors: tuple[RecordError, ...] = ()


class CorruptRecordError(KafkaError):
    """Record bytes that fail a size, CRC or structure check (the peer's fault)."""

    error_code = ErrorCode.CORRUPT_MESSAGE
    # Set by the batch reader (records/batch.py) on the errors it raises: where the bad
    # entry starts. Declared only (no class default): others raise it without one.
    position: int


class InvalidRecordError(KafkaError):
    """Well-formed bytes whose content breaks a rule (e.g. offsets not increasing)."""

    error_code = ErrorCode.INVALID_RECORD


class InvalidTimestampError(KafkaError):
    """A record's CreateTime timestamp outside the range the topic accepts
    (message.timestamp.before.max.ms / after.max.ms)."""

    error_code = ErrorCode.INVALID_TIMESTAMP


class RecordTooLargeError(KafkaError):
    """A batch or decompressed payload beyond the configured bound."""

    error_code = ErrorCode.MESSAGE_TOO_LARGE


class UnsupportedCompressionError(KafkaError):
    """A compression codec id klog does not know."""

    error_code = ErrorCode.UNSUPPORTED_COMPRESSION_TYPE


class InvalidRequestError(KafkaError):
    """A request that cannot be decoded or makes no sense."""

    error_code = ErrorCode.INVALID_REQUEST


class UnsupportedVersionError(KafkaError):
    """An api version klog does not decode or does not advertise (the peer's fault)."""

    error_code = ErrorCode.UNSUPPORTED_VERSION


class OffsetOutOfRangeError(KafkaError):
    """A fetch or read outside [logStartOffset, logEndOffset]."""

    error_code = ErrorCode.OFFSET_OUT_OF_RANGE


class UnsupportedForMessageFormatError(KafkaError):
    """A request the stored message format cannot serve (e.g. compressed v0/v1 appends)."""

    error_code = ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT


class KafkaStorageError(KafkaError):
    """A log directory failed (I/O error); the partition is offline on this broker."""

    error_code = ErrorCode.KAFKA_STORAGE_ERROR
