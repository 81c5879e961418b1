"""What the commands print besides their result: progress, verbosity, Spark's start-up chatter."""

from __future__ import annotations

import subprocess
import sys
import time

from idemcore.audit.spark.session import _jvm_stderr_filtered
from idemcore.progress import PlainProgress, bar


def simulate(*options: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "idemcore.cli", "simulate", "--records", "2000", "--producers", "2",
                           "--partitions", "2", *options], capture_output=True, text=True, timeout=120)


def test_progress_into_a_pipe_is_whole_lines_not_redraws():
    result = simulate()
    assert result.returncode == 0, result.stderr
    assert "\r" not in result.stderr
    assert result.stderr.splitlines()[-1].startswith("simulating: 2,000/2,000 rec (")


def test_quiet_shows_no_progress_and_verbose_shows_what_the_broker_does():
    quiet = simulate("-q", "--crash-every", "500")
    assert quiet.returncode == 0 and quiet.stderr == ""
    assert "exactly once" in quiet.stdout  # the result is still printed
    verbose = simulate("-v", "--crash-every", "500")
    assert "idemcore: INFO: broker 0 recovered" in verbose.stderr  # each restart after a crash, at INFO


def test_plain_progress_writes_at_most_every_interval_and_once_at_the_end(capsys):
    counter = PlainProgress(10, "reading", "file", interval=3600)
    for _ in range(10):
        counter.update()
    counter.close()
    counter.close()
    assert capsys.readouterr().err.splitlines() == ["reading: 10/10 file (0 s)"]
    with bar(5, "off", "step", enabled=False) as off:
        off.update(5)
    assert off.n == 5 and capsys.readouterr().err == ""


def test_the_jvm_start_up_chatter_is_dropped_and_everything_else_it_says_is_kept(capfd):
    with _jvm_stderr_filtered() as ours:
        # A child started here inherits the filtered standard error, as Spark's JVM does.
        child = subprocess.Popen(["sh", "-c", "echo 'WARNING: Using incubator modules: jdk.incubator.vector' >&2; "
                                  "echo 'Setting default log level to \"WARN\".' >&2; "
                                  "echo 'To adjust logging level use sc.setLogLevel(newLevel).' >&2; "
                                  "echo 'ERROR SparkContext: something real' >&2"])
        print("meanwhile, ours", file=ours)
    child.wait(timeout=30)
    deadline = time.monotonic() + 5
    err = ""
    while "something real" not in err and time.monotonic() < deadline:
        time.sleep(0.05)
        err += capfd.readouterr().err
    assert "ERROR SparkContext: something real" in err and "meanwhile, ours" in err
    assert "incubator" not in err and "default log level" not in err and "adjust logging" not in err
    print("after", file=sys.stderr)
    assert "after" in capfd.readouterr().err  # this process's own standard error is back
