"""Ctrl-C held back while a step that must not stop halfway runs.

Python delivers SIGINT as a KeyboardInterrupt between two bytecodes of the main thread, so one can land in the
middle of a table's reallocation (rows replaced, index not yet rebuilt) and leave it unusable. Inside
:func:`deferred_interrupts` the signal is only noted; it is raised again, to whatever handler was there, once
the step has finished.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


@contextmanager
def deferred_interrupts(signals: tuple[int, ...] = (signal.SIGINT,)) -> Iterator[None]:
    """Run the block whole: a SIGINT (or another of ``signals``) arriving meanwhile is delivered when it ends.
    (Only the main thread runs signal handlers, so elsewhere, and where another handler is being installed, the
    block just runs.)"""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    received: list[int] = []
    previous: dict[int, Any] = {}
    try:
        for signum in signals:
            previous[signum] = signal.signal(signum, lambda signum, frame: received.append(signum))
    except ValueError:  # (not the main interpreter)
        yield
        return
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        for signum in dict.fromkeys(received):
            signal.raise_signal(signum)  # now handled as before the block
