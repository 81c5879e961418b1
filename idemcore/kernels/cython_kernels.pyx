# cython: language_level=3, boundscheck=False, wraparound=False, initializedcheck=False, cdivision=True
"""The producer-state rules compiled with Cython: an independent implementation of the kernel contract of
idemcore.kernels (the entry points, their parameters and results, the state arrays), checked against
idemcore.kernels.reference. Built by setup.py into idemcore.kernels.cython_kernels.

The helpers follow Kafka's steps for one batch under the reference's names. The entry points take typed
memoryviews; the helpers take structs of raw pointers filled once per call (``Batches``, ``State``, ...), so
no helper copies dozens of memoryview structs per batch. check_batches reads the state through ``Lookup``,
which holds only const pointers: it cannot write state.

Inlining matters (validate_batches is ~15% slower when check_batch and commit_batch are calls): a C compiler
inlines a big static function only into its single caller. So check_batch and commit_batch are fused
functions and each entry point calls its own copy: check_batch reads a ``Lookup`` in check_batches and the
``State`` in validate_batches; commit_batch reads the offsets from the ``Verdicts`` in validate_batches and
from ``CommitVerdicts`` in commit_batches. (The copies differ in struct layout, so the compiler does not fold
them back into one.)
"""

from libc.stdint cimport INT64_MAX, int8_t, int16_t, int32_t, int64_t, uint8_t

from kernel_defs cimport *

#: The codes compiled in, by the names of idemcore.kernels.reference's module globals (checked by the tests).
KERNEL_CODES = {
    "APPENDED": APPENDED,
    "DUPLICATE": DUPLICATE,
    "REJECTED": REJECTED,
    "ORIGIN_CLIENT": ORIGIN_CLIENT,
    "ORIGIN_COORDINATOR": ORIGIN_COORDINATOR,
    "ORIGIN_REPLICATION": ORIGIN_REPLICATION,
    "NONE": E_NONE,
    "UNKNOWN_SERVER_ERROR": E_UNKNOWN_SERVER_ERROR,
    "OUT_OF_ORDER_SEQUENCE_NUMBER": E_OUT_OF_ORDER_SEQUENCE_NUMBER,
    "INVALID_PRODUCER_EPOCH": E_INVALID_PRODUCER_EPOCH,
    "INVALID_TXN_STATE": E_INVALID_TXN_STATE,
    "TRANSACTION_COORDINATOR_FENCED": E_TRANSACTION_COORDINATOR_FENCED,
    "INVALID_RECORD": E_INVALID_RECORD,
    "CONTROL_ABORT": CONTROL_ABORT,
    "CONTROL_COMMIT": CONTROL_COMMIT,
    "F_NONE": F_NONE,
    "F_DUPLICATE": F_DUPLICATE,
    "F_DUPLICATE_BEYOND_WINDOW": F_DUPLICATE_BEYOND_WINDOW,
    "F_SEQUENCE_GAP": F_SEQUENCE_GAP,
    "F_OUT_OF_ORDER": F_OUT_OF_ORDER,
    "F_EPOCH_REGRESSION": F_EPOCH_REGRESSION,
    "F_FENCED": F_FENCED,
    "F_INVALID_TXN_STATE": F_INVALID_TXN_STATE,
    "F_INVALID_RECORD": F_INVALID_RECORD,
    "F_OFFSET_OVERFLOW": F_OFFSET_OVERFLOW,
    "RING_SIZE": RING,
    "N_ROWS": N_ROWS,
    "N_PARTITIONS": N_PARTITIONS,
    "N_COMPLETED": N_COMPLETED,
    "INT64_MAX": INT64_MAX,
}


# ---------------------------------------------------------------- the arrays, as the helpers take them

cdef struct Batches:
    # The batch columns (read only).
    const int32_t *partition
    const int64_t *producer_id
    const int16_t *producer_epoch
    const int32_t *base_sequence
    const int32_t *last_sequence
    const int64_t *base_offset
    const int32_t *record_count
    const int64_t *max_timestamp
    const uint8_t *is_transactional
    const uint8_t *is_control
    const int8_t *control_type
    const int32_t *coordinator_epoch


cdef struct Lookup:
    # The state as check_batches reads it: const pointers. Ring arrays are row-major: [row * RING + pos].
    const int64_t *slot_producer_id
    const int32_t *slot_partition
    const int32_t *slot_row
    Py_ssize_t slot_mask
    const int32_t *row_partition_index
    const int16_t *row_epoch
    const int32_t *row_coordinator_epoch
    const int64_t *row_txn_first_offset
    const int32_t *ring_last_seq
    const int32_t *ring_offset_delta
    const int64_t *ring_last_offset
    const int8_t *ring_head
    const int8_t *ring_len
    const int32_t *pslot_partition
    const int32_t *pslot_index
    Py_ssize_t pslot_mask
    const int64_t *partition_next_offset


cdef struct State:
    # The state as validate_batches and commit_batches read and write it.
    int64_t *slot_producer_id
    int32_t *slot_partition
    int32_t *slot_row
    Py_ssize_t slot_mask
    int32_t *row_partition
    int64_t *row_producer_id
    int32_t *row_partition_index
    int16_t *row_epoch
    int32_t *row_coordinator_epoch
    int64_t *row_last_timestamp
    int64_t *row_txn_first_offset
    int32_t *ring_last_seq
    int32_t *ring_offset_delta
    int64_t *ring_last_offset
    int64_t *ring_timestamp
    int8_t *ring_head
    int8_t *ring_len
    int32_t *pslot_partition
    int32_t *pslot_index
    Py_ssize_t pslot_mask
    int32_t *partition_id
    int64_t *partition_next_offset
    int64_t *counters
    Py_ssize_t row_capacity
    Py_ssize_t partition_capacity


cdef struct Verdicts:
    int8_t *status
    int16_t *error_code
    int64_t *base_offset
    int64_t *last_offset
    int8_t *finding
    int64_t *expected


cdef struct Completed:
    # Transactions closed by markers, appended at counters[N_COMPLETED] (counted beyond capacity, never written).
    int64_t *counters
    int32_t *partition
    int64_t *producer_id
    int64_t *first_offset
    int64_t *last_offset
    uint8_t *aborted
    Py_ssize_t capacity


cdef struct CommitVerdicts:
    # What commit_batches reads of the verdicts (idemcore.kernels.abi.CommitVerdicts).
    const int8_t *status
    const int64_t *base_offset
    const int64_t *last_offset


# The state as check_batch reads it: read only (check_batches) or the state it commits to (validate_batches).
ctypedef fused StateView:
    Lookup
    State

# Where commit_batch reads a batch's offsets: the verdicts just written (validate_batches) or the caller's.
ctypedef fused CommitSource:
    Verdicts
    CommitVerdicts


cdef struct Step:
    # The outcome of one check: a Kafka error code, the finding, the value the batch contradicted.
    int error
    int finding
    int64_t expected


cdef inline Step passed() noexcept nogil:
    return Step(E_NONE, F_NONE, -1)


# ---------------------------------------------------------------- hashing

# 31-bit keys and multipliers below 2**31: no product or sum overflows, so every backend computes the same slots.

cdef inline int64_t producer_hash(int64_t producer_id, int64_t partition) noexcept nogil:
    cdef int64_t folded = (producer_id ^ (producer_id >> 32)) & 0x7FFFFFFF
    cdef int64_t h = folded * 0x5BD1E995 + (partition & 0x7FFFFFFF) * 0x27D4EB2F
    return h ^ (h >> 29)


cdef inline int64_t partition_hash(int64_t partition) noexcept nogil:
    cdef int64_t h = (partition & 0x7FFFFFFF) * 0x5BD1E995
    return h ^ (h >> 29)


cdef inline Py_ssize_t producer_slot(const int64_t *slot_producer_id, const int32_t *slot_partition,
                                     const int32_t *slot_row, Py_ssize_t mask,
                                     int64_t producer_id, int64_t partition) noexcept nogil:
    # Slot holding (partition, producer_id), or the empty slot where it would go.
    cdef Py_ssize_t slot = <Py_ssize_t>(producer_hash(producer_id, partition) & mask)
    while slot_row[slot] >= 0 and not (slot_producer_id[slot] == producer_id and slot_partition[slot] == partition):
        slot = (slot + 1) & mask
    return slot


cdef inline Py_ssize_t partition_slot(const int32_t *pslot_partition, const int32_t *pslot_index, Py_ssize_t mask,
                                      int64_t partition) noexcept nogil:
    # Slot holding partition, or the empty slot where it would go.
    cdef Py_ssize_t slot = <Py_ssize_t>(partition_hash(partition) & mask)
    while pslot_index[slot] >= 0 and pslot_partition[slot] != partition:
        slot = (slot + 1) & mask
    return slot


cdef inline bint power_of_two(Py_ssize_t n) noexcept nogil:
    return n > 0 and (n & (n - 1)) == 0


def rebuild_producer_index(int64_t[::1] slot_producer_id, int32_t[::1] slot_partition, int32_t[::1] slot_row,
                           const int64_t[::1] row_producer_id, const int32_t[::1] row_partition, Py_ssize_t n_rows):
    """Empty the producer index and insert rows ``0..n_rows-1`` in row order."""
    cdef Py_ssize_t slots = slot_row.shape[0]
    cdef Py_ssize_t s, row
    if not (power_of_two(slots) and slot_producer_id.shape[0] == slots and slot_partition.shape[0] == slots
            and 0 <= n_rows < slots and n_rows <= row_producer_id.shape[0] and n_rows <= row_partition.shape[0]):
        raise ValueError("rebuild_producer_index: inconsistent index or row array shapes")
    with nogil:
        for s in range(slots):
            slot_row[s] = -1
        for row in range(n_rows):
            s = producer_slot(&slot_producer_id[0], &slot_partition[0], &slot_row[0], slots - 1,
                              row_producer_id[row], row_partition[row])
            slot_producer_id[s] = row_producer_id[row]
            slot_partition[s] = row_partition[row]
            slot_row[s] = <int32_t>row


def rebuild_partition_index(int32_t[::1] pslot_partition, int32_t[::1] pslot_index, const int32_t[::1] partition_id,
                            Py_ssize_t n_partitions):
    """Empty the partition index and insert partitions ``0..n_partitions-1``."""
    cdef Py_ssize_t slots = pslot_index.shape[0]
    cdef Py_ssize_t s, index
    if not (power_of_two(slots) and pslot_partition.shape[0] == slots and 0 <= n_partitions < slots
            and n_partitions <= partition_id.shape[0]):
        raise ValueError("rebuild_partition_index: inconsistent index or partition array shapes")
    with nogil:
        for s in range(slots):
            pslot_index[s] = -1
        for index in range(n_partitions):
            s = partition_slot(&pslot_partition[0], &pslot_index[0], slots - 1, partition_id[index])
            pslot_partition[s] = partition_id[index]
            pslot_index[s] = <int32_t>index


# ---------------------------------------------------------------- Kafka's steps for one batch


cdef inline int metadata_error(int64_t partition, int64_t producer_id, int64_t epoch, int64_t base_seq,
                               int64_t last_seq, int64_t base_offset, int64_t record_count, bint is_transactional,
                               bint is_control, int64_t control_type, int origin) noexcept nogil:
    # INVALID_RECORD for metadata no real batch can carry, else NONE.
    if record_count < 1 or partition < 0 or producer_id < -1 or epoch < -1 or base_offset < -1:
        return E_INVALID_RECORD
    if producer_id == -1 and (is_transactional or is_control):
        return E_INVALID_RECORD
    if is_control:
        if control_type != CONTROL_ABORT and control_type != CONTROL_COMMIT:
            return E_INVALID_RECORD
        return E_NONE  # markers carry no sequence
    if base_seq == -1:
        # No sequence: fine without a producer id, or where sequences are not checked.
        if last_seq != -1 or (producer_id >= 0 and origin == ORIGIN_CLIENT):
            return E_INVALID_RECORD
        return E_NONE
    if base_seq < 0 or base_seq > SEQ_MAX or last_seq != seq_add(base_seq, record_count - 1):
        return E_INVALID_RECORD
    return E_NONE


cdef inline Py_ssize_t ring_pos(Py_ssize_t head, Py_ssize_t k) noexcept nogil:
    # Position k after head in the five-slot ring (both below RING): a compare, not a division.
    cdef Py_ssize_t pos = head + k
    return pos - RING if pos >= RING else pos


cdef inline Py_ssize_t find_duplicate(const StateView *s, Py_ssize_t row, int64_t first_seq,
                                      int64_t last_seq) noexcept nogil:
    # Ring position of a retained batch with exactly this sequence range, or -1.
    cdef const int32_t *seqs = s.ring_last_seq + row * RING
    cdef const int32_t *deltas = s.ring_offset_delta + row * RING
    cdef Py_ssize_t head = s.ring_head[row]
    cdef Py_ssize_t length = s.ring_len[row]
    cdef Py_ssize_t k, pos
    if length == RING and ((seqs[0] == last_seq) | (seqs[1] == last_seq) | (seqs[2] == last_seq)
                           | (seqs[3] == last_seq) | (seqs[4] == last_seq)) == 0:
        return -1  # full (the usual case) and without this last sequence: no ordered scan
    for k in range(length):
        pos = ring_pos(head, k)
        if seqs[pos] == last_seq and seq_sub(last_seq, deltas[pos]) == first_seq:
            return pos
    return -1


cdef inline int64_t newest_last_seq(const StateView *s, Py_ssize_t row) noexcept nogil:
    # Last sequence of the newest retained batch, -1 when none is retained.
    cdef Py_ssize_t length = s.ring_len[row]
    if length == 0:
        return -1
    return s.ring_last_seq[row * RING + ring_pos(s.ring_head[row], length - 1)]


cdef inline Step check_marker(int64_t epoch, int64_t coordinator_epoch, int64_t stored_epoch,
                              int64_t stored_coordinator_epoch) noexcept nogil:
    # A COMMIT/ABORT marker: an old producer or coordinator epoch is fenced.
    if epoch < stored_epoch:
        return Step(E_INVALID_PRODUCER_EPOCH, F_FENCED, stored_epoch)
    if coordinator_epoch < stored_coordinator_epoch:
        return Step(E_TRANSACTION_COORDINATOR_FENCED, F_FENCED, stored_coordinator_epoch)
    return passed()


cdef inline Step check_epoch(int64_t epoch, int64_t stored_epoch, bint transactional, int origin) noexcept nogil:
    # Kafka's checkProducerEpoch for data: an older epoch is refused, except when replicating.
    if epoch < stored_epoch and origin != ORIGIN_REPLICATION:
        # A transactional zombie is fenced by its successor; an idempotent one just regresses.
        return Step(E_INVALID_PRODUCER_EPOCH, F_FENCED if transactional else F_EPOCH_REGRESSION, stored_epoch)
    return passed()


cdef inline int sequence_error(int64_t stored_epoch, int64_t stored_last_seq, int64_t epoch,
                               int64_t first_seq) noexcept nogil:
    # Kafka's checkSequence for CLIENT appends: NONE or OUT_OF_ORDER_SEQUENCE_NUMBER.
    if epoch != stored_epoch:
        # A new epoch must restart at 0, unless the producer is unknown here.
        if first_seq != 0 and stored_epoch != -1:
            return E_OUT_OF_ORDER_SEQUENCE_NUMBER
        return E_NONE
    if stored_epoch == -1 or in_sequence(stored_last_seq, first_seq):
        return E_NONE
    return E_OUT_OF_ORDER_SEQUENCE_NUMBER


cdef inline Step sequence_finding(int64_t stored_epoch, int64_t stored_last_seq, int64_t epoch, int64_t first_seq,
                                  int64_t last_seq) noexcept nogil:
    # Why an OUT_OF_ORDER_SEQUENCE_NUMBER: sequences missing before first_seq are a gap; a range wholly at or
    # before the last written sequence was already written (a duplicate older than the window); else out of order.
    cdef int64_t expected
    if epoch != stored_epoch or stored_last_seq == -1:
        return Step(E_OUT_OF_ORDER_SEQUENCE_NUMBER, F_SEQUENCE_GAP, 0)  # a new epoch must start at 0
    expected = seq_add(stored_last_seq, 1)
    if seq_sub(first_seq, expected) < SEQ_HALF:
        return Step(E_OUT_OF_ORDER_SEQUENCE_NUMBER, F_SEQUENCE_GAP, expected)
    if seq_sub(stored_last_seq, last_seq) < SEQ_HALF:
        return Step(E_OUT_OF_ORDER_SEQUENCE_NUMBER, F_DUPLICATE_BEYOND_WINDOW, expected)
    return Step(E_OUT_OF_ORDER_SEQUENCE_NUMBER, F_OUT_OF_ORDER, expected)


cdef inline Step check_sequence(int64_t stored_epoch, int64_t stored_last_seq, int64_t epoch, int64_t first_seq,
                                int64_t last_seq) noexcept nogil:
    # The sequence step.
    if sequence_error(stored_epoch, stored_last_seq, epoch, first_seq) == E_NONE:
        return passed()
    return sequence_finding(stored_epoch, stored_last_seq, epoch, first_seq, last_seq)


cdef inline Step check_txn_state(bint transactional, int64_t txn_first) noexcept nogil:
    # A non-transactional write while the producer's transaction is open on the partition.
    if txn_first >= 0 and not transactional:
        return Step(E_INVALID_TXN_STATE, F_INVALID_TXN_STATE, txn_first)
    return passed()


cdef inline Step check_offsets(int64_t first_offset, int64_t record_count) noexcept nogil:
    # The offsets step: refused when the last offset first + count - 1 would leave no int64 log end after it.
    # Compared as first > INT64_MAX - count (1 <= count <= INT32_MAX): no signed overflow.
    if first_offset > INT64_MAX - record_count:
        return Step(E_UNKNOWN_SERVER_ERROR, F_OFFSET_OVERFLOW, first_offset)
    return passed()


cdef inline int64_t log_end(const StateView *s, Py_ssize_t row, int64_t partition) noexcept nogil:
    # The partition's next offset (0 for a partition never appended to).
    cdef Py_ssize_t index
    if row >= 0:
        return s.partition_next_offset[s.row_partition_index[row]]
    index = s.pslot_index[partition_slot(s.pslot_partition, s.pslot_index, s.pslot_mask, partition)]
    if index < 0:
        return 0
    return s.partition_next_offset[index]


cdef inline void emit(Verdicts *out, Py_ssize_t i, int status, int error, int64_t base_offset, int64_t last_offset,
                      int finding, int64_t expected) noexcept nogil:
    # Write batch i's verdict.
    out.status[i] = <int8_t>status
    out.error_code[i] = <int16_t>error
    out.base_offset[i] = base_offset
    out.last_offset[i] = last_offset
    out.finding[i] = <int8_t>finding
    out.expected[i] = expected


cdef inline Py_ssize_t check_batch(Py_ssize_t i, const Batches *b, int origin, const StateView *s, Verdicts *out,
                                   Completed *done) noexcept nogil:
    # Prepare batch i against the state as it stands (Kafka's ProducerAppendInfo): write its verdict and, for a
    # marker that ends a transaction, the completed transaction. Returns the producer's index slot (-1 without a
    # producer id) for commit_batch.
    cdef int64_t part = b.partition[i]
    cdef int64_t pid = b.producer_id[i]
    cdef int64_t epoch = b.producer_epoch[i]
    cdef int64_t first_seq = b.base_sequence[i]
    cdef int64_t last_seq = b.last_sequence[i]
    cdef int64_t given_offset = b.base_offset[i]
    cdef int64_t count = b.record_count[i]
    cdef bint transactional = b.is_transactional[i] != 0
    cdef bint control = b.is_control[i] != 0
    cdef int64_t marker_type = b.control_type[i]
    cdef Py_ssize_t slot = -1
    cdef Py_ssize_t row = -1
    cdef Py_ssize_t pos, k
    cdef int64_t stored_epoch = -1
    cdef int64_t stored_coordinator_epoch = -1
    cdef int64_t txn_first = -1
    cdef int64_t first_offset, original_last
    cdef Step step

    cdef int error = metadata_error(part, pid, epoch, first_seq, last_seq, given_offset, count,
                                    transactional, control, marker_type, origin)
    if error != E_NONE:
        emit(out, i, REJECTED, error, -1, -1, F_INVALID_RECORD, -1)
        return -1

    if pid >= 0:
        slot = producer_slot(s.slot_producer_id, s.slot_partition, s.slot_row, s.slot_mask, pid, part)
        row = s.slot_row[slot]
    if row >= 0:
        stored_epoch = s.row_epoch[row]
        stored_coordinator_epoch = s.row_coordinator_epoch[row]
        txn_first = s.row_txn_first_offset[row]

    step = passed()
    if control:
        step = check_marker(epoch, b.coordinator_epoch[i], stored_epoch, stored_coordinator_epoch)
    elif pid >= 0:
        if origin == ORIGIN_CLIENT and row >= 0 and epoch == stored_epoch:
            pos = find_duplicate(s, row, first_seq, last_seq)
            if pos >= 0:  # a retry: answer with the original offsets, write nothing
                original_last = s.ring_last_offset[row * RING + pos]
                emit(out, i, DUPLICATE, E_NONE, original_last - s.ring_offset_delta[row * RING + pos],
                     original_last, F_DUPLICATE, -1)
                return slot
        step = check_epoch(epoch, stored_epoch, transactional, origin)
        if step.error == E_NONE and origin == ORIGIN_CLIENT:
            step = check_sequence(stored_epoch, newest_last_seq(s, row) if row >= 0 else -1, epoch,
                                  first_seq, last_seq)
        if step.error == E_NONE:
            step = check_txn_state(transactional, txn_first)
    if step.error != E_NONE:
        emit(out, i, REJECTED, step.error, -1, -1, step.finding, step.expected)
        return slot

    # Offsets from the log end, unless the log gave them (replication, recovery); refused past the int64 space.
    first_offset = given_offset if given_offset >= 0 else log_end(s, row, part)
    step = check_offsets(first_offset, count)
    if step.error != E_NONE:
        emit(out, i, REJECTED, step.error, -1, -1, step.finding, step.expected)
        return slot
    emit(out, i, APPENDED, E_NONE, first_offset, first_offset + count - 1, F_NONE, -1)
    if control and txn_first >= 0:
        k = done.counters[N_COMPLETED]
        done.counters[N_COMPLETED] = k + 1
        if k < done.capacity:
            done.partition[k] = <int32_t>part
            done.producer_id[k] = pid
            done.first_offset[k] = txn_first
            done.last_offset[k] = first_offset
            done.aborted[k] = marker_type == CONTROL_ABORT
    return slot


cdef inline void ring_push(State *s, Py_ssize_t row, int64_t last_seq, int64_t last_offset, int64_t offset_delta,
                           int64_t timestamp) noexcept nogil:
    # Remember one batch; the oldest of five is dropped.
    cdef Py_ssize_t head = s.ring_head[row]
    cdef Py_ssize_t length = s.ring_len[row]
    cdef Py_ssize_t pos
    if length < RING:
        pos = ring_pos(head, length)
        s.ring_len[row] = <int8_t>(length + 1)
    else:
        pos = head
        s.ring_head[row] = <int8_t>ring_pos(head, 1)
    pos += row * RING
    s.ring_last_seq[pos] = <int32_t>last_seq
    s.ring_offset_delta[pos] = <int32_t>offset_delta
    s.ring_last_offset[pos] = last_offset
    s.ring_timestamp[pos] = timestamp


cdef inline void commit_batch(Py_ssize_t i, Py_ssize_t slot, const Batches *b, State *s,
                              const CommitSource *verdicts) noexcept nogil:
    # Commit appended batch i at its verdict's offsets (Kafka's ProducerStateManager.update): advance the
    # partition's log end, create or update the producer's entry. slot: the producer's index slot as check_batch
    # returned it, with no row inserted since. The caller has made room for one row and one partition.
    cdef int64_t part = b.partition[i]
    cdef int64_t pid = b.producer_id[i]
    cdef int64_t first_offset = verdicts.base_offset[i]
    cdef int64_t last_offset = verdicts.last_offset[i]
    cdef int64_t epoch, timestamp
    cdef Py_ssize_t row = -1
    cdef Py_ssize_t pslot, part_index
    if pid >= 0:
        row = s.slot_row[slot]
    if row >= 0:
        part_index = s.row_partition_index[row]
    else:
        pslot = partition_slot(s.pslot_partition, s.pslot_index, s.pslot_mask, part)
        part_index = s.pslot_index[pslot]
        if part_index < 0:
            part_index = s.counters[N_PARTITIONS]
            s.counters[N_PARTITIONS] = part_index + 1
            s.pslot_partition[pslot] = <int32_t>part
            s.pslot_index[pslot] = <int32_t>part_index
            s.partition_id[part_index] = <int32_t>part
            s.partition_next_offset[part_index] = 0
    if last_offset + 1 > s.partition_next_offset[part_index]:  # last_offset < INT64_MAX: check_offsets
        s.partition_next_offset[part_index] = last_offset + 1
    if pid < 0:
        return  # no producer id: nothing to remember

    epoch = b.producer_epoch[i]
    timestamp = b.max_timestamp[i]
    if row < 0:
        row = s.counters[N_ROWS]
        s.counters[N_ROWS] = row + 1
        s.slot_producer_id[slot] = pid
        s.slot_partition[slot] = <int32_t>part
        s.slot_row[slot] = <int32_t>row
        s.row_partition[row] = <int32_t>part
        s.row_producer_id[row] = pid
        s.row_partition_index[row] = <int32_t>part_index
        s.row_epoch[row] = -1
        s.row_coordinator_epoch[row] = -1
        s.row_last_timestamp[row] = -1
        s.row_txn_first_offset[row] = -1
        s.ring_head[row] = 0
        s.ring_len[row] = 0
    if epoch != s.row_epoch[row]:
        s.ring_head[row] = 0
        s.ring_len[row] = 0  # any change of epoch forgets the retained batches
    s.row_epoch[row] = <int16_t>epoch
    s.row_last_timestamp[row] = timestamp
    if b.is_control[i]:
        s.row_coordinator_epoch[row] = b.coordinator_epoch[i]
        s.row_txn_first_offset[row] = -1  # the marker ends the open transaction
    else:
        ring_push(s, row, b.last_sequence[i], last_offset, b.record_count[i] - 1, timestamp)
        if b.is_transactional[i] and s.row_txn_first_offset[row] < 0:
            s.row_txn_first_offset[row] = first_offset  # the first transactional batch opens the transaction


# ---------------------------------------------------------------- filling the structs (once per call)


cdef int require(bint ok, str what) except -1:
    if not ok:
        raise ValueError(f"kernel arrays of inconsistent shapes: {what}")
    return 0


cdef Batches batch_columns(
    const int32_t[::1] partition, const int64_t[::1] producer_id, const int16_t[::1] producer_epoch,
    const int32_t[::1] base_sequence, const int32_t[::1] last_sequence, const int64_t[::1] base_offset,
    const int32_t[::1] record_count, const int64_t[::1] max_timestamp, const uint8_t[::1] is_transactional,
    const uint8_t[::1] is_control, const int8_t[::1] control_type, const int32_t[::1] coordinator_epoch,
    Py_ssize_t start, Py_ssize_t stop,
) except *:
    cdef Batches b
    if start < stop:
        require(start >= 0 and min(partition.shape[0], producer_id.shape[0], producer_epoch.shape[0],
                                   base_sequence.shape[0], last_sequence.shape[0], base_offset.shape[0],
                                   record_count.shape[0], max_timestamp.shape[0], is_transactional.shape[0],
                                   is_control.shape[0], control_type.shape[0], coordinator_epoch.shape[0]) >= stop,
                "start..stop beyond the batch columns")
    b.partition = &partition[0]
    b.producer_id = &producer_id[0]
    b.producer_epoch = &producer_epoch[0]
    b.base_sequence = &base_sequence[0]
    b.last_sequence = &last_sequence[0]
    b.base_offset = &base_offset[0]
    b.record_count = &record_count[0]
    b.max_timestamp = &max_timestamp[0]
    b.is_transactional = &is_transactional[0]
    b.is_control = &is_control[0]
    b.control_type = &control_type[0]
    b.coordinator_epoch = &coordinator_epoch[0]
    return b


cdef int check_state_shapes(
    const int64_t[::1] slot_producer_id, const int32_t[::1] slot_partition, const int32_t[::1] slot_row,
    const int32_t[::1] row_partition, const int64_t[::1] row_producer_id, const int32_t[::1] row_partition_index,
    const int16_t[::1] row_epoch, const int32_t[::1] row_coordinator_epoch, const int64_t[::1] row_last_timestamp,
    const int64_t[::1] row_txn_first_offset,
    const int32_t[:, ::1] ring_last_seq, const int32_t[:, ::1] ring_offset_delta,
    const int64_t[:, ::1] ring_last_offset, const int64_t[:, ::1] ring_timestamp,
    const int8_t[::1] ring_head, const int8_t[::1] ring_len,
    const int32_t[::1] pslot_partition, const int32_t[::1] pslot_index, const int32_t[::1] partition_id,
    const int64_t[::1] partition_next_offset, const int64_t[::1] counters,
) except -1:
    cdef Py_ssize_t rows = row_epoch.shape[0]
    cdef Py_ssize_t slots = slot_row.shape[0]
    cdef Py_ssize_t pslots = pslot_index.shape[0]
    require(min(row_partition.shape[0], row_producer_id.shape[0], row_partition_index.shape[0],
                row_coordinator_epoch.shape[0], row_last_timestamp.shape[0], row_txn_first_offset.shape[0],
                ring_last_seq.shape[0], ring_offset_delta.shape[0], ring_last_offset.shape[0],
                ring_timestamp.shape[0], ring_head.shape[0], ring_len.shape[0]) >= rows, "row arrays")
    require(ring_last_seq.shape[1] == RING and ring_offset_delta.shape[1] == RING
            and ring_last_offset.shape[1] == RING and ring_timestamp.shape[1] == RING, "ring width")
    require(power_of_two(slots) and slot_producer_id.shape[0] == slots and slot_partition.shape[0] == slots
            and slots > rows, "producer index")
    require(power_of_two(pslots) and pslot_partition.shape[0] == pslots and pslots > partition_id.shape[0]
            and partition_next_offset.shape[0] >= partition_id.shape[0], "partition index")
    require(counters.shape[0] >= 3, "counters")
    return 0


cdef Lookup lookup_of(
    const int64_t[::1] slot_producer_id, const int32_t[::1] slot_partition, const int32_t[::1] slot_row,
    const int32_t[::1] row_partition_index, const int16_t[::1] row_epoch, const int32_t[::1] row_coordinator_epoch,
    const int64_t[::1] row_txn_first_offset,
    const int32_t[:, ::1] ring_last_seq, const int32_t[:, ::1] ring_offset_delta,
    const int64_t[:, ::1] ring_last_offset, const int8_t[::1] ring_head, const int8_t[::1] ring_len,
    const int32_t[::1] pslot_partition, const int32_t[::1] pslot_index, const int64_t[::1] partition_next_offset,
) noexcept:
    cdef Lookup s
    s.slot_producer_id = &slot_producer_id[0]
    s.slot_partition = &slot_partition[0]
    s.slot_row = &slot_row[0]
    s.slot_mask = slot_row.shape[0] - 1
    s.row_partition_index = &row_partition_index[0]
    s.row_epoch = &row_epoch[0]
    s.row_coordinator_epoch = &row_coordinator_epoch[0]
    s.row_txn_first_offset = &row_txn_first_offset[0]
    s.ring_last_seq = &ring_last_seq[0, 0]
    s.ring_offset_delta = &ring_offset_delta[0, 0]
    s.ring_last_offset = &ring_last_offset[0, 0]
    s.ring_head = &ring_head[0]
    s.ring_len = &ring_len[0]
    s.pslot_partition = &pslot_partition[0]
    s.pslot_index = &pslot_index[0]
    s.pslot_mask = pslot_index.shape[0] - 1
    s.partition_next_offset = &partition_next_offset[0]
    return s


cdef State state_of(
    int64_t[::1] slot_producer_id, int32_t[::1] slot_partition, int32_t[::1] slot_row,
    int32_t[::1] row_partition, int64_t[::1] row_producer_id, int32_t[::1] row_partition_index,
    int16_t[::1] row_epoch, int32_t[::1] row_coordinator_epoch, int64_t[::1] row_last_timestamp,
    int64_t[::1] row_txn_first_offset,
    int32_t[:, ::1] ring_last_seq, int32_t[:, ::1] ring_offset_delta, int64_t[:, ::1] ring_last_offset,
    int64_t[:, ::1] ring_timestamp, int8_t[::1] ring_head, int8_t[::1] ring_len,
    int32_t[::1] pslot_partition, int32_t[::1] pslot_index, int32_t[::1] partition_id,
    int64_t[::1] partition_next_offset, int64_t[::1] counters,
) except *:
    cdef State s
    check_state_shapes(slot_producer_id, slot_partition, slot_row, row_partition, row_producer_id,
                       row_partition_index, row_epoch, row_coordinator_epoch, row_last_timestamp, row_txn_first_offset,
                       ring_last_seq, ring_offset_delta, ring_last_offset, ring_timestamp, ring_head, ring_len,
                       pslot_partition, pslot_index, partition_id, partition_next_offset, counters)
    s.slot_producer_id = &slot_producer_id[0]
    s.slot_partition = &slot_partition[0]
    s.slot_row = &slot_row[0]
    s.slot_mask = slot_row.shape[0] - 1
    s.row_partition = &row_partition[0]
    s.row_producer_id = &row_producer_id[0]
    s.row_partition_index = &row_partition_index[0]
    s.row_epoch = &row_epoch[0]
    s.row_coordinator_epoch = &row_coordinator_epoch[0]
    s.row_last_timestamp = &row_last_timestamp[0]
    s.row_txn_first_offset = &row_txn_first_offset[0]
    s.ring_last_seq = &ring_last_seq[0, 0]
    s.ring_offset_delta = &ring_offset_delta[0, 0]
    s.ring_last_offset = &ring_last_offset[0, 0]
    s.ring_timestamp = &ring_timestamp[0, 0]
    s.ring_head = &ring_head[0]
    s.ring_len = &ring_len[0]
    s.pslot_partition = &pslot_partition[0]
    s.pslot_index = &pslot_index[0]
    s.pslot_mask = pslot_index.shape[0] - 1
    s.partition_id = &partition_id[0]
    s.partition_next_offset = &partition_next_offset[0]
    s.counters = &counters[0]
    s.row_capacity = row_epoch.shape[0]
    s.partition_capacity = partition_id.shape[0]
    return s


cdef Verdicts verdicts_of(int8_t[::1] out_status, int16_t[::1] out_error_code, int64_t[::1] out_base_offset,
                          int64_t[::1] out_last_offset, int8_t[::1] out_finding, int64_t[::1] out_expected,
                          Py_ssize_t start, Py_ssize_t stop) except *:
    cdef Verdicts out
    if start < stop:
        require(min(out_status.shape[0], out_error_code.shape[0], out_base_offset.shape[0],
                    out_last_offset.shape[0], out_finding.shape[0], out_expected.shape[0]) >= stop,
                "start..stop beyond the verdict columns")
    out.status = &out_status[0]
    out.error_code = &out_error_code[0]
    out.base_offset = &out_base_offset[0]
    out.last_offset = &out_last_offset[0]
    out.finding = &out_finding[0]
    out.expected = &out_expected[0]
    return out


cdef Completed completed_of(int64_t[::1] counters, int32_t[::1] txn_partition, int64_t[::1] txn_producer_id,
                            int64_t[::1] txn_first_offset, int64_t[::1] txn_last_offset,
                            uint8_t[::1] txn_aborted) noexcept:
    cdef Completed done
    done.counters = &counters[0]
    done.partition = &txn_partition[0]
    done.producer_id = &txn_producer_id[0]
    done.first_offset = &txn_first_offset[0]
    done.last_offset = &txn_last_offset[0]
    done.aborted = &txn_aborted[0]
    done.capacity = min(txn_partition.shape[0], txn_producer_id.shape[0], txn_first_offset.shape[0],
                        txn_last_offset.shape[0], txn_aborted.shape[0])
    return done


# ---------------------------------------------------------------- the entry points


def validate_batches(
    const int32_t[::1] partition, const int64_t[::1] producer_id, const int16_t[::1] producer_epoch,
    const int32_t[::1] base_sequence, const int32_t[::1] last_sequence, const int64_t[::1] base_offset,
    const int32_t[::1] record_count, const int64_t[::1] max_timestamp, const uint8_t[::1] is_transactional,
    const uint8_t[::1] is_control, const int8_t[::1] control_type, const int32_t[::1] coordinator_epoch,
    int origin, Py_ssize_t start, Py_ssize_t stop,
    int64_t[::1] slot_producer_id, int32_t[::1] slot_partition, int32_t[::1] slot_row,
    int32_t[::1] row_partition, int64_t[::1] row_producer_id, int32_t[::1] row_partition_index,
    int16_t[::1] row_epoch, int32_t[::1] row_coordinator_epoch, int64_t[::1] row_last_timestamp,
    int64_t[::1] row_txn_first_offset,
    int32_t[:, ::1] ring_last_seq, int32_t[:, ::1] ring_offset_delta, int64_t[:, ::1] ring_last_offset,
    int64_t[:, ::1] ring_timestamp, int8_t[::1] ring_head, int8_t[::1] ring_len,
    int32_t[::1] pslot_partition, int32_t[::1] pslot_index, int32_t[::1] partition_id,
    int64_t[::1] partition_next_offset,
    int64_t[::1] counters,
    int8_t[::1] out_status, int16_t[::1] out_error_code, int64_t[::1] out_base_offset, int64_t[::1] out_last_offset,
    int8_t[::1] out_finding, int64_t[::1] out_expected,
    int32_t[::1] txn_partition, int64_t[::1] txn_producer_id, int64_t[::1] txn_first_offset,
    int64_t[::1] txn_last_offset, uint8_t[::1] txn_aborted,
):
    """Check and commit batches ``start..stop-1`` one after the other; return the first index not processed
    (``stop`` unless the table has no room for one more row or partition). See the reference."""
    cdef Batches b = batch_columns(partition, producer_id, producer_epoch, base_sequence, last_sequence, base_offset,
                                   record_count, max_timestamp, is_transactional, is_control, control_type,
                                   coordinator_epoch, start, stop)
    cdef State st = state_of(slot_producer_id, slot_partition, slot_row, row_partition, row_producer_id,
                             row_partition_index, row_epoch, row_coordinator_epoch, row_last_timestamp,
                             row_txn_first_offset, ring_last_seq, ring_offset_delta, ring_last_offset, ring_timestamp,
                             ring_head, ring_len, pslot_partition, pslot_index, partition_id, partition_next_offset,
                             counters)
    cdef Verdicts out = verdicts_of(out_status, out_error_code, out_base_offset, out_last_offset, out_finding,
                                    out_expected, start, stop)
    cdef Completed done = completed_of(counters, txn_partition, txn_producer_id, txn_first_offset, txn_last_offset,
                                       txn_aborted)
    cdef Py_ssize_t i, slot
    cdef Py_ssize_t stopped = stop
    with nogil:
        for i in range(start, stop):
            if st.counters[N_ROWS] >= st.row_capacity or st.counters[N_PARTITIONS] >= st.partition_capacity:
                stopped = i
                break
            slot = check_batch(i, &b, origin, &st, &out, &done)
            if out.status[i] == APPENDED:
                commit_batch(i, slot, &b, &st, &out)  # the slot check_batch found: no second probe
    return stopped


def check_batches(
    const int32_t[::1] partition, const int64_t[::1] producer_id, const int16_t[::1] producer_epoch,
    const int32_t[::1] base_sequence, const int32_t[::1] last_sequence, const int64_t[::1] base_offset,
    const int32_t[::1] record_count, const int64_t[::1] max_timestamp, const uint8_t[::1] is_transactional,
    const uint8_t[::1] is_control, const int8_t[::1] control_type, const int32_t[::1] coordinator_epoch,
    int origin, Py_ssize_t start, Py_ssize_t stop,
    const int64_t[::1] slot_producer_id, const int32_t[::1] slot_partition, const int32_t[::1] slot_row,
    const int32_t[::1] row_partition, const int64_t[::1] row_producer_id, const int32_t[::1] row_partition_index,
    const int16_t[::1] row_epoch, const int32_t[::1] row_coordinator_epoch, const int64_t[::1] row_last_timestamp,
    const int64_t[::1] row_txn_first_offset,
    const int32_t[:, ::1] ring_last_seq, const int32_t[:, ::1] ring_offset_delta,
    const int64_t[:, ::1] ring_last_offset, const int64_t[:, ::1] ring_timestamp,
    const int8_t[::1] ring_head, const int8_t[::1] ring_len,
    const int32_t[::1] pslot_partition, const int32_t[::1] pslot_index, const int32_t[::1] partition_id,
    const int64_t[::1] partition_next_offset,
    int64_t[::1] counters,
    int8_t[::1] out_status, int16_t[::1] out_error_code, int64_t[::1] out_base_offset, int64_t[::1] out_last_offset,
    int8_t[::1] out_finding, int64_t[::1] out_expected,
    int32_t[::1] txn_partition, int64_t[::1] txn_producer_id, int64_t[::1] txn_first_offset,
    int64_t[::1] txn_last_offset, uint8_t[::1] txn_aborted,
):
    """Prepare: the verdicts of batches ``start..stop-1`` against the state as it stands, writing no state but
    ``counters[N_COMPLETED]`` and the ``txn_*`` columns (every batch sees the same state, so no two may belong
    to one (partition, producer id)). Returns ``stop``. See the reference."""
    cdef Batches b = batch_columns(partition, producer_id, producer_epoch, base_sequence, last_sequence, base_offset,
                                   record_count, max_timestamp, is_transactional, is_control, control_type,
                                   coordinator_epoch, start, stop)
    check_state_shapes(slot_producer_id, slot_partition, slot_row, row_partition, row_producer_id,
                       row_partition_index, row_epoch, row_coordinator_epoch, row_last_timestamp, row_txn_first_offset,
                       ring_last_seq, ring_offset_delta, ring_last_offset, ring_timestamp, ring_head, ring_len,
                       pslot_partition, pslot_index, partition_id, partition_next_offset, counters)
    cdef Lookup look = lookup_of(slot_producer_id, slot_partition, slot_row, row_partition_index, row_epoch,
                                 row_coordinator_epoch, row_txn_first_offset, ring_last_seq, ring_offset_delta,
                                 ring_last_offset, ring_head, ring_len, pslot_partition, pslot_index,
                                 partition_next_offset)
    cdef Verdicts out = verdicts_of(out_status, out_error_code, out_base_offset, out_last_offset, out_finding,
                                    out_expected, start, stop)
    cdef Completed done = completed_of(counters, txn_partition, txn_producer_id, txn_first_offset, txn_last_offset,
                                       txn_aborted)
    cdef Py_ssize_t i
    with nogil:
        for i in range(start, stop):
            check_batch(i, &b, origin, &look, &out, &done)
    return stop


def commit_batches(
    const int32_t[::1] partition, const int64_t[::1] producer_id, const int16_t[::1] producer_epoch,
    const int32_t[::1] base_sequence, const int32_t[::1] last_sequence, const int64_t[::1] base_offset,
    const int32_t[::1] record_count, const int64_t[::1] max_timestamp, const uint8_t[::1] is_transactional,
    const uint8_t[::1] is_control, const int8_t[::1] control_type, const int32_t[::1] coordinator_epoch,
    Py_ssize_t start, Py_ssize_t stop,
    int64_t[::1] slot_producer_id, int32_t[::1] slot_partition, int32_t[::1] slot_row,
    int32_t[::1] row_partition, int64_t[::1] row_producer_id, int32_t[::1] row_partition_index,
    int16_t[::1] row_epoch, int32_t[::1] row_coordinator_epoch, int64_t[::1] row_last_timestamp,
    int64_t[::1] row_txn_first_offset,
    int32_t[:, ::1] ring_last_seq, int32_t[:, ::1] ring_offset_delta, int64_t[:, ::1] ring_last_offset,
    int64_t[:, ::1] ring_timestamp, int8_t[::1] ring_head, int8_t[::1] ring_len,
    int32_t[::1] pslot_partition, int32_t[::1] pslot_index, int32_t[::1] partition_id,
    int64_t[::1] partition_next_offset,
    int64_t[::1] counters,
    const int8_t[::1] out_status, const int64_t[::1] out_base_offset, const int64_t[::1] out_last_offset,
):
    """Commit the batches of ``start..stop-1`` whose ``out_status`` is APPENDED; return the first index not
    processed (``stop`` unless the table ran out of room: grow it and call again from there). See the reference."""
    cdef Batches b = batch_columns(partition, producer_id, producer_epoch, base_sequence, last_sequence, base_offset,
                                   record_count, max_timestamp, is_transactional, is_control, control_type,
                                   coordinator_epoch, start, stop)
    cdef State st = state_of(slot_producer_id, slot_partition, slot_row, row_partition, row_producer_id,
                             row_partition_index, row_epoch, row_coordinator_epoch, row_last_timestamp,
                             row_txn_first_offset, ring_last_seq, ring_offset_delta, ring_last_offset, ring_timestamp,
                             ring_head, ring_len, pslot_partition, pslot_index, partition_id, partition_next_offset,
                             counters)
    cdef CommitVerdicts verdicts
    if start < stop:
        require(min(out_status.shape[0], out_base_offset.shape[0], out_last_offset.shape[0]) >= stop,
                "start..stop beyond the verdict columns")
    verdicts.status = &out_status[0]
    verdicts.base_offset = &out_base_offset[0]
    verdicts.last_offset = &out_last_offset[0]
    cdef Py_ssize_t i, slot
    cdef Py_ssize_t stopped = stop
    with nogil:
        for i in range(start, stop):
            if verdicts.status[i] != APPENDED:
                continue
            if st.counters[N_ROWS] >= st.row_capacity or st.counters[N_PARTITIONS] >= st.partition_capacity:
                stopped = i
                break
            slot = -1
            if b.producer_id[i] >= 0:
                slot = producer_slot(st.slot_producer_id, st.slot_partition, st.slot_row, st.slot_mask,
                                     b.producer_id[i], b.partition[i])
            commit_batch(i, slot, &b, &st, &verdicts)
    return stopped
