"""DescribeConfigs (v1–4), AlterConfigs (v0–2) and IncrementalAlterConfigs (v0–1) on the wire, translated to
and from :mod:`idemcore.net.configs`.

DescribeConfigs v0 (``is_default`` instead of a config source) is not served: kio 0.6 has no schema for it, and
Kafka 4 no longer serves it either; librdkafka and kafka-python ask for v1 or later."""

from __future__ import annotations

import datetime
from collections.abc import Callable
from typing import Any, cast

from kio.schema.errors import ErrorCode as WireError

from idemcore.net.configs import (
    AlterConfigsRequest,
    AlterConfigsResponse,
    AlteredResource,
    AlterResource,
    ConfigChange,
    DescribeConfigsRequest,
    DescribeConfigsResponse,
    DescribedResource,
    DescribeResource,
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
    IncrementalResource,
)
from idemcore.net.wire.api import ToMessage, ToWire, WireApi, WireContext
from idemcore.net.wire.frames import make, nested, response_class

DESCRIBE_CONFIGS_KEY = 32
ALTER_CONFIGS_KEY = 33
INCREMENTAL_ALTER_CONFIGS_KEY = 44

_NO_THROTTLE = datetime.timedelta(0)


def _describe_to_message(ctx: WireContext, version: int, correlation_id: int,
                         body: Any) -> tuple[DescribeConfigsRequest, None]:
    resources = tuple(DescribeResource(int(r.resource_type), str(r.resource_name),
                                       None if r.configuration_keys is None else tuple(map(str, r.configuration_keys)))
                      for r in body.resources)
    return DescribeConfigsRequest(resources, bool(getattr(body, "include_synonyms", False)),
                                  bool(getattr(body, "include_documentation", False)), correlation_id), None


def _describe_to_wire(ctx: WireContext, version: int, body: Any, response: DescribeConfigsResponse,
                      carry: None) -> Any:
    cls = response_class(body)
    result_cls, entry_cls = nested(cls, "DescribeConfigsResult"), nested(cls, "DescribeConfigsResourceResult")
    synonym_cls = nested(cls, "DescribeConfigsSynonym")
    answers = list(response.results)
    if len(answers) != len(body.resources):  # only a malformed in-process request: never one read from the wire
        answers = [DescribedResource(int(r.resource_type), str(r.resource_name),
                                     answers[0].error_code if answers else -1,
                                     answers[0].error_message if answers else None) for r in body.resources]
    return make(cls, throttle_time=_NO_THROTTLE, results=tuple(make(
        result_cls, error_code=WireError(r.error_code), error_message=r.error_message,
        resource_type=r.resource_type, resource_name=r.resource_name, configs=tuple(make(
            entry_cls, name=c.name, value=c.value, read_only=c.read_only, config_source=c.source,
            is_sensitive=c.is_sensitive, config_type=c.config_type, documentation=c.documentation,
            synonyms=tuple(make(synonym_cls, name=s.name, value=s.value, source=s.source) for s in c.synonyms))
            for c in r.configs))
        for r in answers))


def _alter_to_message(ctx: WireContext, version: int, correlation_id: int,
                      body: Any) -> tuple[AlterConfigsRequest, None]:
    resources = tuple(AlterResource(int(r.resource_type), str(r.resource_name),
                                    tuple((str(c.name), None if c.value is None else str(c.value))
                                          for c in r.configs))
                      for r in body.resources)
    return AlterConfigsRequest(resources, bool(body.validate_only), correlation_id), None


def _incremental_to_message(ctx: WireContext, version: int, correlation_id: int,
                            body: Any) -> tuple[IncrementalAlterConfigsRequest, None]:
    resources = tuple(IncrementalResource(int(r.resource_type), str(r.resource_name),
                                          tuple(ConfigChange(str(c.name), int(c.config_operation),
                                                             None if c.value is None else str(c.value))
                                                for c in r.configs))
                      for r in body.resources)
    return IncrementalAlterConfigsRequest(resources, bool(body.validate_only), correlation_id), None


def _altered_to_wire(ctx: WireContext, version: int, body: Any,
                     response: AlterConfigsResponse | IncrementalAlterConfigsResponse, carry: None) -> Any:
    cls = response_class(body)
    entry_cls = nested(cls, "AlterConfigsResourceResponse")
    answers = list(response.results)
    if len(answers) != len(body.resources):  # only a malformed in-process request
        answers = [AlteredResource(int(r.resource_type), str(r.resource_name),
                                   answers[0].error_code if answers else -1,
                                   answers[0].error_message if answers else None) for r in body.resources]
    return make(cls, throttle_time=_NO_THROTTLE, responses=tuple(make(
        entry_cls, error_code=WireError(r.error_code), error_message=r.error_message, resource_type=r.resource_type,
        resource_name=r.resource_name) for r in answers))


def _api(key: int, name: str, low: int, high: int, to_message: Callable[..., Any],
         to_wire: Callable[..., Any]) -> WireApi:
    # Each translation takes and gives its own message types, a member of the Request/Response unions.
    return WireApi(key, name, low, high, cast(ToMessage, to_message), cast(ToWire, to_wire))


DESCRIBE_CONFIGS = _api(DESCRIBE_CONFIGS_KEY, "DescribeConfigs", 1, 4, _describe_to_message, _describe_to_wire)
ALTER_CONFIGS = _api(ALTER_CONFIGS_KEY, "AlterConfigs", 0, 2, _alter_to_message, _altered_to_wire)
INCREMENTAL_ALTER_CONFIGS = _api(INCREMENTAL_ALTER_CONFIGS_KEY, "IncrementalAlterConfigs", 0, 1,
                                 _incremental_to_message, _altered_to_wire)
#: The three, for the server's table of APIs (``apis.APIS``).
CONFIG_APIS = (DESCRIBE_CONFIGS, ALTER_CONFIGS, INCREMENTAL_ALTER_CONFIGS)
