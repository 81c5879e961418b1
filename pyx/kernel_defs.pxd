# What the Cython kernels share (cimported by idemcore/kernels/cython_kernels.pyx and cython_drain.pyx; setup.py
# puts pyx/ on Cython's include path): the kernel codes of idemcore.kernels.reference and the sequence arithmetic
# of idemcore.protocol.sequences. Only enums and inline functions: nothing here exists at run time.

from libc.stdint cimport int64_t

cdef enum:
    # Status of a batch.
    APPENDED = 0
    DUPLICATE = 1
    REJECTED = 2
    # Who wrote the batch.
    ORIGIN_CLIENT = 0
    ORIGIN_COORDINATOR = 1
    ORIGIN_REPLICATION = 2
    # Kafka error codes (reference: NONE, OUT_OF_ORDER_SEQUENCE_NUMBER, ...).
    E_NONE = 0
    E_UNKNOWN_SERVER_ERROR = -1  # a batch whose offsets would pass the int64 space (reference: check_offsets)
    E_OUT_OF_ORDER_SEQUENCE_NUMBER = 45
    E_INVALID_PRODUCER_EPOCH = 47
    E_INVALID_TXN_STATE = 48
    E_TRANSACTION_COORDINATOR_FENCED = 52
    E_INVALID_RECORD = 87
    # Control batch types.
    CONTROL_ABORT = 0
    CONTROL_COMMIT = 1
    # Findings: why a batch was not simply appended.
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
    # Batches retained per producer (reference: RING_SIZE).
    RING = 5
    # counters[] layout, shared with idemcore.state.table.
    N_ROWS = 0
    N_STREAMS = 1
    N_COMPLETED = 2
    # Sequences live in [0, SEQ_MAX] and wrap; one less than SEQ_HALF ahead (wrapping) counts as "ahead".
    SEQ_MAX = 2147483647
    SEQ_HALF = 1073741824


cdef inline int64_t wrap_seq(int64_t s) noexcept nogil:
    # Bring a sum or difference of two sequences back into [0, SEQ_MAX].
    if s > SEQ_MAX:
        return s - SEQ_MAX - 1
    if s < 0:
        return s + SEQ_MAX + 1
    return s


cdef inline int64_t seq_add(int64_t seq, int64_t delta) noexcept nogil:
    # seq + delta in the wrapping sequence space (0 <= delta <= SEQ_MAX).
    return wrap_seq(seq + delta)


cdef inline int64_t seq_sub(int64_t seq, int64_t delta) noexcept nogil:
    # seq - delta in the wrapping sequence space; also the distance from delta forward to seq.
    return wrap_seq(seq - delta)


cdef inline bint in_sequence(int64_t last_seq, int64_t next_seq) noexcept nogil:
    # next_seq directly follows last_seq (wrapping at SEQ_MAX).
    return next_seq == last_seq + 1 or (next_seq == 0 and last_seq == SEQ_MAX)
