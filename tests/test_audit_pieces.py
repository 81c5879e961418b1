"""Path mode reads and replays a task piece by piece (components that share no stream): the same answer as the
whole task read at once, with one piece's memory."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from idemcore.audit import AuditReport, StreamReplayer
from idemcore.audit.replayer import feed_in_order, replay_checked
from idemcore.audit.spark import plan as plan_module
from idemcore.audit.spark.plan import WATCHED, plan_row_groups, read_footers, read_pieces, read_task
from idemcore.audit.spark.schema import check_arrow_schemas
from idemcore.synth.dataset import DATA_DIR, generate


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("pieces") / "set"
    generate(out, topics=2, partitions=8, producers=20, batches=20_000, partitions_per_file=2,
             row_group_rows=700, progress=False)
    return out / DATA_DIR


def _streams(table: pa.Table) -> set[tuple[str, int]]:
    return set(zip(table.column("topic").to_pylist(), table.column("partition").to_pylist(), strict=True))



@pytest.mark.parametrize("piece_rows", [1, 3_000, 1 << 20])
def test_pieces_share_no_stream_and_replay_as_the_whole_task(dataset, monkeypatch, piece_rows):
    monkeypatch.setattr(plan_module, "PIECE_ROWS", piece_rows)
    footers = read_footers(dataset, WATCHED)
    target, order = check_arrow_schemas(((f.path, f.schema) for f in footers), None)
    plans = plan_row_groups([group for footer in footers for group in footer.groups], 2)
    pieces_seen = 0
    for plan in plans:
        pieces = list(read_pieces(plan, target))
        pieces_seen += len(pieces)
        # Every row of the task, each in one piece; no stream in two pieces.
        whole = read_task(plan, target)
        assert sum(piece.num_rows for piece in pieces) == whole.num_rows
        seen: set[tuple[str, int]] = set()
        for piece in pieces:
            streams = _streams(piece)
            assert not streams & seen
            seen |= streams
        assert seen == _streams(whole)
        # Replayed one after the other: the whole task's answer.
        replayer = StreamReplayer("client", order)
        for piece in pieces:
            feed_in_order(piece, replayer)
        by_pieces = AuditReport.from_results([replayer.finish()], order_by=order, seconds=1.0)
        at_once = AuditReport.from_results([replay_checked(whole, StreamReplayer("client", order))], order_by=order,
                                           seconds=1.0)
        assert by_pieces.findings.num_rows > 0
        assert by_pieces.findings.equals(at_once.findings)
        assert by_pieces.partitions.equals(at_once.partitions)
        assert by_pieces.open_txns.equals(at_once.open_txns)
    # One row group per piece at the smallest size (each file's groups hold 2 streams: several components).
    if piece_rows == 1:
        assert pieces_seen > len(plans)
    if piece_rows == 1 << 20:
        assert pieces_seen == len(plans)
