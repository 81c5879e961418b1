"""What a careless or hostile user tries: user files are never destroyed, misuse is refused in one line."""

from __future__ import annotations

import os

import pytest

from idemcore import ConfigError, IdemcoreError, Producer, ProducerStateManager
from idemcore.broker import Broker
from idemcore.synth.dataset import generate

SMALL = {"topics": 1, "partitions": 2, "producers": 10, "batches": 3000, "partitions_per_file": 2, "progress": False}


def test_overwrite_never_replaces_a_directory_generate_did_not_write(tmp_path, monkeypatch):
    mine = tmp_path / "thesis"
    mine.mkdir()
    (mine / "chapter1.txt").write_text("years of work")
    with pytest.raises(FileExistsError, match=r"is not a dataset written by generate \(it holds chapter1.txt\)"):
        generate(mine, overwrite=True, **SMALL)
    assert (mine / "chapter1.txt").read_text() == "years of work"
    generate(tmp_path / "ds", **SMALL)
    (tmp_path / "ds" / "data" / "notes.txt").write_text("mine too")
    with pytest.raises(FileExistsError, match=r"it holds data/notes.txt"):
        generate(tmp_path / "ds", overwrite=True, **SMALL)
    monkeypatch.chdir(tmp_path / "thesis")
    with pytest.raises(FileExistsError, match="is the working directory or holds it"):
        generate(tmp_path, overwrite=True, **SMALL)
    assert sorted(os.listdir(tmp_path)) == ["ds", "thesis"]


def test_overwrite_replaces_a_generated_dataset(tmp_path):
    first = generate(tmp_path / "ds", seed=1, **SMALL)
    second = generate(tmp_path / "ds", overwrite=True, seed=2, **SMALL)
    assert first["planted"] != second["planted"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ds"]  # no staging or old copies left behind


def test_a_prepared_batch_is_committed_at_most_once_and_only_by_its_manager():
    manager, other = ProducerStateManager(partition=0), ProducerStateManager(partition=3)
    prepared = manager.prepare_update(7, 0, 0, 0)
    with pytest.raises(ValueError, match="prepared by the manager of partition 0, not by this one"):
        other.update(prepared)
    manager.update(prepared)
    with pytest.raises(IdemcoreError, match="the state changed since this batch was checked"):
        manager.update(prepared)
    first, second = manager.prepare_update(7, 0, 1, 1), manager.prepare_update(7, 0, 2, 2)
    manager.update(first)
    with pytest.raises(IdemcoreError, match="check it again"):
        manager.update(second)
    assert [b.last_seq for b in manager.last_entry(7).batches] == [0, 1]
    with pytest.raises(ValueError, match=r"partition must be in \[0, 2147483647\], got 1099511627776"):
        ProducerStateManager(partition=2**40)


@pytest.mark.parametrize("setting, message", [
    ({"enable_idempotence": "false"}, "enable_idempotence must be True or False, got 'false'"),
    ({"acks": 1.0}, "acks must be 'all', -1, 0 or 1, got 1.0"),
    ({"client_id": 5}, "client_id must be a string, got 5"),
])
def test_producer_settings_of_the_wrong_type_are_refused(setting, message):
    with pytest.raises(ConfigError, match=message):
        Producer(Broker({"t": 1}), **setting)


def test_an_empty_send_batch_gives_no_offsets():
    assert Producer(Broker({"t": 1})).send_batch("t", []).result().tolist() == []


def test_audit_out_is_checked_before_any_job(tmp_path):
    from idemcore.audit.spark import audit

    generate(tmp_path / "ds", **SMALL)
    with pytest.raises(ValueError, match=r"is inside the audited path .*: the next audit would read its findings"):
        audit(tmp_path / "ds", out=tmp_path / "ds" / "data" / "report", spark=object())
    (tmp_path / "afile").write_text("")
    with pytest.raises(FileExistsError, match="exists and is not a directory"):
        audit(tmp_path / "ds", out=tmp_path / "afile", spark=object())


def test_a_simulation_that_cannot_progress_stops_with_a_reason():
    from idemcore.sim import Faults, simulate

    with pytest.raises(IdemcoreError, match=r"no progress: the broker crashed \d+ times for 50 records"):
        simulate(producers=1, partitions=1, records=50, faults=Faults(crash_every=10), idempotence=False)
