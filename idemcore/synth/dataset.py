"""generate(): a dataset of produce attempts with planted anomalies, plus its ground truth.

Two formats:

- ``parquet`` (the default): ``OUT/data/<topic>-<first partition>.parquet`` files
  of batch metadata, each holding whole (topic, partition) streams sorted by
  partition then arrival order (``seq_no``), cut into row groups;
- ``kafka``: ``OUT/logs/``, a Kafka log directory of what the partition leaders
  would have written of those attempts (:mod:`idemcore.synth.kafka_log`), with
  findings located by offset.

``OUT/truth.json`` says what was planted. The dataset is written into a
temporary directory beside OUT and renamed into place at the end, so OUT is
either complete or absent.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from idemcore.kernels.columns import INPUT_COLUMNS
from idemcore.progress import bar as progress_bar
from idemcore.record.kafka_files import LEADER_EPOCH_CHECKPOINT, parse_offset_file
from idemcore.synth.kafka_log import (
    DEFAULT_SEGMENT_BYTES,
    INDEX_INTERVAL_BYTES,
    KAFKA_CANNOT_OCCUR,
    KAFKA_HOW_WRITTEN,
    LOGS_DIR,
    kafka_mix,
    leader_writes,
    write_log_dir,
)
from idemcore.synth.streams import inject_anomalies, synthetic_stream

TRUTH_FILE = "truth.json"
DATA_DIR = "data"
#: What generate writes: Parquet batch metadata (OUT/data) or a Kafka log directory (OUT/logs).
FORMATS = ("parquet", "kafka")
#: The files of a partition directory generate writes besides the offset-named ones.
_PARTITION_FILES = (LEADER_EPOCH_CHECKPOINT, "partition.metadata")
#: Columns written (base_offset is left out: produce attempts have none; it defaults to -1).
WRITTEN = [name for name in INPUT_COLUMNS if name != "base_offset"]
#: Parquet options measured fastest to read (pyarrow, one thread) at about half snappy's size:
#: LZ4, delta encoding for the increasing columns, dictionaries only where values repeat.
PARQUET_OPTIONS: dict[str, Any] = {
    "compression": "lz4",
    "use_dictionary": ["topic", "partition", "producer_id", "producer_epoch", "record_count", "is_transactional",
                       "is_control", "control_type", "coordinator_epoch"],
    "column_encoding": {"seq_no": "DELTA_BINARY_PACKED", "max_timestamp": "DELTA_BINARY_PACKED"},
}


def _check_replaceable(out: Path) -> None:
    """Only a dataset this function wrote (``truth.json`` and ``data/*.parquet`` or ``logs/<topic>-<partition>/``
    of Kafka's files) or an empty directory may be replaced: never a user's own files, never the working directory
    or one above it."""
    if out.is_symlink() or not out.is_dir():
        raise FileExistsError(f"{out} is not a directory; refusing to replace it")
    resolved = out.resolve()
    if resolved == Path.cwd().resolve() or resolved in Path.cwd().resolve().parents:
        raise FileExistsError(f"{out} is the working directory or holds it; refusing to replace it")
    # A dataset holds a truth.json file and a data/ directory of .parquet files or a logs/ directory of partition
    # directories; symlinks count as the entry itself (removing a tree unlinks them, never what they point to).
    foreign = []
    for entry in sorted(out.iterdir()):
        if entry.is_symlink() and entry.name in (DATA_DIR, LOGS_DIR, TRUTH_FILE):
            continue
        if entry.name == TRUTH_FILE and entry.is_file():
            continue
        if entry.name == DATA_DIR and entry.is_dir():
            foreign += [f"{DATA_DIR}/{inner.name}" for inner in sorted(entry.iterdir())
                        if not (inner.is_symlink() or (inner.is_file() and inner.suffix == ".parquet"))]
            continue
        if entry.name == LOGS_DIR and entry.is_dir():
            foreign += _foreign_in_logs(entry)
            continue
        foreign.append(entry.name + ("/" if entry.is_dir() else ""))
    if not foreign and any(out.iterdir()):
        # Parquet or Kafka files alone could be anyone's: the truth file generate writes is the mark, and it lists
        # every data file (every partition directory) generate wrote there.
        listed = _files_listed_in_truth(out / TRUTH_FILE)
        if listed is None:
            foreign.append(f"no {TRUTH_FILE} written by generate")
        else:
            for sub in (DATA_DIR, LOGS_DIR):
                if (out / sub).is_dir() and not (out / sub).is_symlink():
                    foreign += [f"{sub}/{inner.name}" for inner in sorted((out / sub).iterdir())
                                if f"{sub}/{inner.name}" not in listed]
    if foreign:
        shown = ", ".join(foreign[:3]) + (", ..." if len(foreign) > 3 else "")
        raise FileExistsError(f"{out} is not a dataset written by generate (it holds {shown}); refusing to "
                              "replace it")


def _foreign_in_logs(logs: Path) -> list[str]:
    """What in ``logs/`` generate does not write: anything but partition directories holding Kafka's files."""
    foreign = []
    for inner in sorted(logs.iterdir()):
        if inner.is_symlink():
            continue
        if not inner.is_dir():
            foreign.append(f"{LOGS_DIR}/{inner.name}")
            continue
        foreign += [f"{LOGS_DIR}/{inner.name}/{item.name}" for item in sorted(inner.iterdir())
                    if not (item.is_symlink() or (item.is_file() and (parse_offset_file(item.name) is not None
                                                                       or item.name in _PARTITION_FILES)))]
    return foreign


def _files_listed_in_truth(path: Path) -> set[str] | None:
    """The data files a truth file written by generate lists; None if ``path`` is not such a file."""
    try:
        truth = json.loads(path.read_text())
        files = truth["files"]
        if not (isinstance(truth, dict) and {"batches", "order_by", "findings"} <= truth.keys()):
            return None
        return {str(name) for name in files}
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def topic_name(index: int) -> str:
    return f"topic-{index:03d}"


def generate(
    out: str | os.PathLike, *, topics: int = 4, partitions: int = 64, producers: int = 1000,
    batches: int = 1_000_000, anomalies: dict[str, int] | None = None, seed: int = 1,
    retry_fraction: float = 0.01, duration_ms: int = 3_600_000, partitions_per_file: int = 16,
    row_group_rows: int = 1 << 20, overwrite: bool = False, progress: bool = True, format: str = "parquet",
    segment_bytes: int = DEFAULT_SEGMENT_BYTES, index_interval_bytes: int = INDEX_INTERVAL_BYTES,
) -> dict[str, Any]:
    """Write about ``batches`` produce attempts of ``producers`` idempotent producers over ``topics`` x
    ``partitions`` streams, with ``anomalies`` (name -> count, see :data:`idemcore.streams.ANOMALIES`)
    planted; return the ground truth also written to ``OUT/truth.json``.

    ``format``: ``parquet`` (the attempts as batch metadata) or ``kafka`` (a Kafka log directory of what the
    leaders wrote, segments rolled at ``segment_bytes``, index entries every ``index_interval_bytes``; only the
    kinds of :data:`idemcore.synth.kafka_log.KAFKA_ANOMALIES` can be planted, by default 3 of each)."""
    if format not in FORMATS:
        raise ValueError(f"format must be one of {', '.join(FORMATS)}, got {format!r}")
    if topics < 1 or partitions < 1 or partitions_per_file < 1 or row_group_rows < 1:
        raise ValueError("topics, partitions, partitions_per_file and row_group_rows must be at least 1")
    kafka = format == "kafka"
    if kafka:
        anomalies = kafka_mix(anomalies)  # refuses, with the reason, a kind no leader writes
    elif partitions % min(partitions_per_file, partitions):
        raise ValueError(f"partitions_per_file ({partitions_per_file}) must divide partitions ({partitions}): "
                         "a file holds streams of one topic")
    partitions_per_file = min(partitions_per_file, partitions)
    out = Path(out)
    if out.exists() or out.is_symlink():
        if not overwrite:
            raise FileExistsError(f"{out} already exists; choose another path or overwrite it")
        _check_replaceable(out)
    # Two steps in memory, then one per Parquet file (after a sort) or per partition directory written (the
    # longest part on big datasets).
    steps = topics * partitions if kafka else 1 + -(-topics * partitions // partitions_per_file)
    bar = progress_bar(2 + steps, "generating", "step", enabled=progress)
    try:
        columns = synthetic_stream(batches, n_producers=producers, n_partitions=topics * partitions,
                                   retry_fraction=retry_fraction, seed=seed)
        bar.update()
        columns, truth, planted = inject_anomalies(columns, anomalies, duration_ms=duration_ms, seed=seed)
        columns["seq_no"] = np.arange(len(columns["partition"]), dtype=np.int64)
        bar.update()
        parameters: dict[str, Any] = {
            "topics": topics, "partitions": partitions, "producers": producers, "batches": batches,
            "anomalies": anomalies, "seed": seed, "retry_fraction": retry_fraction, "duration_ms": duration_ms}

        out.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
        staging.chmod(0o777 & ~_umask())  # mkdtemp makes it 0700; the dataset gets the mode a mkdir would give it
        try:
            if kafka:
                parameters.update(format=format, segment_bytes=segment_bytes,
                                  index_interval_bytes=index_interval_bytes)
                truth_doc = _write_kafka(staging, columns, truth, planted, parameters, bar.update)
            else:
                truth_doc = _write_parquet(staging, columns, truth, planted, parameters, partitions_per_file,
                                           row_group_rows, bar.update)
            (staging / TRUTH_FILE).write_text(json.dumps(truth_doc, indent=1) + "\n")
            if out.exists():
                old = Path(tempfile.mkdtemp(prefix=f".{out.name}.old.", dir=out.parent))
                os.replace(out, old / out.name)  # out is replaced in one rename; the old dataset goes after it
                os.replace(staging, out)
                shutil.rmtree(old, ignore_errors=True)
            else:
                os.replace(staging, out)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
    finally:
        bar.close()  # also on an error, so the message is not drawn into the bar
    return truth_doc


def _write_parquet(staging: Path, columns: dict[str, np.ndarray], truth: dict[str, int], planted: list[dict],
                   parameters: dict[str, Any], partitions_per_file: int, row_group_rows: int,
                   update: Callable[[], Any]) -> dict[str, Any]:
    """``staging/data/*.parquet``; the truth document."""
    import pyarrow as pa  # here, not at import: the CLI imports this module without the arrow extra

    from idemcore.record.parquet_files import write_parquet

    topics, partitions = parameters["topics"], parameters["partitions"]
    stream = columns["partition"]  # global stream number: topic * partitions + partition
    order = np.argsort(stream, kind="stable")  # clustered by stream, arrival order within
    update()
    (staging / DATA_DIR).mkdir()
    sorted_stream = stream[order]
    bounds = np.searchsorted(sorted_stream, np.arange(0, topics * partitions + 1, partitions_per_file))
    files = []
    for k in range(len(bounds) - 1):
        rows = order[bounds[k]:bounds[k + 1]]
        if not len(rows):
            continue
        first = int(stream[rows[0]])
        topic, partition = divmod(first, partitions)
        table = pa.table({
            "topic": pa.array([topic_name(topic)] * len(rows), pa.string()).dictionary_encode(),
            "partition": pa.array(columns["partition"][rows] % partitions),
            **{name: pa.array(columns[name][rows]) for name in WRITTEN if name != "partition"},
            "seq_no": pa.array(columns["seq_no"][rows]),
        })
        name = f"{DATA_DIR}/{topic_name(topic)}-{partition:05d}.parquet"
        write_parquet(table, staging / name, row_group_size=row_group_rows, **PARQUET_OPTIONS)
        files.append(name)
        update()
    return {
        "batches": len(stream), "order_by": "seq_no", "findings": truth,
        "planted": [{"topic": topic_name(p["partition"] // partitions),
                     "partition": p["partition"] % partitions, "producer_id": p["producer_id"],
                     "seq_no": p["position"], "finding": p["finding"]} for p in planted],
        "parameters": parameters,
        "files": files,
    }


def _write_kafka(staging: Path, columns: dict[str, np.ndarray], truth: dict[str, int], planted: list[dict],
                 parameters: dict[str, Any], update: Callable[[], Any]) -> dict[str, Any]:
    """``staging/logs/``, what the leaders wrote of the attempts (:mod:`idemcore.synth.kafka_log`); the truth
    document, every planted finding located by offset, segment file and position."""
    topics, partitions = parameters["topics"], parameters["partitions"]
    written, not_written = leader_writes(columns, planted)
    names = [topic_name(topic) for topic in range(topics)]
    layout = write_log_dir(staging / LOGS_DIR, columns, written, topics=names, partitions=partitions,
                           segment_bytes=parameters["segment_bytes"],
                           index_interval_bytes=parameters["index_interval_bytes"], seed=parameters["seed"],
                           progress=update)
    located = []
    for item in planted:
        row, (topic, partition) = item["position"], divmod(item["partition"], partitions)
        if not written[row]:  # never: every planted kind is a batch a leader appends
            raise AssertionError(f"planted {item['finding']} at attempt {row} was not written")
        located.append({"topic": names[topic], "partition": partition, "producer_id": item["producer_id"],
                        "base_offset": int(layout.base_offset[row]), "finding": item["finding"],
                        "file": f"{LOGS_DIR}/{layout.file_of(row, f'{names[topic]}-{partition}')}",
                        "position": int(layout.position[row])})
    located.sort(key=lambda entry: (entry["topic"], entry["partition"], entry["base_offset"]))
    findings = {name: count for name, count in truth.items() if count and name not in KAFKA_CANNOT_OCCUR}
    return {
        "format": "kafka", "batches": int(np.count_nonzero(written)), "order_by": "base_offset",
        "findings": findings, "planted": located,
        "planted_as": {name: KAFKA_HOW_WRITTEN[name] for name in findings},
        "not_planted": dict(KAFKA_CANNOT_OCCUR),
        "produce_attempts": len(written), "not_written": not_written,
        "log": {"segments": layout.segments, "bytes": layout.bytes, "aborted_transactions": layout.aborted_txns},
        "parameters": parameters,
        "files": [f"{LOGS_DIR}/{name}" for name in layout.partition_dirs],
    }


def read_truth(path: str | os.PathLike) -> dict[str, Any]:
    """The ground truth of a generated dataset (``path`` is the dataset directory or the truth file)."""
    path = Path(path)
    if path.is_dir():
        path = path / TRUTH_FILE
    if not path.exists():
        raise FileNotFoundError(f"no ground truth at {path} (is this a dataset written by `idemcore generate`?)")
    return json.loads(path.read_text())
