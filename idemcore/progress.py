"""Progress on standard error: a tqdm bar on a terminal, a plain line now and then elsewhere (pipes, logs, CI).

Every long step of the commands reports through :func:`bar` or :func:`waiting`, so a run shows something
moving, and output that is not a terminal gets whole lines instead of carriage-return redraws.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, TextIO

from tqdm import tqdm

#: Seconds between the plain lines written when standard error is not a terminal.
PLAIN_INTERVAL_S = 10.0


def _terminal() -> bool:
    return bool(getattr(sys.stderr, "isatty", lambda: False)())


class PlainProgress:
    """tqdm's counting interface (``n``, ``total``, ``update``, ``refresh``, ``close``) writing a line at
    most every ``interval`` seconds, and one at the end."""

    def __init__(self, total: int | None, desc: str, unit: str, interval: float = PLAIN_INTERVAL_S) -> None:
        self.total, self.desc, self.unit, self.n = total, desc, unit, 0
        self._interval = interval
        self._started = self._last = time.monotonic()
        self._closed = False

    def update(self, count: int = 1) -> None:
        self.n += count
        self.refresh()

    def refresh(self) -> None:
        if time.monotonic() - self._last >= self._interval:
            self._write()

    def _write(self) -> None:
        self._last = time.monotonic()
        of = f"/{self.total:,}" if self.total else ""
        print(f"{self.desc}: {self.n:,}{of} {self.unit} ({self._last - self._started:.0f} s)", file=sys.stderr,
              flush=True)

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._write()

    def __enter__(self) -> PlainProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _Off:
    """Progress turned off: counts, shows nothing."""

    def __init__(self, total: int | None) -> None:
        self.total, self.n = total, 0

    def update(self, count: int = 1) -> None:
        self.n += count

    def refresh(self) -> None:
        pass

    def close(self) -> None:
        pass

    def __enter__(self) -> _Off:
        return self

    def __exit__(self, *exc: object) -> None:
        pass


def bar(total: int | None, desc: str, unit: str, enabled: bool = True, **options: Any) -> Any:
    """A progress counter for ``total`` ``unit``\\s: tqdm on a terminal, plain lines elsewhere, nothing when
    not ``enabled``. ``options`` go to tqdm (``unit_scale=True``, say)."""
    if not enabled:
        return _Off(total)
    if not _terminal():
        return PlainProgress(total, desc, unit)
    return tqdm(total=total, desc=desc, unit=unit, file=sys.stderr, **options)


@contextmanager
def waiting(desc: str, enabled: bool = True, interval: float = 0.5, file: TextIO | None = None) -> Iterator[None]:
    """Show the seconds spent in a block that reports no progress of its own (a JVM starting, say), on
    ``file`` (standard error by default)."""
    if not enabled:
        yield
        return
    out = file or sys.stderr
    started = time.monotonic()
    if not out.isatty():
        print(f"{desc}...", file=out, flush=True)
        yield
        print(f"{desc}: done in {time.monotonic() - started:.1f} s", file=out, flush=True)
        return
    shown = tqdm(total=None, desc=desc, bar_format="{desc}: {elapsed}", file=out)
    stop = threading.Event()

    def tick() -> None:
        while not stop.wait(interval):
            shown.refresh()

    thread = threading.Thread(target=tick, name="idemcore-waiting", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
        shown.close()
