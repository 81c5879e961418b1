"""Making a topic's partitions off the event loop: creating a partition's directory and files costs a few
milliseconds of file-system calls each, so the 50 partitions of ``__transaction_state`` or ``__consumer_offsets``
stalled every connection for about 200 ms. While the broker runs on a loop, the first FindCoordinator for one of
them starts its creation on the flusher thread and is answered once the topic is served (a
:class:`~idemcore.net.messages.Pending`); only the bookkeeping (the topic's entry in ``topics.json``, its partition
numbers) runs on the loop. A caller that needs the topic at once (a coordinator request that came without a
FindCoordinator) waits for the creation under way instead of starting a second one.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from idemcore.broker.log import PartitionLog
from idemcore.broker.topic_config import TopicConfig

#: Called once the topic is served (None) or its creation failed (the error), on the loop.
Ready = Callable[[BaseException | None], None]
#: Runs ``work`` on another thread, then ``done(result, error)`` on the loop.
InBackground = Callable[[Callable[[], Any], Callable[[Any, BaseException | None], None]], None]


@dataclass(eq=False)
class _Making:
    name: str
    partitions: int
    configs: Mapping[str, Any]
    config: TopicConfig
    built: threading.Event = field(default_factory=threading.Event)
    logs: list[PartitionLog] | None = None
    error: BaseException | None = None
    finished: bool = False
    waiters: list[Ready] = field(default_factory=list)


class BackgroundTopics:
    """Topics made on another thread. ``check(name, partitions, configs)``: the topic's settings, or the error
    creating it would raise (nothing made); ``new_log(name, partition, config)``: one new partition's log (run on
    the other thread); ``register(name, partitions, configs, logs)``: serve the topic over those logs (on the loop);
    ``in_background(work, done)``: run ``work`` on the other thread, then ``done(result, error)`` on the loop."""

    def __init__(self, check: Callable[[str, int, Mapping[str, Any]], TopicConfig],
                 new_log: Callable[[str, int, TopicConfig], PartitionLog],
                 register: Callable[[str, int, Mapping[str, Any], list[PartitionLog]], None],
                 in_background: InBackground) -> None:
        self._check = check
        self._new_log = new_log
        self._register = register
        self._in_background = in_background
        self._making: dict[str, _Making] = {}

    def make(self, name: str, partitions: int, configs: Mapping[str, Any], ready: Ready) -> None:
        """Start making ``name`` (or join the creation under way); ``ready`` is called on the loop when done. What
        ``check`` raises is raised here."""
        making = self._making.get(name)
        if making is None:
            making = _Making(name, partitions, dict(configs), self._check(name, partitions, configs))
            self._making[name] = making
            self._in_background(lambda: self._build(making), lambda _result, _error: self._finish(making))
        making.waiters.append(ready)

    def wait(self, name: str) -> None:
        """Block until the creation of ``name`` under way (if any) is done and served."""
        making = self._making.get(name)
        if making is not None:
            making.built.wait()
            self._finish(making)

    def _build(self, making: _Making) -> None:
        """On the other thread: every partition's log, or none (those made are closed again)."""
        logs: list[PartitionLog] = []
        try:
            for partition in range(making.partitions):
                logs.append(self._new_log(making.name, partition, making.config))
            making.logs = logs
        except BaseException as exc:
            for partition_log in logs:
                partition_log.discard()
            making.error = exc
        finally:
            making.built.set()

    def _finish(self, making: _Making) -> None:
        if making.finished:
            return
        making.finished = True
        del self._making[making.name]
        if making.error is None:
            assert making.logs is not None
            try:
                self._register(making.name, making.partitions, making.configs, making.logs)
            except BaseException as exc:  # the register step closes the logs it could not serve
                making.error = exc
        for ready in making.waiters:
            ready(making.error)
