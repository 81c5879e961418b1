"""Producer ids from blocks of 1000 claimed by compare-and-set on a shared store (docs/rules.md §1, §3).

The scheme is Kafka's ZooKeeper one: a node ``/latest_producer_id_block``
holds ``{"version": 1, "broker": b, "block_start": s, "block_end": e}``. A broker
that needs ids reads the node, proposes the next block and writes it only if
the node's version is still the one it read; losing that race means another
broker took the block, so it reads again and retries. Two stores implement
the read / compare-and-set pair: SQLite (embedded, the default) and ZooKeeper
through kazoo.
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import threading
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from idemcore.errors import IdemcoreError
from idemcore.protocol.constants import PRODUCER_ID_BLOCK_SIZE

BLOCK_NODE = "/latest_producer_id_block"
#: The broker's own id store, in its data directory.
SQLITE_STORE_NAME = "producer_ids.sqlite"
INT64_MAX = 2**63 - 1
#: Allocators hand out ids in blocks from 0: none ever reaches this far (2**62 would take 4.6e15 blocks).
REACHABLE = 2**62
#: A version that means "the node does not exist yet": compare-and-set with it creates the node.
ABSENT = -1


class ProducerIdsExhaustedError(IdemcoreError):
    """No block of producer ids is left below 2**63 - 1."""


class BlockStoreError(IdemcoreError):
    """The store of producer-id blocks cannot be read or written."""


class BlockStore(Protocol):
    """A versioned cell: read it, or replace it only if nobody changed it since."""

    def read(self) -> tuple[bytes | None, int]:
        """The stored bytes and their version, or ``(None, ABSENT)``."""

    def compare_and_set(self, data: bytes, expected_version: int) -> bool:
        """Store ``data`` if the version is still ``expected_version``; False if another writer won."""


class SqliteBlockStore:
    """The block node in a SQLite database (a file shared by processes, or ``":memory:"``)."""

    def __init__(self, path: str | Path = ":memory:", node: str = BLOCK_NODE, timeout_s: float = 30.0) -> None:
        self.path = str(path)
        self.node = node
        self._lock = threading.Lock()
        self._db: sqlite3.Connection | None = None
        with self._errors_named(opening=True):
            # Autocommit: every statement below is one atomic transaction of its own.
            self._db = sqlite3.connect(self.path, timeout=timeout_s, isolation_level=None, check_same_thread=False)
            self._db.execute("CREATE TABLE IF NOT EXISTS nodes (path TEXT PRIMARY KEY, data BLOB NOT NULL,"
                             " version INTEGER NOT NULL)")
            data, _ = self.read()
            if data is not None:
                ProducerIdBlock.decode(data)
            # At start, not at the first InitProducerId: a store that cannot take a write (read-only file or
            # directory) is named now. BEGIN IMMEDIATE alone does not write; the probe row does, then rolls back.
            self._db.execute("BEGIN IMMEDIATE")
            try:
                self._db.execute("INSERT OR REPLACE INTO nodes (path, data, version) VALUES ('/probe', x'', 0)")
            finally:
                self._db.execute("ROLLBACK")

    @contextlib.contextmanager
    def _errors_named(self, opening: bool = False) -> Iterator[None]:
        try:
            yield
        except (sqlite3.Error, IdemcoreError) as exc:
            if not opening:  # at run time (a lock timeout, say): the store stays open for the next call
                if isinstance(exc, BlockStoreError):
                    raise
                raise BlockStoreError(f"producer id store {self.path}: {exc}") from None
            if self._db is not None:
                self._db.close()
            reason = str(exc).removeprefix(f"producer id store {self.path}: ")
            raise BlockStoreError(f"producer id store {self.path}: {reason}. Remove it to start a fresh store "
                                  "(ids found in the logs are never handed out again)") from None

    def read(self) -> tuple[bytes | None, int]:
        assert self._db is not None  # set in __init__ before any read (None only until connect succeeds)
        with self._lock, self._errors_named():
            row = self._db.execute("SELECT data, version FROM nodes WHERE path = ?", (self.node,)).fetchone()
        return (None, ABSENT) if row is None else (bytes(row[0]), int(row[1]))

    def compare_and_set(self, data: bytes, expected_version: int) -> bool:
        assert self._db is not None  # set in __init__ (None only until connect succeeds)
        with self._lock, self._errors_named():
            if expected_version == ABSENT:
                cursor = self._db.execute("INSERT OR IGNORE INTO nodes (path, data, version) VALUES (?, ?, 0)",
                                          (self.node, data))
            else:
                cursor = self._db.execute("UPDATE nodes SET data = ?, version = version + 1"
                                          " WHERE path = ? AND version = ?", (data, self.node, expected_version))
        return cursor.rowcount == 1

    def close(self) -> None:
        if self._db is not None:
            self._db.close()


class ZooKeeperBlockStore:
    """The block node in ZooKeeper (kazoo); the znode version is the compare-and-set version."""

    def __init__(self, hosts: str, node: str = BLOCK_NODE, timeout_s: float = 10.0) -> None:
        from kazoo.client import KazooClient  # optional dependency, imported when used

        self.node = node
        self._client = KazooClient(hosts=hosts, timeout=timeout_s)
        try:
            with warnings.catch_warnings():  # a broker makes its chroot when it registers, after this
                warnings.filterwarnings("ignore", "No chroot path exists", UserWarning)
                self._client.start(timeout=timeout_s)
        except Exception as exc:  # a timeout, a bad host: one line for the user
            self._client.close()
            raise BlockStoreError(f"ZooKeeper {hosts} (producer id blocks) did not answer within {timeout_s:g} s: "
                                  f"{exc}") from None

    def read(self) -> tuple[bytes | None, int]:
        from kazoo.exceptions import NoNodeError

        try:
            data, stat = self._client.get(self.node)
        except NoNodeError:
            return None, ABSENT
        # Kafka's brokers make the node empty at start (ZkData's persistent paths): no block claimed yet.
        return data or None, stat.version

    def compare_and_set(self, data: bytes, expected_version: int) -> bool:
        from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

        try:
            if expected_version == ABSENT:
                self._client.create(self.node, data, makepath=True)
            else:
                self._client.set(self.node, data, version=expected_version)
        except (BadVersionError, NodeExistsError, NoNodeError):
            return False
        return True

    def close(self) -> None:
        self._client.stop()
        self._client.close()


@dataclass(frozen=True)
class ProducerIdBlock:
    """Ids ``block_start..block_end`` (inclusive), claimed by ``broker``."""

    broker: int
    block_start: int
    block_end: int

    def encode(self) -> bytes:
        # Kafka writes the bounds as strings (they may exceed a JSON double's exact range).
        return json.dumps({"version": 1, "broker": self.broker, "block_start": str(self.block_start),
                           "block_end": str(self.block_end)}).encode()

    @classmethod
    def decode(cls, data: bytes) -> ProducerIdBlock:
        try:
            fields = json.loads(data)
            if fields.get("version") != 1:
                raise ValueError(f"unsupported version {fields.get('version')!r}")
            return cls(int(fields["broker"]), int(fields["block_start"]), int(fields["block_end"]))
        except (ValueError, KeyError, TypeError) as exc:
            raise IdemcoreError(f"corrupt producer id block node: {data!r} ({exc})") from exc


class ProducerIdManager:
    """Hands out unique producer ids for one broker; thread-safe."""

    def __init__(self, broker_id: int, store: BlockStore, block_size: int = PRODUCER_ID_BLOCK_SIZE,
                 on_claim: Callable[[ProducerIdBlock], None] | None = None) -> None:
        if block_size < 1:
            raise ValueError(f"block_size must be at least 1, got {block_size}")
        self.broker_id = broker_id
        self.store = store
        self.block_size = block_size
        self.on_claim = on_claim  # told of each block before any of its ids is handed out
        self.cas_failures = 0
        self._lock = threading.Lock()
        self._next = 0
        self._end = -1  # no block yet
        self._floor = -1  # every id handed out is above this

    def skip_through(self, producer_id: int) -> None:
        """Never hand out ``producer_id`` or any id below it: the broker's logs hold writes of those ids (the
        store may have been lost or replaced while the logs survived). Ids from ``REACHABLE`` up were never
        handed out by any allocator (blocks grow from 0); a client that made one up does not move the floor,
        or one request could exhaust every id."""
        if producer_id >= REACHABLE:
            return
        with self._lock:
            self._floor = max(self._floor, producer_id)

    def claim_block(self) -> ProducerIdBlock:
        """Claim the block after the newest one in the store (retrying lost races)."""
        while True:
            data, version = self.store.read()
            start = 0 if data is None else ProducerIdBlock.decode(data).block_end + 1
            if start <= self._floor:  # the store is behind the logs: continue after the highest id they hold
                start = (self._floor // self.block_size + 1) * self.block_size
            if start > INT64_MAX - self.block_size:
                raise ProducerIdsExhaustedError(
                    f"broker {self.broker_id} cannot claim a producer id block: the next block would start at "
                    f"{start}, and blocks of {self.block_size} must end below {INT64_MAX}")
            block = ProducerIdBlock(self.broker_id, start, start + self.block_size - 1)
            if self.store.compare_and_set(block.encode(), version):
                if self.on_claim is not None:
                    self.on_claim(block)
                return block
            self.cas_failures += 1  # another broker took it: read the new latest block and retry

    def generate_producer_id(self) -> int:
        """The next unused producer id."""
        with self._lock:
            self._next = max(self._next, self._floor + 1)
            if self._next > self._end:
                block = self.claim_block()
                self._next, self._end = block.block_start, block.block_end
            producer_id = self._next
            self._next += 1
            return producer_id


class IdFloorFile:
    """``<data_dir>/producer-id-floor``: the end of the last block this broker claimed, made durable before any
    id of the block is handed out. If the id store is lost, the broker starts above it: ids handed to
    producers that have not written yet (so are in no log) are never handed out again."""

    NAME = "producer-id-floor"

    def __init__(self, data_dir: Path) -> None:
        self.path = data_dir / self.NAME

    def read(self) -> int | None:
        """The recorded block end; None when there is no file. BlockStoreError when it is damaged."""
        if not os.path.lexists(self.path):
            return None
        try:
            fields = json.loads(self.path.read_text())
            end = int(fields["block_end"])
            if not (isinstance(fields, dict) and fields.get("version") == 1 and end >= 0):
                raise ValueError(f"unexpected content {fields!r}")
            return end
        except (OSError, ValueError, KeyError, TypeError, OverflowError) as exc:
            raise BlockStoreError(f"{self.path} is damaged ({exc}); restore it, or remove it if "
                                  f"{SQLITE_STORE_NAME} is intact") from None

    def record(self, block: ProducerIdBlock) -> None:
        """Make ``block``'s end durable: written beside, fsync'd, renamed over, directory fsync'd."""
        partial = self.path.with_name(self.NAME + ".partial")
        descriptor = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
        try:
            os.write(descriptor, json.dumps({"version": 1, "block_end": str(block.block_end)}).encode())
            os.fsync(descriptor)
        finally:
            os.close(descriptor)
        os.replace(partial, self.path)
        directory = os.open(self.path.parent, os.O_RDONLY)
        try:
            os.fsync(directory)
        finally:
            os.close(directory)
