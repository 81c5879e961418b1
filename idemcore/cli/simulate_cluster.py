"""``idemcore simulate --cluster``: the replicated cluster simulation (:mod:`idemcore.sim.cluster_run`) over a range
of seeds, with the anomalies its clients' checker counts."""

from __future__ import annotations

import argparse
import json
from collections import Counter

from idemcore.cli.options import positive

_COUNTS = ("lost_acked", "lost_reads", "duplicates", "divergent_offsets", "out_of_order", "anomalies",
           "failed_records", "leader_crashes", "torn_writes", "follower_lags", "isolations", "session_expiries",
           "clean_elections", "unclean_elections", "truncations")


def add_options(sim: argparse.ArgumentParser) -> None:
    group = sim.add_argument_group("a replicated cluster (--cluster)")
    group.add_argument("--cluster", action="store_true",
                       help="simulate a replicated cluster instead (brokers with a simulated ZooKeeper and "
                            "controller; leader crashes, lagging followers, brokers cut off from ZooKeeper and their "
                            "peers); check what producers and consumers saw. Exit status 1 if the safe settings "
                            "(acks=all, min.insync.replicas >= 2, no unclean election) show an anomaly")
    group.add_argument("--brokers", type=positive, default=3, help="with --cluster: brokers (default 3)")
    group.add_argument("--acks", choices=("all", "1"), default="all", help="with --cluster: acks (default all)")
    group.add_argument("--min-insync-replicas", type=positive, default=2,
                       help="with --cluster: the topic's min.insync.replicas (default 2)")
    group.add_argument("--unclean", action="store_true",
                       help="with --cluster: unclean.leader.election.enable=true")
    group.add_argument("--seeds", type=positive, default=1,
                       help="with --cluster: run seeds --seed .. --seed + N - 1 and sum (default 1)")


def run(args: argparse.Namespace) -> int:
    from idemcore.sim.cluster import ClusterFaults
    from idemcore.sim.cluster_run import simulate_cluster

    faults = ClusterFaults(brokers=args.brokers, acks=-1 if args.acks == "all" else 1,
                           min_insync_replicas=args.min_insync_replicas, unclean_leader_election=args.unclean,
                           max_concurrent=3 if args.unclean else 2)
    records = args.records or 1_500
    totals: Counter[str] = Counter()
    failing: list[int] = []
    unsettled: list[int] = []
    for seed in range(args.seed, args.seed + args.seeds):
        report = simulate_cluster(seed, faults, producers=args.producers or 3, partitions=args.partitions or 3,
                                  records=records, backend=args.backend)
        result = report.to_dict()
        for key in (*_COUNTS, "sent", "acked", "virtual_ms", "seconds"):
            totals[key] += result[key]
        if report.check.anomalies:
            failing.append(seed)
        if not report.settled:
            unsettled.append(seed)
    safe = faults.acks == -1 and faults.min_insync_replicas >= 2 and not faults.unclean_leader_election
    summary = {"seeds": args.seeds, "first_seed": args.seed, "brokers": args.brokers, "acks": args.acks,
               "min_insync_replicas": args.min_insync_replicas, "unclean": args.unclean,
               **{k: round(v, 3) if k == "seconds" else v for k, v in totals.items()},
               "seeds_with_anomalies": failing, "unsettled_seeds": unsettled}
    if args.json:
        print(json.dumps(summary))
    else:
        print(f"idemcore simulate --cluster: {args.brokers} brokers, acks={args.acks}, min.insync.replicas="
              f"{args.min_insync_replicas}, unclean election {'on' if args.unclean else 'off'}; {records:,} records "
              f"per seed, seeds {args.seed}..{args.seed + args.seeds - 1}\n")
        for key in ("sent", "acked", *_COUNTS):
            print(f"  {key:<18} {totals[key]:>10,}")
        print(f"  ({totals['seconds']:.1f} s wall, {totals['virtual_ms']:,} ms virtual)")
        if failing:
            print(f"\nseeds with anomalies: {failing[:20]}{' ...' if len(failing) > 20 else ''}")
        if unsettled:
            print(f"seeds whose replicas never agreed after healing: {unsettled[:20]}")
    return 1 if safe and (failing or unsettled) else 0
