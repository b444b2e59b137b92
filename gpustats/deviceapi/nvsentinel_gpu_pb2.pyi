import datetime

from google.protobuf import empty_pb2 as _empty_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ObjectMeta(_message.Message):
    __slots__ = ("name", "resource_version", "namespace")
    NAME_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_VERSION_FIELD_NUMBER: _ClassVar[int]
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    name: str
    resource_version: str
    namespace: str
    def __init__(self, name: _Optional[str] = ..., resource_version: _Optional[str] = ..., namespace: _Optional[str] = ...) -> None: ...

class ListMeta(_message.Message):
    __slots__ = ("resource_version",)
    RESOURCE_VERSION_FIELD_NUMBER: _ClassVar[int]
    resource_version: str
    def __init__(self, resource_version: _Optional[str] = ...) -> None: ...

class GetOptions(_message.Message):
    __slots__ = ("resource_version", "namespace")
    RESOURCE_VERSION_FIELD_NUMBER: _ClassVar[int]
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    resource_version: str
    namespace: str
    def __init__(self, resource_version: _Optional[str] = ..., namespace: _Optional[str] = ...) -> None: ...

class ListOptions(_message.Message):
    __slots__ = ("resource_version", "namespace")
    RESOURCE_VERSION_FIELD_NUMBER: _ClassVar[int]
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    resource_version: str
    namespace: str
    def __init__(self, resource_version: _Optional[str] = ..., namespace: _Optional[str] = ...) -> None: ...

class Gpu(_message.Message):
    __slots__ = ("metadata", "spec", "status", "resource_version")
    METADATA_FIELD_NUMBER: _ClassVar[int]
    SPEC_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_VERSION_FIELD_NUMBER: _ClassVar[int]
    metadata: ObjectMeta
    spec: GpuSpec
    status: GpuStatus
    resource_version: int
    def __init__(self, metadata: _Optional[_Union[ObjectMeta, _Mapping]] = ..., spec: _Optional[_Union[GpuSpec, _Mapping]] = ..., status: _Optional[_Union[GpuStatus, _Mapping]] = ..., resource_version: _Optional[int] = ...) -> None: ...

class GpuList(_message.Message):
    __slots__ = ("metadata", "items")
    METADATA_FIELD_NUMBER: _ClassVar[int]
    ITEMS_FIELD_NUMBER: _ClassVar[int]
    metadata: ListMeta
    items: _containers.RepeatedCompositeFieldContainer[Gpu]
    def __init__(self, metadata: _Optional[_Union[ListMeta, _Mapping]] = ..., items: _Optional[_Iterable[_Union[Gpu, _Mapping]]] = ...) -> None: ...

class GpuSpec(_message.Message):
    __slots__ = ("uuid",)
    UUID_FIELD_NUMBER: _ClassVar[int]
    uuid: str
    def __init__(self, uuid: _Optional[str] = ...) -> None: ...

class GpuStatus(_message.Message):
    __slots__ = ("conditions", "recommended_action")
    CONDITIONS_FIELD_NUMBER: _ClassVar[int]
    RECOMMENDED_ACTION_FIELD_NUMBER: _ClassVar[int]
    conditions: _containers.RepeatedCompositeFieldContainer[Condition]
    recommended_action: str
    def __init__(self, conditions: _Optional[_Iterable[_Union[Condition, _Mapping]]] = ..., recommended_action: _Optional[str] = ...) -> None: ...

class Condition(_message.Message):
    __slots__ = ("type", "status", "last_transition_time", "reason", "message")
    TYPE_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    LAST_TRANSITION_TIME_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    type: str
    status: str
    last_transition_time: _timestamp_pb2.Timestamp
    reason: str
    message: str
    def __init__(self, type: _Optional[str] = ..., status: _Optional[str] = ..., last_transition_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., reason: _Optional[str] = ..., message: _Optional[str] = ...) -> None: ...

class GetGpuRequest(_message.Message):
    __slots__ = ("name", "opts")
    NAME_FIELD_NUMBER: _ClassVar[int]
    OPTS_FIELD_NUMBER: _ClassVar[int]
    name: str
    opts: GetOptions
    def __init__(self, name: _Optional[str] = ..., opts: _Optional[_Union[GetOptions, _Mapping]] = ...) -> None: ...

class GetGpuResponse(_message.Message):
    __slots__ = ("gpu",)
    GPU_FIELD_NUMBER: _ClassVar[int]
    gpu: Gpu
    def __init__(self, gpu: _Optional[_Union[Gpu, _Mapping]] = ...) -> None: ...

class ListGpusRequest(_message.Message):
    __slots__ = ("opts",)
    OPTS_FIELD_NUMBER: _ClassVar[int]
    opts: ListOptions
    def __init__(self, opts: _Optional[_Union[ListOptions, _Mapping]] = ...) -> None: ...

class ListGpusResponse(_message.Message):
    __slots__ = ("gpu_list",)
    GPU_LIST_FIELD_NUMBER: _ClassVar[int]
    gpu_list: GpuList
    def __init__(self, gpu_list: _Optional[_Union[GpuList, _Mapping]] = ...) -> None: ...

class WatchGpusRequest(_message.Message):
    __slots__ = ("opts",)
    OPTS_FIELD_NUMBER: _ClassVar[int]
    opts: ListOptions
    def __init__(self, opts: _Optional[_Union[ListOptions, _Mapping]] = ...) -> None: ...

class WatchGpusResponse(_message.Message):
    __slots__ = ("type", "object")
    TYPE_FIELD_NUMBER: _ClassVar[int]
    OBJECT_FIELD_NUMBER: _ClassVar[int]
    type: str
    object: Gpu
    def __init__(self, type: _Optional[str] = ..., object: _Optional[_Union[Gpu, _Mapping]] = ...) -> None: ...

class CreateGpuRequest(_message.Message):
    __slots__ = ("gpu",)
    GPU_FIELD_NUMBER: _ClassVar[int]
    gpu: Gpu
    def __init__(self, gpu: _Optional[_Union[Gpu, _Mapping]] = ...) -> None: ...

class CreateGpuResponse(_message.Message):
    __slots__ = ("gpu", "created")
    GPU_FIELD_NUMBER: _ClassVar[int]
    CREATED_FIELD_NUMBER: _ClassVar[int]
    gpu: Gpu
    created: bool
    def __init__(self, gpu: _Optional[_Union[Gpu, _Mapping]] = ..., created: _Optional[bool] = ...) -> None: ...

class UpdateGpuRequest(_message.Message):
    __slots__ = ("gpu",)
    GPU_FIELD_NUMBER: _ClassVar[int]
    gpu: Gpu
    def __init__(self, gpu: _Optional[_Union[Gpu, _Mapping]] = ...) -> None: ...

class UpdateGpuResponse(_message.Message):
    __slots__ = ("gpu",)
    GPU_FIELD_NUMBER: _ClassVar[int]
    gpu: Gpu
    def __init__(self, gpu: _Optional[_Union[Gpu, _Mapping]] = ...) -> None: ...

class UpdateGpuStatusRequest(_message.Message):
    __slots__ = ("name", "status", "resource_version")
    NAME_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_VERSION_FIELD_NUMBER: _ClassVar[int]
    name: str
    status: GpuStatus
    resource_version: int
    def __init__(self, name: _Optional[str] = ..., status: _Optional[_Union[GpuStatus, _Mapping]] = ..., resource_version: _Optional[int] = ...) -> None: ...

class UpdateGpuStatusResponse(_message.Message):
    __slots__ = ("gpu",)
    GPU_FIELD_NUMBER: _ClassVar[int]
    gpu: Gpu
    def __init__(self, gpu: _Optional[_Union[Gpu, _Mapping]] = ...) -> None: ...

class DeleteGpuRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...
