"""How the broker's request handlers turn a coordinator's refusal of a malformed field into an answer: a client's
bad request is answered INVALID_REQUEST with a message naming the field, never raised out of ``Broker.handle``."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TypeVar

log = logging.getLogger(__name__)

T = TypeVar("T")


def checked(request: object, call: Callable[[], T]) -> T | str:
    """``call()``, or (logged) the message of the TypeError/ValueError the coordinator raised for a field of
    ``request``, by its type or range."""
    try:
        return call()
    except (TypeError, ValueError) as exc:
        log.info("%s answered INVALID_REQUEST: %s", type(request).__name__, exc)
        return f"{type(request).__name__}: {exc}"
