"""Request and response schemas kio lacks (it follows Kafka 4, which dropped ZooKeeper's controller APIs), in
kio's generated style so kio's own readers and idemcore's encoder handle them; and the two lookups the wire
package uses instead of kio's, which find these first and kio's otherwise."""

from __future__ import annotations

from typing import Any

from kio.index import load_request_schema as _kio_request
from kio.index import load_response_schema as _kio_response

from idemcore.net.wire.schema import leader_and_isr_v5, stop_replica_v3, update_metadata_v7

#: ``(api key, version) -> (request class, response class)`` of the schemas defined here.
LOCAL_SCHEMAS: dict[tuple[int, int], tuple[type, type]] = {
    (4, 5): (leader_and_isr_v5.LeaderAndIsrRequest, leader_and_isr_v5.LeaderAndIsrResponse),
    (5, 3): (stop_replica_v3.StopReplicaRequest, stop_replica_v3.StopReplicaResponse),
    (6, 7): (update_metadata_v7.UpdateMetadataRequest, update_metadata_v7.UpdateMetadataResponse),
}


def load_request_schema(api_key: int, version: int) -> Any:
    """The request class of ``api_key`` at ``version``: one defined here, else kio's (which raises its own
    UnknownAPIKey / UnknownEntity for neither)."""
    local = LOCAL_SCHEMAS.get((api_key, version))
    return local[0] if local is not None else _kio_request(api_key, version)


def load_response_schema(api_key: int, version: int) -> Any:
    """The response class of ``api_key`` at ``version``: one defined here, else kio's."""
    local = LOCAL_SCHEMAS.get((api_key, version))
    return local[1] if local is not None else _kio_response(api_key, version)
