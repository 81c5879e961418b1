"""Path mode planning: which Parquet row groups each task reads, so every task owns whole streams.

The driver reads only footers, each file's once (:func:`read_footers`): its Arrow schema, for the
column checks, its column statistics, for the value checks, and its row groups, for the plan. Each
row group's (topic, partition) range comes from its column statistics; row groups whose ranges
overlap may share a stream, so they go to the same task (connected components of overlapping
ranges). Components are then packed into tasks of similar row counts.
"""

from __future__ import annotations

import heapq
import os
import warnings
import zlib
from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from idemcore.audit.columns import ORDER_COLUMNS, TOPIC
from idemcore.audit.spark.schema import conform
from idemcore.kernels.columns import INPUT_COLUMNS
from idemcore.record.parquet_files import READ_ERRORS, checked, file_size, is_uri, open_parquet, unreadable


@dataclass(frozen=True)
class RowGroup:
    path: str
    index: int
    rows: int
    low: tuple[str, int] | None  # smallest (topic, partition) in it; None when statistics are missing
    high: tuple[str, int] | None
    footer: tuple[int, int, int, int] | None = None  # its file's footer_print, as the driver read it


def footer_print(path: str, metadata: pq.FileMetaData) -> tuple[int, int, int, int]:
    """What tells one version of a file from another: its size, its footer's size, rows and row groups (a file
    rewritten between the driver's planning and a worker's read has another; a rewrite alike in all four is
    not told apart)."""
    return file_size(path), metadata.serialized_size, metadata.num_rows, metadata.num_row_groups


def _hidden(relative_parts: tuple[str, ...]) -> bool:
    # Spark's and Hadoop's conventions: _SUCCESS, _temporary/, .crc files and the like are not data.
    return any(part.startswith((".", "_")) for part in relative_parts)


def parquet_files(source: str | os.PathLike | list | tuple) -> list[str]:
    """The Parquet files of ``source``: a file, a directory (searched recursively) or a list of these.

    Local paths, or URIs any pyarrow filesystem understands (``file://``, ``hdfs://``, ``s3://``,
    ``gs://``): on a cluster every worker must be able to read them.
    """
    if isinstance(source, list | tuple):
        return [f for item in source for f in parquet_files(item)]
    text = os.fspath(source)
    if is_uri(text):
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


def _range(stats_topic, stats_partition) -> tuple[tuple[str, int], tuple[str, int]] | None:
    if stats_topic is None or stats_partition is None:
        return None
    if not (stats_topic.has_min_max and stats_partition.has_min_max):
        return None
    low_topic, high_topic = stats_topic.min, stats_topic.max
    if isinstance(low_topic, bytes):
        low_topic, high_topic = low_topic.decode(), high_topic.decode()
    return (low_topic, int(stats_partition.min)), (high_topic, int(stats_partition.max))


#: Columns whose statistics a footer summarises (:attr:`Footer.stats`): those an audit may read.
WATCHED = (TOPIC, *INPUT_COLUMNS, *ORDER_COLUMNS)


@dataclass(frozen=True)
class Footer:
    """What the driver keeps of one Parquet file's footer: its Arrow schema, its row groups, and per
    watched column its statistics over all row groups: (nulls, min, max), each None where a row group
    has none (min and max only for integer and boolean columns)."""

    path: str
    schema: pa.Schema
    groups: tuple[RowGroup, ...]
    stats: dict[str, tuple[int | None, int | None, int | None]] = field(default_factory=dict)


def _summary(chunks: list[Any], numeric: bool) -> tuple[int | None, int | None, int | None]:
    """(nulls, min, max) of one column over the statistics of its chunks (one per row group)."""
    stats = [chunk.statistics for chunk in chunks]
    nulls = None if any(s is None or not s.has_null_count for s in stats) else sum(s.null_count for s in stats)
    if not numeric or not stats or any(s is None or not s.has_min_max for s in stats):
        return nulls, None, None
    return nulls, min(int(s.min) for s in stats), max(int(s.max) for s in stats)


def read_footer(path: str, watched: Collection[str] = WATCHED) -> Footer:
    """One file's footer, read once: the schema, every row group with its (topic, partition) range, and
    the statistics of the ``watched`` columns it has. An unreadable footer raises naming the file."""
    try:
        parquet = open_parquet(path)
        metadata = parquet.metadata
        arrow_schema = parquet.schema_arrow
    except READ_ERRORS as exc:
        raise unreadable(path, exc, "{path} is not a readable Parquet file") from None
    names = [metadata.schema.column(i).path for i in range(metadata.num_columns)]
    has_keys = TOPIC in names and "partition" in names  # else no ranges; the column checks name what is missing
    groups = []
    row_groups = [metadata.row_group(index) for index in range(metadata.num_row_groups)]
    for index, group in enumerate(row_groups):
        bounds = None
        if has_keys:
            bounds = _range(group.column(names.index(TOPIC)).statistics,
                            group.column(names.index("partition")).statistics)
        low, high = bounds if bounds else (None, None)
        groups.append(RowGroup(path, index, group.num_rows, low, high, footer_print(path, metadata)))
    stats = {}
    for name in watched:
        if name in names and name in arrow_schema.names:
            data_type = arrow_schema.field(name).type
            if pa.types.is_dictionary(data_type):
                data_type = data_type.value_type
            numeric = pa.types.is_integer(data_type) or pa.types.is_boolean(data_type)
            column = names.index(name)
            stats[name] = _summary([group.column(column) for group in row_groups], numeric)
    return Footer(path, arrow_schema, tuple(groups), stats)


def read_footers(source: str | os.PathLike | list | tuple, watched: Collection[str] = WATCHED) -> list[Footer]:
    """The footer of every Parquet file of ``source`` (see :func:`parquet_files`), each read once."""
    return [read_footer(path, watched) for path in parquet_files(source)]


def components(groups: list[RowGroup]) -> list[list[RowGroup]]:
    """Row groups that may share a stream, together: overlapping (topic, partition) ranges are merged."""
    if any(g.low is None for g in groups):
        warnings.warn("some row groups have no topic/partition statistics: the whole source is read by one task",
                      RuntimeWarning, stacklevel=3)
        return [groups]
    # Every range is known from here on.
    ranged = sorted(((g.low, g.high, g) for g in groups if g.low is not None and g.high is not None),
                    key=lambda r: (r[0], r[1]))
    merged: list[list[RowGroup]] = []
    high: tuple[str, int] | None = None
    for low, group_high, group in ranged:
        if merged and high is not None and low <= high:
            merged[-1].append(group)
            high = max(high, group_high)
        else:
            merged.append([group])
            high = group_high
    return merged


@dataclass(frozen=True)
class TaskPlan:
    """What one task reads: ``groups`` (path, row group indexes); of the streams in them, only those in
    stream slice ``part`` of ``parts`` (a hash of topic and partition), so tasks still own whole streams."""

    groups: Sequence[tuple[str, list[int] | None]]  # None: every row group of the file
    part: int = 0
    parts: int = 1
    footers: dict[str, tuple[int, int, int, int]] = field(default_factory=dict)  # per path, when the driver read it
    #: ``groups`` cut into pieces that share no stream (whole components), each read and replayed on its own: a
    #: task's memory is one piece's, reused, not all its rows at once. Empty: one piece, ``groups``.
    pieces: Sequence[Sequence[tuple[str, list[int] | None]]] = ()


#: Components are packed into pieces of about this many rows (one read, one replay each).
PIECE_ROWS = 1 << 20


def _pieces(components: list[list[RowGroup]]) -> list[list[tuple[str, list[int]]]]:
    """Whole components packed in read order into pieces of about :data:`PIECE_ROWS` rows (a bigger component
    is a piece of its own): pieces share no stream, so each may be replayed after the other."""
    pieces: list[list[RowGroup]] = []
    rows = PIECE_ROWS
    for component in sorted(components, key=lambda c: min((g.path, g.index) for g in c)):
        size = sum(g.rows for g in component)
        if rows + size > PIECE_ROWS:
            pieces.append([])
            rows = 0
        pieces[-1].extend(component)
        rows += size
    return [_by_file(piece) for piece in pieces]


def _units(groups: list[list[RowGroup]], ideal: float, tasks: int) -> list[tuple[int, list[RowGroup], int, int]]:
    # A component far bigger than a task's share (streams interleaved over its row groups) is cut into
    # stream slices: each slice reads the component again but replays only its own streams.
    units: list[tuple[int, list[RowGroup], int, int]] = []
    for component in groups:
        rows = sum(g.rows for g in component)
        single_stream = all(g.low == g.high == component[0].low for g in component)
        parts = 1 if single_stream else max(1, min(tasks, round(rows / ideal)))
        units.extend((rows // parts, component, part, parts) for part in range(parts))
    return units


def plan_tasks(source: str | os.PathLike | list, tasks: int) -> list[TaskPlan]:
    """Up to ``tasks`` tasks over the Parquet files of ``source``, each owning whole streams."""
    return plan_row_groups([group for footer in read_footers(source) for group in footer.groups], tasks)


def plan_row_groups(row_groups: list[RowGroup], tasks: int) -> list[TaskPlan]:
    """Up to ``tasks`` tasks, each owning whole streams: components packed by rows, big ones sliced by stream."""
    if tasks < 1:
        raise ValueError(f"tasks must be at least 1, got {tasks}")
    # An empty row group (an empty file has one) holds no stream, and has no statistics to plan by.
    groups = components([group for group in row_groups if group.rows])
    ideal = max(1.0, sum(g.rows for c in groups for g in c) / tasks)
    units = _units(groups, ideal, tasks)
    bins: list[tuple[int, int, list]] = [(0, k, []) for k in range(min(tasks, len(units)))]
    heapq.heapify(bins)
    for unit in sorted(units, key=lambda u: (-u[0], u[2])):
        load, k, members = heapq.heappop(bins)  # the lightest task takes the next biggest unit
        members.append(unit)
        heapq.heappush(bins, (load + unit[0], k, members))
    plans = []
    for _, _, members in sorted(bins, key=lambda b: b[1]):
        whole = [g for _, component, _, parts in members if parts == 1 for g in component]
        if whole:
            pieces = _pieces([component for _, component, _, parts in members if parts == 1])
            plans.append(TaskPlan(_by_file(whole), footers=_footers(whole), pieces=pieces))
        plans.extend(TaskPlan(_by_file(component), part, parts, _footers(component))
                     for _, component, part, parts in members if parts > 1)
    return plans


def _footers(groups: list[RowGroup]) -> dict[str, tuple[int, int, int, int]]:
    return {group.path: group.footer for group in groups if group.footer is not None}


def _by_file(groups: list[RowGroup]) -> list[tuple[str, list[int]]]:
    by_file: dict[str, list[int]] = {}
    for group in sorted(groups, key=lambda g: (g.path, g.index)):
        by_file.setdefault(group.path, []).append(group.index)
    return list(by_file.items())


def stream_slice(topic, partition: np.ndarray, parts: int) -> np.ndarray:
    """Which of ``parts`` stream slices each row's (topic, partition) falls in: the same on every machine."""
    import pyarrow.compute as pc

    per_row = []
    for chunk in topic.chunks if isinstance(topic, pa.ChunkedArray) else [topic]:
        encoded = chunk if pa.types.is_dictionary(chunk.type) else pc.dictionary_encode(chunk)
        crc = np.array([zlib.crc32(name.encode()) for name in encoded.dictionary.to_pylist()], dtype=np.int64)
        per_row.append(crc[encoded.indices.to_numpy(zero_copy_only=False)])
    topic_hash = np.concatenate(per_row) if per_row else np.empty(0, dtype=np.int64)
    return (topic_hash * 1_000_003 + np.asarray(partition, dtype=np.int64)) % parts


def _file_row(metadata: Any, indexes: list[int]) -> Callable[[int], int]:
    # Row k of the row groups ``indexes`` read together, as a row of the file (for error messages).
    def row(k: int) -> int:
        for index in indexes:
            rows = metadata.row_group(index).num_rows
            if k < rows:
                return sum(metadata.row_group(i).num_rows for i in range(index)) + k
            k -= rows
        return k
    return row


def read_task(plan: TaskPlan, target: pa.Schema | None = None) -> pa.Table:
    """The rows one task replays: its row groups in file and row-group order, only its stream slice.

    ``target``: the schema every file's rows are given (see :func:`~idemcore.audit.spark.schema.conform`;
    path mode computes it on the driver), else every column as the files hold them. A file that cannot
    be read, a null, or a value out of range raises naming the file.
    """
    return _read_groups(plan, plan.groups, target)


def read_pieces(plan: TaskPlan, target: pa.Schema | None = None) -> Iterator[pa.Table]:
    """:func:`read_task`'s rows one piece at a time (:attr:`TaskPlan.pieces`: no stream in two), read as they
    are asked for: replayed one after the other they give the task's answer with one piece's memory."""
    for groups in plan.pieces or [plan.groups]:
        yield _read_groups(plan, groups, target)


def _read_groups(plan: TaskPlan, groups: Sequence[tuple[str, list[int] | None]],
                 target: pa.Schema | None) -> pa.Table:
    tables = []
    for path, indexes in groups:
        try:
            parquet = open_parquet(path, read_dictionary=[TOPIC])  # (as the replay keys it: no cast, no hashing)
            planned = plan.footers.get(path)
            if planned is not None and footer_print(path, parquet.metadata) != planned:
                raise ValueError("the file changed after the audit planned its row groups (rewritten while the "
                                 "audit ran?): audit it again once it is written")
            columns = None if target is None else [name for name in target.names if name in parquet.schema_arrow.names]
            indexes = list(range(parquet.num_row_groups)) if indexes is None else indexes
            table = checked(parquet.read_row_groups(indexes, columns=columns, use_threads=False))
        except READ_ERRORS as exc:
            raise unreadable(path, exc) from None
        tables.append(table if target is None else conform(table, target, path, _file_row(parquet.metadata, indexes)))
    table = pa.concat_tables(tables, promote_options="default")
    if plan.parts > 1:
        mine = stream_slice(table.column(TOPIC), table.column("partition").to_numpy(), plan.parts) == plan.part
        table = table.filter(pa.array(mine))
    return table
