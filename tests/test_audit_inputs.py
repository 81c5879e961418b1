"""The audit reads what is there: each file's columns and encodings reconciled to one schema, a bad value
named by file, column, value and row (before Spark when the footers show it), and failures in one line.

Most checks run on the driver side without Spark (the schema check, the footer check, ``read_task``); a
few end-to-end cases use the session-wide ``spark`` fixture.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from idemcore.audit import AuditReport, StreamReplayer, replay_table
from idemcore.audit.replayer import replay_checked
from idemcore.audit.spark.plan import TaskPlan, plan_row_groups, read_footer, read_footers, read_task
from idemcore.audit.spark.schema import InputError, check_arrow_schemas, check_footer_values, conform
from idemcore.audit.spark.session import check_master
from idemcore.cli import main
from idemcore.kernels.columns import DEFAULTS, INPUT_COLUMNS
from idemcore.protocol.sequences import last_sequences

OPTIONAL = [name for name in DEFAULTS if name != "partition"]  # partition is required by the audit
SEQUENCES = [("last_sequence",), ("record_count",), ("last_sequence", "record_count")]
INTEGERS = [pa.int8(), pa.int16(), pa.int32(), pa.int64(), pa.uint16(), pa.uint32(),
            pa.dictionary(pa.int32(), pa.int64())]
BOOLEANS = [pa.bool_(), pa.int8(), pa.uint8()]
STRING = pa.string()
TOPICS = [STRING, pa.large_string(), pa.dictionary(pa.int32(), pa.string()), pa.dictionary(pa.int8(), pa.string())]
PIDS = np.array([0, 7, 40_000, 2**33 + 5])  # some fit int16, some only int64


def batch_rows(seed: int, n: int) -> dict[str, np.ndarray]:
    """Produce attempts over 2 topics x 3 partitions: mostly in sequence, some gaps, retries and reorders,
    transactional batches and markers, optional columns away from their defaults."""
    rng = np.random.default_rng(seed)
    topic = rng.choice(np.array(["orders", "payments"], dtype=object), n)
    partition = rng.integers(0, 3, n).astype(np.int32)
    producer_id = rng.choice(PIDS, n).astype(np.int64)
    epoch = rng.integers(0, 2, n).astype(np.int16)
    count = rng.integers(1, 4, n).astype(np.int32)
    control = rng.random(n) < 0.08
    base = np.empty(n, np.int32)
    following: dict[tuple, int] = {}
    for k in range(n):
        key = (topic[k], partition[k], producer_id[k], epoch[k])
        expected = following.get(key, 0)
        base[k] = expected if rng.random() < 0.8 else max(0, expected + int(rng.integers(-4, 4)))
        following[key] = int(base[k] + count[k])
    base[control], count[control] = -1, 1
    return {
        "topic": topic, "partition": partition, "producer_id": producer_id, "producer_epoch": epoch,
        "base_sequence": base, "last_sequence": last_sequences(base, count), "record_count": count,
        "base_offset": np.where(rng.random(n) < 0.5, -1, rng.integers(0, 1000, n)).astype(np.int64),
        "max_timestamp": rng.integers(1, 10**12, n).astype(np.int64),
        "is_transactional": control | (rng.random(n) < 0.3), "is_control": control,
        "control_type": np.where(control, rng.integers(0, 2, n), -1).astype(np.int8),
        "coordinator_epoch": rng.integers(0, 3, n).astype(np.int32),
        "seq_no": np.arange(n, dtype=np.int64) * 3 + 100,
    }


@dataclass
class FileLayout:
    """How one file is written: which optional columns, which Arrow types, which Parquet options."""

    optional: set[str]
    sequences: tuple[str, ...]
    topic: pa.DataType = STRING
    integers: dict[str, int] = field(default_factory=dict)  # column -> preferred index into INTEGERS
    booleans: dict[str, pa.DataType] = field(default_factory=dict)
    use_dictionary: bool = True
    statistics: bool = True
    row_group_size: int = 10_000

    def columns(self) -> list[str]:
        return [name for name in ("topic", *INPUT_COLUMNS, "seq_no")
                if name in ("topic", "partition", "producer_id", "producer_epoch", "base_sequence", "seq_no")
                or name in self.optional or name in self.sequences]


def _integer_type(values: np.ndarray, preferred: int) -> pa.DataType:
    def fits(data_type: pa.DataType) -> bool:
        value_type = data_type.value_type if pa.types.is_dictionary(data_type) else data_type
        info = np.iinfo(value_type.to_pandas_dtype())
        return not len(values) or (info.min <= values.min() and values.max() <= info.max)

    choices = [t for t in INTEGERS if fits(t)]
    return choices[preferred % len(choices)]


def _array(name: str, values: np.ndarray, layout: FileLayout) -> pa.Array:
    if name == "topic":
        return pa.array(list(values), pa.string()).dictionary_encode().cast(layout.topic) \
            if pa.types.is_dictionary(layout.topic) else pa.array(list(values), layout.topic)
    if INPUT_COLUMNS.get(name, np.dtype(np.int64)).kind == "b":
        return pa.array(values.astype(np.int64) if layout.booleans.get(name, pa.bool_()) != pa.bool_() else values,
                        layout.booleans.get(name, pa.bool_()))
    data_type = _integer_type(values, layout.integers.get(name, 3))
    if pa.types.is_dictionary(data_type):
        return pa.array(values, data_type.value_type).dictionary_encode().cast(data_type)
    return pa.array(values, data_type)


def write_files(directory: Path, rows: dict[str, np.ndarray], file_of: np.ndarray,
                layouts: list[FileLayout]) -> list[str]:
    paths = []
    for k, layout in enumerate(layouts):
        mine = file_of == k
        table = pa.table({name: _array(name, rows[name][mine], layout) for name in layout.columns()})
        path = directory / f"part-{k}.parquet"
        pq.write_table(table, path, use_dictionary=layout.use_dictionary, write_statistics=layout.statistics,
                       row_group_size=layout.row_group_size)
        paths.append(str(path))
    return paths


def expected_table(rows: dict[str, np.ndarray], file_of: np.ndarray, layouts: list[FileLayout]) -> pa.Table:
    """The rows as the audit must see them: an optional column a file lacks holds its default there;
    a column no file has is left out (the replay fills it)."""
    out = {}
    for name in ("topic", *INPUT_COLUMNS, "seq_no"):
        having = np.array([name in layout.columns() for layout in layouts])
        if not having.any():
            continue
        values = rows[name]
        if name in DEFAULTS and not having.all():
            values = np.where(having[file_of], values, DEFAULTS[name]).astype(values.dtype)
        out[name] = pa.array(list(values), pa.string()) if name == "topic" else pa.array(values)
    return pa.table(out)


def audit_inputs(directory: Path, tasks: int) -> tuple[pa.Schema, str, list[pa.Table]]:
    """What audit() does in path mode, without Spark: the driver's checks, then every task's read."""
    footers = read_footers(directory)
    target, order = check_arrow_schemas((f.path, f.schema) for f in footers)
    check_footer_values(footers, target)
    plans = plan_row_groups([group for footer in footers for group in footer.groups], tasks)
    return target, order, [read_task(plan, target) for plan in plans]


def report_of(tables: list[pa.Table], order: str = "seq_no") -> AuditReport:
    return AuditReport.from_results([replay_checked(t, StreamReplayer(order_by=order)) for t in tables],
                                    order_by=order, seconds=1.0)


def assert_same_report(got: AuditReport, want: AuditReport) -> None:
    assert got.batches == want.batches
    assert got.findings.equals(want.findings)
    assert got.partitions.equals(want.partitions)
    assert got.open_txns.equals(want.open_txns)


# ---- the fuzz test: random column sets, types, encodings, nulls and bad values over several files --------------

BAD_NULL = ["producer_id", "base_sequence", "topic", "partition", "seq_no", "producer_epoch"]
#: A value out of range in a file's own wider type: (column, value, the file's type).
BAD_RANGE = [("producer_epoch", 40_000, pa.int32()), ("partition", 2**33, pa.int64()),
             ("base_sequence", 2**31, pa.int64()), ("is_control", 2, pa.int8())]


@st.composite
def file_layouts(draw) -> FileLayout:
    sequences = draw(st.sampled_from(SEQUENCES))
    optional = draw(st.sets(st.sampled_from(OPTIONAL)))
    if "record_count" not in sequences:
        optional.add("is_control")  # markers have no sequences: only is_control says they hold one record
    return FileLayout(
        optional=optional,
        sequences=sequences,
        topic=draw(st.sampled_from(TOPICS)),
        integers=draw(st.fixed_dictionaries({name: st.integers(0, 6) for name in (*INPUT_COLUMNS, "seq_no")
                                             if INPUT_COLUMNS.get(name, np.dtype(np.int64)).kind != "b"})),
        booleans=draw(st.fixed_dictionaries({name: st.sampled_from(BOOLEANS) for name in INPUT_COLUMNS
                                             if INPUT_COLUMNS[name].kind == "b"})),
        use_dictionary=draw(st.booleans()),
        statistics=draw(st.booleans()),
        row_group_size=draw(st.sampled_from([7, 40, 10_000])),
    )


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(layouts=st.lists(file_layouts(), min_size=2, max_size=4), seed=st.integers(0, 2**16),
       n=st.integers(10, 120), tasks=st.integers(1, 3), bad=st.sampled_from([None, None, "null", "range"]),
       bad_pick=st.integers(0, 2**16))
def test_any_mix_of_files_reads_and_replays_as_its_rows(tmp_path_factory, layouts, seed, n, tasks, bad, bad_pick):
    directory = tmp_path_factory.mktemp("mix")
    rows = batch_rows(seed, n)
    file_of = np.random.default_rng(seed).integers(0, len(layouts), n)
    if bad is not None:
        victim = int(file_of[bad_pick % n])  # a file with at least one row
        row = bad_pick % int((file_of == victim).sum())
        layout = layouts[victim]
        if bad == "null":
            column = BAD_NULL[bad_pick % len(BAD_NULL)]
            value = "null"
        else:
            column, number, data_type = BAD_RANGE[bad_pick % len(BAD_RANGE)]
            layout.optional.add(column) if column in OPTIONAL else None
            layout.booleans[column] = data_type  # for a boolean column: an int8 file
            value = str(number)
        path = _write_with_bad_value(directory, rows, file_of, layouts, victim, column, row,
                                     None if bad == "null" else (number, data_type))
        message = f"column '{column}' in {path}: {value} at row {row}"
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # fills, missing statistics: not the point here
            with pytest.raises(InputError, match=re.escape(message)):
                audit_inputs(directory, tasks)  # the footer check, or the worker's read
            footers = read_footers(directory)
            target, _ = check_arrow_schemas((f.path, f.schema) for f in footers)
            plans = plan_row_groups([g for f in footers for g in f.groups], tasks)
            with pytest.raises(InputError, match=re.escape(message)):
                for plan in plans:  # a worker finds it too, without the driver's check
                    read_task(plan, target)
        return

    paths = write_files(directory, rows, file_of, layouts)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        target, _, tables = audit_inputs(directory, tasks)
    filled = {re.match(r"column '(\w+)' is missing from (\d+) of (\d+) files", str(w.message)).groups()
              for w in caught if "is missing from" in str(w.message)}
    expected_fills = set()
    for name in (*OPTIONAL, "last_sequence", "record_count"):
        lacking = sum(name not in layout.columns() for layout in layouts)
        if 0 < lacking < len(layouts):
            expected_fills.add((name, str(lacking), str(len(paths))))
    assert filled == expected_fills
    for name in target.names:  # the kernel's columns arrive in the kernel's types
        if name in INPUT_COLUMNS:
            assert target.field(name).type == pa.from_numpy_dtype(INPUT_COLUMNS[name]), name

    want = expected_table(rows, file_of, layouts)
    got = pa.concat_tables([t.cast(pa.schema([pa.field(f.name, want.schema.field(f.name).type)
                                              for f in t.schema])) for t in tables]).sort_by("seq_no")
    assert got.column_names == want.column_names
    for name in want.column_names:
        assert got.column(name).to_pylist() == want.column(name).to_pylist(), name
    assert_same_report(report_of(tables), AuditReport.from_results([replay_table(want)], order_by="seq_no",
                                                                   seconds=1.0))


def test_aborted_records_follow_the_stream_when_given_offsets_go_back():
    """A given base_offset is taken as given, so a stream's offsets may go back (the fuzz test's random
    base_offset column): a transaction is still what the stream says, its producer's transactional batches
    from the first to its marker. One feed or a row a feed: 3 aborted records, not 0."""
    table = pa.table({
        "topic": ["t"] * 4, "partition": pa.array([0] * 4, pa.int32()),
        "producer_id": pa.array([5] * 4, pa.int64()), "producer_epoch": pa.array([0] * 4, pa.int16()),
        "base_sequence": pa.array([0, -1, 3, -1], pa.int32()), "last_sequence": pa.array([2, -1, 4, -1], pa.int32()),
        "record_count": pa.array([3, 1, 2, 1], pa.int32()),
        "base_offset": pa.array([877, 689, 100, 50], pa.int64()),  # data 877..879, its ABORT at 689, and so on
        "is_transactional": [True] * 4, "is_control": [False, True, False, True],
        "control_type": pa.array([-1, 0, -1, 1], pa.int8()),  # ABORT, then a COMMIT of the next transaction
        "seq_no": pa.array([1, 2, 3, 4], pa.int64()),
    })
    whole = replay_table(table, order_by="seq_no")
    replayer = StreamReplayer(order_by="seq_no")
    for row in range(table.num_rows):
        replayer.feed(table.slice(row, 1))
    for result in (whole, replayer.finish()):
        (partition,) = result.partitions.to_pylist()
        assert (partition["appended"], partition["aborted_txns"], partition["committed_txns"],
                partition["aborted_records"]) == (4, 1, 1, 3)


def _write_with_bad_value(directory: Path, rows: dict[str, np.ndarray], file_of: np.ndarray,
                          layouts: list[FileLayout], victim: int, column: str, row: int,
                          number_type: tuple[int, pa.DataType] | None) -> str:
    paths = write_files(directory, rows, file_of, layouts)
    table = pq.read_table(paths[victim])
    values = table.column(column).to_pylist()
    if number_type is None:
        values[row] = None
        data_type = table.schema.field(column).type
        array = pa.array(values, data_type.value_type).dictionary_encode().cast(data_type) \
            if pa.types.is_dictionary(data_type) else pa.array(values, data_type)
    else:
        values[row] = number_type[0]
        array = pa.array([int(v) for v in values], number_type[1])
    table = table.set_column(table.schema.get_field_index(column), column, array)
    layout = layouts[victim]
    pq.write_table(table, paths[victim], use_dictionary=layout.use_dictionary, write_statistics=layout.statistics,
                   row_group_size=layout.row_group_size)
    return paths[victim]


# ---- the driver's checks ---------------------------------------------------------------------------------------

def _schema(**types: pa.DataType) -> pa.Schema:
    base = {"topic": pa.string(), "partition": pa.int32(), "producer_id": pa.int64(), "producer_epoch": pa.int16(),
            "base_sequence": pa.int32(), "last_sequence": pa.int32(), "seq_no": pa.int64()}
    return pa.schema([(name, data_type) for name, data_type in {**base, **types}.items() if data_type is not None])


def test_files_with_different_types_and_columns_get_one_schema_and_a_warning_per_fill():
    files = [("a.parquet", _schema(topic=pa.dictionary(pa.int32(), pa.string()), max_timestamp=pa.int64())),
             ("b.parquet", _schema(producer_id=pa.int32(), partition=pa.int64(), last_sequence=None,
                                   record_count=pa.int16(), is_control=pa.int8())),
             ("c.parquet", _schema(topic=pa.large_string(), seq_no=pa.uint32(), max_timestamp=pa.int64()))]
    with pytest.warns(UserWarning) as caught:
        target, order = check_arrow_schemas(files)
    assert order == "seq_no"
    assert target == pa.schema([
        ("topic", pa.dictionary(pa.int32(), pa.string())), ("partition", pa.int32()), ("producer_id", pa.int64()),
        ("producer_epoch", pa.int16()), ("base_sequence", pa.int32()), ("last_sequence", pa.int32()),
        ("record_count", pa.int32()), ("max_timestamp", pa.int64()), ("is_control", pa.bool_()),
        ("seq_no", pa.int64())])
    assert sorted(str(w.message) for w in caught) == [
        "column 'is_control' is missing from 2 of 3 files (first: a.parquet); filled with False",
        "column 'last_sequence' is missing from 1 of 3 files (first: b.parquet); derived from base_sequence and "
        "record_count",
        "column 'max_timestamp' is missing from 1 of 3 files (first: b.parquet); filled with 0",
        "column 'record_count' is missing from 2 of 3 files (first: a.parquet); derived from base_sequence and "
        "last_sequence",
    ]


def test_files_written_alike_are_read_without_a_cast(tmp_path):
    files = [(f"{k}.parquet", _schema(topic=pa.dictionary(pa.int32(), pa.string()), seq_no=pa.int32()))
             for k in range(3)]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing filled: nothing said
        target, _ = check_arrow_schemas(files)
    assert target == files[0][1]  # the files' own topic and seq_no types are kept
    table = pa.table({name: pa.array(["t"]).dictionary_encode() if name == "topic" else
                      pa.array([0], target.field(name).type) for name in target.names})
    assert conform(table, target, "x.parquet") is table


@pytest.mark.parametrize(("files", "message"), [
    ([("a.parquet", _schema()), ("b.parquet", _schema(seq_no=None, base_offset=pa.int64()))],
     "ordering column 'seq_no' is missing from 1 of 2 files (first: b.parquet); every file needs it"),
    ([("a.parquet", _schema()), ("b.parquet", _schema(producer_epoch=None))],
     "batch metadata is missing required column(s): producer_epoch (in b.parquet)"),
    ([("a.parquet", _schema()), ("b.parquet", _schema(last_sequence=None))],
     "missing required column(s): last_sequence (or record_count) (in b.parquet)"),
    ([("a.parquet", _schema()), ("b.parquet", _schema(producer_id=pa.string()))],
     "column 'producer_id' must be an integer; got string (in b.parquet)"),
    ([("a.parquet", _schema()), ("b.parquet", _schema(topic=pa.dictionary(pa.int32(), pa.int64())))],
     "column 'topic' must be a string; got dictionary<values=int64, indices=int32, ordered=0> (in b.parquet)"),
    ([("a.parquet", _schema(is_control=pa.float64()))], "column 'is_control' must be a boolean (or 0/1 integer)"),
    ([], "no Parquet files to audit"),
])
def test_files_that_cannot_be_reconciled_are_named(files, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        check_arrow_schemas(files)


def _write(path: Path, statistics: bool = True, row_group_size: int = 4, **columns) -> str:
    n = 10
    base = {"topic": pa.array(["t"] * n), "partition": pa.array([0] * n, pa.int32()),
            "producer_id": pa.array([5] * n, pa.int64()), "producer_epoch": pa.array([0] * n, pa.int16()),
            "base_sequence": pa.array(range(n), pa.int32()), "last_sequence": pa.array(range(n), pa.int32()),
            "seq_no": pa.array(range(n), pa.int64())}
    pq.write_table(pa.table({**base, **columns}), path, write_statistics=statistics, row_group_size=row_group_size)
    return str(path)


@pytest.mark.parametrize(("column", "values", "message"), [
    ("producer_id", pa.array([5] * 6 + [None] + [5] * 3, pa.int64()),
     "column 'producer_id' in {path}: null at row 6 (1 null value(s)); every batch needs a value"),
    ("partition", pa.array([0] * 5 + [-3] + [0] * 4, pa.int32()),
     "column 'partition' in {path}: -3 at row 5 is outside [0, 2147483647]"),
    ("producer_epoch", pa.array([0] * 9 + [40_000], pa.int32()),
     "column 'producer_epoch' in {path}: 40000 at row 9 is outside int16 [-32768, 32767]"),
    ("is_control", pa.array([0, 1, 0, 0, 7, 0, 0, 0, 0, 0], pa.int8()),
     "column 'is_control' in {path}: 7 at row 4 is not a boolean (0 or 1)"),
    ("topic", pa.array(["t", None] + ["t"] * 8),
     "column 'topic' in {path}: null at row 1 (1 null value(s)); every batch needs a value"),
])
def test_a_bad_value_in_the_statistics_is_named_before_spark(tmp_path, column, values, message):
    good = _write(tmp_path / "a.parquet")
    bad = _write(tmp_path / "b.parquet", **{column: values})
    footers = read_footers(tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # is_control: filled in a.parquet
        target, _ = check_arrow_schemas((f.path, f.schema) for f in footers)
    with pytest.raises(InputError, match=f"^{re.escape(message.format(path=bad))}$"):
        check_footer_values(footers, target)
    assert good not in message


def test_a_bad_value_without_statistics_is_named_by_the_worker(tmp_path):
    path = _write(tmp_path / "a.parquet", statistics=False, row_group_size=3,
                  producer_epoch=pa.array([0] * 7 + [-40_000] + [0] * 2, pa.int64()))
    footers = read_footers(tmp_path)
    target, _ = check_arrow_schemas((f.path, f.schema) for f in footers)
    check_footer_values(footers, target)  # no statistics: nothing to see on the driver
    with pytest.warns(RuntimeWarning, match="no topic/partition statistics"):
        plan = plan_row_groups([g for f in footers for g in f.groups][2:], 1)[0]  # row groups 2 and 3: rows 6..9
    with pytest.raises(InputError, match=re.escape(f"column 'producer_epoch' in {path}: -40000 at row 7 is outside "
                                                   "int16 [-32768, 32767]")):
        read_task(plan, target)


def test_a_value_only_the_replay_refuses_names_the_files_of_the_task(tmp_path):
    from idemcore.audit.spark.audit_job import _audit_paths
    from idemcore.audit.spark.task_rows import raise_task_errors as _raise_errors

    paths = [_write(tmp_path / f"{k}.parquet", statistics=False, partition=pa.array([k - 1] * 10, pa.int32()))
             for k in range(2)]
    footers = read_footers(tmp_path)
    target, order = check_arrow_schemas((f.path, f.schema) for f in footers)
    with pytest.warns(RuntimeWarning, match="no topic/partition statistics"):
        plans = plan_row_groups([g for f in footers for g in f.groups], 1)
    run = _audit_paths(plans, "client", target, order, None)
    (batch,) = run(iter([pa.RecordBatch.from_pydict({"id": [0]})]))  # what a Spark worker runs, here
    rows = batch.to_pylist()
    assert rows[0]["batches"] == 0 and rows[0]["error"].startswith("ValueError: ")
    with pytest.raises(ValueError, match=re.escape(f"column 'partition' has values outside [0, 2147483647]: [-1, 0] "
                                                   f"(in the rows of {paths[0]}, {paths[1]})")):
        _raise_errors(rows)


def test_an_unreadable_file_is_named(tmp_path):
    (tmp_path / "x.parquet").write_bytes(b"not parquet at all")
    with pytest.raises(ValueError, match=re.escape(f"{tmp_path / 'x.parquet'} is not a readable Parquet file: ")):
        read_footer(str(tmp_path / "x.parquet"))


@pytest.mark.parametrize("master", ["local", "local[4]", "local[*]", "local[2, 3]", "local-cluster[2, 1, 1024]",
                                    "spark://host:7077", "yarn", "k8s://https://host:6443"])
def test_masters_spark_accepts_pass(master):
    check_master(master)


@pytest.mark.parametrize("master", ["bogus", "local[0]", "local[abc]", "spark:host", "Local", "yarn-cluster", ""])
def test_masters_spark_refuses_are_one_line_before_a_jvm(master):
    with pytest.raises(ValueError, match=f"^Spark master {re.escape(repr(master))} is not one Spark accepts: "):
        check_master(master)


# ---- the command line ------------------------------------------------------------------------------------------

def _run(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)


def test_cli_with_a_bogus_master_says_so_in_one_line(tmp_path):
    _write(tmp_path / "a.parquet")
    result = _run(f"import sys; from idemcore.cli import main; sys.exit(main(['audit', {str(tmp_path)!r}, "
                  "'--master', 'bogus']))")
    assert result.returncode == 2
    assert result.stderr.splitlines() == ["idemcore: error: Spark master 'bogus' is not one Spark accepts: use local, "
                                          "local[N], local[*], spark://HOST:PORT, yarn or k8s://HOST:PORT"]


@pytest.mark.parametrize(("missing", "commands"), [
    ("pyarrow", ["generate", "audit", "demo"]),
    ("pyspark", ["audit", "demo"]),
])
def test_cli_without_the_spark_extra_names_it_in_one_line(tmp_path, missing, commands):
    arguments = {"generate": ["generate", str(tmp_path / "ds")], "audit": ["audit", str(tmp_path)], "demo": ["demo"]}
    code = (f"import contextlib, io, json, sys; sys.modules[{missing!r}] = None\n"  # `import {missing}` fails
            "from idemcore.cli import main\n"
            "out = {}\n"
            f"for command in {commands!r}:\n"
            "    err = io.StringIO()\n"
            "    with contextlib.redirect_stderr(err):\n"
            f"        out[command] = (main({arguments!r}[command]), err.getvalue())\n"
            "print(json.dumps(out))")
    result = _run(code)
    assert result.returncode == 0, result.stderr
    for command, (status, err) in json.loads(result.stdout).items():
        assert status == 2
        assert err.splitlines() == [f"idemcore: error: `idemcore {command}` needs {missing}, which is not installed: "
                                    "pip install 'idemcore[spark]'"], command
    assert not (tmp_path / "ds").exists()


# ---- Spark end to end ------------------------------------------------------------------------------------------

MIXED = [
    FileLayout(optional={"max_timestamp", "is_transactional", "is_control", "control_type", "coordinator_epoch"},
               sequences=("last_sequence", "record_count"), topic=pa.dictionary(pa.int32(), pa.string())),
    FileLayout(optional={"is_transactional", "is_control", "control_type", "coordinator_epoch"},
               sequences=("record_count",), topic=pa.string(), integers=dict.fromkeys(INPUT_COLUMNS, 6),
               booleans={"is_transactional": pa.int8(), "is_control": pa.uint8()}, use_dictionary=False),
    FileLayout(optional={"max_timestamp", "is_transactional", "is_control", "control_type"},
               sequences=("last_sequence",), topic=pa.large_string(),
               integers=dict.fromkeys([*INPUT_COLUMNS, "seq_no"], 5),
               row_group_size=30),
]


def test_spark_audit_of_mixed_files_equals_the_replay_of_their_rows(spark, tmp_path):
    from idemcore.audit.spark import audit

    rows = batch_rows(11, 400)
    file_of = np.random.default_rng(11).integers(0, len(MIXED), 400)
    write_files(tmp_path, rows, file_of, MIXED)
    with pytest.warns(UserWarning) as caught:
        report = audit(tmp_path, spark=spark, tasks=2)
    assert sorted(re.sub(r" \(first: .*", "", str(w.message)) for w in caught) == [
        "column 'coordinator_epoch' is missing from 1 of 3 files",
        "column 'last_sequence' is missing from 1 of 3 files",
        "column 'max_timestamp' is missing from 1 of 3 files",
        "column 'record_count' is missing from 1 of 3 files"]
    want = AuditReport.from_results([replay_table(expected_table(rows, file_of, MIXED))], order_by="seq_no",
                                    seconds=1.0)
    assert report.finding_counts() and report.finding_counts() == want.finding_counts()
    assert_same_report(report, want)


def test_a_bad_value_a_spark_worker_finds_is_one_line_and_fails_no_task(spark, tmp_path, capsys, monkeypatch):
    from idemcore.audit.spark import progress

    first = _write(tmp_path / "a.parquet")
    path = _write(tmp_path / "b.parquet", statistics=False, max_timestamp=pa.array(range(10), pa.int64()),
                  producer_id=pa.array([5] * 5 + [None] + [5] * 4, pa.int64()))
    monkeypatch.setattr(progress.uuid, "uuid4", lambda: SimpleNamespace(hex="inputsgroup0"))
    assert main(["audit", str(tmp_path), "--json", "--tasks", "2"]) == 2
    assert capsys.readouterr().err.splitlines() == [  # warnings and the error: one line each
        f"idemcore: warning: column 'max_timestamp' is missing from 1 of 2 files (first: {first}); filled with 0",
        "idemcore: warning: some row groups have no topic/partition statistics: the whole source is read by one task",
        f"idemcore: error: column 'producer_id' in {path}: null at row 5 (1 null value(s)); every batch needs a value"]
    # The worker answered with the error instead of failing its task: Spark neither retried it nor logged
    # the worker's traceback with a Java stack trace.
    tracker = spark.sparkContext.statusTracker()
    jobs = [tracker.getJobInfo(job) for job in tracker.getJobIdsForGroup("idemcore-inputsgroup0")]
    assert jobs and all(job.status == "SUCCEEDED" for job in jobs)


def test_record_count_is_not_guessed_for_data_batches_without_sequences(tmp_path):
    from idemcore.kernels.columns import BatchColumns

    rows = {"topic": ["t"] * 3, "partition": [0] * 3, "producer_id": [-1, 5, 5], "producer_epoch": [-1, 0, 0],
            "base_sequence": [-1, 0, -1], "last_sequence": [-1, 4, -1], "is_control": [False, False, True],
            "seq_no": [1, 2, 3]}
    other = {**{name: values[1:2] for name, values in rows.items()}, "record_count": [5], "seq_no": [0]}
    a, b = tmp_path / "a.parquet", tmp_path / "b.parquet"
    pq.write_table(pa.table(other), a)  # has record_count: b's must be derived
    pq.write_table(pa.table(rows), b)
    with pytest.warns(UserWarning, match=r"column 'record_count' is missing from 1 of 2 files"):
        target, _ = check_arrow_schemas([(str(p), pq.read_schema(p)) for p in (a, b)])
    with pytest.raises(InputError, match=r"b\.parquet: record_count is needed: row 0 is not a control batch"):
        read_task(TaskPlan([(str(a), [0]), (str(b), [0])]), target)
    with pytest.raises(ValueError, match=r"record_count is needed: row 0 is not a control batch"):
        BatchColumns.coerce({name: rows[name] for name in rows if name not in ("topic", "seq_no")})
    rows["producer_id"][0], rows["base_sequence"][0], rows["last_sequence"][0] = 5, 5, 5
    pq.write_table(pa.table(rows), b)
    table = read_task(TaskPlan([(str(a), [0]), (str(b), [0])]), target)
    assert table.column("record_count").to_pylist() == [5, 1, 5, 1]  # the marker holds one record


REWRITTEN = r"cannot read .*f\.parquet: the file changed after the audit planned"


def _planned(path, rows: dict[str, np.ndarray], row_group_size: int) -> tuple[pa.Schema, TaskPlan]:
    """``rows`` written to ``path``, and the one task the driver plans for it (with its target schema)."""
    pq.write_table(pa.table(rows), path, row_group_size=row_group_size)
    footers = read_footers(path)
    target, _ = check_arrow_schemas((f.path, f.schema) for f in footers)
    (plan,) = plan_row_groups([group for footer in footers for group in footer.groups], 1)
    return target, plan


def test_a_file_rewritten_after_planning_is_refused_not_mixed(tmp_path):
    # The driver plans by a file's footer; a worker reading another version of the file (rewritten while the
    # audit ran) would audit a mix of the two. It names the file instead.
    rows = batch_rows(3, 400)
    path = tmp_path / "f.parquet"
    target, plan = _planned(path, rows, 400)
    assert read_task(plan, target).num_rows == 400  # as planned: read
    pq.write_table(pa.table({name: values[:240] for name, values in rows.items()}), path, row_group_size=80)
    with pytest.raises(ValueError, match=REWRITTEN):
        read_task(plan, target)


def test_a_rewrite_alike_in_rows_row_groups_and_footer_size_is_refused_too(tmp_path):
    # Two epochs changed: the same rows, row groups and footer size as the planned version (all the driver used
    # to compare), another file size.
    rows = batch_rows(3, 400)
    path = tmp_path / "f.parquet"
    target, plan = _planned(path, rows, 80)
    before = pq.ParquetFile(path).metadata
    rows["producer_epoch"][1:3] += 1
    pq.write_table(pa.table(rows), path, row_group_size=80)
    after = pq.ParquetFile(path).metadata
    assert (after.serialized_size, after.num_rows, after.num_row_groups) == \
        (before.serialized_size, before.num_rows, before.num_row_groups)
    with pytest.raises(ValueError, match=REWRITTEN):
        read_task(plan, target)
