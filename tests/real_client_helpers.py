"""Helpers for the real-client tests (tests/test_real_clients.py): which API versions a client used, the
server's health after a run, hard time bounds around client code, and confluent-kafka topic set-up and reads."""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

import pytest

import idemcore.broker.server as server_module
from idemcore.net.wire.apis import API_VERSIONS_KEY, APIS

#: Keys of the group-coordinator APIs.
OFFSET_COMMIT, OFFSET_FETCH, TXN_OFFSET_COMMIT = 8, 9, 28
JOIN_GROUP, HEARTBEAT, LEAVE_GROUP, SYNC_GROUP = 11, 12, 13, 14
MEMBERSHIP = (JOIN_GROUP, SYNC_GROUP, HEARTBEAT, LEAVE_GROUP)
GROUP_OFFSETS = (OFFSET_COMMIT, OFFSET_FETCH)

_NAMES = {OFFSET_COMMIT: "OffsetCommit", OFFSET_FETCH: "OffsetFetch", JOIN_GROUP: "JoinGroup", HEARTBEAT: "Heartbeat",
          LEAVE_GROUP: "LeaveGroup", SYNC_GROUP: "SyncGroup", TXN_OFFSET_COMMIT: "TxnOffsetCommit",
          API_VERSIONS_KEY: "ApiVersions"}


def api_name(key: int) -> str:
    api = APIS.get(key)
    return api.name if api is not None else _NAMES.get(key, f"api {key}")


def require_apis(*keys: int) -> None:
    """Fail (before any client starts) when the server does not serve every API of ``keys``. librdkafka 2.16
    crashes the whole process (SIGSEGV) when a consumer with a group.id needs OffsetFetch from a broker that does
    not advertise it, so such a test must not even start its clients."""
    missing = [api_name(key) for key in keys if key not in APIS]
    if missing:
        pytest.fail(f"the server does not serve {', '.join(missing)} yet (idemcore/net/wire/apis.py)")


@dataclass
class Served:
    """The in-process server of a test, with the API versions its clients asked for."""

    server: Any
    used: Counter[tuple[int, int]] = field(default_factory=Counter)

    @property
    def bootstrap(self) -> str:
        return str(self.server.bootstrap)

    def versions(self) -> str:
        """``Produce v10 x13, Fetch v16 x4, ...``: each API and version asked for, by key."""
        return ", ".join(f"{api_name(key)} v{version} x{count}" for (key, version), count in sorted(self.used.items()))

    def assert_clean(self, caplog: pytest.LogCaptureFixture) -> None:
        """No frame refused, no broker or translation failure, no ERROR logged by the server."""
        stats = self.server.stats
        assert (stats["malformed"], stats["unsupported"], stats["broker_errors"]) == (0, 0, 0), stats
        errors = [record for record in caplog.records
                  if record.name.startswith("idemcore.broker.server") and record.levelno >= logging.ERROR]
        assert not errors, "\n".join(record.getMessage() + "\n" + (record.exc_text or "") for record in errors)


def record_api_versions(monkeypatch: pytest.MonkeyPatch, served: Served) -> None:
    """Count every request's (api key, version) as the server reads its header (an observer around the
    server module's ``peek_request``; the server itself is unchanged)."""
    peek = getattr(server_module, "peek_request", None)
    if peek is None:  # the server reads headers some other way now: record nothing
        return

    def recording_peek(frame: bytes) -> Any:
        header = peek(frame)
        served.used[(header[0], header[1])] += 1
        return header

    monkeypatch.setattr(server_module, "peek_request", recording_peek)


_T = TypeVar("_T")


def bounded(seconds: float, function: Callable[[], _T]) -> _T:
    """``function()`` in a daemon thread; the test fails if it has not returned within ``seconds`` (a client
    stuck on a server bug must not hang the run). Exceptions are raised here."""
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["value"] = function()
        except BaseException as error:  # re-raised in the test's thread
            outcome["error"] = error

    thread = threading.Thread(target=run, name=f"bounded-{getattr(function, '__name__', 'client')}", daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        pytest.fail(f"{getattr(function, '__name__', 'the client')} did not finish within {seconds} s")
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


def wait_until(check: Callable[[], bool], seconds: float, what: str, step: float = 0.05) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {seconds} s waiting for {what}")
        time.sleep(step)


# ---------------------------------------------------------------- confluent-kafka

#: Settings every confluent-kafka client of these tests shares: quiet about the server closing connections at
#: the end of a test.
QUIET = {"log.connection.close": False}


def create_topics(bootstrap: str, topics: Mapping[str, int]) -> None:
    """Make ``{name: partitions}`` with CreateTopics (confluent-kafka's AdminClient)."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap, **QUIET})
    futures = admin.create_topics([NewTopic(name, num_partitions=count, replication_factor=1)
                                   for name, count in topics.items()], operation_timeout=10, request_timeout=10)
    for future in futures.values():
        future.result(15)


@dataclass
class Read:
    """What a consumer read from one topic: per partition, ``(offset, key, value)`` in the order received; its
    position per partition at the end; the high watermarks."""

    records: dict[int, list[tuple[int, bytes, bytes]]]
    positions: dict[int, int]
    high_watermarks: dict[int, int]

    def keys(self, partition: int) -> list[bytes]:
        return [key for _, key, _ in self.records.get(partition, [])]

    def all_keys(self) -> list[bytes]:
        return [key for records in self.records.values() for _, key, _ in records]


def read_confluent(bootstrap: str, topic: str, partitions: Iterable[int], isolation: str = "read_uncommitted",
                   seconds: float = 30) -> Read:
    """Read ``topic`` from the beginning to its end (partition EOF on each partition) with a confluent-kafka
    consumer that only uses assign() (no group membership, no committed offsets)."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

    partitions = list(partitions)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"reader-{topic}-{isolation}",
                         "enable.auto.commit": False, "enable.auto.offset.store": False,
                         "isolation.level": isolation, "enable.partition.eof": True, "fetch.wait.max.ms": 50,
                         **QUIET})
    try:
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
        records: dict[int, list[tuple[int, bytes, bytes]]] = {p: [] for p in partitions}
        at_end: set[int] = set()
        deadline = time.monotonic() + seconds
        while len(at_end) < len(partitions):
            if time.monotonic() > deadline:
                raise AssertionError(f"{topic}: no end of partitions {set(partitions) - at_end} in {seconds} s")
            for message in consumer.consume(10_000, 0.2):
                error = message.error()
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF:
                        at_end.add(message.partition())
                        continue
                    raise AssertionError(f"{topic}: consumer error {error}")
                at_end.discard(message.partition())
                records[message.partition()].append((message.offset(), message.key(), message.value()))
        ends = consumer.position([TopicPartition(topic, p) for p in partitions])
        positions = {tp.partition: tp.offset for tp in ends}
        high = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in partitions}
        return Read(records, positions, high)
    finally:
        consumer.close()
