"""CreateTopics' refusals before any topic is made (topic_requests.new_topics, shared by the single broker and the
cluster member): a name given twice is created neither time and answered once; an entry that is not a NewTopic
is refused; the others are created, all in the request's order."""

from __future__ import annotations

from idemcore.broker import Broker
from idemcore.broker.topic_requests import new_topics
from idemcore.net.messages import CreatedTopic, CreateTopicsRequest, NewTopic
from idemcore.protocol.codes import ErrorCode

REQUEST = CreateTopicsRequest((NewTopic("twice", 1), NewTopic("once", 2), "junk", NewTopic("twice", 3),  # type: ignore[arg-type]
                               NewTopic("after", 1)))


def test_new_topics_yields_the_refusals_in_order_and_a_repeated_name_once():
    entries = list(new_topics(REQUEST))
    assert [e.name if isinstance(e, NewTopic) else (e.name, e.error_code, e.error_message) for e in entries] == [
        ("twice", ErrorCode.INVALID_REQUEST, "Found multiple entries for this topic."),
        "once",
        ("junk", ErrorCode.INVALID_REQUEST, "not a NewTopic"),
        "after",
    ]
    assert all(isinstance(e, CreatedTopic) for e in (entries[0], entries[2]))


def test_a_broker_creates_only_the_entries_not_refused(tmp_path):
    broker = Broker({}, data_dir=tmp_path, fsync=False)
    try:
        results = broker.handle(REQUEST).results
        assert [(r.name, r.error_code) for r in results] == [
            ("twice", ErrorCode.INVALID_REQUEST), ("once", ErrorCode.NONE), ("junk", ErrorCode.INVALID_REQUEST),
            ("after", ErrorCode.NONE)]
        assert "twice" not in broker.topics and broker.topics.get("once") == 2 and broker.topics.get("after") == 1
    finally:
        broker.close()
