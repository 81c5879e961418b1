"""Kafka's ZooKeeper-mode storage (``KafkaZkClient``) over kazoo: broker registrations, topics, partition states,
the controller's election and its fencing.

Every write the controller makes after its election goes in a ZooKeeper transaction that first checks the
version of ``/controller_epoch`` it read when elected: once another controller has been elected (which bumps
that node), the old one's writes fail with :class:`ControllerMovedError` and change nothing. A partition leader
changes its ISR by compare-and-set on the state node's version instead, and leaves a sequential
``/isr_change_notification/isr_change_`` node so the controller tells the other brokers.

Watch callbacks run on kazoo's thread and must not block or call ZooKeeper: callers pass callbacks that only
enqueue (the controller's event queue).
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

from idemcore.broker.controller import zk_data
from idemcore.broker.controller.zk_data import LeaderIsr
from idemcore.errors import IdemcoreError, one_line
from idemcore.net.replication import BrokerEndpoint, ListenerAddress
from idemcore.net.wire.api import topic_id_of

log = logging.getLogger(__name__)
# kazoo logs every dropped connection attempt; without a handler Python would print each on standard error. What
# matters (ZooKeeper unreachable, a session lost) is said once, in idemcore's own words.
logging.getLogger("kazoo").addHandler(logging.NullHandler())

Watch = Callable[[Any], None]
TopicPartition = tuple[str, int]


class ZkError(IdemcoreError):
    """ZooKeeper cannot be reached or refused an operation."""


class ControllerMovedError(ZkError):
    """A controller write failed its ``/controller_epoch`` check: another controller has been elected since."""


class BrokerIdInUseError(ZkError):
    """``/brokers/ids/N`` is held by another live session past the session timeout."""


class TopicExistsError(ZkError):
    """``/brokers/topics/T`` exists already (Kafka's TOPIC_ALREADY_EXISTS)."""


def ensure_chroot(hosts: str, connection_timeout_ms: int) -> None:
    """Create the chroot of ``hosts`` (``"h:2181/kafka"``) when missing, as Kafka's broker does at start."""
    from kazoo.client import KazooClient
    from kazoo.handlers.threading import KazooTimeoutError

    servers, slash, chroot = hosts.partition("/")
    if not slash or not chroot.strip("/"):
        return
    client = KazooClient(hosts=servers)
    try:
        client.start(timeout=connection_timeout_ms / 1000)
        client.ensure_path("/" + chroot.strip("/"))
    except KazooTimeoutError:
        raise ZkError(f"ZooKeeper {servers} did not answer within {connection_timeout_ms} ms") from None
    finally:
        client.stop()
        client.close()


class ZkClient:
    """One ZooKeeper session (``hosts`` may end in a chroot, ``"h:2181/kafka"``)."""

    def __init__(self, hosts: str, *, session_timeout_ms: int = 18_000, connection_timeout_ms: int = 18_000,
                 listener: str | None = None) -> None:
        from kazoo.client import KazooClient  # optional dependency, imported when used
        from kazoo.handlers.threading import KazooTimeoutError

        self.hosts = hosts
        self.session_timeout_ms = session_timeout_ms
        #: The inter-broker listener: the address of each registered broker read (host, port) is its.
        self.listener = listener
        ensure_chroot(hosts, connection_timeout_ms)
        # Reads and checked writes retry through a connection loss, for as long as the session may still live.
        retry = {"max_tries": -1, "deadline": session_timeout_ms / 1000, "max_delay": 1.0}
        self._kazoo = KazooClient(hosts=hosts, timeout=session_timeout_ms / 1000, command_retry=retry,
                                  connection_retry={"max_tries": -1, "max_delay": 1.0})
        self._lost: list[Callable[[], None]] = []
        self._new_session: list[Callable[[], None]] = []
        self._expired = False
        self._kazoo.add_listener(self._on_state)
        try:
            self._kazoo.start(timeout=connection_timeout_ms / 1000)
        except KazooTimeoutError:
            self._kazoo.close()
            raise ZkError(f"ZooKeeper {hosts} did not answer within {connection_timeout_ms} ms") from None
        for path in zk_data.TOP_LEVEL_PATHS:
            self._call(self._kazoo.ensure_path, path)

    # -- session ---------------------------------------------------------------------------------------------

    def _on_state(self, state: str) -> None:
        from kazoo.protocol.states import KazooState

        if state == KazooState.LOST:
            self._expired = True
            for callback in list(self._lost):
                callback()
        elif state == KazooState.CONNECTED and self._expired:
            self._expired = False
            for callback in list(self._new_session):
                callback()

    def on_session_lost(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` (on kazoo's thread: it must only enqueue) when the session expires or closes: every
        ephemeral node of this client is gone."""
        self._lost.append(callback)

    def on_new_session(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` (it must only enqueue) when a new session replaces an expired one."""
        self._new_session.append(callback)

    @property
    def session_id(self) -> int:
        return int(self._kazoo.client_id[0]) if self._kazoo.client_id else 0

    def close(self) -> None:
        """End the session (its ephemeral nodes go at once) and the client."""
        self._kazoo.stop()
        self._kazoo.close()

    def _call(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """``fn`` retried through connection losses; kazoo's errors become one-line :class:`ZkError`."""
        from kazoo.exceptions import BadVersionError, KazooException, NodeExistsError, NoNodeError
        from kazoo.retry import RetryFailedError

        try:
            return self._kazoo.retry(fn, *args, **kwargs)
        except (NoNodeError, NodeExistsError, BadVersionError):  # answers, for the caller to act on
            raise
        except (KazooException, RetryFailedError) as exc:
            raise ZkError(f"ZooKeeper {self.hosts}: {type(exc).__name__} {one_line(exc)}".rstrip()) from None

    def _commit(self, transaction: Any) -> list[Any]:
        """Commit once (a transaction is never retried: after a connection loss its outcome is unknown, and the
        caller reads what happened)."""
        from kazoo.exceptions import KazooException

        try:
            return list(transaction.commit())
        except KazooException as exc:
            raise ZkError(f"ZooKeeper {self.hosts}: transaction failed: {type(exc).__name__} {one_line(exc)}") from None

    # -- brokers ---------------------------------------------------------------------------------------------

    def register_broker(self, broker_id: int, host: str, port: int, rack: str | None = None,
                        listeners: tuple[ListenerAddress, ...] = ()) -> int:
        """Create the ephemeral ``/brokers/ids/N`` and return the broker epoch (its czxid). A node left by an
        earlier session of the same broker (a crash) vanishes within the session timeout: wait for that, no
        longer (then :class:`BrokerIdInUseError`)."""
        from kazoo.exceptions import NodeExistsError

        path = zk_data.broker_path(broker_id)
        data = zk_data.encode_broker(host, port, rack, listeners)
        deadline = time.monotonic() + self.session_timeout_ms * 1.5 / 1000 + 1
        while True:
            try:
                _, stat = self._call(self._kazoo.create, path, data, ephemeral=True, include_data=True)
                return int(stat.czxid)
            except NodeExistsError:
                pass
            gone = threading.Event()
            stat = self._call(self._kazoo.exists, path, watch=lambda _event, done=gone: done.set())
            if stat is None:
                continue
            if stat.ephemeralOwner == self.session_id:  # ours: a retried create that had succeeded
                return int(stat.czxid)
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise BrokerIdInUseError(
                    f"broker id {broker_id} is registered at {path} by session 0x{stat.ephemeralOwner:x}, still "
                    f"alive after the session timeout of {self.session_timeout_ms} ms: another broker uses this id")
            log.info("broker %d: waiting up to %.1f s for the registration of an earlier session to expire",
                     broker_id, remaining)
            gone.wait(remaining)

    def broker_registrations(self, watch: Watch | None = None) -> dict[int, tuple[BrokerEndpoint, int]]:
        """Live brokers: id -> (endpoint, broker epoch). ``watch`` fires once when the set of brokers changes."""
        from kazoo.exceptions import NoNodeError

        registrations = {}
        for child in self._call(self._kazoo.get_children, zk_data.BROKER_IDS, watch=watch):
            try:
                data, stat = self._call(self._kazoo.get, f"{zk_data.BROKER_IDS}/{child}")
            except NoNodeError:  # gone between the listing and the read
                continue
            broker_id = int(child)
            registrations[broker_id] = (zk_data.decode_broker(broker_id, data, self.listener), int(stat.czxid))
        return registrations

    def live_brokers(self) -> dict[int, BrokerEndpoint]:
        return {broker_id: endpoint for broker_id, (endpoint, _) in self.broker_registrations().items()}

    # -- topics ----------------------------------------------------------------------------------------------

    def create_topic(self, name: str, assignment: dict[int, list[int]], configs: dict[str, str]) -> uuid.UUID:
        """Write the topic's configs, then its assignment (Kafka's ``AdminZkClient.createTopicWithAssignment``);
        the controller, watching ``/brokers/topics``, does the rest. The topic id is derived from the name, as the
        wire layer derives it."""
        from kazoo.exceptions import NodeExistsError

        if not name or "/" in name or name in (".", ".."):
            raise ZkError(f"topic name {name!r} cannot be a ZooKeeper node")
        if self._call(self._kazoo.exists, zk_data.topic_path(name)) is not None:
            raise TopicExistsError(f"topic {name!r} already exists")
        topic_id = topic_id_of(name)
        config_data = zk_data.encode_config(configs)
        try:
            self._call(self._kazoo.create, zk_data.topic_config_path(name), config_data)
        except NodeExistsError:  # left by an earlier attempt or a deleted topic: replaced
            self._call(self._kazoo.set, zk_data.topic_config_path(name), config_data)
        try:
            self._call(self._kazoo.create, zk_data.topic_path(name), zk_data.encode_topic(assignment, topic_id))
        except NodeExistsError:
            raise TopicExistsError(f"topic {name!r} already exists") from None
        return topic_id

    def topic_names(self, watch: Watch | None = None) -> list[str]:
        """Topic names; ``watch`` fires once when a topic is created or deleted."""
        return sorted(self._call(self._kazoo.get_children, zk_data.TOPICS, watch=watch))

    def topic_assignment(self, topic: str, watch: Watch | None = None) -> dict[int, list[int]] | None:
        """Partition -> replicas, None when the topic is gone; ``watch`` fires when the assignment changes."""
        from kazoo.exceptions import NoNodeError

        try:
            data, _ = self._call(self._kazoo.get, zk_data.topic_path(topic), watch=watch)
        except NoNodeError:
            return None
        return zk_data.decode_topic(topic, data)[0]

    def topics(self) -> dict[str, dict[int, list[int]]]:
        """Every topic's assignment: topic -> partition -> replicas."""
        result = {}
        for topic in self.topic_names():
            assignment = self.topic_assignment(topic)
            if assignment is not None:
                result[topic] = assignment
        return result

    def topic_config(self, topic: str) -> dict[str, str]:
        """The topic's overrides in ``/config/topics/T`` (empty when none)."""
        from kazoo.exceptions import NoNodeError

        try:
            data, _ = self._call(self._kazoo.get, zk_data.topic_config_path(topic))
        except NoNodeError:
            return {}
        return zk_data.decode_config(data)

    # -- partition state -------------------------------------------------------------------------------------

    def partition_state(self, topic: str, partition: int) -> tuple[LeaderIsr, int] | None:
        """The state node and its version, None when the partition has none yet."""
        from kazoo.exceptions import NoNodeError

        try:
            data, stat = self._call(self._kazoo.get, zk_data.state_path(topic, partition))
        except NoNodeError:
            return None
        return zk_data.decode_state(topic, partition, data), int(stat.version)

    def update_leader_isr(self, topic: str, partition: int, state: LeaderIsr, expected_version: int) -> int | None:
        """A leader's ISR change (Kafka's ``ReplicationUtils.updateLeaderAndIsr``): written only if the node's
        version is still ``expected_version``; the new version, or None when someone (the controller, after an
        election) wrote in between. A success leaves an ISR change notification for the controller."""
        from kazoo.exceptions import BadVersionError, NoNodeError

        try:
            stat = self._call(self._kazoo.set, zk_data.state_path(topic, partition), zk_data.encode_state(state),
                              version=expected_version)
        except (BadVersionError, NoNodeError):
            return None
        self._call(self._kazoo.create, f"{zk_data.ISR_CHANGES}/{zk_data.ISR_CHANGE_PREFIX}",
                   zk_data.encode_isr_change([(topic, partition)]), sequence=True)
        return int(stat.version)

    def isr_change_notifications(self, watch: Watch | None = None) -> list[str]:
        return sorted(self._call(self._kazoo.get_children, zk_data.ISR_CHANGES, watch=watch))

    def read_isr_changes(self, names: list[str]) -> set[TopicPartition]:
        """The partitions named by these notifications, which are then deleted (Kafka's controller does both)."""
        from kazoo.exceptions import NoNodeError

        partitions: set[TopicPartition] = set()
        for name in names:
            path = f"{zk_data.ISR_CHANGES}/{name}"
            try:
                data, _ = self._call(self._kazoo.get, path)
                partitions |= zk_data.decode_isr_change(data)
                self._call(self._kazoo.delete, path)
            except NoNodeError:
                continue
            except zk_data.ZkDataError as exc:
                log.warning("ignoring %s: %s", path, exc)
                self._call(self._kazoo.delete, path)
        return partitions

    # -- controller ------------------------------------------------------------------------------------------

    def controller_id(self, watch: Watch | None = None) -> int | None:
        """The active controller's broker id, None when there is none; ``watch`` fires when ``/controller`` is
        created, changed or deleted."""
        from kazoo.exceptions import NoNodeError

        stat = self._call(self._kazoo.exists, zk_data.CONTROLLER, watch=watch)
        if stat is None:
            return None
        try:
            data, _ = self._call(self._kazoo.get, zk_data.CONTROLLER)
        except NoNodeError:
            return None
        return zk_data.decode_controller(data)

    def controller_epoch(self) -> tuple[int, int] | None:
        """``/controller_epoch``'s value and version, None before the first election."""
        from kazoo.exceptions import NoNodeError

        try:
            data, stat = self._call(self._kazoo.get, zk_data.CONTROLLER_EPOCH)
        except NoNodeError:
            return None
        return zk_data.decode_controller_epoch(data), int(stat.version)

    def register_controller(self, broker_id: int) -> tuple[int, int] | None:
        """Try to become the controller (Kafka's ``registerControllerAndIncrementControllerEpoch``): create the
        ephemeral ``/controller`` and bump ``/controller_epoch`` at the version read, in one transaction.
        Returns (new epoch, its znode version), or None when another broker won."""
        from kazoo.exceptions import NodeExistsError

        current = self.controller_epoch()
        if current is None:
            try:
                self._call(self._kazoo.create, zk_data.CONTROLLER_EPOCH,
                           zk_data.encode_controller_epoch(zk_data.INITIAL_CONTROLLER_EPOCH))
            except NodeExistsError:
                pass
            current = self.controller_epoch()
            assert current is not None
        epoch, version = current
        transaction = self._kazoo.transaction()
        transaction.create(zk_data.CONTROLLER, zk_data.encode_controller(broker_id), ephemeral=True)
        transaction.set_data(zk_data.CONTROLLER_EPOCH, zk_data.encode_controller_epoch(epoch + 1), version=version)
        try:
            results = self._commit(transaction)
        except ZkError:
            results = [ZkError()]
        if not any(isinstance(r, Exception) for r in results):
            return epoch + 1, int(results[1].version)
        # Lost the race, or the commit's answer was lost in a reconnection: ours if /controller is ours.
        stat = self._call(self._kazoo.exists, zk_data.CONTROLLER)
        if stat is not None and stat.ephemeralOwner == self.session_id:
            after = self.controller_epoch()
            assert after is not None
            return after
        return None

    def _checked(self, epoch_zk_version: int, build: Callable[[Any], None]) -> list[Any]:
        """Commit the operations ``build`` adds after a check of ``/controller_epoch``'s version; the results of
        those operations (exceptions for failed ones). :class:`ControllerMovedError` when the check fails."""
        from kazoo.exceptions import BadVersionError, NoNodeError

        transaction = self._kazoo.transaction()
        transaction.check(zk_data.CONTROLLER_EPOCH, epoch_zk_version)
        build(transaction)
        results = self._commit(transaction)
        if isinstance(results[0], BadVersionError | NoNodeError):
            raise ControllerMovedError(f"{zk_data.CONTROLLER_EPOCH} is past version {epoch_zk_version}: another "
                                       "controller has been elected; the write was refused")
        return list(results[1:])

    def create_partition_state(self, topic: str, partition: int, state: LeaderIsr, epoch_zk_version: int) -> int | None:
        """A new partition's first state node (and its parents), fenced by the controller epoch; its version (0),
        or None when the node exists already."""
        from kazoo.exceptions import NodeExistsError

        parents = [zk_data.partitions_path(topic), zk_data.partition_path(topic, partition)]
        missing = [p for p in parents if self._call(self._kazoo.exists, p) is None]

        def build(transaction: Any) -> None:
            for path in missing:
                transaction.create(path, b"")
            transaction.create(zk_data.state_path(topic, partition), zk_data.encode_state(state))

        results = self._checked(epoch_zk_version, build)
        if isinstance(results[-1], Exception) or any(isinstance(r, Exception) for r in results):
            if any(isinstance(r, NodeExistsError) for r in results):
                return None
            raise ZkError(f"creating {zk_data.state_path(topic, partition)} failed: {results!r}")
        return 0

    def set_partition_state(self, topic: str, partition: int, state: LeaderIsr, expected_version: int,
                            epoch_zk_version: int) -> int | None:
        """The controller's change of a partition's state, at ``expected_version`` and fenced by the controller
        epoch; the new version, or None when the node moved (a leader changed the ISR meanwhile)."""
        from kazoo.exceptions import BadVersionError, NoNodeError

        results = self._checked(epoch_zk_version, lambda t: t.set_data(
            zk_data.state_path(topic, partition), zk_data.encode_state(state), version=expected_version))
        if isinstance(results[0], BadVersionError | NoNodeError):
            return None
        if isinstance(results[0], Exception):
            raise ZkError(f"writing {zk_data.state_path(topic, partition)} failed: {results[0]!r}")
        return int(results[0].version)

    def resign_controller(self, broker_id: int) -> bool:
        """Delete ``/controller`` if this session holds it for ``broker_id`` (a clean stop: the others elect at
        once instead of after the session ends)."""
        from kazoo.exceptions import BadVersionError, NoNodeError

        try:
            data, stat = self._call(self._kazoo.get, zk_data.CONTROLLER)
        except NoNodeError:
            return False
        if stat.ephemeralOwner != self.session_id or zk_data.decode_controller(data) != broker_id:
            return False
        try:
            self._call(self._kazoo.delete, zk_data.CONTROLLER, version=stat.version)
        except (NoNodeError, BadVersionError):
            return False
        return True

    # -- entity configs (/config/<type>/<name>) and their change notifications -----------------------------------

    def entity_config_node(self, entity_type: str, name: str) -> tuple[bytes, int] | None:
        """``/config/<entity_type>/<name>``'s bytes and version (``name`` as Kafka's Sanitizer writes it), None
        when there is none."""
        from kazoo.exceptions import NoNodeError

        try:
            data, stat = self._call(self._kazoo.get, f"/config/{entity_type}/{name}")
        except NoNodeError:
            return None
        return data or b"", int(stat.version)

    def entity_names(self, entity_type: str) -> list[str]:
        return sorted(self._call(self._kazoo.get_children, f"/config/{entity_type}"))

    def set_entity_config_node(self, entity_type: str, name: str, data: bytes, expected_version: int | None) -> bool:
        """Write the node if it is still at ``expected_version`` (None: only if absent) and leave a
        ``/config/changes/config_change_`` notification (``{"version":2,"entity_path":"<type>/<name>"}``) so every
        broker reloads it, as Kafka's ``AdminZkClient.changeEntityConfig``. False when another writer came first."""
        from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

        path = f"/config/{entity_type}/{name}"
        try:
            if expected_version is None:
                self._call(self._kazoo.create, path, data, makepath=True)
            else:
                self._call(self._kazoo.set, path, data, version=expected_version)
        except (BadVersionError, NodeExistsError, NoNodeError):
            return False
        self._call(self._kazoo.create, f"{zk_data.CONFIG_CHANGES}/config_change_",
                   zk_data.encode_config_change(f"{entity_type}/{name}"), sequence=True)
        return True

    def config_changes(self, watch: Watch | None = None) -> list[str]:
        """The names under ``/config/changes`` in order; ``watch`` fires when one is added."""
        return sorted(self._call(self._kazoo.get_children, zk_data.CONFIG_CHANGES, watch=watch))

    def config_change_entity(self, change: str) -> tuple[str | None, int]:
        """The ``entity_path`` a notification names (None when gone or unreadable) and when it was made (ms)."""
        from kazoo.exceptions import NoNodeError

        try:
            data, stat = self._call(self._kazoo.get, f"{zk_data.CONFIG_CHANGES}/{change}")
        except NoNodeError:
            return None, 0
        return zk_data.decode_config_change(data), int(stat.ctime)

    def delete_config_change(self, change: str) -> None:
        """Remove a notification every broker has had time to see (Kafka purges them after 15 minutes)."""
        from kazoo.exceptions import NoNodeError

        try:
            self._call(self._kazoo.delete, f"{zk_data.CONFIG_CHANGES}/{change}")
        except NoNodeError:
            pass
