"""KIP-447: a transactional producer's TxnOffsetCommit carries the consumer's group membership (generation,
member id, instance id: ``Consumer.consumer_group_metadata()``), and the group coordinator refuses the offsets of a
consumer that lost its membership to a rebalance (a zombie): the transaction becomes abortable and its offsets
never become visible, while the live member's commit goes through."""

from __future__ import annotations

from typing import Any

import pytest

from idemcore.broker import Broker
from idemcore.client import ConsumerGroupMetadata, Producer, TransactionAbortableError
from idemcore.net.membership import JoinGroupRequest, JoinGroupResponse, SyncGroupRequest
from idemcore.net.messages import OffsetFetchRequest, Pending
from idemcore.protocol.codes import ErrorCode

TOPIC, GROUP = "in", "readers"


def _answer(answer: Any) -> Any:
    """The response, once a parked answer has been given."""
    if isinstance(answer, Pending):
        assert answer.response is not None, "still parked"
        return answer.response
    return answer


def _join(broker: Broker, member_id: str = "") -> JoinGroupResponse | Pending:
    request = JoinGroupRequest(GROUP, 10_000, 10_000, "consumer", (("range", b""),), member_id=member_id,
                               member_id_required=False, client_id="c")
    return broker.handle(request)  # type: ignore[return-value]


def _committed(broker: Broker) -> int:
    response: Any = broker.handle(OffsetFetchRequest(GROUP, ((TOPIC, 0),)))
    return response.offsets[0].offset


def test_a_zombies_transactional_offsets_are_fenced_and_the_live_members_commit() -> None:
    clock = [1_000_000]
    broker = Broker({TOPIC: 1}, offsets_topic_partitions=1, clock=lambda: clock[0])
    first = _join(broker)  # the only member: generation 1 once the initial rebalance delay has passed
    clock[0] += 10_000
    broker.run_housekeeping()
    joined = _answer(first)
    assert joined.error_code == ErrorCode.NONE
    zombie_id = joined.member_id
    sync = broker.handle(SyncGroupRequest(GROUP, joined.generation_id, zombie_id, ((zombie_id, b""),)))
    assert _answer(sync).error_code == ErrorCode.NONE
    zombie = ConsumerGroupMetadata(GROUP, joined.generation_id, zombie_id)
    # A second member joins: the group rebalances; the first never rejoins and is dropped (a zombie).
    pending = _join(broker)
    clock[0] += 20_000
    broker.run_housekeeping()
    live = _answer(pending)
    assert live.error_code == ErrorCode.NONE and live.generation_id > joined.generation_id
    producer = Producer(broker, transactional_id="tx", linger_ms=0, retry_backoff_ms=5)
    producer.init_transactions()
    producer.begin_transaction()
    with pytest.raises(TransactionAbortableError, match=r"ILLEGAL_GENERATION|UNKNOWN_MEMBER_ID"):
        producer.send_offsets_to_transaction({(TOPIC, 0): 7}, zombie)
    producer.abort_transaction()
    assert _committed(broker) == -1
    producer.begin_transaction()
    producer.send_offsets_to_transaction({(TOPIC, 0): 9}, ConsumerGroupMetadata(GROUP, live.generation_id,
                                                                                live.member_id))
    producer.commit_transaction()
    assert _committed(broker) == 9
    producer.close()


@pytest.mark.parametrize(("bad", "error", "match"), [
    (None, ValueError, "None"), ("", ValueError, "''"), (7, TypeError, "7"),
])
def test_group_metadata_must_be_a_group_id_or_consumer_group_metadata(bad: Any, error: type, match: str) -> None:
    producer = Producer(Broker({TOPIC: 1}), transactional_id="tx")
    producer.init_transactions()
    producer.begin_transaction()
    with pytest.raises(error, match=match):
        producer.send_offsets_to_transaction({(TOPIC, 0): 1}, bad)
    producer.abort_transaction()
    with pytest.raises(ValueError, match="non-empty"):
        ConsumerGroupMetadata("")
