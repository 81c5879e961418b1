# cython: boundscheck=False, wraparound=False, initializedcheck=False, cdivision=True
"""Check the records section of a v2 batch without building a Python object per record: what a broker needs of a
batch it stores as sent (Kafka's LogValidator walks the records too). Twin of
``idemcore.kernels.record_scan_reference.scan_records``: it accepts exactly what
``idemcore.record.v2.codec.decode_batch`` decodes, and also requires offset deltas 0..count-1."""

from libc.stdint cimport int64_t, uint64_t

cdef enum:  # scan_records statuses
    SCAN_OK = 0
    SCAN_MALFORMED = 1
    SCAN_OFFSET_DELTA = 2


cdef inline Py_ssize_t _zigzag(const unsigned char[::1] data, Py_ssize_t pos, Py_ssize_t end, int max_bytes,
                               int bits, int64_t* out) noexcept nogil:
    """The zig-zag varint at ``pos`` into ``out``: the position after it, or -1 when it is cut off, longer than
    ``max_bytes`` or wider than ``bits`` (read_varint / read_varlong's rules)."""
    cdef uint64_t raw = 0
    cdef int shift = 0
    cdef unsigned char b
    while True:
        if pos >= end:
            return -1
        b = data[pos]
        pos += 1
        if shift == 63 and (b & 0x7F) > 1:
            return -1  # more than 64 bits
        raw |= (<uint64_t>(b & 0x7F)) << shift
        if b < 0x80:
            break
        shift += 7
        if shift >= 7 * max_bytes:
            return -1
    if bits < 64 and (raw >> bits) != 0:
        return -1
    out[0] = <int64_t>(raw >> 1) ^ -(<int64_t>(raw & 1))
    return pos


cdef int _scan(const unsigned char[::1] data, Py_ssize_t count, Py_ssize_t* where, Py_ssize_t* at,
               Py_ssize_t* null_keys, Py_ssize_t* with_headers, int64_t* max_delta) noexcept nogil:
    cdef Py_ssize_t end = data.shape[0]
    cdef Py_ssize_t pos = 0, record_end, index = 0, headers, k, nulls = 0, headed = 0
    cdef int64_t value
    where[0] = 0
    with_headers[0] = 0
    while index < count:
        where[0] = pos
        at[0] = index
        null_keys[0] = nulls
        pos = _zigzag(data, pos, end, 5, 32, &value)  # length
        if pos < 0 or value < 0 or value > end - pos:
            return SCAN_MALFORMED
        record_end = pos + value
        if pos >= record_end:
            return SCAN_MALFORMED
        pos += 1  # attributes
        pos = _zigzag(data, pos, end, 10, 64, &value)  # timestamp delta
        if pos < 0:
            return SCAN_MALFORMED
        if index == 0 or value > max_delta[0]:
            max_delta[0] = value
        pos = _zigzag(data, pos, end, 5, 32, &value)  # offset delta
        if pos < 0:
            return SCAN_MALFORMED
        if value != index:
            return SCAN_OFFSET_DELTA
        pos = _zigzag(data, pos, end, 5, 32, &value)  # key
        if pos < 0 or value < -1 or value > record_end - pos:
            return SCAN_MALFORMED
        if value == -1:
            nulls += 1
        else:
            pos += value
        pos = _zigzag(data, pos, end, 5, 32, &value)  # value
        if pos < 0 or value < -1 or value > record_end - pos:
            return SCAN_MALFORMED
        if value > 0:
            pos += value
        pos = _zigzag(data, pos, end, 5, 32, &value)  # header count
        if pos < 0 or value < 0 or value > record_end - pos:
            return SCAN_MALFORMED
        headers = value
        if headers > 0:
            headed += 1
        for k in range(headers):
            pos = _zigzag(data, pos, end, 5, 32, &value)  # header key: never null
            if pos < 0 or value < 0 or value > record_end - pos:
                return SCAN_MALFORMED
            pos += value
            pos = _zigzag(data, pos, end, 5, 32, &value)  # header value
            if pos < 0 or value < -1 or value > record_end - pos:
                return SCAN_MALFORMED
            if value > 0:
                pos += value
        if pos != record_end:
            return SCAN_MALFORMED
        index += 1
    where[0] = pos
    at[0] = index
    null_keys[0] = nulls
    with_headers[0] = headed
    if pos != end:
        return SCAN_MALFORMED
    return SCAN_OK


def scan_records(const unsigned char[::1] data, Py_ssize_t count):
    """``(status, position, record index, null keys, records with headers, largest timestamp delta)``: status 0
    when ``data`` holds exactly ``count`` well-formed records with offset deltas 0..count-1; 1 when it is
    malformed (the position and record where the scan stopped); 2 when a record's offset delta is not its index.
    The counts and the largest delta are of a whole scan (status 0; the delta 0 for no records)."""
    cdef Py_ssize_t where = 0, at = 0, nulls = 0, headed = 0
    cdef int64_t max_delta = 0
    cdef int status
    with nogil:
        status = _scan(data, count, &where, &at, &nulls, &headed, &max_delta)
    return status, where, at, nulls, headed, max_delta
