from common import si_pb2 as _si_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class UpdateConfigurationResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class SubscribeRequest(_message.Message):
    __slots__ = ("rmID", "partitionResync")
    RMID_FIELD_NUMBER: _ClassVar[int]
    PARTITIONRESYNC_FIELD_NUMBER: _ClassVar[int]
    rmID: str
    partitionResync: bool
    def __init__(self, rmID: _Optional[str] = ..., partitionResync: _Optional[bool] = ...) -> None: ...

class SchedulerNotice(_message.Message):
    __slots__ = ("events", "schedulingStates", "stateDumpRequest", "reRegister", "resyncPartition")
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    SCHEDULINGSTATES_FIELD_NUMBER: _ClassVar[int]
    STATEDUMPREQUEST_FIELD_NUMBER: _ClassVar[int]
    REREGISTER_FIELD_NUMBER: _ClassVar[int]
    RESYNCPARTITION_FIELD_NUMBER: _ClassVar[int]
    events: EventBatch
    schedulingStates: SchedulingStates
    stateDumpRequest: StateDumpRequest
    reRegister: ReRegisterRequest
    resyncPartition: ResyncPartition
    def __init__(self, events: _Optional[_Union[EventBatch, _Mapping]] = ..., schedulingStates: _Optional[_Union[SchedulingStates, _Mapping]] = ..., stateDumpRequest: _Optional[_Union[StateDumpRequest, _Mapping]] = ..., reRegister: _Optional[_Union[ReRegisterRequest, _Mapping]] = ..., resyncPartition: _Optional[_Union[ResyncPartition, _Mapping]] = ...) -> None: ...

class EventBatch(_message.Message):
    __slots__ = ("events",)
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    events: _containers.RepeatedCompositeFieldContainer[_si_pb2.EventRecord]
    def __init__(self, events: _Optional[_Iterable[_Union[_si_pb2.EventRecord, _Mapping]]] = ...) -> None: ...

class SchedulingStates(_message.Message):
    __slots__ = ("states",)
    STATES_FIELD_NUMBER: _ClassVar[int]
    states: _containers.RepeatedCompositeFieldContainer[_si_pb2.UpdateContainerSchedulingStateRequest]
    def __init__(self, states: _Optional[_Iterable[_Union[_si_pb2.UpdateContainerSchedulingStateRequest, _Mapping]]] = ...) -> None: ...

class StateDumpRequest(_message.Message):
    __slots__ = ("requestID",)
    REQUESTID_FIELD_NUMBER: _ClassVar[int]
    requestID: str
    def __init__(self, requestID: _Optional[str] = ...) -> None: ...

class ReRegisterRequest(_message.Message):
    __slots__ = ("reason",)
    REASON_FIELD_NUMBER: _ClassVar[int]
    reason: str
    def __init__(self, reason: _Optional[str] = ...) -> None: ...

class ResyncPartition(_message.Message):
    __slots__ = ("partition", "epoch", "reason")
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    partition: str
    epoch: int
    reason: str
    def __init__(self, partition: _Optional[str] = ..., epoch: _Optional[int] = ..., reason: _Optional[str] = ...) -> None: ...

class StateDump(_message.Message):
    __slots__ = ("rmID", "requestID", "json")
    RMID_FIELD_NUMBER: _ClassVar[int]
    REQUESTID_FIELD_NUMBER: _ClassVar[int]
    JSON_FIELD_NUMBER: _ClassVar[int]
    rmID: str
    requestID: str
    json: str
    def __init__(self, rmID: _Optional[str] = ..., requestID: _Optional[str] = ..., json: _Optional[str] = ...) -> None: ...

class ShutdownRequest(_message.Message):
    __slots__ = ("rmID",)
    RMID_FIELD_NUMBER: _ClassVar[int]
    rmID: str
    def __init__(self, rmID: _Optional[str] = ...) -> None: ...

class Ack(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...
