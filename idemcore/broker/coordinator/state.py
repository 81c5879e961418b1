"""The states of a transactional id (Kafka's ``TransactionState``): ids as stored in ``__transaction_state``, the
names DescribeTransactions and ListTransactions use, and which state may follow which."""

from __future__ import annotations

import enum


class TransactionState(enum.IntEnum):
    """A transactional id's state; the value is the status byte of its ``__transaction_state`` record."""

    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    #: Only ever pending: the id's tombstone is being written (it is then removed, never stored as Dead).
    DEAD = 6
    #: Only ever pending: an ongoing transaction is about to be aborted with a bumped epoch.
    PREPARE_EPOCH_FENCE = 7

    @property
    def kafka_name(self) -> str:
        """Kafka's name: ``"Empty"``, ``"Ongoing"``, ``"PrepareCommit"``, ..."""
        return _NAMES[self]

    @classmethod
    def from_name(cls, name: str) -> TransactionState | None:
        """The state Kafka calls ``name`` (as in ListTransactions' state filters), or None."""
        return _BY_NAME.get(name)

    @property
    def valid_previous_states(self) -> frozenset[TransactionState]:
        """The states a transition to this one may start from."""
        return _VALID_PREVIOUS[self]

    @property
    def expiration_allowed(self) -> bool:
        """True if an id idle in this state may expire (no transaction is open or half-finished)."""
        return self in _EXPIRABLE


S = TransactionState
_NAMES = {S.EMPTY: "Empty", S.ONGOING: "Ongoing", S.PREPARE_COMMIT: "PrepareCommit", S.PREPARE_ABORT: "PrepareAbort",
          S.COMPLETE_COMMIT: "CompleteCommit", S.COMPLETE_ABORT: "CompleteAbort", S.DEAD: "Dead",
          S.PREPARE_EPOCH_FENCE: "PrepareEpochFence"}
_BY_NAME = {name: state for state, name in _NAMES.items()}
_IDLE = frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT})
_VALID_PREVIOUS: dict[TransactionState, frozenset[TransactionState]] = {
    S.EMPTY: _IDLE,
    S.ONGOING: _IDLE | {S.ONGOING},
    S.PREPARE_COMMIT: frozenset({S.ONGOING}),
    S.PREPARE_ABORT: frozenset({S.ONGOING, S.PREPARE_EPOCH_FENCE}),
    S.COMPLETE_COMMIT: frozenset({S.PREPARE_COMMIT}),
    S.COMPLETE_ABORT: frozenset({S.PREPARE_ABORT}),
    S.DEAD: _IDLE,
    S.PREPARE_EPOCH_FENCE: frozenset({S.ONGOING}),
}
_EXPIRABLE = _IDLE
del S
