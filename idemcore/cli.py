"""The ``idemcore`` command line."""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence

from tqdm import tqdm

from . import __version__
from ._kernels import PREFERENCE, available_backends, get_backend
from .batches import BatchMetadata
from .state import ProducerStateTable
from .streams import ANOMALY_VERDICTS, inject_anomalies, synthetic_stream
from .validate import validate


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _validate_with_progress(packed: BatchMetadata, backend: str, chunk: int, quiet: bool) -> dict[str, int]:
    # Chunks carry state through one table, so the result equals one call over everything.
    state = ProducerStateTable()
    totals: dict[str, int] = {}
    with tqdm(total=len(packed), unit="batch", unit_scale=True, disable=quiet, file=sys.stderr,
              desc="validating") as bar:
        for start in range(0, len(packed), chunk):
            part = validate(packed.slice(start, start + chunk), state, backend=backend)
            for name, count in part.counts().items():
                totals[name] = totals.get(name, 0) + count
            bar.update(len(part))
    return totals


def _throughput(packed: BatchMetadata, backend: str, repeats: int = 3) -> float:
    validate(packed.slice(0, 1000), backend=backend)  # compile/warm up outside the timing
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        validate(packed, backend=backend)
        best = min(best, time.perf_counter() - start)
    return len(packed) / best


def run_demo(args: argparse.Namespace) -> int:
    quiet = args.json
    columns = synthetic_stream(args.batches, n_producers=args.producers, n_partitions=args.partitions,
                               retry_fraction=args.retry_fraction, seed=args.seed)
    columns, truth = inject_anomalies(columns, seed=args.seed)
    packed = BatchMetadata.coerce(columns)
    backend = get_backend(args.backend).name
    found = _validate_with_progress(packed, backend, chunk=250_000, quiet=quiet)

    expected: dict[str, int] = {"appended": len(packed) - sum(truth.values())}
    for anomaly, count in truth.items():
        verdict = ANOMALY_VERDICTS[anomaly]
        expected[verdict] = expected.get(verdict, 0) + count
    verdicts = sorted(set(expected) | set(found), key=lambda v: (v != "appended", v != "duplicate", v))
    rows = [(v, expected.get(v, 0), found.get(v, 0)) for v in verdicts]
    matches = all(e == f for _, e, f in rows)
    compiled = [name for name in available_backends() if name != "python"] or ["python"]
    speeds = {name: _throughput(packed, name) for name in compiled}

    if args.json:
        print(json.dumps({
            "batches": len(packed), "producers": args.producers, "partitions": args.partitions, "seed": args.seed,
            "planted": truth, "expected": expected, "found": found, "matches_ground_truth": matches,
            "backend": backend, "batches_per_s": {name: round(speed) for name, speed in speeds.items()},
        }))
        return 0 if matches else 1

    print(f"idemcore demo: {len(packed):,} produce attempts from {args.producers:,} producers over "
          f"{args.partitions} partitions (seed {args.seed}), validated with the {backend} backend\n")
    print("planted: " + ", ".join(f"{count:,} {name.replace('_', ' ')}" for name, count in truth.items()) + "\n")
    width = max(len(v) for v in verdicts)
    print(f"{'verdict':<{width}}  {'expected':>12}  {'found':>12}")
    for verdict, want, got in rows:
        print(f"{verdict:<{width}}  {want:>12,}  {got:>12,}  {'ok' if want == got else 'MISMATCH'}")
    print("\nthroughput (whole stream, one call, best of 3):")
    for name, speed in speeds.items():
        print(f"  {name:<8} {speed / 1e6:8.1f} M batches/s")
    print("\nevery planted anomaly found, nothing else" if matches else "\nMISMATCH against the ground truth")
    return 0 if matches else 1


def _probability(text: str) -> float:
    value = float(text)
    if not 0.0 <= value < 1.0:
        raise argparse.ArgumentTypeError(f"must be a probability in [0, 1), got {value}")
    return value


def run_simulate(args: argparse.Namespace) -> int:
    from .sim import Faults, simulate  # the simulation pulls in the producer and broker

    faults = Faults(drop_request=args.drop_request, drop_response=args.drop_response, reorder=args.reorder,
                    duplicate=args.duplicate, retriable_error=args.retriable_error, crash_every=args.crash_every)
    with tqdm(total=args.records, unit="rec", unit_scale=True, disable=args.json, file=sys.stderr,
              desc="simulating") as bar:
        report = simulate(args.producers, args.partitions, args.records, faults, args.seed,
                          idempotence=not args.no_idempotence, backend=args.backend, progress=bar.update)
    result = report.to_dict()
    if args.json:
        print(json.dumps(result))
    else:
        mode = "idempotent" if not args.no_idempotence else "NOT idempotent (5 in flight, no sequences)"
        print(f"idemcore simulate: {args.producers} {mode} producers, {args.partitions} partitions, "
              f"{args.records:,} records, seed {args.seed}\n")
        net = result["network"]
        print(f"faults: {net['dropped_requests']:,} requests lost, {net['dropped_responses']:,} responses lost, "
              f"{net['reordered']:,} reordered, {net['duplicated']:,} delivered twice, "
              f"{net['retriable_errors']:,} retriable errors, {net['crashes']} broker crashes\n")
        for key in ("sent", "acked", "written", "duplicates", "lost_acked", "out_of_order", "wrong_offsets",
                    "failed_records", "retries", "epoch_bumps"):
            print(f"  {key:<15} {result[key]:>12,}")
        print(f"  {'records_per_s':<15} {result['records_per_s']:>12,.0f}  ({result['seconds']} s wall, "
              f"{result['virtual_ms']:,} ms virtual)")
        print("\nexactly once: every acknowledged record once, in order" if report.check.exactly_once
              else "\nexactly once VIOLATED")
    expected_ok = report.check.exactly_once or args.no_idempotence
    return 0 if expected_ok else 1


def run_backends(args: argparse.Namespace) -> int:
    loaded = available_backends()
    for name in PREFERENCE:
        print(f"{name:<8} {'available' if name in loaded else 'not available'}")
    print(f"default: {get_backend(None).name}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="idemcore", description="Kafka's exactly-once machinery, outside the JVM.")
    parser.add_argument("--version", action="version", version=f"idemcore {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)

    demo = commands.add_parser(
        "demo", help="validate a generated stream with retries, duplicates, gaps and a zombie epoch",
        description="Generate produce attempts with retries (in-window duplicates), duplicates beyond the "
                    "five-batch window, sequence gaps and zombie writes from a fenced epoch; validate them; "
                    "print what was found against the ground truth, and the throughput of each compiled backend.")
    demo.add_argument("--batches", type=_positive, default=2_000_000, help="produce attempts (default 2,000,000)")
    demo.add_argument("--producers", type=_positive, default=1_000, help="producers (default 1,000)")
    demo.add_argument("--partitions", type=_positive, default=8, help="partitions (default 8)")
    demo.add_argument("--retry-fraction", type=float, default=0.01, help="batches resent at once (default 0.01)")
    demo.add_argument("--seed", type=int, default=7, help="random seed (default 7)")
    demo.add_argument("--backend", default=None, help="cython, numba, python or auto (default: $IDEMCORE_BACKEND)")
    demo.add_argument("--json", action="store_true", help="print one JSON object instead of tables")
    demo.set_defaults(run=run_demo)

    sim = commands.add_parser(
        "simulate", help="producers -> faulty network -> crashing broker, then check exactly-once",
        description="Run idempotent producers against one broker through a deterministic simulated network "
                    "that loses, delays, reorders and duplicates requests and crashes the broker (which recovers "
                    "from its logs); then check that every acknowledged record is in the logs exactly once and "
                    "in send order. Exit status 1 if an idempotent run breaks exactly-once.")
    sim.add_argument("--producers", type=_positive, default=8, help="producers (default 8)")
    sim.add_argument("--partitions", type=_positive, default=16, help="partitions (default 16)")
    sim.add_argument("--records", type=_positive, default=1_000_000, help="records in all (default 1,000,000)")
    sim.add_argument("--drop-request", type=_probability, default=0.02, help="request loss (default 0.02)")
    sim.add_argument("--drop-response", type=_probability, default=0.05, help="response loss (default 0.05)")
    sim.add_argument("--reorder", type=_probability, default=0.05, help="requests held back (default 0.05)")
    sim.add_argument("--duplicate", type=_probability, default=0.01, help="requests delivered twice (default 0.01)")
    sim.add_argument("--retriable-error", type=_probability, default=0.01,
                     help="NOT_LEADER_OR_FOLLOWER / REQUEST_TIMED_OUT answers (default 0.01)")
    sim.add_argument("--crash-every", type=int, default=200_000,
                     help="crash and restart the broker every N records written; 0: never (default 200,000)")
    sim.add_argument("--seed", type=int, default=7, help="random seed (default 7)")
    sim.add_argument("--no-idempotence", action="store_true",
                     help="producers without idempotence (5 in flight): duplicates and reordering show up")
    sim.add_argument("--backend", default=None, help="cython, numba, python or auto (default: $IDEMCORE_BACKEND)")
    sim.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    sim.set_defaults(run=run_simulate)

    backends = commands.add_parser("backends", help="list the kernel backends this machine can load")
    backends.set_defaults(run=run_backends)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.run(args)
    except (ValueError, TypeError) as exc:
        print(f"idemcore: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())

