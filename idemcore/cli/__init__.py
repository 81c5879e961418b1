"""The ``idemcore`` command line."""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence

from idemcore import __version__
from idemcore.cli.acls import add_commands as add_acls_commands
from idemcore.cli.audit import add_commands, print_error
from idemcore.cli.cluster import add_commands as add_cluster_commands
from idemcore.cli.groups import add_commands as add_groups_commands
from idemcore.cli.logdir import add_commands as add_logdir_commands
from idemcore.cli.options import (
    BACKEND_CHOICES,
    BACKEND_HELP,
    configure_logging,
    non_negative,
    positive,
    probability,
    show_progress,
    verbosity_options,
)
from idemcore.cli.serve import add_commands as add_serve_commands
from idemcore.cli.simulate_cluster import add_options as add_cluster_simulation_options
from idemcore.cli.simulate_cluster import run as run_cluster_simulation
from idemcore.cli.users import add_commands as add_users_commands
from idemcore.errors import IdemcoreError
from idemcore.kernels import PREFERENCE, available_backends, get_backend
from idemcore.progress import bar as progress_bar
from idemcore.sim.network import CRASH_KINDS


def run_simulate(args: argparse.Namespace) -> int:
    from idemcore.sim import Faults, simulate

    if args.cluster:
        if args.transactional:
            raise ValueError("--cluster does not go with --transactional (the cluster simulation runs idempotent "
                             "producers)")
        return run_cluster_simulation(args)
    args.producers = args.producers or 8
    args.partitions = args.partitions or 16

    if args.no_transactions and not args.transactional:
        raise ValueError("--no-transactions goes with --transactional (the same application without transactions)")
    if args.transactional and args.no_idempotence:
        raise ValueError("--no-idempotence does not go with --transactional (a transactional producer is idempotent); "
                         "--no-transactions runs the application without transactions")
    transactional = args.transactional
    if args.records is None:
        args.records = 20_000 if transactional else 1_000_000
    if args.crash_every is None:
        args.crash_every = 2_000 if transactional else 200_000
    faults = Faults(drop_request=args.drop_request, drop_response=args.drop_response, reorder=args.reorder,
                    duplicate=args.duplicate, retriable_error=args.retriable_error, crash_every=args.crash_every,
                    crash_kind=args.crash_kind, tear_writes=not args.no_torn_writes)
    if transactional:
        return _run_transactional(args, faults)
    with progress_bar(args.records, "simulating", "rec", enabled=show_progress(args), unit_scale=True) as bar:
        report = simulate(args.producers, args.partitions, args.records, faults, args.seed,
                          idempotence=not args.no_idempotence, backend=args.backend, progress=bar.update,
                          fsync=args.fsync)
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
              f"{net['retriable_errors']:,} retriable errors, {net['crashes']} broker crashes "
              f"({args.crash_kind}; {net['torn_writes']} torn writes, {net['bytes_lost']:,} bytes taken back)\n")
        for key in ("sent", "acked", "written", "duplicates", "lost_acked", "out_of_order", "wrong_offsets",
                    "failed_records", "retries", "epoch_bumps"):
            print(f"  {key:<15} {result[key]:>12,}")
        print(f"  {'records_per_s':<15} {result['records_per_s']:>12,.0f}  ({result['seconds']} s wall, "
              f"{result['virtual_ms']:,} ms virtual)")
        if report.check.exactly_once:
            print("\nexactly once: every acknowledged record once, in order")
        elif report.promise_kept:
            print(f"\n{result['lost_acked']:,} acknowledged records lost to machine crashes: without --fsync one "
                  "broker keeps acks=all records in the page cache only; none duplicated or reordered")
        else:
            print("\nexactly once VIOLATED")
    expected_ok = report.promise_kept or args.no_idempotence
    return 0 if expected_ok else 1


def _run_transactional(args: argparse.Namespace, faults: object) -> int:
    from idemcore.sim.transactional import simulate_transactional

    with progress_bar(args.records, "processing", "rec", enabled=show_progress(args), unit_scale=True) as bar:
        report = simulate_transactional(args.producers, args.partitions, args.records, faults,  # type: ignore[arg-type]
                                        args.seed, transactions=not args.no_transactions,
                                        records_per_transaction=args.records_per_transaction,
                                        instance_crash=args.instance_crash, abort_rate=args.abort_rate,
                                        progress=bar.update, fsync=args.fsync, backend=args.backend)
    result = report.to_dict()
    if args.json:
        print(json.dumps(result))
    else:
        mode = "transactional" if report.transactions else "NOT transactional (idempotent, offsets committed after)"
        print(f"idemcore simulate --transactional: {args.producers} {mode} read-process-write instances, "
              f"{args.partitions} partitions, {args.records:,} input records, seed {args.seed}\n")
        net = result["network"]
        print(f"faults: {net['dropped_requests']:,} requests lost, {net['dropped_responses']:,} responses lost, "
              f"{net['reordered']:,} reordered, {net['duplicated']:,} delivered twice, {net['retriable_errors']:,} "
              f"retriable produce errors, {net['coordinator_errors']:,} coordinator refusals, {net['crashes']} broker "
              f"crashes, {result['instance_crashes']} instances killed mid-transaction, "
              f"{result['zombie_attempts']} zombie attempts, {result['explicit_aborts']} transactions aborted and "
              f"processed again\n")
        for key in ("input_records", "output_records", "committed_transactions", "aborted_transactions", "lost",
                    "duplicates", "aborted_reads", "torn_transactions", "zombie_writes", "offset_mismatches"):
            print(f"  {key:<23} {result[key]:>10,}")
        print(f"  ({result['seconds']} s wall, {result['virtual_ms']:,} ms virtual)")
        print("\nexactly once: every input record's output committed once, nothing aborted or fenced visible"
              if report.check.exactly_once else "\nexactly once VIOLATED")
    return 0 if report.check.exactly_once or not report.transactions else 1


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
    common = verbosity_options()

    sim = commands.add_parser(
        "simulate", parents=[common], help="producers -> faulty network -> crashing broker, then check exactly-once",
        description="Run idempotent producers against one broker through a deterministic simulated network "
                    "that loses, delays, reorders and duplicates requests and crashes the broker (which recovers "
                    "from its logs); then check that every acknowledged record is in the logs exactly once and "
                    "in send order. With --transactional, run a read-process-write application instead (consume "
                    "read_committed, produce, commit offsets in the transaction) and check its output "
                    "read_committed. Exit status 1 if an idempotent or transactional run breaks exactly-once.")
    sim.add_argument("--producers", type=positive, default=None, help="producers (default 8; --cluster: 3)")
    sim.add_argument("--partitions", type=positive, default=None, help="partitions (default 16; --cluster: 3)")
    sim.add_argument("--records", type=positive, default=None,
                     help="records in all (default 1,000,000; --transactional: 20,000 input records; --cluster: "
                          "1,500 per seed)")
    sim.add_argument("--drop-request", type=probability, default=0.02, help="request loss (default 0.02)")
    sim.add_argument("--drop-response", type=probability, default=0.05, help="response loss (default 0.05)")
    sim.add_argument("--reorder", type=probability, default=0.05,
                     help="requests held back (default 0.05; produce requests and reads: the coordinators' requests "
                          "arrive at most once and in order, as over TCP)")
    sim.add_argument("--duplicate", type=probability, default=0.01,
                     help="requests delivered twice (default 0.01; produce requests and reads only)")
    sim.add_argument("--retriable-error", type=probability, default=0.01,
                     help="NOT_LEADER_OR_FOLLOWER / REQUEST_TIMED_OUT answers (default 0.01)")
    sim.add_argument("--crash-every", type=non_negative, default=None,
                     help="crash and restart the broker every N records written; 0: never (default 200,000; "
                          "--transactional: 2,000)")
    sim.add_argument("--crash-kind", choices=CRASH_KINDS, default="process",
                     help="process: the broker's process dies (the OS keeps its writes); machine: power loss (the "
                          "logs keep what was fsync'd and part of the rest; with --transactional it needs --fsync) "
                          "(default process)")
    sim.add_argument("--no-torn-writes", action="store_true",
                     help="crash between requests instead of in the middle of writing one")
    sim.add_argument("--fsync", action="store_true",
                     help="the broker fsyncs before answering acks=all (what survives a machine crash)")
    sim.add_argument("--seed", type=non_negative, default=7, help="random seed (default 7)")
    sim.add_argument("--no-idempotence", action="store_true",
                     help="producers without idempotence (5 in flight): duplicates and reordering show up")
    sim.add_argument("--transactional", action="store_true",
                     help="run a read-process-write application instead (--producers instances, each consuming "
                          "its input partitions read_committed and producing and committing offsets in one "
                          "transaction; instances die mid-transaction and come back, the dead ones act as zombies); "
                          "check the output read_committed. Exit status 1 if exactly-once breaks")
    sim.add_argument("--no-transactions", action="store_true",
                     help="with --transactional: the same application with an idempotent producer and offsets "
                          "committed after the output: duplicates show up")
    sim.add_argument("--records-per-transaction", type=positive, default=10,
                     help="with --transactional: input records per transaction (default 10)")
    sim.add_argument("--instance-crash", type=probability, default=0.02,
                     help="with --transactional: chance an instance dies in a transaction (default 0.02)")
    sim.add_argument("--abort-rate", type=probability, default=0.02,
                     help="with --transactional: chance the application aborts a transaction and processes its input "
                          "again (default 0.02)")
    sim.add_argument("--backend", default=None, choices=BACKEND_CHOICES, help=BACKEND_HELP)
    sim.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    add_cluster_simulation_options(sim)
    sim.set_defaults(run=run_simulate)

    add_commands(commands, common)
    add_logdir_commands(commands, common)
    add_serve_commands(commands, common)
    add_cluster_commands(commands, common)
    add_groups_commands(commands, common)
    add_acls_commands(commands, common)
    add_users_commands(commands, common)

    backends = commands.add_parser("backends", parents=[common], help="list the kernel backends this machine can load")
    backends.set_defaults(run=run_backends)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    configure_logging(args)
    try:
        return args.run(args)
    except (ValueError, TypeError, OSError, IdemcoreError) as exc:  # a user's mistake: one line, no traceback
        print_error(exc)
        return 2


