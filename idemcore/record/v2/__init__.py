"""RecordBatch v2, Kafka's batch format on the wire and on disk, bytes-exact.

- ``batches``: ``encode_record_batch`` and ``record_batch_from``: a ``RecordBatch`` as a producer writes it
  and the broker stores it, and back (the records written by the compiled encoder when it is built);
  ``with_producer_state`` for a batch resent under a new epoch or sequence;
- ``codec``: ``BatchHeader``, ``Record``, ``read_header``, ``iter_batches``, ``verify_crc``,
  ``decode_batch``, ``encode_batch`` (CRC-32C through ``crc32c``);
- ``compression``: the records section's codecs as Kafka frames them (through ``cramjam``);
- ``control``: transaction markers (control records);
- ``varint``: zig-zag varints;
- ``errors``: ``CorruptRecordError`` and its ``IncompleteBatchError``.
"""

from idemcore.record.v2.batches import (
    decode_stored_batches,
    decode_wire_batch,
    encode_record_batch,
    record_batch_from,
    stored_batch_bytes,
    with_producer_state,
)
from idemcore.record.v2.codec import (
    BATCH_HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC,
    NO_PARTITION_LEADER_EPOCH,
    NO_TIMESTAMP,
    BatchHeader,
    Record,
    TimestampType,
    compute_crc,
    decode_batch,
    encode_batch,
    iter_batches,
    read_header,
    set_base_offset,
    set_partition_leader_epoch,
    verify_crc,
)
from idemcore.record.v2.compression import Compression
from idemcore.record.v2.control import (
    EndTxnMarker,
    control_type_id,
    encode_end_txn_marker,
    end_txn_marker_record,
    parse_end_txn_marker,
)
from idemcore.record.v2.errors import CorruptRecordError, IncompleteBatchError, VarintError

__all__ = [
    "BATCH_HEADER_SIZE",
    "LOG_OVERHEAD",
    "MAGIC",
    "NO_PARTITION_LEADER_EPOCH",
    "NO_TIMESTAMP",
    "BatchHeader",
    "Compression",
    "CorruptRecordError",
    "EndTxnMarker",
    "IncompleteBatchError",
    "Record",
    "TimestampType",
    "VarintError",
    "compute_crc",
    "control_type_id",
    "decode_batch",
    "decode_stored_batches",
    "decode_wire_batch",
    "encode_batch",
    "encode_end_txn_marker",
    "encode_record_batch",
    "end_txn_marker_record",
    "iter_batches",
    "parse_end_txn_marker",
    "read_header",
    "record_batch_from",
    "set_base_offset",
    "set_partition_leader_epoch",
    "stored_batch_bytes",
    "verify_crc",
    "with_producer_state",
]
