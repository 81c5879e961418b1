"""KIP-320 in idemcore's client: Metadata from a broker that has not heard of a leader change yet must not send the
client back to the deposed leader (the cluster simulation found a producer's retry rewritten through one)."""

from idemcore.net.wire.client import TopicLeaders


def test_a_partition_answered_with_an_older_leader_epoch_keeps_the_newer_leader() -> None:
    known = TopicLeaders("t", 0, (1, 2, 3), leader_epochs=(4, 7, 2))
    stale = TopicLeaders("t", 0, (9, 8, 3), leader_epochs=(5, 6, 2))  # partition 1: epoch 6 < 7 known
    merged = stale.newer_of(known)
    assert merged.leaders == (9, 2, 3) and merged.leader_epochs == (5, 7, 2)


def test_answers_without_epochs_or_of_another_shape_replace_what_is_known() -> None:
    known = TopicLeaders("t", 0, (1, 2), leader_epochs=(4, 7))
    assert TopicLeaders("t", 0, (3, 3), leader_epochs=(-1, -1)).newer_of(known).leaders == (3, 3)
    assert TopicLeaders("t", 0, (3, 3, 3)).newer_of(known).leaders == (3, 3, 3)  # partitions were added
    assert TopicLeaders("t", 0, (5,), leader_epochs=(1,)).newer_of(None).leaders == (5,)
