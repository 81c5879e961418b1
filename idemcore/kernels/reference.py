"""The reference kernel: the partition leader's producer-state rules (docs/rules.md) over plain arrays.

This module is the executable form of the rules a Kafka partition leader
applies to every appended batch (``ProducerAppendInfo`` / ``ProducerStateEntry``
in Kafka's storage module). It is written in the subset of Python that Numba
compiles, so ``numba_kernels`` compiles *this very source*: there is one
algorithm, run interpreted or compiled. The Cython backend is an independent
implementation checked against this one.

Conventions (kept by every backend):
- every value read from an array is turned into a Python ``int`` before any
  arithmetic, so sums never overflow a narrow dtype; sequence numbers wrap
  explicitly from 2147483647 to 0; offsets never wrap: a batch whose offsets
  would pass the int64 space is refused (``check_offsets``), so no offset sum
  overflows an int64 (Numba, Cython) or raises OverflowError (Python);
- kernels never raise and never allocate; results go into ``out`` arrays;
- state lives in the arrays of :class:`idemcore.ProducerStateTable`; a kernel
  that runs out of rows returns the index of the first batch it did not
  process, the caller grows the table and calls again from there.
"""

from __future__ import annotations

from idemcore.protocol.sequences import in_sequence, seq_add, seq_sub

# Result codes (mirror idemcore.protocol.codes and idemcore.findings; kernels keep literal module globals
# so Numba folds them into constants).
APPENDED = 0
DUPLICATE = 1
REJECTED = 2

ORIGIN_CLIENT = 0
ORIGIN_COORDINATOR = 1
ORIGIN_REPLICATION = 2

NONE = 0
# A batch whose offsets would pass the partition's offset space (see check_offsets). Kafka never gets there, so it has
# no code for it: UNKNOWN_SERVER_ERROR, as for the other exhausted int64 space (producer ids), because the batch is
# fine and the partition is full. It is not retriable, so a producer fails the batch instead of retrying forever.
UNKNOWN_SERVER_ERROR = -1
OUT_OF_ORDER_SEQUENCE_NUMBER = 45
INVALID_PRODUCER_EPOCH = 47
INVALID_TXN_STATE = 48
TRANSACTION_COORDINATOR_FENCED = 52
INVALID_RECORD = 87

CONTROL_ABORT = 0
CONTROL_COMMIT = 1

# Findings (mirror idemcore.findings.Finding): why a batch was not simply appended.
F_NONE = 0
F_DUPLICATE = 1
F_DUPLICATE_BEYOND_WINDOW = 2
F_SEQUENCE_GAP = 3
F_OUT_OF_ORDER = 4
F_EPOCH_REGRESSION = 5
F_FENCED = 6
F_INVALID_TXN_STATE = 7
F_INVALID_RECORD = 8
F_OFFSET_OVERFLOW = 10  # 9 is HANGING_TRANSACTION, found at the end of a stream, not by the kernels
HALF_SEQUENCE_SPACE = 1073741824  # a sequence less than this far ahead (wrapping) counts as "ahead"

RING_SIZE = 5
INT32_MAX = 2147483647
SEQUENCE_SPACE = 2147483648  # sequences live in [0, INT32_MAX] and wrap
INT16_MAX = 32767
# Offsets are int64, and so is the log end offset (the next offset, last + 1): the last offset a batch may take is
# INT64_MAX - 1, so that the log end after it still fits.
INT64_MAX = 9223372036854775807

# counters[] layout, shared with idemcore.state.table.
N_ROWS = 0
N_PARTITIONS = 1
N_COMPLETED = 2


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


# ---------------------------------------------------------------- Kafka's steps for one batch


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


def check_marker(epoch, coordinator_epoch, stored_epoch, stored_coordinator_epoch):
    """A COMMIT/ABORT marker: ``(error, finding, expected)``; an old producer or coordinator epoch is fenced."""
    if epoch < stored_epoch:
        return INVALID_PRODUCER_EPOCH, F_FENCED, stored_epoch
    if coordinator_epoch < stored_coordinator_epoch:
        return TRANSACTION_COORDINATOR_FENCED, F_FENCED, stored_coordinator_epoch
    return NONE, F_NONE, -1


def check_epoch(epoch, stored_epoch, transactional, origin):
    """Kafka's checkProducerEpoch for data: an older epoch is refused, except when replicating."""
    if epoch < stored_epoch and origin != ORIGIN_REPLICATION:
        # A transactional zombie is fenced by its successor; an idempotent one just regresses.
        if transactional:
            return INVALID_PRODUCER_EPOCH, F_FENCED, stored_epoch
        return INVALID_PRODUCER_EPOCH, F_EPOCH_REGRESSION, stored_epoch
    return NONE, F_NONE, -1


def sequence_error(stored_epoch, stored_last_seq, epoch, first_seq):
    """Kafka's checkSequence for CLIENT appends: NONE or OUT_OF_ORDER_SEQUENCE_NUMBER."""
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


def check_sequence(stored_epoch, stored_last_seq, epoch, first_seq, last_seq):
    """The sequence step: ``(error, finding, expected)``."""
    error = sequence_error(stored_epoch, stored_last_seq, epoch, first_seq)
    if error == NONE:
        return NONE, F_NONE, -1
    finding, expected = sequence_finding(stored_epoch, stored_last_seq, epoch, first_seq, last_seq)
    return error, finding, expected


def check_txn_state(transactional, txn_first):
    """A non-transactional write while the producer's transaction is open on the partition."""
    if txn_first >= 0 and not transactional:
        return INVALID_TXN_STATE, F_INVALID_TXN_STATE, txn_first
    return NONE, F_NONE, -1


def check_offsets(first_offset, record_count):
    """The offsets step: a batch whose last offset ``first + count - 1`` would leave no int64 log end after it
    (``last + 1 > INT64_MAX``) is refused; ``expected`` is the first offset it would have taken. Written as
    ``first > INT64_MAX - count`` (``1 <= count <= INT32_MAX``), so it overflows in no backend."""
    if first_offset > INT64_MAX - record_count:
        return UNKNOWN_SERVER_ERROR, F_OFFSET_OVERFLOW, first_offset
    return NONE, F_NONE, -1


def log_end(row, part, row_partition_index, parts):
    """The partition's next offset (0 for a partition never appended to)."""
    pslot_partition, pslot_index, _partition_id, partition_next_offset = parts
    if row >= 0:
        return int(partition_next_offset[int(row_partition_index[row])])
    index = int(pslot_index[partition_slot(pslot_partition, pslot_index, part)])
    if index < 0:
        return 0
    return int(partition_next_offset[index])


def emit(out, i, status, error, base_offset, last_offset, finding, expected):
    """Write batch ``i``'s verdict."""
    out_status, out_error_code, out_base_offset, out_last_offset, out_finding, out_expected = out
    out_status[i] = status
    out_error_code[i] = error
    out_base_offset[i] = base_offset
    out_last_offset[i] = last_offset
    out_finding[i] = finding
    out_expected[i] = expected


def check_batch(i, batch, origin, index, rows, ring, parts, counters, out, txns):
    """Prepare batch ``i`` against the state as it stands (Kafka's ProducerAppendInfo): writes its verdict
    and, for a marker that ends a transaction, the completed transaction; changes no state. Returns the
    producer's index slot (-1 without a producer id) for :func:`commit_batch`. Arguments come in the groups
    of :mod:`idemcore.kernels.abi`, as tuples: Python compiles a call of more than 30 arguments as a
    ``*args`` call, which Numba cannot inline."""
    (partition, producer_id, producer_epoch, base_sequence, last_sequence, base_offset, record_count,
     _max_timestamp, is_transactional, is_control, control_type, coordinator_epoch) = batch
    slot_producer_id, slot_partition, slot_row = index
    (_row_partition, _row_producer_id, row_partition_index, row_epoch, row_coordinator_epoch, _row_last_timestamp,
     row_txn_first_offset) = rows
    ring_last_seq, ring_offset_delta, ring_last_offset, _ring_timestamp, ring_head, ring_len = ring
    txn_partition, txn_producer_id, txn_first_offset, txn_last_offset, txn_aborted = txns
    part = int(partition[i])
    pid = int(producer_id[i])
    epoch = int(producer_epoch[i])
    first_seq = int(base_sequence[i])
    last_seq = int(last_sequence[i])
    given_offset = int(base_offset[i])
    count = int(record_count[i])
    transactional = bool(is_transactional[i])
    control = bool(is_control[i])
    marker_type = int(control_type[i])

    error = metadata_error(part, pid, epoch, first_seq, last_seq, given_offset, count,
                           transactional, control, marker_type, origin)
    if error != NONE:
        emit(out, i, REJECTED, error, -1, -1, F_INVALID_RECORD, -1)
        return -1

    slot = -1
    row = -1
    stored_epoch = -1
    stored_coordinator_epoch = -1
    txn_first = -1
    if pid >= 0:
        slot = producer_slot(slot_producer_id, slot_partition, slot_row, pid, part)
        row = int(slot_row[slot])
    if row >= 0:
        stored_epoch = int(row_epoch[row])
        stored_coordinator_epoch = int(row_coordinator_epoch[row])
        txn_first = int(row_txn_first_offset[row])

    finding = F_NONE
    expected = -1
    if control:
        error, finding, expected = check_marker(epoch, int(coordinator_epoch[i]), stored_epoch,
                                                stored_coordinator_epoch)
    elif pid >= 0:
        if origin == ORIGIN_CLIENT and row >= 0 and epoch == stored_epoch:
            pos = find_duplicate(ring_last_seq, ring_offset_delta, ring_head, ring_len, row, first_seq, last_seq)
            if pos >= 0:  # a retry: answer with the original offsets, write nothing
                original_last = int(ring_last_offset[row, pos])
                emit(out, i, DUPLICATE, NONE, original_last - int(ring_offset_delta[row, pos]), original_last,
                     F_DUPLICATE, -1)
                return slot
        error, finding, expected = check_epoch(epoch, stored_epoch, transactional, origin)
        if error == NONE and origin == ORIGIN_CLIENT:
            stored_last = -1
            if row >= 0:
                stored_last = newest_last_seq(ring_last_seq, ring_head, ring_len, row)
            error, finding, expected = check_sequence(stored_epoch, stored_last, epoch, first_seq, last_seq)
        if error == NONE:
            error, finding, expected = check_txn_state(transactional, txn_first)
    if error != NONE:
        emit(out, i, REJECTED, error, -1, -1, finding, expected)
        return slot

    # Offsets from the log end, unless the log gave them (replication, recovery); refused past the int64 space.
    first_offset = given_offset
    if first_offset < 0:
        first_offset = log_end(row, part, row_partition_index, parts)
    error, finding, expected = check_offsets(first_offset, count)
    if error != NONE:
        emit(out, i, REJECTED, error, -1, -1, finding, expected)
        return slot
    emit(out, i, APPENDED, NONE, first_offset, first_offset + count - 1, F_NONE, -1)
    if control and txn_first >= 0:
        k = int(counters[N_COMPLETED])
        counters[N_COMPLETED] = k + 1
        txn_partition[k] = part
        txn_producer_id[k] = pid
        txn_first_offset[k] = txn_first
        txn_last_offset[k] = first_offset
        txn_aborted[k] = marker_type == CONTROL_ABORT
    return slot


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


def commit_batch(i, slot, batch, index, rows, ring, parts, counters, out):
    """Commit appended batch ``i`` (Kafka's ProducerStateManager.update): advance the partition's log end,
    create or update the producer's entry. ``slot``: the producer's index slot as :func:`check_batch`
    returned it, with no row inserted since. The caller has made room for one row and one partition."""
    (partition, producer_id, producer_epoch, _base_sequence, last_sequence, _base_offset, record_count,
     max_timestamp, is_transactional, is_control, _control_type, coordinator_epoch) = batch
    slot_producer_id, slot_partition, slot_row = index
    (row_partition, row_producer_id, row_partition_index, row_epoch, row_coordinator_epoch, row_last_timestamp,
     row_txn_first_offset) = rows
    ring_last_seq, ring_offset_delta, ring_last_offset, ring_timestamp, ring_head, ring_len = ring
    pslot_partition, pslot_index, partition_id, partition_next_offset = parts
    _out_status, out_base_offset, out_last_offset = out
    part = int(partition[i])
    pid = int(producer_id[i])
    first_offset = int(out_base_offset[i])
    last_offset = int(out_last_offset[i])
    row = -1
    if pid >= 0:
        row = int(slot_row[slot])
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
    if last_offset + 1 > int(partition_next_offset[part_index]):  # last_offset < INT64_MAX: check_offsets
        partition_next_offset[part_index] = last_offset + 1
    if pid < 0:
        return  # no producer id: nothing to remember

    epoch = int(producer_epoch[i])
    timestamp = int(max_timestamp[i])
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
    if epoch != int(row_epoch[row]):
        ring_head[row] = 0
        ring_len[row] = 0  # any change of epoch forgets the retained batches
    row_epoch[row] = epoch
    row_last_timestamp[row] = timestamp
    if is_control[i]:
        row_coordinator_epoch[row] = int(coordinator_epoch[i])
        row_txn_first_offset[row] = -1  # the marker ends the open transaction
    else:
        ring_push(ring_last_seq, ring_offset_delta, ring_last_offset, ring_timestamp, ring_head, ring_len,
                  row, int(last_sequence[i]), last_offset, int(record_count[i]) - 1, timestamp)
        if is_transactional[i] and int(row_txn_first_offset[row]) < 0:
            row_txn_first_offset[row] = first_offset  # the first transactional batch opens the transaction


# ---------------------------------------------------------------- the entry points


def validate_batches(
    partition, producer_id, producer_epoch, base_sequence, last_sequence, base_offset,
    record_count, max_timestamp, is_transactional, is_control, control_type, coordinator_epoch,
    origin, start, stop,
    slot_producer_id, slot_partition, slot_row,
    row_partition, row_producer_id, row_partition_index, row_epoch, row_coordinator_epoch,
    row_last_timestamp, row_txn_first_offset,
    ring_last_seq, ring_offset_delta, ring_last_offset, ring_timestamp, ring_head, ring_len,
    pslot_partition, pslot_index, partition_id, partition_next_offset,
    counters,
    out_status, out_error_code, out_base_offset, out_last_offset, out_finding, out_expected,
    txn_partition, txn_producer_id, txn_first_offset, txn_last_offset, txn_aborted,
):
    """Check and commit batches ``start..stop-1`` one after the other; return the first index not processed.

    Each batch sees the state its predecessors committed (a stream replayed in
    order). It stops early, returning that index, only when the table has no
    room for one more producer row or partition; the caller grows the table
    and calls again from there. Completed transactions are appended at
    ``counters[N_COMPLETED]``; the caller sizes the ``txn_*`` arrays for one
    per control batch.

    ``out_finding`` explains each batch (``F_*``); ``out_expected`` gives the
    value the batch contradicted: the expected first sequence for sequence
    findings, the current producer epoch for an old epoch, the current
    coordinator epoch for a fenced marker, the open transaction's first offset
    for INVALID_TXN_STATE, the first offset the batch would have taken for
    F_OFFSET_OVERFLOW, else -1.
    """
    batch = (partition, producer_id, producer_epoch, base_sequence, last_sequence, base_offset, record_count,
             max_timestamp, is_transactional, is_control, control_type, coordinator_epoch)
    index = (slot_producer_id, slot_partition, slot_row)
    rows = (row_partition, row_producer_id, row_partition_index, row_epoch, row_coordinator_epoch,
            row_last_timestamp, row_txn_first_offset)
    ring = (ring_last_seq, ring_offset_delta, ring_last_offset, ring_timestamp, ring_head, ring_len)
    parts = (pslot_partition, pslot_index, partition_id, partition_next_offset)
    out = (out_status, out_error_code, out_base_offset, out_last_offset, out_finding, out_expected)
    txns = (txn_partition, txn_producer_id, txn_first_offset, txn_last_offset, txn_aborted)
    committed = (out_status, out_base_offset, out_last_offset)
    row_capacity = row_epoch.shape[0]
    partition_capacity = partition_id.shape[0]
    for i in range(start, stop):
        if int(counters[N_ROWS]) >= row_capacity or int(counters[N_PARTITIONS]) >= partition_capacity:
            return i
        slot = check_batch(i, batch, origin, index, rows, ring, parts, counters, out, txns)
        if out_status[i] == APPENDED:
            commit_batch(i, slot, batch, index, rows, ring, parts, counters, committed)
    return stop


def check_batches(
    partition, producer_id, producer_epoch, base_sequence, last_sequence, base_offset,
    record_count, max_timestamp, is_transactional, is_control, control_type, coordinator_epoch,
    origin, start, stop,
    slot_producer_id, slot_partition, slot_row,
    row_partition, row_producer_id, row_partition_index, row_epoch, row_coordinator_epoch,
    row_last_timestamp, row_txn_first_offset,
    ring_last_seq, ring_offset_delta, ring_last_offset, ring_timestamp, ring_head, ring_len,
    pslot_partition, pslot_index, partition_id, partition_next_offset,
    counters,
    out_status, out_error_code, out_base_offset, out_last_offset, out_finding, out_expected,
    txn_partition, txn_producer_id, txn_first_offset, txn_last_offset, txn_aborted,
):
    """Prepare: the verdicts of batches ``start..stop-1`` against the state as it stands, changing no state
    (the broker commits them with :func:`commit_batches` once the log write succeeded). Every batch sees
    the same state, so no two may be for one partition (each gets the partition's log end). Returns ``stop``."""
    batch = (partition, producer_id, producer_epoch, base_sequence, last_sequence, base_offset, record_count,
             max_timestamp, is_transactional, is_control, control_type, coordinator_epoch)
    index = (slot_producer_id, slot_partition, slot_row)
    rows = (row_partition, row_producer_id, row_partition_index, row_epoch, row_coordinator_epoch,
            row_last_timestamp, row_txn_first_offset)
    ring = (ring_last_seq, ring_offset_delta, ring_last_offset, ring_timestamp, ring_head, ring_len)
    parts = (pslot_partition, pslot_index, partition_id, partition_next_offset)
    out = (out_status, out_error_code, out_base_offset, out_last_offset, out_finding, out_expected)
    txns = (txn_partition, txn_producer_id, txn_first_offset, txn_last_offset, txn_aborted)
    for i in range(start, stop):
        check_batch(i, batch, origin, index, rows, ring, parts, counters, out, txns)
    return stop


def commit_batches(
    partition, producer_id, producer_epoch, base_sequence, last_sequence, base_offset,
    record_count, max_timestamp, is_transactional, is_control, control_type, coordinator_epoch,
    start, stop,
    slot_producer_id, slot_partition, slot_row,
    row_partition, row_producer_id, row_partition_index, row_epoch, row_coordinator_epoch,
    row_last_timestamp, row_txn_first_offset,
    ring_last_seq, ring_offset_delta, ring_last_offset, ring_timestamp, ring_head, ring_len,
    pslot_partition, pslot_index, partition_id, partition_next_offset,
    counters,
    out_status, out_base_offset, out_last_offset,
):
    """Commit the batches of ``start..stop-1`` whose ``out_status`` is APPENDED (as :func:`check_batches`
    left it, or after the caller set a failed write to REJECTED); return the first index not processed,
    ``stop`` unless the table ran out of room (grow it and call again from there)."""
    batch = (partition, producer_id, producer_epoch, base_sequence, last_sequence, base_offset, record_count,
             max_timestamp, is_transactional, is_control, control_type, coordinator_epoch)
    index = (slot_producer_id, slot_partition, slot_row)
    rows = (row_partition, row_producer_id, row_partition_index, row_epoch, row_coordinator_epoch,
            row_last_timestamp, row_txn_first_offset)
    ring = (ring_last_seq, ring_offset_delta, ring_last_offset, ring_timestamp, ring_head, ring_len)
    parts = (pslot_partition, pslot_index, partition_id, partition_next_offset)
    committed = (out_status, out_base_offset, out_last_offset)
    row_capacity = row_epoch.shape[0]
    partition_capacity = partition_id.shape[0]
    for i in range(start, stop):
        if out_status[i] != APPENDED:
            continue
        if int(counters[N_ROWS]) >= row_capacity or int(counters[N_PARTITIONS]) >= partition_capacity:
            return i
        slot = -1
        pid = int(producer_id[i])
        if pid >= 0:
            slot = producer_slot(slot_producer_id, slot_partition, slot_row, pid, int(partition[i]))
        commit_batch(i, slot, batch, index, rows, ring, parts, counters, committed)
    return stop
