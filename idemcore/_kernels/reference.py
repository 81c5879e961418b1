"""The reference kernel: SPEC §2 as plain Python over plain arrays.

This module is the executable form of the rules a Kafka partition leader
applies to every appended batch (``ProducerAppendInfo`` / ``ProducerStateEntry``
in Kafka's storage module). It is written in the subset of Python that Numba
compiles, so ``numba_kernels`` compiles *this very source*: there is one
algorithm, run interpreted or compiled. The Cython backend is an independent
implementation checked against this one.

Conventions (kept by every backend):
- every value read from an array is turned into a Python ``int`` before any
  arithmetic, so sums never overflow a narrow dtype; sequence numbers wrap
  explicitly from 2147483647 to 0;
- kernels never raise and never allocate; results go into ``out`` arrays;
- state lives in the arrays of :class:`idemcore.ProducerStateTable`; a kernel
  that runs out of rows returns the index of the first batch it did not
  process, the caller grows the table and calls again from there.
"""

from __future__ import annotations

# Result codes (mirror idemcore.constants; kernels keep literal module globals
# so Numba folds them into constants).
APPENDED = 0
DUPLICATE = 1
REJECTED = 2

ORIGIN_CLIENT = 0
ORIGIN_COORDINATOR = 1
ORIGIN_REPLICATION = 2

NONE = 0
OUT_OF_ORDER_SEQUENCE_NUMBER = 45
INVALID_PRODUCER_EPOCH = 47
INVALID_TXN_STATE = 48
TRANSACTION_COORDINATOR_FENCED = 52
INVALID_RECORD = 87

CONTROL_ABORT = 0
CONTROL_COMMIT = 1

# Findings (SPEC §5; mirror idemcore.findings.Finding): why a batch was not simply appended.
F_NONE = 0
F_DUPLICATE = 1
F_DUPLICATE_BEYOND_WINDOW = 2
F_SEQUENCE_GAP = 3
F_OUT_OF_ORDER = 4
F_EPOCH_REGRESSION = 5
F_FENCED = 6
F_INVALID_TXN_STATE = 7
F_INVALID_RECORD = 8
HALF_SEQUENCE_SPACE = 1073741824  # a sequence less than this far ahead (wrapping) counts as "ahead"

RING_SIZE = 5
INT32_MAX = 2147483647
SEQUENCE_SPACE = 2147483648  # sequences live in [0, INT32_MAX] and wrap
INT16_MAX = 32767

# counters[] layout, shared with idemcore.state.
N_ROWS = 0
N_PARTITIONS = 1
N_COMPLETED = 2


# ---------------------------------------------------------------- sequences


def seq_add(seq, delta):
    """``seq + delta`` in the wrapping int32 sequence space (0 <= delta <= INT32_MAX)."""
    s = seq + delta
    if s > INT32_MAX:
        s -= SEQUENCE_SPACE
    return s


def seq_sub(seq, delta):
    """``seq - delta`` in the wrapping sequence space (Kafka's decrementSequence)."""
    s = seq - delta
    if s < 0:
        s += SEQUENCE_SPACE
    return s


def in_sequence(last_seq, next_seq):
    """True when ``next_seq`` directly follows ``last_seq`` (wrapping at INT32_MAX)."""
    return next_seq == last_seq + 1 or (next_seq == 0 and last_seq == INT32_MAX)


# ---------------------------------------------------------------- hashing

# Multipliers below 2**31 and keys folded to 31 bits keep every product and
# sum below 2**63: no backend ever overflows, so all compute the same slots.


def producer_hash(producer_id, partition):
    folded = (producer_id ^ (producer_id >> 32)) & 0x7FFFFFFF
    h = folded * 0x5BD1E995 + (partition & 0x7FFFFFFF) * 0x27D4EB2F
    return h ^ (h >> 29)


def partition_hash(partition):
    h = (partition & 0x7FFFFFFF) * 0x5BD1E995
    return h ^ (h >> 29)


def producer_slot(slot_producer_id, slot_partition, slot_row, producer_id, partition):
    """Slot holding ``(partition, producer_id)``, or the empty slot where it would go."""
    mask = slot_row.shape[0] - 1
    slot = producer_hash(producer_id, partition) & mask
    while True:
        if int(slot_row[slot]) < 0:
            return slot
        if int(slot_producer_id[slot]) == producer_id and int(slot_partition[slot]) == partition:
            return slot
        slot = (slot + 1) & mask


def partition_slot(pslot_partition, pslot_index, partition):
    """Slot holding ``partition``, or the empty slot where it would go."""
    mask = pslot_index.shape[0] - 1
    slot = partition_hash(partition) & mask
    while True:
        if int(pslot_index[slot]) < 0:
            return slot
        if int(pslot_partition[slot]) == partition:
            return slot
        slot = (slot + 1) & mask


def rebuild_producer_index(slot_producer_id, slot_partition, slot_row, row_producer_id, row_partition, n_rows):
    """Empty the producer index and insert rows ``0..n_rows-1`` in row order."""
    for s in range(slot_row.shape[0]):
        slot_row[s] = -1
    for row in range(n_rows):
        pid = int(row_producer_id[row])
        part = int(row_partition[row])
        slot = producer_slot(slot_producer_id, slot_partition, slot_row, pid, part)
        slot_producer_id[slot] = pid
        slot_partition[slot] = part
        slot_row[slot] = row


def rebuild_partition_index(pslot_partition, pslot_index, partition_id, n_partitions):
    """Empty the partition index and insert partitions ``0..n_partitions-1``."""
    for s in range(pslot_index.shape[0]):
        pslot_index[s] = -1
    for index in range(n_partitions):
        part = int(partition_id[index])
        slot = partition_slot(pslot_partition, pslot_index, part)
        pslot_partition[slot] = part
        pslot_index[slot] = index


# ---------------------------------------------------------------- one batch


def metadata_error(partition, producer_id, epoch, base_seq, last_seq, base_offset,
                   record_count, is_transactional, is_control, control_type, origin):
    """INVALID_RECORD for metadata no real batch can carry, else NONE."""
    if record_count < 1 or partition < 0 or producer_id < -1 or epoch < -1 or base_offset < -1:
        return INVALID_RECORD
    if producer_id == -1 and (is_transactional or is_control):
        return INVALID_RECORD
    if is_control:
        if control_type != CONTROL_ABORT and control_type != CONTROL_COMMIT:
            return INVALID_RECORD
        return NONE  # markers carry no sequence
    if base_seq == -1:
        # No sequence: fine without a producer id, or where sequences are not checked.
        if last_seq != -1 or (producer_id >= 0 and origin == ORIGIN_CLIENT):
            return INVALID_RECORD
        return NONE
    if base_seq < 0 or base_seq > INT32_MAX:
        return INVALID_RECORD
    if last_seq != seq_add(base_seq, record_count - 1):
        return INVALID_RECORD
    return NONE


def ring_pos(head, k):
    """Position ``k`` after ``head`` in the five-slot ring (both below RING_SIZE): no division."""
    pos = head + k
    if pos >= RING_SIZE:
        pos -= RING_SIZE
    return pos


def find_duplicate(ring_last_seq, ring_offset_delta, ring_head, ring_len, row, first_seq, last_seq):
    """Ring position of a retained batch with exactly this sequence range, or -1."""
    head = int(ring_head[row])
    length = int(ring_len[row])
    if length == RING_SIZE:  # full (the usual case): a quick look for the last sequence before the ordered scan
        found = False
        for pos in range(RING_SIZE):
            found = found or int(ring_last_seq[row, pos]) == last_seq
        if not found:
            return -1
    for k in range(length):
        pos = ring_pos(head, k)
        stored_last = int(ring_last_seq[row, pos])
        if stored_last == last_seq:
            if seq_sub(stored_last, int(ring_offset_delta[row, pos])) == first_seq:
                return pos
    return -1


def newest_last_seq(ring_last_seq, ring_head, ring_len, row):
    """Last sequence of the newest retained batch, -1 when none is retained."""
    length = int(ring_len[row])
    if length == 0:
        return -1
    return int(ring_last_seq[row, ring_pos(int(ring_head[row]), length - 1)])


def sequence_error(stored_epoch, stored_last_seq, epoch, first_seq):
    """SPEC §2 step 3, for CLIENT appends: NONE or OUT_OF_ORDER_SEQUENCE_NUMBER."""
    if epoch != stored_epoch:
        # A new epoch must restart at 0, unless the producer is unknown here.
        if first_seq != 0 and stored_epoch != -1:
            return OUT_OF_ORDER_SEQUENCE_NUMBER
        return NONE
    if stored_epoch == -1 or in_sequence(stored_last_seq, first_seq):
        return NONE
    return OUT_OF_ORDER_SEQUENCE_NUMBER


def sequence_finding(stored_epoch, stored_last_seq, epoch, first_seq, last_seq):
    """Why an OUT_OF_ORDER_SEQUENCE_NUMBER: ``(finding, expected first sequence)``.

    Sequences missing before ``first_seq`` are a gap; a range wholly at or
    before the last written sequence of the same epoch was already written
    (a duplicate older than the five-batch window); a range straddling it is
    out of order.
    """
    if epoch != stored_epoch or stored_last_seq == -1:
        return F_SEQUENCE_GAP, 0  # a new epoch (or an entry without batches) must start at 0
    expected = seq_add(stored_last_seq, 1)
    if seq_sub(first_seq, expected) < HALF_SEQUENCE_SPACE:
        return F_SEQUENCE_GAP, expected
    if seq_sub(stored_last_seq, last_seq) < HALF_SEQUENCE_SPACE:
        return F_DUPLICATE_BEYOND_WINDOW, expected
    return F_OUT_OF_ORDER, expected


def ring_push(ring_last_seq, ring_offset_delta, ring_last_offset, ring_timestamp, ring_head, ring_len,
              row, last_seq, last_offset, offset_delta, timestamp):
    """Remember one batch; the oldest of five is dropped."""
    head = int(ring_head[row])
    length = int(ring_len[row])
    if length < RING_SIZE:
        pos = ring_pos(head, length)
        ring_len[row] = length + 1
    else:
        pos = head
        ring_head[row] = ring_pos(head, 1)
    ring_last_seq[row, pos] = last_seq
    ring_offset_delta[row, pos] = offset_delta
    ring_last_offset[row, pos] = last_offset
    ring_timestamp[row, pos] = timestamp


# ---------------------------------------------------------------- the kernel


def validate_batches(
    partition, producer_id, producer_epoch, base_sequence, last_sequence, base_offset,
    record_count, max_timestamp, is_transactional, is_control, control_type, coordinator_epoch,
    origin, start,
    slot_producer_id, slot_partition, slot_row,
    row_partition, row_producer_id, row_partition_index, row_epoch, row_coordinator_epoch,
    row_last_timestamp, row_txn_first_offset,
    ring_last_seq, ring_offset_delta, ring_last_offset, ring_timestamp, ring_head, ring_len,
    pslot_partition, pslot_index, partition_id, partition_next_offset,
    counters,
    out_status, out_error_code, out_base_offset, out_last_offset, out_finding, out_expected,
    txn_partition, txn_producer_id, txn_first_offset, txn_last_offset, txn_aborted,
):
    """Apply SPEC §2 to batches ``start..n-1`` in order; return the first index not processed.

    It stops early (returning that index) only when the table has no room for
    one more producer row or partition; the caller grows the table and calls
    again from there. Completed transactions are appended at
    ``counters[N_COMPLETED]``; the caller sizes the ``txn_*`` arrays for one
    per control batch.

    ``out_finding`` explains each batch (``F_*``); ``out_expected`` gives the
    value the batch contradicted: the expected first sequence for sequence
    findings, the current producer epoch for an old epoch, the current
    coordinator epoch for a fenced marker, the open transaction's first offset
    for INVALID_TXN_STATE, else -1.
    """
    n = partition.shape[0]
    row_capacity = row_epoch.shape[0]
    partition_capacity = partition_id.shape[0]
    for i in range(start, n):
        if int(counters[N_ROWS]) >= row_capacity or int(counters[N_PARTITIONS]) >= partition_capacity:
            return i
        part = int(partition[i])
        pid = int(producer_id[i])
        epoch = int(producer_epoch[i])
        first_seq = int(base_sequence[i])
        last_seq = int(last_sequence[i])
        given_offset = int(base_offset[i])
        count = int(record_count[i])
        timestamp = int(max_timestamp[i])
        transactional = bool(is_transactional[i])
        control = bool(is_control[i])

        error = metadata_error(part, pid, epoch, first_seq, last_seq, given_offset, count,
                               transactional, control, int(control_type[i]), origin)
        if error != NONE:
            out_status[i] = REJECTED
            out_error_code[i] = error
            out_base_offset[i] = -1
            out_last_offset[i] = -1
            out_finding[i] = F_INVALID_RECORD
            out_expected[i] = -1
            continue

        # The producer's entry (row), if it has one on this partition.
        row = -1
        slot = -1
        if pid >= 0:
            slot = producer_slot(slot_producer_id, slot_partition, slot_row, pid, part)
            row = int(slot_row[slot])
        stored_epoch = -1
        stored_coordinator_epoch = -1
        txn_first = -1
        if row >= 0:
            stored_epoch = int(row_epoch[row])
            stored_coordinator_epoch = int(row_coordinator_epoch[row])
            txn_first = int(row_txn_first_offset[row])

        finding = F_NONE
        expected = -1
        if control:
            # Transaction marker, always checked as written by the coordinator.
            if epoch < stored_epoch:
                error = INVALID_PRODUCER_EPOCH
                finding = F_FENCED
                expected = stored_epoch
            elif int(coordinator_epoch[i]) < stored_coordinator_epoch:
                error = TRANSACTION_COORDINATOR_FENCED
                finding = F_FENCED
                expected = stored_coordinator_epoch
        elif pid >= 0:
            if origin == ORIGIN_CLIENT and row >= 0 and epoch == stored_epoch:
                pos = find_duplicate(ring_last_seq, ring_offset_delta, ring_head, ring_len, row, first_seq, last_seq)
                if pos >= 0:
                    original_last = int(ring_last_offset[row, pos])
                    out_status[i] = DUPLICATE
                    out_error_code[i] = NONE
                    out_base_offset[i] = original_last - int(ring_offset_delta[row, pos])
                    out_last_offset[i] = original_last
                    out_finding[i] = F_DUPLICATE
                    out_expected[i] = -1
                    continue
            if epoch < stored_epoch and origin != ORIGIN_REPLICATION:
                error = INVALID_PRODUCER_EPOCH
                # A transactional zombie is fenced by its successor; an idempotent one just regresses.
                finding = F_FENCED if transactional else F_EPOCH_REGRESSION
                expected = stored_epoch
            elif origin == ORIGIN_CLIENT:
                stored_last = -1
                if row >= 0:
                    stored_last = newest_last_seq(ring_last_seq, ring_head, ring_len, row)
                error = sequence_error(stored_epoch, stored_last, epoch, first_seq)
                if error != NONE:
                    finding, expected = sequence_finding(stored_epoch, stored_last, epoch, first_seq, last_seq)
            if error == NONE and txn_first >= 0 and not transactional:
                error = INVALID_TXN_STATE
                finding = F_INVALID_TXN_STATE
                expected = txn_first
        if error != NONE:
            out_status[i] = REJECTED
            out_error_code[i] = error
            out_base_offset[i] = -1
            out_last_offset[i] = -1
            out_finding[i] = finding
            out_expected[i] = expected
            continue

        # Accepted: find the partition's log end and assign offsets.
        if row >= 0:
            part_index = int(row_partition_index[row])
        else:
            pslot = partition_slot(pslot_partition, pslot_index, part)
            part_index = int(pslot_index[pslot])
            if part_index < 0:
                part_index = int(counters[N_PARTITIONS])
                counters[N_PARTITIONS] = part_index + 1
                pslot_partition[pslot] = part
                pslot_index[pslot] = part_index
                partition_id[part_index] = part
                partition_next_offset[part_index] = 0
        log_end = int(partition_next_offset[part_index])
        first_offset = given_offset if given_offset >= 0 else log_end
        last_offset = first_offset + count - 1
        if last_offset + 1 > log_end:
            partition_next_offset[part_index] = last_offset + 1
        out_status[i] = APPENDED
        out_error_code[i] = NONE
        out_base_offset[i] = first_offset
        out_last_offset[i] = last_offset
        out_finding[i] = F_NONE
        out_expected[i] = -1
        if pid < 0:
            continue  # no producer id: nothing to remember

        if row < 0:
            row = int(counters[N_ROWS])
            counters[N_ROWS] = row + 1
            slot_producer_id[slot] = pid
            slot_partition[slot] = part
            slot_row[slot] = row
            row_partition[row] = part
            row_producer_id[row] = pid
            row_partition_index[row] = part_index
            row_epoch[row] = -1
            row_coordinator_epoch[row] = -1
            row_last_timestamp[row] = -1
            row_txn_first_offset[row] = -1
            ring_head[row] = 0
            ring_len[row] = 0
        if epoch != stored_epoch:
            ring_head[row] = 0
            ring_len[row] = 0  # any change of epoch forgets the retained batches
        row_epoch[row] = epoch
        row_last_timestamp[row] = timestamp

        if control:
            if txn_first >= 0:
                k = int(counters[N_COMPLETED])
                counters[N_COMPLETED] = k + 1
                txn_partition[k] = part
                txn_producer_id[k] = pid
                txn_first_offset[k] = txn_first
                txn_last_offset[k] = first_offset
                txn_aborted[k] = int(control_type[i]) == CONTROL_ABORT
            row_coordinator_epoch[row] = int(coordinator_epoch[i])
            row_txn_first_offset[row] = -1
        else:
            ring_push(ring_last_seq, ring_offset_delta, ring_last_offset, ring_timestamp, ring_head, ring_len,
                      row, last_seq, last_offset, count - 1, timestamp)
            if transactional and txn_first < 0:
                row_txn_first_offset[row] = first_offset
    return n
