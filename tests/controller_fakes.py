"""Fakes and waits for the controller's tests: channels that record what each broker was told."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from idemcore.net.replication import (
    BrokerEndpoint,
    LeaderAndIsrRequest,
    LeaderAndIsrResponse,
    UpdateMetadataRequest,
    UpdateMetadataResponse,
)


def wait_until(condition: Callable[[], Any], timeout_s: float = 15.0, what: str = "condition") -> Any:
    """Poll ``condition`` until it returns something true; fail after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not met within {timeout_s} s (last: {value!r})")
        time.sleep(0.05)


class Recorder:
    """Every request any controller sent, by destination broker; ``blocked`` brokers never answer."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.sent: dict[int, list[Any]] = {}
        self.blocked: set[int] = set()
        self.release = threading.Event()

    def factory(self, endpoint: BrokerEndpoint) -> FakeChannel:
        return FakeChannel(self, endpoint)

    def requests(self, broker: int, kind: type | None = None) -> list[Any]:
        with self.lock:
            return [r for r in self.sent.get(broker, []) if kind is None or isinstance(r, kind)]

    def leader_and_isr(self, broker: int, topic: str, partition: int) -> list[Any]:
        """The LeaderAndIsr partition states ``broker`` was sent for one partition, oldest first."""
        return [p for r in self.requests(broker, LeaderAndIsrRequest) for p in r.partitions
                if (p.topic, p.partition) == (topic, partition)]

    def metadata(self, broker: int, topic: str, partition: int) -> list[Any]:
        return [p for r in self.requests(broker, UpdateMetadataRequest) for p in r.partitions
                if (p.topic, p.partition) == (topic, partition)]

    def clear(self) -> None:
        with self.lock:
            self.sent.clear()


class FakeChannel:
    def __init__(self, recorder: Recorder, endpoint: BrokerEndpoint) -> None:
        self.recorder = recorder
        self.endpoint = endpoint

    def call(self, request: Any) -> Any:
        if self.endpoint.broker_id in self.recorder.blocked:
            self.recorder.release.wait(30)
            raise ConnectionError(f"broker {self.endpoint.broker_id} does not answer")
        with self.recorder.lock:
            self.recorder.sent.setdefault(self.endpoint.broker_id, []).append(request)
        if isinstance(request, LeaderAndIsrRequest):
            return LeaderAndIsrResponse(0, tuple((p.topic, p.partition, 0) for p in request.partitions))
        return UpdateMetadataResponse(0)

    def close(self) -> None:
        pass
