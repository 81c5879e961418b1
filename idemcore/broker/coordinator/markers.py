"""Writing a finished transaction's markers (Kafka's ``TransactionMarkerChannelManager`` and
``TransactionMarkerRequestCompletionHandler``, made synchronous).

Once a Prepare* record is durable the coordinator holds a :class:`PendingCompletion`: the Complete* record to
write once every partition of the transaction has its marker. Each answer per partition is sorted as Kafka sorts
it: written (or the partition cannot hold markers, or no longer exists) -> done; a leader, replica or storage
problem -> try again; a newer producer epoch or coordinator epoch on the partition -> give up, this coordinator
has been superseded and the one that loads the log finishes the transaction.
"""

from __future__ import annotations

import enum
import logging
from dataclasses import dataclass

from idemcore.broker.coordinator.collaborators import MarkerWriter
from idemcore.broker.coordinator.metadata import TransactionMetadata, TxnTransitMetadata
from idemcore.errors import IdemcoreError
from idemcore.protocol.codes import ErrorCode, error_name
from idemcore.record.kafka_files.transaction_log import TransactionState

log = logging.getLogger(__name__)


class MarkerOutcome(enum.Enum):
    DONE = "done"
    RETRY = "retry"
    GIVE_UP = "give up"


# UNKNOWN_TOPIC_OR_PARTITION is retried, as Kafka retries it: a broker started without a topic still has its
# partitions on disk, and counting the marker done would leave their transaction open for ever.
_DONE = frozenset({ErrorCode.NONE, ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT, ErrorCode.UNSUPPORTED_VERSION})
_GIVE_UP = frozenset({ErrorCode.INVALID_PRODUCER_EPOCH, ErrorCode.TRANSACTION_COORDINATOR_FENCED})
_EXPECTED_RETRY = frozenset({ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.NOT_LEADER_OR_FOLLOWER,
                             ErrorCode.NOT_ENOUGH_REPLICAS,
                             ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND, ErrorCode.REQUEST_TIMED_OUT,
                             ErrorCode.KAFKA_STORAGE_ERROR})


def marker_outcome(error: int) -> MarkerOutcome:
    """What one partition's answer to a marker means for the transaction."""
    if error in _DONE:
        return MarkerOutcome.DONE
    if error in _GIVE_UP:
        return MarkerOutcome.GIVE_UP
    if error not in _EXPECTED_RETRY:
        # Kafka throws on these (CORRUPT_MESSAGE, MESSAGE_TOO_LARGE, ...); retrying keeps the transaction pending
        # and visible instead of losing it.
        log.error("unexpected marker answer %s; will retry", error_name(error))
    return MarkerOutcome.RETRY


@dataclass(slots=True)
class PendingCompletion:
    """A transaction whose Prepare* record is durable and whose Complete* record waits for the markers."""

    metadata: TransactionMetadata
    #: The Complete* record, prepared when the Prepare* record became durable (pending state Complete*).
    transit: TxnTransitMetadata
    producer_id: int
    producer_epoch: int
    coordinator_epoch: int
    #: The ``__transaction_state`` partition of the transactional id.
    log_partition: int = -1
    #: That partition's log end just after the Prepare* record: in a cluster no marker goes out before its high
    #: watermark reaches it.
    replicated_at: int = 0
    #: A partition answered with a newer producer or coordinator epoch (or the coordinator's partition was
    #: unloaded): no marker is sent again.
    abandoned: bool = False

    @property
    def committed(self) -> bool:
        return self.transit.txn_state is TransactionState.COMPLETE_COMMIT

    @property
    def markers_done(self) -> bool:
        return not self.metadata.topic_partitions


def send_markers(writer: MarkerWriter, pending: PendingCompletion, attempts: int) -> bool:
    """Write the markers still missing, in at most ``attempts`` rounds; True once no partition is left."""
    for _ in range(attempts):
        if pending.abandoned or pending.markers_done:
            break
        partitions = sorted(pending.metadata.topic_partitions)
        try:
            answers = writer.write_markers(pending.producer_id, pending.producer_epoch, pending.coordinator_epoch,
                                           pending.committed, partitions)
        except (IdemcoreError, OSError) as exc:  # the request did not get through: Kafka re-enqueues all of it
            log.warning("markers for %s (producer %d epoch %d) not written: %s", pending.metadata.transactional_id,
                        pending.producer_id, pending.producer_epoch, exc)
            continue
        for tp in partitions:
            error = answers.get(tp)
            outcome = MarkerOutcome.RETRY if error is None else marker_outcome(error)
            if outcome is MarkerOutcome.DONE:
                pending.metadata.remove_partition(tp)
            elif outcome is MarkerOutcome.GIVE_UP:
                log.warning("marker for %s on %s answered %s: giving up (producer %d epoch %d, coordinator epoch %d)",
                            pending.metadata.transactional_id, tp, error_name(error), pending.producer_id,
                            pending.producer_epoch, pending.coordinator_epoch)
                pending.abandoned = True
    return pending.markers_done
