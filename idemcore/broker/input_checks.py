"""Input checked once, where it enters the broker: a request's batches, markers and topic names, and a
coordinator's refusal of a malformed field turned into an answer (a client's bad request is answered with a
message naming the field, never raised out of ``Broker.handle``)."""

from __future__ import annotations

import logging
import numbers
import re
from collections.abc import Callable, Sequence
from typing import TypeVar

import numpy as np

from idemcore.net.messages import TxnMarker
from idemcore.protocol.codes import ErrorCode
from idemcore.protocol.constants import INT16_MAX, INT32_MAX, MAX_PARTITIONS_PER_TOPIC, TopicPartition
from idemcore.record.batch import RecordBatch

log = logging.getLogger(__name__)

T = TypeVar("T")
TOPIC_NAME = re.compile(r"[a-zA-Z0-9._-]{1,249}")
_KEY_TYPES = frozenset((bytes, type(None)))
_CONTAINERS = frozenset((list, tuple))


def checked(request: object, call: Callable[[], T]) -> T | str:
    """``call()``, or (logged) the message of the TypeError/ValueError the coordinator raised for a field of
    ``request``, by its type or range."""
    try:
        return call()
    except (TypeError, ValueError) as exc:
        log.info("%s answered INVALID_REQUEST: %s", type(request).__name__, exc)
        return f"{type(request).__name__}: {exc}"


def strings(value: object, what: str) -> tuple[str, ...]:
    """``value`` (a tuple or list of strings) as a tuple; TypeError naming ``what`` otherwise."""
    if type(value) not in _CONTAINERS:
        raise TypeError(f"{what} must be a tuple of strings, not {type(value).__name__}")
    for item in value:  # type: ignore[attr-defined]
        if type(item) is not str:
            raise TypeError(f"{what} must hold strings, not {type(item).__name__} ({item!r:.80})")
    return tuple(value)  # type: ignore[arg-type]


def topic_partitions(value: object, lowest: int = 0) -> tuple[TopicPartition, ...]:
    """``value`` (a tuple or list of ``(topic str, partition int)`` pairs, each partition in ``lowest``..INT32_MAX)
    as a tuple; TypeError or ValueError naming the first that is not."""
    if type(value) not in _CONTAINERS:
        raise TypeError(f"partitions must be a tuple of TopicPartition, not {type(value).__name__}")
    for item in value:  # type: ignore[attr-defined]
        if not isinstance(item, tuple) or len(item) != 2:
            raise TypeError(f"partitions must hold (topic, partition) pairs, not {item!r:.80}")
        topic, partition = item
        if type(topic) is not str:
            raise TypeError(f"a partition's topic must be a string, not {type(topic).__name__}")
        if type(partition) is not int:
            raise TypeError(f"partition of topic {topic!r:.80} must be an integer, not {type(partition).__name__}")
        if not lowest <= partition <= INT32_MAX:
            raise ValueError(f"partition {partition} of topic {topic!r:.80} is out of range")
    return tuple((topic, partition) for topic, partition in value)  # type: ignore[attr-defined]


def _metadata_types(batch: RecordBatch) -> tuple[ErrorCode, str] | None:
    """Metadata and containers of the wrong type (checked apart: the common, well-typed case is one test)."""
    for name in ("producer_id", "producer_epoch", "base_sequence", "max_timestamp"):
        value = getattr(batch, name)
        if not isinstance(value, numbers.Integral) or isinstance(value, bool):
            return ErrorCode.INVALID_RECORD, f"{name} must be an integer, not {type(value).__name__}"
    if not isinstance(batch.is_transactional, bool | np.bool_):
        return ErrorCode.INVALID_RECORD, f"is_transactional must be a bool, not {type(batch.is_transactional).__name__}"
    for name in ("values", "keys"):
        value = getattr(batch, name)
        if (value is not None or name == "values") and \
                (not isinstance(value, Sequence | np.ndarray) or isinstance(value, str | bytes)):
            return ErrorCode.CORRUPT_MESSAGE, f"record {name} must be a sequence, not {type(value).__name__}"
    return None


def malformed_batch(batch: RecordBatch) -> tuple[ErrorCode, str] | None:
    """Why a batch cannot be appended at all, or None. Checked before the producer-state rules."""
    values = batch.values
    if batch.wire is not None:  # from the wire: its header fields fit their widths and its records scanned whole
        if len(values) == 0:
            return ErrorCode.INVALID_RECORD, "a batch must hold at least one record"
        if batch.producer_id < -1 or batch.producer_epoch < -1 or batch.base_sequence < -1:
            return ErrorCode.INVALID_RECORD, (f"producer id {batch.producer_id}, epoch {batch.producer_epoch} or "
                                              f"base sequence {batch.base_sequence} out of range")
        return None
    well_typed = (type(batch.producer_id) is int and type(batch.producer_epoch) is int
                  and type(batch.base_sequence) is int and type(batch.max_timestamp) is int
                  and type(batch.is_transactional) is bool and type(values) in _CONTAINERS
                  and (batch.keys is None or type(batch.keys) in _CONTAINERS))
    if not well_typed:
        problem = _metadata_types(batch)
        if problem is not None:
            return problem
    if not -2**63 <= batch.max_timestamp < 2**63:
        return ErrorCode.INVALID_RECORD, f"max_timestamp {batch.max_timestamp} is out of the int64 range"
    if isinstance(values, np.ndarray):
        if values.ndim != 1:
            return ErrorCode.CORRUPT_MESSAGE, f"record values must be one-dimensional, not of shape {values.shape}"
        if values.dtype.kind != "S" and not (values.dtype == object and all(type(v) is bytes for v in values)):
            return ErrorCode.CORRUPT_MESSAGE, f"record values of dtype {values.dtype} are not bytes"
    elif values and not set(map(type, values)) <= _KEY_TYPES:
        return ErrorCode.CORRUPT_MESSAGE, "every record value must be bytes or None"
    if batch.keys is not None:
        if len(batch.keys) != len(values):
            return ErrorCode.CORRUPT_MESSAGE, f"{len(batch.keys)} keys for {len(values)} records"
        if not set(map(type, batch.keys)) <= _KEY_TYPES:
            return ErrorCode.CORRUPT_MESSAGE, "every record key must be bytes or None"
    if batch.headers is not None:
        bad = _bad_headers(batch.headers, len(values))
        if bad is not None:
            return ErrorCode.CORRUPT_MESSAGE, bad
    if len(values) == 0 or len(values) > INT32_MAX:
        return ErrorCode.INVALID_RECORD, f"a batch must hold 1..{INT32_MAX} records, not {len(values)}"
    if not (-1 <= batch.producer_id < 2**63) or not (-1 <= batch.producer_epoch <= INT16_MAX) \
            or not (-1 <= batch.base_sequence <= INT32_MAX):
        return ErrorCode.INVALID_RECORD, (f"producer id {batch.producer_id}, epoch {batch.producer_epoch} or base "
                                          f"sequence {batch.base_sequence} out of range")
    return None


def _bad_headers(headers: object, count: int) -> str | None:
    """What is wrong with a batch's record headers (None, or per record a sequence of ``(str, bytes | None)``
    pairs whose keys UTF-8 encodes), or None."""
    if not isinstance(headers, Sequence) or isinstance(headers, str | bytes) or len(headers) != count:
        return f"headers must be one sequence of (key, value) pairs per record ({count}), got {headers!r:.60}"
    for index, record in enumerate(headers):
        if not isinstance(record, Sequence) or isinstance(record, str | bytes):
            return f"record {index}'s headers must be a sequence of (key, value) pairs, got {record!r:.60}"
        for pair in record:
            if not isinstance(pair, tuple | list) or len(pair) != 2 or type(pair[0]) is not str \
                    or type(pair[1]) not in _KEY_TYPES:
                return f"record {index} has header {pair!r:.60}: a header is a (str, bytes or None) pair"
            try:  # as record.v2 writes keys: bytes a key was decoded from (surrogateescape) go back as they were
                pair[0].encode("utf-8", "surrogateescape")
            except UnicodeEncodeError:
                return f"record {index} has header key {pair[0]!r:.60}, which UTF-8 cannot encode"
    return None


def well_formed_marker(marker: object) -> bool:
    """A TxnMarker whose partitions are (str, int) pairs (its other fields are checked where they are used)."""
    if type(marker) is not TxnMarker or not isinstance(marker.partitions, tuple | list):
        return False
    return all(type(tp) is tuple and len(tp) == 2 and type(tp[0]) is str and type(tp[1]) is int
               for tp in marker.partitions)


def illegal_topic_name(name: object) -> str | None:
    """Why ``name`` is not a legal topic name (Kafka's ``Topic.validate``: a topic names a directory), or None."""
    if isinstance(name, str) and TOPIC_NAME.fullmatch(name) and name not in (".", ".."):
        return None
    return (f"topic name {name!r:.300} is not legal: 1 to 249 of a-z, A-Z, 0-9, '.', '_', '-', and not '.' or "
            "'..' (Kafka's rule; a topic names a directory)")


def check_topic(name: object, count: object) -> None:
    """A legal topic name (Kafka's rule) with a partition count this broker takes; ValueError naming both."""
    illegal = illegal_topic_name(name)
    if illegal is not None:
        raise ValueError(illegal)
    if not isinstance(count, int) or isinstance(count, bool) or count < 1:
        raise ValueError(f"topic {name!r} needs a positive partition count, got {count!r}")
    if count > MAX_PARTITIONS_PER_TOPIC:
        raise ValueError(f"topic {name!r}: {count:,} partitions is more than the {MAX_PARTITIONS_PER_TOPIC:,} a topic "
                         "may have here")
