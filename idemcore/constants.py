"""Kafka's constants and protocol error codes (SPEC §1), plus the small int codes the kernels use."""

from __future__ import annotations

import enum

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
NO_OFFSET = -1

#: Batches remembered per producer per partition for duplicate detection.
NUM_BATCHES_TO_RETAIN = 5
#: Upper bound on in-flight requests per connection when idempotence is on.
MAX_IN_FLIGHT_WITH_IDEMPOTENCE = 5
INT32_MAX = 2_147_483_647
INT16_MAX = 32_767
#: Producer ids are allocated in blocks of this size.
PRODUCER_ID_BLOCK_SIZE = 1000
#: Kafka's default ``producer.id.expiration.ms`` (1 day).
DEFAULT_PRODUCER_ID_EXPIRATION_MS = 86_400_000
#: Kafka's default ``transaction.max.timeout.ms``: no transaction may legitimately stay open longer.
DEFAULT_TRANSACTION_MAX_TIMEOUT_MS = 900_000


class ErrorCode(enum.IntEnum):
    """Kafka protocol error codes (exact protocol numbers)."""

    NONE = 0
    UNKNOWN_SERVER_ERROR = -1
    CORRUPT_MESSAGE = 2
    UNKNOWN_TOPIC_OR_PARTITION = 3
    NOT_LEADER_OR_FOLLOWER = 6
    REQUEST_TIMED_OUT = 7
    NETWORK_EXCEPTION = 13  # client side: the connection broke with the request in flight
    COORDINATOR_LOAD_IN_PROGRESS = 14
    COORDINATOR_NOT_AVAILABLE = 15
    NOT_COORDINATOR = 16
    NOT_ENOUGH_REPLICAS = 19
    CLUSTER_AUTHORIZATION_FAILED = 31
    INVALID_REQUEST = 42
    OUT_OF_ORDER_SEQUENCE_NUMBER = 45
    DUPLICATE_SEQUENCE_NUMBER = 46
    INVALID_PRODUCER_EPOCH = 47
    INVALID_TXN_STATE = 48
    INVALID_PRODUCER_ID_MAPPING = 49
    INVALID_TRANSACTION_TIMEOUT = 50
    CONCURRENT_TRANSACTIONS = 51
    TRANSACTION_COORDINATOR_FENCED = 52
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53
    UNKNOWN_PRODUCER_ID = 59
    INVALID_RECORD = 87
    PRODUCER_FENCED = 90
    TRANSACTIONAL_ID_NOT_FOUND = 105
    TRANSACTION_ABORTABLE = 120


#: Errors after which the same request may succeed (Kafka's RetriableException subclasses).
RETRIABLE_ERRORS = frozenset({
    ErrorCode.CORRUPT_MESSAGE, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.NOT_LEADER_OR_FOLLOWER,
    ErrorCode.REQUEST_TIMED_OUT, ErrorCode.NETWORK_EXCEPTION, ErrorCode.NOT_ENOUGH_REPLICAS,
    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.NOT_COORDINATOR,
    ErrorCode.CONCURRENT_TRANSACTIONS,
})


class Status(enum.IntEnum):
    """What happened to one batch."""

    APPENDED = 0
    DUPLICATE = 1
    REJECTED = 2


class Finding(enum.IntEnum):
    """What an audit says about a batch (SPEC §5); ``NONE`` for a batch simply appended.

    The kernels set every per-batch finding; ``HANGING_TRANSACTION`` is found
    only at the end of a stream, by the audit.
    """

    NONE = 0
    DUPLICATE = 1  # a retry caught within the five-batch window
    DUPLICATE_BEYOND_WINDOW = 2  # same epoch, range already written, older than the window
    SEQUENCE_GAP = 3  # sequences missing before this batch
    OUT_OF_ORDER = 4  # range straddles the last written sequence
    EPOCH_REGRESSION = 5  # an idempotent zombie writing with an old epoch
    FENCED = 6  # a transactional zombie, or a marker with an old producer or coordinator epoch
    INVALID_TXN_STATE = 7  # a non-transactional write while a transaction is open
    INVALID_RECORD = 8  # metadata no real batch can carry
    HANGING_TRANSACTION = 9  # open longer than the bound when the stream ends

    @property
    def label(self) -> str:
        """The SPEC §5 name: ``"duplicate_beyond_window"``; ``""`` for NONE."""
        return "" if self is Finding.NONE else self.name.lower()

    @classmethod
    def parse(cls, label: str) -> Finding:
        """The finding called ``label`` (``"sequence_gap"``)."""
        try:
            return cls[label.strip().upper()]
        except KeyError:
            names = ", ".join(f.label for f in cls if f is not cls.NONE)
            raise ValueError(f"unknown finding {label!r}; expected one of {names}") from None


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
