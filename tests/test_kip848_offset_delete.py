"""OffsetDelete (Kafka's ``OffsetMetadataManager.deleteOffsets``) of a KIP-848 group: a topic a member subscribes
to is GROUP_SUBSCRIBED_TO_TOPIC and keeps its offsets (``ConsumerGroup.isSubscribedToTopic``), the others are
deleted, and a consumer group that has no offsets is still a group (NONE per partition, not GROUP_ID_NOT_FOUND)."""

from __future__ import annotations

from idemcore.net.group_admin import OffsetDeleteRequest
from idemcore.net.messages import OffsetEntry
from idemcore.protocol.codes import ErrorCode as E
from tests.test_kip848_settings_and_expiry import Clock, G, broker, commit, join, leave


def test_offsets_of_a_topic_a_member_subscribes_to_are_kept():
    target = broker(Clock())
    epoch = join(target, "m", topics=("t",)).member_epoch
    commit(target, "m", epoch, OffsetEntry("t", 0, 5), OffsetEntry("u", 0, 7))
    answer = target.handle(OffsetDeleteRequest(G, (("t", 0), ("u", 0))))
    assert answer.error_code == E.NONE
    assert {(t, p): code for t, p, code in answer.results} == {("t", 0): E.GROUP_SUBSCRIBED_TO_TOPIC,
                                                              ("u", 0): E.NONE}
    assert set(target.group_coordinator.offset_fetch(G)[1]) == {("t", 0)}
    # Once no member subscribes to it, its offsets may go too.
    leave(target, "m")
    answer = target.handle(OffsetDeleteRequest(G, (("t", 0),)))
    assert answer.error_code == E.NONE and answer.results == (("t", 0, E.NONE),)
    assert target.group_coordinator.offset_fetch(G)[1] == {}


def test_a_consumer_group_without_offsets_is_found():
    target = broker(Clock())
    join(target, "m", topics=("t",))
    answer = target.handle(OffsetDeleteRequest(G, (("u", 0),)))
    assert answer.error_code == E.NONE and answer.results == (("u", 0, E.NONE),)
