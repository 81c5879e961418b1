"""Exceptions for misuse of the library. Protocol outcomes are results, never exceptions."""

from __future__ import annotations


class IdemcoreError(Exception):
    """Base class of idemcore's exceptions."""


class BackendUnavailableError(IdemcoreError, ImportError):
    """A kernel backend was asked for by name but could not be loaded."""
