"""The controller's connections to brokers (Kafka's ``ControllerChannelManager``): one sender thread and queue per
broker (``RequestSendThread``), so a slow or dead broker never holds up the controller's event thread. A request
is retried until it is answered or the broker is removed (it died, or the controller resigned)."""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from typing import Any, Protocol

from idemcore.errors import one_line
from idemcore.net.replication import BrokerEndpoint

log = logging.getLogger(__name__)


class BrokerChannel(Protocol):
    """What the controller needs of a connection (``BlockingBrokerChannel`` has this shape)."""

    def call(self, request: Any) -> Any: ...

    def close(self) -> None: ...


ChannelFactory = Callable[[BrokerEndpoint], BrokerChannel]
ResponseCallback = Callable[[int, Any, Any], None]  # (broker id, request, response)


class RequestSendThread(threading.Thread):
    """Sends queued requests to one broker in order, each until answered."""

    def __init__(self, endpoint: BrokerEndpoint, factory: ChannelFactory, controller_id: int,
                 retry_backoff_s: float) -> None:
        super().__init__(name=f"controller-{controller_id}-to-broker-{endpoint.broker_id}-send-thread", daemon=True)
        self.endpoint = endpoint
        self._factory = factory
        self._backoff_s = retry_backoff_s
        self._queue: queue.Queue[tuple[Any, ResponseCallback | None] | None] = queue.Queue()
        self._stopped = threading.Event()
        self._channel: BrokerChannel | None = None

    def enqueue(self, request: Any, callback: ResponseCallback | None) -> None:
        self._queue.put((request, callback))

    def run(self) -> None:
        while not self._stopped.is_set():
            item = self._queue.get()
            if item is None:
                break
            request, callback = item
            response = self._send(request)
            if response is not None and callback is not None:
                try:
                    callback(self.endpoint.broker_id, request, response)
                except Exception:  # a callback's bug must not kill the sender
                    log.exception("controller: handling %s's answer from broker %d failed",
                                  type(request).__name__, self.endpoint.broker_id)
        self._close_channel()

    def _send(self, request: Any) -> Any:
        attempts = 0
        while not self._stopped.is_set():
            try:
                if self._channel is None:
                    self._channel = self._factory(self.endpoint)
                return self._channel.call(request)
            except Exception as exc:  # ConnectionError, TimeoutError, OSError from any channel: retry
                attempts += 1
                if attempts == 1 or attempts % 50 == 0:
                    log.warning("controller: %s to broker %d at %s:%d failed (attempt %d): %s; retrying",
                                type(request).__name__, self.endpoint.broker_id, self.endpoint.host,
                                self.endpoint.port, attempts, one_line(exc))
                self._close_channel()
                self._stopped.wait(self._backoff_s)
        return None

    def _close_channel(self) -> None:
        channel, self._channel = self._channel, None
        if channel is not None:
            try:
                channel.close()
            except Exception as exc:
                log.debug("controller: closing the channel to broker %d: %s", self.endpoint.broker_id, exc)

    def shutdown(self, timeout_s: float) -> None:
        """Stop sending (what is queued is dropped) and wait up to ``timeout_s`` for a call in flight."""
        self._stopped.set()
        self._queue.put(None)
        if self.is_alive() and threading.current_thread() is not self:
            self.join(timeout_s)


class ControllerChannelManager:
    """Sender threads by broker id."""

    def __init__(self, factory: ChannelFactory, controller_id: int, retry_backoff_s: float = 0.1,
                 shutdown_timeout_s: float = 5.0) -> None:
        self._factory = factory
        self._controller_id = controller_id
        self._backoff_s = retry_backoff_s
        self._shutdown_timeout_s = shutdown_timeout_s
        self._senders: dict[int, RequestSendThread] = {}

    def add_broker(self, endpoint: BrokerEndpoint) -> None:
        """Start sending to ``endpoint`` (a broker registered again elsewhere gets a fresh sender)."""
        current = self._senders.get(endpoint.broker_id)
        if current is not None:
            if current.endpoint == endpoint:
                return
            self.remove_broker(endpoint.broker_id)
        sender = RequestSendThread(endpoint, self._factory, self._controller_id, self._backoff_s)
        self._senders[endpoint.broker_id] = sender
        sender.start()

    def remove_broker(self, broker_id: int, wait_s: float = 0.0) -> None:
        """Stop sending to the broker; a call in flight ends on its own (the event thread does not wait for a
        dead broker's timeout unless ``wait_s`` says so)."""
        sender = self._senders.pop(broker_id, None)
        if sender is not None:
            sender.shutdown(wait_s)

    def send(self, broker_id: int, request: Any, callback: ResponseCallback | None = None) -> None:
        sender = self._senders.get(broker_id)
        if sender is None:
            log.debug("controller: no channel to broker %d; %s dropped", broker_id, type(request).__name__)
            return
        sender.enqueue(request, callback)

    @property
    def brokers(self) -> set[int]:
        return set(self._senders)

    def shutdown(self) -> None:
        for broker_id in list(self._senders):
            self.remove_broker(broker_id, self._shutdown_timeout_s)
