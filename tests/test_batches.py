"""Packed batch metadata: accepted inputs, zero-copy, defaults, and errors that name the column."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

import idemcore
from idemcore import BatchColumns, ErrorCode, Status
from idemcore.kernels.columns import COLUMNS

from .helpers import batches, data

BASE = {"producer_id": np.array([5, 5], np.int64), "producer_epoch": np.array([0, 0], np.int16),
        "base_sequence": np.array([0, 1], np.int32), "record_count": np.array([1, 2], np.int32)}


def test_matching_dtypes_are_not_copied():
    packed = BatchColumns.coerce(BASE)
    for name in BASE:
        assert np.shares_memory(packed[name], BASE[name]), name


def test_defaults_and_derived_last_sequence():
    packed = BatchColumns.coerce(BASE)
    assert packed["last_sequence"].tolist() == [0, 2]
    assert packed["stream"].tolist() == [0, 0] and packed["base_offset"].tolist() == [-1, -1]
    assert packed["control_type"].tolist() == [-1, -1] and not packed["is_control"].any()
    assert {name: packed[name].dtype for name in COLUMNS} == COLUMNS


def test_record_count_derived_across_wrap():
    packed = BatchColumns.coerce({**{k: v for k, v in BASE.items() if k != "record_count"},
                                   "base_sequence": np.array([2147483646, 0], np.int32),
                                   "last_sequence": np.array([1, 0], np.int32)})
    assert packed["record_count"].tolist() == [4, 1]


def test_pandas_and_arrow_inputs_give_the_same_verdicts():
    frame = pd.DataFrame({"producer_id": [5, 5, 5], "producer_epoch": [0, 0, 0], "base_sequence": [0, 0, 2],
                          "record_count": [1, 1, 1], "partition": [3, 3, 3]})
    table = pa.Table.from_pandas(frame)
    batch = table.to_batches()[0]
    results = [idemcore.validate(source, backend="python") for source in (frame, table, batch, frame.to_dict("list"))]
    for result in results:
        assert result.status.tolist() == [Status.APPENDED, Status.DUPLICATE, Status.REJECTED]
        assert result.error_code.tolist() == [0, 0, ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER]


def test_arrow_primitive_columns_are_zero_copy():
    table = pa.table({name: pa.array(values) for name, values in BASE.items()})
    packed = BatchColumns.coerce(table)
    assert np.shares_memory(packed["producer_id"], table.column("producer_id").chunks[0].to_numpy())


def test_missing_required_column_is_named():
    with pytest.raises(ValueError, match="producer_epoch"):
        BatchColumns.coerce({k: v for k, v in BASE.items() if k != "producer_epoch"})
    with pytest.raises(ValueError, match=r"last_sequence \(or record_count\)"):
        BatchColumns.coerce({k: v for k, v in BASE.items() if k != "record_count"})


@pytest.mark.parametrize("bad, message", [
    (np.array([0.5, 1.0]), "producer_epoch.*float64"),
    (np.array(["a", "b"]), "producer_epoch"),
    (np.array([0, 40000]), r"producer_epoch.*outside the range of int16"),
])
def test_unsafe_casts_are_refused_naming_the_column(bad, message):
    with pytest.raises(ValueError, match=message):
        BatchColumns.coerce({**BASE, "producer_epoch": bad})


def test_wider_integers_that_fit_are_cast():
    packed = BatchColumns.coerce({**BASE, "producer_epoch": np.array([0, 3], np.int64)})
    assert packed["producer_epoch"].dtype == np.int16 and packed["producer_epoch"].tolist() == [0, 3]


def test_lengths_must_match():
    with pytest.raises(ValueError, match="'producer_epoch' has 3 values"):
        BatchColumns.coerce({**BASE, "producer_epoch": np.zeros(3, np.int16)})


def test_nulls_are_refused_naming_the_column():
    frame = pd.DataFrame({"producer_id": pd.array([5, None], dtype="Int64"), "producer_epoch": [0, 0],
                          "base_sequence": [0, 1], "record_count": [1, 1]})
    with pytest.raises(ValueError, match="'producer_id' contains 1 null"):
        BatchColumns.coerce(frame)
    table = pa.table({"producer_id": [5, None], "producer_epoch": [0, 0], "base_sequence": [0, 1],
                      "record_count": [1, 1]})
    with pytest.raises(ValueError, match="'producer_id' contains 1 null"):
        BatchColumns.coerce(table)


def test_boolean_columns_accept_zero_one_integers_only():
    assert BatchColumns.coerce({**BASE, "is_transactional": np.array([0, 1])})["is_transactional"].tolist() == [
        False, True]
    with pytest.raises(ValueError, match="is_transactional"):
        BatchColumns.coerce({**BASE, "is_transactional": np.array([0, 2])})


def test_unsupported_container_is_a_type_error():
    with pytest.raises(TypeError, match="mapping of arrays"):
        BatchColumns.coerce([1, 2, 3])


@pytest.mark.parametrize("row", [
    data(1, 0, 0, record_count=0),                       # no records
    data(1, 0, 0, 5, record_count=2),                   # last != base + count - 1
    data(1, -2, 0),                                     # epoch below -1
    data(-2, 0, 0),                                     # producer id below -1
    data(1, 0, 0, partition=-1),                        # negative partition
    data(1, 0, -1),                                     # idempotent client batch without a sequence
    data(-1, -1, -1, is_transactional=True),            # transactional without producer id
    {**data(1, 0, -1), "is_control": True, "control_type": 5},  # marker of no known type
    data(1, 0, 0, base_offset=-5),
])
def test_impossible_metadata_is_invalid_record(backend, row):
    verdicts = idemcore.validate(batches([row]), backend=backend)
    assert (verdicts.status[0], verdicts.error_code[0], verdicts.base_offset[0]) == (Status.REJECTED, 87, -1)


def test_empty_input(backend):
    verdicts = idemcore.validate({name: [] for name in ("producer_id", "producer_epoch", "base_sequence",
                                                        "record_count")}, backend=backend)
    assert len(verdicts) == 0 and len(verdicts.completed_txns) == 0


def test_kafkas_partition_column_is_the_stream_without_a_copy():
    partition = np.array([3, 4], np.int32)
    packed = BatchColumns.coerce({**BASE, "partition": partition})
    assert np.shares_memory(packed["stream"], partition)
    assert packed.stream.tolist() == [3, 4]
    same = BatchColumns.coerce({**BASE, "stream": partition})
    assert np.shares_memory(same["stream"], partition)


def test_a_stream_and_a_partition_column_together_are_refused():
    with pytest.raises(ValueError, match="both a 'stream' and a 'partition' column"):
        BatchColumns.coerce({**BASE, "stream": [0, 0], "partition": [0, 0]})


def test_errors_name_the_column_as_the_input_gave_it():
    with pytest.raises(ValueError, match="column 'partition' must be int32"):
        BatchColumns.coerce({**BASE, "partition": np.array([0.5, 1.5])})


def test_iterating_gives_the_kernel_arguments_in_order_with_uint8_flags():
    packed = BatchColumns.coerce({**BASE, "is_control": [False, True]})
    arguments = list(packed)
    assert len(arguments) == len(COLUMNS) and len(packed) == 2
    for name, array in zip(COLUMNS, arguments, strict=True):
        assert np.shares_memory(array, packed[name]), name
        assert array.dtype == (np.uint8 if COLUMNS[name] == np.bool_ else COLUMNS[name]), name
    assert arguments[list(COLUMNS).index("is_control")].tolist() == [0, 1]


def test_allocate_fills_the_defaults():
    room = BatchColumns.allocate(3)
    assert len(room) == 3 and room.base_offset.tolist() == [-1] * 3 and room.control_type.tolist() == [-1] * 3
    assert room.stream.tolist() == [0] * 3 and not room.is_transactional.any()
    with pytest.raises(AttributeError, match="no column 'partition'"):
        _ = room.partition
