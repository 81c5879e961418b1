"""``idemcore serve``: a Kafka-protocol broker on a TCP port, over a Kafka log directory."""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import socket
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from idemcore.cli.options import non_negative, positive

if TYPE_CHECKING:
    from idemcore.broker.config import BrokerConfig

#: The exit status when the log directory fails (Kafka's broker halts with 1).
HALT_STATUS = 1


def _topic_list(text: str) -> list[tuple[str, int]]:
    """``name:partitions,...`` (partitions default 1), each name legal and given once: refused here, before the
    data directory is opened (or made)."""
    from idemcore.broker.input_checks import check_topic
    from idemcore.protocol.constants import INTERNAL_TOPICS

    topics: list[tuple[str, int]] = []
    for item in filter(None, (part.strip() for part in text.split(","))):
        name, _, count = item.partition(":")
        try:
            partitions = int(count) if count else 1
        except ValueError:
            raise argparse.ArgumentTypeError(f"{item!r}: partitions must be an integer (name:partitions)") from None
        if not name or partitions < 1:
            raise argparse.ArgumentTypeError(f"{item!r}: expected name:partitions with at least 1 partition")
        try:
            check_topic(name, partitions)
        except ValueError as error:
            raise argparse.ArgumentTypeError(str(error)) from None
        if name in INTERNAL_TOPICS:
            raise argparse.ArgumentTypeError(f"{name!r} is an internal topic: the broker makes it when its coordinator "
                                             "needs it")
        if any(name == seen for seen, _ in topics):
            raise argparse.ArgumentTypeError(f"{name!r} is named twice")
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


def _path(text: str) -> Path:
    if not text:  # Path("") is the current directory
        raise argparse.ArgumentTypeError("an empty path; name a directory or file")
    return Path(text)


def _settings(args: argparse.Namespace) -> tuple[BrokerConfig, Path]:
    """The broker's settings: --config, then each --override over it, then the flags over both (a flag is a
    shortcut for the setting its help names, so the command line's last word wins, as --override's does), and
    the log directory, which serve needs."""
    from idemcore.broker.config import BrokerConfig, read_settings, shortcut_listener
    from idemcore.errors import ConfigError

    properties, origins = read_settings(args.config, args.override)

    def put(key: str, value: object, flag: str) -> None:
        properties[key], origins[key] = str(value), flag

    if args.data_dir is not None:
        put("log.dirs", args.data_dir, "--data-dir")
    if args.node_id is not None:
        put("broker.id", args.node_id, "--node-id")
        put("node.id", args.node_id, "--node-id")
    if args.host is not None or args.port is not None:
        flags = " and ".join(flag for flag, value in (("--host", args.host), ("--port", args.port))
                             if value is not None)
        put("listeners", shortcut_listener(properties.get("listeners"), args.host, args.port,
                                           origin=origins.get("listeners", "")), flags)
    if args.advertised_host is not None:
        # Port 0: the port listened on, unless advertised.listeners names one.
        put("advertised.listeners", shortcut_listener(properties.get("advertised.listeners"), args.advertised_host,
                                                      None, "advertised.listeners", "PLAINTEXT://:0",
                                                      origins.get("advertised.listeners", "")), "--advertised-host")
    if args.default_partitions is not None:
        put("num.partitions", args.default_partitions, "--default-partitions")
    if args.no_auto_create_topics:
        put("auto.create.topics.enable", "false", "--no-auto-create-topics")
    if args.max_request_bytes is not None:
        put("socket.request.max.bytes", args.max_request_bytes, "--max-request-bytes")
    config = BrokerConfig.from_properties(properties, origins)
    if config.log_dir is None:
        raise ConfigError("no log directory: set log.dirs in --config (or --override log.dirs=DIR), or give --data-dir")
    return config, config.log_dir


def run_serve(args: argparse.Namespace) -> int:
    from idemcore.broker import Broker
    from idemcore.broker.server import Server

    config, data_dir = _settings(args)
    for listener in config.listeners:
        _check_listenable(listener.endpoint.host, listener.endpoint.port)
    # A --topics topic whose partitions are on disk but not in topics.json (that file lost or edited) is served from
    # them: given to the broker at start, as its error for CreateTopics advises; the others are created below.
    on_disk = {name: count for name, count in args.topics
               if any(os.path.lexists(data_dir / f"{name}-{p}") for p in range(count))}  # (Broker's own rule)
    broker = Broker(on_disk, fsync=args.fsync, settings=config, **config.broker_kwargs())
    broker.log_manager.on_offline.append(_halt)
    if broker.log_manager.offline is not None:  # it failed while the broker started (owed markers written)
        _halt(broker.log_manager.offline)
    try:
        for name, partitions in args.topics:
            if name not in broker.topics:
                broker.create_topic(name, partitions)
            elif broker.topics[name] != partitions:
                raise ValueError(f"--topics {name}:{partitions}, but {data_dir} serves {name!r} with "
                                 f"{broker.topics[name]} partitions")
        server = Server(broker, **config.server_kwargs())
        asyncio.run(_serve(server, data_dir))
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):  # a second signal must not cut the close short
            signal.signal(sig, signal.SIG_IGN)
        broker.close()  # everything acknowledged is on disk, and the recovery points are written
    if not args.quiet:
        print("idemcore serve: stopped; the logs are closed", file=sys.stderr)
    return 0


def _halt(why: str) -> None:
    """The log directory failed: exit at once, as Kafka's broker halts when its last log directory fails, so
    nothing more is acknowledged and no clean shutdown is recorded (the next start recovers the logs)."""
    try:
        print(f"idemcore serve: the log directory failed ({why}); halting", file=sys.stderr, flush=True)
    finally:  # even when standard error is on the full disk
        os._exit(HALT_STATUS)


def _check_listenable(host: str, port: int) -> None:
    """Bind where the server will listen, once, before the data directory is made or locked: an address that
    does not resolve or is taken is refused in one line, leaving nothing on disk (binding again later may still
    fail, if someone takes the port in between; that is said then)."""
    try:
        addresses = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
        for family, kind, protocol, _, address in addresses:
            with socket.socket(family, kind, protocol) as probe:
                probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as asyncio's server does
                if family == socket.AF_INET6:
                    probe.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
                probe.bind(address)
    except OSError as error:
        raise OSError(f"cannot listen on {host}:{port}: {error.strerror or error}") from None


async def _serve(server: Any, data_dir: Path) -> None:
    try:
        await server.start_serving(join_cluster=False)
    except OSError as error:  # name what could not be listened on, in one line
        where = ", ".join(str(one.endpoint) for one in server.listeners)
        raise OSError(f"cannot listen on {where}: {error.strerror or error}") from None
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, server.request_stop)
    host, port = server.address
    topics = ", ".join(f"{name}:{count}" for name, count in sorted(server.broker.topics.items())) or "none yet"
    print(f"idemcore serve: listening on {host}:{port} (bootstrap.servers={host}:{port}); data dir "
          f"{data_dir}; topics: {topics}", flush=True)
    if len(server.listeners) > 1 or server.listeners[0].protocol != "PLAINTEXT":
        print("idemcore serve: listeners " + ", ".join(
            f"{one.name}{'' if one.name == one.protocol else f' ({one.protocol})'} on "
            f"{server.addresses[one.name][0]}:{server.addresses[one.name][1]}"
            for one in server.listeners), flush=True)
    await server.join_cluster()
    await server.serve_until_stopped()


def add_commands(commands: Any, common: argparse.ArgumentParser) -> None:
    serve = commands.add_parser(
        "serve", parents=[common], help="serve Kafka's protocol on a TCP port (a broker for Kafka clients)",
        description="A Kafka-compatible broker: Kafka's clients (librdkafka, kafka-python, aiokafka, Java) produce "
                    "idempotently and transactionally and consume read_committed, over Kafka's wire protocol; the "
                    "data directory is a Kafka log directory. Settings by Kafka's names come from --config (a "
                    "server.properties file, as kafka-server-start.sh takes) and --override key=value (over the "
                    "file); each flag below but --fsync (idemcore's own) sets the setting its help names, over "
                    "both. Topics are created on first use (unless auto.create.topics.enable=false), by "
                    "CreateTopics, or by --topics. Stops cleanly on "
                    "SIGINT/SIGTERM. Exit status 2 for a bad setting, named in one line; 1 when the log directory "
                    "fails (a write or fsync raised): the broker halts, as Kafka's does, and its next start "
                    "recovers the logs.")
    serve.add_argument("--config", type=_path, default=None, metavar="server.properties",
                       help="Kafka's broker settings, a Java properties file (docs/broker.md: Broker settings)")
    serve.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                       help="a setting over --config's (repeatable), as kafka-server-start.sh --override")
    serve.add_argument("--data-dir", type=_path, default=None,
                       help="sets log.dirs: the Kafka log directory (created if missing; a restart recovers it); "
                            "needed unless log.dirs or log.dir is set")
    serve.add_argument("--port", type=_port, default=None,
                       help="sets the port of listeners (default 9092; 0: any free port)")
    serve.add_argument("--host", default=None,
                       help="sets the host of listeners: the address to bind (default 127.0.0.1)")
    serve.add_argument("--advertised-host", default=None,
                       help="sets the host of advertised.listeners: the host clients are told to connect to "
                            "(default: listeners')")
    serve.add_argument("--topics", type=_topic_list, default=[],
                       help="topics to create if missing, name:partitions,... (e.g. orders:8,audit:1)")
    serve.add_argument("--default-partitions", type=positive, default=None,
                       help="sets num.partitions: partitions of an auto-created topic (default 1)")
    serve.add_argument("--no-auto-create-topics", action="store_true",
                       help="sets auto.create.topics.enable=false: a topic must be created first")
    serve.add_argument("--fsync", action="store_true",
                       help="fsync before answering acks=all (survives a machine crash; default: like Kafka, the OS "
                            "page cache, which survives a crash of this process)")
    serve.add_argument("--node-id", type=non_negative, default=None,
                       help="sets broker.id and node.id: this broker's id (default 0)")
    serve.add_argument("--max-request-bytes", type=positive, default=None,
                       help="sets socket.request.max.bytes: the largest request accepted (default 104857600)")
    serve.set_defaults(run=run_serve)
