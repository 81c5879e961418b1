"""Kafka's protocol vocabulary: error codes, constants and the one home of sequence arithmetic."""

from idemcore.protocol.codes import RETRIABLE_ERRORS, ControlType, ErrorCode, Origin, Status
from idemcore.protocol.sequences import in_sequence, seq_add, seq_sub

__all__ = ["RETRIABLE_ERRORS", "ControlType", "ErrorCode", "Origin", "Status", "in_sequence", "seq_add", "seq_sub"]
