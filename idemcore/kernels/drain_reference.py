"""The reference drain kernel: which queued batches one produce request takes, and their sequences (docs/rules.md §3).

One call is one send round to one broker (Kafka's
``RecordAccumulator.drainBatchesForOneNode``). Partitions are visited
round-robin from a cursor; each contributes at most its head batch. A batch
gets its sequence when it is *first* drained, never at ``send()``; a retried
batch keeps the sequence it has. Beyond Kafka: until a batch of the
current epoch is acknowledged on a partition, only one is in flight there
(a broker that does not know the producer accepts any first sequence, so a
batch overtaking a lost one would be written ahead of it). Written in the subset of Python Numba
compiles; ``numba_rules`` compiles this source, ``cython_drain`` is an
independent implementation. Kernels never raise or allocate.

Per partition ``p`` (arrays indexed by its stream, the producer's dense id of the partition, as ``out_stream``):

- head of the queue: ``head_queued`` (0/1), ``head_sequence`` (-1: none yet),
  ``head_record_count``, ``head_attempts``, ``head_last_attempt_ms``, ``head_size``;
- sequence bookkeeping, updated in place: ``next_sequence``,
  ``last_acked_sequence``, ``partition_producer_id`` and ``partition_epoch``
  (whom the partition's sequences belong to), ``inflight_count``,
  ``first_inflight_sequence``, ``unresolved`` (0/1).

``cursor[0]``: the partition the round starts at; left at the last one
visited (Kafka's drain index). Outputs: ``out_stream[k]`` (the stream: the producer's dense id of the partition),
``out_base_sequence[k]`` and ``out_reset[k]`` (1 when this drain restarted the
partition's sequences at 0 for a new producer id or epoch) for the ``k``-th
batch taken; returns how many were taken.
"""

from __future__ import annotations

from idemcore.protocol.sequences import seq_add


def drain_partitions(
    head_queued, head_sequence, head_record_count, head_attempts, head_last_attempt_ms, head_size,
    next_sequence, last_acked_sequence, partition_producer_id, partition_epoch,
    inflight_count, first_inflight_sequence, unresolved,
    idempotent, producer_id, producer_epoch, now_ms, retry_backoff_ms, max_request_size,
    cursor, out_stream, out_base_sequence, out_reset,
):
    n = head_queued.shape[0]
    if n == 0:
        return 0
    idempotent = int(idempotent)
    producer_id = int(producer_id)
    producer_epoch = int(producer_epoch)
    now_ms = int(now_ms)
    retry_backoff_ms = int(retry_backoff_ms)
    max_request_size = int(max_request_size)
    start = int(cursor[0]) % n
    p = start
    taken = 0
    size = 0
    while True:
        cursor[0] = p
        here = p
        p = (p + 1) % n
        if head_queued[here] != 0:
            attempts = int(head_attempts[here])
            waited = now_ms - int(head_last_attempt_ms[here])
            if attempts > 0 and waited < retry_backoff_ms:
                pass  # still backing off: skip this partition this round
            else:
                batch_size = int(head_size[here])
                if taken > 0 and size + batch_size > max_request_size:
                    break  # the request is full
                seq = int(head_sequence[here])
                reset = 0
                if idempotent != 0:
                    if producer_epoch < 0:
                        break  # no producer id yet: nothing may be sent
                    in_flight = int(inflight_count[here])
                    stale = int(partition_producer_id[here]) != producer_id or \
                        int(partition_epoch[here]) != producer_epoch
                    if seq < 0 and in_flight > 0 and stale:
                        break  # batches of an older epoch still in flight: a new one must wait
                    if seq < 0 and in_flight > 0 and int(last_acked_sequence[here]) < 0:
                        # Beyond Kafka: nothing acknowledged yet in this epoch, so the broker may not know
                        # the producer and would take any sequence first; one batch at a time until it does.
                        break
                    if seq < 0 and unresolved[here] != 0:
                        break  # earlier sequences are unresolved: nothing new until they are
                    if seq >= 0 and in_flight > 0 and seq != int(first_inflight_sequence[here]):
                        break  # only the oldest outstanding batch may be resent
                    if seq < 0:
                        if stale:
                            # First batch for a new producer id or epoch: sequences restart at 0.
                            next_sequence[here] = 0
                            last_acked_sequence[here] = -1
                            partition_producer_id[here] = producer_id
                            partition_epoch[here] = producer_epoch
                            reset = 1
                        seq = int(next_sequence[here])
                        next_sequence[here] = seq_add(seq, int(head_record_count[here]))
                        if in_flight == 0:
                            first_inflight_sequence[here] = seq
                        inflight_count[here] = in_flight + 1
                out_stream[taken] = here
                out_base_sequence[taken] = seq
                out_reset[taken] = reset
                taken += 1
                size += batch_size
        if p == start:
            break
    return taken
