"""Kill a broker's process with SIGKILL at a seeded point, restart, and check every acknowledged record.

Each round forks a child that opens a :class:`~idemcore.broker.Broker` on one data directory (small segments,
so rolls happen) and has idempotent producers write records, telling the parent over a pipe about each record
once it was acknowledged. The child dies by SIGKILL at a point its seed picks: the n-th write, fsync, rename
or unlink the broker makes, in recovery, in an append, in an index or written-ends update, in a roll or in a
checkpoint. A segment or index write is first cut at a random byte (stricter than a process death, which stops
a write only between pages; the log must take any prefix as a torn tail); a plain ``os.write``/``os.pwrite``
is cut only where a process death can cut it: before it, after it, or at a page boundary. If no point comes,
the child dies after its last record.

The parent then starts a broker on the directory (killed or closed again at random, so both kinds of start
are exercised) and checks, for every partition, that every record ever acknowledged at or above the log start
offset (retention deletes old segments as rounds go on) is there, at the offset it was acknowledged with,
exactly once, and that offsets are contiguous from the log start. On the compacted topic ``kc`` (keyed records,
compacted between them) it checks that offsets rise, nothing is stored twice, and each key's newest acknowledged
record is there unless a newer record of that key superseded it. Records written but not acknowledged
may be there or not (at most once).

Used by ``tests/test_kill_recovery.py`` (100 rounds in CI) and ``scripts/dev kill-test`` (1000 rounds).
"""

from __future__ import annotations

import json
import os
import random
import signal
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

TOPICS = {"k": 3, "kc": 1}
#: "kc" is compacted (keyed records, cleaned between records): a kill may land inside a compaction too.
CONFIGS = {"kc": {"cleanup.policy": "compact", "segment.bytes": 600}}
_KEYS = [b"a", b"b", b"c", b"d", b"e"]
_PAGE = 4096
#: Small segments and indexes dense enough that rolls and index entries happen every round; retention keeps
#: about 3 KB a partition, so segments are deleted (and the log start moves) as rounds go on.
SETTINGS = {"segment_bytes": 1200, "index_interval_bytes": 100, "retention_bytes": 3000, "topic_configs": CONFIGS}


class Acked(NamedTuple):
    topic: str
    partition: int
    offset: int
    value: bytes
    key: bytes | None


class Round(NamedTuple):
    seed: int
    acked: list[Acked]
    died_at: str  # what the child was doing when it was killed


def _die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def _arm(rng: random.Random, report: Callable[[str], None]) -> None:
    """In the child: make the n-th write, fsync, rename or unlink of the broker its last (n picked by ``rng``)."""
    from idemcore.broker.log.store import FileStore

    countdown = [rng.randint(1, 160)]

    def due(what: str) -> bool:
        countdown[0] -= 1
        if countdown[0] == 0:
            report(what)
            return True
        return False

    append, fsync, replace, os_write, pwrite, unlink = (FileStore.append, os.fsync, os.replace, os.write,
                                                       os.pwrite, os.unlink)

    def torn_append(store: Any, data: bytes) -> None:
        if due(f"write {store.path.name}"):
            append(store, bytes(data)[:rng.randrange(len(data) + 1)])
            _die()
        append(store, data)

    def killing(name: str, call: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*args: Any) -> Any:
            if due(name):
                if name in ("os.write", "os.pwrite"):  # the whole pages the kernel had copied, then death
                    data = bytes(args[1])
                    at = args[2] if name == "os.pwrite" else os.lseek(args[0], 0, os.SEEK_CUR)
                    cuts = [0, len(data), *range(-at % _PAGE or _PAGE, len(data), _PAGE)]
                    call(args[0], data[:rng.choice(cuts)], *args[2:])
                _die()
            return call(*args)
        return wrapper

    FileStore.append = torn_append  # type: ignore[method-assign]
    os.fsync = killing("os.fsync", fsync)
    os.replace = killing("os.replace", replace)
    os.write = killing("os.write", os_write)
    os.pwrite = killing("os.pwrite", pwrite)
    os.unlink = killing("os.unlink", unlink)  # retention deleting segments, snapshots going


def _child(data_dir: Path, seed: int, pipe: int) -> None:
    """Write records until killed; tell the parent of each acknowledged one (never returns)."""
    from idemcore.broker import Broker
    from idemcore.client import Producer

    rng = random.Random(seed)
    send_line = os.write  # captured before _arm wraps os.write

    def report(line: str) -> None:
        send_line(pipe, (line + "\n").encode())

    _arm(rng, lambda what: report(json.dumps({"died_at": what})))
    broker = Broker(TOPICS, data_dir=data_dir, fsync=rng.random() < 0.5, **SETTINGS)
    producers = [Producer(broker, acks=rng.choice([-1, 1]), linger_ms=0) for _ in range(2)]
    for i in range(rng.randint(5, 40)):
        producer = rng.choice(producers)
        topic = "kc" if rng.random() < 0.3 else "k"
        partition = rng.randrange(TOPICS[topic])
        key = rng.choice(_KEYS) if topic == "kc" else None
        value = f"{seed}-{i}-".encode() + b"x" * rng.randint(0, 120)
        metadata = producer.send(topic, value, key=key, partition=partition).result()
        report(json.dumps({"acked": [topic, partition, metadata.offset, value.decode(),
                                     None if key is None else key.decode()]}))
        if rng.random() < 0.1:
            broker.delete_old_segments()
        if rng.random() < 0.15:
            broker.clean_logs()
    report(json.dumps({"died_at": "after its last record"}))
    _die()


def kill_round(data_dir: Path, seed: int) -> Round:
    """Fork a writer on ``data_dir`` and let it die by SIGKILL at the point ``seed`` picks."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns, whatever happens
        try:
            os.close(read_end)
            _child(data_dir, seed, write_end)
        except BaseException:
            traceback.print_exc()
        finally:
            os._exit(3)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as lines:
        messages = [json.loads(line) for line in lines]
    _, status = os.waitpid(pid, 0)
    if not os.WIFSIGNALED(status) or os.WTERMSIG(status) != signal.SIGKILL:
        raise AssertionError(f"seed {seed}: the writer ended with status {status}, not by SIGKILL "
                             f"(its last messages: {messages[-3:]})")
    acked = [Acked(t, p, o, v.encode(), None if k is None else k.encode())
             for m in messages if "acked" in m for t, p, o, v, k in [m["acked"]]]
    died = next((m["died_at"] for m in messages if "died_at" in m), "unknown")
    return Round(seed, acked, died)


def check_restart(data_dir: Path, acked: list[Acked], seed: int) -> list[str]:
    """Start a broker on ``data_dir`` and list what breaks the promise to ``acked``; then kill or close it."""
    from idemcore.broker import Broker

    problems: list[str] = []
    broker = Broker(TOPICS, data_dir=data_dir, **SETTINGS)
    try:
        for partition in range(TOPICS["k"]):
            log = broker.log("k", partition)
            records = [(offset, value) for offset, _, value, _ in log.records()]
            offsets = [offset for offset, _ in records]
            if offsets != list(range(log.log_start_offset, log.log_end_offset)):
                problems.append(f"k-{partition}: offsets {offsets[:10]}... are not {log.log_start_offset}, "
                                f"{log.log_start_offset + 1}, ... {log.log_end_offset - 1}")
            problems += _repeated(f"k-{partition}", records)
            held = set(records)
            lost = [a for a in acked if (a.topic, a.partition) == ("k", partition) and a.offset >= log.log_start_offset
                    and (a.offset, a.value) not in held]  # below the start: deleted by retention, as promised
            if lost:
                problems.append(f"k-{partition}: {len(lost)} acknowledged records lost or moved, first {lost[0]}")
        problems += _compacted_problems(broker, [a for a in acked if a.topic == "kc"])
    finally:
        if random.Random(seed).random() < 0.5:
            broker.kill()
        else:
            broker.close()
    return problems


def _repeated(name: str, records: list[tuple[int, bytes | None]]) -> list[str]:
    values = [value for _, value in records]
    repeated = sorted({v for v in values if v is not None and values.count(v) > 1})
    return [f"{name}: records stored twice: {repeated[:3]}"] if repeated else []


def _compacted_problems(broker: Any, acked: list[Acked]) -> list[str]:
    """The compacted partition: offsets rise, nothing twice, and each key's newest acknowledged record is there
    unless a newer record of that key (written, perhaps not acknowledged before the kill) superseded it."""
    log = broker.log("kc", 0)
    held = [(offset, key, value) for offset, key, value, _ in log.records()]
    offsets = [offset for offset, _, _ in held]
    problems = [] if offsets == sorted(set(offsets)) else [f"kc-0: offsets {offsets[:10]}... do not rise"]
    problems += _repeated("kc-0", [(offset, value) for offset, _, value in held])
    for key in _KEYS:
        mine = [a for a in acked if a.key == key]
        if not mine:
            continue
        newest = max(mine, key=lambda a: a.offset)
        newer = [offset for offset, k, _ in held if k == key and offset >= newest.offset]
        if (newest.offset, key, newest.value) not in held and not any(o > newest.offset for o in newer):
            problems.append(f"kc-0: key {key!r}'s newest acknowledged record {newest} is gone")
    return problems


def run(data_dir: Path, seeds: range, on_round: Callable[[Round], None] | None = None) -> list[str]:
    """Kill and restart once per seed on one directory; the problems found (none: every promise kept)."""
    acked: list[Acked] = []
    for seed in seeds:
        done = kill_round(data_dir, seed)
        acked += done.acked
        problems = check_restart(data_dir, acked, seed)
        if on_round is not None:
            on_round(done)
        if problems:
            return [f"seed {seed} (killed at: {done.died_at}): {problem}" for problem in problems]
    return []


def main() -> int:
    """``python -m tests.kill_harness [--rounds N] [--first-seed S] [--dir D]``: N kills, a line per 100."""
    import argparse
    import tempfile
    import time
    from collections import Counter

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=1000)
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--dir", type=Path, default=None, help="data directory (default: a fresh temporary one)")
    args = parser.parse_args()
    places: Counter[str] = Counter()
    acked = [0]
    started = time.monotonic()

    def on_round(done: Round) -> None:
        places[done.died_at.split(" ")[0] + (" (segment)" if done.died_at.endswith(".log") else "")] += 1
        acked[0] += len(done.acked)
        if (done.seed - args.first_seed + 1) % 100 == 0:
            print(f"{done.seed - args.first_seed + 1} kills, {acked[0]} records acknowledged, "
                  f"{time.monotonic() - started:.0f} s", flush=True)

    with tempfile.TemporaryDirectory(prefix="idemcore-kill-") as scratch:
        data_dir = args.dir if args.dir is not None else Path(scratch) / "data"
        problems = run(data_dir, range(args.first_seed, args.first_seed + args.rounds), on_round)
    print("killed at: " + ", ".join(f"{place} {count}" for place, count in places.most_common()))
    if problems:
        print("\n".join(problems))
        return 1
    print(f"{args.rounds} kills: every acknowledged record there once, at its offset ({acked[0]} records)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
