"""A broker killed by SIGKILL at 100 seeded points (mid-write, mid-roll, mid-checkpoint, mid-retention,
mid-compaction...) never loses or repeats an acknowledged record (``tests/kill_harness.py``;
``scripts/dev kill-test`` runs 1000)."""

from __future__ import annotations

from collections import Counter

from idemcore.broker import Broker
from tests.kill_harness import SETTINGS, TOPICS, run


def test_100_kills_keep_every_acknowledged_record(tmp_path):
    rounds = []
    problems = run(tmp_path / "data", range(100), rounds.append)
    assert not problems, "\n".join(problems)
    assert len(rounds) == 100
    # The seeds reach the places that matter: torn segment writes, index writes, the written ends, fsyncs. How
    # many of each varies a little from run to run (records carry wall-clock timestamps, which decide rolls,
    # retention and snapshots; one run gave 4 torn .log writes, 13 pwrites, 31 fsyncs), so the bounds are floors.
    places = Counter(round_.died_at.split(" ")[0] + (" .log" if round_.died_at.endswith(".log") else "")
                     for round_ in rounds)
    assert places["write .log"] >= 3 and places["os.fsync"] >= 5 and places["os.pwrite"] >= 3, places
    assert sum(len(round_.acked) for round_ in rounds) >= 500
    with Broker(TOPICS, data_dir=tmp_path / "data", **SETTINGS) as broker:  # retention ran between the kills
        assert all(broker.log("k", p).log_start_offset > 0 for p in range(TOPICS["k"]))
        assert broker.log("kc", 0).cleaned_offset > 0  # and compaction
