# cython: language_level=3, boundscheck=False, wraparound=False, initializedcheck=False, cdivision=True
"""SPEC §2 compiled with Cython: an independent implementation of the kernel
contract in idemcore.kernels (same arguments, same results, same state
arrays as the reference). Built by setup.py into idemcore.kernels.cython_kernels.
"""

from libc.stdint cimport int8_t, int16_t, int32_t, int64_t

cdef enum:
    APPENDED = 0
    DUPLICATE = 1
    REJECTED = 2
    ORIGIN_CLIENT = 0
    ORIGIN_REPLICATION = 2
    E_NONE = 0
    E_OUT_OF_ORDER_SEQUENCE_NUMBER = 45
    E_INVALID_PRODUCER_EPOCH = 47
    E_INVALID_TXN_STATE = 48
    E_TRANSACTION_COORDINATOR_FENCED = 52
    E_INVALID_RECORD = 87
    CONTROL_ABORT = 0
    CONTROL_COMMIT = 1
    RING = 5
    N_ROWS = 0
    N_PARTITIONS = 1
    N_COMPLETED = 2
    F_NONE = 0
    F_DUPLICATE = 1
    F_DUPLICATE_BEYOND_WINDOW = 2
    F_SEQUENCE_GAP = 3
    F_OUT_OF_ORDER = 4
    F_EPOCH_REGRESSION = 5
    F_FENCED = 6
    F_INVALID_TXN_STATE = 7
    F_INVALID_RECORD = 8

cdef int64_t SEQ_MAX = 2147483647
cdef int64_t SEQ_SPACE = 2147483648
cdef int64_t SEQ_HALF = 1073741824


cdef inline int64_t wrap_seq(int64_t s) noexcept nogil:
    # Bring a sum or difference of two sequences back into [0, SEQ_MAX].
    if s > SEQ_MAX:
        return s - SEQ_SPACE
    if s < 0:
        return s + SEQ_SPACE
    return s


cdef inline Py_ssize_t ring_pos(Py_ssize_t head, Py_ssize_t k) noexcept nogil:
    # Position k after head in the five-slot ring (head, k < RING): a compare, not a division.
    cdef Py_ssize_t pos = head + k
    return pos - RING if pos >= RING else pos


cdef inline int64_t hash_producer(int64_t pid, int64_t part) noexcept nogil:
    # Same function as the reference: 31-bit keys and multipliers never overflow.
    cdef int64_t folded = (pid ^ (pid >> 32)) & 0x7FFFFFFF
    cdef int64_t h = folded * 0x5BD1E995 + (part & 0x7FFFFFFF) * 0x27D4EB2F
    return h ^ (h >> 29)


cdef inline int64_t hash_partition(int64_t part) noexcept nogil:
    cdef int64_t h = (part & 0x7FFFFFFF) * 0x5BD1E995
    return h ^ (h >> 29)


cdef inline Py_ssize_t find_producer_slot(const int64_t[::1] slot_pid, const int32_t[::1] slot_part,
                                          const int32_t[::1] slot_row, int64_t pid, int64_t part) noexcept nogil:
    cdef Py_ssize_t mask = slot_row.shape[0] - 1
    cdef Py_ssize_t s = <Py_ssize_t>(hash_producer(pid, part) & mask)
    while slot_row[s] >= 0 and not (slot_pid[s] == pid and slot_part[s] == part):
        s = (s + 1) & mask
    return s


cdef inline Py_ssize_t find_partition_slot(const int32_t[::1] pslot_part, const int32_t[::1] pslot_index,
                                           int64_t part) noexcept nogil:
    cdef Py_ssize_t mask = pslot_index.shape[0] - 1
    cdef Py_ssize_t s = <Py_ssize_t>(hash_partition(part) & mask)
    while pslot_index[s] >= 0 and pslot_part[s] != part:
        s = (s + 1) & mask
    return s


def rebuild_producer_index(int64_t[::1] slot_pid, int32_t[::1] slot_part, int32_t[::1] slot_row,
                           const int64_t[::1] row_pid, const int32_t[::1] row_part, Py_ssize_t n_rows):
    cdef Py_ssize_t s, row
    with nogil:
        for s in range(slot_row.shape[0]):
            slot_row[s] = -1
        for row in range(n_rows):
            s = find_producer_slot(slot_pid, slot_part, slot_row, row_pid[row], row_part[row])
            slot_pid[s] = row_pid[row]
            slot_part[s] = row_part[row]
            slot_row[s] = <int32_t>row


def rebuild_partition_index(int32_t[::1] pslot_part, int32_t[::1] pslot_index,
                            const int32_t[::1] partition_id, Py_ssize_t n_partitions):
    cdef Py_ssize_t s, index
    with nogil:
        for s in range(pslot_index.shape[0]):
            pslot_index[s] = -1
        for index in range(n_partitions):
            s = find_partition_slot(pslot_part, pslot_index, partition_id[index])
            pslot_part[s] = partition_id[index]
            pslot_index[s] = <int32_t>index


cdef inline int metadata_error(int64_t part, int64_t pid, int64_t epoch, int64_t first_seq, int64_t last_seq,
                               int64_t given_offset, int64_t count, bint transactional, bint control,
                               int64_t control_type, int origin) noexcept nogil:
    if count < 1 or part < 0 or pid < -1 or epoch < -1 or given_offset < -1:
        return E_INVALID_RECORD
    if pid == -1 and (transactional or control):
        return E_INVALID_RECORD
    if control:
        return E_NONE if control_type == CONTROL_ABORT or control_type == CONTROL_COMMIT else E_INVALID_RECORD
    if first_seq == -1:
        if last_seq != -1 or (pid >= 0 and origin == ORIGIN_CLIENT):
            return E_INVALID_RECORD
        return E_NONE
    if first_seq < 0 or first_seq > SEQ_MAX or last_seq != wrap_seq(first_seq + count - 1):
        return E_INVALID_RECORD
    return E_NONE


cdef inline int classify_sequence(int64_t stored_epoch, int64_t stored_last, int64_t epoch, int64_t first_seq,
                                   int64_t last_seq, int64_t *expected) noexcept nogil:
    # Why a sequence was refused: gap (missing before it), already written (behind), or straddling.
    if epoch != stored_epoch or stored_last == -1:
        expected[0] = 0
        return F_SEQUENCE_GAP
    expected[0] = wrap_seq(stored_last + 1)
    if wrap_seq(first_seq - expected[0]) < SEQ_HALF:
        return F_SEQUENCE_GAP
    if wrap_seq(stored_last - last_seq) < SEQ_HALF:
        return F_DUPLICATE_BEYOND_WINDOW
    return F_OUT_OF_ORDER


def validate_batches(
    const int32_t[::1] partition, const int64_t[::1] producer_id, const int16_t[::1] producer_epoch,
    const int32_t[::1] base_sequence, const int32_t[::1] last_sequence, const int64_t[::1] base_offset,
    const int32_t[::1] record_count, const int64_t[::1] max_timestamp, const unsigned char[::1] is_transactional,
    const unsigned char[::1] is_control, const int8_t[::1] control_type, const int32_t[::1] coordinator_epoch,
    int origin, Py_ssize_t start,
    int64_t[::1] slot_pid, int32_t[::1] slot_part, int32_t[::1] slot_row,
    int32_t[::1] row_partition, int64_t[::1] row_producer_id, int32_t[::1] row_partition_index,
    int16_t[::1] row_epoch, int32_t[::1] row_coordinator_epoch, int64_t[::1] row_last_timestamp,
    int64_t[::1] row_txn_first_offset,
    int32_t[:, ::1] ring_last_seq, int32_t[:, ::1] ring_offset_delta, int64_t[:, ::1] ring_last_offset,
    int64_t[:, ::1] ring_timestamp, int8_t[::1] ring_head, int8_t[::1] ring_len,
    int32_t[::1] pslot_part, int32_t[::1] pslot_index, int32_t[::1] partition_id,
    int64_t[::1] partition_next_offset,
    int64_t[::1] counters,
    int8_t[::1] out_status, int16_t[::1] out_error_code, int64_t[::1] out_base_offset, int64_t[::1] out_last_offset,
    int8_t[::1] out_finding, int64_t[::1] out_expected,
    int32_t[::1] txn_partition, int64_t[::1] txn_producer_id, int64_t[::1] txn_first_offset,
    int64_t[::1] txn_last_offset, unsigned char[::1] txn_aborted,
):
    """Apply SPEC §2 to batches start..n-1; return the first index not processed (see reference)."""
    cdef Py_ssize_t n = partition.shape[0]
    cdef Py_ssize_t row_capacity = row_epoch.shape[0]
    cdef Py_ssize_t partition_capacity = partition_id.shape[0]
    cdef Py_ssize_t i, slot, pslot, row, k, pos, rpos, head, length
    cdef int64_t part, pid, epoch, first_seq, last_seq, given_offset, count, timestamp
    cdef int64_t stored_epoch, stored_coord, txn_first, stored_last, log_end, first_offset, last_offset
    cdef int64_t part_index, expected
    cdef bint transactional, control
    cdef int error, finding
    cdef Py_ssize_t stopped = n
    with nogil:
        for i in range(start, n):
            if counters[N_ROWS] >= row_capacity or counters[N_PARTITIONS] >= partition_capacity:
                stopped = i
                break
            part = partition[i]
            pid = producer_id[i]
            epoch = producer_epoch[i]
            first_seq = base_sequence[i]
            last_seq = last_sequence[i]
            given_offset = base_offset[i]
            count = record_count[i]
            timestamp = max_timestamp[i]
            transactional = is_transactional[i] != 0
            control = is_control[i] != 0

            error = metadata_error(part, pid, epoch, first_seq, last_seq, given_offset, count,
                                   transactional, control, control_type[i], origin)
            if error != E_NONE:
                out_status[i] = REJECTED
                out_error_code[i] = error
                out_base_offset[i] = -1
                out_last_offset[i] = -1
                out_finding[i] = F_INVALID_RECORD
                out_expected[i] = -1
                continue

            row = -1
            slot = -1
            if pid >= 0:
                slot = find_producer_slot(slot_pid, slot_part, slot_row, pid, part)
                row = slot_row[slot]
            stored_epoch = -1
            stored_coord = -1
            txn_first = -1
            if row >= 0:
                stored_epoch = row_epoch[row]
                stored_coord = row_coordinator_epoch[row]
                txn_first = row_txn_first_offset[row]

            finding = F_NONE
            expected = -1
            if control:
                if epoch < stored_epoch:
                    error = E_INVALID_PRODUCER_EPOCH
                    finding = F_FENCED
                    expected = stored_epoch
                elif coordinator_epoch[i] < stored_coord:
                    error = E_TRANSACTION_COORDINATOR_FENCED
                    finding = F_FENCED
                    expected = stored_coord
            elif pid >= 0:
                if origin == ORIGIN_CLIENT and row >= 0 and epoch == stored_epoch:
                    # Duplicate: same epoch and exactly the range of a retained batch.
                    head = ring_head[row]
                    pos = -1
                    length = ring_len[row]
                    if length == RING and ((ring_last_seq[row, 0] == last_seq) | (ring_last_seq[row, 1] == last_seq)
                                           | (ring_last_seq[row, 2] == last_seq) | (ring_last_seq[row, 3] == last_seq)
                                           | (ring_last_seq[row, 4] == last_seq)) == 0:
                        length = 0  # a full ring without this last sequence: no duplicate, skip the ordered scan
                    for k in range(length):
                        rpos = ring_pos(head, k)
                        if ring_last_seq[row, rpos] == last_seq and \
                                wrap_seq(last_seq - ring_offset_delta[row, rpos]) == first_seq:
                            pos = rpos
                            break
                    if pos >= 0:
                        out_status[i] = DUPLICATE
                        out_error_code[i] = E_NONE
                        out_last_offset[i] = ring_last_offset[row, pos]
                        out_base_offset[i] = ring_last_offset[row, pos] - ring_offset_delta[row, pos]
                        out_finding[i] = F_DUPLICATE
                        out_expected[i] = -1
                        continue
                if epoch < stored_epoch and origin != ORIGIN_REPLICATION:
                    error = E_INVALID_PRODUCER_EPOCH
                    finding = F_FENCED if transactional else F_EPOCH_REGRESSION
                    expected = stored_epoch
                elif origin == ORIGIN_CLIENT:
                    stored_last = -1
                    if row >= 0 and ring_len[row] > 0:
                        stored_last = ring_last_seq[row, ring_pos(ring_head[row], ring_len[row] - 1)]
                    if epoch != stored_epoch:
                        if first_seq != 0 and stored_epoch != -1:
                            error = E_OUT_OF_ORDER_SEQUENCE_NUMBER
                    elif stored_epoch != -1:
                        if not (first_seq == stored_last + 1 or (first_seq == 0 and stored_last == SEQ_MAX)):
                            error = E_OUT_OF_ORDER_SEQUENCE_NUMBER
                    if error != E_NONE:
                        finding = classify_sequence(stored_epoch, stored_last, epoch, first_seq, last_seq, &expected)
                if error == E_NONE and txn_first >= 0 and not transactional:
                    error = E_INVALID_TXN_STATE
                    finding = F_INVALID_TXN_STATE
                    expected = txn_first
            if error != E_NONE:
                out_status[i] = REJECTED
                out_error_code[i] = error
                out_base_offset[i] = -1
                out_last_offset[i] = -1
                out_finding[i] = finding
                out_expected[i] = expected
                continue

            if row >= 0:
                part_index = row_partition_index[row]
            else:
                pslot = find_partition_slot(pslot_part, pslot_index, part)
                part_index = pslot_index[pslot]
                if part_index < 0:
                    part_index = counters[N_PARTITIONS]
                    counters[N_PARTITIONS] = part_index + 1
                    pslot_part[pslot] = <int32_t>part
                    pslot_index[pslot] = <int32_t>part_index
                    partition_id[part_index] = <int32_t>part
                    partition_next_offset[part_index] = 0
            log_end = partition_next_offset[part_index]
            first_offset = given_offset if given_offset >= 0 else log_end
            last_offset = first_offset + count - 1
            if last_offset + 1 > log_end:
                partition_next_offset[part_index] = last_offset + 1
            out_status[i] = APPENDED
            out_error_code[i] = E_NONE
            out_base_offset[i] = first_offset
            out_last_offset[i] = last_offset
            out_finding[i] = F_NONE
            out_expected[i] = -1
            if pid < 0:
                continue

            if row < 0:
                row = counters[N_ROWS]
                counters[N_ROWS] = row + 1
                slot_pid[slot] = pid
                slot_part[slot] = <int32_t>part
                slot_row[slot] = <int32_t>row
                row_partition[row] = <int32_t>part
                row_producer_id[row] = pid
                row_partition_index[row] = <int32_t>part_index
                row_epoch[row] = -1
                row_coordinator_epoch[row] = -1
                row_last_timestamp[row] = -1
                row_txn_first_offset[row] = -1
                ring_head[row] = 0
                ring_len[row] = 0
            if epoch != stored_epoch:
                ring_head[row] = 0
                ring_len[row] = 0
            row_epoch[row] = <int16_t>epoch
            row_last_timestamp[row] = timestamp

            if control:
                if txn_first >= 0:
                    k = counters[N_COMPLETED]
                    counters[N_COMPLETED] = k + 1
                    txn_partition[k] = <int32_t>part
                    txn_producer_id[k] = pid
                    txn_first_offset[k] = txn_first
                    txn_last_offset[k] = first_offset
                    txn_aborted[k] = control_type[i] == CONTROL_ABORT
                row_coordinator_epoch[row] = coordinator_epoch[i]
                row_txn_first_offset[row] = -1
            else:
                head = ring_head[row]
                length = ring_len[row]
                if length < RING:
                    pos = ring_pos(head, length)
                    ring_len[row] = <int8_t>(length + 1)
                else:
                    pos = head
                    ring_head[row] = <int8_t>ring_pos(head, 1)
                ring_last_seq[row, pos] = <int32_t>last_seq
                ring_offset_delta[row, pos] = <int32_t>(count - 1)
                ring_last_offset[row, pos] = last_offset
                ring_timestamp[row, pos] = timestamp
                if transactional and txn_first < 0:
                    row_txn_first_offset[row] = first_offset
    return stopped
