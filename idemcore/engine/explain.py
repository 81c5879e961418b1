"""One-line explanations of rejected batches, naming every value involved (as Kafka's broker messages do)."""

from __future__ import annotations

from idemcore.findings import Finding
from idemcore.kernels.rules_reference import INT64_MAX
from idemcore.protocol.codes import ErrorCode
from idemcore.protocol.constants import NUM_BATCHES_TO_RETAIN

#: The last offset a batch may take: the log end offset after it (last + 1) must still be an int64.
LAST_OFFSET = INT64_MAX - 1


def sequences(base_sequence: int, last_sequence: int) -> str:
    return str(base_sequence) if base_sequence == last_sequence else f"{base_sequence}..{last_sequence}"


def rejection_message(where: str, producer_id: int, producer_epoch: int, base_sequence: int, last_sequence: int,
                      record_count: int, coordinator_epoch: int, is_control: bool, error_code: int, finding: int,
                      expected: int) -> str:
    """Why the batch was refused: ``where`` is the stream (``"events-3"``), the rest its metadata and verdict."""
    who = f"producer {producer_id} epoch {producer_epoch} on {where}"
    seqs = sequences(base_sequence, last_sequence)
    kind = Finding(finding)
    code = ErrorCode(error_code).name
    if kind is Finding.SEQUENCE_GAP:
        detail = f"incoming sequence {seqs}, expected {expected}"
    elif kind is Finding.DUPLICATE_BEYOND_WINDOW:
        detail = (f"incoming sequence {seqs} was already written but is older than the {NUM_BATCHES_TO_RETAIN} "
                  f"batches retained (expected {expected})")
    elif kind is Finding.OUT_OF_ORDER:
        detail = f"incoming sequence {seqs} straddles the last written sequence, expected {expected}"
    elif kind is Finding.EPOCH_REGRESSION or (kind is Finding.FENCED
                                              and error_code == ErrorCode.INVALID_PRODUCER_EPOCH):
        detail = f"epoch {producer_epoch} is older than the current epoch {expected}"
    elif kind is Finding.FENCED:
        detail = f"coordinator epoch {coordinator_epoch} is older than the current coordinator epoch {expected}"
    elif kind is Finding.INVALID_TXN_STATE:
        detail = f"a non-transactional batch while the producer's transaction is open since offset {expected}"
    elif kind is Finding.OFFSET_OVERFLOW:
        detail = (f"{record_count} record(s) from offset {expected} would end at offset {expected + record_count - 1}, "
                  f"past the last offset a partition can assign, {LAST_OFFSET} (its log end offset must stay an int64)")
    elif kind is Finding.INVALID_RECORD:
        what = "marker" if is_control else f"sequence {seqs} with {record_count} record(s)"
        detail = f"metadata no batch can carry: {what}"
    else:
        detail = "refused"
    return f"{code}: {who}: {detail} ({kind.label or 'rejected'})"
