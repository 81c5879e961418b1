"""The APIs a server serves (``APIS``, by key) and its ApiVersions answer: each API's advertised range is what
both kio and idemcore's translation and broker serve."""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode as WireError

from idemcore.net.wire.acls import ACL_APIS
from idemcore.net.wire.admin import ADMIN_APIS
from idemcore.net.wire.api import WireApi
from idemcore.net.wire.configs import CONFIG_APIS
from idemcore.net.wire.consumer_group import CONSUMER_GROUP_APIS
from idemcore.net.wire.fetch import FETCH, LIST_OFFSETS
from idemcore.net.wire.frames import make, nested
from idemcore.net.wire.group_admin import GROUP_ADMIN_APIS
from idemcore.net.wire.interbroker import INTER_BROKER_APIS
from idemcore.net.wire.membership import MEMBERSHIP_APIS
from idemcore.net.wire.metadata import CREATE_TOPICS, METADATA
from idemcore.net.wire.offsets import OFFSET_COMMIT, OFFSET_FETCH, TXN_OFFSET_COMMIT
from idemcore.net.wire.produce import PRODUCE
from idemcore.net.wire.schema import load_response_schema
from idemcore.net.wire.scram_credentials import SCRAM_CREDENTIAL_APIS
from idemcore.net.wire.transactions import (
    ADD_OFFSETS_TO_TXN,
    ADD_PARTITIONS_TO_TXN,
    END_TXN,
    FIND_COORDINATOR,
    INIT_PRODUCER_ID,
)

API_VERSIONS_KEY = 18
#: ApiVersions v0–4 (v3+: flexible, with the client's software name and version).
API_VERSIONS_RANGE = (0, 4)

APIS: dict[int, WireApi] = {api.key: api for api in (
    PRODUCE, FETCH, LIST_OFFSETS, METADATA, CREATE_TOPICS,
    INIT_PRODUCER_ID, FIND_COORDINATOR, ADD_PARTITIONS_TO_TXN, ADD_OFFSETS_TO_TXN, END_TXN,
    OFFSET_COMMIT, OFFSET_FETCH, TXN_OFFSET_COMMIT,
    *MEMBERSHIP_APIS, *GROUP_ADMIN_APIS, *CONSUMER_GROUP_APIS, *ADMIN_APIS, *CONFIG_APIS, *INTER_BROKER_APIS,
    *ACL_APIS,
    *SCRAM_CREDENTIAL_APIS,
)}


#: SaslHandshake (17) and SaslAuthenticate (36): answered by the server's connections, not by the broker.
SASL_API_RANGES = ((17, 0, 1), (36, 0, 2))


def advertised() -> list[tuple[int, int, int]]:
    """``(api key, min version, max version)`` of every API served, ApiVersions and SASL's included."""
    return sorted([(API_VERSIONS_KEY, *API_VERSIONS_RANGE), *SASL_API_RANGES]
                  + [(api.key, api.min_version, api.max_version) for api in APIS.values()])


def api_versions_response(version: int, error_code: int = 0) -> Any:
    """The ApiVersions answer at ``version``; a version this server lacks is answered at v0 with
    UNSUPPORTED_VERSION and the ranges (KIP-511: the client retries with one it finds there)."""
    cls = load_response_schema(API_VERSIONS_KEY, version)
    entry = nested(cls, "ApiVersion")
    keys = tuple(make(entry, api_key=key, min_version=low, max_version=high) for key, low, high in advertised())
    return make(cls, error_code=WireError(error_code), api_keys=keys, supported_features=(),
                finalized_features_epoch=-1, finalized_features=(), zk_migration_ready=False)
