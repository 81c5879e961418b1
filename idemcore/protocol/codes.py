"""Kafka's protocol error codes, and the small int enums the kernels share with Python: status, origin,
control type."""

from __future__ import annotations

import enum


class ErrorCode(enum.IntEnum):
    """Kafka protocol error codes (exact protocol numbers)."""

    NONE = 0
    UNKNOWN_SERVER_ERROR = -1
    OFFSET_OUT_OF_RANGE = 1  # a fetch below the log start or beyond the log end
    CORRUPT_MESSAGE = 2
    UNKNOWN_TOPIC_OR_PARTITION = 3
    LEADER_NOT_AVAILABLE = 5  # a partition with no leader (being elected, or every replica down)
    NOT_LEADER_OR_FOLLOWER = 6
    REQUEST_TIMED_OUT = 7
    REPLICA_NOT_AVAILABLE = 9
    MESSAGE_TOO_LARGE = 10  # a batch above the broker's message_max_bytes (Kafka's RecordTooLargeException)
    STALE_CONTROLLER_EPOCH = 11  # a controller request from a deposed controller
    OFFSET_METADATA_TOO_LARGE = 12  # a committed offset's metadata longer than offset.metadata.max.bytes
    NETWORK_EXCEPTION = 13  # client side: the connection broke with the request in flight
    COORDINATOR_LOAD_IN_PROGRESS = 14
    COORDINATOR_NOT_AVAILABLE = 15
    NOT_COORDINATOR = 16
    INVALID_TOPIC_EXCEPTION = 17  # e.g. a client appending to an internal topic
    RECORD_LIST_TOO_LARGE = 18  # a batch larger than the topic's segment.bytes (RecordBatchTooLargeException)
    NOT_ENOUGH_REPLICAS = 19
    NOT_ENOUGH_REPLICAS_AFTER_APPEND = 20  # written, but the in-sync replicas shrank before the acks (retriable)
    INVALID_REQUIRED_ACKS = 21  # a produce request's acks other than 0, 1 and -1
    ILLEGAL_GENERATION = 22
    INCONSISTENT_GROUP_PROTOCOL = 23  # a JoinGroup whose protocols share none with the group's
    TOPIC_AUTHORIZATION_FAILED = 29  # e.g. an internal topic in AddPartitionsToTxn (never authorised)
    INVALID_GROUP_ID = 24  # an empty group id
    UNKNOWN_MEMBER_ID = 25
    INVALID_SESSION_TIMEOUT = 26
    REBALANCE_IN_PROGRESS = 27
    GROUP_AUTHORIZATION_FAILED = 30
    CLUSTER_AUTHORIZATION_FAILED = 31
    UNSUPPORTED_SASL_MECHANISM = 33  # a SaslHandshake for a mechanism the listener does not enable
    ILLEGAL_SASL_STATE = 34  # a SASL request out of order
    UNSUPPORTED_VERSION = 35  # a marker for a partition whose broker cannot take it: the coordinator counts it done
    TOPIC_ALREADY_EXISTS = 36
    INVALID_PARTITIONS = 37
    INVALID_REPLICATION_FACTOR = 38
    INVALID_REPLICA_ASSIGNMENT = 39
    INVALID_CONFIG = 40
    NOT_CONTROLLER = 41
    INVALID_REQUEST = 42
    UNSUPPORTED_FOR_MESSAGE_FORMAT = 43  # a marker for a pre-v2 log: the coordinator counts it done
    POLICY_VIOLATION = 44  # e.g. DeleteRecords on a topic whose cleanup.policy lacks delete
    OUT_OF_ORDER_SEQUENCE_NUMBER = 45
    DUPLICATE_SEQUENCE_NUMBER = 46
    INVALID_PRODUCER_EPOCH = 47
    INVALID_TXN_STATE = 48
    INVALID_PRODUCER_ID_MAPPING = 49
    INVALID_TRANSACTION_TIMEOUT = 50
    CONCURRENT_TRANSACTIONS = 51
    TRANSACTION_COORDINATOR_FENCED = 52
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53
    SECURITY_DISABLED = 54  # an ACL API on a broker with no authorizer
    OPERATION_NOT_ATTEMPTED = 55  # the other partitions of a request one of whose partitions failed
    KAFKA_STORAGE_ERROR = 56  # the log could not be written
    SASL_AUTHENTICATION_FAILED = 58
    UNKNOWN_PRODUCER_ID = 59
    FENCED_LEADER_EPOCH = 74  # a request's current leader epoch is older than the leader's
    UNKNOWN_LEADER_EPOCH = 75  # a request's current leader epoch is newer than this broker knows
    OFFSET_NOT_AVAILABLE = 78  # a new leader's high watermark has not reached its epoch's start yet
    MEMBER_ID_REQUIRED = 79  # JoinGroup v4+: rejoin with the member id this answer carries
    PREFERRED_LEADER_NOT_AVAILABLE = 80
    ELIGIBLE_LEADERS_NOT_AVAILABLE = 83
    ELECTION_NOT_NEEDED = 84
    INVALID_RECORD = 87
    NON_EMPTY_GROUP = 68  # DeleteGroups / OffsetDelete of a group that has members
    GROUP_ID_NOT_FOUND = 69
    GROUP_MAX_SIZE_REACHED = 81
    FENCED_INSTANCE_ID = 82  # a static member's request with a member id its instance id no longer has (KIP-345)
    GROUP_SUBSCRIBED_TO_TOPIC = 86  # OffsetDelete of a topic a member of the group subscribes to
    UNSTABLE_OFFSET_COMMIT = 88  # OffsetFetch(require_stable): a transaction's offset for the partition is pending
    PRODUCER_FENCED = 90
    RESOURCE_NOT_FOUND = 91  # e.g. describing or deleting a SCRAM credential a user does not have
    DUPLICATE_RESOURCE = 92
    UNACCEPTABLE_CREDENTIAL = 93  # e.g. a SCRAM credential's iterations outside Kafka's bounds
    FENCED_MEMBER_EPOCH = 110  # ConsumerGroupHeartbeat with an epoch the member no longer has (KIP-848)
    UNRELEASED_INSTANCE_ID = 111  # a consumer-protocol static member's instance id still held (KIP-848)
    UNSUPPORTED_ASSIGNOR = 112  # a server assignor the coordinator lacks (KIP-848)
    STALE_MEMBER_EPOCH = 113  # an offset commit with an older member epoch (KIP-848)
    TRANSACTIONAL_ID_NOT_FOUND = 105
    TRANSACTION_ABORTABLE = 120
    INVALID_REGULAR_EXPRESSION = 128  # a subscribed topic regex the coordinator cannot compile (KIP-848)


#: Errors after which the same request may succeed (Kafka's RetriableException subclasses).
RETRIABLE_ERRORS = frozenset({
    ErrorCode.CORRUPT_MESSAGE, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.NOT_LEADER_OR_FOLLOWER,
    ErrorCode.REQUEST_TIMED_OUT, ErrorCode.NETWORK_EXCEPTION, ErrorCode.NOT_ENOUGH_REPLICAS,
    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.NOT_COORDINATOR,
    ErrorCode.CONCURRENT_TRANSACTIONS, ErrorCode.KAFKA_STORAGE_ERROR, ErrorCode.UNSTABLE_OFFSET_COMMIT,
    ErrorCode.LEADER_NOT_AVAILABLE, ErrorCode.REPLICA_NOT_AVAILABLE, ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
    ErrorCode.FENCED_LEADER_EPOCH, ErrorCode.UNKNOWN_LEADER_EPOCH, ErrorCode.OFFSET_NOT_AVAILABLE,
})


def error_name(code: int | None, *, absent: str = "no answer", unknown: str = "") -> str:
    """How a message names error ``code``: its :class:`ErrorCode` name (``NOT_COORDINATOR``); ``unknown`` followed
    by the number for a code the enum lacks; ``absent`` for None (no answer carried a code)."""
    if code is None:
        return absent
    try:
        return ErrorCode(code).name
    except ValueError:
        return f"{unknown}{code}"


class Status(enum.IntEnum):
    """What happened to one batch."""

    APPENDED = 0
    DUPLICATE = 1
    REJECTED = 2


class Origin(enum.IntEnum):
    """Who appends (Kafka's AppendOrigin); decides which checks apply to data batches."""

    CLIENT = 0
    COORDINATOR = 1
    REPLICATION = 2

    @classmethod
    def parse(cls, origin: str | Origin) -> Origin:
        """Accept ``"client"``, ``"coordinator"``, ``"replication"`` or an :class:`Origin`."""
        if isinstance(origin, Origin):
            return origin
        if isinstance(origin, str):
            try:
                return cls[origin.strip().upper()]
            except KeyError:
                pass
        names = ", ".join(repr(o.name.lower()) for o in cls)
        raise ValueError(f"unknown origin {origin!r}; expected one of {names}")


class ControlType(enum.IntEnum):
    """Control record type of a transaction marker (Kafka's ControlRecordType)."""

    NONE = -1
    ABORT = 0
    COMMIT = 1
