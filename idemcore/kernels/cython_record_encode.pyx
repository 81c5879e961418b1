# cython: language_level=3, boundscheck=False, wraparound=False, initializedcheck=False, cdivision=True
"""The records section of a RecordBatch v2 compiled with Cython: an independent implementation of
``encode_records`` from idemcore.kernels.record_encode_reference (same arguments, same bytes, same errors; the
format is described there). Built by setup.py into idemcore.kernels.cython_record_encode.

Why it exists: the producer encodes every batch it sends, and in Python ~70% of that time is varints. It holds the
GIL throughout (it reads Python objects: no nogil loop, unlike the kernels over arrays). Two passes over the
records: the first sizes every record (and checks every type; timestamp deltas kept in a C array), the second
writes into one bytearray of the exact size, with memcpy for keys and values. Errors are raised through the twin's
helpers so the messages are the same. The second pass checks every write against the end of the buffer, so even a header
sequence that changed between the passes (a list mutated by a ``__getitem__``) cannot write past it: it raises.
"""

from cpython.bytearray cimport PyByteArray_AS_STRING, PyByteArray_FromStringAndSize
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_Check, PyBytes_GET_SIZE
from cpython.mem cimport PyMem_Free, PyMem_Malloc
from cpython.unicode cimport PyUnicode_AsEncodedString, PyUnicode_DATA, PyUnicode_GET_LENGTH
from libc.stdint cimport int64_t, uint64_t
from libc.string cimport memcpy, memset

from idemcore.kernels.record_encode_reference import (
    bad_header_value,
    bad_type,
    check_lengths,
    delta_out_of_range,
    encode_header_key,
    header_pair,
    timestamp_of,
    too_long,
)

cdef extern from "Python.h":
    # A compact ASCII str: its characters are its UTF-8 bytes, at PyUnicode_DATA (a macro; no call).
    bint PyUnicode_IS_COMPACT_ASCII(object o)

cdef enum:
    INT32_MAX = 2147483647
    MAX_VARINT = 10  # bytes of the longest varint written (a uint64)


cdef inline Py_ssize_t varint_size(uint64_t raw) noexcept nogil:
    cdef Py_ssize_t size = 1
    while raw >= 0x80:
        raw >>= 7
        size += 1
    return size


cdef inline char *put_varint(char *p, uint64_t raw) noexcept nogil:
    while raw >= 0x80:
        p[0] = <char>((raw & 0x7F) | 0x80)
        p += 1
        raw >>= 7
    p[0] = <char>raw
    return p + 1


cdef inline Py_ssize_t nullable_size(object data, Py_ssize_t index, str what) except -1:
    """Bytes a nullable key or value takes with its length."""
    cdef Py_ssize_t n
    if data is None:
        return 1
    if not PyBytes_Check(data):
        raise bad_type(index, what, data)
    n = PyBytes_GET_SIZE(data)
    return varint_size((<uint64_t>n) << 1) + n


cdef inline tuple record_headers(tuple headers, Py_ssize_t index):
    """Record ``index``'s headers as a tuple of pairs (any sequence is read once, into a tuple)."""
    cdef object found = headers[index]
    if type(found) is tuple:
        return <tuple>found
    return tuple(found)


cdef inline object header_key_bytes(object name, Py_ssize_t index, Py_ssize_t number):
    """None for a compact ASCII str (read in place), else the UTF-8 bytes of the key (or the twin's error)."""
    if type(name) is str and PyUnicode_IS_COMPACT_ASCII(name):
        return None
    if type(name) is str:
        try:
            return PyUnicode_AsEncodedString(name, "utf-8", "surrogateescape")
        except UnicodeEncodeError:
            pass
    return encode_header_key(index, number, name)  # a str subclass, or the error naming the key


cdef inline tuple checked_pair(object pair, Py_ssize_t index, Py_ssize_t number):
    """A header as a ``(key, value)`` tuple: the pair itself when it is one, else what the twin makes of it (or
    its error naming the header)."""
    if type(pair) is tuple and len(<tuple>pair) == 2:
        return <tuple>pair
    return tuple(header_pair(index, number, pair))


cdef Py_ssize_t headers_size(tuple pairs, Py_ssize_t index) except -1:
    """Bytes of a record's header count and headers."""
    cdef Py_ssize_t count = len(pairs), number, n, size
    cdef object pair, name, value, encoded
    size = varint_size((<uint64_t>count) << 1)
    for number in range(count):
        pair = checked_pair(pairs[number], index, number)
        name = (<tuple>pair)[0]
        value = (<tuple>pair)[1]
        encoded = header_key_bytes(name, index, number)
        n = PyUnicode_GET_LENGTH(name) if encoded is None else PyBytes_GET_SIZE(encoded)
        size += varint_size((<uint64_t>n) << 1) + n
        if value is None:
            size += 1
        elif PyBytes_Check(value):
            n = PyBytes_GET_SIZE(value)
            size += varint_size((<uint64_t>n) << 1) + n
        else:
            raise bad_header_value(index, number, name, value)
    return size


cdef inline char *put_bytes(char *p, char *end, const char *data, Py_ssize_t n) except NULL:
    """Write ``n`` as a length then the ``n`` bytes at ``data``, or raise when they would pass ``end``."""
    if end - p < MAX_VARINT + n:
        if end - p < varint_size((<uint64_t>n) << 1) + n:
            raise RuntimeError("the records changed while they were being encoded")
    p = put_varint(p, (<uint64_t>n) << 1)
    memcpy(p, data, n)
    return p + n


cdef inline char *put_nullable(char *p, char *end, object data) except NULL:
    if data is None:
        if p >= end:
            raise RuntimeError("the records changed while they were being encoded")
        p[0] = 1  # length -1
        return p + 1
    if not PyBytes_Check(data):
        raise RuntimeError("the records changed while they were being encoded")
    return put_bytes(p, end, PyBytes_AS_STRING(data), PyBytes_GET_SIZE(data))


cdef char *put_headers(char *p, char *end, tuple pairs, Py_ssize_t index) except NULL:
    cdef Py_ssize_t count = len(pairs), number
    cdef object pair, name, value, encoded
    if end - p < varint_size((<uint64_t>count) << 1):
        raise RuntimeError("the records changed while they were being encoded")
    p = put_varint(p, (<uint64_t>count) << 1)
    for number in range(count):
        pair = checked_pair(pairs[number], index, number)
        name = (<tuple>pair)[0]
        value = (<tuple>pair)[1]
        encoded = header_key_bytes(name, index, number)
        if encoded is None:
            p = put_bytes(p, end, <const char *>PyUnicode_DATA(name), PyUnicode_GET_LENGTH(name))
        else:
            p = put_bytes(p, end, PyBytes_AS_STRING(encoded), PyBytes_GET_SIZE(encoded))
        p = put_nullable(p, end, value)
    return p


cdef int64_t int64_timestamp(object timestamp, Py_ssize_t index) except? -1:
    """A record's timestamp as an int64: an exact int read in C, anything else (or an int past int64) through
    the twin, which converts it or raises its error naming the record."""
    if type(timestamp) is int:
        try:
            return timestamp
        except OverflowError:
            pass
    return timestamp_of(index, timestamp)


cdef uint64_t zigzag_delta(int64_t timestamp, int64_t base, Py_ssize_t index) except? 0xFFFFFFFFFFFFFFFF:
    """The zig-zag varlong value of ``timestamp - base``, or the twin's error when the delta passes int64."""
    cdef int64_t delta = <int64_t>(<uint64_t>timestamp - <uint64_t>base)  # wraps: checked on the next line
    if ((timestamp ^ base) & (timestamp ^ delta)) < 0:  # operands of unlike sign, and the sign flipped
        raise delta_out_of_range(index, timestamp, base)
    return (<uint64_t>delta << 1) ^ <uint64_t>(delta >> 63)


def encode_records(values, keys, headers, Py_ssize_t reserve, timestamps=None):
    """``reserve`` zero bytes, then the records (see record_encode_reference)."""
    cdef tuple value_tuple = values if type(values) is tuple else tuple(values)
    cdef tuple key_tuple = None
    cdef tuple header_tuple = None
    cdef tuple timestamp_tuple = None
    cdef Py_ssize_t count = len(value_tuple), index, body, total = reserve
    cdef Py_ssize_t *lengths
    cdef uint64_t *deltas = NULL  # each record's zig-zag timestamp delta (None: every one 0)
    cdef int64_t base = 0
    cdef bytearray out
    cdef char *p
    cdef char *end
    cdef char *start
    cdef object key, value
    cdef tuple pairs = ()
    if reserve < 0:
        raise ValueError(f"reserve {reserve} is negative")
    if keys is not None:
        key_tuple = keys if type(keys) is tuple else tuple(keys)
    if headers is not None:
        header_tuple = headers if type(headers) is tuple else tuple(headers)
    if timestamps is not None:
        timestamp_tuple = timestamps if type(timestamps) is tuple else tuple(timestamps)
    check_lengths(count, key_tuple, header_tuple, timestamp_tuple)
    lengths = <Py_ssize_t *>PyMem_Malloc(max(count, 1) * sizeof(Py_ssize_t))
    if lengths == NULL:
        raise MemoryError()
    try:
        if timestamp_tuple is not None:
            deltas = <uint64_t *>PyMem_Malloc(max(count, 1) * sizeof(uint64_t))
            if deltas == NULL:
                raise MemoryError()
            if count:
                base = int64_timestamp(timestamp_tuple[0], 0)
        # Pass 1: every record's length (and every type checked).
        for index in range(count):
            body = 1 + varint_size((<uint64_t>index) << 1)  # attributes, offset delta
            if deltas == NULL:
                body += 1  # timestamp delta 0
            else:
                deltas[index] = zigzag_delta(int64_timestamp(timestamp_tuple[index], index), base, index)
                body += varint_size(deltas[index])
            body += nullable_size(None if key_tuple is None else key_tuple[index], index, "key")
            body += nullable_size(value_tuple[index], index, "value")
            if header_tuple is None:
                body += 1
            else:
                pairs = record_headers(header_tuple, index)
                body += headers_size(pairs, index) if len(pairs) else 1
            if body > INT32_MAX:
                raise too_long(index, body)
            lengths[index] = body
            total += varint_size((<uint64_t>body) << 1) + body
        # Pass 2: write them.
        out = PyByteArray_FromStringAndSize(NULL, total)
        p = PyByteArray_AS_STRING(out)
        end = p + total
        memset(p, 0, reserve)
        p += reserve
        for index in range(count):
            body = lengths[index]
            # The record's length, attributes, timestamp and offset deltas fit: pass 1 counted them in ``body``.
            if end - p < varint_size((<uint64_t>body) << 1) + body:
                raise RuntimeError("the records changed while they were being encoded")
            p = put_varint(p, (<uint64_t>body) << 1)
            start = p
            p[0] = 0  # attributes
            p = put_varint(p + 1, 0 if deltas == NULL else deltas[index])  # timestamp delta
            p = put_varint(p, (<uint64_t>index) << 1)
            p = put_nullable(p, end, None if key_tuple is None else key_tuple[index])
            p = put_nullable(p, end, value_tuple[index])
            if header_tuple is None:
                pairs = ()
            else:
                pairs = record_headers(header_tuple, index)
            if len(pairs):
                p = put_headers(p, end, pairs, index)
            elif p < end:
                p[0] = 0  # no headers
                p += 1
            else:
                raise RuntimeError("the records changed while they were being encoded")
            if p - start != body:
                raise RuntimeError("the records changed while they were being encoded")
        if p != end:
            raise RuntimeError("the records changed while they were being encoded")
    finally:
        PyMem_Free(lengths)
        PyMem_Free(deltas)
    return out
