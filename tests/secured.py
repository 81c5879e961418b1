"""A broker and server of Kafka security settings for the tests, recording who sent each request."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from idemcore.broker import Broker
from idemcore.broker.config import BrokerConfig
from idemcore.broker.security.session import Session
from idemcore.broker.server import Server
from idemcore.net import scram

#: A PLAIN listener's JAAS config with the users the tests log in as.
PLAIN_USERS = ('org.apache.kafka.common.security.plain.PlainLoginModule required user_dave="dave-secret" '
               'user_admin="admin-secret";')


@contextmanager
def serving(tmp_path: Path, scram_users: dict[str, str] | None = None,
            **settings: str) -> Iterator[tuple[Server, list[Session]]]:
    """A broker and server of ``settings`` (Kafka's names) over ``tmp_path``/logs, with ``scram_users`` (user ->
    password) given SCRAM-SHA-256 and -512 credentials; the sessions of the requests it answered."""
    config = BrokerConfig.from_properties({"log.dirs": str(tmp_path / "logs"), **settings})
    broker = Broker({}, fsync=False, settings=config, **config.broker_kwargs())
    for user, password in (scram_users or {}).items():
        refusal = broker.scram_credentials.alter(user, {
            name: scram.make_credential(mechanism, password, 4096) for name, mechanism in scram.MECHANISMS.items()})
        assert refusal is None, refusal
    sessions: list[Session] = []
    answer = broker.handle_from

    def recording(session: Session, request: Any) -> Any:
        sessions.append(session)
        return answer(session, request)
    broker.handle_from = recording  # type: ignore[method-assign]
    try:
        with Server(broker, **config.server_kwargs()) as server:
            yield server, sessions
    finally:
        broker.close()
