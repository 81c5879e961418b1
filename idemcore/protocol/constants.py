"""Kafka's constants for idempotence and transactions (see docs/rules.md, "Constants"), and the name of a
partition every layer uses."""

#: A partition of a topic: (topic, partition).
TopicPartition = tuple[str, int]

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
#: Kafka's default ``message.max.bytes``: the largest record batch a broker accepts (1 MiB plus the 12 bytes of
#: log overhead).
DEFAULT_MESSAGE_MAX_BYTES = 1_048_588
#: Kafka's default ``segment.bytes`` (1 GiB): a segment rolls before a batch would take it past this.
DEFAULT_SEGMENT_BYTES = 1 << 30
#: Kafka's default ``segment.ms`` (7 days): a segment rolls when its batches span more than this.
DEFAULT_SEGMENT_MS = 7 * 86_400_000
#: Kafka's default ``index.interval.bytes``: bytes appended between two offset-index entries.
DEFAULT_INDEX_INTERVAL_BYTES = 4096
#: Kafka's default ``segment.index.bytes`` (10 MB): a segment whose offset or time index is this full rolls.
DEFAULT_SEGMENT_INDEX_BYTES = 10 * 1024 * 1024
#: Kafka's default ``retention.ms`` (7 days): segments whose newest batch is older are deleted.
DEFAULT_RETENTION_MS = 7 * 86_400_000
#: Kafka's default ``delete.retention.ms`` (1 day): how long a tombstone stays in a compacted topic.
DEFAULT_DELETE_RETENTION_MS = 86_400_000
#: Producer epochs at or above this are exhausted: the transaction coordinator rotates to a new producer id, keeping
#: 32767 for one last fencing bump (Kafka's ``TransactionMetadata.isEpochExhausted``).
PRODUCER_EPOCH_EXHAUSTED = INT16_MAX - 1
#: Kafka's default ``transactional.id.expiration.ms`` (7 days): a transactional id idle this long is removed.
DEFAULT_TRANSACTIONAL_ID_EXPIRATION_MS = 7 * 86_400_000
#: The transaction coordinator's compacted log, and Kafka's default ``transaction.state.log.num.partitions``.
TRANSACTION_STATE_TOPIC = "__transaction_state"
DEFAULT_TRANSACTION_STATE_PARTITIONS = 50
#: The group coordinator's compacted log, and Kafka's default ``offsets.topic.num.partitions``.
CONSUMER_OFFSETS_TOPIC = "__consumer_offsets"
DEFAULT_OFFSETS_TOPIC_PARTITIONS = 50
#: Topics only a broker's coordinators write (Kafka's internal topics).
INTERNAL_TOPICS = frozenset({TRANSACTION_STATE_TOPIC, CONSUMER_OFFSETS_TOPIC})
#: Kafka's default ``transaction.state.log.segment.bytes`` (100 MiB).
TRANSACTION_STATE_SEGMENT_BYTES = 104_857_600
#: Kafka's default ``transaction.timeout.ms`` (a producer setting, sent in InitProducerId).
DEFAULT_TRANSACTION_TIMEOUT_MS = 60_000
#: Fetch and ListOffsets isolation levels (Kafka's IsolationLevel ids).
READ_UNCOMMITTED = 0
READ_COMMITTED = 1
#: Kafka's default ``offsets.topic.segment.bytes`` (100 MiB).
OFFSETS_TOPIC_SEGMENT_BYTES = 104_857_600
#: Kafka's default ``offset.metadata.max.bytes``: the longest metadata a committed offset may carry (Kafka counts
#: it in UTF-16 code units, ``String.length()``, despite the name).
DEFAULT_OFFSET_METADATA_MAX_BYTES = 4096

#: The most partitions one topic may have here (Kafka's KRaft controller refuses more than 10,000 records per
#: request): a request for 2e9 would hold a broker for hours.
MAX_PARTITIONS_PER_TOPIC = 10_000
