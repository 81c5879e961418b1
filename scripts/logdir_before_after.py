"""``audit_log_dir`` of two checkouts side by side on one log directory, in alternating processes (same load).

Run: .venv/bin/python scripts/logdir_before_after.py LOGDIR BEFORE AFTER [--rounds 3] [--repeats 3] [--backend cython]

BEFORE and AFTER are source trees with their kernels built (``idemcore/kernels/*.so``). Each process audits LOGDIR
once to warm up, then ``--rounds`` times, and prints its best wall and CPU time; the two trees take turns
``--repeats`` times, so both see the same load (printed beside each line: the machine is shared). LOGDIR: e.g. what
``idemcore generate OUT --format kafka --topics 4 --partitions 64 --producers 1000 --batches 3000000 --seed 1``
writes to ``OUT/logs`` (bench_logdir.py's directory).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

_CHILD = """
import json, sys, time
from idemcore.audit.logdir import audit_log_dir
root, backend, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3])
audit_log_dir(root, backend=backend)
wall = cpu = float("inf")
for _ in range(rounds):
    started, used = time.perf_counter(), time.process_time()
    report = audit_log_dir(root, backend=backend)
    wall, cpu = min(wall, time.perf_counter() - started), min(cpu, time.process_time() - used)
print(json.dumps({"wall": wall, "cpu": cpu, "batches": report.batches, "findings": report.findings.num_rows}))
"""


def run(tree: str, root: str, backend: str, rounds: int) -> dict:
    done = subprocess.run([sys.executable, "-c", _CHILD, root, backend, str(rounds)], cwd=tree, check=True,
                          capture_output=True, text=True, env={**os.environ, "PYTHONPATH": tree})
    return json.loads(done.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("logdir")
    parser.add_argument("before")
    parser.add_argument("after")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--backend", default="cython")
    args = parser.parse_args()
    for _ in range(args.repeats):
        for side, tree in (("before", args.before), ("after", args.after)):
            got = run(tree, args.logdir, args.backend, args.rounds)
            load = os.getloadavg()[0]
            print(f"{side:<6} wall {got['wall']:.3f} s {got['batches'] / got['wall'] / 1e6:6.2f} M batches/s   "
                  f"cpu {got['cpu']:.3f} s {got['batches'] / got['cpu'] / 1e6:6.2f} M batches/s   "
                  f"({got['batches']:,} batches, {got['findings']} findings; load {load:.2f})", flush=True)


if __name__ == "__main__":
    main()
