"""The opening both broker channels drive (broker_channel._Negotiation.handshake, sans IO): ApiVersions asked at
the highest version, asked again lower after an UNSUPPORTED_VERSION answer (KIP-511), then the ranges returned."""

from __future__ import annotations

import pytest

from idemcore.net.broker_channel import _Negotiation
from idemcore.net.wire.apis import api_versions_response
from idemcore.net.wire.client import API_VERSIONS_KEY, API_VERSIONS_RANGE
from idemcore.net.wire.frames import response_frame
from idemcore.protocol.codes import ErrorCode


def _answer(correlation_id: int, response: object) -> bytes:
    return b"".join(response_frame(correlation_id, response))[4:]  # as a channel reads it: after the size


def test_an_unsupported_version_answer_is_asked_again_lower_then_the_ranges_are_returned():
    top = API_VERSIONS_RANGE[1]
    assert top > 0
    opening = _Negotiation("broker h:1", "me").handshake(None)
    _, what = next(opening)
    assert what == f"ApiVersions v{top}"
    _, what = opening.send(_answer(1, api_versions_response(0, ErrorCode.UNSUPPORTED_VERSION)))
    assert what == f"ApiVersions v{top - 1}"
    with pytest.raises(StopIteration) as done:
        opening.send(_answer(2, api_versions_response(top - 1)))
    assert API_VERSIONS_KEY in done.value.value


def test_an_answer_to_another_correlation_id_is_a_connection_error_naming_the_broker():
    opening = _Negotiation("broker h:1", "me").handshake(None)
    next(opening)
    with pytest.raises(ConnectionError, match="broker h:1: an answer to correlation id 7, expected 1"):
        opening.send(_answer(7, api_versions_response(API_VERSIONS_RANGE[1])))
