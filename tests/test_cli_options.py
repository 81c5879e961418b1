"""Command-line options: fixed choices, errors that name the option or variable, outputs that respect the umask."""

from __future__ import annotations

import os
import stat
import subprocess
import sys

import pytest

from idemcore.kernels import get_backend


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "idemcore.cli", *args], capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, timeout=120)


@pytest.mark.parametrize("args, message", [
    (("audit", "/nowhere", "--origin", "server"), "argument --origin: invalid choice: 'server'"),
    (("simulate", "--backend", "fortran"), "argument --backend: invalid choice: 'fortran'"),
    (("generate", "/nowhere", "--seed", "-1"), "argument --seed: must be at least 0, got -1"),
    (("generate", "/nowhere", "--batches", "many"), "argument --batches: expected an integer, got 'many'"),
    (("simulate", "--drop-request", "1.5"), "argument --drop-request: must be a probability in [0, 1), got 1.5"),
])
def test_bad_options_are_refused_naming_the_option(args, message):
    result = cli(*args)
    assert result.returncode == 2 and message in result.stderr


def test_a_bad_backend_variable_is_named(monkeypatch):
    monkeypatch.setenv("IDEMCORE_BACKEND", "bogus")
    with pytest.raises(ValueError, match=r"unknown backend \$IDEMCORE_BACKEND='bogus'"):
        get_backend(None)
    with pytest.raises(ValueError, match=r"unknown backend backend='bogus'"):
        get_backend("bogus")
    result = cli("backends", env={"IDEMCORE_BACKEND": "bogus"})
    assert result.returncode != 0 and "$IDEMCORE_BACKEND='bogus'" in result.stderr


def test_the_generated_dataset_gets_the_umask_mode(tmp_path):
    old = os.umask(0o027)
    try:
        from idemcore.synth.dataset import generate

        generate(tmp_path / "ds", topics=1, partitions=2, producers=20, batches=3000, seed=1, progress=False)
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "ds").stat().st_mode) == 0o750


def test_generate_overwrite_of_a_user_directory_fails_in_one_line(tmp_path):
    (tmp_path / "mine.txt").write_text("keep me")
    result = cli("generate", str(tmp_path), "--topics", "1", "--partitions", "2", "--producers", "10",
                 "--batches", "3000", "--partitions-per-file", "2", "--overwrite")
    assert result.returncode == 2 and "refusing to replace it" in result.stderr and "Traceback" not in result.stderr
    assert (tmp_path / "mine.txt").read_text() == "keep me"


def test_checkpoint_options_are_refused_where_they_do_not_apply(tmp_path):
    source = tmp_path / "in"
    source.mkdir()
    result = cli("audit", str(source), "--checkpoint", str(tmp_path / "ckpt"))
    assert result.returncode == 2 and "--checkpoint goes with --follow" in result.stderr
    kept = tmp_path / "mytruth.json"
    kept.write_text("{}")
    result = cli("audit", str(source), "--follow", "--checkpoint", str(kept))
    assert result.returncode == 2 and "is a file, not a directory" in result.stderr
    assert "Traceback" not in result.stderr and kept.read_text() == "{}"
