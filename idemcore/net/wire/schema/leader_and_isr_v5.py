"""LeaderAndIsr v5 (API key 4), in kio's generated style, from Kafka 3.x's
``clients/src/main/resources/common/message/LeaderAndIsrRequest.json`` and ``LeaderAndIsrResponse.json``
(v4+ flexible; v5 adds the topic id and the request type, and answers partitions by topic id, KIP-516).
No annotations future import: kio's serializer reads each field's type from the dataclass field."""

import uuid
from dataclasses import dataclass, field
from typing import ClassVar

from kio.schema.errors import ErrorCode
from kio.schema.request_header.v2.header import RequestHeader
from kio.schema.response_header.v1.header import ResponseHeader
from kio.schema.types import BrokerId, TopicName
from kio.static.constants import EntityType
from kio.static.primitive import i8, i16, i32, i64

_KEY = i16(4)
_VERSION = i16(5)


@dataclass(frozen=True, slots=True, kw_only=True)
class LeaderAndIsrPartitionState:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = _VERSION
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = _KEY
    __header_schema__: ClassVar[type[RequestHeader]] = RequestHeader
    partition_index: i32 = field(metadata={"kafka_type": "int32"})
    controller_epoch: i32 = field(metadata={"kafka_type": "int32"})
    leader: BrokerId = field(metadata={"kafka_type": "int32"})
    leader_epoch: i32 = field(metadata={"kafka_type": "int32"})
    isr: tuple[i32, ...] = field(metadata={"kafka_type": "int32"}, default=())
    zk_version: i32 = field(metadata={"kafka_type": "int32"})
    replicas: tuple[i32, ...] = field(metadata={"kafka_type": "int32"}, default=())
    adding_replicas: tuple[i32, ...] = field(metadata={"kafka_type": "int32"}, default=())
    removing_replicas: tuple[i32, ...] = field(metadata={"kafka_type": "int32"}, default=())
    is_new: bool = field(metadata={"kafka_type": "bool"}, default=False)


@dataclass(frozen=True, slots=True, kw_only=True)
class LeaderAndIsrTopicState:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = _VERSION
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = _KEY
    __header_schema__: ClassVar[type[RequestHeader]] = RequestHeader
    topic_name: TopicName = field(metadata={"kafka_type": "string"})
    topic_id: uuid.UUID | None = field(metadata={"kafka_type": "uuid"})
    partition_states: tuple[LeaderAndIsrPartitionState, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class LeaderAndIsrLiveLeader:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = _VERSION
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = _KEY
    __header_schema__: ClassVar[type[RequestHeader]] = RequestHeader
    broker_id: BrokerId = field(metadata={"kafka_type": "int32"})
    host_name: str = field(metadata={"kafka_type": "string"})
    port: i32 = field(metadata={"kafka_type": "int32"})


@dataclass(frozen=True, slots=True, kw_only=True)
class LeaderAndIsrRequest:
    __type__: ClassVar = EntityType.request
    __version__: ClassVar[i16] = _VERSION
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = _KEY
    __header_schema__: ClassVar[type[RequestHeader]] = RequestHeader
    controller_id: BrokerId = field(metadata={"kafka_type": "int32"})
    controller_epoch: i32 = field(metadata={"kafka_type": "int32"})
    broker_epoch: i64 = field(metadata={"kafka_type": "int64"}, default=i64(-1))
    type: i8 = field(metadata={"kafka_type": "int8"})
    """0: incremental, 1: full (every topic the broker hosts is named)."""
    topic_states: tuple[LeaderAndIsrTopicState, ...]
    live_leaders: tuple[LeaderAndIsrLiveLeader, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class LeaderAndIsrPartitionError:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = _VERSION
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = _KEY
    __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
    partition_index: i32 = field(metadata={"kafka_type": "int32"})
    error_code: ErrorCode = field(metadata={"kafka_type": "error_code"})


@dataclass(frozen=True, slots=True, kw_only=True)
class LeaderAndIsrTopicError:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = _VERSION
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = _KEY
    __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
    topic_id: uuid.UUID | None = field(metadata={"kafka_type": "uuid"})
    partition_errors: tuple[LeaderAndIsrPartitionError, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class LeaderAndIsrResponse:
    __type__: ClassVar = EntityType.response
    __version__: ClassVar[i16] = _VERSION
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = _KEY
    __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
    error_code: ErrorCode = field(metadata={"kafka_type": "error_code"})
    topics: tuple[LeaderAndIsrTopicError, ...]
