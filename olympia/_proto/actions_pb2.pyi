from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ActionType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    UNKNOWN: _ClassVar[ActionType]
    CATALOG_SNOW_NAMESPACES: _ClassVar[ActionType]
    NAMESPACE_EXISTS: _ClassVar[ActionType]
    NAMESPACE_DESCRIBE: _ClassVar[ActionType]
    NAMESPACE_CREATE: _ClassVar[ActionType]
    NAMESPACE_ALTER: _ClassVar[ActionType]
    NAMESPACE_ALTER_SET_PROPERTIES: _ClassVar[ActionType]
    NAMESPACE_ALTER_UNSET_PROPERTIES: _ClassVar[ActionType]
    NAMESPACE_DROP: _ClassVar[ActionType]
    NAMESPACE_SHOW_TABLES: _ClassVar[ActionType]
    NAMESPACE_SHOW_VIEWS: _ClassVar[ActionType]
    TABLE_EXISTS: _ClassVar[ActionType]
    TABLE_DESCRIBE: _ClassVar[ActionType]
    TABLE_CREATE: _ClassVar[ActionType]
    TABLE_ALTER: _ClassVar[ActionType]
    TABLE_ALTER_ADD_COLUMNS: _ClassVar[ActionType]
    TABLE_ALTER_REMOVE_COLUMNS: _ClassVar[ActionType]
    TABLE_INSERT: _ClassVar[ActionType]
    TABLE_UPDATE: _ClassVar[ActionType]
    TABLE_DELETE: _ClassVar[ActionType]
    TABLE_DROP: _ClassVar[ActionType]
    VIEW_EXISTS: _ClassVar[ActionType]
    VIEW_DESCRIBE: _ClassVar[ActionType]
    VIEW_CREATE: _ClassVar[ActionType]
    VIEW_REPLACE: _ClassVar[ActionType]
    VIEW_DROP: _ClassVar[ActionType]
    CATALOG_CREATE: _ClassVar[ActionType]
    CATALOG_ROLLBACK: _ClassVar[ActionType]
    CATALOG_EXPORT: _ClassVar[ActionType]
    CATALOG_ALTER: _ClassVar[ActionType]
    TABLE_ALTER_SET_PROPERTIES: _ClassVar[ActionType]
    TABLE_ALTER_UNSET_PROPERTIES: _ClassVar[ActionType]
    TABLE_ALTER_RENAME_COLUMN: _ClassVar[ActionType]
    TABLE_ALTER_UPDATE_COLUMN: _ClassVar[ActionType]
    TABLE_ALTER_REORDER_COLUMNS: _ClassVar[ActionType]
    NAMESPACE_RENAME: _ClassVar[ActionType]
    TABLE_RENAME: _ClassVar[ActionType]
    VIEW_RENAME: _ClassVar[ActionType]
    TRANSACTION_INFO: _ClassVar[ActionType]

class ObjectType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    CATALOG: _ClassVar[ObjectType]
    NAMESPACE: _ClassVar[ObjectType]
    TABLE: _ClassVar[ObjectType]
    VIEW: _ClassVar[ObjectType]
    DISTRIBUTED_TRANSACTION: _ClassVar[ObjectType]
UNKNOWN: ActionType
CATALOG_SNOW_NAMESPACES: ActionType
NAMESPACE_EXISTS: ActionType
NAMESPACE_DESCRIBE: ActionType
NAMESPACE_CREATE: ActionType
NAMESPACE_ALTER: ActionType
NAMESPACE_ALTER_SET_PROPERTIES: ActionType
NAMESPACE_ALTER_UNSET_PROPERTIES: ActionType
NAMESPACE_DROP: ActionType
NAMESPACE_SHOW_TABLES: ActionType
NAMESPACE_SHOW_VIEWS: ActionType
TABLE_EXISTS: ActionType
TABLE_DESCRIBE: ActionType
TABLE_CREATE: ActionType
TABLE_ALTER: ActionType
TABLE_ALTER_ADD_COLUMNS: ActionType
TABLE_ALTER_REMOVE_COLUMNS: ActionType
TABLE_INSERT: ActionType
TABLE_UPDATE: ActionType
TABLE_DELETE: ActionType
TABLE_DROP: ActionType
VIEW_EXISTS: ActionType
VIEW_DESCRIBE: ActionType
VIEW_CREATE: ActionType
VIEW_REPLACE: ActionType
VIEW_DROP: ActionType
CATALOG_CREATE: ActionType
CATALOG_ROLLBACK: ActionType
CATALOG_EXPORT: ActionType
CATALOG_ALTER: ActionType
TABLE_ALTER_SET_PROPERTIES: ActionType
TABLE_ALTER_UNSET_PROPERTIES: ActionType
TABLE_ALTER_RENAME_COLUMN: ActionType
TABLE_ALTER_UPDATE_COLUMN: ActionType
TABLE_ALTER_REORDER_COLUMNS: ActionType
NAMESPACE_RENAME: ActionType
TABLE_RENAME: ActionType
VIEW_RENAME: ActionType
TRANSACTION_INFO: ActionType
CATALOG: ObjectType
NAMESPACE: ObjectType
TABLE: ObjectType
VIEW: ObjectType
DISTRIBUTED_TRANSACTION: ObjectType

class ObjectRef(_message.Message):
    __slots__ = ("type", "namespace", "name")
    TYPE_FIELD_NUMBER: _ClassVar[int]
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    type: ObjectType
    namespace: str
    name: str
    def __init__(self, type: _Optional[_Union[ObjectType, str]] = ..., namespace: _Optional[str] = ..., name: _Optional[str] = ...) -> None: ...

class NamespaceSetPropertiesDef(_message.Message):
    __slots__ = ("keys",)
    KEYS_FIELD_NUMBER: _ClassVar[int]
    keys: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, keys: _Optional[_Iterable[str]] = ...) -> None: ...

class NamespaceUnsetPropertiesDef(_message.Message):
    __slots__ = ("keys",)
    KEYS_FIELD_NUMBER: _ClassVar[int]
    keys: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, keys: _Optional[_Iterable[str]] = ...) -> None: ...

class TableAlterAddColumnsDef(_message.Message):
    __slots__ = ("column_names",)
    COLUMN_NAMES_FIELD_NUMBER: _ClassVar[int]
    column_names: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, column_names: _Optional[_Iterable[str]] = ...) -> None: ...

class TableAlterRemoveColumnsDef(_message.Message):
    __slots__ = ("column_names",)
    COLUMN_NAMES_FIELD_NUMBER: _ClassVar[int]
    column_names: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, column_names: _Optional[_Iterable[str]] = ...) -> None: ...

class TableUpdateDef(_message.Message):
    __slots__ = ("added_data_file_locations", "removed_data_file_locations")
    ADDED_DATA_FILE_LOCATIONS_FIELD_NUMBER: _ClassVar[int]
    REMOVED_DATA_FILE_LOCATIONS_FIELD_NUMBER: _ClassVar[int]
    added_data_file_locations: _containers.RepeatedScalarFieldContainer[str]
    removed_data_file_locations: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, added_data_file_locations: _Optional[_Iterable[str]] = ..., removed_data_file_locations: _Optional[_Iterable[str]] = ...) -> None: ...

class TableSelectDef(_message.Message):
    __slots__ = ("column_names", "substrait_expression")
    COLUMN_NAMES_FIELD_NUMBER: _ClassVar[int]
    SUBSTRAIT_EXPRESSION_FIELD_NUMBER: _ClassVar[int]
    column_names: _containers.RepeatedScalarFieldContainer[str]
    substrait_expression: bytes
    def __init__(self, column_names: _Optional[_Iterable[str]] = ..., substrait_expression: _Optional[bytes] = ...) -> None: ...

class PropertyKeysDef(_message.Message):
    __slots__ = ("keys",)
    KEYS_FIELD_NUMBER: _ClassVar[int]
    keys: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, keys: _Optional[_Iterable[str]] = ...) -> None: ...

class RenameDef(_message.Message):
    __slots__ = ("from_name", "to_name")
    FROM_NAME_FIELD_NUMBER: _ClassVar[int]
    TO_NAME_FIELD_NUMBER: _ClassVar[int]
    from_name: str
    to_name: str
    def __init__(self, from_name: _Optional[str] = ..., to_name: _Optional[str] = ...) -> None: ...

class RollbackDef(_message.Message):
    __slots__ = ("from_version", "to_version")
    FROM_VERSION_FIELD_NUMBER: _ClassVar[int]
    TO_VERSION_FIELD_NUMBER: _ClassVar[int]
    from_version: int
    to_version: int
    def __init__(self, from_version: _Optional[int] = ..., to_version: _Optional[int] = ...) -> None: ...

class ExportDef(_message.Message):
    __slots__ = ("name", "mode", "target", "version")
    NAME_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    TARGET_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    name: str
    mode: str
    target: str
    version: int
    def __init__(self, name: _Optional[str] = ..., mode: _Optional[str] = ..., target: _Optional[str] = ..., version: _Optional[int] = ...) -> None: ...

class ColumnNamesDef(_message.Message):
    __slots__ = ("column_names",)
    COLUMN_NAMES_FIELD_NUMBER: _ClassVar[int]
    column_names: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, column_names: _Optional[_Iterable[str]] = ...) -> None: ...

class ActionDef(_message.Message):
    __slots__ = ("type", "object", "def_path", "property_keys", "columns", "rename", "rollback", "export", "info")
    class InfoEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    TYPE_FIELD_NUMBER: _ClassVar[int]
    OBJECT_FIELD_NUMBER: _ClassVar[int]
    DEF_PATH_FIELD_NUMBER: _ClassVar[int]
    PROPERTY_KEYS_FIELD_NUMBER: _ClassVar[int]
    COLUMNS_FIELD_NUMBER: _ClassVar[int]
    RENAME_FIELD_NUMBER: _ClassVar[int]
    ROLLBACK_FIELD_NUMBER: _ClassVar[int]
    EXPORT_FIELD_NUMBER: _ClassVar[int]
    INFO_FIELD_NUMBER: _ClassVar[int]
    type: ActionType
    object: ObjectRef
    def_path: str
    property_keys: PropertyKeysDef
    columns: ColumnNamesDef
    rename: RenameDef
    rollback: RollbackDef
    export: ExportDef
    info: _containers.ScalarMap[str, str]
    def __init__(self, type: _Optional[_Union[ActionType, str]] = ..., object: _Optional[_Union[ObjectRef, _Mapping]] = ..., def_path: _Optional[str] = ..., property_keys: _Optional[_Union[PropertyKeysDef, _Mapping]] = ..., columns: _Optional[_Union[ColumnNamesDef, _Mapping]] = ..., rename: _Optional[_Union[RenameDef, _Mapping]] = ..., rollback: _Optional[_Union[RollbackDef, _Mapping]] = ..., export: _Optional[_Union[ExportDef, _Mapping]] = ..., info: _Optional[_Mapping[str, str]] = ...) -> None: ...
