"""The wire layer's errors: a frame that cannot be read, an API or version with no schema."""

from __future__ import annotations

from idemcore.errors import IdemcoreError


class MalformedFrameError(IdemcoreError, ValueError):
    """A frame that is not a request this server can read: truncated, trailing bytes, bad lengths, unknown tags."""


class UnsupportedApiError(IdemcoreError, ValueError):
    """A request for an API key or version this side has no schema for."""
