# cython: language_level=3, boundscheck=False, wraparound=False, initializedcheck=False, cdivision=True
"""The header scan compiled with Cython: an independent implementation of ``scan_headers`` from
idemcore.kernels.header_scan_reference (same arguments, same results; the layout and the rules are described
there). Built by setup.py into idemcore.kernels.cython_header_scan.

The loop holds no GIL. CRC-32C is not written here: it is Google's ``crc32c_extend`` (hardware CRC
instructions), reached through a function pointer that header_scan_reference.crc32c_extend_address finds in
the google-crc32c wheel, on the first scan that verifies CRCs.
"""

from libc.stdint cimport int8_t, int16_t, int32_t, int64_t, uint8_t, uint16_t, uint32_t, uint64_t, uintptr_t

from kernel_defs cimport CONTROL_ABORT, CONTROL_COMMIT, SEQ_MAX, seq_add

ctypedef uint32_t (*crc32c_extend_t)(uint32_t crc, const uint8_t *data, size_t size) noexcept nogil

cdef extern from *:
    """
    /* A hint to fetch p's cache line (an asm on x86: GCC 12 dropped __builtin_prefetch from such loops). */
    #if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
      #define IDEMCORE_SCAN_PREFETCH(p) __asm__ volatile("prefetcht0 %0" :: "m"(*(const char *)(p)))
    #elif defined(__GNUC__)
      #define IDEMCORE_SCAN_PREFETCH(p) __builtin_prefetch((const void *)(p), 0, 3)
    #else
      #define IDEMCORE_SCAN_PREFETCH(p) ((void)0)
    #endif
    """
    void IDEMCORE_SCAN_PREFETCH(const void *p) noexcept nogil

cdef enum:
    # Without CRCs the scan reads one or two lines of each batch: each header a miss the processor does not see
    # coming (the next position is known only from this batch's length), so the lines up to this many bytes
    # ahead are asked for, as a stream. On bench_logdir.py's segments (~420-byte batches): 460 -> 86 ms per
    # 1.25 GB; with CRCs it made the scan slower (150 -> 165 ms), so it is not done there.
    READ_AHEAD = 4096
    CACHE_LINE = 64

cdef enum:
    # Offsets in a v2 batch (mirrors header_scan_reference; tests/test_header_scan.py compares them).
    BASE_OFFSET_AT = 0
    LENGTH_AT = 8
    LEADER_EPOCH_AT = 12
    MAGIC_AT = 16
    CRC_AT = 17
    ATTRIBUTES_AT = 21
    LAST_OFFSET_DELTA_AT = 23
    MAX_TIMESTAMP_AT = 35
    PRODUCER_ID_AT = 43
    PRODUCER_EPOCH_AT = 51
    BASE_SEQUENCE_AT = 53
    RECORD_COUNT_AT = 57
    RECORDS_AT = 61
    LOG_OVERHEAD = 12
    HEADER_UP_TO_MAGIC = 17
    MIN_BATCH_LENGTH = 49
    MAGIC_V2 = 2
    COMPRESSION_MASK = 0x07
    TRANSACTIONAL_FLAG = 0x10
    CONTROL_FLAG = 0x20
    # Why a scan stopped (cursor[1]).
    SCAN_END = 0
    SCAN_FULL = 1
    SCAN_TRUNCATED = 2
    SCAN_BAD_MAGIC = 3
    SCAN_BAD_LENGTH = 4
    # out_crc_ok
    CRC_BAD = 0
    CRC_OK = 1
    CRC_UNCHECKED = 2
    CONTROL_UNKNOWN = -1
    NO_COORDINATOR_EPOCH = -1
    # The facts slots of a cursor (header_scan_reference.FACT_*: the tests compare them).
    FACT_ROWS = 2
    FACT_CRC_BAD = 3
    FACT_FIRST_NOT_RISING = 4
    FACT_LAST_OFFSET = 5
    FACT_SPAN_DIFFERS = 6
    FACT_RECORDS = 7
    FACT_LOG_END = 8
    FACT_TRANSACTIONAL = 9
    FACT_CONTROL = 10
    FACT_ABORT_MARKERS = 11
    FACT_MIN_TIMESTAMP = 12
    FACT_MAX_TIMESTAMP = 13
    FACT_TIMESTAMP_FALLS = 14
    FACT_LAST_TIMESTAMP = 15
    SCAN_CURSOR_SLOTS = 16

#: The values above, by name, for the tests.
SCAN_CODES = {
    "READ_AHEAD": READ_AHEAD, "CACHE_LINE": CACHE_LINE,
    "BASE_OFFSET_AT": BASE_OFFSET_AT, "LENGTH_AT": LENGTH_AT, "LEADER_EPOCH_AT": LEADER_EPOCH_AT,
    "MAGIC_AT": MAGIC_AT, "CRC_AT": CRC_AT, "ATTRIBUTES_AT": ATTRIBUTES_AT,
    "LAST_OFFSET_DELTA_AT": LAST_OFFSET_DELTA_AT, "MAX_TIMESTAMP_AT": MAX_TIMESTAMP_AT,
    "PRODUCER_ID_AT": PRODUCER_ID_AT, "PRODUCER_EPOCH_AT": PRODUCER_EPOCH_AT, "BASE_SEQUENCE_AT": BASE_SEQUENCE_AT,
    "RECORD_COUNT_AT": RECORD_COUNT_AT, "RECORDS_AT": RECORDS_AT, "LOG_OVERHEAD": LOG_OVERHEAD,
    "HEADER_UP_TO_MAGIC": HEADER_UP_TO_MAGIC, "MIN_BATCH_LENGTH": MIN_BATCH_LENGTH, "MAGIC_V2": MAGIC_V2,
    "COMPRESSION_MASK": COMPRESSION_MASK, "TRANSACTIONAL_FLAG": TRANSACTIONAL_FLAG, "CONTROL_FLAG": CONTROL_FLAG,
    "SCAN_END": SCAN_END, "SCAN_FULL": SCAN_FULL, "SCAN_TRUNCATED": SCAN_TRUNCATED,
    "SCAN_BAD_MAGIC": SCAN_BAD_MAGIC, "SCAN_BAD_LENGTH": SCAN_BAD_LENGTH, "CRC_BAD": CRC_BAD, "CRC_OK": CRC_OK,
    "CRC_UNCHECKED": CRC_UNCHECKED, "CONTROL_UNKNOWN": CONTROL_UNKNOWN,
    "NO_COORDINATOR_EPOCH": NO_COORDINATOR_EPOCH, "FACT_ROWS": FACT_ROWS, "FACT_CRC_BAD": FACT_CRC_BAD,
    "FACT_FIRST_NOT_RISING": FACT_FIRST_NOT_RISING, "FACT_LAST_OFFSET": FACT_LAST_OFFSET,
    "FACT_SPAN_DIFFERS": FACT_SPAN_DIFFERS, "FACT_RECORDS": FACT_RECORDS, "FACT_LOG_END": FACT_LOG_END,
    "FACT_TRANSACTIONAL": FACT_TRANSACTIONAL, "FACT_CONTROL": FACT_CONTROL, "FACT_ABORT_MARKERS": FACT_ABORT_MARKERS,
    "FACT_MIN_TIMESTAMP": FACT_MIN_TIMESTAMP, "FACT_MAX_TIMESTAMP": FACT_MAX_TIMESTAMP,
    "FACT_TIMESTAMP_FALLS": FACT_TIMESTAMP_FALLS, "FACT_LAST_TIMESTAMP": FACT_LAST_TIMESTAMP,
    "SCAN_CURSOR_SLOTS": SCAN_CURSOR_SLOTS,
}

cdef crc32c_extend_t crc32c_extend = NULL


cdef int load_crc32c() except -1:
    global crc32c_extend
    if crc32c_extend == NULL:
        from idemcore.kernels.header_scan_reference import crc32c_extend_address, prepare_crc32c

        prepare_crc32c(True)  # ImportError without a CRC-32C package
        address, _source = crc32c_extend_address()
        crc32c_extend = <crc32c_extend_t><uintptr_t>address
    return 0


# Big-endian reads (gcc turns each into one load and a byte swap).
cdef inline uint32_t be_u32(const uint8_t *p) noexcept nogil:
    return (<uint32_t>p[0] << 24) | (<uint32_t>p[1] << 16) | (<uint32_t>p[2] << 8) | <uint32_t>p[3]


cdef inline int32_t be_i32(const uint8_t *p) noexcept nogil:
    return <int32_t>be_u32(p)


cdef inline int16_t be_i16(const uint8_t *p) noexcept nogil:
    return <int16_t>(<uint16_t>((<uint16_t>p[0] << 8) | <uint16_t>p[1]))


cdef inline int64_t be_i64(const uint8_t *p) noexcept nogil:
    return <int64_t>((<uint64_t>be_u32(p) << 32) | <uint64_t>be_u32(p + 4))


cdef inline int32_t last_sequence(int32_t base_sequence, int32_t record_count) noexcept nogil:
    # base + count - 1 wrapping at SEQ_MAX; a negative base (-1: no sequence) stays. The delta is brought into
    # [0, SEQ_MAX] first (C's % keeps the sign), so garbage counts wrap as in the reference.
    cdef int64_t space = <int64_t>SEQ_MAX + 1
    cdef int64_t delta
    if base_sequence < 0:
        return base_sequence
    delta = (<int64_t>record_count - 1) % space
    if delta < 0:
        delta += space
    return <int32_t>seq_add(base_sequence, delta)


cdef inline const uint8_t *read_varint(const uint8_t *p, const uint8_t *end, int64_t *value) noexcept nogil:
    # A zig-zag varint of at most 5 bytes, 32 bits kept (Kafka's readVarint); NULL if p is NULL or it runs
    # past end or 5 bytes.
    cdef uint64_t raw = 0
    cdef int shift = 0
    cdef uint8_t b
    while shift < 35:
        if p == NULL or p >= end:
            return NULL
        b = p[0]
        p += 1
        raw |= <uint64_t>(b & 0x7F) << shift
        if b < 0x80:
            raw = <uint32_t>raw  # Kafka keeps 32 bits
            value[0] = <int64_t>(raw >> 1) ^ -<int64_t>(raw & 1)
            return p
        shift += 7
    return NULL


cdef inline const uint8_t *skip_varint(const uint8_t *p, const uint8_t *end, int max_bytes) noexcept nogil:
    cdef int i
    cdef uint8_t b
    for i in range(max_bytes):
        if p == NULL or p >= end:
            return NULL
        b = p[0]
        p += 1
        if b < 0x80:
            return p
    return NULL


cdef inline void decode_control(const uint8_t *p, const uint8_t *end, int compression, int32_t record_count,
                                int *control_type, int32_t *coordinator_epoch) noexcept nogil:
    # The marker of a control batch whose records span p..end (see header_scan_reference.decode_control).
    cdef int64_t length, key_length, value_length
    cdef int16_t version, kind
    control_type[0] = CONTROL_UNKNOWN
    coordinator_epoch[0] = NO_COORDINATOR_EPOCH
    if compression != 0 or record_count < 1:
        return
    p = read_varint(p, end, &length)
    if p == NULL or length < 0 or length > end - p:
        return
    end = p + length
    p = skip_varint(p + 1, end, 10)  # attributes, timestamp delta
    p = skip_varint(p, end, 5)  # offset delta
    p = read_varint(p, end, &key_length)
    if p == NULL or key_length < 4 or key_length > end - p:
        return
    version = be_i16(p)
    kind = be_i16(p + 2)
    if version < 0 or kind < 0 or kind > 127:
        return
    control_type[0] = kind
    if kind != CONTROL_ABORT and kind != CONTROL_COMMIT:
        return
    p = read_varint(p + key_length, end, &value_length)
    if p == NULL or value_length < 6 or value_length > end - p or be_i16(p) < 0:
        return
    coordinator_epoch[0] = be_i32(p + 2)


def scan_headers(
    const uint8_t[::1] data, int64_t file_position, int32_t stream, bint verify_crc, int64_t[::1] cursor,
    int32_t[::1] out_stream, int64_t[::1] out_producer_id, int16_t[::1] out_producer_epoch,
    int32_t[::1] out_base_sequence, int32_t[::1] out_last_sequence, int64_t[::1] out_base_offset,
    int32_t[::1] out_record_count, int64_t[::1] out_max_timestamp, uint8_t[::1] out_is_transactional,
    uint8_t[::1] out_is_control, int8_t[::1] out_control_type, int32_t[::1] out_coordinator_epoch,
    int64_t[::1] out_position, int32_t[::1] out_batch_length, int64_t[::1] out_last_offset,
    int32_t[::1] out_leader_epoch, int8_t[::1] out_compression, uint8_t[::1] out_crc_ok,
):
    """Decode the batch headers of ``data`` from ``cursor[0]`` on; see idemcore.kernels.header_scan_reference."""
    cdef Py_ssize_t size = data.shape[0]
    cdef Py_ssize_t capacity
    cdef const uint8_t *base = NULL
    cdef const uint8_t *b
    cdef int64_t p, remaining, end
    cdef Py_ssize_t count = 0
    cdef int reason = SCAN_END
    cdef int32_t batch_length, base_sequence, record_count, coordinator_epoch
    cdef int16_t attributes
    cdef int64_t base_offset
    cdef int compression, control_type
    cdef uint8_t crc_ok
    cdef int64_t ahead  # (without CRCs) the first byte not yet asked for
    # Facts (a cursor of SCAN_CURSOR_SLOTS slots): kept in locals during the loop, written back after it.
    cdef bint facts = cursor.shape[0] >= SCAN_CURSOR_SLOTS
    cdef int64_t rows = 0, crc_bad = 0, first_not_rising = 0, previous_last = 0, span_differs = 0, records = 0
    cdef int64_t log_end = 0, transactional = 0, control = 0, aborts = 0, min_stamp = 0, max_stamp = 0
    cdef int64_t falls = 0, previous_stamp = 0, last_offset, max_timestamp, batch_end
    if cursor.shape[0] < 2:
        raise ValueError(f"cursor must have 2 slots (position, stop reason), not {cursor.shape[0]}")
    if not 0 <= cursor[0] <= size:
        raise ValueError(f"cursor[0] = {cursor[0]} is outside the data (0..{size})")
    capacity = min(out_stream.shape[0], out_producer_id.shape[0], out_producer_epoch.shape[0],
                   out_base_sequence.shape[0], out_last_sequence.shape[0], out_base_offset.shape[0],
                   out_record_count.shape[0], out_max_timestamp.shape[0], out_is_transactional.shape[0],
                   out_is_control.shape[0], out_control_type.shape[0], out_coordinator_epoch.shape[0],
                   out_position.shape[0], out_batch_length.shape[0], out_last_offset.shape[0],
                   out_leader_epoch.shape[0], out_compression.shape[0], out_crc_ok.shape[0])
    if verify_crc:
        load_crc32c()
    if size > 0:
        base = &data[0]
    p = cursor[0]
    ahead = p
    if facts:
        rows, crc_bad, first_not_rising = cursor[FACT_ROWS], cursor[FACT_CRC_BAD], cursor[FACT_FIRST_NOT_RISING]
        previous_last, span_differs, records = cursor[FACT_LAST_OFFSET], cursor[FACT_SPAN_DIFFERS], cursor[FACT_RECORDS]
        log_end, transactional, control = cursor[FACT_LOG_END], cursor[FACT_TRANSACTIONAL], cursor[FACT_CONTROL]
        aborts, min_stamp, max_stamp = cursor[FACT_ABORT_MARKERS], cursor[FACT_MIN_TIMESTAMP], cursor[FACT_MAX_TIMESTAMP]
        falls, previous_stamp = cursor[FACT_TIMESTAMP_FALLS], cursor[FACT_LAST_TIMESTAMP]
    with nogil:
        while True:
            remaining = size - p
            if remaining <= 0:
                reason = SCAN_END
                break
            if count >= capacity:
                reason = SCAN_FULL
                break
            if remaining < HEADER_UP_TO_MAGIC:
                reason = SCAN_TRUNCATED
                break
            b = base + p
            if not verify_crc:  # (a CRC reads every byte in order, which the processor sees coming)
                while ahead < p + READ_AHEAD and ahead < size:
                    IDEMCORE_SCAN_PREFETCH(base + ahead)
                    ahead += CACHE_LINE
            if b[MAGIC_AT] != MAGIC_V2:
                reason = SCAN_BAD_MAGIC
                break
            batch_length = be_i32(b + LENGTH_AT)
            if batch_length < MIN_BATCH_LENGTH:
                reason = SCAN_BAD_LENGTH
                break
            if batch_length > remaining - LOG_OVERHEAD:
                reason = SCAN_TRUNCATED
                break
            end = p + LOG_OVERHEAD + batch_length
            attributes = be_i16(b + ATTRIBUTES_AT)
            base_offset = be_i64(b + BASE_OFFSET_AT)
            base_sequence = be_i32(b + BASE_SEQUENCE_AT)
            record_count = be_i32(b + RECORD_COUNT_AT)
            compression = attributes & COMPRESSION_MASK
            control_type = CONTROL_UNKNOWN
            coordinator_epoch = 0
            if attributes & CONTROL_FLAG:
                decode_control(b + RECORDS_AT, base + end, compression, record_count, &control_type,
                               &coordinator_epoch)
            crc_ok = CRC_UNCHECKED
            if verify_crc:
                if crc32c_extend(0, b + ATTRIBUTES_AT, <size_t>(end - p - ATTRIBUTES_AT)) == be_u32(b + CRC_AT):
                    crc_ok = CRC_OK
                else:
                    crc_ok = CRC_BAD
            out_stream[count] = stream
            out_producer_id[count] = be_i64(b + PRODUCER_ID_AT)
            out_producer_epoch[count] = be_i16(b + PRODUCER_EPOCH_AT)
            out_base_sequence[count] = base_sequence
            out_last_sequence[count] = last_sequence(base_sequence, record_count)
            out_base_offset[count] = base_offset
            out_record_count[count] = record_count
            out_max_timestamp[count] = be_i64(b + MAX_TIMESTAMP_AT)
            out_is_transactional[count] = 1 if attributes & TRANSACTIONAL_FLAG else 0
            out_is_control[count] = 1 if attributes & CONTROL_FLAG else 0
            out_control_type[count] = <int8_t>control_type
            out_coordinator_epoch[count] = coordinator_epoch
            out_position[count] = file_position + p
            out_batch_length[count] = batch_length
            # Java's long addition: wraps at the int64 bounds (done in unsigned arithmetic, where C defines it).
            out_last_offset[count] = <int64_t>(<uint64_t>base_offset + <uint64_t><int64_t>be_i32(b + LAST_OFFSET_DELTA_AT))
            out_leader_epoch[count] = be_i32(b + LEADER_EPOCH_AT)
            out_compression[count] = <int8_t>compression
            out_crc_ok[count] = crc_ok
            if facts:
                last_offset = out_last_offset[count]
                max_timestamp = out_max_timestamp[count]
                if crc_ok == CRC_BAD:
                    crc_bad += 1
                if rows > 0 and first_not_rising < 0 and base_offset <= previous_last:
                    first_not_rising = rows
                previous_last = last_offset
                # last - base + 1 != count in int64 arithmetic that wraps: last != base + (count - 1), unsigned
                if <uint64_t>last_offset != <uint64_t>base_offset + <uint64_t>(<int64_t>record_count - 1):
                    span_differs += 1
                records += record_count
                batch_end = <int64_t>(<uint64_t>base_offset + <uint64_t><int64_t>record_count)
                if base_offset >= 0 and batch_end > base_offset and batch_end > log_end:
                    log_end = batch_end
                if attributes & TRANSACTIONAL_FLAG:
                    transactional += 1
                if attributes & CONTROL_FLAG:
                    control += 1
                    if control_type == CONTROL_ABORT:
                        aborts += 1
                if max_timestamp < min_stamp:
                    min_stamp = max_timestamp
                if max_timestamp > max_stamp:
                    max_stamp = max_timestamp
                if rows > 0 and max_timestamp < previous_stamp:
                    falls += 1
                previous_stamp = max_timestamp
                rows += 1
            count += 1
            p = end
    cursor[0] = p
    cursor[1] = reason
    if facts:
        cursor[FACT_ROWS], cursor[FACT_CRC_BAD], cursor[FACT_FIRST_NOT_RISING] = rows, crc_bad, first_not_rising
        cursor[FACT_LAST_OFFSET], cursor[FACT_SPAN_DIFFERS], cursor[FACT_RECORDS] = previous_last, span_differs, records
        cursor[FACT_LOG_END], cursor[FACT_TRANSACTIONAL], cursor[FACT_CONTROL] = log_end, transactional, control
        cursor[FACT_ABORT_MARKERS], cursor[FACT_MIN_TIMESTAMP], cursor[FACT_MAX_TIMESTAMP] = aborts, min_stamp, max_stamp
        cursor[FACT_TIMESTAMP_FALLS], cursor[FACT_LAST_TIMESTAMP] = falls, previous_stamp
    return count
