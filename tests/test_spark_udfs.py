"""The building blocks for users' Spark plans (idemcore.audit.spark.udfs), each in a small user-style job,
against the in-process kernel on the same synthetic streams with planted anomalies.

Uses the run's one Spark session (the ``spark`` fixture).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

import idemcore
from idemcore import Finding
from idemcore.audit import replay_table
from idemcore.audit.spark import (
    OUTPUT_COLUMNS,
    STREAM_STATE_SCHEMA,
    clustered,
    load_state,
    save_state,
    validate,
    validate_arrow,
    validate_group,
    validate_stream,
    validated_schema,
)
from idemcore.synth.streams import inject_anomalies, synthetic_stream

from .test_replay import per_stream_reference

STATUS = ["appended", "duplicate", "rejected"]
#: The planted anomalies a batch's verdict shows (a hanging transaction is judged by the audit at the end of a
#: stream, from the open transactions, not by any one batch's verdict).
PLANTED = {"duplicate_beyond_window", "sequence_gap", "out_of_order", "epoch_regression", "fenced",
           "invalid_txn_state", "invalid_record"}


def _topic(seed: int) -> pd.DataFrame:
    stream = synthetic_stream(2500, n_producers=30, n_partitions=3, retry_fraction=0.03, seed=seed)
    columns, _, _ = inject_anomalies(stream, seed=seed, transactions=6)
    return pd.DataFrame(columns)


@pytest.fixture(scope="module")
def batches() -> pd.DataFrame:
    """Two topics of three partitions each, interleaved in arrival order (``seq_no``), anomalies planted."""
    a, b = _topic(1).assign(topic="orders"), _topic(2).assign(topic="payments")
    rng = np.random.default_rng(5)
    from_a = np.zeros(len(a) + len(b), bool)
    from_a[rng.choice(len(from_a), len(a), replace=False)] = True
    frame = pd.concat([a, b], ignore_index=True)
    frame["seq_no"] = np.r_[np.flatnonzero(from_a), np.flatnonzero(~from_a)].astype(np.int64)
    return frame[["topic", "seq_no", *idemcore.INPUT_COLUMNS]]


@pytest.fixture(scope="module")
def reference(batches):
    """Each (topic, partition) stream through idemcore.validate in-process: (topic, partition, seq_no) -> verdict."""
    return per_stream_reference(pa.Table.from_pandas(batches, preserve_index=False))


@pytest.fixture(scope="module")
def frame(spark, batches):
    """The batches as a user's DataFrame, rows scrambled over 3 partitions."""
    return spark.createDataFrame(batches.sample(frac=1.0, random_state=3)).repartition(3)


def _verdicts(rows) -> dict:
    """(topic, partition, seq_no) -> verdict, of Spark rows or a pandas frame, as per_stream_reference has them."""
    out = {}
    for r in rows.itertuples(index=False) if isinstance(rows, pd.DataFrame) else rows:
        out[(r.topic, int(r.partition), int(r.seq_no))] = (
            STATUS.index(r.status), int(r.error_code), int(r.assigned_base_offset), int(r.assigned_last_offset),
            Finding.parse(r.finding) if isinstance(r.finding, str) else 0)
    return out


def _check(got: dict, reference: dict) -> None:
    assert got == reference
    found = {Finding(v[4]).label for v in got.values() if v[4]}
    assert PLANTED | {"duplicate"} <= found  # every planted kind is among the verdicts compared


def test_validate_group_in_apply_in_pandas_equals_the_in_process_kernel(frame, reference, batches):
    schema = validated_schema(frame)
    assert schema.fieldNames() == [*frame.columns, *OUTPUT_COLUMNS]
    out = frame.groupBy("topic", "partition").applyInPandas(validate_group, schema=schema)
    rows = out.collect()
    _check(_verdicts(rows), reference)
    # The findings are those of the one-shot in-process audit.
    audited = replay_table(pa.Table.from_pandas(batches, preserve_index=False)).findings.to_pylist()
    assert {(r["topic"], r["partition"], r["seq_no"]): r["finding"] for r in audited} == \
        {(r.topic, r.partition, r.seq_no): r.finding for r in rows if r.finding}


def test_validate_group_called_directly_sorts_by_seq_no_else_base_offset(batches):
    one = batches[(batches.topic == "orders") & (batches.partition == 1)]
    expected = idemcore.validate(one.sort_values("seq_no").drop(columns=["topic", "seq_no"]))
    out = validate_group(one.sample(frac=1.0, random_state=1))
    assert out["seq_no"].is_monotonic_increasing and len(out) == len(one)
    assert out["error_code"].tolist() == expected.error_code.tolist()
    # A log read back: every batch has its offset, no seq_no. Log order is base_offset order.
    log = one.sort_values("seq_no").drop(columns=["seq_no"]).assign(base_offset=expected.base_offset)
    log = log[expected.status == 0]
    again = validate_group(log.sample(frac=1.0, random_state=2))
    assert again["base_offset"].is_monotonic_increasing
    assert (again["status"] == "appended").all() and again["assigned_base_offset"].tolist() == sorted(log.base_offset)


@pytest.mark.parametrize(("change", "message"), [
    (lambda df: df.drop(columns=["producer_epoch"]), r"missing required column\(s\): producer_epoch"),
    (lambda df: df.drop(columns=["seq_no", "base_offset"]), "needs an ordering column"),
    (lambda df: df.assign(producer_epoch=df.producer_epoch.astype(str)), "column 'producer_epoch' must be int16"),
    (lambda df: df.assign(producer_id=df.producer_id.astype(float).where(df.seq_no != df.seq_no.iloc[3])),
     "column 'producer_id' contains 1 null value"),
])
def test_validate_group_names_a_bad_column_in_one_line(batches, change, message):
    one = batches[(batches.topic == "orders") & (batches.partition == 0)]
    with pytest.raises(ValueError, match=message) as error:
        validate_group(change(one))
    assert "\n" not in str(error.value)


def test_validated_schema_names_a_bad_column_before_any_job(frame):
    with pytest.raises(ValueError, match=r"missing required column\(s\): base_sequence"):
        validated_schema(frame.drop("base_sequence"))
    with pytest.raises(ValueError, match="column 'producer_epoch' must be an integer; got string"):
        validated_schema(frame.withColumn("producer_epoch", frame.producer_epoch.cast("string")))
    with pytest.raises(ValueError, match="already has column"):
        validated_schema(validate(frame))


def test_validate_arrow_in_map_in_arrow_equals_validate_and_the_kernel(frame, reference):
    out = clustered(frame, "seq_no", 2).mapInArrow(validate_arrow(order_by="seq_no"), validated_schema(frame))
    got = _verdicts(out.collect())
    _check(got, reference)
    assert got == _verdicts(validate(frame).collect())


def test_saved_state_judges_later_batches_as_the_table_it_came_from(batches, backend):
    one = batches[batches.topic == "payments"].drop(columns=["topic", "seq_no"])  # three partitions
    whole = idemcore.validate(one, backend=backend)
    table = idemcore.ProducerStateTable()
    first = idemcore.validate(one.iloc[:1700], table, backend=backend)
    data = save_state(table)
    assert len(data) < 200 * table.n_producers + 100
    loaded = load_state(data, backend)
    assert all(np.array_equal(a, b) for a, b in zip(loaded.canonical().values(), table.canonical().values(),
                                                      strict=True))
    rest = idemcore.validate(one.iloc[1700:], loaded, backend=backend)
    for name in ("status", "error_code", "base_offset", "last_offset", "finding"):
        assert np.concatenate([getattr(first, name), getattr(rest, name)]).tolist() == getattr(whole, name).tolist()


class FakeGroupState:
    """What validate_stream uses of pyspark's GroupState."""

    def __init__(self):
        self.value = None
        self.hasTimedOut = False

    @property
    def exists(self):
        return self.value is not None

    @property
    def get(self):
        return self.value

    def update(self, value):
        self.value = value


def _rounds(batches: pd.DataFrame, cuts=(0.3, 0.55, 1.0)) -> list[pd.DataFrame]:
    ends = [int(c * len(batches)) for c in cuts]
    return [batches[(batches.seq_no >= start) & (batches.seq_no < end)]
            for start, end in zip([0, *ends[:-1]], ends, strict=True)]


def test_validate_stream_over_micro_batches_equals_a_one_shot_validation(batches, reference):
    states: dict = {}
    got: dict = {}
    for round_ in _rounds(batches):
        for key, group in round_.groupby(["topic", "partition"]):
            state = states.setdefault(key, FakeGroupState())
            chunks = [group.iloc[: len(group) // 2], group.iloc[len(group) // 2:]]  # Spark may pass several
            for out in validate_stream(key, iter(chunks), state):
                got.update(_verdicts(out))
    _check(got, reference)
    key, state = next(iter(states.items()))
    late = batches[(batches.topic == key[0]) & (batches.partition == key[1])].iloc[:3]
    with pytest.raises(ValueError, match="must arrive in order"):
        list(validate_stream(key, iter([late]), state))
    mixed = batches[batches.partition == 0].groupby("topic").head(5)  # two topics in one group
    with pytest.raises(ValueError, match="one \\(topic, partition\\) stream per group"):
        list(validate_stream(("x",), iter([mixed]), FakeGroupState()))


def test_validate_stream_in_a_streaming_query_restarted_every_round(spark, tmp_path, batches, reference):
    from pyspark.sql.streaming.state import GroupStateTimeout

    source, checkpoint = tmp_path / "in", tmp_path / "checkpoint"
    source.mkdir()
    collected: list = []
    schema = None
    for k, round_ in enumerate(_rounds(batches)):
        round_.sample(frac=1.0, random_state=k).to_parquet(source / f"round-{k}.parquet", index=False)
        schema = schema or spark.read.parquet(str(source)).schema
        stream = spark.readStream.schema(schema).parquet(str(source))
        verdicts = stream.groupBy("topic", "partition").applyInPandasWithState(
            validate_stream, validated_schema(stream), STREAM_STATE_SCHEMA, "append", GroupStateTimeout.NoTimeout)
        query = (verdicts.writeStream.outputMode("append").option("checkpointLocation", str(checkpoint))
                 .foreachBatch(lambda df, _: collected.extend(df.collect())).trigger(availableNow=True).start())
        query.awaitTermination(120)
        assert query.exception() is None
        assert len(collected) == int((batches.seq_no < round_.seq_no.max() + 1).sum())  # each round, once
    _check(_verdicts(collected), reference)
