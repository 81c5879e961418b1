"""``idemcore serve``: a Kafka-protocol broker on a TCP port, over a Kafka log directory."""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
from pathlib import Path
from typing import Any

from idemcore.cli.options import non_negative, positive


def _topic_list(text: str) -> list[tuple[str, int]]:
    """``name:partitions,...`` (partitions default 1)."""
    topics = []
    for item in filter(None, (part.strip() for part in text.split(","))):
        name, _, count = item.partition(":")
        try:
            partitions = int(count) if count else 1
        except ValueError:
            raise argparse.ArgumentTypeError(f"{item!r}: partitions must be an integer (name:partitions)") from None
        if not name or partitions < 1:
            raise argparse.ArgumentTypeError(f"{item!r}: expected name:partitions with at least 1 partition")
        topics.append((name, partitions))
    return topics


def _port(text: str) -> int:
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a port number, got {text!r}") from None
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"a port is 0 to 65535, got {port}")
    return port


def _directory(text: str) -> Path:
    if not text:  # Path("") is the current directory
        raise argparse.ArgumentTypeError("an empty path; name a directory")
    return Path(text)


def run_serve(args: argparse.Namespace) -> int:
    from idemcore.broker import Broker
    from idemcore.broker.server import Server

    # A --topics topic whose partitions are on disk but not in topics.json (that file lost or edited) is served from
    # them: given to the broker at start, as its error for CreateTopics advises; the others are created below.
    on_disk = {name: count for name, count in args.topics
               if any(os.path.lexists(args.data_dir / f"{name}-{p}") for p in range(count))}  # (Broker's own rule)
    broker = Broker(on_disk, data_dir=args.data_dir, fsync=args.fsync,
                    auto_create_topics=not args.no_auto_create_topics, default_partitions=args.default_partitions,
                    broker_id=args.node_id)
    try:
        for name, partitions in args.topics:
            if name not in broker.topics:
                broker.create_topic(name, partitions)
            elif broker.topics[name] != partitions:
                raise ValueError(f"--topics {name}:{partitions}, but {args.data_dir} serves {name!r} with "
                                 f"{broker.topics[name]} partitions")
        server = Server(broker, args.host, args.port, advertised_host=args.advertised_host,
                        max_request_bytes=args.max_request_bytes)
        asyncio.run(_serve(server, args))
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):  # a second signal must not cut the close short
            signal.signal(sig, signal.SIG_IGN)
        broker.close()  # everything acknowledged is on disk, and the recovery points are written
    if not args.quiet:
        print("idemcore serve: stopped; the logs are closed", file=sys.stderr)
    return 0


async def _serve(server: Any, args: argparse.Namespace) -> None:
    try:
        await server.start_serving()
    except OSError as error:  # name what could not be listened on, in one line
        raise OSError(f"cannot listen on {args.host}:{args.port}: {error.strerror or error}") from None
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, server.request_stop)
    host, port = server.address
    topics = ", ".join(f"{name}:{count}" for name, count in sorted(server.broker.topics.items())) or "none yet"
    print(f"idemcore serve: listening on {host}:{port} (bootstrap.servers={host}:{port}); data dir "
          f"{args.data_dir}; topics: {topics}", flush=True)
    await server.serve_until_stopped()


def add_commands(commands: Any, common: argparse.ArgumentParser) -> None:
    serve = commands.add_parser(
        "serve", parents=[common], help="serve Kafka's protocol on a TCP port (a broker for Kafka clients)",
        description="A Kafka-compatible broker: Kafka's clients (librdkafka, kafka-python, aiokafka, Java) produce "
                    "idempotently and transactionally and consume read_committed, over Kafka's wire protocol; the "
                    "data directory is a Kafka log directory. Topics are created on first use (unless "
                    "--no-auto-create-topics), by CreateTopics, or by --topics. Stops cleanly on SIGINT/SIGTERM.")
    serve.add_argument("--data-dir", type=_directory, required=True,
                       help="the Kafka log directory (created if missing; a restart recovers it)")
    serve.add_argument("--port", type=_port, default=9092, help="TCP port (default 9092; 0: any free port)")
    serve.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    serve.add_argument("--advertised-host", default=None,
                       help="the host clients are told to connect to (default: --host)")
    serve.add_argument("--topics", type=_topic_list, default=[],
                       help="topics to create if missing, name:partitions,... (e.g. orders:8,audit:1)")
    serve.add_argument("--default-partitions", type=positive, default=1,
                       help="partitions of an auto-created topic (Kafka's num.partitions; default 1)")
    serve.add_argument("--no-auto-create-topics", action="store_true",
                       help="a topic must be created first (Kafka's auto.create.topics.enable=false)")
    serve.add_argument("--fsync", action="store_true",
                       help="fsync before answering acks=all (survives a machine crash; default: like Kafka, the OS "
                            "page cache, which survives a crash of this process)")
    serve.add_argument("--node-id", type=non_negative, default=0, help="this broker's node id (default 0)")
    serve.add_argument("--max-request-bytes", type=positive, default=104_857_600,
                       help="largest request accepted (Kafka's socket.request.max.bytes; default 104857600)")
    serve.set_defaults(run=run_serve)
