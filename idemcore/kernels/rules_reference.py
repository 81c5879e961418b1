"""The reference kernel: the partition leader's producer-state rules (docs/rules.md) over plain arrays.

This module is the executable form of the rules a Kafka partition leader
applies to every appended batch (``ProducerAppendInfo`` / ``ProducerStateEntry``
in Kafka's storage module). It is written in the subset of Python that Numba
compiles, so ``numba_rules`` compiles *this very source*: there is one
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
# A batch whose offsets would pass the stream's offset space (see check_offsets). Kafka never gets there, so it has
# no code for it: UNKNOWN_SERVER_ERROR, as for the other exhausted int64 space (producer ids), because the batch is
# fine and the stream is full. It is not retriable, so a producer fails the batch instead of retrying forever.
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

# Prefetching in validate_listed, once the rows outgrow the caches (as in cython_rules.pyx): the rows of the
# batch PREFETCH_AHEAD places ahead, on a table of at least PREFETCH_MIN_ROWS rows.
PREFETCH_AHEAD = 16
PREFETCH_MIN_ROWS = 4096

# counters[] layout, shared with idemcore.engine.table.
N_ROWS = 0
N_STREAMS = 1
N_COMPLETED = 2

# ---------------------------------------------------------------- the state layout
#
# One 192-byte record per (stream, producer id) row, 64-byte aligned, read through four views of one buffer
# (row_i64, row_i32, row_i16, row_i8: the row's 24, 48, 96 and 192 words of each width). The first cache line is
# all an in-sequence batch reads (the ring's sequences and deltas inline); it writes one more line, that of its
# ring position's (last offset, timestamp) pair. Column numbers count words of the view's width (mirrored in
# cython_rules.pyx as a struct, checked by the tests):
#   bytes   0-63   epoch i16 @0 | head i8 @2 | len i8 @3 | stream index i32 @4 | txn first offset i64 @8 |
#                  last timestamp i64 @16 | ring last seq i32[5] @24 | ring offset delta i32[5] @44
#   bytes  64-143  ring (last offset i64, timestamp i64)[5]
#   bytes 144-191  coordinator epoch i32 @144 | stream i32 @148 | producer id i64 @152 |
#                  reserved by i64 @160 (reserve_rows: the batch that added the entry; no rule reads it) | unused
ROW_WORDS = 24
ROW_EPOCH = 0  # row_i16
ROW_HEAD = 2  # row_i8
ROW_LEN = 3  # row_i8
ROW_STREAM_INDEX = 1  # row_i32
ROW_TXN_FIRST_OFFSET = 1  # row_i64
ROW_LAST_TIMESTAMP = 2  # row_i64
ROW_RING_LAST_SEQ = 6  # row_i32, + position
ROW_RING_OFFSET_DELTA = 11  # row_i32, + position
ROW_RING_LAST_OFFSET = 8  # row_i64, + 2 * position
ROW_RING_TIMESTAMP = 9  # row_i64, + 2 * position
ROW_COORDINATOR_EPOCH = 36  # row_i32
ROW_STREAM = 37  # row_i32
ROW_PRODUCER_ID = 19  # row_i64
ROW_RESERVED_BY = 20  # row_i64
# The producer index: 16-byte slots (producer id i64 @0, stream i32 @8, row i32 @12; row -1: empty), read
# through two views (slot_i64: 2 words a slot, slot_i32: 4), so a probe compares the key in the slot's own line.
SLOT_WORDS = 2
SLOT_PRODUCER_ID = 0  # slot_i64
SLOT_STREAM = 2  # slot_i32
SLOT_ROW = 3  # slot_i32


# ---------------------------------------------------------------- hashing

# Multipliers below 2**31 and keys folded to 31 bits keep every product and
# sum below 2**63: no backend ever overflows, so all compute the same slots.


def producer_hash(producer_id, stream):
    folded = (producer_id ^ (producer_id >> 32)) & 0x7FFFFFFF
    h = folded * 0x5BD1E995 + (stream & 0x7FFFFFFF) * 0x27D4EB2F
    return h ^ (h >> 29)


def stream_hash(stream):
    h = (stream & 0x7FFFFFFF) * 0x5BD1E995
    return h ^ (h >> 29)


def producer_slot(slot_i64, slot_i32, producer_id, stream):
    """Slot holding ``(stream, producer_id)``, or the empty slot where it would go."""
    mask = slot_i64.shape[0] - 1
    slot = producer_hash(producer_id, stream) & mask
    while True:
        if int(slot_i32[slot, SLOT_ROW]) < 0:
            return slot
        if int(slot_i64[slot, SLOT_PRODUCER_ID]) == producer_id and int(slot_i32[slot, SLOT_STREAM]) == stream:
            return slot
        slot = (slot + 1) & mask


def stream_slot(sslot_stream, sslot_index, stream):
    """Slot holding ``stream``, or the empty slot where it would go."""
    mask = sslot_index.shape[0] - 1
    slot = stream_hash(stream) & mask
    while True:
        if int(sslot_index[slot]) < 0:
            return slot
        if int(sslot_stream[slot]) == stream:
            return slot
        slot = (slot + 1) & mask


def rebuild_producer_index(slot_i64, slot_i32, row_i64, row_i32, n_rows):
    """Empty the producer index and insert rows ``0..n_rows-1`` in row order."""
    for s in range(slot_i64.shape[0]):
        slot_i32[s, SLOT_ROW] = -1
    for row in range(n_rows):
        pid = int(row_i64[row, ROW_PRODUCER_ID])
        part = int(row_i32[row, ROW_STREAM])
        slot = producer_slot(slot_i64, slot_i32, pid, part)
        slot_i64[slot, SLOT_PRODUCER_ID] = pid
        slot_i32[slot, SLOT_STREAM] = part
        slot_i32[slot, SLOT_ROW] = row


def rebuild_stream_index(sslot_stream, sslot_index, stream_id, n_streams):
    """Empty the stream index and insert streams ``0..n_streams-1``."""
    for s in range(sslot_index.shape[0]):
        sslot_index[s] = -1
    for index in range(n_streams):
        part = int(stream_id[index])
        slot = stream_slot(sslot_stream, sslot_index, part)
        sslot_stream[slot] = part
        sslot_index[slot] = index


# ---------------------------------------------------------------- Kafka's steps for one batch


def metadata_error(stream, producer_id, epoch, base_seq, last_seq, base_offset,
                   record_count, is_transactional, is_control, control_type, origin):
    """INVALID_RECORD for metadata no real batch can carry, else NONE."""
    if record_count < 1 or stream < 0 or producer_id < -1 or epoch < -1 or base_offset < -1:
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


def find_duplicate(row_i32, row_i8, row, first_seq, last_seq):
    """Ring position of a retained batch with exactly this sequence range, or -1."""
    head = int(row_i8[row, ROW_HEAD])
    length = int(row_i8[row, ROW_LEN])
    if length == RING_SIZE:  # full (the usual case): a quick look for the last sequence before the ordered scan
        found = 0
        for pos in range(RING_SIZE):  # (no early exit: five compares without a branch)
            found |= int(row_i32[row, ROW_RING_LAST_SEQ + pos]) == last_seq
        if not found:
            return -1
    for k in range(length):
        pos = ring_pos(head, k)
        stored_last = int(row_i32[row, ROW_RING_LAST_SEQ + pos])
        if stored_last == last_seq:
            if seq_sub(stored_last, int(row_i32[row, ROW_RING_OFFSET_DELTA + pos])) == first_seq:
                return pos
    return -1


def newest_last_seq(row_i32, row_i8, row):
    """Last sequence of the newest retained batch, -1 when none is retained."""
    length = int(row_i8[row, ROW_LEN])
    if length == 0:
        return -1
    return int(row_i32[row, ROW_RING_LAST_SEQ + ring_pos(int(row_i8[row, ROW_HEAD]), length - 1)])


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
    """A non-transactional write while the producer's transaction is open on the stream."""
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


def log_end(row, part, row_i32, parts):
    """The stream's next offset (0 for a stream never appended to)."""
    sslot_stream, sslot_index, _stream_id, stream_next_offset = parts
    if row >= 0:
        return int(stream_next_offset[int(row_i32[row, ROW_STREAM_INDEX])])
    index = int(sslot_index[stream_slot(sslot_stream, sslot_index, part)])
    if index < 0:
        return 0
    return int(stream_next_offset[index])


def emit(out, i, status, error, base_offset, last_offset, finding, expected):
    """Write batch ``i``'s verdict."""
    out_status, out_error_code, out_base_offset, out_last_offset, out_finding, out_expected = out
    out_status[i] = status
    out_error_code[i] = error
    out_base_offset[i] = base_offset
    out_last_offset[i] = last_offset
    out_finding[i] = finding
    out_expected[i] = expected


def check_batch(i, batch, origin, slots, rows, parts, counters, out, txns):
    """Prepare batch ``i`` against the state as it stands (Kafka's ProducerAppendInfo): writes its verdict
    and, for a marker that ends a transaction, the completed transaction; changes no state. Returns the
    producer's index slot (-1 without a producer id) for :func:`commit_batch`. Arguments come in the groups
    of :mod:`idemcore.kernels.abi`, as tuples: Python compiles a call of more than 30 arguments as a
    ``*args`` call, which Numba cannot inline."""
    (stream, producer_id, producer_epoch, base_sequence, last_sequence, base_offset, record_count,
     _max_timestamp, is_transactional, is_control, control_type, coordinator_epoch) = batch
    slot_i64, slot_i32 = slots
    row_i64, row_i32, row_i16, row_i8 = rows
    txn_stream, txn_producer_id, txn_first_offset, txn_last_offset, txn_aborted, txn_marker = txns
    part = int(stream[i])
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
        slot = producer_slot(slot_i64, slot_i32, pid, part)
        row = int(slot_i32[slot, SLOT_ROW])
    if row >= 0:
        stored_epoch = int(row_i16[row, ROW_EPOCH])
        stored_coordinator_epoch = int(row_i32[row, ROW_COORDINATOR_EPOCH])
        txn_first = int(row_i64[row, ROW_TXN_FIRST_OFFSET])

    finding = F_NONE
    expected = -1
    if control:
        error, finding, expected = check_marker(epoch, int(coordinator_epoch[i]), stored_epoch,
                                                stored_coordinator_epoch)
    elif pid >= 0:
        if origin == ORIGIN_CLIENT and row >= 0 and epoch == stored_epoch:
            pos = find_duplicate(row_i32, row_i8, row, first_seq, last_seq)
            if pos >= 0:  # a retry: answer with the original offsets, write nothing
                original_last = int(row_i64[row, ROW_RING_LAST_OFFSET + 2 * pos])
                emit(out, i, DUPLICATE, NONE, original_last - int(row_i32[row, ROW_RING_OFFSET_DELTA + pos]),
                     original_last, F_DUPLICATE, -1)
                return slot
        error, finding, expected = check_epoch(epoch, stored_epoch, transactional, origin)
        if error == NONE and origin == ORIGIN_CLIENT:
            stored_last = -1
            if row >= 0:
                stored_last = newest_last_seq(row_i32, row_i8, row)
            error, finding, expected = check_sequence(stored_epoch, stored_last, epoch, first_seq, last_seq)
        if error == NONE:
            error, finding, expected = check_txn_state(transactional, txn_first)
    if error != NONE:
        emit(out, i, REJECTED, error, -1, -1, finding, expected)
        return slot

    # Offsets from the log end, unless the log gave them (replication, recovery); refused past the int64 space.
    first_offset = given_offset
    if first_offset < 0:
        first_offset = log_end(row, part, row_i32, parts)
    error, finding, expected = check_offsets(first_offset, count)
    if error != NONE:
        emit(out, i, REJECTED, error, -1, -1, finding, expected)
        return slot
    emit(out, i, APPENDED, NONE, first_offset, first_offset + count - 1, F_NONE, -1)
    if control and txn_first >= 0:
        k = int(counters[N_COMPLETED])
        counters[N_COMPLETED] = k + 1
        txn_stream[k] = part
        txn_producer_id[k] = pid
        txn_first_offset[k] = txn_first
        txn_last_offset[k] = first_offset
        txn_aborted[k] = marker_type == CONTROL_ABORT
        txn_marker[k] = i
    return slot


def ring_push(row_i64, row_i32, row_i8, row, last_seq, last_offset, offset_delta, timestamp):
    """Remember one batch; the oldest of five is dropped."""
    head = int(row_i8[row, ROW_HEAD])
    length = int(row_i8[row, ROW_LEN])
    if length < RING_SIZE:
        pos = ring_pos(head, length)
        row_i8[row, ROW_LEN] = length + 1
    else:
        pos = head
        row_i8[row, ROW_HEAD] = ring_pos(head, 1)
    row_i32[row, ROW_RING_LAST_SEQ + pos] = last_seq
    row_i32[row, ROW_RING_OFFSET_DELTA + pos] = offset_delta
    row_i64[row, ROW_RING_LAST_OFFSET + 2 * pos] = last_offset
    row_i64[row, ROW_RING_TIMESTAMP + 2 * pos] = timestamp


def init_row(rows, row, pid, part, part_index):
    """A new entry as a first write creates it: epochs, timestamp and open-transaction offset -1, no batch."""
    row_i64, row_i32, row_i16, row_i8 = rows
    row_i32[row, ROW_STREAM] = part
    row_i64[row, ROW_PRODUCER_ID] = pid
    row_i32[row, ROW_STREAM_INDEX] = part_index
    row_i16[row, ROW_EPOCH] = -1
    row_i32[row, ROW_COORDINATOR_EPOCH] = -1
    row_i64[row, ROW_LAST_TIMESTAMP] = -1
    row_i64[row, ROW_TXN_FIRST_OFFSET] = -1
    row_i8[row, ROW_HEAD] = 0
    row_i8[row, ROW_LEN] = 0


def commit_batch(i, slot, batch, slots, rows, parts, counters, out):
    """Commit appended batch ``i`` (Kafka's ProducerStateManager.update): advance the stream's log end,
    create or update the producer's entry. ``slot``: the producer's index slot as :func:`check_batch`
    returned it, with no row inserted since. The caller has made room for one row and one stream."""
    (stream, producer_id, producer_epoch, _base_sequence, last_sequence, _base_offset, record_count,
     max_timestamp, is_transactional, is_control, _control_type, coordinator_epoch) = batch
    slot_i64, slot_i32 = slots
    row_i64, row_i32, row_i16, row_i8 = rows
    sslot_stream, sslot_index, stream_id, stream_next_offset = parts
    _out_status, out_base_offset, out_last_offset = out
    part = int(stream[i])
    pid = int(producer_id[i])
    first_offset = int(out_base_offset[i])
    last_offset = int(out_last_offset[i])
    row = -1
    if pid >= 0:
        row = int(slot_i32[slot, SLOT_ROW])
    if row >= 0:
        part_index = int(row_i32[row, ROW_STREAM_INDEX])
    else:
        sslot = stream_slot(sslot_stream, sslot_index, part)
        part_index = int(sslot_index[sslot])
        if part_index < 0:
            part_index = int(counters[N_STREAMS])
            counters[N_STREAMS] = part_index + 1
            sslot_stream[sslot] = part
            sslot_index[sslot] = part_index
            stream_id[part_index] = part
            stream_next_offset[part_index] = 0
    if last_offset + 1 > int(stream_next_offset[part_index]):  # last_offset < INT64_MAX: check_offsets
        stream_next_offset[part_index] = last_offset + 1
    if pid < 0:
        return  # no producer id: nothing to remember

    epoch = int(producer_epoch[i])
    timestamp = int(max_timestamp[i])
    if row < 0:
        row = int(counters[N_ROWS])
        counters[N_ROWS] = row + 1
        slot_i64[slot, SLOT_PRODUCER_ID] = pid
        slot_i32[slot, SLOT_STREAM] = part
        slot_i32[slot, SLOT_ROW] = row
        init_row(rows, row, pid, part, part_index)
    if epoch != int(row_i16[row, ROW_EPOCH]):
        row_i8[row, ROW_HEAD] = 0
        row_i8[row, ROW_LEN] = 0  # any change of epoch forgets the retained batches
    row_i16[row, ROW_EPOCH] = epoch
    row_i64[row, ROW_LAST_TIMESTAMP] = timestamp
    if is_control[i]:
        row_i32[row, ROW_COORDINATOR_EPOCH] = int(coordinator_epoch[i])
        row_i64[row, ROW_TXN_FIRST_OFFSET] = -1  # the marker ends the open transaction
    else:
        ring_push(row_i64, row_i32, row_i8, row, int(last_sequence[i]), last_offset, int(record_count[i]) - 1,
                  timestamp)
        if is_transactional[i] and int(row_i64[row, ROW_TXN_FIRST_OFFSET]) < 0:
            row_i64[row, ROW_TXN_FIRST_OFFSET] = first_offset  # the first transactional batch opens the transaction


def plain_data(i, batch):
    """Batch ``i`` is well-formed data of a producer id with a sequence, its offsets left to the log: what
    :func:`append_in_sequence` takes (anything else goes through every rule)."""
    (stream, producer_id, producer_epoch, base_sequence, last_sequence, base_offset, record_count,
     _max_timestamp, _is_transactional, is_control, _control_type, _coordinator_epoch) = batch
    first_seq = int(base_sequence[i])
    count = int(record_count[i])
    return not (int(producer_id[i]) < 0 or int(stream[i]) < 0 or int(producer_epoch[i]) < -1 or count < 1
                or is_control[i] or int(base_offset[i]) != -1 or first_seq < 0 or first_seq > INT32_MAX
                or int(last_sequence[i]) != seq_add(first_seq, count - 1))


def prefill(out, start, stop):
    """Batches ``start..stop-1``'s verdict columns as an appended batch has them, whatever its offsets (APPENDED,
    NONE, F_NONE, -1): :func:`append_to_row` then writes only the offsets."""
    out_status, out_error_code, _out_base_offset, _out_last_offset, out_finding, out_expected = out
    for i in range(start, stop):
        out_status[i] = APPENDED
        out_error_code[i] = NONE
        out_finding[i] = F_NONE
        out_expected[i] = -1


def append_in_sequence(i, batch, slots, rows, parts, out):
    """The usual CLIENT batch, checked and committed in one go: well-formed data of a known producer, same
    epoch, the next sequence after its newest retained batch, no retry of a retained one, no open transaction it
    would break, room for its offsets. Then it is APPENDED and committed exactly as :func:`check_batch` and
    :func:`commit_batch` would, and True is returned; else nothing is written, for them to apply every rule."""
    if not plain_data(i, batch):
        return False
    slot_i64, slot_i32 = slots
    row = int(slot_i32[producer_slot(slot_i64, slot_i32, int(batch[1][i]), int(batch[0][i])), SLOT_ROW])
    if row < 0:
        return False
    return append_to_row(i, row, batch, rows, parts, out)


def append_to_row(i, row, batch, rows, parts, out):
    """:func:`append_in_sequence` of a :func:`plain_data` batch whose producer row is known to be ``row``. It
    writes only the batch's offsets: the caller has prefilled its other verdict columns (:func:`prefill`)."""
    (_stream, _producer_id, producer_epoch, base_sequence, last_sequence, _base_offset, record_count,
     max_timestamp, is_transactional, _is_control, _control_type, _coordinator_epoch) = batch
    row_i64, row_i32, row_i16, row_i8 = rows
    _sslot_stream, _sslot_index, _stream_id, stream_next_offset = parts
    epoch = int(producer_epoch[i])
    first_seq = int(base_sequence[i])
    last_seq = int(last_sequence[i])
    count = int(record_count[i])
    head = int(row_i8[row, ROW_HEAD])
    length = int(row_i8[row, ROW_LEN])
    txn_first = int(row_i64[row, ROW_TXN_FIRST_OFFSET])
    if epoch != int(row_i16[row, ROW_EPOCH]) or length <= 0 or head < 0 or (txn_first >= 0 and not is_transactional[i]):
        return False  # (a ring's head and length are never negative: saying so spares Numba a wraparound fix-up)
    if not in_sequence(int(row_i32[row, ROW_RING_LAST_SEQ + ring_pos(head, length - 1)]), first_seq):
        return False
    if find_duplicate(row_i32, row_i8, row, first_seq, last_seq) >= 0:
        return False
    part_index = int(row_i32[row, ROW_STREAM_INDEX])
    first_offset = int(stream_next_offset[part_index])
    if first_offset > INT64_MAX - count:
        return False
    last_offset = first_offset + count - 1
    out[2][i] = first_offset  # (the caller prefilled the other columns as an appended batch has them)
    out[3][i] = last_offset
    stream_next_offset[part_index] = last_offset + 1
    timestamp = int(max_timestamp[i])
    ring_push(row_i64, row_i32, row_i8, row, last_seq, last_offset, count - 1, timestamp)
    row_i64[row, ROW_LAST_TIMESTAMP] = timestamp
    if txn_first < 0 and is_transactional[i]:
        row_i64[row, ROW_TXN_FIRST_OFFSET] = first_offset  # the first transactional batch opens the transaction
    return True


def apply_every_rule(i, batch, origin, slots, rows, parts, counters, out, txns):
    """Batch ``i`` through every rule: :func:`check_batch`, then :func:`commit_batch` if APPENDED. False, with
    nothing written, when the table has no room for one more row or stream (the caller grows it)."""
    row_i64 = rows[0]
    stream_id = parts[2]
    if int(counters[N_ROWS]) >= row_i64.shape[0] or int(counters[N_STREAMS]) >= stream_id.shape[0]:
        return False
    slot = check_batch(i, batch, origin, slots, rows, parts, counters, out, txns)
    if out[0][i] == APPENDED:
        commit_batch(i, slot, batch, slots, rows, parts, counters, (out[0], out[2], out[3]))
    return True


# ---------------------------------------------------------------- the entry points

def validate_batches(
    stream, producer_id, producer_epoch, base_sequence, last_sequence, base_offset,
    record_count, max_timestamp, is_transactional, is_control, control_type, coordinator_epoch,
    origin, start, stop,
    slot_i64, slot_i32, row_i64, row_i32, row_i16, row_i8,
    sslot_stream, sslot_index, stream_id, stream_next_offset,
    counters,
    out_status, out_error_code, out_base_offset, out_last_offset, out_finding, out_expected,
    txn_stream, txn_producer_id, txn_first_offset, txn_last_offset, txn_aborted, txn_marker,
):
    """Check and commit batches ``start..stop-1`` one after the other; return the first index not processed.

    Each batch sees the state its predecessors committed (a stream replayed in
    order). It stops early, returning that index, only when the table has no
    room for one more producer row or stream and the batch is not one
    :func:`append_in_sequence` takes (that never adds a row); the caller grows
    the table and calls again from there. Completed transactions are appended at
    ``counters[N_COMPLETED]``; the caller sizes the ``txn_*`` arrays for one
    per control batch.

    ``out_finding`` explains each batch (``F_*``); ``out_expected`` gives the
    value the batch contradicted: the expected first sequence for sequence
    findings, the current producer epoch for an old epoch, the current
    coordinator epoch for a fenced marker, the open transaction's first offset
    for INVALID_TXN_STATE, the first offset the batch would have taken for
    F_OFFSET_OVERFLOW, else -1.
    """
    batch = (stream, producer_id, producer_epoch, base_sequence, last_sequence, base_offset, record_count,
             max_timestamp, is_transactional, is_control, control_type, coordinator_epoch)
    slots = (slot_i64, slot_i32)
    rows = (row_i64, row_i32, row_i16, row_i8)
    parts = (sslot_stream, sslot_index, stream_id, stream_next_offset)
    out = (out_status, out_error_code, out_base_offset, out_last_offset, out_finding, out_expected)
    txns = (txn_stream, txn_producer_id, txn_first_offset, txn_last_offset, txn_aborted, txn_marker)
    client = origin == ORIGIN_CLIENT
    if client:
        prefill(out, start, stop)  # (what append_in_sequence does not write)
    for i in range(start, stop):
        if client and append_in_sequence(i, batch, slots, rows, parts, out):
            continue  # (the usual batch; the rest takes every rule in turn)
        if not apply_every_rule(i, batch, origin, slots, rows, parts, counters, out, txns):
            return i
    return stop


def check_batches(
    stream, producer_id, producer_epoch, base_sequence, last_sequence, base_offset,
    record_count, max_timestamp, is_transactional, is_control, control_type, coordinator_epoch,
    origin, start, stop,
    slot_i64, slot_i32, row_i64, row_i32, row_i16, row_i8,
    sslot_stream, sslot_index, stream_id, stream_next_offset,
    counters,
    out_status, out_error_code, out_base_offset, out_last_offset, out_finding, out_expected,
    txn_stream, txn_producer_id, txn_first_offset, txn_last_offset, txn_aborted, txn_marker,
):
    """Prepare: the verdicts of batches ``start..stop-1`` against the state as it stands, changing no state
    (the broker commits them with :func:`commit_batches` once the log write succeeded). Every batch sees
    the same state, so no two may be for one stream (each gets the stream's log end). Returns ``stop``."""
    batch = (stream, producer_id, producer_epoch, base_sequence, last_sequence, base_offset, record_count,
             max_timestamp, is_transactional, is_control, control_type, coordinator_epoch)
    slots = (slot_i64, slot_i32)
    rows = (row_i64, row_i32, row_i16, row_i8)
    parts = (sslot_stream, sslot_index, stream_id, stream_next_offset)
    out = (out_status, out_error_code, out_base_offset, out_last_offset, out_finding, out_expected)
    txns = (txn_stream, txn_producer_id, txn_first_offset, txn_last_offset, txn_aborted, txn_marker)
    for i in range(start, stop):
        check_batch(i, batch, origin, slots, rows, parts, counters, out, txns)
    return stop


def commit_batches(
    stream, producer_id, producer_epoch, base_sequence, last_sequence, base_offset,
    record_count, max_timestamp, is_transactional, is_control, control_type, coordinator_epoch,
    start, stop,
    slot_i64, slot_i32, row_i64, row_i32, row_i16, row_i8,
    sslot_stream, sslot_index, stream_id, stream_next_offset,
    counters,
    out_status, out_base_offset, out_last_offset,
):
    """Commit the batches of ``start..stop-1`` whose ``out_status`` is APPENDED (as :func:`check_batches`
    left it, or after the caller set a failed write to REJECTED); return the first index not processed,
    ``stop`` unless the table ran out of room (grow it and call again from there)."""
    batch = (stream, producer_id, producer_epoch, base_sequence, last_sequence, base_offset, record_count,
             max_timestamp, is_transactional, is_control, control_type, coordinator_epoch)
    slots = (slot_i64, slot_i32)
    rows = (row_i64, row_i32, row_i16, row_i8)
    parts = (sslot_stream, sslot_index, stream_id, stream_next_offset)
    committed = (out_status, out_base_offset, out_last_offset)
    row_capacity = row_i64.shape[0]
    stream_capacity = stream_id.shape[0]
    for i in range(start, stop):
        if out_status[i] != APPENDED:
            continue
        if int(counters[N_ROWS]) >= row_capacity or int(counters[N_STREAMS]) >= stream_capacity:
            return i
        slot = -1
        pid = int(producer_id[i])
        if pid >= 0:
            slot = producer_slot(slot_i64, slot_i32, pid, int(stream[i]))
        commit_batch(i, slot, batch, slots, rows, parts, counters, committed)
    return stop


def reserve_rows(
    stream, producer_id, start, stop,
    slot_i64, slot_i32, row_i64, row_i32, row_i16, row_i8,
    sslot_stream, sslot_index, stream_id, stream_next_offset,
    counters,
    batch_bucket, batch_row, bucket_count,
):
    """The pre-pass of a validation split into lanes (``engine.lanes``): give every batch of ``start..stop-1``
    its stream and producer row before any is checked, so lanes that own disjoint streams can then run
    :func:`validate_listed` side by side without inserting into the shared indexes.

    A stream or (stream, producer id) not in the table gets an entry as a first write would create it
    (next offset 0; :func:`init_row`): until a batch is committed to it, it reads exactly as an absent one, and
    the caller drops those no batch was committed to. Per batch it writes ``batch_bucket`` (the stream's
    index + 1; 0 for a negative stream, which no rule lets through; not written when ``batch_bucket`` is
    empty: one lane needs only the rows) and ``batch_row`` (-1 without a producer id), and counts it in
    ``bucket_count``; an added row remembers the batch that added it
    (``ROW_RESERVED_BY``). Returns the first index not processed: ``stop``, unless adding an entry would leave
    the table without a spare row or stream (:func:`validate_listed` stops at a full table); grow it and call
    again. The caller gives a table with a spare row and stream to begin with."""
    rows = (row_i64, row_i32, row_i16, row_i8)
    row_capacity = row_i64.shape[0]
    stream_capacity = stream_id.shape[0]
    ahead = row_capacity >= PREFETCH_MIN_ROWS
    mask = slot_i64.shape[0] - 1
    buckets = batch_bucket.shape[0] > 0
    last_part, last_index = -1, -1  # the stream of the batch before, and its index
    for i in range(start, stop):
        if ahead and i + PREFETCH_AHEAD < stop:
            prefetch_slot(slot_i64, producer_hash(int(producer_id[i + PREFETCH_AHEAD]),
                                                  int(stream[i + PREFETCH_AHEAD])) & mask)
        part = int(stream[i])
        pid = int(producer_id[i])
        bucket = 0
        row = -1
        if part >= 0:
            sslot = -1
            index = last_index
            if part != last_part:  # (a run of one stream probes its index once)
                sslot = stream_slot(sslot_stream, sslot_index, part)
                index = int(sslot_index[sslot])
            if index < 0:
                index = int(counters[N_STREAMS])
                if index + 1 >= stream_capacity:
                    return i
                sslot_stream[sslot] = part
                sslot_index[sslot] = index
                stream_id[index] = part
                stream_next_offset[index] = 0
                counters[N_STREAMS] = index + 1
            last_part, last_index = part, index
            if pid >= 0:
                slot = producer_slot(slot_i64, slot_i32, pid, part)
                row = int(slot_i32[slot, SLOT_ROW])
                if row < 0:
                    row = int(counters[N_ROWS])
                    if row + 1 >= row_capacity:
                        return i
                    slot_i64[slot, SLOT_PRODUCER_ID] = pid
                    slot_i32[slot, SLOT_STREAM] = part
                    slot_i32[slot, SLOT_ROW] = row
                    init_row(rows, row, pid, part, index)
                    row_i64[row, ROW_RESERVED_BY] = i
                    counters[N_ROWS] = row + 1
            bucket = index + 1
        bucket_count[bucket] += 1
        if buckets:
            batch_bucket[i] = bucket
        batch_row[i] = row
    return stop


def prefetch_row(row_i64, row):
    """A hint to fetch the cache lines of ``row``: nothing here; an LLVM prefetch where Numba compiles this module
    (``numba_rules``)."""
    return None


def prefetch_slot(slot_i64, slot):
    """A hint to fetch the cache line of index slot ``slot``, as :func:`prefetch_row`."""
    return None


def validate_listed(
    stream, producer_id, producer_epoch, base_sequence, last_sequence, base_offset,
    record_count, max_timestamp, is_transactional, is_control, control_type, coordinator_epoch,
    origin, listed, batch_row, start, stop,
    slot_i64, slot_i32, row_i64, row_i32, row_i16, row_i8,
    sslot_stream, sslot_index, stream_id, stream_next_offset,
    counters,
    out_status, out_error_code, out_base_offset, out_last_offset, out_finding, out_expected,
    txn_stream, txn_producer_id, txn_first_offset, txn_last_offset, txn_aborted, txn_marker,
):
    """:func:`validate_batches` over the batches ``listed[start:stop]`` (indices in ascending order; an empty
    ``listed``: the batches ``start..stop-1``): a lane's batches among all of a call's (``engine.lanes``),
    ``batch_row`` their rows as :func:`reserve_rows` gave them (a row that is not a table row is looked up
    instead). The caller prefills their verdict columns as an appended batch has them (APPENDED, NONE, F_NONE,
    -1: the compiled twin writes only an in-sequence batch's offsets). Returns the first position in ``listed``
    not processed (``stop`` unless the table ran out of room; a negative ``start`` or listed index is not
    processed either)."""
    batch = (stream, producer_id, producer_epoch, base_sequence, last_sequence, base_offset, record_count,
             max_timestamp, is_transactional, is_control, control_type, coordinator_epoch)
    slots = (slot_i64, slot_i32)
    rows = (row_i64, row_i32, row_i16, row_i8)
    parts = (sslot_stream, sslot_index, stream_id, stream_next_offset)
    out = (out_status, out_error_code, out_base_offset, out_last_offset, out_finding, out_expected)
    txns = (txn_stream, txn_producer_id, txn_first_offset, txn_last_offset, txn_aborted, txn_marker)
    row_capacity = row_i64.shape[0]
    client = origin == ORIGIN_CLIENT
    every = listed.shape[0] == 0
    ahead = row_capacity >= PREFETCH_MIN_ROWS
    known = min(int(counters[N_ROWS]), row_capacity)  # the rows batch_row may name (read again after every rule)
    if start < 0:
        return start  # (no batch has a negative position; the Cython twin refuses one)
    for k in range(start, stop):
        i = k if every else int(listed[k])
        if i < 0:
            return k  # (nor a negative index. Knowing i >= 0, Numba reads each column with no wraparound fix-up)
        if ahead and k + PREFETCH_AHEAD < stop:
            later = int(batch_row[k + PREFETCH_AHEAD if every else int(listed[k + PREFETCH_AHEAD])])
            if 0 <= later < row_capacity:
                prefetch_row(row_i64, later)
        if client and plain_data(i, batch):
            row = int(batch_row[i])
            if 0 <= row < known:
                if append_to_row(i, row, batch, rows, parts, out):
                    continue
            elif append_in_sequence(i, batch, slots, rows, parts, out):
                continue
        if not apply_every_rule(i, batch, origin, slots, rows, parts, counters, out, txns):
            return k
        known = min(int(counters[N_ROWS]), row_capacity)
    return stop
