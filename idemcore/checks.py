"""Typed checks of input at a boundary, one call each, with one-line errors naming the value: a setting given to
a constructor (a :class:`~idemcore.broker.broker.Broker`, a server, a consumer, a producer, a transport, a
coordinator) or an argument of an in-process API (a coordinator's method called without a request in between).
``bool`` is never taken for an ``int`` (``type(value) is int``, as Kafka's typed fields have no ``True``).

Two wordings, as the callers' errors have always read: a broker-side *setting* is one ``ValueError`` naming the
range it must fall in (``message_max_bytes must be a positive integer, got 0``); a client setting is a
``TypeError`` for the wrong type and a ``ValueError`` below its least value, as Kafka's ``ConfigDef`` splits
them; an *argument* is a ``TypeError`` naming the type it must have (``producer_id must be an int, got 'x'``).
Each returns the value, so a constructor checks and keeps in one line."""

from __future__ import annotations

from typing import TypeVar

_T = TypeVar("_T")


def _bound(number: int) -> str:
    return f"{number:,}"


def int_setting(name: str, value: object, low: int, high: int | None = None) -> int:
    """``value`` if an int from ``low`` to ``high`` (no upper bound when None), else ValueError naming the range:
    "a non-negative integer" (low 0), "a positive integer" (low 1), "an integer of at least N", "an integer from
    N to M"."""
    if type(value) is int and low <= value and (high is None or value <= high):
        return value
    if high is not None:
        wanted = f"an integer from {_bound(low)} to {_bound(high)}"
    else:
        wanted = {0: "a non-negative integer", 1: "a positive integer"}.get(low, f"an integer of at least {low}")
    raise ValueError(f"{name} must be {wanted}, got {value!r}")


def int_at_least(name: str, value: object, low: int, high: int | None = None, *,
                 type_error: type[Exception] = TypeError, range_error: type[Exception] = ValueError) -> int:
    """A client's setting: ``value`` if an int from ``low`` to ``high`` (no upper bound when None); else
    ``type_error`` ("must be an integer") for another type, ``range_error`` ("must be at least N", "must be at most
    M") for an int out of range."""
    if type(value) is not int:
        raise type_error(f"{name} must be an integer, got {value!r}")
    if value < low:
        raise range_error(f"{name} must be at least {low}, got {value}")
    if high is not None and value > high:
        raise range_error(f"{name} must be at most {high}, got {value}")
    return value


def bool_setting(name: str, value: object) -> bool:
    """``value`` if True or False (not 0, 1 or "false": a string is always true), else TypeError."""
    if type(value) is not bool:
        raise TypeError(f"{name} must be True or False, got {value!r}")
    return value


def str_or_none_setting(name: str, value: object) -> str | None:
    """``value`` if a non-empty str or None; TypeError for another type, ValueError for ""."""
    if value is not None and (type(value) is not str or not value):
        raise (ValueError if type(value) is str else TypeError)(
            f"{name} must be a non-empty string or None, got {value!r}")
    return value


def _exactly(name: str, value: object, kind: type[_T], called: str) -> _T:
    """``value`` if of type ``kind`` itself (not a subclass: no ``True`` for an int), else TypeError naming it."""
    if type(value) is not kind:
        raise TypeError(f"{name} must be {called}, got {value!r:.80}")
    return value


def int_arg(name: str, value: object) -> int:
    """An in-process caller's int argument, else TypeError naming it."""
    return _exactly(name, value, int, "an int")


def bool_arg(name: str, value: object) -> bool:
    """An in-process caller's bool argument, else TypeError naming it."""
    return _exactly(name, value, bool, "a bool")


def str_arg(name: str, value: object) -> str:
    """An in-process caller's str argument, else TypeError naming it."""
    return _exactly(name, value, str, "a str")


def str_or_none_arg(name: str, value: object) -> str | None:
    """An in-process caller's str argument that may be None, else TypeError naming it."""
    if value is not None and type(value) is not str:
        raise TypeError(f"{name} must be a str or None, got {value!r:.80}")
    return value


def index_arg(name: str, value: object, count: int) -> int:
    """An index into ``count`` things (a coordinator log's partition), else ValueError naming the range."""
    if type(value) is not int or not 0 <= value < count:
        raise ValueError(f"{name} must be an int in 0..{count - 1}, got {value!r}")
    return value

