"""Exceptions for misuse of the library. Protocol outcomes are results, never exceptions."""

from __future__ import annotations


class IdemcoreError(Exception):
    """Base class of idemcore's exceptions."""


class BackendUnavailableError(IdemcoreError, ImportError):
    """A kernel backend was asked for by name but could not be loaded."""


class ConfigError(IdemcoreError, ValueError):
    """A setting is invalid or contradicts another one (a producer's, or a broker's ``server.properties``)."""


def one_line(exc: BaseException) -> str:
    """``exc``'s message on one line (pyarrow's and the JVM's messages span several): its lines joined by "; "."""
    return "; ".join(line.strip() for line in str(exc).splitlines() if line.strip()) or type(exc).__name__
