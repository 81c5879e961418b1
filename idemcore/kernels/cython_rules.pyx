# cython: language_level=3, boundscheck=False, wraparound=False, initializedcheck=False, cdivision=True
"""The producer-state rules compiled with Cython: an independent implementation of the kernel contract of
idemcore.kernels (the entry points, their parameters and results, the state arrays), checked against
idemcore.kernels.rules_reference. Built by setup.py into idemcore.kernels.cython_rules.

The helpers follow Kafka's steps for one batch under the reference's names. The entry points take typed
memoryviews; the helpers take structs of raw pointers filled once per call (``Batches``, ``State``, ...), so
no helper copies dozens of memoryview structs per batch. check_batches reads the state through ``Lookup``,
which holds only const pointers: it cannot write state.

The state is one ``Row`` struct per producer row (192 bytes, 64-byte aligned; the reference's ``ROW_*``
columns) and one 16-byte ``Slot`` (key beside row number) per index slot, reached through the views the table
passes. validate_batches first prefills the verdict columns an appended batch has, then takes the usual batch
through ``append_in_sequence`` (the first cache line of its row read, one more written); anything else goes
through check_batch and commit_batch, which apply every rule. On a table of more than PREFETCH_MIN_ROWS rows it
prefetches the index slot and the row of batches ahead (``prefetch``).

check_batch and commit_batch are fused functions, one copy per struct they read: check_batch reads a
``Lookup`` in check_batches and the ``State`` elsewhere; commit_batch reads the offsets from the ``Verdicts``
(validate_batches, validate_listed) or from ``CommitVerdicts`` (commit_batches). A C compiler inlines a big
static function only into its single caller, and the copies differ in struct layout, so it does not fold them
back into one. validate_batches and validate_listed share the slow path (``apply_every_rule``), as in the
reference; it is rare on a real stream, so its check_batch staying a call costs little.
"""

from libc.stdint cimport INT64_MAX, int8_t, int16_t, int32_t, int64_t, uint8_t

from kernel_defs cimport *

cdef extern from *:
    """
    /* GCC 12 at -O1 and above dropped __builtin_prefetch from this loop (measured): on x86 the instruction is
       written out, as an asm the compiler must keep. */
    #if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
      #define IDEMCORE_PREFETCH(p) __asm__ volatile("prefetcht0 %0" :: "m"(*(const char *)(p)))
    #elif defined(__GNUC__)
      #define IDEMCORE_PREFETCH(p) __builtin_prefetch((const void *)(p), 1, 3)
    #else
      #define IDEMCORE_PREFETCH(p) ((void)0)
    #endif
    """
    void IDEMCORE_PREFETCH(const void *p) noexcept nogil  # a hint to fetch p's cache line


cdef extern from *:
    """
    /* Whether any of the five ints at s equals v. SSE2 (every x86-64) compares four in one instruction: on the
       in-sequence path of stream (a) it took validate_listed from 269 to 246 ms per 20M batches (N=100; 328 to
       294 ms with N=10,000) against five scalar compares. */
    #if defined(__SSE2__)
      #include <emmintrin.h>
      static inline int idemcore_any5_eq(const int32_t *s, int32_t v) {
          __m128i m = _mm_cmpeq_epi32(_mm_loadu_si128((const __m128i *)s), _mm_set1_epi32(v));
          return _mm_movemask_epi8(m) | (s[4] == v);
      }
    #else
      static inline int idemcore_any5_eq(const int32_t *s, int32_t v) {
          return (s[0] == v) | (s[1] == v) | (s[2] == v) | (s[3] == v) | (s[4] == v);
      }
    #endif
    """
    bint idemcore_any5_eq(const int32_t *s, int32_t v) noexcept nogil  # v among s[0..4]


cdef enum:
    # Prefetching in validate_batches, once the rows outgrow the caches: batch i fetches the index slot of batch
    # i + SLOT_AHEAD and, through the slot fetched before, the row of batch i + ROW_AHEAD.
    SLOT_AHEAD = 16
    ROW_AHEAD = 8
    PREFETCH_MIN_ROWS = 4096  # row capacity: 768 kB of rows, more than a core's L2

cdef enum:
    # The state layout (reference: ROW_WORDS, SLOT_WORDS; the fields are the Row and Slot structs below).
    ROW_WORDS = 24
    SLOT_WORDS = 2

#: The codes compiled in, by the names of idemcore.kernels.rules_reference's module globals (checked by the tests).
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
    "N_STREAMS": N_STREAMS,
    "N_COMPLETED": N_COMPLETED,
    "INT64_MAX": INT64_MAX,
    "ROW_WORDS": ROW_WORDS,
    "SLOT_WORDS": SLOT_WORDS,
}


# ---------------------------------------------------------------- the arrays, as the helpers take them

cdef struct Batches:
    # The batch columns (read only).
    const int32_t *stream
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


cdef struct RingEntry:
    # A retained batch's offsets half (its sequence half is in the row's first cache line).
    int64_t last_offset
    int64_t timestamp


cdef struct Row:
    # One producer row, 192 bytes (the reference's ROW_* columns; row_layout() gives the offsets for the tests).
    # Bytes 0-63 are all an in-sequence batch reads.
    int16_t epoch
    int8_t head
    int8_t length
    int32_t stream_index
    int64_t txn_first_offset
    int64_t last_timestamp
    int32_t ring_last_seq[RING]
    int32_t ring_offset_delta[RING]
    RingEntry ring[RING]
    int32_t coordinator_epoch
    int32_t stream
    int64_t producer_id
    int64_t reserved_by  # reserve_rows: the batch that added the entry (no rule reads it)
    int64_t unused[3]


cdef struct Slot:
    # One producer index slot, 16 bytes: the key beside the row (row -1: empty).
    int64_t producer_id
    int32_t stream
    int32_t row


cdef struct Lookup:
    # The state as check_batches reads it: const pointers.
    const Slot *slots
    Py_ssize_t slot_mask
    const Row *rows
    const int32_t *sslot_stream
    const int32_t *sslot_index
    Py_ssize_t sslot_mask
    const int64_t *stream_next_offset


cdef struct State:
    # The state as validate_batches and commit_batches read and write it.
    Slot *slots
    Py_ssize_t slot_mask
    Row *rows
    int32_t *sslot_stream
    int32_t *sslot_index
    Py_ssize_t sslot_mask
    int32_t *stream_id
    int64_t *stream_next_offset
    int64_t *counters
    Py_ssize_t row_capacity
    Py_ssize_t stream_capacity


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
    int32_t *stream
    int64_t *producer_id
    int64_t *first_offset
    int64_t *last_offset
    uint8_t *aborted
    int64_t *marker
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

cdef inline int64_t producer_hash(int64_t producer_id, int64_t stream) noexcept nogil:
    cdef int64_t folded = (producer_id ^ (producer_id >> 32)) & 0x7FFFFFFF
    cdef int64_t h = folded * 0x5BD1E995 + (stream & 0x7FFFFFFF) * 0x27D4EB2F
    return h ^ (h >> 29)


cdef inline int64_t stream_hash(int64_t stream) noexcept nogil:
    cdef int64_t h = (stream & 0x7FFFFFFF) * 0x5BD1E995
    return h ^ (h >> 29)


cdef inline Py_ssize_t producer_slot_from(const Slot *slots, Py_ssize_t mask, int64_t producer_id,
                                          int64_t stream, Py_ssize_t slot) noexcept nogil:
    # producer_slot, probing from the key's home slot (producer_hash & mask) as the caller hashed it.
    while slots[slot].row >= 0 and not (slots[slot].producer_id == producer_id
                                        and slots[slot].stream == stream):
        slot = (slot + 1) & mask
    return slot


cdef inline Py_ssize_t producer_slot(const Slot *slots, Py_ssize_t mask, int64_t producer_id,
                                     int64_t stream) noexcept nogil:
    # Slot holding (stream, producer_id), or the empty slot where it would go.
    return producer_slot_from(slots, mask, producer_id, stream,
                              <Py_ssize_t>(producer_hash(producer_id, stream) & mask))


cdef inline Py_ssize_t stream_slot(const int32_t *sslot_stream, const int32_t *sslot_index, Py_ssize_t mask,
                                      int64_t stream) noexcept nogil:
    # Slot holding stream, or the empty slot where it would go.
    cdef Py_ssize_t slot = <Py_ssize_t>(stream_hash(stream) & mask)
    while sslot_index[slot] >= 0 and sslot_stream[slot] != stream:
        slot = (slot + 1) & mask
    return slot


cdef inline bint power_of_two(Py_ssize_t n) noexcept nogil:
    return n > 0 and (n & (n - 1)) == 0


cdef const Row *rows_of(const int64_t[:, ::1] row_i64, const int32_t[:, ::1] row_i32,
                        const int16_t[:, ::1] row_i16, const int8_t[:, ::1] row_i8) except NULL:
    # The row records behind the four views (the same buffer, as ProducerStateTable makes them).
    cdef Py_ssize_t n = row_i64.shape[0]
    require(n > 0 and row_i64.shape[1] == ROW_WORDS and row_i32.shape[0] == n and row_i32.shape[1] == 2 * ROW_WORDS
            and row_i16.shape[0] == n and row_i16.shape[1] == 4 * ROW_WORDS and row_i8.shape[0] == n
            and row_i8.shape[1] == 8 * ROW_WORDS, "row views")
    require(<char *>&row_i32[0, 0] == <char *>&row_i64[0, 0] and <char *>&row_i16[0, 0] == <char *>&row_i64[0, 0]
            and <char *>&row_i8[0, 0] == <char *>&row_i64[0, 0], "row views of different buffers")
    return <const Row *>&row_i64[0, 0]


cdef const Slot *slots_of(const int64_t[:, ::1] slot_i64, const int32_t[:, ::1] slot_i32) except NULL:
    # The index slots behind the two views.
    cdef Py_ssize_t n = slot_i64.shape[0]
    require(power_of_two(n) and slot_i64.shape[1] == SLOT_WORDS and slot_i32.shape[0] == n
            and slot_i32.shape[1] == 2 * SLOT_WORDS and <char *>&slot_i32[0, 0] == <char *>&slot_i64[0, 0],
            "producer index views")
    return <const Slot *>&slot_i64[0, 0]


def rebuild_producer_index(int64_t[:, ::1] slot_i64, int32_t[:, ::1] slot_i32, int64_t[:, ::1] row_i64,
                           int32_t[:, ::1] row_i32, Py_ssize_t n_rows):
    """Empty the producer index and insert rows ``0..n_rows-1`` in row order."""
    cdef Slot *slots = <Slot *>slots_of(slot_i64, slot_i32)
    cdef Py_ssize_t n_slots = slot_i64.shape[0]
    cdef Py_ssize_t s, row
    cdef const Row *rows
    require(0 <= n_rows < n_slots and n_rows <= row_i64.shape[0] and row_i64.shape[1] == ROW_WORDS
            and row_i32.shape[0] == row_i64.shape[0] and row_i32.shape[1] == 2 * ROW_WORDS
            and <char *>&row_i32[0, 0] == <char *>&row_i64[0, 0], "rebuild_producer_index: index or row views")
    rows = <const Row *>&row_i64[0, 0]
    with nogil:
        for s in range(n_slots):
            slots[s].row = -1
        for row in range(n_rows):
            s = producer_slot(slots, n_slots - 1, rows[row].producer_id, rows[row].stream)
            slots[s].producer_id = rows[row].producer_id
            slots[s].stream = rows[row].stream
            slots[s].row = <int32_t>row


def row_layout():
    """Byte offsets of the compiled Row and Slot structs' fields, and their sizes (checked against the
    reference's ROW_* and SLOT_* columns by the tests)."""
    cdef Row r
    cdef Slot t
    cdef char *base = <char *>&r
    return {
        "row_size": sizeof(Row), "slot_size": sizeof(Slot),
        "epoch": <char *>&r.epoch - base, "head": <char *>&r.head - base, "length": <char *>&r.length - base,
        "stream_index": <char *>&r.stream_index - base,
        "txn_first_offset": <char *>&r.txn_first_offset - base, "last_timestamp": <char *>&r.last_timestamp - base,
        "ring_last_seq": <char *>&r.ring_last_seq[0] - base, "ring_offset_delta": <char *>&r.ring_offset_delta[0] - base,
        "ring_last_offset": <char *>&r.ring[0].last_offset - base, "ring_timestamp": <char *>&r.ring[0].timestamp - base,
        "ring_entry_size": sizeof(RingEntry),
        "coordinator_epoch": <char *>&r.coordinator_epoch - base, "stream": <char *>&r.stream - base,
        "producer_id": <char *>&r.producer_id - base, "reserved_by": <char *>&r.reserved_by - base,
        "slot_producer_id": <char *>&t.producer_id - <char *>&t, "slot_stream": <char *>&t.stream - <char *>&t,
        "slot_row": <char *>&t.row - <char *>&t,
    }


def rebuild_stream_index(int32_t[::1] sslot_stream, int32_t[::1] sslot_index, const int32_t[::1] stream_id,
                            Py_ssize_t n_streams):
    """Empty the stream index and insert streams ``0..n_streams-1``."""
    cdef Py_ssize_t slots = sslot_index.shape[0]
    cdef Py_ssize_t s, index
    if not (power_of_two(slots) and sslot_stream.shape[0] == slots and 0 <= n_streams < slots
            and n_streams <= stream_id.shape[0]):
        raise ValueError("rebuild_stream_index: inconsistent index or stream array shapes")
    with nogil:
        for s in range(slots):
            sslot_index[s] = -1
        for index in range(n_streams):
            s = stream_slot(&sslot_stream[0], &sslot_index[0], slots - 1, stream_id[index])
            sslot_stream[s] = stream_id[index]
            sslot_index[s] = <int32_t>index


# ---------------------------------------------------------------- Kafka's steps for one batch


cdef inline int metadata_error(int64_t stream, int64_t producer_id, int64_t epoch, int64_t base_seq,
                               int64_t last_seq, int64_t base_offset, int64_t record_count, bint is_transactional,
                               bint is_control, int64_t control_type, int origin) noexcept nogil:
    # INVALID_RECORD for metadata no real batch can carry, else NONE.
    if record_count < 1 or stream < 0 or producer_id < -1 or epoch < -1 or base_offset < -1:
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


cdef inline Py_ssize_t find_duplicate(const Row *r, int64_t first_seq, int64_t last_seq) noexcept nogil:
    # Ring position of a retained batch with exactly this sequence range, or -1.
    cdef const int32_t *seqs = &r.ring_last_seq[0]
    cdef Py_ssize_t head = r.head
    cdef Py_ssize_t length = r.length
    cdef Py_ssize_t k, pos
    if length == RING and not idemcore_any5_eq(seqs, <int32_t>last_seq):  # (last_seq: from an int32 column)
        return -1  # full (the usual case) and without this last sequence: no ordered scan
    for k in range(length):
        pos = ring_pos(head, k)
        if seqs[pos] == last_seq and seq_sub(last_seq, r.ring_offset_delta[pos]) == first_seq:
            return pos
    return -1


cdef inline int64_t newest_last_seq(const Row *r) noexcept nogil:
    # Last sequence of the newest retained batch, -1 when none is retained.
    cdef Py_ssize_t length = r.length
    if length == 0:
        return -1
    return r.ring_last_seq[ring_pos(r.head, length - 1)]


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
    # A non-transactional write while the producer's transaction is open on the stream.
    if txn_first >= 0 and not transactional:
        return Step(E_INVALID_TXN_STATE, F_INVALID_TXN_STATE, txn_first)
    return passed()


cdef inline Step check_offsets(int64_t first_offset, int64_t record_count) noexcept nogil:
    # The offsets step: refused when the last offset first + count - 1 would leave no int64 log end after it.
    # Compared as first > INT64_MAX - count (1 <= count <= INT32_MAX): no signed overflow.
    if first_offset > INT64_MAX - record_count:
        return Step(E_UNKNOWN_SERVER_ERROR, F_OFFSET_OVERFLOW, first_offset)
    return passed()


cdef inline int64_t log_end(const StateView *s, Py_ssize_t row, int64_t stream) noexcept nogil:
    # The stream's next offset (0 for a stream never appended to).
    cdef Py_ssize_t index
    if row >= 0:
        return s.stream_next_offset[s.rows[row].stream_index]
    index = s.sslot_index[stream_slot(s.sslot_stream, s.sslot_index, s.sslot_mask, stream)]
    if index < 0:
        return 0
    return s.stream_next_offset[index]


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
    cdef int64_t part = b.stream[i]
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
    cdef const Row *r = NULL

    cdef int error = metadata_error(part, pid, epoch, first_seq, last_seq, given_offset, count,
                                    transactional, control, marker_type, origin)
    if error != E_NONE:
        emit(out, i, REJECTED, error, -1, -1, F_INVALID_RECORD, -1)
        return -1

    if pid >= 0:
        slot = producer_slot(s.slots, s.slot_mask, pid, part)
        row = s.slots[slot].row
    if row >= 0:
        r = &s.rows[row]
        stored_epoch = r.epoch
        stored_coordinator_epoch = r.coordinator_epoch
        txn_first = r.txn_first_offset

    step = passed()
    if control:
        step = check_marker(epoch, b.coordinator_epoch[i], stored_epoch, stored_coordinator_epoch)
    elif pid >= 0:
        if origin == ORIGIN_CLIENT and row >= 0 and epoch == stored_epoch:
            pos = find_duplicate(r, first_seq, last_seq)
            if pos >= 0:  # a retry: answer with the original offsets, write nothing
                original_last = r.ring[pos].last_offset
                emit(out, i, DUPLICATE, E_NONE, original_last - r.ring_offset_delta[pos], original_last,
                     F_DUPLICATE, -1)
                return slot
        step = check_epoch(epoch, stored_epoch, transactional, origin)
        if step.error == E_NONE and origin == ORIGIN_CLIENT:
            step = check_sequence(stored_epoch, newest_last_seq(r) if row >= 0 else -1, epoch,
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
            done.stream[k] = <int32_t>part
            done.producer_id[k] = pid
            done.first_offset[k] = txn_first
            done.last_offset[k] = first_offset
            done.aborted[k] = marker_type == CONTROL_ABORT
            done.marker[k] = i
    return slot


cdef inline void ring_push(Row *r, int64_t last_seq, int64_t last_offset, int64_t offset_delta,
                           int64_t timestamp) noexcept nogil:
    # Remember one batch; the oldest of five is dropped.
    cdef Py_ssize_t head = r.head
    cdef Py_ssize_t length = r.length
    cdef Py_ssize_t pos
    if length < RING:
        pos = ring_pos(head, length)
        r.length = <int8_t>(length + 1)
    else:
        pos = head
        r.head = <int8_t>ring_pos(head, 1)
    r.ring_last_seq[pos] = <int32_t>last_seq
    r.ring_offset_delta[pos] = <int32_t>offset_delta
    r.ring[pos].last_offset = last_offset
    r.ring[pos].timestamp = timestamp


cdef inline void init_row(Row *r, int64_t pid, int64_t part, Py_ssize_t part_index) noexcept nogil:
    # A new entry as a first write creates it: epochs, timestamp and open-transaction offset -1, no batch.
    r.stream = <int32_t>part
    r.producer_id = pid
    r.stream_index = <int32_t>part_index
    r.epoch = -1
    r.coordinator_epoch = -1
    r.last_timestamp = -1
    r.txn_first_offset = -1
    r.head = 0
    r.length = 0


cdef inline void commit_batch(Py_ssize_t i, Py_ssize_t slot, const Batches *b, State *s,
                              const CommitSource *verdicts) noexcept nogil:
    # Commit appended batch i at its verdict's offsets (Kafka's ProducerStateManager.update): advance the
    # stream's log end, create or update the producer's entry. slot: the producer's index slot as check_batch
    # returned it, with no row inserted since. The caller has made room for one row and one stream.
    cdef int64_t part = b.stream[i]
    cdef int64_t pid = b.producer_id[i]
    cdef int64_t first_offset = verdicts.base_offset[i]
    cdef int64_t last_offset = verdicts.last_offset[i]
    cdef int64_t epoch, timestamp
    cdef Py_ssize_t row = -1
    cdef Py_ssize_t sslot, part_index
    cdef Row *r
    if pid >= 0:
        row = s.slots[slot].row
    if row >= 0:
        part_index = s.rows[row].stream_index
    else:
        sslot = stream_slot(s.sslot_stream, s.sslot_index, s.sslot_mask, part)
        part_index = s.sslot_index[sslot]
        if part_index < 0:
            part_index = s.counters[N_STREAMS]
            s.counters[N_STREAMS] = part_index + 1
            s.sslot_stream[sslot] = <int32_t>part
            s.sslot_index[sslot] = <int32_t>part_index
            s.stream_id[part_index] = <int32_t>part
            s.stream_next_offset[part_index] = 0
    if last_offset + 1 > s.stream_next_offset[part_index]:  # last_offset < INT64_MAX: check_offsets
        s.stream_next_offset[part_index] = last_offset + 1
    if pid < 0:
        return  # no producer id: nothing to remember

    epoch = b.producer_epoch[i]
    timestamp = b.max_timestamp[i]
    if row < 0:
        row = s.counters[N_ROWS]
        s.counters[N_ROWS] = row + 1
        s.slots[slot].producer_id = pid
        s.slots[slot].stream = <int32_t>part
        s.slots[slot].row = <int32_t>row
        init_row(&s.rows[row], pid, part, part_index)
    r = &s.rows[row]
    if epoch != r.epoch:
        r.head = 0
        r.length = 0  # any change of epoch forgets the retained batches
    r.epoch = <int16_t>epoch
    r.last_timestamp = timestamp
    if b.is_control[i]:
        r.coordinator_epoch = b.coordinator_epoch[i]
        r.txn_first_offset = -1  # the marker ends the open transaction
    else:
        ring_push(r, b.last_sequence[i], last_offset, b.record_count[i] - 1, timestamp)
        if b.is_transactional[i] and r.txn_first_offset < 0:
            r.txn_first_offset = first_offset  # the first transactional batch opens the transaction


cdef inline bint apply_every_rule(Py_ssize_t i, const Batches *b, int origin, State *s, Verdicts *out,
                                  Completed *done) noexcept nogil:
    # Batch i through every rule: check_batch, then commit_batch if APPENDED (the slot check_batch found: no
    # second probe). False, with nothing written, when the table has no room for one more row or stream (the
    # caller returns for it to grow). The reference: apply_every_rule.
    cdef Py_ssize_t slot
    if s.counters[N_ROWS] >= s.row_capacity or s.counters[N_STREAMS] >= s.stream_capacity:
        return False
    slot = check_batch(i, b, origin, s, out, done)
    if out.status[i] == APPENDED:
        commit_batch(i, slot, b, s, out)
    return True


cdef inline bint plain_data(Py_ssize_t i, const Batches *b) noexcept nogil:
    # Well-formed data of a producer id with a sequence, its offsets left to the log: what append_in_sequence
    # takes (the reference: plain_data).
    cdef int64_t first_seq = b.base_sequence[i]
    cdef int64_t count = b.record_count[i]
    return not (b.producer_id[i] < 0 or b.stream[i] < 0 or b.producer_epoch[i] < -1 or count < 1
                or b.is_control[i] or b.base_offset[i] != -1 or first_seq < 0 or first_seq > SEQ_MAX
                or b.last_sequence[i] != seq_add(first_seq, count - 1))


cdef inline bint append_in_sequence(Py_ssize_t i, const Batches *b, State *s, Verdicts *out) noexcept nogil:
    # The usual CLIENT batch, checked and committed in one go: well-formed data of a known producer, same epoch,
    # the next sequence after its newest retained batch, no retry of a retained one, no open transaction it would
    # break, room for its offsets. Then it is APPENDED (the caller prefilled the constant verdict columns: only the
    # offsets are written here) and committed as commit_batch would; else nothing is written and False returned,
    # for check_batch and commit_batch to apply every rule (the reference: append_in_sequence).
    cdef Py_ssize_t row
    if not plain_data(i, b):
        return False
    row = s.slots[producer_slot(s.slots, s.slot_mask, b.producer_id[i], b.stream[i])].row
    return row >= 0 and append_to_row(i, row, b, s, out)


cdef inline bint append_to_row(Py_ssize_t i, Py_ssize_t row, const Batches *b, State *s,
                               Verdicts *out) noexcept nogil:
    # append_in_sequence of a plain_data batch whose producer row is known.
    cdef int64_t epoch = b.producer_epoch[i]
    cdef int64_t first_seq = b.base_sequence[i]
    cdef int64_t last_seq = b.last_sequence[i]
    cdef int64_t count = b.record_count[i]
    cdef Py_ssize_t head, length, pos
    cdef Row *r
    cdef int64_t *next_offset
    cdef int64_t first_offset, last_offset, timestamp
    r = &s.rows[row]
    head = r.head
    length = r.length
    if (epoch != r.epoch or length == 0 or (r.txn_first_offset >= 0 and not b.is_transactional[i])
            or not in_sequence(r.ring_last_seq[ring_pos(head, length - 1)], first_seq)
            or find_duplicate(r, first_seq, last_seq) >= 0):
        return False
    next_offset = &s.stream_next_offset[r.stream_index]
    first_offset = next_offset[0]
    if first_offset > INT64_MAX - count:
        return False
    last_offset = first_offset + count - 1
    out.base_offset[i] = first_offset
    out.last_offset[i] = last_offset
    next_offset[0] = last_offset + 1
    if length < RING:
        pos = ring_pos(head, length)
        r.length = <int8_t>(length + 1)
    else:
        pos = head
        r.head = <int8_t>ring_pos(head, 1)
    timestamp = b.max_timestamp[i]
    r.ring_last_seq[pos] = <int32_t>last_seq
    r.ring_offset_delta[pos] = <int32_t>(count - 1)
    r.ring[pos].last_offset = last_offset
    r.ring[pos].timestamp = timestamp
    r.last_timestamp = timestamp
    if r.txn_first_offset < 0 and b.is_transactional[i]:
        r.txn_first_offset = first_offset  # the first transactional batch opens the transaction
    return True


cdef inline void prefetch(const Batches *b, const State *s, Py_ssize_t i, Py_ssize_t stop) noexcept nogil:
    # Ask for the cache lines later batches will need: a large table is a walk of dependent misses (slot, then
    # row) that the processor cannot overlap on its own. Hints only: a wrong guess (a probe past the first slot)
    # costs nothing but the fetch.
    cdef Py_ssize_t j = i + SLOT_AHEAD
    cdef const Slot *slot
    if j < stop:
        IDEMCORE_PREFETCH(&s.slots[producer_hash(b.producer_id[j], b.stream[j]) & s.slot_mask])
    j = i + ROW_AHEAD
    if j < stop:
        slot = &s.slots[producer_hash(b.producer_id[j], b.stream[j]) & s.slot_mask]
        if slot.row >= 0:
            IDEMCORE_PREFETCH(&s.rows[slot.row])  # the first line: all an in-sequence batch reads
            IDEMCORE_PREFETCH(&s.rows[slot.row].ring[0])  # and the lines of the ring entry it writes
            IDEMCORE_PREFETCH(&s.rows[slot.row].ring[RING - 1])


cdef void prefill(Verdicts *out, Py_ssize_t start, Py_ssize_t stop) noexcept nogil:
    # The verdict columns an appended batch has, whatever its offsets (a streaming pass the compiler vectorises).
    cdef Py_ssize_t i
    for i in range(start, stop):
        out.status[i] = APPENDED
    for i in range(start, stop):
        out.error_code[i] = E_NONE
    for i in range(start, stop):
        out.finding[i] = F_NONE
    for i in range(start, stop):
        out.expected[i] = -1


# ---------------------------------------------------------------- filling the structs (once per call)


cdef int require(bint ok, str what) except -1:
    if not ok:
        raise ValueError(f"kernel arrays of inconsistent shapes: {what}")
    return 0


cdef Batches batch_columns(
    const int32_t[::1] stream, const int64_t[::1] producer_id, const int16_t[::1] producer_epoch,
    const int32_t[::1] base_sequence, const int32_t[::1] last_sequence, const int64_t[::1] base_offset,
    const int32_t[::1] record_count, const int64_t[::1] max_timestamp, const uint8_t[::1] is_transactional,
    const uint8_t[::1] is_control, const int8_t[::1] control_type, const int32_t[::1] coordinator_epoch,
    Py_ssize_t start, Py_ssize_t stop,
) except *:
    cdef Batches b
    if start < stop:
        require(start >= 0 and min(stream.shape[0], producer_id.shape[0], producer_epoch.shape[0],
                                   base_sequence.shape[0], last_sequence.shape[0], base_offset.shape[0],
                                   record_count.shape[0], max_timestamp.shape[0], is_transactional.shape[0],
                                   is_control.shape[0], control_type.shape[0], coordinator_epoch.shape[0]) >= stop,
                "start..stop beyond the batch columns")
    b.stream = &stream[0]
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


cdef int check_stream_shapes(const int32_t[::1] sslot_stream, const int32_t[::1] sslot_index,
                                const int32_t[::1] stream_id, const int64_t[::1] stream_next_offset,
                                const int64_t[::1] counters, Py_ssize_t rows, Py_ssize_t slots) except -1:
    cdef Py_ssize_t sslots = sslot_index.shape[0]
    require(slots > rows, "producer index")
    require(power_of_two(sslots) and sslot_stream.shape[0] == sslots and sslots > stream_id.shape[0]
            and stream_next_offset.shape[0] >= stream_id.shape[0], "stream index")
    require(counters.shape[0] >= 3, "counters")
    return 0


cdef Lookup lookup_of(
    const int64_t[:, ::1] slot_i64, const int32_t[:, ::1] slot_i32, const int64_t[:, ::1] row_i64,
    const int32_t[:, ::1] row_i32, const int16_t[:, ::1] row_i16, const int8_t[:, ::1] row_i8,
    const int32_t[::1] sslot_stream, const int32_t[::1] sslot_index, const int32_t[::1] stream_id,
    const int64_t[::1] stream_next_offset, const int64_t[::1] counters,
) except *:
    cdef Lookup s
    s.slots = slots_of(slot_i64, slot_i32)
    s.slot_mask = slot_i64.shape[0] - 1
    s.rows = rows_of(row_i64, row_i32, row_i16, row_i8)
    check_stream_shapes(sslot_stream, sslot_index, stream_id, stream_next_offset, counters,
                           row_i64.shape[0], slot_i64.shape[0])
    s.sslot_stream = &sslot_stream[0]
    s.sslot_index = &sslot_index[0]
    s.sslot_mask = sslot_index.shape[0] - 1
    s.stream_next_offset = &stream_next_offset[0]
    return s


cdef State state_of(
    int64_t[:, ::1] slot_i64, int32_t[:, ::1] slot_i32, int64_t[:, ::1] row_i64, int32_t[:, ::1] row_i32,
    int16_t[:, ::1] row_i16, int8_t[:, ::1] row_i8,
    int32_t[::1] sslot_stream, int32_t[::1] sslot_index, int32_t[::1] stream_id,
    int64_t[::1] stream_next_offset, int64_t[::1] counters,
) except *:
    cdef State s
    s.slots = <Slot *>slots_of(slot_i64, slot_i32)
    s.slot_mask = slot_i64.shape[0] - 1
    s.rows = <Row *>rows_of(row_i64, row_i32, row_i16, row_i8)
    check_stream_shapes(sslot_stream, sslot_index, stream_id, stream_next_offset, counters,
                           row_i64.shape[0], slot_i64.shape[0])
    s.sslot_stream = &sslot_stream[0]
    s.sslot_index = &sslot_index[0]
    s.sslot_mask = sslot_index.shape[0] - 1
    s.stream_id = &stream_id[0]
    s.stream_next_offset = &stream_next_offset[0]
    s.counters = &counters[0]
    s.row_capacity = row_i64.shape[0]
    s.stream_capacity = stream_id.shape[0]
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


cdef Completed completed_of(int64_t[::1] counters, int32_t[::1] txn_stream, int64_t[::1] txn_producer_id,
                            int64_t[::1] txn_first_offset, int64_t[::1] txn_last_offset,
                            uint8_t[::1] txn_aborted, int64_t[::1] txn_marker) noexcept:
    cdef Completed done
    done.counters = &counters[0]
    done.stream = &txn_stream[0]
    done.producer_id = &txn_producer_id[0]
    done.first_offset = &txn_first_offset[0]
    done.last_offset = &txn_last_offset[0]
    done.aborted = &txn_aborted[0]
    done.marker = &txn_marker[0]
    done.capacity = min(txn_stream.shape[0], txn_producer_id.shape[0], txn_first_offset.shape[0],
                        txn_last_offset.shape[0], txn_aborted.shape[0], txn_marker.shape[0])
    return done


# ---------------------------------------------------------------- the entry points


def validate_batches(
    const int32_t[::1] stream, const int64_t[::1] producer_id, const int16_t[::1] producer_epoch,
    const int32_t[::1] base_sequence, const int32_t[::1] last_sequence, const int64_t[::1] base_offset,
    const int32_t[::1] record_count, const int64_t[::1] max_timestamp, const uint8_t[::1] is_transactional,
    const uint8_t[::1] is_control, const int8_t[::1] control_type, const int32_t[::1] coordinator_epoch,
    int origin, Py_ssize_t start, Py_ssize_t stop,
    int64_t[:, ::1] slot_i64, int32_t[:, ::1] slot_i32, int64_t[:, ::1] row_i64, int32_t[:, ::1] row_i32,
    int16_t[:, ::1] row_i16, int8_t[:, ::1] row_i8,
    int32_t[::1] sslot_stream, int32_t[::1] sslot_index, int32_t[::1] stream_id,
    int64_t[::1] stream_next_offset,
    int64_t[::1] counters,
    int8_t[::1] out_status, int16_t[::1] out_error_code, int64_t[::1] out_base_offset, int64_t[::1] out_last_offset,
    int8_t[::1] out_finding, int64_t[::1] out_expected,
    int32_t[::1] txn_stream, int64_t[::1] txn_producer_id, int64_t[::1] txn_first_offset,
    int64_t[::1] txn_last_offset, uint8_t[::1] txn_aborted, int64_t[::1] txn_marker,
):
    """Check and commit batches ``start..stop-1`` one after the other; return the first index not processed
    (``stop`` unless the table has no room for one more row or stream). See the reference."""
    cdef Batches b = batch_columns(stream, producer_id, producer_epoch, base_sequence, last_sequence, base_offset,
                                   record_count, max_timestamp, is_transactional, is_control, control_type,
                                   coordinator_epoch, start, stop)
    cdef State st = state_of(slot_i64, slot_i32, row_i64, row_i32, row_i16, row_i8, sslot_stream, sslot_index,
                             stream_id, stream_next_offset, counters)
    cdef Verdicts out = verdicts_of(out_status, out_error_code, out_base_offset, out_last_offset, out_finding,
                                    out_expected, start, stop)
    cdef Completed done = completed_of(counters, txn_stream, txn_producer_id, txn_first_offset, txn_last_offset,
                                       txn_aborted, txn_marker)
    cdef Py_ssize_t i
    cdef Py_ssize_t stopped = stop
    cdef bint client = origin == ORIGIN_CLIENT
    cdef bint ahead = st.row_capacity >= PREFETCH_MIN_ROWS  # (a table sized for many rows: they will come)
    with nogil:
        prefill(&out, start, stop)
        for i in range(start, stop):
            if ahead:
                prefetch(&b, &st, i, stop)
            if client and append_in_sequence(i, &b, &st, &out):
                continue
            if not apply_every_rule(i, &b, origin, &st, &out, &done):
                stopped = i
                break
    return stopped


def check_batches(
    const int32_t[::1] stream, const int64_t[::1] producer_id, const int16_t[::1] producer_epoch,
    const int32_t[::1] base_sequence, const int32_t[::1] last_sequence, const int64_t[::1] base_offset,
    const int32_t[::1] record_count, const int64_t[::1] max_timestamp, const uint8_t[::1] is_transactional,
    const uint8_t[::1] is_control, const int8_t[::1] control_type, const int32_t[::1] coordinator_epoch,
    int origin, Py_ssize_t start, Py_ssize_t stop,
    const int64_t[:, ::1] slot_i64, const int32_t[:, ::1] slot_i32, const int64_t[:, ::1] row_i64,
    const int32_t[:, ::1] row_i32, const int16_t[:, ::1] row_i16, const int8_t[:, ::1] row_i8,
    const int32_t[::1] sslot_stream, const int32_t[::1] sslot_index, const int32_t[::1] stream_id,
    const int64_t[::1] stream_next_offset,
    int64_t[::1] counters,
    int8_t[::1] out_status, int16_t[::1] out_error_code, int64_t[::1] out_base_offset, int64_t[::1] out_last_offset,
    int8_t[::1] out_finding, int64_t[::1] out_expected,
    int32_t[::1] txn_stream, int64_t[::1] txn_producer_id, int64_t[::1] txn_first_offset,
    int64_t[::1] txn_last_offset, uint8_t[::1] txn_aborted, int64_t[::1] txn_marker,
):
    """Prepare: the verdicts of batches ``start..stop-1`` against the state as it stands, writing no state but
    ``counters[N_COMPLETED]`` and the ``txn_*`` columns (every batch sees the same state, so no two may belong
    to one (stream, producer id)). Returns ``stop``. See the reference."""
    cdef Batches b = batch_columns(stream, producer_id, producer_epoch, base_sequence, last_sequence, base_offset,
                                   record_count, max_timestamp, is_transactional, is_control, control_type,
                                   coordinator_epoch, start, stop)
    cdef Lookup look = lookup_of(slot_i64, slot_i32, row_i64, row_i32, row_i16, row_i8, sslot_stream,
                                 sslot_index, stream_id, stream_next_offset, counters)
    cdef Verdicts out = verdicts_of(out_status, out_error_code, out_base_offset, out_last_offset, out_finding,
                                    out_expected, start, stop)
    cdef Completed done = completed_of(counters, txn_stream, txn_producer_id, txn_first_offset, txn_last_offset,
                                       txn_aborted, txn_marker)
    with nogil:
        check_loop(&b, origin, &look, &out, &done, start, stop)
    return stop


cdef inline void check_loop(const Batches *b, int origin, const Lookup *look, Verdicts *out, Completed *done,
                            Py_ssize_t start, Py_ssize_t stop) noexcept nogil:
    cdef Py_ssize_t i
    for i in range(start, stop):
        check_batch(i, b, origin, look, out, done)


def commit_batches(
    const int32_t[::1] stream, const int64_t[::1] producer_id, const int16_t[::1] producer_epoch,
    const int32_t[::1] base_sequence, const int32_t[::1] last_sequence, const int64_t[::1] base_offset,
    const int32_t[::1] record_count, const int64_t[::1] max_timestamp, const uint8_t[::1] is_transactional,
    const uint8_t[::1] is_control, const int8_t[::1] control_type, const int32_t[::1] coordinator_epoch,
    Py_ssize_t start, Py_ssize_t stop,
    int64_t[:, ::1] slot_i64, int32_t[:, ::1] slot_i32, int64_t[:, ::1] row_i64, int32_t[:, ::1] row_i32,
    int16_t[:, ::1] row_i16, int8_t[:, ::1] row_i8,
    int32_t[::1] sslot_stream, int32_t[::1] sslot_index, int32_t[::1] stream_id,
    int64_t[::1] stream_next_offset,
    int64_t[::1] counters,
    const int8_t[::1] out_status, const int64_t[::1] out_base_offset, const int64_t[::1] out_last_offset,
):
    """Commit the batches of ``start..stop-1`` whose ``out_status`` is APPENDED; return the first index not
    processed (``stop`` unless the table ran out of room: grow it and call again from there). See the reference."""
    cdef Batches b = batch_columns(stream, producer_id, producer_epoch, base_sequence, last_sequence, base_offset,
                                   record_count, max_timestamp, is_transactional, is_control, control_type,
                                   coordinator_epoch, start, stop)
    cdef State st = state_of(slot_i64, slot_i32, row_i64, row_i32, row_i16, row_i8, sslot_stream, sslot_index,
                             stream_id, stream_next_offset, counters)
    cdef CommitVerdicts verdicts
    if start < stop:
        require(min(out_status.shape[0], out_base_offset.shape[0], out_last_offset.shape[0]) >= stop,
                "start..stop beyond the verdict columns")
    verdicts.status = &out_status[0]
    verdicts.base_offset = &out_base_offset[0]
    verdicts.last_offset = &out_last_offset[0]
    cdef Py_ssize_t stopped
    with nogil:
        stopped = commit_loop(&b, &st, &verdicts, start, stop)
    return stopped


cdef inline Py_ssize_t commit_loop(const Batches *b, State *st, const CommitVerdicts *verdicts, Py_ssize_t start,
                                   Py_ssize_t stop) noexcept nogil:
    # commit_batches' loop: the first index not processed.
    cdef Py_ssize_t i, slot
    for i in range(start, stop):
        if verdicts.status[i] != APPENDED:
            continue
        if st.counters[N_ROWS] >= st.row_capacity or st.counters[N_STREAMS] >= st.stream_capacity:
            return i
        slot = -1
        if b.producer_id[i] >= 0:
            slot = producer_slot(st.slots, st.slot_mask, b.producer_id[i], b.stream[i])
        commit_batch(i, slot, b, st, verdicts)
    return stop


cdef class BoundBatches:
    """check_batches and commit_batches over one set of arrays, their buffers taken once, here: a call of the
    module functions takes some 40 buffers (about 3 us, most of what a broker's one-batch append spent in the
    kernels), a call of these methods none. ``columns``, ``state``, ``verdicts``, ``txns``, ``commit``: the
    groups of idemcore.kernels.abi (BatchColumns, StateArrays, VerdictColumns, TxnColumns, CommitVerdicts), kept
    alive here; bind again once any array is replaced (the table grows, the columns are reallocated)."""

    cdef Batches b
    cdef Lookup look
    cdef State st
    cdef Verdicts out
    cdef Completed done
    cdef CommitVerdicts verdicts
    cdef Py_ssize_t rows
    cdef readonly tuple arrays

    def __init__(self, tuple columns, tuple state, tuple verdicts, tuple txns, tuple commit):
        require(len(columns) == 12 and len(state) == 11 and len(verdicts) == 6 and len(txns) == 6
                and len(commit) == 3, "the argument groups")
        self.arrays = (columns, state, verdicts, txns, commit)
        self.rows = min([len(column) for column in columns] + [len(column) for column in verdicts]
                        + [len(column) for column in commit])
        c, s, v, t = columns, state, verdicts, txns
        self.b = batch_columns(c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7], c[8], c[9], c[10], c[11], 0,
                               self.rows)
        self.look = lookup_of(s[0], s[1], s[2], s[3], s[4], s[5], s[6], s[7], s[8], s[9], s[10])
        self.st = state_of(s[0], s[1], s[2], s[3], s[4], s[5], s[6], s[7], s[8], s[9], s[10])
        self.out = verdicts_of(v[0], v[1], v[2], v[3], v[4], v[5], 0, self.rows)
        self.done = completed_of(s[10], t[0], t[1], t[2], t[3], t[4], t[5])
        self.verdicts = commit_verdicts_of(commit[0], commit[1], commit[2])

    def check_batches(self, int origin, Py_ssize_t start, Py_ssize_t stop):
        """check_batches(*columns, origin, start, stop, *state, *verdicts, *txns)."""
        if start < stop:
            require(start >= 0 and stop <= self.rows, "start..stop beyond the bound columns")
        with nogil:
            check_loop(&self.b, origin, &self.look, &self.out, &self.done, start, stop)
        return stop

    def commit_batches(self, Py_ssize_t start, Py_ssize_t stop):
        """commit_batches(*columns, start, stop, *state, *commit)."""
        cdef Py_ssize_t stopped
        if start < stop:
            require(start >= 0 and stop <= self.rows, "start..stop beyond the bound columns")
        with nogil:
            stopped = commit_loop(&self.b, &self.st, &self.verdicts, start, stop)
        return stopped


cdef CommitVerdicts commit_verdicts_of(const int8_t[::1] out_status, const int64_t[::1] out_base_offset,
                                       const int64_t[::1] out_last_offset) noexcept:
    cdef CommitVerdicts verdicts
    verdicts.status = &out_status[0]
    verdicts.base_offset = &out_base_offset[0]
    verdicts.last_offset = &out_last_offset[0]
    return verdicts


# reserve_loop comes in four copies, chosen by the types of two NULL pointers (Cython resolves ``if Ahead is
# Prefetching`` when it compiles each copy): whether it prefetches the index slots of batches ahead, whether it
# writes each batch's bucket. No copy tests either per batch; the prefetching copies hash each batch once (for
# its prefetch and its probe) and a run of one bucket is counted in a register. On stream (a) with N=10,000
# reserve_rows went from 162 to 146 ms per 20M batches; with N=100 (no prefetching) its time moved by up to 10%
# either way with nothing but the layout of the code (measured on builds of equivalent sources).
cdef struct Probing:
    char unused
cdef struct Prefetching:
    char unused
cdef struct OneLane:
    char unused
cdef struct Lanes:
    char unused

ctypedef fused Ahead:
    Probing
    Prefetching

ctypedef fused Bucketing:
    OneLane
    Lanes


cdef Py_ssize_t reserve_loop(const int32_t *parts, const int64_t *pids, Py_ssize_t start, Py_ssize_t stop,
                             State *st, int32_t *batch_bucket, int32_t *batch_row, int64_t *counts,
                             const Ahead *ahead, const Bucketing *buckets) noexcept nogil:
    # reserve_rows' loop over batches start..stop-1; returns the first index not processed.
    cdef Slot *slots = st.slots
    cdef Py_ssize_t mask = st.slot_mask
    cdef Py_ssize_t i, j, sslot, slot, index, row, bucket
    cdef int64_t part, pid
    cdef int64_t last_part = -1
    cdef Py_ssize_t last_index = -1
    cdef Py_ssize_t run_bucket = 0
    cdef int64_t run = 0  # batches of run_bucket not yet added to counts (a register, not counts[] each batch)
    cdef Py_ssize_t stopped = stop
    cdef int64_t hashes[SLOT_AHEAD]  # (Prefetching) the hashes of batches i..i+SLOT_AHEAD-1, at index mod SLOT_AHEAD:
    cdef int64_t hashed = 0          # each batch hashed once, for its prefetch and its probe
    if Ahead is Prefetching:
        for j in range(start, min(stop, start + SLOT_AHEAD)):
            hashes[j % SLOT_AHEAD] = producer_hash(pids[j], parts[j])
    for i in range(start, stop):
        if Ahead is Prefetching:
            hashed = hashes[i % SLOT_AHEAD]
            j = i + SLOT_AHEAD
            if j < stop:
                hashes[i % SLOT_AHEAD] = producer_hash(pids[j], parts[j])
                IDEMCORE_PREFETCH(&slots[hashes[i % SLOT_AHEAD] & mask])
        part = parts[i]
        pid = pids[i]
        bucket = 0
        row = -1
        if part >= 0:
            if part == last_part:
                index = last_index  # (a run of one stream: no probe)
            else:
                sslot = stream_slot(st.sslot_stream, st.sslot_index, st.sslot_mask, part)
                index = st.sslot_index[sslot]
                if index < 0:
                    index = st.counters[N_STREAMS]
                    if index + 1 >= st.stream_capacity:
                        stopped = i
                        break
                    st.sslot_stream[sslot] = <int32_t>part
                    st.sslot_index[sslot] = <int32_t>index
                    st.stream_id[index] = <int32_t>part
                    st.stream_next_offset[index] = 0
                    st.counters[N_STREAMS] = index + 1
                last_part = part
                last_index = index
            if pid >= 0:
                if Ahead is Prefetching:
                    slot = producer_slot_from(slots, mask, pid, part, hashed & mask)
                else:
                    slot = producer_slot(slots, mask, pid, part)
                row = slots[slot].row
                if row < 0:
                    row = st.counters[N_ROWS]
                    if row + 1 >= st.row_capacity:
                        stopped = i
                        break
                    slots[slot].producer_id = pid
                    slots[slot].stream = <int32_t>part
                    slots[slot].row = <int32_t>row
                    init_row(&st.rows[row], pid, part, index)
                    st.rows[row].reserved_by = i
                    st.counters[N_ROWS] = row + 1
            bucket = index + 1
        if bucket == run_bucket:
            run += 1
        else:
            counts[run_bucket] += run
            run_bucket = bucket
            run = 1
        if Bucketing is Lanes:
            batch_bucket[i] = <int32_t>bucket
        batch_row[i] = <int32_t>row
    counts[run_bucket] += run
    return stopped


def reserve_rows(
    const int32_t[::1] stream, const int64_t[::1] producer_id, Py_ssize_t start, Py_ssize_t stop,
    int64_t[:, ::1] slot_i64, int32_t[:, ::1] slot_i32, int64_t[:, ::1] row_i64, int32_t[:, ::1] row_i32,
    int16_t[:, ::1] row_i16, int8_t[:, ::1] row_i8,
    int32_t[::1] sslot_stream, int32_t[::1] sslot_index, int32_t[::1] stream_id,
    int64_t[::1] stream_next_offset,
    int64_t[::1] counters,
    int32_t[::1] batch_bucket, int32_t[::1] batch_row, int64_t[::1] bucket_count,
):
    """The pre-pass of a validation split into lanes: every batch's bucket (stream index + 1, 0 for a negative
    stream) and producer row, counted per bucket, adding entries for new streams and producers; returns
    the first index not processed (``stop`` unless the table would be left without a spare row or stream).
    See the reference."""
    cdef State st = state_of(slot_i64, slot_i32, row_i64, row_i32, row_i16, row_i8, sslot_stream, sslot_index,
                             stream_id, stream_next_offset, counters)
    if start < stop:
        require(start >= 0 and min(stream.shape[0], producer_id.shape[0], batch_row.shape[0]) >= stop
                and (batch_bucket.shape[0] == 0 or batch_bucket.shape[0] >= stop),
                "start..stop beyond the batch columns")
    require(bucket_count.shape[0] > st.stream_capacity, "bucket_count shorter than the streams + 1")
    cdef const int32_t *parts = &stream[0]
    cdef const int64_t *pids = &producer_id[0]
    cdef int64_t *counts = &bucket_count[0]
    cdef int32_t *rows = &batch_row[0]
    cdef int32_t *buckets = &batch_bucket[0] if batch_bucket.shape[0] > 0 else NULL  # (NULL: one lane, rows only)
    cdef bint ahead = st.row_capacity >= PREFETCH_MIN_ROWS
    cdef Py_ssize_t stopped
    with nogil:
        if ahead and buckets != NULL:
            stopped = reserve_loop(parts, pids, start, stop, &st, buckets, rows, counts,
                                   <const Prefetching *>NULL, <const Lanes *>NULL)
        elif ahead:
            stopped = reserve_loop(parts, pids, start, stop, &st, buckets, rows, counts,
                                   <const Prefetching *>NULL, <const OneLane *>NULL)
        elif buckets != NULL:
            stopped = reserve_loop(parts, pids, start, stop, &st, buckets, rows, counts,
                                   <const Probing *>NULL, <const Lanes *>NULL)
        else:
            stopped = reserve_loop(parts, pids, start, stop, &st, buckets, rows, counts,
                                   <const Probing *>NULL, <const OneLane *>NULL)
    return stopped


cdef inline void prefetch_listed(const State *s, const int64_t *listed, const int32_t *rows, Py_ssize_t k,
                                 Py_ssize_t stop) noexcept nogil:
    # prefetch() for the batches a lane lists, whose rows are known: the row of the listed batch ahead (its first
    # line, read, and the lines of the ring entry it writes: measured on stream (b), 11.2 -> 22.5 M batches/s).
    cdef Py_ssize_t row
    if k + SLOT_AHEAD < stop:
        row = rows[listed[k + SLOT_AHEAD] if listed != NULL else k + SLOT_AHEAD]
        if 0 <= row < s.row_capacity:
            IDEMCORE_PREFETCH(&s.rows[row])
            IDEMCORE_PREFETCH(&s.rows[row].ring[0])
            IDEMCORE_PREFETCH(&s.rows[row].ring[RING - 1])


def validate_listed(
    const int32_t[::1] stream, const int64_t[::1] producer_id, const int16_t[::1] producer_epoch,
    const int32_t[::1] base_sequence, const int32_t[::1] last_sequence, const int64_t[::1] base_offset,
    const int32_t[::1] record_count, const int64_t[::1] max_timestamp, const uint8_t[::1] is_transactional,
    const uint8_t[::1] is_control, const int8_t[::1] control_type, const int32_t[::1] coordinator_epoch,
    int origin, const int64_t[::1] listed, const int32_t[::1] batch_row, Py_ssize_t start, Py_ssize_t stop,
    int64_t[:, ::1] slot_i64, int32_t[:, ::1] slot_i32, int64_t[:, ::1] row_i64, int32_t[:, ::1] row_i32,
    int16_t[:, ::1] row_i16, int8_t[:, ::1] row_i8,
    int32_t[::1] sslot_stream, int32_t[::1] sslot_index, int32_t[::1] stream_id,
    int64_t[::1] stream_next_offset,
    int64_t[::1] counters,
    int8_t[::1] out_status, int16_t[::1] out_error_code, int64_t[::1] out_base_offset, int64_t[::1] out_last_offset,
    int8_t[::1] out_finding, int64_t[::1] out_expected,
    int32_t[::1] txn_stream, int64_t[::1] txn_producer_id, int64_t[::1] txn_first_offset,
    int64_t[::1] txn_last_offset, uint8_t[::1] txn_aborted, int64_t[::1] txn_marker,
):
    """validate_batches over the batches ``listed[start:stop]`` (ascending indices; an empty ``listed``: the
    batches ``start..stop-1``) whose rows reserve_rows gave in ``batch_row``, their verdict columns prefilled by
    the caller; returns the first position in ``listed`` not processed. See the reference."""
    cdef Py_ssize_t n = min(stream.shape[0], out_status.shape[0])
    cdef Batches b = batch_columns(stream, producer_id, producer_epoch, base_sequence, last_sequence, base_offset,
                                   record_count, max_timestamp, is_transactional, is_control, control_type,
                                   coordinator_epoch, 0, n)
    cdef State st = state_of(slot_i64, slot_i32, row_i64, row_i32, row_i16, row_i8, sslot_stream, sslot_index,
                             stream_id, stream_next_offset, counters)
    cdef Verdicts out = verdicts_of(out_status, out_error_code, out_base_offset, out_last_offset, out_finding,
                                    out_expected, 0, n)
    cdef Completed done = completed_of(counters, txn_stream, txn_producer_id, txn_first_offset, txn_last_offset,
                                       txn_aborted, txn_marker)
    cdef Py_ssize_t k, i, row
    cdef Py_ssize_t stopped = stop
    cdef Py_ssize_t bad = -1
    cdef bint client = origin == ORIGIN_CLIENT
    cdef bint ahead = st.row_capacity >= PREFETCH_MIN_ROWS
    cdef bint every = listed.shape[0] == 0
    if start < stop:
        require(start >= 0 and (stop <= n if every else listed.shape[0] >= stop),
                "start..stop beyond the listed batches")
    require(batch_row.shape[0] >= n, "batch_row shorter than the batch columns")
    cdef const int64_t *lst = NULL if every else &listed[0]
    cdef const int32_t *rows = &batch_row[0]
    if not every:
        with nogil:
            for k in range(start, stop):  # (every index checked first: prefetch reads the ones ahead)
                if lst[k] < 0 or lst[k] >= n:
                    bad = k
                    break
    require(bad < 0, "a listed batch beyond the batch columns")
    # The rows batch_row may name: below counters[N_ROWS] and the capacity, kept in a register (it was read from
    # counters[] each batch) and read again after every rule, which may add a row.
    cdef Py_ssize_t known = max(0, min(st.counters[N_ROWS], st.row_capacity))
    with nogil:
        for k in range(start, stop):
            i = k if every else lst[k]
            if ahead:
                prefetch_listed(&st, lst, rows, k, stop)
            if client and plain_data(i, &b):
                row = rows[i]
                if <size_t>row < <size_t>known:  # (0 <= row < known)
                    if append_to_row(i, row, &b, &st, &out):
                        continue
                elif append_in_sequence(i, &b, &st, &out):
                    continue
            if not apply_every_rule(i, &b, origin, &st, &out, &done):
                stopped = k
                break
            known = max(0, min(st.counters[N_ROWS], st.row_capacity))
    return stopped
