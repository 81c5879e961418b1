# cython: language_level=3, boundscheck=False, wraparound=False, initializedcheck=False, cdivision=True
"""The producer's drain round compiled with Cython: an independent implementation of
``drain_partitions`` from idemcore.kernels.drain_reference (same arguments, same results).
Built by setup.py into idemcore.kernels.cython_drain.
"""

from libc.stdint cimport int16_t, int32_t, int64_t

from kernel_defs cimport *


cdef inline bint may_take(Py_ssize_t p, int64_t seq, bint idempotent, int64_t producer_id, int64_t producer_epoch,
                          const int64_t[::1] partition_producer_id, const int16_t[::1] partition_epoch,
                          const int32_t[::1] inflight_count, const int32_t[::1] first_inflight_sequence,
                          const unsigned char[::1] unresolved, const int32_t[::1] last_acked_sequence) noexcept nogil:
    # Retry gating (docs/rules.md §3): False stops the whole round, as in Kafka.
    if not idempotent:
        return True
    if producer_epoch < 0:
        return False
    cdef bint stale = partition_producer_id[p] != producer_id or partition_epoch[p] != producer_epoch
    if seq < 0:
        # New batch: not behind old-epoch batches, not before anything of this epoch is acknowledged
        # (beyond Kafka: an unknown producer's first sequence is taken as is), not while unresolved.
        return not (inflight_count[p] > 0 and (stale or last_acked_sequence[p] < 0) or unresolved[p] != 0)
    return inflight_count[p] == 0 or seq == first_inflight_sequence[p]


def drain_partitions(
    const unsigned char[::1] head_queued, const int32_t[::1] head_sequence, const int32_t[::1] head_record_count,
    const int32_t[::1] head_attempts, const int64_t[::1] head_last_attempt_ms, const int64_t[::1] head_size,
    int32_t[::1] next_sequence, int32_t[::1] last_acked_sequence, int64_t[::1] partition_producer_id,
    int16_t[::1] partition_epoch, int32_t[::1] inflight_count, int32_t[::1] first_inflight_sequence,
    const unsigned char[::1] unresolved,
    bint idempotent, int64_t producer_id, int64_t producer_epoch, int64_t now_ms, int64_t retry_backoff_ms,
    int64_t max_request_size,
    int64_t[::1] cursor, int32_t[::1] out_stream, int32_t[::1] out_base_sequence, unsigned char[::1] out_reset,
):
    """One send round; see idemcore.kernels.drain_reference for the contract."""
    cdef Py_ssize_t n = head_queued.shape[0]
    cdef Py_ssize_t visited, p, start
    cdef Py_ssize_t taken = 0
    cdef int64_t size = 0
    cdef int64_t seq
    cdef bint reset
    if n == 0:
        return 0
    start = cursor[0] % n
    with nogil:
        for visited in range(n):
            p = (start + visited) % n
            cursor[0] = p
            if head_queued[p] == 0:
                continue
            if head_attempts[p] > 0 and now_ms - head_last_attempt_ms[p] < retry_backoff_ms:
                continue
            if taken > 0 and size + head_size[p] > max_request_size:
                break
            seq = head_sequence[p]
            if not may_take(p, seq, idempotent, producer_id, producer_epoch, partition_producer_id,
                            partition_epoch, inflight_count, first_inflight_sequence, unresolved, last_acked_sequence):
                break
            reset = False
            if idempotent and seq < 0:
                if partition_producer_id[p] != producer_id or partition_epoch[p] != producer_epoch:
                    reset = True
                    next_sequence[p] = 0
                    last_acked_sequence[p] = -1
                    partition_producer_id[p] = producer_id
                    partition_epoch[p] = <int16_t>producer_epoch
                seq = next_sequence[p]
                next_sequence[p] = <int32_t>seq_add(seq, head_record_count[p])
                if inflight_count[p] == 0:
                    first_inflight_sequence[p] = <int32_t>seq
                inflight_count[p] += 1
            out_stream[taken] = <int32_t>p
            out_base_sequence[taken] = <int32_t>seq
            out_reset[taken] = reset
            taken += 1
            size += head_size[p]
    return taken
