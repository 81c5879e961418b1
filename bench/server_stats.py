"""What a broker process costs, read from Linux's /proc: its CPU seconds and its memory (None elsewhere)."""

from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass
class Peer:
    """A running broker: where clients connect, and its process id."""

    bootstrap: str
    pid: int

    def cpu_seconds(self) -> float | None:
        """This broker process's user + system CPU seconds so far, all its threads (/proc/PID/stat)."""
        try:
            with open(f"/proc/{self.pid}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except OSError:
            return None
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def memory(self) -> dict[str, int] | None:
        """``{"rss": bytes, "peak_rss": bytes}``: resident now (VmRSS) and the most so far (VmHWM)."""
        try:
            with open(f"/proc/{self.pid}/status") as status:
                lines = status.read().splitlines()
        except OSError:
            return None
        found = {}
        for line in lines:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                found["rss" if key == "VmRSS" else "peak_rss"] = int(value.split()[0]) * 1024  # "123 kB"
        return found if len(found) == 2 else None
