"""``idemcore cluster``: a ZooKeeper and N ``idemcore serve`` brokers on this machine, until Ctrl-C or SIGTERM."""

from __future__ import annotations

import argparse
import signal
import sys
import time
from pathlib import Path
from types import FrameType
from typing import Any

from idemcore.cli.options import positive

#: Exit status when the cluster cannot start (a broker died while starting, no ZooKeeper).
START_FAILED = 1
#: How often the running cluster looks for a broker that exited.
WATCH_INTERVAL_S = 0.5


class _Stop(BaseException):
    """SIGINT or SIGTERM: stop the cluster (a BaseException, so no ``except Exception`` swallows it)."""


def _stop_on_signal(signum: int, frame: FrameType | None) -> None:
    raise _Stop(signum)


def run_cluster(args: argparse.Namespace) -> int:
    from idemcore.broker.config import parse_override
    from idemcore.cli.audit import print_error
    from idemcore.cluster import ClusterError, LocalCluster
    from idemcore.zookeeper_server import ZooKeeperUnavailable

    overrides = dict(parse_override(text) for text in args.override)
    cluster = LocalCluster(args.brokers, args.data_dir, zookeeper_hosts=args.zookeeper, overrides=overrides,
                           session_timeout_ms=args.session_timeout_ms,
                           wait_registered=not args.no_registration_check)
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, _stop_on_signal)
    try:
        try:
            cluster.start_all()  # stops what it started if it fails or is interrupted
        except (ClusterError, ZooKeeperUnavailable) as error:
            print_error(error)
            return START_FAILED
        _print_cluster(cluster, quiet=args.quiet)
        _watch(cluster)
    except _Stop:
        pass
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):  # a second signal must not cut the stop short
            signal.signal(sig, signal.SIG_IGN)
        cluster.stop()
    if not args.quiet:
        print("idemcore cluster: stopped; every broker's logs are closed", file=sys.stderr)
    return 0


def _print_cluster(cluster: Any, quiet: bool) -> None:
    print(f"bootstrap.servers={cluster.bootstrap_servers}")
    print(f"zookeeper.connect={cluster.zookeeper_hosts}")
    print(f"{'broker':>6}  {'port':>5}  {'pid':>7}  log")
    for n in cluster.broker_ids:
        info = cluster.broker(n)
        print(f"{info.broker_id:>6}  {info.port:>5}  {info.pid or '-':>7}  {info.serve_log}")
    sys.stdout.flush()
    if not quiet:
        print("idemcore cluster: running; Ctrl-C or SIGTERM stops every broker (and the ZooKeeper started here)",
              file=sys.stderr, flush=True)


def _watch(cluster: Any) -> None:
    """Until a signal: say once, on standard error, when a broker exits (the others keep running)."""
    said: set[int] = set()
    while True:
        for n, status in cluster.exited().items():
            if n not in said:
                said.add(n)
                print(f"idemcore cluster: broker {n} exited with status {status} (log: {cluster.broker(n).serve_log})",
                      file=sys.stderr, flush=True)
        time.sleep(WATCH_INTERVAL_S)


def _data_dir(text: str) -> Path:
    if not text:
        raise argparse.ArgumentTypeError("an empty path; name a directory")
    return Path(text)


#: More brokers than this on one machine is a typo, not a cluster (each is a Python process with its own loop).
MAX_LOCAL_BROKERS = 64


def _broker_count(text: str) -> int:
    count = positive(text)
    if count > MAX_LOCAL_BROKERS:
        raise argparse.ArgumentTypeError(f"at most {MAX_LOCAL_BROKERS} brokers on one machine, got {count}")
    return count


def add_commands(commands: Any, common: argparse.ArgumentParser) -> None:
    cluster = commands.add_parser(
        "cluster", parents=[common], help="run a local cluster: a ZooKeeper and N brokers on loopback ports",
        description="Start a cluster on this machine: a ZooKeeper (unless --zookeeper names one; Debian's zookeeper "
                    "package and Java 17), then --brokers `idemcore serve` processes with broker ids 0 to N-1, each "
                    "on a free 127.0.0.1 port over DATA_DIR/broker-N, its output in DATA_DIR/broker-N/serve.log. "
                    "Every broker gets zookeeper.connect and the settings for a local cluster: "
                    "zookeeper.session.timeout.ms (--session-timeout-ms), replica.lag.time.max.ms=10000, "
                    "default.replication.factor, offsets.topic.replication.factor and "
                    "transaction.state.log.replication.factor min(3,N), min.insync.replicas and "
                    "transaction.state.log.min.isr min(2,N); --override over them. Once every broker answers "
                    "ApiVersions and is registered in ZooKeeper, prints bootstrap.servers=HOST:PORT,... and "
                    "zookeeper.connect=... (a line each) and a table of the brokers (id, port, pid, log), then runs "
                    "until SIGINT/SIGTERM, which stops the brokers (SIGTERM, SIGKILL after 30 s) and the ZooKeeper "
                    "started here, exit status 0. A broker that exits later is reported on standard error; the "
                    "others keep running. Exit status 1 when the cluster cannot start (a broker exited or did not "
                    "answer within 60 s: the error quotes its log's last lines and names the file; ZooKeeper "
                    "missing or not answering), 2 for a bad option.")
    cluster.add_argument("--brokers", type=_broker_count, default=3,
                         help=f"brokers (default 3, at most {MAX_LOCAL_BROKERS}: each is a process on this machine)")
    cluster.add_argument("--data-dir", type=_data_dir, required=True,
                         help="the cluster's directory: broker-N/ (each broker's log directory) and zookeeper/ (the "
                              "ZooKeeper's data and zookeeper.log); a cluster started again over it keeps its data")
    cluster.add_argument("--zookeeper", default=None, metavar="HOSTS",
                         help="use the ZooKeeper at HOSTS (zookeeper.connect: host:port,...[/chroot]) instead of "
                              "starting one")
    cluster.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                         help="a broker setting for every broker, over the cluster's (repeatable); broker.id, "
                              "node.id, log.dirs, log.dir, listeners and zookeeper.connect are the cluster's own")
    cluster.add_argument("--session-timeout-ms", type=positive, default=6000,
                         help="sets zookeeper.session.timeout.ms: how soon ZooKeeper drops a dead broker "
                              "(default 6000)")
    cluster.add_argument("--no-registration-check", action="store_true",
                         help="a broker is ready once it answers ApiVersions, without waiting for its "
                              "/brokers/ids/N znode")
    cluster.set_defaults(run=run_cluster)
