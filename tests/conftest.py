"""Shared fixtures: every kernel test runs once per backend.

The suite fails (never skips) when a backend it is told to expect did not
load: IDEMCORE_EXPECT_BACKENDS (default: all three) names them.
"""

from __future__ import annotations

import os

import pytest

from idemcore._kernels import PREFERENCE, load_backend

EXPECTED = [name.strip() for name in os.environ.get("IDEMCORE_EXPECT_BACKENDS", ",".join(PREFERENCE)).split(",")
            if name.strip()]


def pytest_sessionstart(session):
    for name in EXPECTED:
        load_backend(name)  # raises BackendUnavailableError: the run fails at once


@pytest.fixture(params=EXPECTED)
def backend(request):
    """Name of each expected backend in turn."""
    return request.param
