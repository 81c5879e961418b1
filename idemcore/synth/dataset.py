"""generate(): a Parquet dataset of batch metadata with planted anomalies, plus its ground truth.

Layout: ``OUT/data/<topic>-<first partition>.parquet`` files, each holding
whole (topic, partition) streams sorted by partition then arrival order
(``seq_no``), cut into row groups; ``OUT/truth.json`` says what was planted.
The dataset is written into a temporary directory beside OUT and renamed into
place at the end, so OUT is either complete or absent.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from idemcore.progress import bar as progress_bar
from idemcore.record.columns import COLUMNS
from idemcore.synth.streams import inject_anomalies, synthetic_stream

TRUTH_FILE = "truth.json"
DATA_DIR = "data"
#: Columns written (base_offset is left out: produce attempts have none; it defaults to -1).
WRITTEN = [name for name in COLUMNS if name != "base_offset"]
#: Parquet options measured fastest to read (pyarrow, one thread) at about half snappy's size:
#: LZ4, delta encoding for the increasing columns, dictionaries only where values repeat.
PARQUET_OPTIONS: dict[str, Any] = {
    "compression": "lz4",
    "use_dictionary": ["topic", "partition", "producer_id", "producer_epoch", "record_count", "is_transactional",
                       "is_control", "control_type", "coordinator_epoch"],
    "column_encoding": {"seq_no": "DELTA_BINARY_PACKED", "max_timestamp": "DELTA_BINARY_PACKED"},
}


def _check_replaceable(out: Path) -> None:
    """Only a dataset this function wrote (``truth.json`` and ``data/*.parquet``) or an empty directory may be
    replaced: never a user's own files, never the working directory or one above it."""
    if out.is_symlink() or not out.is_dir():
        raise FileExistsError(f"{out} is not a directory; refusing to replace it")
    resolved = out.resolve()
    if resolved == Path.cwd().resolve() or resolved in Path.cwd().resolve().parents:
        raise FileExistsError(f"{out} is the working directory or holds it; refusing to replace it")
    # A dataset holds a truth.json file and a data/ directory of .parquet files; symlinks count as the entry
    # itself (removing a tree unlinks them, never what they point to).
    foreign = []
    for entry in sorted(out.iterdir()):
        if entry.is_symlink() and entry.name in (DATA_DIR, TRUTH_FILE):
            continue
        if entry.name == TRUTH_FILE and entry.is_file():
            continue
        if entry.name == DATA_DIR and entry.is_dir():
            foreign += [f"{DATA_DIR}/{inner.name}" for inner in sorted(entry.iterdir())
                        if not (inner.is_symlink() or (inner.is_file() and inner.suffix == ".parquet"))]
            continue
        foreign.append(entry.name + ("/" if entry.is_dir() else ""))
    if not foreign and any(out.iterdir()):
        # Parquet files alone could be anyone's: the truth file generate writes is the mark, and it lists
        # every data file generate wrote there.
        listed = _files_listed_in_truth(out / TRUTH_FILE)
        if listed is None:
            foreign.append(f"no {TRUTH_FILE} written by generate")
        elif (out / DATA_DIR).is_dir():
            foreign += [f"{DATA_DIR}/{inner.name}" for inner in sorted((out / DATA_DIR).iterdir())
                        if f"{DATA_DIR}/{inner.name}" not in listed]
    if foreign:
        shown = ", ".join(foreign[:3]) + (", ..." if len(foreign) > 3 else "")
        raise FileExistsError(f"{out} is not a dataset written by generate (it holds {shown}); refusing to "
                              "replace it")


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
    row_group_rows: int = 1 << 20, overwrite: bool = False, progress: bool = True,
) -> dict[str, Any]:
    """Write about ``batches`` produce attempts of ``producers`` idempotent producers over ``topics`` x
    ``partitions`` streams, with ``anomalies`` (name -> count, see :data:`idemcore.streams.ANOMALIES`)
    planted; return the ground truth also written to ``OUT/truth.json``."""
    import pyarrow as pa  # here, not at import: the CLI imports this module without the arrow extra
    import pyarrow.parquet as pq

    if topics < 1 or partitions < 1 or partitions_per_file < 1 or row_group_rows < 1:
        raise ValueError("topics, partitions, partitions_per_file and row_group_rows must be at least 1")
    if partitions % min(partitions_per_file, partitions):
        raise ValueError(f"partitions_per_file ({partitions_per_file}) must divide partitions ({partitions}): "
                         "a file holds streams of one topic")
    partitions_per_file = min(partitions_per_file, partitions)
    out = Path(out)
    if out.exists() or out.is_symlink():
        if not overwrite:
            raise FileExistsError(f"{out} already exists; choose another path or overwrite it")
        _check_replaceable(out)
    # Three steps in memory, then one per Parquet file written (the longest part on big datasets).
    bar = progress_bar(3 + -(-topics * partitions // partitions_per_file), "generating", "step", enabled=progress)
    try:
        columns = synthetic_stream(batches, n_producers=producers, n_partitions=topics * partitions,
                                   retry_fraction=retry_fraction, seed=seed)
        bar.update()
        columns, truth, planted = inject_anomalies(columns, anomalies, duration_ms=duration_ms, seed=seed)
        n = len(columns["partition"])
        columns["seq_no"] = np.arange(n, dtype=np.int64)
        bar.update()
        stream = columns["partition"]  # global stream number: topic * partitions + partition
        order = np.argsort(stream, kind="stable")  # clustered by stream, arrival order within
        bar.update()

        out.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
        staging.chmod(0o777 & ~_umask())  # mkdtemp makes it 0700; the dataset gets the mode a mkdir would give it
        try:
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
                pq.write_table(table, staging / name, row_group_size=row_group_rows, **PARQUET_OPTIONS)
                files.append(name)
                bar.update()
            truth_doc = {
                "batches": n, "order_by": "seq_no", "findings": truth,
                "planted": [{"topic": topic_name(p["partition"] // partitions),
                             "partition": p["partition"] % partitions, "producer_id": p["producer_id"],
                             "seq_no": p["position"], "finding": p["finding"]} for p in planted],
                "parameters": {"topics": topics, "partitions": partitions, "producers": producers, "batches": batches,
                               "anomalies": anomalies, "seed": seed, "retry_fraction": retry_fraction,
                               "duration_ms": duration_ms},
                "files": files,
            }
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


def read_truth(path: str | os.PathLike) -> dict[str, Any]:
    """The ground truth of a generated dataset (``path`` is the dataset directory or the truth file)."""
    path = Path(path)
    if path.is_dir():
        path = path / TRUTH_FILE
    if not path.exists():
        raise FileNotFoundError(f"no ground truth at {path} (is this a dataset written by `idemcore generate`?)")
    return json.loads(path.read_text())
