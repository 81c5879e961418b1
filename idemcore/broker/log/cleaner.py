"""Compaction of a partition log (Kafka's ``Cleaner``): keep the newest record of each key.

:func:`clean_log` compacts the segments below the log's cleanable offset: it keeps the newest record of each
key among them, drops tombstones (null values) in batches older than ``delete.retention.ms``, and records without
a key (Kafka counts them invalid and drops them). Batch base offsets, last offset deltas and producer metadata
stay (a batch keeps its producer's sequence range); a batch left empty is dropped unless it is its producer's
last in the log or its segment's last (Kafka keeps the last batch of a cleaning round; keeping each segment's
keeps segment boundaries exact, so recovery still refuses a segment cut or lost). Transactional and control
batches are kept as they are, and nothing at or after an open transaction is cleaned. Each segment is rewritten
whole beside itself, fsync'd and renamed over the old one; its indexes are derived again. The broker records the
cleanable offset first (cleaner-offset-checkpoint).

**Differences from Kafka**: the key map covers every segment below the stop (Kafka's covers a dirty section
chosen by ``min.cleanable.dirty.ratio``); segments are not merged; a tombstone's age is its batch's timestamp, or
its segment file's time when it has none (Kafka 3.x writes a delete horizon into the batch at the first
cleaning); aborted transactional data is not removed.
"""

from __future__ import annotations

import logging
from pathlib import Path

from idemcore.broker.log.partition_log import PartitionLog
from idemcore.broker.log.segment import LogSegment
from idemcore.record.kafka_files.segment import scan_segment
from idemcore.record.kafka_files.writers import write_file_atomically
from idemcore.record.v2 import decode_batch, encode_batch, iter_batches

log = logging.getLogger(__name__)


def clean_log(partition_log: PartitionLog, now_ms: int, delete_retention_ms: int) -> int:
    """Compact ``partition_log`` (module docstring); returns the bytes removed."""
    stop = partition_log.cleanable_offset()
    if stop is None:
        return 0
    segments = partition_log.segments
    latest: dict[bytes, int] = {}  # key -> offset of its newest record below stop
    last_of_producer: dict[int, int] = {}  # producer id -> base offset of its last batch in the log
    for segment in segments:
        if not segment.size:
            continue
        scan = scan_segment(Path(segment.log.name), verify_crc=False)
        for producer_id, base in zip(scan["producer_id"].tolist(), scan["base_offset"].tolist(), strict=True):
            if producer_id >= 0:
                last_of_producer[producer_id] = base
        if segment.base_offset >= stop:
            continue
        data = segment.log.read(0, segment.size)
        for position, _ in iter_batches(data):
            header, records = decode_batch(data, position, check_crc=False)
            if header.is_transactional or header.is_control:
                continue
            for record in records:
                if record.key is not None:
                    latest[record.key] = header.base_offset + record.offset_delta
    horizon = now_ms - delete_retention_ms
    removed = 0
    for segment in segments:
        if segment.base_offset >= stop:
            break
        removed += _clean_segment(partition_log, segment, latest, last_of_producer, horizon)
    partition_log.cleaned_offset = stop
    return removed


def _clean_segment(partition_log: PartitionLog, segment: LogSegment, latest: dict[bytes, int],
                   last_of_producer: dict[int, int], horizon: int) -> int:
    data = segment.log.read(0, segment.size)
    segment_time = partition_log.modified_ms(segment.base_offset)  # the age of batches without a timestamp
    out = bytearray()
    # A fresh segment's index bookkeeping over the kept batches (the files are written whole below).
    fresh = LogSegment(segment.base_offset, segment.log, segment.index, segment.time_index, segment.txn_index,
                       segment.index_interval_bytes)
    offset_index = bytearray()
    time_index = bytearray()
    position = 0
    while position < len(data):
        header, records = decode_batch(data, position, check_crc=True)
        raw: bytes | memoryview = memoryview(data)[position:position + header.size_in_bytes]
        position += header.size_in_bytes
        retained = records
        if not (header.is_control or header.is_transactional):
            age = header.max_timestamp if header.max_timestamp >= 0 else segment_time
            retained = [r for r in records if r.key is not None
                        and latest.get(r.key) == header.base_offset + r.offset_delta
                        and not (r.value is None and age < horizon)]
        if len(retained) != len(records):
            needed = position == len(data) or (
                header.producer_id >= 0 and last_of_producer.get(header.producer_id) == header.base_offset)
            if not retained and not needed:
                continue  # nothing left, and neither its producer's state nor its segment's end needs it
            raw = encode_batch(
                retained, base_offset=header.base_offset, base_timestamp=header.base_timestamp,
                max_timestamp=header.max_timestamp, producer_id=header.producer_id,
                producer_epoch=header.producer_epoch, base_sequence=header.base_sequence,
                is_transactional=header.is_transactional, timestamp_type=header.timestamp_type,
                partition_leader_epoch=header.partition_leader_epoch, last_offset_delta=header.last_offset_delta)
        entries = fresh.index_entries(len(out), len(raw), header.last_offset, header.max_timestamp)
        offset_index += entries[0]
        time_index += entries[1]
        out += raw
    if len(out) == len(data):
        return 0
    time_index += fresh.final_time_entry()
    for store, content in ((segment.log, out), (segment.index, offset_index), (segment.time_index, time_index)):
        store.close()
        write_file_atomically(store.name, bytes(content))  # whole or the old one: never half of each
        store.size = len(content)
    segment.forget_positions()
    log.info("%s: compacted %s from %d to %d bytes", partition_log.name, segment.log.name, len(data), len(out))
    return len(data) - len(out)
