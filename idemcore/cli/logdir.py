"""``idemcore dump-log``: Kafka's log files printed, like ``kafka-dump-log.sh``.

A segment (``.log``) prints one line per batch (found by the native header scan, each header then read
whole), and with ``--records`` one line per record (decoded by the RecordBatch v2 codec); ``.index``,
``.timeindex``, ``.txnindex``, ``<offset>.snapshot`` and ``leader-epoch-checkpoint`` print their entries.
``--json`` prints one JSON object per line instead, with the same field names. Whatever is wrong in a file
(a torn tail, a CRC mismatch, a malformed entry) is one line on standard error naming the file and the byte
position (and an ``error`` object with ``--json``); the exit status is then 1.
"""

from __future__ import annotations

import argparse
import json
import mmap
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from idemcore.cli.options import BACKEND_CHOICES, BACKEND_HELP

# The readers are imported by the command when it runs: `idemcore --help` stays quick.

#: Text rows: the batch's timestamp prints as Kafka prints it, "CreateTime: 1700000000000".
_TIMESTAMP_KEYS = ("timestampType", "maxTimestamp")
_MARKERS = {0: "ABORT", 1: "COMMIT"}


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "none"
    if isinstance(value, list):
        return "[" + ",".join(map(str, value)) + "]"
    return str(value)


class _Out:
    """Where rows and errors go: text lines or JSON objects on standard output, errors on standard error."""

    def __init__(self, as_json: bool):
        self.as_json = as_json
        self.errors = 0

    def header(self, line: str) -> None:
        if not self.as_json:
            print(line)

    def row(self, path: Path, kind: str, row: dict[str, Any], prefix: str = "") -> None:
        if self.as_json:
            print(json.dumps({"file": str(path), "type": kind, **row}))
            return
        parts = []
        for key, value in row.items():
            if key == "timestampType":
                parts.append(f"{value}: {_text(row['maxTimestamp' if 'maxTimestamp' in row else 'timestamp'])}")
            elif key not in ("maxTimestamp", "timestamp") or "timestampType" not in row:
                parts.append(f"{key}: {_text(value)}")
        print(prefix + " ".join(parts))

    def error(self, path: Path, position: int | None, message: str) -> None:
        self.errors += 1
        where = "" if position is None else f"position {position}: "
        print(f"idemcore: error: {path}: {where}{message}", file=sys.stderr)
        if self.as_json:
            print(json.dumps({"file": str(path), "type": "error", "position": position, "error": message}))

    def note(self, path: Path, message: str) -> None:
        print(f"idemcore: note: {path}: {message}", file=sys.stderr)


def _batch_rows(path: Path, backend: str | None, records: bool, out: _Out) -> None:
    from idemcore.record.kafka_files import STOP_ZERO_PADDING, scan_segment
    from idemcore.record.v2 import CorruptRecordError, TimestampType, decode_batch, read_header
    from idemcore.record.v2.compression import Compression

    scan = scan_segment(path, backend=backend)
    out.header(f"Dumping {path}")
    if scan.base_offset is not None:
        out.header(f"Log starting offset: {scan.base_offset}")
    columns = scan.columns
    with path.open("rb") as file:
        mapped = mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) if scan.size else b""
        try:
            for row in range(len(scan)):
                position = int(columns["position"][row])
                header = read_header(mapped, position)
                codec = header.attributes & 0x07
                batch: dict[str, Any] = {
                    "baseOffset": header.base_offset, "lastOffset": header.last_offset,
                    "count": header.record_count, "baseSequence": header.base_sequence,
                    "lastSequence": int(columns["last_sequence"][row]), "producerId": header.producer_id,
                    "producerEpoch": header.producer_epoch, "partitionLeaderEpoch": header.partition_leader_epoch,
                    "isTransactional": header.is_transactional, "isControl": header.is_control,
                    "deleteHorizonMs": header.delete_horizon_ms, "position": position,
                    "timestampType": "LogAppendTime" if header.timestamp_type == TimestampType.LOG_APPEND_TIME
                    else "CreateTime",
                    "maxTimestamp": header.max_timestamp, "size": header.size_in_bytes, "magic": header.magic,
                    "compresscodec": Compression(codec).name.lower() if codec <= 4 else f"unknown({codec})",
                    "crc": header.crc, "isvalid": bool(columns["crc_ok"][row] == 1),
                }
                if header.is_control:
                    control_type = int(columns["control_type"][row])
                    batch["endTxnMarker"] = _MARKERS.get(control_type, None if control_type < 0 else control_type)
                    batch["coordinatorEpoch"] = int(columns["coordinator_epoch"][row])
                out.row(path, "batch", batch)
                if records:
                    try:
                        _, decoded = decode_batch(mapped, position, check_crc=False)
                    except CorruptRecordError as exc:
                        out.error(path, exc.position if exc.position is not None else position, str(exc))
                        continue
                    for record in decoded:
                        sequence = -1 if header.base_sequence < 0 else \
                            (header.base_sequence + record.offset_delta) % 2**31
                        item: dict[str, Any] = {
                            "offset": header.offset_of(record), "timestampType": batch["timestampType"],
                            "timestamp": header.timestamp_of(record),
                            "keySize": -1 if record.key is None else len(record.key),
                            "valueSize": -1 if record.value is None else len(record.value),
                            "sequence": sequence, "headers": len(record.headers),
                            "headerKeys": [name for name, _ in record.headers],
                        }
                        if header.is_control:
                            _control_fields(record, item)
                        out.row(path, "record", item, prefix="| ")
        finally:
            if isinstance(mapped, mmap.mmap):
                mapped.close()
    if scan.stop == STOP_ZERO_PADDING:
        out.note(path, scan.stop_detail)
    for problem in scan.problems():
        out.error(path, problem.position, problem.message)


def _control_fields(record: Any, item: dict[str, Any]) -> None:
    from idemcore.record.v2 import CorruptRecordError, control_type_id, parse_end_txn_marker

    try:
        type_id = control_type_id(record.key)
        item["controlType"] = _MARKERS.get(type_id, type_id)
        if type_id in _MARKERS:
            item["coordinatorEpoch"] = parse_end_txn_marker(record).coordinator_epoch
    except CorruptRecordError as exc:
        item["controlType"] = None
        item["controlError"] = str(exc)


def _entries(path: Path) -> tuple[str, Iterator[dict[str, Any]], Any] | None:
    """(row type, rows, the reader's result) of an index, snapshot or checkpoint file; None for another name."""
    from idemcore.record.kafka_files import (
        read_leader_epoch_checkpoint,
        read_offset_index,
        read_snapshot,
        read_time_index,
        read_txn_index,
    )

    name = path.name
    if name.endswith(".index"):
        offsets = read_offset_index(path)
        return "offset_index_entry", ({"offset": e.offset, "position": e.position} for e in offsets.entries), offsets
    if name.endswith(".timeindex"):
        times = read_time_index(path)
        return "time_index_entry", ({"timestamp": e.timestamp, "offset": e.offset} for e in times.entries), times
    if name.endswith(".txnindex"):
        txns = read_txn_index(path)
        return "aborted_txn", ({"version": e.version, "producerId": e.producer_id, "firstOffset": e.first_offset,
                                "lastOffset": e.last_offset, "lastStableOffset": e.last_stable_offset}
                               for e in txns.entries), txns
    if name.endswith(".snapshot"):
        snapshot = read_snapshot(path)
        return "producer_snapshot_entry", (
            {"producerId": e.producer_id, "producerEpoch": e.producer_epoch, "coordinatorEpoch": e.coordinator_epoch,
             "currentTxnFirstOffset": e.current_txn_first_offset, "lastTimestamp": e.timestamp,
             "firstSequence": e.first_sequence, "lastSequence": e.last_sequence, "lastOffset": e.last_offset,
             "offsetDelta": e.offset_delta} for e in snapshot.entries), snapshot
    if name == "leader-epoch-checkpoint":
        epochs = read_leader_epoch_checkpoint(path)
        return "leader_epoch_entry", ({"epoch": e.epoch, "startOffset": e.start_offset} for e in epochs.entries), \
            epochs
    return None


def run_dump_log(args: argparse.Namespace) -> int:
    out = _Out(args.json)
    try:
        for path in args.files:
            try:
                if path.name.endswith(".log"):
                    _batch_rows(path, args.backend, args.records, out)
                    continue
                found = _entries(path)
                if found is None:
                    out.error(path, None, "not a Kafka log file (expected .log, .index, .timeindex, .txnindex, "
                                          ".snapshot or leader-epoch-checkpoint)")
                    continue
                kind, rows, read = found
                out.header(f"Dumping {path}")
                for row in rows:
                    out.row(path, kind, row)
                for note in read.notes:
                    out.note(path, note)
                for problem in read.problems:
                    out.error(path, problem.position, problem.message)
            except OSError as exc:
                out.error(path, None, exc.strerror or str(exc))
        sys.stdout.flush()
    except BrokenPipeError:  # `idemcore dump-log ... | head`: the reader has what it wanted
        sys.stdout = open(os.devnull, "w")  # Python flushes stdout at exit: not into the closed pipe
        return 0
    return 1 if out.errors else 0


def add_commands(commands: Any, common: argparse.ArgumentParser) -> None:
    """Register ``dump-log``."""
    dump = commands.add_parser(
        "dump-log", parents=[common],
        help="print Kafka log files: segments batch by batch (like kafka-dump-log.sh), indexes, snapshots",
        description="Print each batch of Kafka segment files (<offset>.log) as kafka-dump-log.sh does: offsets, "
                    "count, position, timestamp, size, magic, compression, CRC and whether it holds, producer id, "
                    "epoch, sequences, transactional and control flags, and a control batch's marker; with "
                    "--records, each record too. Index (.index, .timeindex, .txnindex), producer snapshot "
                    "(.snapshot) and leader-epoch-checkpoint files print their entries. Anything wrong is one "
                    "line on standard error naming the file and the byte position; the exit status is then 1.")
    dump.add_argument("files", nargs="+", type=Path, metavar="FILE", help="files of a Kafka log directory")
    dump.add_argument("--records", action="store_true", help="also print every record of each batch")
    dump.add_argument("--json", action="store_true", help="one JSON object per line (type: batch, record, "
                                                          "offset_index_entry, ..., error)")
    dump.add_argument("--backend", default=None, choices=BACKEND_CHOICES, help=BACKEND_HELP)
    dump.set_defaults(run=run_dump_log)
