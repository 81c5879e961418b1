"""Argument types and option choices shared by the commands: errors name the option (argparse adds it)."""

from __future__ import annotations

import argparse
import logging
from typing import Any

from idemcore.kernels import ENV_VAR, PREFERENCE
from idemcore.protocol.codes import Origin

BACKEND_CHOICES = ("auto", *PREFERENCE)
ORIGIN_CHOICES = tuple(origin.name.lower() for origin in Origin)
BACKEND_HELP = f"kernel backend (default: ${ENV_VAR}, else auto: the fastest that loads)"


def _integer(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None


def positive(text: str) -> int:
    value = _integer(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def non_negative(text: str) -> int:
    value = _integer(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be at least 0, got {value}")
    return value


def probability(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not 0.0 <= value < 1.0:
        raise argparse.ArgumentTypeError(f"must be a probability in [0, 1), got {value}")
    return value


def verbosity_options() -> argparse.ArgumentParser:
    """-v/--verbose and -q/--quiet, for every command (a parent parser)."""
    common = argparse.ArgumentParser(add_help=False)
    group = common.add_argument_group("output")
    group.add_argument("-v", "--verbose", action="count", default=0,
                       help="say more: -v logs what idemcore does (INFO), -vv also its details (DEBUG)")
    group.add_argument("-q", "--quiet", action="store_true",
                       help="no progress, only warnings, errors and the result")
    return common


def show_progress(args: argparse.Namespace) -> bool:
    """Progress on standard error unless --quiet, or --json (whose output a program reads)."""
    return not (getattr(args, "quiet", False) or getattr(args, "json", False))


def configure_logging(args: argparse.Namespace) -> None:
    """idemcore's log records on standard error: WARNING by default, INFO with -v, DEBUG with -vv, ERROR with
    -q."""
    verbose = getattr(args, "verbose", 0)
    level = logging.ERROR if getattr(args, "quiet", False) else \
        (logging.WARNING, logging.INFO, logging.DEBUG)[min(verbose, 2)]
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("idemcore: %(levelname)s: %(message)s"))
    logger = logging.getLogger("idemcore")
    logger.handlers[:] = [handler]
    logger.setLevel(level)
    logger.propagate = False


def bootstrap_servers(text: str) -> str:
    """A ``--bootstrap-server`` value: ``host:port[,host:port...]``, checked as the clients parse it."""
    from idemcore.net.tcp import parse_bootstrap

    try:
        parse_bootstrap(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    return text


#: The help of ``--command-config``, as every command that talks to a broker gives it.
COMMAND_CONFIG_HELP = ("client properties for the broker connection (security.protocol, ssl.*, sasl.mechanism, "
                       "sasl.jaas.config or sasl.username/sasl.password), as Kafka's tools take them")


def command_config_security(path: str | None) -> Any:
    """The :class:`~idemcore.net.client_security.ClientSecurity` of the client properties file ``path`` (a
    command's ``--command-config``); None when no file is given."""
    if path is None:
        return None
    from idemcore.net.client_security import ClientSecurity
    from idemcore.net.properties import read_properties

    return ClientSecurity.from_properties(read_properties(path))
