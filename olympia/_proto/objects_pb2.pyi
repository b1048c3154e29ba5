from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class IsolationLevel(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    SNAPSHOT: _ClassVar[IsolationLevel]
    SERIALIZABLE: _ClassVar[IsolationLevel]

class ExportMode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    FULL: _ClassVar[ExportMode]
    MINIMAL: _ClassVar[ExportMode]
    PARTIAL: _ClassVar[ExportMode]

class DataType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    BOOLEAN: _ClassVar[DataType]
    INT2: _ClassVar[DataType]
    INT4: _ClassVar[DataType]
    INT8: _ClassVar[DataType]
    DECIMAL: _ClassVar[DataType]
    FLOAT4: _ClassVar[DataType]
    FLOAT8: _ClassVar[DataType]
    CHAR: _ClassVar[DataType]
    VARCHAR: _ClassVar[DataType]
    DATE: _ClassVar[DataType]
    TIME3: _ClassVar[DataType]
    TIME6: _ClassVar[DataType]
    TIME9: _ClassVar[DataType]
    TIMETZ3: _ClassVar[DataType]
    TIMETZ6: _ClassVar[DataType]
    TIMETZ9: _ClassVar[DataType]
    TIMESTAMP3: _ClassVar[DataType]
    TIMESTAMP6: _ClassVar[DataType]
    TIMESTAMP9: _ClassVar[DataType]
    TIMESTAMPTZ3: _ClassVar[DataType]
    TIMESTAMPTZ6: _ClassVar[DataType]
    TIMESTAMPTZ9: _ClassVar[DataType]
    FIXED: _ClassVar[DataType]
    BINARY: _ClassVar[DataType]
    STRUCT: _ClassVar[DataType]
    MAP: _ClassVar[DataType]
    LIST: _ClassVar[DataType]
    INT1: _ClassVar[DataType]
    UUID: _ClassVar[DataType]
    JSON: _ClassVar[DataType]

class DistributedTransactionState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    OPEN: _ClassVar[DistributedTransactionState]
    COMMITTING: _ClassVar[DistributedTransactionState]
    ABORTING: _ClassVar[DistributedTransactionState]
SNAPSHOT: IsolationLevel
SERIALIZABLE: IsolationLevel
FULL: ExportMode
MINIMAL: ExportMode
PARTIAL: ExportMode
BOOLEAN: DataType
INT2: DataType
INT4: DataType
INT8: DataType
DECIMAL: DataType
FLOAT4: DataType
FLOAT8: DataType
CHAR: DataType
VARCHAR: DataType
DATE: DataType
TIME3: DataType
TIME6: DataType
TIME9: DataType
TIMETZ3: DataType
TIMETZ6: DataType
TIMETZ9: DataType
TIMESTAMP3: DataType
TIMESTAMP6: DataType
TIMESTAMP9: DataType
TIMESTAMPTZ3: DataType
TIMESTAMPTZ6: DataType
TIMESTAMPTZ9: DataType
FIXED: DataType
BINARY: DataType
STRUCT: DataType
MAP: DataType
LIST: DataType
INT1: DataType
UUID: DataType
JSON: DataType
OPEN: DistributedTransactionState
COMMITTING: DistributedTransactionState
ABORTING: DistributedTransactionState

class SnapshotExportDef(_message.Message):
    __slots__ = ("name", "mode", "target", "version", "root_path", "depth", "defs_copied", "created_at_millis")
    NAME_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    TARGET_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    ROOT_PATH_FIELD_NUMBER: _ClassVar[int]
    DEPTH_FIELD_NUMBER: _ClassVar[int]
    DEFS_COPIED_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_MILLIS_FIELD_NUMBER: _ClassVar[int]
    name: str
    mode: ExportMode
    target: str
    version: int
    root_path: str
    depth: int
    defs_copied: bool
    created_at_millis: int
    def __init__(self, name: _Optional[str] = ..., mode: _Optional[_Union[ExportMode, str]] = ..., target: _Optional[str] = ..., version: _Optional[int] = ..., root_path: _Optional[str] = ..., depth: _Optional[int] = ..., defs_copied: _Optional[bool] = ..., created_at_millis: _Optional[int] = ...) -> None: ...

class CatalogDef(_message.Message):
    __slots__ = ("id", "major_version", "order", "namespace_name_max_size_bytes", "table_name_max_size_bytes", "view_name_max_size_bytes", "node_file_max_size_bytes", "properties", "txn_ttl_millis", "txn_isolation_level", "exported_snapshots", "exports")
    class PropertiesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    class ExportedSnapshotsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    class ExportsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: SnapshotExportDef
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[SnapshotExportDef, _Mapping]] = ...) -> None: ...
    ID_FIELD_NUMBER: _ClassVar[int]
    MAJOR_VERSION_FIELD_NUMBER: _ClassVar[int]
    ORDER_FIELD_NUMBER: _ClassVar[int]
    NAMESPACE_NAME_MAX_SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    TABLE_NAME_MAX_SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    VIEW_NAME_MAX_SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    NODE_FILE_MAX_SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    PROPERTIES_FIELD_NUMBER: _ClassVar[int]
    TXN_TTL_MILLIS_FIELD_NUMBER: _ClassVar[int]
    TXN_ISOLATION_LEVEL_FIELD_NUMBER: _ClassVar[int]
    EXPORTED_SNAPSHOTS_FIELD_NUMBER: _ClassVar[int]
    EXPORTS_FIELD_NUMBER: _ClassVar[int]
    id: str
    major_version: int
    order: int
    namespace_name_max_size_bytes: int
    table_name_max_size_bytes: int
    view_name_max_size_bytes: int
    node_file_max_size_bytes: int
    properties: _containers.ScalarMap[str, str]
    txn_ttl_millis: int
    txn_isolation_level: IsolationLevel
    exported_snapshots: _containers.ScalarMap[str, str]
    exports: _containers.MessageMap[str, SnapshotExportDef]
    def __init__(self, id: _Optional[str] = ..., major_version: _Optional[int] = ..., order: _Optional[int] = ..., namespace_name_max_size_bytes: _Optional[int] = ..., table_name_max_size_bytes: _Optional[int] = ..., view_name_max_size_bytes: _Optional[int] = ..., node_file_max_size_bytes: _Optional[int] = ..., properties: _Optional[_Mapping[str, str]] = ..., txn_ttl_millis: _Optional[int] = ..., txn_isolation_level: _Optional[_Union[IsolationLevel, str]] = ..., exported_snapshots: _Optional[_Mapping[str, str]] = ..., exports: _Optional[_Mapping[str, SnapshotExportDef]] = ...) -> None: ...

class NamespaceDef(_message.Message):
    __slots__ = ("id", "properties", "comment", "protected")
    class PropertiesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    ID_FIELD_NUMBER: _ClassVar[int]
    PROPERTIES_FIELD_NUMBER: _ClassVar[int]
    COMMENT_FIELD_NUMBER: _ClassVar[int]
    PROTECTED_FIELD_NUMBER: _ClassVar[int]
    id: str
    properties: _containers.ScalarMap[str, str]
    comment: str
    protected: bool
    def __init__(self, id: _Optional[str] = ..., properties: _Optional[_Mapping[str, str]] = ..., comment: _Optional[str] = ..., protected: _Optional[bool] = ...) -> None: ...

class Column(_message.Message):
    __slots__ = ("id", "name", "type", "nullable", "properties", "struct_fields", "map_key", "map_value", "list_element", "comment", "precision", "scale", "length")
    class PropertiesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    NULLABLE_FIELD_NUMBER: _ClassVar[int]
    PROPERTIES_FIELD_NUMBER: _ClassVar[int]
    STRUCT_FIELDS_FIELD_NUMBER: _ClassVar[int]
    MAP_KEY_FIELD_NUMBER: _ClassVar[int]
    MAP_VALUE_FIELD_NUMBER: _ClassVar[int]
    LIST_ELEMENT_FIELD_NUMBER: _ClassVar[int]
    COMMENT_FIELD_NUMBER: _ClassVar[int]
    PRECISION_FIELD_NUMBER: _ClassVar[int]
    SCALE_FIELD_NUMBER: _ClassVar[int]
    LENGTH_FIELD_NUMBER: _ClassVar[int]
    id: int
    name: str
    type: DataType
    nullable: bool
    properties: _containers.ScalarMap[str, str]
    struct_fields: _containers.RepeatedCompositeFieldContainer[Column]
    map_key: Column
    map_value: Column
    list_element: Column
    comment: str
    precision: int
    scale: int
    length: int
    def __init__(self, id: _Optional[int] = ..., name: _Optional[str] = ..., type: _Optional[_Union[DataType, str]] = ..., nullable: _Optional[bool] = ..., properties: _Optional[_Mapping[str, str]] = ..., struct_fields: _Optional[_Iterable[_Union[Column, _Mapping]]] = ..., map_key: _Optional[_Union[Column, _Mapping]] = ..., map_value: _Optional[_Union[Column, _Mapping]] = ..., list_element: _Optional[_Union[Column, _Mapping]] = ..., comment: _Optional[str] = ..., precision: _Optional[int] = ..., scale: _Optional[int] = ..., length: _Optional[int] = ...) -> None: ...

class Schema(_message.Message):
    __slots__ = ("columns",)
    COLUMNS_FIELD_NUMBER: _ClassVar[int]
    columns: _containers.RepeatedCompositeFieldContainer[Column]
    def __init__(self, columns: _Optional[_Iterable[_Union[Column, _Mapping]]] = ...) -> None: ...

class NamespaceObjectFullName(_message.Message):
    __slots__ = ("namespace_name", "name")
    NAMESPACE_NAME_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    namespace_name: str
    name: str
    def __init__(self, namespace_name: _Optional[str] = ..., name: _Optional[str] = ...) -> None: ...

class TableDef(_message.Message):
    __slots__ = ("id", "table_type", "table_format", "format_properties", "properties", "schema", "comment", "location", "protected")
    class FormatPropertiesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    class PropertiesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    ID_FIELD_NUMBER: _ClassVar[int]
    TABLE_TYPE_FIELD_NUMBER: _ClassVar[int]
    TABLE_FORMAT_FIELD_NUMBER: _ClassVar[int]
    FORMAT_PROPERTIES_FIELD_NUMBER: _ClassVar[int]
    PROPERTIES_FIELD_NUMBER: _ClassVar[int]
    SCHEMA_FIELD_NUMBER: _ClassVar[int]
    COMMENT_FIELD_NUMBER: _ClassVar[int]
    LOCATION_FIELD_NUMBER: _ClassVar[int]
    PROTECTED_FIELD_NUMBER: _ClassVar[int]
    id: str
    table_type: str
    table_format: str
    format_properties: _containers.ScalarMap[str, str]
    properties: _containers.ScalarMap[str, str]
    schema: Schema
    comment: str
    location: str
    protected: bool
    def __init__(self, id: _Optional[str] = ..., table_type: _Optional[str] = ..., table_format: _Optional[str] = ..., format_properties: _Optional[_Mapping[str, str]] = ..., properties: _Optional[_Mapping[str, str]] = ..., schema: _Optional[_Union[Schema, _Mapping]] = ..., comment: _Optional[str] = ..., location: _Optional[str] = ..., protected: _Optional[bool] = ...) -> None: ...

class ViewDef(_message.Message):
    __slots__ = ("id", "schema_binding", "schema", "substrait_read_rel", "default_namespace_name", "referenced_object_full_names", "properties", "sql", "dialect", "comment", "protected")
    class PropertiesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    ID_FIELD_NUMBER: _ClassVar[int]
    SCHEMA_BINDING_FIELD_NUMBER: _ClassVar[int]
    SCHEMA_FIELD_NUMBER: _ClassVar[int]
    SUBSTRAIT_READ_REL_FIELD_NUMBER: _ClassVar[int]
    DEFAULT_NAMESPACE_NAME_FIELD_NUMBER: _ClassVar[int]
    REFERENCED_OBJECT_FULL_NAMES_FIELD_NUMBER: _ClassVar[int]
    PROPERTIES_FIELD_NUMBER: _ClassVar[int]
    SQL_FIELD_NUMBER: _ClassVar[int]
    DIALECT_FIELD_NUMBER: _ClassVar[int]
    COMMENT_FIELD_NUMBER: _ClassVar[int]
    PROTECTED_FIELD_NUMBER: _ClassVar[int]
    id: str
    schema_binding: bool
    schema: Schema
    substrait_read_rel: bytes
    default_namespace_name: str
    referenced_object_full_names: _containers.RepeatedCompositeFieldContainer[NamespaceObjectFullName]
    properties: _containers.ScalarMap[str, str]
    sql: str
    dialect: str
    comment: str
    protected: bool
    def __init__(self, id: _Optional[str] = ..., schema_binding: _Optional[bool] = ..., schema: _Optional[_Union[Schema, _Mapping]] = ..., substrait_read_rel: _Optional[bytes] = ..., default_namespace_name: _Optional[str] = ..., referenced_object_full_names: _Optional[_Iterable[_Union[NamespaceObjectFullName, _Mapping]]] = ..., properties: _Optional[_Mapping[str, str]] = ..., sql: _Optional[str] = ..., dialect: _Optional[str] = ..., comment: _Optional[str] = ..., protected: _Optional[bool] = ...) -> None: ...

class DistributedTransactionDef(_message.Message):
    __slots__ = ("id", "isolation_level", "beginning_root_node_file_path", "running_root_node_file_path", "began_at_millis", "expire_at_millis", "beginning_version", "instance", "state")
    ID_FIELD_NUMBER: _ClassVar[int]
    ISOLATION_LEVEL_FIELD_NUMBER: _ClassVar[int]
    BEGINNING_ROOT_NODE_FILE_PATH_FIELD_NUMBER: _ClassVar[int]
    RUNNING_ROOT_NODE_FILE_PATH_FIELD_NUMBER: _ClassVar[int]
    BEGAN_AT_MILLIS_FIELD_NUMBER: _ClassVar[int]
    EXPIRE_AT_MILLIS_FIELD_NUMBER: _ClassVar[int]
    BEGINNING_VERSION_FIELD_NUMBER: _ClassVar[int]
    INSTANCE_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    id: str
    isolation_level: IsolationLevel
    beginning_root_node_file_path: str
    running_root_node_file_path: str
    began_at_millis: int
    expire_at_millis: int
    beginning_version: int
    instance: str
    state: DistributedTransactionState
    def __init__(self, id: _Optional[str] = ..., isolation_level: _Optional[_Union[IsolationLevel, str]] = ..., beginning_root_node_file_path: _Optional[str] = ..., running_root_node_file_path: _Optional[str] = ..., began_at_millis: _Optional[int] = ..., expire_at_millis: _Optional[int] = ..., beginning_version: _Optional[int] = ..., instance: _Optional[str] = ..., state: _Optional[_Union[DistributedTransactionState, str]] = ...) -> None: ...
