"""Argument types and option choices shared by the commands: errors name the option (argparse adds it)."""

from __future__ import annotations

import argparse

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
