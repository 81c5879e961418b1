"""Path mode planning: which Parquet row groups each task reads, so every task owns whole streams.

The driver reads only footers. Each row group's (topic, partition) range comes
from its column statistics; row groups whose ranges overlap may share a
stream, so they go to the same task (connected components of overlapping
ranges). Components are then packed into tasks of similar row counts.
"""

from __future__ import annotations

import heapq
import os
import warnings
from dataclasses import dataclass
from pathlib import Path

import pyarrow.parquet as pq

from ..replay.columns import TOPIC


@dataclass(frozen=True)
class RowGroup:
    path: str
    index: int
    rows: int
    low: tuple[str, int] | None  # smallest (topic, partition) in it; None when statistics are missing
    high: tuple[str, int] | None


def _is_uri(path: str) -> bool:
    return "://" in path


def _hidden(relative_parts: tuple[str, ...]) -> bool:
    # Spark's and Hadoop's conventions: _SUCCESS, _temporary/, .crc files and the like are not data.
    return any(part.startswith((".", "_")) for part in relative_parts)


def parquet_files(source: str | os.PathLike | list) -> list[str]:
    """The Parquet files of ``source``: a file, a directory (searched recursively) or a list of these.

    Local paths, or URIs any pyarrow filesystem understands (``file://``, ``hdfs://``, ``s3://``,
    ``gs://``): on a cluster every worker must be able to read them.
    """
    if isinstance(source, list | tuple):
        return [f for item in source for f in parquet_files(item)]
    text = os.fspath(source)
    if _is_uri(text):
        return _parquet_files_at_uri(text)
    path = Path(text)
    if path.is_file():
        return [str(path)]
    if path.is_dir():
        files = sorted(str(p) for p in path.rglob("*.parquet") if not _hidden(p.relative_to(path).parts))
        if not files:
            raise ValueError(f"no Parquet files under {path}")
        return files
    raise FileNotFoundError(f"no such file or directory: {path}")


def _parquet_files_at_uri(uri: str) -> list[str]:
    from pyarrow import fs

    filesystem, root = fs.FileSystem.from_uri(uri)
    root = root.rstrip("/")
    base = uri.rstrip("/")
    if not base.endswith(root):
        raise ValueError(f"cannot tell the file system part of {uri!r} (pyarrow reads it as {root!r})")
    prefix = base[:len(base) - len(root)]  # "s3://", "file://", "hdfs://namenode:8020"
    info = filesystem.get_file_info(root)
    if info.type == fs.FileType.File:
        return [uri]
    if info.type != fs.FileType.Directory:
        raise FileNotFoundError(f"no such file or directory: {uri}")
    found = filesystem.get_file_info(fs.FileSelector(root, recursive=True))
    files = sorted(f.path for f in found if f.type == fs.FileType.File and f.path.endswith(".parquet")
                   and not _hidden(tuple(f.path[len(root) + 1:].split("/"))))
    if not files:
        raise ValueError(f"no Parquet files under {uri}")
    return [prefix + f for f in files]


def open_parquet(path: str) -> pq.ParquetFile:
    """A Parquet file by local path or URI."""
    if _is_uri(path):
        from pyarrow import fs

        filesystem, inner = fs.FileSystem.from_uri(path)
        return pq.ParquetFile(filesystem.open_input_file(inner))
    return pq.ParquetFile(path)


def _range(stats_topic, stats_partition) -> tuple[tuple[str, int], tuple[str, int]] | None:
    if stats_topic is None or stats_partition is None:
        return None
    if not (stats_topic.has_min_max and stats_partition.has_min_max):
        return None
    low_topic, high_topic = stats_topic.min, stats_topic.max
    if isinstance(low_topic, bytes):
        low_topic, high_topic = low_topic.decode(), high_topic.decode()
    return (low_topic, int(stats_partition.min)), (high_topic, int(stats_partition.max))


def row_groups(files: list[str]) -> list[RowGroup]:
    """Every row group of ``files`` with its (topic, partition) range; checks the columns are there."""
    groups = []
    for path in files:
        metadata = open_parquet(path).metadata
        names = [metadata.schema.column(i).path for i in range(metadata.num_columns)]
        for needed in (TOPIC, "partition"):
            if needed not in names:
                raise ValueError(f"{path} has no column {needed!r} (columns: {', '.join(names)})")
        topic_col, partition_col = names.index(TOPIC), names.index("partition")
        for index in range(metadata.num_row_groups):
            group = metadata.row_group(index)
            bounds = _range(group.column(topic_col).statistics, group.column(partition_col).statistics)
            low, high = bounds if bounds else (None, None)
            groups.append(RowGroup(path, index, group.num_rows, low, high))
    return groups


def components(groups: list[RowGroup]) -> list[list[RowGroup]]:
    """Row groups that may share a stream, together: overlapping (topic, partition) ranges are merged."""
    if any(g.low is None for g in groups):
        warnings.warn("some row groups have no topic/partition statistics: the whole source is read by one task",
                      RuntimeWarning, stacklevel=3)
        return [groups]
    ordered = sorted(groups, key=lambda g: (g.low, g.high))
    merged: list[list[RowGroup]] = []
    high = None
    for group in ordered:
        if merged and group.low <= high:
            merged[-1].append(group)
            high = max(high, group.high)
        else:
            merged.append([group])
            high = group.high
    return merged


def plan_tasks(source: str | os.PathLike | list, tasks: int) -> list[list[tuple[str, list[int]]]]:
    """Up to ``tasks`` tasks, each a list of ``(path, row group indexes)`` owning whole streams."""
    if tasks < 1:
        raise ValueError(f"tasks must be at least 1, got {tasks}")
    groups = components(row_groups(parquet_files(source)))
    bins: list[tuple[int, int, list[RowGroup]]] = [(0, k, []) for k in range(min(tasks, len(groups)))]
    heapq.heapify(bins)
    for component in sorted(groups, key=lambda c: -sum(g.rows for g in c)):
        load, k, members = heapq.heappop(bins)  # the lightest task takes the next biggest component
        members.extend(component)
        heapq.heappush(bins, (load + sum(g.rows for g in component), k, members))
    plans = []
    for _, _, members in sorted(bins, key=lambda b: b[1]):
        by_file: dict[str, list[int]] = {}
        for group in sorted(members, key=lambda g: (g.path, g.index)):
            by_file.setdefault(group.path, []).append(group.index)
        if by_file:
            plans.append(list(by_file.items()))
    return plans


def read_task(plan: list[tuple[str, list[int]]], columns: list[str] | None = None):
    """The rows of one task's row groups, in file and row-group order (a pyarrow Table)."""
    import pyarrow as pa

    tables = []
    for path, indexes in plan:
        parquet = open_parquet(path)
        wanted = None if columns is None else [c for c in columns if c in parquet.schema_arrow.names]
        tables.append(parquet.read_row_groups(indexes, columns=wanted, use_threads=False))
    return pa.concat_tables(tables, promote_options="default")
