"""Producer configuration: Kafka's settings in snake_case, checked at construction (docs/rules.md §3)."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from idemcore.checks import int_at_least
from idemcore.errors import ConfigError
from idemcore.protocol.constants import INT32_MAX, MAX_IN_FLIGHT_WITH_IDEMPOTENCE

_ACKS = {"all": -1, "-1": -1, -1: -1, "1": 1, 1: 1, "0": 0, 0: 0}
#: Kafka's boolean settings take only true/false (any case), as its ConfigDef parses them.
_BOOLEANS = {"true": True, "false": False}


@dataclass(frozen=True)
class ProducerConfig:
    """Kafka's producer defaults; ``acks`` is normalised to -1 (all), 0 or 1."""

    enable_idempotence: bool = True
    acks: int = -1
    retries: int = INT32_MAX
    max_in_flight_requests_per_connection: int = 5
    batch_size: int = 16_384
    linger_ms: int = 5
    delivery_timeout_ms: int = 120_000
    request_timeout_ms: int = 30_000
    retry_backoff_ms: int = 100
    max_request_size: int = 1_048_576
    client_id: str = ""
    #: Kafka's transactional.id: None for a producer without transactions (it needs idempotence).
    transactional_id: str | None = None
    transaction_timeout_ms: int = 60_000
    #: How long init_transactions, commit_transaction, abort_transaction and send_offsets_to_transaction block.
    max_block_ms: int = 60_000

    @classmethod
    def from_kwargs(cls, **config: Any) -> ProducerConfig:
        """Check settings the way Kafka's ProducerConfig does; raise ConfigError naming the setting."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(config) - known)
        if unknown:
            raise ConfigError(f"unknown producer setting(s): {', '.join(unknown)}")
        explicit_idempotence = "enable_idempotence" in config
        if explicit_idempotence:
            config["enable_idempotence"] = _boolean("enable_idempotence", config["enable_idempotence"])
        if "client_id" in config and not isinstance(config["client_id"], str):
            raise ConfigError(f"client_id must be a string, got {config['client_id']!r}")
        transactional_id = config.get("transactional_id")
        if transactional_id is not None and (not isinstance(transactional_id, str) or not transactional_id):
            # Kafka's ConfigDef.NonEmptyString: an empty id would name no coordinator partition's key.
            raise ConfigError(f"transactional_id must be a non-empty string, got {transactional_id!r}")
        if "acks" in config:
            acks = config["acks"]
            if not isinstance(acks, int | str) or isinstance(acks, bool) or acks not in _ACKS:
                raise ConfigError(f"acks must be 'all', -1, 0 or 1, got {acks!r}")
            config["acks"] = _ACKS[acks]
        for name, low in (("retries", 0), ("max_in_flight_requests_per_connection", 1), ("batch_size", 0),
                          ("linger_ms", 0), ("delivery_timeout_ms", 1), ("request_timeout_ms", 1),
                          ("retry_backoff_ms", 0), ("max_request_size", 1), ("transaction_timeout_ms", 1),
                          ("max_block_ms", 0)):
            if name in config:
                int_at_least(name, config[name], low, type_error=ConfigError, range_error=ConfigError)
        values = {**{f.name: f.default for f in fields(cls)}, **config}
        conflicts = []
        if values["acks"] != -1:
            conflicts.append(f"acks must be 'all' (got {values['acks']})")
        if values["retries"] == 0:
            conflicts.append("retries must be greater than 0")
        if values["max_in_flight_requests_per_connection"] > MAX_IN_FLIGHT_WITH_IDEMPOTENCE:
            conflicts.append(f"max_in_flight_requests_per_connection must be at most {MAX_IN_FLIGHT_WITH_IDEMPOTENCE} "
                             f"(got {values['max_in_flight_requests_per_connection']})")
        if values["enable_idempotence"] and conflicts:
            if explicit_idempotence:
                raise ConfigError("enable_idempotence=True requires: " + "; ".join(conflicts))
            values["enable_idempotence"] = False  # Kafka turns implicit idempotence off rather than fail
        # Checked after the settings above may have turned implicit idempotence off, as Kafka's ProducerConfig does.
        if values["transactional_id"] is not None and not values["enable_idempotence"]:
            reason = "enable_idempotence=False" if explicit_idempotence else "; ".join(conflicts)
            raise ConfigError(f"transactional_id={values['transactional_id']!r} requires idempotence, which is off "
                              f"({reason})")
        if values["delivery_timeout_ms"] < values["linger_ms"] + values["request_timeout_ms"]:
            raise ConfigError(f"delivery_timeout_ms ({values['delivery_timeout_ms']}) must be at least linger_ms + "
                              f"request_timeout_ms ({values['linger_ms'] + values['request_timeout_ms']})")
        return cls(**values)


def _boolean(name: str, value: Any) -> bool:
    """A boolean setting: True/False, or the strings "true"/"false" in any case (never truthiness: the
    string "false" is not True)."""
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in _BOOLEANS:
        return _BOOLEANS[value.strip().lower()]
    raise ConfigError(f"{name} must be True, False, 'true' or 'false', got {value!r}")
